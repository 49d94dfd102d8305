// xgrad/distributed/sampler.hpp — which examples each rank takes in each epoch (PyTorch's
// torch.utils.data.DistributedSampler).
//
// Epoch e: the permutation of 0 .. n-1 made by Rng(seed + e).shuffle (xgrad's Rng: the same
// numbers with every compiler and standard library; the identity when shuffle is false), the
// same on every rank. Without drop_last it is padded by repeating its first indices up to a
// multiple of N (so a few examples appear twice in an epoch when N does not divide n); with
// drop_last it is cut to a multiple of N (the last n % N are skipped this epoch). Rank r takes
// the positions r, r + N, r + 2N, ...: the ranks' shards are disjoint (but for the padding) and
// together cover the epoch; every rank gets size() indices.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace xgrad::distributed {

class DistributedSampler {
 public:
  // ValueError: n == 0, rank not in [0, world), or drop_last with n < world (a rank would get
  // nothing).
  DistributedSampler(std::size_t n, int rank, int world, std::uint64_t seed = 0, bool shuffle = true,
                     bool drop_last = false);
  // The same for this process: rank() and world_size() of the job (distributed.hpp).
  explicit DistributedSampler(std::size_t n, std::uint64_t seed = 0, bool shuffle = true, bool drop_last = false);

  std::vector<std::size_t> indices(std::uint64_t epoch) const;  // this rank's, in order
  std::size_t size() const;                                      // indices per rank per epoch
  int rank() const { return rank_; }
  int world() const { return world_; }

 private:
  std::size_t n_;
  int rank_, world_;
  std::uint64_t seed_;
  bool shuffle_, drop_last_;
};

}  // namespace xgrad::distributed
