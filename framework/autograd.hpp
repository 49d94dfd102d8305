// xgrad/framework/autograd.hpp — graph nodes, grad modes and the backward engine.
//
// Define-by-run: an op computes its value eagerly, then calls record(). When grad mode is
// on and some input requires grad, record() attaches a Node to the output holding
//   - the op's name,
//   - its inputs (the only edges: nodes point to inputs, never to outputs, so there are
//     no cycles and the graph dies with the last handle to its output),
//   - a backward function: the vector-Jacobian product.
//
// Backward contract (dlib/tinygrad style): given the upstream gradient g (shape of the
// output) a node's backward returns one gradient per input, each of that input's shape,
// or an undefined Tensor where the input needs none (node.needs_grad(i) is false). The
// engine *adds* the returned contributions into each input's gradient; backward never
// assigns into shared state. Backward is written with xgrad's own differentiable ops, so
// with create_graph the backward pass is itself recorded and can be differentiated again.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

class Node;
using BackwardFn = std::function<std::vector<Tensor>(const Node& node, const Tensor& grad)>;

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node(std::string name, std::vector<Tensor> inputs, BackwardFn backward,
       std::shared_ptr<TensorImpl> output_value_owner);
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
  bool released() const { return released_; }

  // Engine use: runs backward, validating what it returns.
  std::vector<Tensor> apply(const Tensor& grad) const;
  // Frees inputs and saved state after a backward without retain_graph.
  void release();

 private:
  std::string name_;
  std::vector<Tensor> inputs_;
  BackwardFn backward_;
  std::shared_ptr<TensorImpl> output_;  // value-only copy of the output (shares storage)
  bool released_ = false;
};

// Attaches a node to `out` (a freshly computed op result) when grad mode is enabled and
// any input requires grad. Returns `out`. In anomaly mode it first checks `out`: see below
// (allow_nonfinite exempts ops whose non-finite output is requested, e.g. a -inf fill).
Tensor record(const char* op_name, Tensor out, std::vector<Tensor> inputs,
              BackwardFn backward, bool allow_nonfinite = false);

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
// create_graph implies retain_graph (as in PyTorch).
struct GradOptions {
  bool retain_graph = false;
  bool create_graph = false;
  bool allow_unused = false;
};
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs = {},
                         GradOptions options = {});

}  // namespace xgrad
