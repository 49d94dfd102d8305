// xgrad/distributed/zero.hpp — ZeRO stage 1 (optimizer state sharding) for data-parallel
// training: each rank keeps and updates the optimizer state of its own share of the
// parameters only, so optimizer state memory per rank falls to about 1/N.
//
//   DistributedDataParallel ddp(model);
//   ZeroOptimizer opt(ddp, [](const NamedTensors& shard) {
//     return std::make_unique<AdamW>(shard, AdamWOptions(3e-4).weight_decay(0.1));
//   });
//   ... opt.zero_grad(); loss.backward(); opt.clip_grad_norm(1.0); opt.step(); ...
//
// Partitioning is by whole parameters (as PyTorch's ZeroRedundancyOptimizer; llm.c cuts one
// flat buffer instead): parameters are taken largest first and each goes to the rank with the
// fewest bytes so far (ties: the lower rank), a function of the parameter list only. The
// factory builds the underlying optimizer (SGD with momentum, Adam, AdamW, or any other
// xgrad::Optimizer) over this rank's parameters, so its update rule is the optimizer's own.
// It may build parameter groups (models/optim.hpp) from the parameters it is given, e.g. decay
// and no-decay groups; a rank's share may leave a group empty, so build only non-empty ones.
// The factory is also called over every parameter (make_full) for the unsharded format of
// checkpoints, whose group records come from that optimizer.
// With whole parameters, a rank's share is within one parameter's size of 1/N of the total.
//
// A step:
//   1. backward: the wrapper reduces each gradient to its owner only (a reduce-scatter of each
//      bucket, ddp.set_gradient_owners): after backward only the owner holds a parameter's
//      .grad, the average over the ranks with the same bits as DistributedDataParallel alone;
//   2. step(): every rank checks its gradients (finite, right shape and dtype) and the ranks
//      agree before any parameter changes (all-or-nothing across the ranks), then each rank
//      steps its own optimizer on its own parameters;
//   3. the updated parameters are all-gathered (every rank sends its own, receives the rest).
// The update of each element is the underlying optimizer's, on the same averaged gradient, so
// training with ZeroOptimizer gives the same parameters, bit for bit, as
// DistributedDataParallel with the unsharded optimizer (tests/distributed). Bytes per step:
// the reduce-scatter (N-1)/N of the gradients plus the all-gather (N-1)/N of the parameters,
// the same as one all-reduce.
//
// Clip with opt.clip_grad_norm(max_norm), not xgrad::clip_grad_norm(model.parameters(), ...):
// after backward each rank holds only its own parameters' gradients, so the free function
// would see a part of the norm.
//
// Checkpoints: the base class's state_dict()/load_state_dict() throw (the state is sharded);
// use distributed::save_checkpoint / load_checkpoint (distributed/checkpoint.hpp), which gather
// the state on rank 0 into the unsharded optimizer's format (a file identical to one written
// without ZeRO, loadable with any number of ranks, with or without ZeRO), or
// gather_state_dict / load_full_state_dict.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/models/optim.hpp"

namespace xgrad::distributed {

using OptimizerFactory = std::function<std::unique_ptr<Optimizer>(const NamedTensors& params)>;

class ZeroOptimizer : public Optimizer {
 public:
  // Collective (every rank, the same ddp). The destructor sets ddp back to all-reduce (if ddp
  // still exists). lr starts at the factory optimizer's lr; setting
  // `lr` here sets it for each step (schedules), other hyper-parameters live in local().
  ZeroOptimizer(DistributedDataParallel& ddp, OptimizerFactory make);
  ~ZeroOptimizer() override;

  void step() override;  // collective
  const char* name() const override { return name_.c_str(); }

  // clip_grad_norm (models/optim.hpp) over the sharded gradients: the same total norm, with the
  // same bits, as clip_grad_norm over the full gradients of every parameter. Collective.
  double clip_grad_norm(double max_norm);

  const std::vector<int>& owners() const { return owners_; }  // per ddp.parameters() entry
  Optimizer& local() { return *local_; }
  const Optimizer& local() const { return *local_; }
  // Bytes of optimizer state (buffers and per-parameter counters) this rank holds.
  std::size_t local_state_bytes() const;

  // The whole state in the unsharded optimizer's format (Optimizer::state_dict), on `root`;
  // other ranks get an empty list. Collective.
  NamedTensors gather_state_dict(int root = 0) const;
  // The unsharded optimizer over every parameter, holding the gathered state, on `root`
  // (nullptr elsewhere); for writing a checkpoint. Collective.
  std::unique_ptr<Optimizer> gather_optimizer(int root = 0) const;
  // Every rank: validates `state` (a whole state, as gather_state_dict gives or an unsharded
  // optimizer's state_dict), then keeps its own parameters' entries. Throws like
  // Optimizer::load_state_dict; on error nothing changes.
  void load_full_state_dict(const NamedTensors& state);
  // The factory's optimizer over every parameter (no state): the format of a full state.
  std::unique_ptr<Optimizer> make_full() const;

 protected:
  std::vector<std::string> buffer_names() const override;  // throws: the state is sharded
  void update(std::size_t i, const Tensor& p, const Tensor& g) override;

 private:
  DistributedDataParallel& ddp_;
  std::weak_ptr<const void> ddp_alive_;
  OptimizerFactory make_;
  std::unique_ptr<Optimizer> local_;
  std::vector<int> owners_;
  std::string name_;
  struct Comms;
  std::unique_ptr<Comms> comms_;
};

}  // namespace xgrad::distributed
