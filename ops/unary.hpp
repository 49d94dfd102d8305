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
Tensor gelu(const Tensor& x);     // exact: x * Phi(x), as torch.nn.GELU() (approximate='none')
// g * gelu'(x) in one pass (gelu's backward; differentiable in x and g).
Tensor gelu_backward(const Tensor& x, const Tensor& g);

}  // namespace xgrad
