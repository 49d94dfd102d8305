// xgrad/ops/unary.hpp — elementwise functions.
#pragma once
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);    // 1 / sqrt(x)
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);     // gradient at exactly 0 is 0 (as PyTorch)
Tensor erf(const Tensor& x);

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
