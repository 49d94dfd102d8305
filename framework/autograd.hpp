// xgrad/framework/autograd.hpp — graph nodes, grad modes and the backward engine.
//
// Define-by-run: an op computes its value eagerly, then calls record() (or record_fused()).
// When grad mode is on and some input requires grad, it attaches a Node to the output holding
//   - the op's name,
//   - its inputs (the only edges: nodes point to inputs, never to outputs, so there are
//     no cycles and the graph dies with the last handle to its output),
//   - a backward function: the vector-Jacobian product (two for a fused op, see below).
//
// Backward contract (dlib/tinygrad style): given the upstream gradient g (shape of the
// output) a node's backward returns one gradient per input, each of that input's shape,
// or an undefined Tensor where the input needs none (node.needs_grad(i) is false). The
// engine *adds* the returned contributions into each input's gradient; backward never
// assigns into shared state.
//
// Two kinds of op:
//   - plain op, record(op, out, inputs, backward): backward is written with xgrad's own
//     differentiable ops. The engine runs it with grad mode = create_graph, so with
//     create_graph the backward pass is itself recorded and can be differentiated again.
//   - fused op, record_fused(op, out, inputs, first_order, differentiable): first_order is a
//     fast kernel (raw loops over saved forward state, nothing recorded); differentiable
//     computes the same vector-Jacobian product with xgrad ops. The engine runs first_order
//     when create_graph is false and differentiable when it is true. An op never tests
//     is_grad_enabled() inside a backward to choose: the engine chooses.
//     Both must agree to float64 rounding: the registry compares them on every sample of
//     every op whose graph holds a fused node (check_fused_backward, framework/registry.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

class Node;
using BackwardFn = std::function<std::vector<Tensor>(const Node& node, const Tensor& grad)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  // differentiable: empty for a plain op; for a fused op, the create_graph backward (and
  // `backward` the first-order kernel).
  Node(std::string name, std::vector<Tensor> inputs, BackwardFn backward,
       std::shared_ptr<TensorImpl> output_value_owner, BackwardFn differentiable = nullptr);
  ~Node();  // iterative: destroying a 100,000-node chain does not recurse
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  const std::vector<Tensor>& inputs() const { return inputs_; }
  const Tensor& input(std::size_t i) const { return inputs_.at(i); }
  bool needs_grad(std::size_t i) const;
  // The op's output value, connected to this node (differentiable), for backward
  // formulas that use the output (exp, tanh, softmax, ...).
  Tensor output() const;
  bool released() const { return released_.load(); }
  // Recorded with record_fused (a first-order kernel and a differentiable backward).
  bool is_fused() const { return fused_; }

  // Engine use: runs the backward for this pass (a fused op's differentiable one when
  // create_graph), validating what it returns.
  std::vector<Tensor> apply(const Tensor& grad, bool create_graph) const;
  // Engine use: GraphError when this node was released or an input or its output was
  // modified in place since the forward (what apply() would throw before running). The engine
  // asks every node it will run before it runs any, so such a backward changes no .grad.
  void check_runnable() const;
  // Engine use. A backward holds every node it may run from discovery to its end, so another
  // thread's backward through the same nodes without retain_graph cannot free one under it.
  // hold(): the "second time" GraphError (nothing held) when the node was released; drop():
  // ends a hold; release() (by a holder, after a backward without retain_graph ran the node):
  // marks it released, so a later hold or apply throws GraphError. Inputs and saved state are
  // freed then if the caller holds it alone, else when the last hold ends.
  void hold();
  void drop();
  void release();

 private:
  std::string name_;
  std::vector<Tensor> inputs_;
  BackwardFn backward_;                 // plain op: the backward; fused op: first-order kernel
  BackwardFn differentiable_;           // fused op only: the create_graph backward
  std::shared_ptr<TensorImpl> output_;  // value-only copy of the output (shares storage)
  std::vector<std::uint64_t> versions_; // inputs' storage versions at record time
  std::uint64_t output_version_ = 0;
  bool fused_ = false;
  std::atomic<int> holds_{0};
  std::atomic<bool> released_{false}, freed_{false};
  void free_saved();
};

// Attaches a node to `out` (a freshly computed op result) when grad mode is enabled and
// any input requires grad. The node saves the storage version (Tensor::version) of every
// input and of `out`; if one has changed when the node's backward runs (an optimizer step,
// mutable_data, load_parameters between forward and backward), apply() throws GraphError:
//   backward: op 'matmul': input 1 (4, 3) float32 was modified in place after the forward
//   (version saved 0, now 1); ...
// Every input is checked, whether or not the backward formula reads it (xgrad does not know
// which tensors a closure uses), so this is stricter than PyTorch for e.g. add. Returns `out`. In anomaly mode it first checks `out`: see below
// (allow_nonfinite exempts ops whose non-finite output is requested, e.g. a -inf fill).
Tensor record(const char* op_name, Tensor out, std::vector<Tensor> inputs,
              BackwardFn backward, bool allow_nonfinite = false);

// record() for a fused op: `first_order` runs when backward is not recorded (create_graph
// false: the training step), `differentiable` (written in xgrad ops) under create_graph.
// Same contract for both (one gradient per input, undefined where !needs_grad(i)).
Tensor record_fused(const char* op_name, Tensor out, std::vector<Tensor> inputs,
                    BackwardFn first_order, BackwardFn differentiable, bool allow_nonfinite = false);

// True when some node in the graph behind y was recorded with record_fused (the registry uses
// it to decide which samples get their two backwards compared).
bool graph_has_fused_backward(const Tensor& y);

// False when record() would return `out` untouched (anomaly mode off, and grad mode off or no
// input requiring grad): lets hot ops skip building record()'s inputs and closure.
template <class... Inputs> bool will_record(const Inputs&... inputs);

// --- anomaly mode (thread-local, off by default) --------------------------------------
// When on, the first op whose forward output, or whose backward gradient, contains NaN or
// inf while all its float inputs (in backward: the upstream gradient) are finite throws
// AnomalyError naming the op, forward or backward, the first bad element and the shapes
// and dtypes of its inputs. Costs one pass over each op's output.
bool is_anomaly_enabled();
void set_anomaly_enabled(bool on);
class AnomalyModeGuard {
 public:
  explicit AnomalyModeGuard(bool on = true);
  ~AnomalyModeGuard();
  AnomalyModeGuard(const AnomalyModeGuard&) = delete;
  AnomalyModeGuard& operator=(const AnomalyModeGuard&) = delete;
 private:
  bool prev_;
};

// --- grad modes (thread-local) ---------------------------------------------------------
bool is_grad_enabled();
void set_grad_enabled(bool on);
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;
 private:
  bool prev_;
};
class EnableGradGuard {
 public:
  EnableGradGuard();
  ~EnableGradGuard();
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;
 private:
  bool prev_;
};

template <class... Inputs> bool will_record(const Inputs&... inputs) {
  return is_anomaly_enabled() || (is_grad_enabled() && (inputs.requires_grad() || ...));
}

// --- engine ---------------------------------------------------------------------------
// Accumulates d(outputs)/d(leaf) . grad_outputs into every reachable leaf's .grad.
void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs = {},
              bool retain_graph = false, bool create_graph = false);

// Functional gradient: returns d(outputs)/d(inputs) . grad_outputs without touching any
// .grad. inputs may be leaves or intermediate tensors. An input the outputs do not depend
// on gets an undefined Tensor when allow_unused, else GraphError.
// Only nodes from which some requested input is reachable run their backward: a branch of
// the graph that leads to none of them is never differentiated (nor released).
// create_graph implies retain_graph (as in PyTorch).
struct GradOptions {
  bool retain_graph = false;
  bool create_graph = false;
  bool allow_unused = false;
};
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {},
                         GradOptions options = {});

// --- backward observers (the hook data parallelism needs) -----------------------------
// An observer sees every backward() of the process while it is registered (Tensor::backward
// and xgrad::backward; never grad(), which leaves .grad alone). Callbacks run synchronously on
// the thread that called backward(), in this order:
//   backward_started()       once, after the outputs and grad_outputs were validated and the
//                            graph found, before any node runs;
//   leaf_grad_ready(leaf)    once per leaf whose .grad received a contribution in this
//                            backward, right after its last one: the leaf's .grad is final
//                            for this backward (PyTorch's post-accumulate-grad hook). Leaves
//                            are reported in the engine's Kahn order, which depends on the
//                            graph only (never on timing or threads). A leaf reached only by
//                            undefined gradients is not reported; right before it,
//   leaf_grad_contribution(leaf, g)  the same leaf with what this backward added to its .grad
//                            (.grad = the .grad before + g, or g when there was none);
//                            optional (the default does nothing);
//   backward_finished()      once, after every node ran and every leaf was reported, before
//                            backward() returns (also when no leaf was reported).
// Inside a callback: read the leaf, its value and .grad, and do any work that does not touch
// the graph being differentiated (copying gradients, starting non-blocking messages);
// backward_finished may replace .grad of leaves (Tensor::set_grad). Do not run backward() or
// grad() from a callback (observers would be called re-entrantly) and do not add or remove
// observers there (a backward sees the observers registered when it started).
// An exception thrown by a callback propagates out of backward(): the nodes not yet run are
// not differentiated, leaves already reported keep their .grad, and backward_finished() is
// not called (an observer that holds state across the callbacks sees the next
// backward_started() without a backward_finished() in between).
// xgrad::distributed::DistributedDataParallel uses this to start each gradient bucket's
// all-reduce as soon as the bucket's gradients are final, overlapped with the rest of backward.
class BackwardObserver {
 public:
  virtual ~BackwardObserver() = default;
  virtual void backward_started() {}
  virtual void leaf_grad_contribution(const Tensor& /*leaf*/, const Tensor& /*contribution*/) {}
  virtual void leaf_grad_ready(const Tensor& leaf) = 0;
  virtual void backward_finished() {}
};
// Registers `observer` for every later backward() in the process (thread-safe; registering
// the same observer twice has no effect). The engine keeps a reference while a backward that
// started with it runs, so removing it from another thread is safe.
void add_backward_observer(std::shared_ptr<BackwardObserver> observer);
// Unregisters it (no effect if it is not registered); backwards already running still call it.
void remove_backward_observer(const BackwardObserver* observer);

}  // namespace xgrad
