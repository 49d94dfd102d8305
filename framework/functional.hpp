// xgrad/framework/functional.hpp — derivatives of functions of tensors (JAX / torch.func style).
//
// A function is a TensorFn, f(inputs) -> one tensor (the signature gradcheck takes). Every
// transform below evaluates f on fresh leaves sharing the inputs' storage (no copy), so it
// neither reads nor writes any .grad and works inside NoGradGuard, and returns Tensors:
//
//   vjp(f, x, u)      f(x), u^T J_i for every input i            one backward
//   jvp(f, x, v)      f(x), sum_i J_i v_i                        forward-over-reverse, below
//   jacobian(f, x)    J_i of shape out.shape + x_i.shape         one backward per row, or
//                                                                one jvp per column
//   hessian(f, x)     H_ij of shape x_i.shape + x_j.shape        one backward per row of H
//   vhp(f, x, v)      f(x), v^T H (row vector times Hessian)     reverse-over-reverse
//   hvp(f, x, v)      f(x), H v                                  forward-over-reverse
//   value_and_grad    f(x), grad f                               one backward
//
// Forward mode without forward rules (the "double-vjp trick"): u -> vjp(f, x, u) = J^T u is
// linear in u, and the engine can differentiate it (every op is twice differentiable), so
//   J v = d/du <J^T u, v>
// is one backward with create_graph (recording J^T u for a dummy cotangent u) and one
// backward of that backward. It needs no per-op JVP rule and is exact; it costs about two
// backwards more than a forward (benchmarks/bench_functional.cpp measures it).
// hvp is the same trick on the gradient: H v = d/du <H u, v> (three passes); vhp is one
// backward of <grad f, v> (two passes), so for a twice-differentiable f (H symmetric) vhp is
// the cheaper way to H v, as in torch.autograd.functional.
//
// Parameters of a module: parameter_function(module, loss) is the function
//   p -> loss() with module's parameters replaced by p       (named_parameters() order)
// so hessian(parameter_function(model, loss), model.parameters()) is the Hessian of the loss
// with respect to every parameter, and named_like(model, result) names the blocks.
//
// Errors (thrown before anything large is computed):
//   - an input or tangent undefined, or not float32/float64: DTypeError;
//   - a tangent / cotangent / vector of another shape or dtype than its input or output:
//     ShapeError / DTypeError naming the transform, the index and both shapes;
//   - f returning a non-scalar where a scalar is required (hessian, hvp, vhp,
//     value_and_grad, vjp without a cotangent): ValueError naming the shape;
//   - an input f's output does not depend on: GraphError, or zeros with allow_unused;
//   - a Jacobian or Hessian whose blocks together would exceed the memory bound
//     (FunctionalOptions::max_bytes, default max_tensor_bytes() of framework/runtime.hpp,
//     itself the machine's physical memory unless set): MemoryError naming the transform and
//     the shapes, raised after f is evaluated once (its output shape decides the size) and
//     before the result is allocated. More than 2^40 elements in one block: ValueError.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/gradcheck.hpp"  // TensorFn
#include "xgrad/models/module.hpp"         // NamedTensors, Module

namespace xgrad {

using Tensors = std::vector<Tensor>;

struct FunctionalOptions {
  // Results stay connected to the graph (differentiable again: hessian of a jvp, gradients
  // through an hvp); inputs that already require grad are then used as they are. Either way
  // every input slot is its own variable: the same tensor given twice, hessian(f, {a, a}), is
  // f(x0, x1) at x0 = x1 = a (with create_graph each such slot is a recorded identity of a,
  // so results stay differentiable with respect to a).
  bool create_graph = false;
  // An input f does not depend on gets zeros instead of a GraphError.
  bool allow_unused = false;
  // jacobian / hessian: the largest result, in bytes, summed over its blocks; 0 means
  // max_tensor_bytes() (framework/runtime.hpp).
  std::size_t max_bytes = 0;
};

// --- first order ------------------------------------------------------------------------------

struct VjpResult {
  Tensor output;  // f(inputs)
  Tensors grads;  // u^T J_i, shaped like input i
};
// u^T J for a cotangent u shaped like f's output. u may be omitted when f returns one element
// (u = 1: the gradient); a larger output without u is a ValueError.
VjpResult vjp(const TensorFn& f, const Tensors& inputs, const Tensor& cotangent = Tensor(),
              const FunctionalOptions& options = {});
// vjp with u = 1 for a one-element f: f(x) and its gradient.
VjpResult value_and_grad(const TensorFn& f, const Tensors& inputs, const FunctionalOptions& options = {});

struct JvpResult {
  Tensor output;   // f(inputs)
  Tensor tangent;  // sum_i J_i v_i, shaped like the output
};
// One tangent per input, each of its input's shape and dtype.
JvpResult jvp(const TensorFn& f, const Tensors& inputs, const Tensors& tangents,
              const FunctionalOptions& options = {});

// Auto: rows (one vjp per output element) when the output has no more elements than the
// inputs together, else columns (one jvp per input element). Results are equal either way.
enum class JacobianMode { Auto, Reverse, Forward };
// J_i = d f / d x_i of shape f(x).shape + x_i.shape (torch.autograd.functional.jacobian), in
// x_i's dtype.
Tensors jacobian(const TensorFn& f, const Tensors& inputs, JacobianMode mode = JacobianMode::Auto,
                 const FunctionalOptions& options = {});

// --- second order (f returns one element) -----------------------------------------------------

// H[i][j] = d^2 f / dx_i dx_j of shape x_i.shape + x_j.shape, in x_j's dtype.
std::vector<Tensors> hessian(const TensorFn& f, const Tensors& inputs, const FunctionalOptions& options = {});

struct HvpResult {
  Tensor output;    // f(inputs)
  Tensors product;  // H v (hvp) or v^T H (vhp), shaped like the inputs
};
// One vector per input, of its shape and dtype.
HvpResult hvp(const TensorFn& f, const Tensors& inputs, const Tensors& v, const FunctionalOptions& options = {});
HvpResult vhp(const TensorFn& f, const Tensors& inputs, const Tensors& v, const FunctionalOptions& options = {});

// --- modules ----------------------------------------------------------------------------------

// The function p -> loss() evaluated with module's parameters replaced by p (a list in
// named_parameters() order, each of its parameter's shape and dtype: ShapeError / DTypeError /
// ValueError naming the parameter otherwise), the original parameters put back afterwards
// (also when loss throws). `module` must outlive the function. The module's own tensors are
// never written, so an optimizer holding them is unaffected.
TensorFn parameter_function(Module& module, std::function<Tensor()> loss);

// Pairs module's parameter names with `values` (one per parameter, in named_parameters() order).
NamedTensors named_like(const Module& module, const Tensors& values);

// --- per-sample gradients ---------------------------------------------------------------------

enum class PerSampleMethod {
  // Fastest exact way per parameter (see per_sample_gradients); the loop where nothing else applies.
  Auto,
  // B backwards of the batched forward, one per example (exact for any model; the reference).
  Loop,
};

struct PerSampleOptions {
  PerSampleMethod method = PerSampleMethod::Auto;
  bool allow_unused = false;  // a parameter the losses do not depend on gets zeros, else GraphError
  std::size_t max_bytes = 0;  // bound on the result (B * parameters * itemsize); 0: max_tensor_bytes()
};

struct PerSampleGradients {
  Tensor losses;        // (B): the per-example losses, detached
  NamedTensors grads;   // for each parameter: (B, ...parameter shape), row i = d losses[i] / d p
  // For each parameter, how its rows were computed: "linear" (one batched GEMM per use, from
  // the layer's input and the gradient at its output), "broadcast" (no per-example work: the
  // uses are linear's or broadcast the parameter over the batch, whose vjp's reduction is split
  // per example), "node" (the backward of some op that uses it, once per example, on the
  // batched gradient at its output), "loop" (one backward of the whole graph per example).
  std::vector<std::string> methods;
};

// The gradient of every example's loss with respect to every parameter, from one batched
// forward. per_example_losses() runs the forward on the batch and returns its (B) losses; each
// example's loss must depend only on that example (no batch statistics), with the batch on
// the leading axis of the activations (batch-first models).
//
// How (method Auto): one batched backward gives the gradient g at the output of every op that
// uses a parameter; a second one with random per-example weights w on the losses checks that
// this output's slice i only reaches loss i (its gradient must be w_i g_i), so the leading axis
// is the batch. Then, per use of parameter p:
//   - linear(x, W, b) with the batch leading: dW_i = sum_t g_it x_it^T (one batched GEMM,
//     matmul(g, x, true, false) on (B, T, out) x (B, T, in)), db_i = sum_t g_it;
//   - an op that broadcasts p over the batch (a bias or positional table added, a class token's
//     broadcast_to, layer_norm's weight and bias, a matmul's shared weight): its differentiable
//     backward, run once on g, ends in sum_to(Z, p's shape) with Z's axis 0 the batch; Z's
//     slice i is example i's term, summed over the other broadcast axes (a second run with
//     upstream w_i g_i checks that slice i comes from example i alone, else the next rule);
//   - any other op (embedding, ...): its backward once per example on g with every other
//     example's slice zeroed (the op alone, not the graph);
//   - an op whose output has no batch axis (narrow of a positional table) is followed to the
//     first op that has one, and the per-example gradient there is sent back through it.
// A parameter any of whose uses fails the check falls back to the loop, as does one that is
// the losses tensor itself (rows of the identity). The check compares to rounding: it passes
// when max |gw - w_i g_i| <= 16 eps(dtype) sqrt(s) max |w_i g_i| (s: elements per example of
// the op's output; genuine per-example models measure below 7 eps). What Auto can miss: a
// coupling between examples weaker than that bound (float32: relative effect below about
// 2e-6 sqrt(s); float64: 3.6e-15 sqrt(s)) is taken for rounding, and the rows are then off
// by about as much; use Loop for a loss that couples the examples on purpose. Cost, measured in
// benchmarks/bench_functional.cpp: see the README ("Gradient experiments").
PerSampleGradients per_sample_gradients(const NamedTensors& params, const std::function<Tensor()>& per_example_losses,
                                        const PerSampleOptions& options = {});
PerSampleGradients per_sample_gradients(const Module& module, const std::function<Tensor()>& per_example_losses,
                                        const PerSampleOptions& options = {});

// One loss per example for per_sample_gradients: logits (B, ..., C) with the classes on the last
// axis, targets (B, ...) int64; loss_i = the mean over example i's positions whose target is not
// ignore_index of -log_softmax(logits)[target] (0 when all are ignored), i.e.
// cross_entropy(logits[i], targets[i]) for each i (models/loss.hpp), as a (B) tensor. Its mean
// weighs examples equally (cross_entropy over the batch weighs tokens equally).
// ShapeError / DTypeError / IndexError as cross_entropy.
Tensor cross_entropy_per_example(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100);

// --- helpers shared with the curvature tools ------------------------------------------------

// Every element of `ts`, in order, as doubles; and back into tensors shaped like `like`.
std::vector<double> flatten_values(const Tensors& ts);
Tensors unflatten_values(const std::vector<double>& values, const Tensors& like);
// Bytes of a result made of `blocks` (shape, dtype) against `limit` (0: max_tensor_bytes()):
// MemoryError "op: the <what> ... needs N bytes, more than ..." naming every block.
void check_result_bytes(const char* op, const std::string& what,
                        const std::vector<std::pair<Shape, DType>>& blocks, std::size_t limit);

}  // namespace xgrad
