// xgrad/ops/detail.hpp — small helpers shared by op implementations (.cpp files only).
#pragma once
#include <string>

#include "xgrad/framework/array.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/registry.hpp"

namespace xgrad::detail {

// numpy/PyTorch broadcasting of two shapes; ShapeError naming op and both arguments.
Shape broadcast_shapes(const char* op, const char* arg_a, const Shape& a, const char* arg_b,
                       const Shape& b);

// A shape viewed as (outer, n, inner) around one axis: element (o, i, r) sits at
// (o * n + i) * inner + r in row-major order.
struct AxisSplit {
  std::size_t outer = 1, n = 1, inner = 1;
};
AxisSplit split_at(const Shape& shape, std::size_t axis);

// Row-major strides of `shape`, with 0 where `shape` is broadcast (size 1) against the
// same-rank `full` shape (used to walk a broadcast operand while iterating `full`).
std::vector<std::size_t> broadcast_strides(const Shape& shape, const Shape& full);

// `shape` left-padded with 1s to `rank` dimensions.
Shape pad_left(const Shape& shape, std::size_t rank);

}  // namespace xgrad::detail
