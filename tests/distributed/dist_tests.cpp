// xgrad::distributed under mpirun -np 1, 2 and 4 (tests/distributed/run.sh): collectives against
// values computed here in rank order, bad calls, DistributedDataParallel and ZeroOptimizer
// against one process training the same global batch, bit-identity across bucketings, overlap
// and ZeRO, gradient accumulation, unused parameters, mismatched models, ZeRO memory and
// checkpoints. Every rank runs every test case in the same order (they call collectives).
#define BOOST_TEST_MODULE xgrad_distributed
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <limits>
#include <string>
#include <unistd.h>
#include <vector>

#include "xgrad/distributed/all.hpp"
#include "xgrad/framework/array.hpp"
#include "xgrad/xgrad.hpp"

using namespace xgrad;
namespace dist = xgrad::distributed;

namespace {

struct Job {
  Job() {
    auto& m = boost::unit_test::framework::master_test_suite();
    int argc = m.argc;
    char** argv = m.argv;
    dist::init(argc, argv);
    set_num_threads(1);
    if (!std::getenv("XGRAD_DIST_TIMEOUT")) dist::set_timeout(60);
    if (dist::is_root())
      std::cout << "dist_tests: " << dist::world_size() << " ranks" << (dist::uses_mpi() ? " over MPI" : " without MPI")
                << "; " << runtime_summary() << std::endl;
  }
  ~Job() { dist::finalize(); }
};
BOOST_TEST_GLOBAL_FIXTURE(Job);

int world() { return dist::world_size(); }
int me() { return dist::rank(); }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

// How far a model's parameters are from a reference: model-wise, max |a - b| over every
// element of every parameter divided by max |b| over the same (the "relative" of the tests);
// and the worst single tensor's max |a - b| / max |b|. The per-tensor figure is larger for
// tensors that are nearly zero and whose gradient is mathematically zero: the key part of
// attention's in_proj_bias (softmax is shift-invariant) gets rounding noise (~1e-17) as its
// gradient, which depends on the summation order, and Adam turns it into updates of
// ~lr * noise / eps ~ 1e-12 that differ between the two runs.
struct Diff {
  double model = 0, worst_tensor = 0;
  std::string worst_name;
};
Diff diff(const NamedTensors& a, const NamedTensors& b) {
  Diff d;
  double worst = 0, scale = 0;
  for (std::size_t k = 0; k < b.size(); ++k) {
    const auto va = a[k].second.to_vector(), vb = b[k].second.to_vector();
    double w = 0, sc = 0;
    for (std::size_t i = 0; i < va.size(); ++i) {
      w = std::max(w, std::abs(va[i] - vb[i]));
      sc = std::max(sc, std::abs(vb[i]));
    }
    worst = std::max(worst, w);
    scale = std::max(scale, sc);
    const double rel = sc > 0 ? w / sc : w;
    if (rel >= d.worst_tensor) d.worst_tensor = rel, d.worst_name = b[k].first;
  }
  d.model = scale > 0 ? worst / scale : worst;
  return d;
}
// The parameters with the key third of every attention in_proj_bias, rows [E, 2E), set to 0
// (the only elements whose gradient is mathematically zero: see above).
NamedTensors without_key_bias(const NamedTensors& params) {
  NamedTensors out;
  const std::string suffix = "in_proj_bias";
  for (const auto& [n, t] : params) {
    Tensor c = t.clone();
    if (n.size() >= suffix.size() && n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
      const std::size_t e = t.numel() / 3;
      dispatch_float("test", t.dtype(), [&](auto zero) {
        auto* p = c.mutable_data<decltype(zero)>();
        std::fill(p + e, p + 2 * e, decltype(zero)(0));
      });
    }
    out.emplace_back(n, c);
  }
  return out;
}

// --- the model and data of the equivalence tests --------------------------------------------
constexpr std::size_t kBatch = 8, kLen = 8, kVocab = 11;

TransformerConfig small_config() {
  TransformerConfig c;
  c.vocab_size = kVocab, c.max_len = kLen, c.embed_dim = 16, c.num_heads = 2, c.ff_hidden = 32, c.num_layers = 2;
  c.dropout = 0.0, c.seed = 3;
  return c;
}

struct Batch {
  std::vector<std::int64_t> tokens, targets;  // (kBatch, kLen) each
};
Batch batch_of(long step) {
  Rng rng(1000 + std::uint64_t(step));
  Batch b;
  for (std::size_t i = 0; i < kBatch * kLen; ++i) b.tokens.push_back(rng.uniform_int(0, 9));
  for (std::size_t i = 0; i < kBatch * kLen; ++i) b.targets.push_back(rng.uniform_int(0, std::int64_t(kVocab) - 1));
  return b;
}
// Mean cross-entropy over the sequences [begin, end) of the step's global batch.
Tensor loss_of(TransformerEncoder& model, long step, std::size_t begin, std::size_t end) {
  const Batch b = batch_of(step);
  const std::size_t n = end - begin;
  std::vector<std::int64_t> tok(b.tokens.begin() + long(begin * kLen), b.tokens.begin() + long(end * kLen));
  std::vector<std::int64_t> tgt(b.targets.begin() + long(begin * kLen), b.targets.begin() + long(end * kLen));
  return cross_entropy(model.forward(index_tensor(tok, {n, kLen})), index_tensor(tgt, {n, kLen}));
}

// Steps [from, to) of this rank's shard of the global batch: zero_grad, backward, step.
void train_shard(TransformerEncoder& model, Optimizer& opt, long from, long to) {
  const auto [begin, end] = dist::shard_range(kBatch, me(), world());
  for (long s = from; s < to; ++s) {
    opt.zero_grad();
    loss_of(model, s, begin, end).backward();
    opt.step();
  }
}

std::unique_ptr<Optimizer> adamw(const NamedTensors& p) {
  return std::make_unique<AdamW>(p, AdamWOptions(3e-3).betas(0.9, 0.98).weight_decay(0.01));
}

constexpr int kSteps = 4;
constexpr double kClip = 0.5;  // small enough that clipping scales the gradients

// One process, the whole global batch.
NamedTensors train_reference(DType dtype) {
  TransformerEncoder model(small_config());
  model.to(dtype);
  auto opt = adamw(model.named_parameters());
  for (long s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    loss_of(model, s, 0, kBatch).backward();
    clip_grad_norm(model.parameters(), kClip);
    opt->step();
  }
  NamedTensors out;
  for (auto& [n, t] : model.named_parameters()) out.emplace_back(n, t.clone());
  return out;
}

struct Variant {
  const char* name;
  dist::DDPOptions options;
  bool zero = false;
};

// N ranks, each its contiguous shard of the same global batch.
NamedTensors train_parallel(DType dtype, const Variant& v, NamedTensors* optimizer_state = nullptr) {
  TransformerEncoder model(small_config());
  model.to(dtype);
  dist::DistributedDataParallel ddp(model, v.options);
  std::unique_ptr<Optimizer> opt;
  if (v.zero) opt = std::make_unique<dist::ZeroOptimizer>(ddp, adamw);
  else opt = adamw(model.named_parameters());
  const auto [begin, end] = dist::shard_range(kBatch, me(), world());
  for (long s = 0; s < kSteps; ++s) {
    opt->zero_grad();
    loss_of(model, s, begin, end).backward();
    if (v.zero) static_cast<dist::ZeroOptimizer&>(*opt).clip_grad_norm(kClip);
    else clip_grad_norm(model.parameters(), kClip);
    opt->step();
  }
  if (optimizer_state)
    *optimizer_state = v.zero ? static_cast<dist::ZeroOptimizer&>(*opt).gather_state_dict(0) : opt->state_dict();
  NamedTensors out;
  for (auto& [n, t] : model.named_parameters()) out.emplace_back(n, t.clone());
  return out;
}

std::vector<Variant> variants() {
  return {{"default buckets, overlapped", dist::DDPOptions(), false},
          {"512-byte buckets", dist::DDPOptions().bucket_bytes(512), false},
          {"one bucket, no overlap", dist::DDPOptions().bucket_bytes(std::size_t(1) << 40).overlap(false), false},
          {"ZeRO-1, 2 KiB buckets", dist::DDPOptions().bucket_bytes(2048), true}};
}

// FNV-1a of the parameters' bytes (printed for the run-to-run comparison in run.sh).
std::uint64_t digest(const NamedTensors& params) {
  std::uint64_t h = 1469598103934665603ull;
  for (const auto& [n, t] : params) {
    const auto* p = static_cast<const unsigned char*>(t.raw_data());
    for (std::size_t i = 0; i < t.nbytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

// Runs f, which must throw DistributedError on this rank; returns its message (rank 0 prints it
// under `label`), "" when nothing was thrown. collective: the error must say every rank threw it.
std::string distributed_error_of(const std::function<void()>& f, const char* label, bool collective) {
  std::string message;
  try {
    f();
  } catch (const dist::DistributedError& e) {
    BOOST_TEST(e.collective() == collective);
    message = e.what();
  }
  BOOST_TEST_INFO(message);
  BOOST_TEST(!message.empty());
  if (me() == 0) std::cout << label << ": " << message << std::endl;
  return message;
}

// A scratch directory, the same for every rank (rank 0's pid); rank 0 removes it at the end.
std::string shared_temp_dir() {
  Tensor token = index_tensor({std::int64_t(getpid())}, {1});
  dist::broadcast(token, 0);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("xgrad_dist_" + std::to_string(token.data<std::int64_t>()[0]))).string();
  std::filesystem::create_directories(dir);
  return dir;
}

// Gathers one flag per rank: true when every rank's is true (so a failure on one rank fails
// the case on every rank, and the ranks stay in step).
bool everywhere(bool ok) {
  Tensor t = scalar(ok ? 0.0 : 1.0, DType::Float64);
  dist::all_reduce(t, dist::ReduceOp::Max);
  return t.item() == 0.0;
}

// a: used on every rank; b: only on rank 0; c: on no rank; frozen: no gradient wanted.
struct Heads : Module {
  Rng rng{7};
  Linear a{4, 3, true, rng}, b{4, 3, true, rng}, c{4, 3, true, rng};
  Tensor frozen = ones({2}, DType::Float64);
  Heads() {
    register_module("a", &a);
    register_module("b", &b);
    register_module("c", &c);
    register_parameter("frozen", &frozen);
    to(DType::Float64);
  }
  Tensor forward(const Tensor& x, bool use_b) {
    Tensor y = sum(mul(a.forward(x), a.forward(x)));
    return use_b ? add(y, sum(b.forward(x))) : y;
  }
};

}  // namespace

// --- collectives -------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(collectives)

BOOST_AUTO_TEST_CASE(all_reduce_is_the_rank_order_sum_on_every_rank) {
  // Rank r holds x_r[i] = (i + 1) * 0.1 * (r + 1)^1.5 + 1e-3 * r: the rank-order sum is not
  // exact, so the bits say in which order it was taken.
  const std::size_t n = 37;  // not a multiple of the ranks: uneven segments
  auto value = [](int r, std::size_t i) { return double(i + 1) * 0.1 * std::pow(r + 1, 1.5) + 1e-3 * r; };
  for (DType dt : {DType::Float64, DType::Float32}) {
    std::vector<double> mine(n);
    for (std::size_t i = 0; i < n; ++i) mine[i] = value(me(), i);
    Tensor sum = tensor(mine, {n}, dt), avg = tensor(mine, {n}, dt), mx = tensor(mine, {n}, dt),
           mn = tensor(mine, {n}, dt);
    dist::all_reduce(sum, dist::ReduceOp::Sum);
    dist::all_reduce(avg, dist::ReduceOp::Average);
    dist::all_reduce(mx, dist::ReduceOp::Max);
    dist::all_reduce(mn, dist::ReduceOp::Min);
    for (std::size_t i = 0; i < n; ++i) {
      if (dt == DType::Float64) {
        double s = value(0, i);
        for (int r = 1; r < world(); ++r) s += value(r, i);
        BOOST_TEST(sum.data<double>()[i] == s);
        BOOST_TEST(avg.data<double>()[i] == s / world());
        BOOST_TEST(mx.data<double>()[i] == value(world() - 1, i));
        BOOST_TEST(mn.data<double>()[i] == value(0, i));
      } else {
        float s = float(value(0, i));
        for (int r = 1; r < world(); ++r) s += float(value(r, i));
        BOOST_TEST(sum.data<float>()[i] == s);
        BOOST_TEST(avg.data<float>()[i] == s / float(world()));
      }
    }
  }
  Tensor ints = index_tensor({std::int64_t(me()), -7, std::int64_t(1) << 50}, {3});
  dist::all_reduce(ints, dist::ReduceOp::Sum);
  const std::int64_t w = world();
  BOOST_TEST(ints.data<std::int64_t>()[0] == w * (w - 1) / 2);
  BOOST_TEST(ints.data<std::int64_t>()[1] == -7 * w);
  BOOST_TEST(ints.data<std::int64_t>()[2] == w * (std::int64_t(1) << 50));
}

BOOST_AUTO_TEST_CASE(max_and_min_propagate_nan) {
  Tensor t = tensor({me() == world() - 1 ? std::nan("") : 1.0, 2.0}, {2}, DType::Float64);
  dist::all_reduce(t, dist::ReduceOp::Max);
  BOOST_TEST(std::isnan(t.data<double>()[0]));
  BOOST_TEST(t.data<double>()[1] == 2.0);
}

BOOST_AUTO_TEST_CASE(broadcast_all_gather_reduce_scatter_barrier) {
  const int root = world() - 1;
  Tensor b = tensor({double(me()), 10.0 + me()}, {2}, DType::Float32);
  const auto v0 = b.version();
  dist::broadcast(b, root);
  BOOST_TEST(b.to_vector() == (std::vector<double>{double(root), 10.0 + root}));
  BOOST_TEST(b.version() > v0);
  Tensor flags = bool_tensor({me() % 2 == 0}, {1});
  dist::broadcast(flags, 0);
  BOOST_TEST(flags.data<bool>()[0]);

  Tensor g = dist::all_gather(tensor({double(me()), -double(me())}, {1, 2}, DType::Float64));
  BOOST_TEST(g.shape() == (Shape{std::size_t(world()), 2}));
  for (int r = 0; r < world(); ++r) {
    BOOST_TEST(g.data<double>()[2 * r] == r);
    BOOST_TEST(g.data<double>()[2 * r + 1] == -r);
  }
  BOOST_TEST(dist::all_gather(scalar(me(), DType::Int64)).shape() == (Shape{std::size_t(world())}));

  // (2N, 3): rank r's row j is r * 100 + j; rank r gets rows 2r, 2r+1 of the sum.
  const std::size_t rows = 2 * std::size_t(world());
  std::vector<double> x;
  for (std::size_t j = 0; j < rows * 3; ++j) x.push_back(me() * 100.0 + double(j));
  Tensor rs = dist::reduce_scatter(tensor(x, {rows, 3}, DType::Float64), dist::ReduceOp::Sum);
  BOOST_TEST(rs.shape() == (Shape{2, 3}));
  const double rank_sum = 100.0 * world() * (world() - 1) / 2;
  for (std::size_t j = 0; j < 6; ++j)
    BOOST_TEST(rs.data<double>()[j] == rank_sum + world() * double(std::size_t(me()) * 6 + j));
  dist::barrier();
}

BOOST_AUTO_TEST_CASE(ranks_calling_different_collectives_all_get_the_same_error) {
  if (world() == 1) return;
  Tensor t = zeros({3}, DType::Float32);
  const std::string message = distributed_error_of(
      [&] {
        if (me() == 0) dist::all_reduce(t);
        else dist::broadcast(t, 0);
      },
      "different collectives", true);
  BOOST_TEST(message.find("rank 0 all_reduce(float32 (3), sum), rank 1 broadcast(float32 (3), root 0)") != std::string::npos);
  // The ranks are still in step: the next collective works.
  Tensor ok = ones({2}, DType::Float64);
  dist::all_reduce(ok);
  BOOST_TEST(ok.to_vector() == (std::vector<double>{double(world()), double(world())}));
  // Different shapes are found the same way.
  Tensor odd = zeros({std::size_t(3 + me())}, DType::Float64);
  BOOST_CHECK_THROW(dist::all_reduce(odd), dist::DistributedError);
}

BOOST_AUTO_TEST_CASE(bad_arguments) {
  BOOST_CHECK_THROW(dist::all_reduce(bool_tensor({true}, {1})), DTypeError);
  BOOST_CHECK_THROW(dist::all_reduce(index_tensor({1}, {1}), dist::ReduceOp::Average), DTypeError);
  BOOST_CHECK_THROW(dist::broadcast(zeros({1}), world()), ValueError);
  BOOST_CHECK_THROW(dist::broadcast(Tensor(), 0), ValueError);
  BOOST_CHECK_THROW(dist::reduce_scatter(scalar(1.0)), ShapeError);
  if (world() > 1) BOOST_CHECK_THROW(dist::reduce_scatter(zeros({std::size_t(world()) + 1, 2})), ShapeError);
  BOOST_CHECK_THROW(dist::set_timeout(0), ValueError);
  BOOST_CHECK_THROW(dist::set_timeout(std::nan("")), ValueError);
}

BOOST_AUTO_TEST_CASE(shard_range_splits_unevenly_and_refuses_empty_shards) {
  BOOST_TEST((dist::shard_range(10, 0, 4) == std::pair<std::size_t, std::size_t>{0, 3}));
  BOOST_TEST((dist::shard_range(10, 1, 4) == std::pair<std::size_t, std::size_t>{3, 6}));
  BOOST_TEST((dist::shard_range(10, 3, 4) == std::pair<std::size_t, std::size_t>{8, 10}));
  BOOST_TEST((dist::shard_range(8, 2, 4) == std::pair<std::size_t, std::size_t>{4, 6}));
  BOOST_CHECK_THROW(dist::shard_range(3, 0, 4), ValueError);
  BOOST_CHECK_THROW(dist::shard_range(3, 4, 4), ValueError);
  try {
    dist::shard_range(2, 0, 4);
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()).find("2 items cannot be shared by 4 ranks") != std::string::npos);
  }
}

BOOST_AUTO_TEST_SUITE_END()

// --- data parallelism -------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(data_parallel)

BOOST_AUTO_TEST_CASE(float64_n_ranks_equal_one_process_within_1e12) {
  const NamedTensors ref = train_reference(DType::Float64);
  NamedTensors first;
  for (const auto& v : variants()) {
    BOOST_TEST_CONTEXT("variant " << v.name) {
      const NamedTensors got = train_parallel(DType::Float64, v);
      const Diff d = diff(got, ref), rest = diff(without_key_bias(got), without_key_bias(ref));
      BOOST_TEST(d.model <= 1e-12);
      BOOST_TEST(rest.model <= 1e-15);
      if (me() == 0)
        std::cout << "float64, " << world() << " ranks, " << v.name << ": parameters after " << kSteps
                  << " AdamW steps differ from one process by " << d.model << " (relative, model-wise; worst tensor "
                  << d.worst_name << " " << d.worst_tensor << "; without the key biases " << rest.model << ")" << std::endl;
      if (world() == 1) BOOST_TEST(d.model == 0.0);  // one rank: the very same arithmetic
      // Bucketing, overlap and ZeRO change no bit.
      if (first.empty()) first = got;
      for (std::size_t i = 0; i < ref.size(); ++i) BOOST_TEST(same_bits(got[i].second, first[i].second));
      if (me() == 0 && v.zero) std::cout << "digest float64 " << std::hex << digest(got) << std::dec << std::endl;
    }
  }
}

BOOST_AUTO_TEST_CASE(float32_n_ranks_equal_one_process_within_the_stated_bound) {
  // The bound: after 4 AdamW steps (lr 3e-3), relative and model-wise, 1e-6 for every element
  // but the key biases (float32 rounding of the gradients differs, ~1e-7 relative), 2e-4 with
  // them (their gradient is rounding noise, ~1e-9 in float32, comparable to Adam's eps = 1e-8,
  // so Adam moves them by up to ~lr / 10 per step differently in the two runs).
  const NamedTensors ref = train_reference(DType::Float32);
  const NamedTensors got = train_parallel(DType::Float32, variants()[0]);
  const NamedTensors zero = train_parallel(DType::Float32, variants()[3]);
  const Diff d = diff(got, ref), rest = diff(without_key_bias(got), without_key_bias(ref));
  BOOST_TEST(d.model <= 2e-4);
  BOOST_TEST(rest.model <= 1e-6);
  for (std::size_t i = 0; i < ref.size(); ++i) BOOST_TEST(same_bits(got[i].second, zero[i].second));
  if (me() == 0) {
    std::cout << "float32, " << world() << " ranks: parameters differ from one process by " << rest.model
              << " (relative, model-wise, without the key biases; bound 1e-6), " << d.model
              << " with them (bound 2e-4; worst tensor " << d.worst_name << " " << d.worst_tensor << ")" << std::endl;
    std::cout << "digest float32 " << std::hex << digest(got) << std::dec << std::endl;
  }
  if (world() == 1)
    for (std::size_t i = 0; i < ref.size(); ++i) BOOST_TEST(same_bits(got[i].second, ref[i].second));
}

BOOST_AUTO_TEST_CASE(zero_state_gathers_to_the_unsharded_state_bit_for_bit) {
  NamedTensors plain_state, zero_state;
  train_parallel(DType::Float64, variants()[0], &plain_state);
  train_parallel(DType::Float64, variants()[3], &zero_state);
  if (me() == 0) {
    BOOST_TEST_REQUIRE(plain_state.size() == zero_state.size());
    for (std::size_t i = 0; i < plain_state.size(); ++i) {
      BOOST_TEST(plain_state[i].first == zero_state[i].first);
      BOOST_TEST(same_bits(plain_state[i].second, zero_state[i].second));
    }
  } else {
    BOOST_TEST(zero_state.empty());
  }
}

BOOST_AUTO_TEST_CASE(no_sync_accumulation_equals_the_whole_batch) {
  // Two micro-batches (halves of each rank's shard), the first under no_sync, each loss / 2:
  // one synchronised step on the accumulated gradient = one step on the whole global batch.
  TransformerEncoder ref_model(small_config()), model(small_config());
  ref_model.to(DType::Float64);
  model.to(DType::Float64);
  dist::DistributedDataParallel ddp(model);
  auto ref_opt = adamw(ref_model.named_parameters()), opt = adamw(model.named_parameters());
  const auto [begin, end] = dist::shard_range(kBatch, me(), world());
  const std::size_t mid = begin + (end - begin) / 2;
  for (long s = 0; s < 2; ++s) {
    ref_opt->zero_grad();
    loss_of(ref_model, s, 0, kBatch).backward();
    ref_opt->step();
    opt->zero_grad();
    const double w0 = double(mid - begin) / double(end - begin), w1 = 1 - w0;
    if (mid > begin) {
      auto guard = ddp.no_sync();
      mul_scalar(loss_of(model, s, begin, mid), w0).backward();
    }
    mul_scalar(loss_of(model, s, mid, end), w1).backward();
    opt->step();
  }
  const Diff d = diff(model.named_parameters(), ref_model.named_parameters());
  const Diff rest = diff(without_key_bias(model.named_parameters()), without_key_bias(ref_model.named_parameters()));
  BOOST_TEST(d.model <= 1e-12);
  BOOST_TEST(rest.model <= 1e-15);
  if (me() == 0)
    std::cout << "float64, " << world() << " ranks, no_sync accumulation of 2 micro-batches: " << d.model
              << " (relative, model-wise; without the key biases " << rest.model << ")" << std::endl;
  BOOST_TEST(ddp.stats().syncs == 2u);
  BOOST_TEST(ddp.stats().skipped == (mid > begin ? 2u : 0u));
}


BOOST_AUTO_TEST_CASE(two_synchronised_backwards_in_a_step_accumulate_as_one_process) {
  // Each step: zero_grad, then the two halves of the global batch, each backward synchronised
  // (no no_sync); a rank's loss is its shard's share of the half's mean (times N for Average).
  // The second reduction must not reduce the first one's result again (data_parallel.hpp,
  // "Several backwards before a step"): with Sum, Average and ZeRO alike the step is one
  // process's step on the gradient accumulated over both halves.
  const std::size_t half = kBatch / 2;
  auto run = [&](bool parallel, dist::ReduceOp op, bool zero) {
    TransformerEncoder model(small_config());
    model.to(DType::Float64);
    std::unique_ptr<dist::DistributedDataParallel> ddp;
    if (parallel) ddp = std::make_unique<dist::DistributedDataParallel>(model, dist::DDPOptions().reduce_op(op));
    std::unique_ptr<Optimizer> opt;
    if (zero) opt = std::make_unique<dist::ZeroOptimizer>(*ddp, adamw);
    else opt = adamw(model.named_parameters());
    const auto [b, e] = parallel ? dist::shard_range(half, me(), world()) : std::pair<std::size_t, std::size_t>{0, half};
    const double share = double(e - b) / double(half) * (parallel && op == dist::ReduceOp::Average ? world() : 1);
    for (long s = 0; s < 2; ++s) {
      opt->zero_grad();
      for (std::size_t h = 0; h < 2; ++h) mul_scalar(loss_of(model, s, h * half + b, h * half + e), share).backward();
      opt->step();
    }
    if (ddp) BOOST_TEST(ddp->stats().syncs == 4u);
    NamedTensors out;
    for (auto& [n, t] : model.named_parameters()) out.emplace_back(n, t.clone());
    return out;
  };
  const NamedTensors ref = run(false, dist::ReduceOp::Sum, false);
  for (const bool zero : {false, true})
    for (const dist::ReduceOp op : {dist::ReduceOp::Average, dist::ReduceOp::Sum}) {
      const NamedTensors got = run(true, op, zero);
      const Diff d = diff(got, ref), rest = diff(without_key_bias(got), without_key_bias(ref));
      BOOST_TEST_CONTEXT((zero ? "ZeRO, " : "DDP, ") << (op == dist::ReduceOp::Sum ? "Sum" : "Average")) {
        BOOST_TEST(d.model <= 1e-12);
        BOOST_TEST(rest.model <= 1e-14);
      }
      if (me() == 0)
        std::cout << "float64, " << world() << " ranks, two synchronised backwards a step, " << (zero ? "ZeRO " : "")
                  << (op == dist::ReduceOp::Sum ? "Sum: " : "Average: ") << d.model
                  << " (relative, model-wise; without the key biases " << rest.model << ")" << std::endl;
    }
}

BOOST_AUTO_TEST_CASE(batch_sampler_shards_with_a_sum_reduction_equal_one_process) {
  // models/data.hpp's BatchSampler: rank r takes its contiguous slice of every global batch;
  // 21 examples in batches of 8 give 8, 8, 5 (uneven shards for 2 and 4 ranks). The loss of a
  // rank is its sum of per-example losses / the global batch size, and the wrapper sums the
  // ranks' gradients (ReduceOp::Sum): the one-process gradient of the global mean, exactly.
  Rng data_rng(21);
  std::vector<std::int64_t> tok, tgt;
  for (std::size_t i = 0; i < 21 * kLen; ++i) tok.push_back(data_rng.uniform_int(0, 9));
  for (std::size_t i = 0; i < 21 * kLen; ++i) tgt.push_back(data_rng.uniform_int(0, std::int64_t(kVocab) - 1));
  const Tensor tokens = index_tensor(tok, {21, kLen}), targets = index_tensor(tgt, {21, kLen});
  auto run = [&](bool parallel) {
    TransformerEncoder model(small_config());
    model.to(DType::Float64);
    std::unique_ptr<dist::DistributedDataParallel> ddp;
    if (parallel) ddp = std::make_unique<dist::DistributedDataParallel>(model, dist::DDPOptions().reduce_op(dist::ReduceOp::Sum));
    auto opt = adamw(model.named_parameters());
    BatchSamplerOptions options = BatchSamplerOptions(8).seed(3);
    if (parallel) options.shard(std::size_t(me()), std::size_t(world()));
    BatchSampler sampler(21, options);
    for (int s = 0; s < 4; ++s) {  // the last is the first batch of epoch 1
      const SampledBatch b = sampler.next();
      opt->zero_grad();
      Tensor mean = cross_entropy(model.forward(collate(tokens, b.indices)), collate(targets, b.indices));
      mul_scalar(mean, double(b.indices.size()) / double(b.global_size)).backward();
      opt->step();
    }
    NamedTensors out;
    for (auto& [n, t] : model.named_parameters()) out.emplace_back(n, t.clone());
    return out;
  };
  const NamedTensors ref = run(false), got = run(true);
  const Diff d = diff(got, ref), rest = diff(without_key_bias(got), without_key_bias(ref));
  BOOST_TEST(d.model <= 1e-12);
  BOOST_TEST(rest.model <= 1e-15);
  if (me() == 0)
    std::cout << "float64, " << world() << " ranks, BatchSampler shards (8, 8, 5), ReduceOp::Sum: " << d.model
              << " (relative, model-wise; without the key biases " << rest.model << ")" << std::endl;
}

BOOST_AUTO_TEST_CASE(unused_parameters_are_averaged_with_zeros_or_left_without_gradient) {
  Heads model;
  dist::DistributedDataParallel ddp(model, dist::DDPOptions().bucket_bytes(64));
  Rng rng(11);
  const Tensor x = randn({2, 4}, rng, DType::Float64);  // the same on every rank
  model.forward(x, me() == 0).backward();
  // Expected: a's gradient is the one-process gradient (every rank has the same x); b's is
  // rank 0's divided by N; c and frozen have none.
  Heads ref;
  ref.forward(x, true).backward();
  BOOST_TEST(diff({{"a", model.a.weight.grad()}}, {{"a", ref.a.weight.grad()}}).model <= 1e-15);
  const Tensor expect_b = mul_scalar(ref.b.weight.grad(), 1.0 / world());
  BOOST_TEST(diff({{"b", model.b.weight.grad()}}, {{"b", expect_b}}).model <= 1e-15);
  BOOST_TEST(!model.c.weight.grad().defined());
  BOOST_TEST(!model.c.bias.grad().defined());
  BOOST_TEST(!model.frozen.grad().defined());
  // A backward that reaches none of the parameters is not synchronised.
  Tensor other = ones({2}, DType::Float64).set_requires_grad();
  sum(mul(other, other)).backward();
  BOOST_TEST(ddp.stats().syncs == 1u);
}

BOOST_AUTO_TEST_CASE(mismatched_models_are_refused_on_every_rank_naming_the_parameter) {
  if (world() == 1) return;
  TransformerConfig c = small_config();
  if (me() == world() - 1) c.ff_hidden = 48;  // the last rank builds another feed-forward width
  TransformerEncoder model(c);
  std::string message = distributed_error_of([&] { dist::DistributedDataParallel ddp(model); }, "mismatch", true);
  BOOST_TEST(message.find("the model differs across the ranks") != std::string::npos);
  BOOST_TEST(message.find("'body.blocks.0.ff.fc1.weight' float32 (32, 16) on rank 0 but 'body.blocks.0.ff.fc1.weight' "
                          "float32 (48, 16) on rank " +
                          std::to_string(world() - 1)) != std::string::npos);
  // One parameter fewer on one rank.
  TransformerConfig d = small_config();
  if (me() == 1) d.num_layers = 1;
  TransformerEncoder fewer(d);
  message = distributed_error_of([&] { dist::DistributedDataParallel ddp(fewer); }, "mismatch", true);
  BOOST_TEST(message.find("rank 0 has ") != std::string::npos);
  BOOST_TEST(message.find(", rank 1 has ") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(ranks_out_of_step_are_detected_not_mixed) {
  if (world() == 1) return;
  // Rank 0 synchronises a backward the others run under no_sync: at the next synchronised
  // backward, rank 0's second reduction meets the others' first one, and the bucket tags differ.
  Heads model;
  dist::DistributedDataParallel ddp(model);
  Rng rng(3);
  const Tensor x = randn({2, 4}, rng, DType::Float64);
  const std::string message = distributed_error_of(
      [&] {
        {
          std::unique_ptr<dist::DistributedDataParallel::NoSync> guard;
          if (me() != 0) guard = std::make_unique<dist::DistributedDataParallel::NoSync>(ddp);
          model.forward(x, true).backward();
        }
        model.forward(x, true).backward();
      },
      "out of step", false);
  BOOST_TEST(message.find("the ranks are out of step") != std::string::npos);
  // The wrapper is broken now: the next backward says so instead of hanging.
  BOOST_CHECK_THROW(model.forward(x, true).backward(), dist::DistributedError);
}

BOOST_AUTO_TEST_CASE(bad_options_and_late_dtype_change) {
  Heads model;
  BOOST_CHECK_THROW(dist::DistributedDataParallel(model, dist::DDPOptions().bucket_bytes(0)), ValueError);
  BOOST_CHECK_THROW(dist::DistributedDataParallel(model, dist::DDPOptions().reduce_op(dist::ReduceOp::Max)), ValueError);
  dist::DistributedDataParallel ddp(model);
  model.to(DType::Float32);
  Rng rng(3);
  BOOST_CHECK_THROW(model.forward(randn({2, 4}, rng), true).backward(), ValueError);
}

BOOST_AUTO_TEST_SUITE_END()

// --- ZeRO ----------------------------------------------------------------------------------------

BOOST_AUTO_TEST_SUITE(zero)

BOOST_AUTO_TEST_CASE(optimizer_state_per_rank_falls_as_one_over_n) {
  TransformerEncoder model(small_config());
  dist::DistributedDataParallel ddp(model);
  dist::ZeroOptimizer opt(ddp, adamw);
  opt.zero_grad();
  loss_of(model, 0, 0, kBatch).backward();  // every rank the whole batch: the state exists after one step
  opt.step();
  Tensor bytes = scalar(double(opt.local_state_bytes()), DType::Float64);
  const Tensor all = dist::all_gather(bytes);
  std::size_t full = 0, largest = 0;
  for (const auto& [n, p] : model.named_parameters()) {
    full += 2 * p.nbytes() + 8;  // AdamW: exp_avg, exp_avg_sq and a step counter per parameter
    largest = std::max(largest, 2 * p.nbytes() + 8);
  }
  double sum = 0, most = 0;
  for (double b : all.to_vector()) sum += b, most = std::max(most, b);
  BOOST_TEST(sum == double(full));  // each parameter's state on exactly one rank
  BOOST_TEST(most <= double(full) / world() + double(largest));
  if (me() == 0)
    std::cout << "ZeRO-1 optimizer state per rank, " << world() << " ranks: " << std::size_t(most) << " bytes at most ("
              << 100.0 * most / double(full) << "% of the unsharded " << full << " bytes; per rank:"
              << [&] {
                   std::string s;
                   for (double b : all.to_vector()) s += " " + std::to_string(std::size_t(b));
                   return s;
                 }()
              << ")" << std::endl;
  // The base class's state_dict cannot silently save a shard.
  BOOST_CHECK_THROW(opt.state_dict(), ValueError);
  BOOST_CHECK_THROW(xgrad::save_checkpoint("/dev/null", model, &opt), ValueError);
}

BOOST_AUTO_TEST_CASE(checkpoint_round_trip_with_and_without_zero) {
  // Train 2 steps with ZeRO, save (rank 0 writes the unsharded format), then continue 2 steps
  // three ways: the same optimizer, a new ZeRO optimizer loaded from the file, and a plain
  // AdamW loaded from it: all three end with the same bits.
  const std::string dir = shared_temp_dir();
  const std::string path = dir + "/ckpt.safetensors";
  TransformerEncoder m1(small_config());
  NamedTensors after;
  {
    dist::DistributedDataParallel ddp(m1);
    dist::ZeroOptimizer opt(ddp, adamw);
    train_shard(m1, opt, 0, 2);
    dist::save_checkpoint(path, m1, &opt, {{"note", "zero"}});
    train_shard(m1, opt, 2, 4);
    for (auto& [n, t] : m1.named_parameters()) after.emplace_back(n, t.clone());
  }
  TransformerConfig other = small_config();
  other.seed = 99;  // other initial values: the checkpoint must replace them
  TransformerEncoder m2(other), m3(other);
  {
    dist::DistributedDataParallel ddp(m2);
    dist::ZeroOptimizer opt(ddp, adamw);
    const auto meta = dist::load_checkpoint(path, m2, &opt);
    BOOST_TEST(meta.at("note") == "zero");
    BOOST_TEST(opt.steps() == 2);
    train_shard(m2, opt, 2, 4);
  }
  {
    dist::DistributedDataParallel ddp(m3);
    AdamW opt(m3.named_parameters(), AdamWOptions(3e-3).betas(0.9, 0.98).weight_decay(0.01));
    dist::load_checkpoint(path, m3, &opt);
    train_shard(m3, opt, 2, 4);
  }
  const auto p2 = m2.named_parameters(), p3 = m3.named_parameters();
  for (std::size_t i = 0; i < after.size(); ++i) {
    BOOST_TEST(same_bits(p2[i].second, after[i].second));
    BOOST_TEST(same_bits(p3[i].second, after[i].second));
  }
  // A file one rank cannot read: that rank's IOError, a collective error on the others.
  const std::string bad = me() == world() - 1 ? dir + "/missing.safetensors" : path;
  TransformerEncoder m4(small_config());
  BOOST_CHECK_THROW(dist::load_checkpoint(bad, m4), Error);
  dist::barrier();
  if (me() == 0) std::filesystem::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(zero_with_parameter_groups_matches_the_unsharded_grouped_optimizer) {
  // Decay for matrices, none for vectors (a rank's share may have only one kind: the factory
  // builds the non-empty groups only). Same bits as the unsharded grouped AdamW, and the
  // gathered state is its state_dict, group records included.
  auto grouped = [](const NamedTensors& params) {
    NamedTensors mats, vecs;
    for (const auto& e : params) (e.second.dim() >= 2 ? mats : vecs).push_back(e);
    std::vector<ParamGroup> groups;
    if (!mats.empty()) groups.push_back(ParamGroup(mats).weight_decay(0.1));
    if (!vecs.empty()) groups.push_back(ParamGroup(vecs).weight_decay(0.0));
    return std::unique_ptr<Optimizer>(std::make_unique<AdamW>(groups, AdamWOptions(3e-3)));
  };
  const std::string dir = shared_temp_dir(), path = dir + "/grouped.safetensors";
  TransformerEncoder plain_model(small_config()), zero_model(small_config()), loaded_model(small_config());
  NamedTensors plain_state, zero_state;
  {
    dist::DistributedDataParallel ddp(plain_model);
    auto opt = grouped(plain_model.named_parameters());
    train_shard(plain_model, *opt, 0, 3);
    plain_state = opt->state_dict();
    train_shard(plain_model, *opt, 3, 4);
  }
  {
    dist::DistributedDataParallel ddp(zero_model);
    dist::ZeroOptimizer opt(ddp, grouped);
    train_shard(zero_model, opt, 0, 3);
    zero_state = opt.gather_state_dict(0);
    dist::save_checkpoint(path, zero_model, &opt);
    train_shard(zero_model, opt, 3, 4);
  }
  {  // loaded into a new grouped ZeRO optimizer: each rank keeps its shard, with its own groups
    dist::DistributedDataParallel ddp(loaded_model);
    dist::ZeroOptimizer opt(ddp, grouped);
    dist::load_checkpoint(path, loaded_model, &opt);
    train_shard(loaded_model, opt, 3, 4);
  }
  const auto p = plain_model.named_parameters(), z = zero_model.named_parameters(), l = loaded_model.named_parameters();
  for (std::size_t i = 0; i < p.size(); ++i) {
    BOOST_TEST(same_bits(p[i].second, z[i].second));
    BOOST_TEST(same_bits(p[i].second, l[i].second));
  }
  dist::barrier();
  if (me() == 0) std::filesystem::remove_all(dir);
  if (me() == 0) {
    BOOST_TEST_REQUIRE(zero_state.size() == plain_state.size());
    for (std::size_t i = 0; i < plain_state.size(); ++i) {
      BOOST_TEST(zero_state[i].first == plain_state[i].first);
      BOOST_TEST(same_bits(zero_state[i].second, plain_state[i].second));
    }
  }
}

BOOST_AUTO_TEST_CASE(zero_step_is_all_or_nothing_across_ranks) {
  Heads model;
  dist::DistributedDataParallel ddp(model);
  dist::ZeroOptimizer opt(ddp, [](const NamedTensors& p) { return std::make_unique<SGD>(p, SGDOptions(0.1).momentum(0.9)); });
  Rng rng(5);
  const Tensor x = randn({2, 4}, rng, DType::Float64);
  opt.zero_grad();
  model.forward(x, true).backward();
  // Poison one gradient on its owner: every rank refuses the step, no parameter changes.
  const auto before = model.a.weight.clone();
  const auto params = ddp.parameters();
  for (std::size_t i = 0; i < params.size(); ++i)
    if (params[i].first == "a.weight" && opt.owners()[i] == me()) {
      Tensor g = params[i].second.grad().clone();
      g.mutable_data<double>()[0] = std::nan("");
      params[i].second.set_grad(g);
    }
  BOOST_CHECK_THROW(opt.step(), Error);  // DistributedError on every rank (ValueError without MPI)
  BOOST_TEST(same_bits(model.a.weight, before));
  BOOST_TEST(opt.steps() == 0);
  BOOST_TEST(everywhere(true));
}

BOOST_AUTO_TEST_SUITE_END()
