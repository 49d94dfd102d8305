// xgrad/distributed/data_parallel.hpp — data-parallel training of a Module (PyTorch's
// DistributedDataParallel): every rank holds a full replica, runs forward and backward on its
// own part of the global batch, and the gradients are averaged across the ranks during
// backward, so every rank's optimizer takes the same step.
//
//   xgrad::distributed::Environment env(argc, argv);
//   MyModel model(...);
//   xgrad::distributed::DistributedDataParallel ddp(model);       // broadcasts rank 0's values
//   AdamW opt(model.named_parameters(), AdamWOptions(1e-3));
//   for (...) {
//     opt.zero_grad();
//     loss_of_my_shard(model).backward();   // gradients averaged over the ranks on return
//     opt.step();
//   }
//
// Construction (collective) checks that every rank has the same model — the same number of
// parameters that require grad, and for each its name, dtype and shape — and throws the same
// collective DistributedError on every rank naming the first parameter that differs and what
// each rank has; then it copies rank 0's parameter values to every rank.
//
// Buckets. Parameters that require grad are assigned to buckets in reverse registration order
// (the order in which backward usually finishes them), a new bucket starting when the next
// parameter would take the current one past bucket_bytes or has another dtype. The engine
// reports each leaf's gradient as final (xgrad::BackwardObserver, framework/autograd.hpp); the
// gradient is copied into its bucket's flat buffer, and when every gradient of a bucket is in,
// the bucket's reduction starts with non-blocking MPI calls while backward goes on with the
// rest of the graph. Buckets start in bucket order on every rank (a bucket that is complete
// early waits for the ones before it), so every rank issues the same operations in the same
// order. When backward has run every node, the wrapper finishes every bucket (a gradient that
// never became final is handled as below), waits for all of them and replaces each
// parameter's .grad by the average.
//
// Reduction order (determinism). Each bucket is reduced like distributed::all_reduce: cut into
// N contiguous segments, segment r summed by rank r in rank order, ((g_0 + g_1) + ...) + g_{N-1},
// then divided by N (ReduceOp::Average; ReduceOp::Sum skips the division), and the result is
// copied to every rank. An element's sum does not depend on the bucket layout, the bucket
// size, overlap or timing: every rank gets the same bits, a fixed N gives the same bits on
// every run, and with N = 1 the gradients are unchanged.
//
// Several backwards before a step. A synchronised backward reduces what this rank's backwards
// added to .grad since the last synchronisation (its own contribution and those of the no_sync
// backwards before it), never a .grad that was there before them: .grad = that earlier .grad
// + the reduction. So two synchronised backwards in a step give the gradient one process would
// accumulate over both batches (up to rounding, as always for N > 1), with ReduceOp::Sum and
// Average and with ZeroOptimizer alike; after zero_grad there is no earlier .grad and the
// reduction is the whole .grad. (PyTorch's DDP reduces the whole .grad, which is right for its
// average only.) A .grad replaced between backwards (zero_grad, set_grad) starts anew.
//
// Parameters without a gradient in a backward (PyTorch's find_unused_parameters, always on):
// a parameter whose leaf backward did not reach on this rank contributes its current .grad if
// it has one (accumulated under no_sync) and zeros otherwise; every rank learns which ranks
// had a gradient for it (a flag travels with the bucket), a parameter with a gradient on no
// rank keeps an undefined .grad (the optimizer skips it, as without DDP), and one with a
// gradient on some ranks gets the average over all N (zeros counted). Nothing waits for a
// gradient that never comes. A backward that reaches none of the model's parameters (e.g. of
// an unrelated graph) is not synchronised at all — every rank must then run one such backward
// likewise.
//
// Faults and misuse. Every wait is bounded by distributed::timeout(). Each bucket's message
// carries its bucket index and the count of backwards that reached the model (synchronised or
// under no_sync): a rank that ran backward more or fewer times than the others, or under
// no_sync at another time, is found at the next reduction, on the ranks that meet it ("rank 0:
// DistributedDataParallel: rank 1 sent bucket 0 of backward 2 (mod 2^24) while this rank
// reduces bucket 0 of backward 1: the ranks are out of step ..."); a rank that skips a
// synchronised backward altogether leaves the others waiting until the timeout. If a backward
// throws after buckets were started (an exception in an op's backward, in a hook), the ranks
// are out of step: the next backward throws DistributedError; end the job with
// distributed::abort().
//
// Threads: use one DistributedDataParallel per model, from one thread at a time (the thread
// that runs backward); backward of other graphs may run on other threads meanwhile only if
// they reach none of its parameters. create_graph backwards are not supported (the averaged
// .grad is a plain tensor).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/distributed/distributed.hpp"
#include "xgrad/models/module.hpp"

namespace xgrad::distributed {

class DDPOptions {
 public:
  // The largest bucket in bytes of gradient (a parameter larger than that has a bucket of its
  // own). Default 1 MiB (PyTorch: 25 MiB, and 1 MiB for its first bucket): small buckets let
  // the reduction start earlier; each costs one more message latency. Must be >= 1.
  DDPOptions& bucket_bytes(std::size_t v) { bucket_bytes_ = v; return *this; }
  // Start each bucket's reduction during backward, as soon as it is complete (default). When
  // false every bucket starts after backward ran every node (no overlap; for measurements).
  DDPOptions& overlap(bool v) { overlap_ = v; return *this; }
  // Copy rank 0's parameter values to every rank at construction (default true).
  DDPOptions& broadcast_parameters(bool v) { broadcast_ = v; return *this; }
  // Average (default) or Sum: what .grad holds after backward.
  DDPOptions& reduce_op(ReduceOp v) { op_ = v; return *this; }
  std::size_t bucket_bytes() const { return bucket_bytes_; }
  bool overlap() const { return overlap_; }
  bool broadcast_parameters() const { return broadcast_; }
  ReduceOp reduce_op() const { return op_; }

 private:
  std::size_t bucket_bytes_ = std::size_t(1) << 20;
  bool overlap_ = true, broadcast_ = true;
  ReduceOp op_ = ReduceOp::Average;
};

// What the wrapper did (this rank, since construction or reset_stats()).
struct DDPStats {
  std::size_t buckets = 0;            // number of buckets
  std::size_t bytes_per_sync = 0;     // bytes this rank sends per synchronised backward (payload + tags)
  std::uint64_t syncs = 0;            // synchronised backwards
  std::uint64_t skipped = 0;          // backwards under no_sync
  double wait_seconds = 0;            // in backward, after the last node: finishing and waiting for the reductions
  double callback_seconds = 0;        // in the engine's leaf callbacks: copying gradients, starting messages
};

class DistributedDataParallel {
 public:
  // Collective: every rank constructs its wrapper at the same point (see above). The module
  // must outlive the wrapper. ValueError for bad options (bucket_bytes 0, Max/Min).
  explicit DistributedDataParallel(Module& module, const DDPOptions& options = DDPOptions());
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Module& module() { return module_; }
  const DDPOptions& options() const { return options_; }

  // Gradient accumulation: while the returned guard lives, backward accumulates into .grad on
  // each rank without any communication; the first backward after it reduces the accumulated
  // .grad (PyTorch's `with ddp.no_sync():`). Every rank must use it for the same backwards.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // The parameters (names as in module.named_parameters()) of each bucket, in bucket order.
  std::vector<std::vector<std::string>> bucket_names() const;
  const DDPStats& stats() const;
  void reset_stats();

  // For ZeroOptimizer: reduce each parameter's gradient to the rank that owns it instead of
  // to every rank; after backward only parameter i's owner holds .grad (owners[i] in [0, N)).
  // Rebuilds the buckets (collective, every rank the same owners). An empty vector restores
  // all-reduce.
  void set_gradient_owners(const std::vector<int>& owners);
  // The parameters that take part (require grad), in registration order.
  const NamedTensors& parameters() const;
  // Expires when the wrapper is destroyed (ZeroOptimizer checks it before resetting the owners).
  std::weak_ptr<const void> lifetime() const { return reducer_; }

  struct Reducer;  // the engine observer (data_parallel.cpp)

 private:
  Module& module_;
  DDPOptions options_;
  NamedTensors params_;
  std::shared_ptr<Reducer> reducer_;
};

}  // namespace xgrad::distributed
