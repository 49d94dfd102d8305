// BatchSampler and collate: every example once per epoch, drop_last, reproducible epochs on
// their own, random access equal to sequential iteration, shards whose union is the one-process
// batch for 1-4 ranks (and gradients that add up to it), collate for every dtype, errors.
#include <algorithm>
#include <map>
#include <numeric>
#include <set>
#include <type_traits>

#include "expect_error.hpp"
#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/models/data.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"

using namespace xgrad;
using test::expect_error;
using test::same_bits;

namespace {

using Indices = std::vector<std::size_t>;

Indices iota(std::size_t n) {
  Indices v(n);
  std::iota(v.begin(), v.end(), std::size_t(0));
  return v;
}

template <class T, class = void>
struct seed_takes : std::false_type {};
template <class T>
struct seed_takes<T, std::void_t<decltype(std::declval<BatchSamplerOptions&>().seed(std::declval<T>()))>>
    : std::true_type {};

}  // namespace

// Sizes and seeds only from integers (a double or a bool does not compile), as everywhere.
static_assert(!std::is_constructible_v<BatchSamplerOptions, double>);
static_assert(!std::is_constructible_v<BatchSamplerOptions, bool>);
static_assert(std::is_constructible_v<BatchSamplerOptions, int>);
static_assert(!seed_takes<double>::value && !seed_takes<bool>::value && seed_takes<std::uint64_t>::value);
static_assert(!std::is_constructible_v<BatchSampler, double, const BatchSamplerOptions&>);

BOOST_AUTO_TEST_SUITE(data)

BOOST_AUTO_TEST_CASE(every_example_exactly_once_per_epoch) {
  for (std::size_t n : {1, 7, 10, 12}) {
    for (std::size_t B : {1, 3, 4, 12}) {
      BOOST_TEST_CONTEXT("N " << n << " B " << B) {
        BatchSampler s(n, BatchSamplerOptions(B).seed(5));
        BOOST_TEST(s.batches_per_epoch() == (n + B - 1) / B);
        for (std::uint64_t e = 0; e < 3; ++e) {
          Indices seen;
          for (std::uint64_t b = 0; b < s.batches_per_epoch(); ++b) {
            const SampledBatch sb = s.batch(e, b);
            const std::size_t expect = b + 1 < s.batches_per_epoch() || n % B == 0 ? B : n % B;
            BOOST_TEST(sb.indices.size() == std::min(expect, n));
            BOOST_TEST(sb.global_size == sb.indices.size());
            BOOST_TEST((sb.epoch == e && sb.index == b && sb.step == e * s.batches_per_epoch() + b && sb.offset == 0u));
            seen.insert(seen.end(), sb.indices.begin(), sb.indices.end());
          }
          BOOST_TEST(seen == s.epoch_order(e));  // the batches are the epoch's order, cut
          std::sort(seen.begin(), seen.end());
          BOOST_TEST(seen == iota(n));  // a permutation: each example exactly once
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(drop_last_drops_the_short_batch) {
  BatchSampler s(10, BatchSamplerOptions(3).drop_last(true).seed(2));
  BOOST_TEST(s.batches_per_epoch() == 3u);
  for (std::uint64_t e = 0; e < 4; ++e) {
    std::set<std::size_t> seen;
    for (std::uint64_t b = 0; b < 3; ++b) {
      const SampledBatch sb = s.batch(e, b);
      BOOST_TEST(sb.indices.size() == 3u);
      seen.insert(sb.indices.begin(), sb.indices.end());
    }
    BOOST_TEST(seen.size() == 9u);  // distinct; the one left out is the epoch order's last
    BOOST_TEST(!seen.count(s.epoch_order(e).back()));
  }
  BatchSampler exact(9, BatchSamplerOptions(3).drop_last(true));
  BOOST_TEST(exact.batches_per_epoch() == 3u);
}

BOOST_AUTO_TEST_CASE(shuffle_false_is_in_order_every_epoch) {
  BatchSampler s(7, BatchSamplerOptions(3).shuffle(false));
  for (std::uint64_t e = 0; e < 2; ++e) {
    BOOST_TEST(s.batch(e, 0).indices == (Indices{0, 1, 2}));
    BOOST_TEST(s.batch(e, 2).indices == (Indices{6}));
  }
}

BOOST_AUTO_TEST_CASE(epochs_are_seeded_reproducible_and_independent) {
  const std::size_t n = 50;
  BatchSampler a(n, BatchSamplerOptions(8).seed(42)), b(n, BatchSamplerOptions(8).seed(42)),
      other(n, BatchSamplerOptions(8).seed(43));
  // Epoch 6 computed directly equals epoch 6 reached by iterating through epochs 0-5.
  for (std::uint64_t step = 0; step < 6 * a.batches_per_epoch(); ++step) a.next();
  BOOST_TEST(a.position() == 6 * a.batches_per_epoch());
  for (std::uint64_t i = 0; i < b.batches_per_epoch(); ++i)
    BOOST_TEST(a.next().indices == b.batch(6, i).indices);
  // Different epochs and different seeds give different orders.
  BOOST_TEST(a.epoch_order(0) != a.epoch_order(1));
  BOOST_TEST(a.epoch_order(0) != other.epoch_order(0));
  BOOST_TEST(a.epoch_order(3) == b.epoch_order(3));
  BOOST_TEST(BatchSampler::epoch_seed(42, 3) != BatchSampler::epoch_seed(42, 4));
  BOOST_TEST(BatchSampler::epoch_seed(42, 3) != BatchSampler::epoch_seed(43, 3));
  // Pinned: epoch 0 of seed 1 over 8 examples (a change here breaks --resume of old runs).
  BatchSampler pinned(8, BatchSamplerOptions(8).seed(1));
  const Indices e0 = pinned.epoch_order(0);
  BOOST_TEST_MESSAGE("epoch 0, seed 1, 8 examples: " << [&] {
    std::string s;
    for (auto i : e0) s += std::to_string(i) + " ";
    return s;
  }());
  BOOST_TEST(e0 == (Indices{5, 0, 1, 3, 7, 2, 4, 6}));
  // epoch_seed(0, 0) = splitmix64(splitmix64(0) ^ 0), splitmix64(0) = 0xe220a8397b1dcdaf being
  // SplitMix64's published first output for seed 0 (value computed independently in Python).
  BOOST_TEST(BatchSampler::epoch_seed(0, 0) == 0xa706dd2f4d197e6full);
}

// The permutation is uniform: each of 4 examples lands first in about a quarter of 4000 epochs
// (binomial sd ~27; the bounds are 7 sd away).
BOOST_AUTO_TEST_CASE(shuffle_is_uniform_enough) {
  BatchSampler s(4, BatchSamplerOptions(4).seed(9));
  std::map<std::size_t, int> first, last;
  for (std::uint64_t e = 0; e < 4000; ++e) {
    const Indices o = s.epoch_order(e);
    ++first[o.front()];
    ++last[o.back()];
  }
  for (std::size_t i = 0; i < 4; ++i) {
    BOOST_TEST((first[i] > 810 && first[i] < 1190), "example " << i << " first " << first[i] << " times");
    BOOST_TEST((last[i] > 810 && last[i] < 1190), "example " << i << " last " << last[i] << " times");
  }
}

BOOST_AUTO_TEST_CASE(random_access_equals_iteration_and_seek_resumes) {
  BatchSampler seq(23, BatchSamplerOptions(5).seed(3)), ra(23, BatchSamplerOptions(5).seed(3));
  std::vector<SampledBatch> run;
  for (int i = 0; i < 17; ++i) run.push_back(seq.next());  // 3+ epochs of 5 batches
  for (std::uint64_t step = 17; step-- > 0;) {  // backwards: the cache must not matter
    const SampledBatch b = ra.batch_at(step);
    BOOST_TEST((b.indices == run[step].indices && b.step == step && b.epoch == step / 5 && b.index == step % 5));
  }
  BatchSampler resumed(23, BatchSamplerOptions(5).seed(3));
  resumed.seek(12);
  BOOST_TEST(resumed.next().indices == run[12].indices);
  resumed.seek(2, 3);
  BOOST_TEST(resumed.position() == 13u);
  BOOST_TEST(resumed.next().indices == run[13].indices);
  BOOST_TEST(resumed.global_batch(3, 1) == run[16].indices);
}

// For 1-4 ranks: each rank's shard is a contiguous slice of the global batch, shards are
// disjoint, their union in rank order is the one-process batch, sizes differ by at most one.
BOOST_AUTO_TEST_CASE(shards_partition_the_one_process_batch) {
  for (bool drop_last : {false, true}) {
    const std::size_t n = 47, B = 8;  // last batch 7 examples (>= 4 ranks)
    BatchSampler single(n, BatchSamplerOptions(B).seed(11).drop_last(drop_last));
    for (std::size_t W = 1; W <= 4; ++W) {
      std::vector<BatchSampler> ranks;
      for (std::size_t r = 0; r < W; ++r)
        ranks.emplace_back(n, BatchSamplerOptions(B).seed(11).drop_last(drop_last).shard(r, W));
      BOOST_TEST(ranks[0].batches_per_epoch() == single.batches_per_epoch());
      for (std::uint64_t step = 0; step < 2 * single.batches_per_epoch() + 1; ++step) {
        BOOST_TEST_CONTEXT("drop_last " << drop_last << " world " << W << " step " << step) {
          const SampledBatch one = single.batch_at(step);
          Indices joined;
          std::size_t smallest = B, largest = 0;
          for (std::size_t r = 0; r < W; ++r) {
            const SampledBatch b = ranks[r].batch_at(step);
            BOOST_TEST(b.global_size == one.indices.size());
            BOOST_TEST(b.offset == joined.size());
            BOOST_TEST(!b.indices.empty());
            smallest = std::min(smallest, b.indices.size());
            largest = std::max(largest, b.indices.size());
            joined.insert(joined.end(), b.indices.begin(), b.indices.end());
          }
          BOOST_TEST(joined == one.indices);
          BOOST_TEST(largest - smallest <= 1u);
          BOOST_TEST(std::set<std::size_t>(joined.begin(), joined.end()).size() == joined.size());
        }
      }
    }
  }
  // W = 3 of a batch of 8: 3, 3, 2 examples.
  std::vector<std::size_t> sizes;
  for (std::size_t r = 0; r < 3; ++r)
    sizes.push_back(BatchSampler(16, BatchSamplerOptions(8).shard(r, 3)).batch_at(0).indices.size());
  BOOST_TEST(sizes == (std::vector<std::size_t>{3, 3, 2}));
}

// Data parallelism with uneven shards: each rank's loss sum(per-example) / global_size, the
// gradients summed over ranks, equal the one-process gradient of the mean (float64 sums in
// another order: equal to 1e-14).
BOOST_AUTO_TEST_CASE(rank_gradients_add_up_to_the_one_process_gradient) {
  const std::size_t n = 20, B = 7, W = 3;  // shards of 3, 2, 2; last batch 6 = 2, 2, 2
  Rng rng(4);
  Tensor data = randn({n, 3}, rng, DType::Float64);
  Tensor w = randn({3}, rng, DType::Float64).set_requires_grad();
  auto loss_sum = [&](const Indices& idx) { return sum(mul(mul(collate(data, idx), w), collate(data, idx))); };
  BatchSampler single(n, BatchSamplerOptions(B).seed(8));
  for (std::uint64_t step = 0; step < 4; ++step) {
    const SampledBatch one = single.batch_at(step);
    const Tensor g_one = grad({mul_scalar(loss_sum(one.indices), 1.0 / double(one.global_size))}, {w})[0];
    std::vector<double> g_sum(3, 0.0);
    for (std::size_t r = 0; r < W; ++r) {
      const SampledBatch b = BatchSampler(n, BatchSamplerOptions(B).seed(8).shard(r, W)).batch_at(step);
      const auto g = grad({mul_scalar(loss_sum(b.indices), 1.0 / double(b.global_size))}, {w})[0].to_vector();
      for (std::size_t j = 0; j < 3; ++j) g_sum[j] += g[j];
    }
    BOOST_TEST(test::allclose(g_one, g_sum, 1e-13, 1e-14));
  }
}

BOOST_AUTO_TEST_CASE(collate_copies_rows_of_every_dtype) {
  Tensor x = tensor(test::vals(5 * 2 * 3, 1), {5, 2, 3});
  const Indices idx{4, 0, 4, 2};
  Tensor b = collate(x, idx);
  BOOST_TEST(shape_str(b.shape()) == "(4, 2, 3)");
  BOOST_TEST(b.dtype() == DType::Float32);
  BOOST_TEST(!b.requires_grad());
  const auto xv = x.to_vector(), bv = b.to_vector();
  for (std::size_t i = 0; i < idx.size(); ++i)
    for (std::size_t j = 0; j < 6; ++j) BOOST_TEST(bv[i * 6 + j] == xv[idx[i] * 6 + j]);
  // The copy is its own storage.
  b.mutable_data<float>()[0] = 123.0f;
  BOOST_TEST(x.to_vector()[4 * 6] != 123.0);
  Tensor labels = index_tensor({7, 8, 9}, {3});
  BOOST_TEST(collate(labels, {2, 0}).to_vector() == (std::vector<double>{9, 7}));
  BOOST_TEST(collate(labels, {2, 0}).dtype() == DType::Int64);
  Tensor mask = bool_tensor({true, false, false, true}, {2, 2});
  BOOST_TEST(same_bits(collate(mask, {1}), bool_tensor({false, true}, {1, 2})));
  Tensor d = tensor({1, 2, 3}, {3}, DType::Float64);
  BOOST_TEST(same_bits(collate(d, {1, 1}), tensor({2, 2}, {2}, DType::Float64)));
  BOOST_TEST(shape_str(collate(x, {}).shape()) == "(0, 2, 3)");
}

BOOST_AUTO_TEST_CASE(errors) {
  expect_error<ValueError>([] { BatchSamplerOptions(0); }, {"BatchSampler", "'batch_size'", ">= 1", "0"});
  expect_error<ValueError>([] { BatchSamplerOptions(-2); }, {"BatchSampler", "'batch_size'", "-2"});
  expect_error<ValueError>([] { BatchSampler(0, BatchSamplerOptions(2)); }, {"BatchSampler", "'num_examples'", "0"});
  expect_error<ValueError>([] { BatchSamplerOptions(4).shard(0, 0); }, {"BatchSampler", "'world_size'", "0"});
  expect_error<ValueError>([] { BatchSamplerOptions(4).shard(2, 2); }, {"BatchSampler", "'rank' 2", "< world_size 2"});
  expect_error<ValueError>([] { BatchSamplerOptions(4).shard(-1, 2); }, {"BatchSampler", "'rank'", "-1"});
  expect_error<ValueError>([] { BatchSamplerOptions(4).seed(-1); }, {"BatchSampler", "'seed'", "-1"});
  expect_error<ValueError>([] { BatchSampler(10, BatchSamplerOptions(3).shard(0, 4)); },
                           {"BatchSampler", "world_size 4 > batch_size 3"});
  expect_error<ValueError>([] { BatchSampler(5, BatchSamplerOptions(8).drop_last(true)); },
                           {"BatchSampler", "drop_last", "batch_size 8 > num_examples 5"});
  // 10 % 4 = 2 examples in the last batch, for 3 ranks.
  expect_error<ValueError>([] { BatchSampler(10, BatchSamplerOptions(4).shard(1, 3)); },
                           {"BatchSampler", "10 % 4 = 2", "world_size 3", "drop_last"});
  BatchSampler ok(10, BatchSamplerOptions(4).shard(1, 3).drop_last(true));  // fine with drop_last
  // An epoch's order is num_examples indices: an absurd count fails when the sampler is made.
  expect_error<MemoryError>([] { BatchSampler(std::size_t(1) << 36, BatchSamplerOptions(4)); },
                            {"BatchSampler", "num_examples 68719476736", "max_tensor_bytes()"});
  expect_error<ValueError>([] { BatchSampler(std::size_t(1) << 62, BatchSamplerOptions(4)); },
                           {"BatchSampler", "num_examples 4611686018427387904", "2^40"});
  BOOST_TEST(ok.batches_per_epoch() == 2u);
  expect_error<IndexError>([&] { ok.batch(0, 2); }, {"BatchSampler::batch", "index 2", "2 batches"});
  expect_error<IndexError>([&] { ok.seek(1, 5); }, {"BatchSampler::seek", "index 5"});
  expect_error<ValueError>([&] { ok.batch(~std::uint64_t(0) / 2 + 1, 0); }, {"BatchSampler::batch", "64 bits"});
  BOOST_TEST(ok.position() == 0u);  // the failed seek changed nothing

  Tensor x = zeros({3, 2});
  expect_error<IndexError>([&] { collate(x, {0, 3}); }, {"collate", "index 3", "position 1", "3 rows", "(3, 2)"});
  expect_error<ShapeError>([] { collate(scalar(1.0), {0}); }, {"collate", "'data'", "(N, ...)"});
  expect_error<ValueError>([] { collate(Tensor(), {0}); }, {"collate", "undefined"});
}

BOOST_AUTO_TEST_SUITE_END()
