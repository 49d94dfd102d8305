// xgrad/ops/reduce.hpp — reductions and their adjoint, broadcast_to.
//
// Axes may be negative (counted from the end). An empty axes list reduces every axis.
#pragma once
#include <vector>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

Tensor sum(const Tensor& x);  // over every element, rank-0 result
Tensor sum(const Tensor& x, const std::vector<long>& axes, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor mean(const Tensor& x, const std::vector<long>& axes, bool keepdim = false);
// Maximum along one axis, NaN where the reduced elements hold a NaN (as torch.max). The
// gradient is shared equally among tied maxima (as torch.amax), a NaN result's among its NaNs.
// The axis must not be empty; a rank-0 x (axis 0 or -1) is its own max.
Tensor max(const Tensor& x, long axis, bool keepdim = false);
// Maximum over several axes (one max per axis, last axis first).
Tensor amax(const Tensor& x, const std::vector<long>& axes, bool keepdim = false);

// log(sum(exp(x))) over axes (an empty list: every axis), as torch.logsumexp, computed as
// m + log(sum(exp(x - m))) with m the row's maximum, so large values do not overflow.
//   a row of only -inf (or an empty axis) gives -inf, and a zero, finite gradient;
//   a row holding +inf gives +inf, and its gradient goes to the +inf entries, shared equally
//   (the limit of softmax); PyTorch gives NaN gradients in both cases;
//   a NaN in a row gives NaN.
// dx = g * softmax(x) over the reduced axes (differentiable again).
Tensor logsumexp(const Tensor& x, const std::vector<long>& axes, bool keepdim = false);

// Inclusive running sum along axis, as torch.cumsum: y[.., i, ..] = sum_{j <= i} x[.., j, ..].
// Float32 accumulates in float64 (as PyTorch on the CPU), float64 in float64; Int64 in int64
// (not differentiable; wraps around on overflow like PyTorch). dx = the reversed cumsum of g:
// dx[.., i, ..] = sum_{j >= i} g[.., j, ..]. A rank-0 x takes axis 0 or -1 (y = x).
Tensor cumsum(const Tensor& x, long axis);

// Sums x down to `shape`, which must broadcast to x's shape (the gradient of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);
// Repeats x along broadcast dimensions to `shape` (numpy broadcasting rules).
Tensor broadcast_to(const Tensor& x, const Shape& shape);

}  // namespace xgrad
