// DistributedSampler: a seeded permutation per epoch, padded or cut to N, strided by rank.
#include <numeric>

#include "xgrad/distributed/distributed.hpp"
#include "xgrad/distributed/sampler.hpp"
#include "xgrad/framework/tensor.hpp"

namespace xgrad::distributed {

DistributedSampler::DistributedSampler(std::size_t n, int rank, int world, std::uint64_t seed, bool shuffle,
                                       bool drop_last)
    : n_(n), rank_(rank), world_(world), seed_(seed), shuffle_(shuffle), drop_last_(drop_last) {
  const char* op = "DistributedSampler";
  if (n == 0) throw_error<ValueError>(op, "argument 'n' must be >= 1, got 0");
  if (world < 1 || rank < 0 || rank >= world) throw_error<ValueError>(op, "rank ", rank, " is not in [0, ", world, ")");
  if (drop_last && n < std::size_t(world))
    throw_error<ValueError>(op, "with drop_last, ", n, " examples leave nothing to some of the ", world,
                            " ranks (use at most ", n, " ranks, or drop_last = false to repeat examples)");
}

DistributedSampler::DistributedSampler(std::size_t n, std::uint64_t seed, bool shuffle, bool drop_last)
    : DistributedSampler(n, distributed::rank(), world_size(), seed, shuffle, drop_last) {}

std::size_t DistributedSampler::size() const {
  const std::size_t w = std::size_t(world_);
  return drop_last_ ? n_ / w : (n_ + w - 1) / w;
}

std::vector<std::size_t> DistributedSampler::indices(std::uint64_t epoch) const {
  std::vector<std::size_t> order(n_);
  std::iota(order.begin(), order.end(), std::size_t(0));
  if (shuffle_) {
    Rng rng(seed_ + epoch);
    rng.shuffle(order.begin(), order.end());
  }
  const std::size_t w = std::size_t(world_), total = size() * w;
  for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i]);  // pad by repeating
  order.resize(total);
  std::vector<std::size_t> mine;
  for (std::size_t i = std::size_t(rank_); i < total; i += w) mine.push_back(order[i]);
  return mine;
}

}  // namespace xgrad::distributed
