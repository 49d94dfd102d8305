// xgrad/ops/softmax.hpp — softmax family, max-subtracted, never NaN.
//
// Entries equal to -inf are excluded (probability exactly 0), and a row with no
// finite-or-allowed entry (fully masked) gets all-zero probabilities and zero gradient:
// never NaN, unlike a naive exp(x - max) with max = -inf.
#pragma once
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

Tensor softmax(const Tensor& x, long axis = -1);
// log(softmax(x)); entries of -inf stay -inf, and a row that is entirely -inf is -inf.
Tensor log_softmax(const Tensor& x, long axis = -1);
// The vector-Jacobian product of softmax from its output y, fused into one pass:
//   dx = y * (g - sum(g * y, axis))         (y, g: same shape)
// Differentiable in both y and g (used by softmax's and masked_softmax's backward).
Tensor softmax_backward(const Tensor& y, const Tensor& g, long axis = -1);
// softmax over `axis` ignoring entries where `mask` is true ("masked" = not allowed to
// attend, the torch.nn.MultiheadAttention convention). mask: bool, broadcastable to x.
// Fully masked rows give zeros.
Tensor masked_softmax(const Tensor& x, const Tensor& mask, long axis = -1);

}  // namespace xgrad
