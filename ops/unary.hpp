// xgrad/ops/unary.hpp — elementwise functions.
#pragma once
#include <optional>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);    // 1 / sqrt(x)
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);     // gradient at exactly 0 is 0; relu(NaN) = NaN, slope 1 (as PyTorch)
Tensor erf(const Tensor& x);
// |x|; gradient g * sign(x), 0 at x = 0 (as PyTorch).
Tensor abs(const Tensor& x);
// x limited to [min, max], as torch.clamp: y = min(max(x, min), max) with a missing bound not
// applied, so min > max gives max everywhere (as PyTorch); a NaN x stays NaN. The bounds are
// rounded to x's dtype. Gradient g * [min <= x <= max]: it passes at the bounds themselves
// (PyTorch 1.13's rule) and is 0 for a NaN x. ValueError if both bounds are missing (as
// PyTorch) or a bound is NaN (PyTorch 1.13 then returns x unchanged; refused here).
Tensor clamp(const Tensor& x, std::optional<double> min, std::optional<double> max);
inline Tensor clamp_min(const Tensor& x, double min) { return clamp(x, min, std::nullopt); }
inline Tensor clamp_max(const Tensor& x, double max) { return clamp(x, std::nullopt, max); }

// GELU's two forms, as PyTorch's F.gelu(x, approximate='none' | 'tanh'):
//   None (default): x * Phi(x), Phi the standard normal CDF (torch.nn.GELU());
//   Tanh: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) (GPT-2; nn.GELU(approximate='tanh')).
// (Overloads, not a default argument, so that &gelu still converts to Tensor (*)(const Tensor&).)
enum class GeluApproximation { None, Tanh };
Tensor gelu(const Tensor& x);  // GeluApproximation::None
Tensor gelu(const Tensor& x, GeluApproximation approximate);
// g * gelu'(x) in one pass (gelu's backward; differentiable in x and g).
Tensor gelu_backward(const Tensor& x, const Tensor& g);  // GeluApproximation::None
Tensor gelu_backward(const Tensor& x, const Tensor& g, GeluApproximation approximate);

}  // namespace xgrad
