// xgrad/ops/softmax.hpp — softmax family, max-subtracted: masking never makes a NaN.
//
// Entries equal to -inf are excluded (probability exactly 0), and a row with no
// finite-or-allowed entry (fully masked) gets all-zero probabilities and zero gradient:
// never NaN, unlike a naive exp(x - max) with max = -inf. A row holding a NaN or +inf is NaN
// (as PyTorch; logsumexp alone takes +inf's limit). Float32 rows are summed in float64. A
// rank-0 x is one row of one element (axis 0 or -1): softmax 1, log_softmax 0, as PyTorch.
#pragma once
#include <cstdint>

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

// Cross entropy of softmax(x) over the last axis against integer targets, one fused op (the
// loss of cross_entropy, models/loss.hpp, which moves another class axis last and calls this):
//   x float (..., C), targets int64 (...), K = #rows whose target is not ignore_index,
//   w_ic = (1 - label_smoothing) [c == t_i] + label_smoothing / C  (rows not ignored; else 0)
//   loss = -(1 / K) sum_i sum_c w_ic log_softmax(x_i)_c          (rank 0; 0 when K = 0)
// terms with w_ic = 0 are skipped (a -inf logit there adds nothing, never 0 * -inf = NaN); a
// row of all -inf logits gives log_softmax -inf and loss inf.
// VJP: dx_ic = g (W_i softmax(x_i)_c - w_ic) / K, W_i = sum_c w_ic; targets get none.
// Errors: DTypeError (x not float, targets not int64), ShapeError (x a scalar, targets not x's
// shape without the last axis), IndexError (a target outside [0, C) other than ignore_index),
// ValueError (label_smoothing outside [0, 1]), each naming the op, the argument and the shapes.
Tensor softmax_cross_entropy(const Tensor& x, const Tensor& targets, std::int64_t ignore_index = -100,
                             double label_smoothing = 0.0);

}  // namespace xgrad
