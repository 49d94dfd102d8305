// xgrad/ops/shape.hpp — reshaping, permuting, slicing and joining.
//
// These ops move values of any dtype (Int64 indices and Bool masks as well as floats, as in
// PyTorch), except split_heads, merge_heads and patchify (float only); only float tensors are
// differentiable, so only they are recorded.
#pragma once
#include <climits>
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

// Non-overlapping patch x patch tiles of images (B, C, H, W) -> (B, N, C * patch * patch),
// N = (H / p) * (W / p), p = patch: patches in row-major order (patch (i, j) is number
// i * (W / p) + j), each flattened in (C, p, p) order:
//   y[b, i * (W / p) + j, (c * p + u) * p + v] = x[b, c, i * p + u, j * p + v].
// That is torch's x.unfold(2, p, p).unfold(3, p, p).permute(0, 2, 3, 1, 4, 5).reshape(B, N, -1),
// the layout a Conv2d(C, E, kernel_size=p, stride=p) patch embedding reads (timm's PatchEmbed:
// its weight (E, C, p, p) reshaped to (E, C*p*p) is a linear layer on these rows). einops'
// 'b c (h p1) (w p2) -> b (h w) (p1 p2 c)' (lucidrains' vit-pytorch) orders each patch (p, p, C)
// instead. Built from reshape and permute, so differentiable twice. ShapeError unless images is
// rank 4; ValueError if patch is 0 or does not divide H and W.
Tensor patchify(const Tensor& images, std::size_t patch);

// x.narrow(axis, start, length) in PyTorch: elements [start, start + length) of `axis`.
// IndexError unless start + length <= x.size(axis).
Tensor narrow(const Tensor& x, long axis, std::size_t start, std::size_t length);
// libtorch's x.slice(dim, start, end) (step 1), i.e. x[..., start:end] along dim: an END index,
// exclusive, not a length (slice(arange(10), 0, 2, 3) is [2], narrow(.., 2, 3) is [2, 3, 4]).
// As libtorch / Python: negative start or end count from the end (+ x.size(dim)), both are
// then clamped to [0, size], and end <= start gives an empty axis; never an IndexError.
// narrow(x, dim, start', end' - start') on the resolved range (its gradient is narrow's).
Tensor slice(const Tensor& x, long dim, long start = 0, long end = LONG_MAX);
// The adjoint of narrow: zeros of size `size` along `axis` with x placed at `start`.
Tensor unnarrow(const Tensor& x, long axis, std::size_t start, std::size_t size);

// Joins tensors of one dtype whose shapes agree except along `axis`.
Tensor concat(const std::vector<Tensor>& xs, long axis);
// Pieces of the given sizes along axis (sizes must add up to x.size(axis)).
std::vector<Tensor> split(const Tensor& x, const std::vector<std::size_t>& sizes, long axis);
// n equal pieces along axis (x.size(axis) must be divisible by n).
std::vector<Tensor> chunk(const Tensor& x, std::size_t n, long axis);

}  // namespace xgrad
