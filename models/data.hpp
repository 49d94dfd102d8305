// xgrad/models/data.hpp — a seeded batch sampler (shuffled per epoch, batched, drop_last, one
// shard per data-parallel rank, random access by step) and collate (rows of a dataset tensor
// copied into a batch tensor).
//
//   BatchSampler sampler(60000, BatchSamplerOptions(64).seed(1).drop_last(true));
//   for (std::uint64_t step = 0; step < steps; ++step) {
//     const SampledBatch b = sampler.batch_at(step);        // depends on (seed, step) only
//     Tensor x = collate(images, b.indices), y = collate(labels, b.indices);
//     ...
//   }
//
// Order. Epoch e visits the N examples in the order of a permutation drawn from
// Rng(epoch_seed(seed, e)) (Rng::shuffle, Fisher-Yates: the same numbers with every standard
// library), or 0, 1, ..., N-1 with shuffle(false). Each epoch's order depends on (seed, e)
// only, never on the epochs before it, so a run resumed at any step sees exactly the batches
// of an uninterrupted one. Global batch b of an epoch is order[b*B, min((b+1)*B, N)): every
// example exactly once per epoch; the last batch has N % B examples unless drop_last(true)
// drops it (then N % B examples, a different subset each epoch, are left out).
// batches_per_epoch() is ceil(N / B), or floor(N / B) with drop_last. Steps count batches
// across epochs: step s is batch s % batches_per_epoch() of epoch s / batches_per_epoch().
//
// Shards (data parallelism). shard(rank, world_size) gives rank r a contiguous slice of every
// global batch: with n examples in the batch, q = n / W and m = n % W, rank r gets
// q + (r < m) examples starting at r*q + min(r, m) (ranks 0..m-1 one more). The global order
// is the same for every world size, so the W ranks of a step together hold exactly the
// batch one process (W = 1) gets at that step, in the same order. Shards are equal when W
// divides the batch size (and the last batch's size, or drop_last); otherwise they differ
// by one example, and SampledBatch::global_size says how many examples the step has in
// total: average a loss over the global batch as sum(per-example losses) / global_size on
// every rank and sum the gradients over ranks (an allreduce-sum) to get the one-process
// gradient exactly. Every rank gets at least one example of every batch: world_size >
// batch_size is a ValueError, and so is a last batch (N % B examples, without drop_last)
// smaller than world_size.
// (PyTorch's DistributedSampler shards the epoch instead, interleaved, padding it by
// repeating examples or dropping its tail so shards are equal: its global order changes with
// the world size, and padded examples are seen twice.)
#pragma once
#include <cstdint>
#include <type_traits>
#include <vector>

#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/layers.hpp"  // Count

namespace xgrad {

// Settings by name: BatchSamplerOptions(64).seed(1).drop_last(true).shard(rank, world_size).
class BatchSamplerOptions {
 public:
  explicit BatchSamplerOptions(Count batch_size) : batch_size_(check_count("BatchSampler", "batch_size", batch_size)) {}
  BatchSamplerOptions& shuffle(bool on) { shuffle_ = on; return *this; }        // default true
  BatchSamplerOptions& drop_last(bool on) { drop_last_ = on; return *this; }    // default false
  template <class S, std::enable_if_t<std::is_integral_v<S> && !std::is_same_v<S, bool>, int> = 0>
  BatchSamplerOptions& seed(S s) {  // default 0; ValueError when negative
    if constexpr (std::is_signed_v<S>)
      if (s < 0) throw_error<ValueError>("BatchSampler", "argument 'seed' must be >= 0, got ", s);
    seed_ = static_cast<std::uint64_t>(s);
    return *this;
  }
  // This process is rank `rank` of `world_size` (default 0 of 1). world_size >= 1 and
  // rank < world_size (ValueError).
  BatchSamplerOptions& shard(Count rank, Count world_size);
  std::size_t batch_size() const { return batch_size_; }
  bool shuffle() const { return shuffle_; }
  bool drop_last() const { return drop_last_; }
  std::uint64_t seed() const { return seed_; }
  std::size_t rank() const { return rank_; }
  std::size_t world_size() const { return world_size_; }

 private:
  std::size_t batch_size_;
  bool shuffle_ = true, drop_last_ = false;
  std::uint64_t seed_ = 0;
  std::size_t rank_ = 0, world_size_ = 1;
};

// One step's examples for this rank.
struct SampledBatch {
  std::uint64_t step = 0;             // epoch * batches_per_epoch + index
  std::uint64_t epoch = 0;
  std::uint64_t index = 0;            // batch number within the epoch
  std::vector<std::size_t> indices;   // this rank's example indices, in global-batch order
  std::size_t offset = 0;             // position of indices[0] in the global batch
  std::size_t global_size = 0;        // examples in the global batch (all ranks)
};

// Not thread-safe: batch() caches the permutation of the last epoch it used (one per thread).
class BatchSampler {
 public:
  // num_examples >= 1. ValueError (naming BatchSampler and the arguments) when the settings
  // leave some epoch with no batch (drop_last and batch_size > num_examples) or some rank
  // with no example in a batch (see above); MemoryError when an epoch's order (num_examples
  // indices of 8 bytes) would be over max_tensor_bytes() (ValueError past 2^40 examples).
  BatchSampler(Count num_examples, const BatchSamplerOptions& options);

  std::size_t num_examples() const { return n_; }
  std::uint64_t batches_per_epoch() const { return batches_; }
  const BatchSamplerOptions& options() const { return options_; }

  // Random access. batch: IndexError unless index < batches_per_epoch(); ValueError when its
  // step would not fit in 64 bits. batch_at(step) = batch(step / bpe, step % bpe).
  SampledBatch batch(std::uint64_t epoch, std::uint64_t index);
  SampledBatch batch_at(std::uint64_t step);
  // Every rank's examples of a global batch (what batch() slices), and an epoch's order.
  std::vector<std::size_t> global_batch(std::uint64_t epoch, std::uint64_t index);
  std::vector<std::size_t> epoch_order(std::uint64_t epoch) const;

  // Sequential use: next() returns the batch at position() and advances by one step;
  // seek(step) or seek(epoch, index) jumps (a resumed run calls seek(resumed_step)).
  SampledBatch next();
  void seek(std::uint64_t step) { position_ = step; }
  void seek(std::uint64_t epoch, std::uint64_t index);
  std::uint64_t position() const { return position_; }

  // The seed of epoch e's permutation: splitmix64(splitmix64(seed) ^ e).
  static std::uint64_t epoch_seed(std::uint64_t seed, std::uint64_t epoch);

 private:
  const std::vector<std::size_t>& order(std::uint64_t epoch);  // cached for the last epoch used
  void check_index(const char* op, std::uint64_t epoch, std::uint64_t index) const;
  std::size_t n_;
  BatchSamplerOptions options_;
  std::uint64_t batches_;
  std::uint64_t position_ = 0;
  std::uint64_t cached_epoch_ = 0;
  bool cached_ = false;
  std::vector<std::size_t> cached_order_;
};

// The rows data[indices[0]], data[indices[1]], ... of a dataset tensor (N, ...) copied into a
// new tensor (indices.size(), ...) of data's dtype (any: float32/64, int64 labels, bool), with
// no graph (a batch of data is a leaf). ShapeError for a scalar `data`, IndexError naming the
// position for an index >= N; an empty list gives a (0, ...) tensor.
Tensor collate(const Tensor& data, const std::vector<std::size_t>& indices);

}  // namespace xgrad
