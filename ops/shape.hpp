// xgrad/ops/shape.hpp — reshaping, permuting, slicing and joining.
#pragma once
#include <vector>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

Tensor reshape(const Tensor& x, const Shape& shape);    // same number of elements
Tensor flatten(const Tensor& x);                        // -> (numel)
Tensor unsqueeze(const Tensor& x, long axis);           // insert a size-1 axis
Tensor squeeze(const Tensor& x, long axis);             // remove a size-1 axis
Tensor permute(const Tensor& x, const std::vector<std::size_t>& perm);
Tensor transpose(const Tensor& x, long axis0, long axis1);

// Attention head layout, each the other's adjoint (one copy each, no reshape copy):
//   split_heads: (B, L, H * D) -> (B, H, L, D);   merge_heads: (B, H, L, D) -> (B, L, H * D)
Tensor split_heads(const Tensor& x, std::size_t num_heads);
Tensor merge_heads(const Tensor& x);

// x.narrow(axis, start, length) in PyTorch: elements [start, start + length) of `axis`.
Tensor narrow(const Tensor& x, long axis, std::size_t start, std::size_t length);
inline Tensor slice(const Tensor& x, long axis, std::size_t start, std::size_t length) {
  return narrow(x, axis, start, length);
}
// The adjoint of narrow: zeros of size `size` along `axis` with x placed at `start`.
Tensor unnarrow(const Tensor& x, long axis, std::size_t start, std::size_t size);

// Joins tensors of one dtype whose shapes agree except along `axis`.
Tensor concat(const std::vector<Tensor>& xs, long axis);
// Pieces of the given sizes along axis (sizes must add up to x.size(axis)).
std::vector<Tensor> split(const Tensor& x, const std::vector<std::size_t>& sizes, long axis);
// n equal pieces along axis (x.size(axis) must be divisible by n).
std::vector<Tensor> chunk(const Tensor& x, std::size_t n, long axis);

}  // namespace xgrad
