// xgrad/framework/gradcheck.hpp — numerical gradient checks for op authors.
//
// gradcheck(f, inputs) compares the analytic vector-Jacobian product of f with central
// differences, in float64:
//   - with a random upstream gradient u (never only sum(): that hides softmax bugs),
//     <u, J_i> against (<u, f(x + eps e_j)> - <u, f(x - eps e_j)>) / 2 eps;
//   - the full Jacobian, row by row, when numel(out) * numel(inputs) <= full_jacobian_max;
//   - linearity of backward in u: vjp(a u + b v) == a vjp(u) + b vjp(v);
//   - fails when the analytic gradient is all zero but the numeric one is not, and when
//     both are zero for every input (a vacuous check) unless allow_all_zero.
// Inputs that require grad (float64) are checked; the others (masks, indices, constants)
// are passed through unchanged.
//
// gradgradcheck(f, inputs) runs gradcheck on (inputs..., u) -> vjp_f(inputs, u) computed
// with create_graph, which checks every second derivative of f that backward can produce.
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
};

struct GradcheckResult {
  bool ok = true;
  std::string message;           // empty when ok; else op, input, index, analytic, numeric
  double max_abs_error = 0.0;
  explicit operator bool() const { return ok; }
};

GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});
GradcheckResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {});

}  // namespace xgrad
