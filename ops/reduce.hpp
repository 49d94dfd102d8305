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
// Maximum along one axis. The gradient is shared equally among tied maxima (as
// torch.amax). The axis must not be empty.
Tensor max(const Tensor& x, long axis, bool keepdim = false);
// Maximum over several axes (one max per axis, last axis first).
Tensor amax(const Tensor& x, const std::vector<long>& axes, bool keepdim = false);

// Sums x down to `shape`, which must broadcast to x's shape (the gradient of broadcasting).
Tensor sum_to(const Tensor& x, const Shape& shape);
// Repeats x along broadcast dimensions to `shape` (numpy broadcasting rules).
Tensor broadcast_to(const Tensor& x, const Shape& shape);

}  // namespace xgrad
