// xgrad/framework/gradcheck.hpp — numerical gradient checks for op authors.
//
// gradcheck(f, inputs) compares the analytic vector-Jacobian product of f with central
// differences, in float64:
//   - with a random upstream gradient u (never only sum(): that hides softmax bugs),
//     <u, J_i> against (<u, f(x + eps e_j)> - <u, f(x - eps e_j)>) / 2 eps;
//   - the full Jacobian, row by row, when numel(out) * numel(inputs) <= full_jacobian_max;
//   - linearity of backward in u: vjp(a u + b v) == a vjp(u) + b vjp(v);
//   - fails when the analytic gradient is all zero but the numeric one is not, and when
//     both are zero for every input (a vacuous check) unless allow_all_zero;
//   - fails on any NaN or inf: in f(x) (the sample is not a point where f is finite), in
//     f(x +- eps e_j) (f is undefined or not finite near the sample), or in an analytic or
//     numeric gradient, Jacobian entry or linearity term. The message names the op, the
//     input, the element (index and flat index) and both values; max_abs_error is inf.
// Inputs that require grad (float64) are checked; the others (masks, indices, constants)
// are passed through unchanged. Each checked input slot is its own variable (a fresh leaf
// sharing the input's storage): the same tensor given twice, gradcheck(mul, {a, a}), is
// f(x0, x1) at x0 = x1 = a, each slot differentiated and perturbed alone. gradcheck
// differentiates with create_graph = false, so it sees the fused first-order backwards.
//
// gradgradcheck(f, inputs) runs gradcheck on (inputs..., u) -> vjp_f(inputs, u) computed
// with create_graph, which checks every second derivative of f that backward can produce.
// It also fails when f(x) or vjp_f(x, u) is not finite.
//
// check_fused_backward(f, inputs) computes u^T J once with create_graph = false (the
// first-order kernels of ops recorded with record_fused: attention, layer_norm, gelu) and once
// with create_graph = true (their differentiable backwards, which gradgradcheck differentiates),
// for one random u, and fails unless every element agrees to float64 rounding:
//   |a_j - b_j| <= fused_rtol * (|b_j| + max_k |b_k|)      per input, both finite.
// Neither gradcheck (first path only) nor gradgradcheck (second path only) compares them;
// check_op (framework/registry.hpp) runs it on every sample whose graph has a record_fused node.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

using TensorFn = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  std::string name = "f";        // shown in failure reports
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-4;
  std::uint64_t seed = 1234;     // for the random upstream gradients
  std::size_t full_jacobian_max = 4096;
  bool allow_all_zero = false;   // permit a check in which every gradient is zero
  double fused_rtol = 1e-10;     // check_fused_backward: both paths are float64 sums of the
                                 // same terms in another order, ~1e-16 apart per term
};

struct GradcheckResult {
  bool ok = true;
  std::string message;           // empty when ok; else op, input, index, analytic, numeric
  double max_abs_error = 0.0;    // inf when a value was NaN or inf
  explicit operator bool() const { return ok; }
};

// Errors (thrown before f's first evaluation where they do not depend on f's output; the
// message starts with "gradcheck(name)", "gradgradcheck(name)" or "check_fused_backward(name)"):
//   ValueError  f is empty ("no function given"); an option out of range: eps must be finite
//               and > 0, atol, rtol and fused_rtol finite and >= 0 ("option rtol must be
//               finite and >= 0, got nan"); no input requires grad; f returned an undefined
//               tensor
//   DTypeError  an input that requires grad is not float64; f's output is not float64
// Failures of the check itself (wrong or non-finite gradients) are returned, not thrown.
GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});
GradcheckResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {});
GradcheckResult check_fused_backward(const TensorFn& f, const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& options = {});

}  // namespace xgrad
