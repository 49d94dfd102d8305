// xgrad/ops/index.hpp — integer indexing: lookups, gathers and their adjoints, arg-reductions.
//
// Indices are Int64 tensors. An index outside [0, size) is an IndexError naming the op, the
// argument, the bad value, its position and the shapes; negative indices are refused, not
// wrapped (as torch.gather / index_select / scatter_add / embedding).
//
// Differentiable pairs, each the other's adjoint, so everything here is differentiable twice:
//   gather       <-> scatter_add      (torch.gather / Tensor.scatter_add)
//   index_select <-> index_add        (torch.index_select / Tensor.index_add)
//   index_select <-> index_add_zeros  (index_add into zeros, the zeros never made)
//   pack_rows    <-> unpack_rows      (the same over a tensor's leading axes merged)
//   embedding    <-> embedding_backward
// topk's values are differentiable (their backward is gather's); indices never are.
// Each recorded op saves its index as a (non-differentiable) input of its node, after the
// tensor inputs: an in-place write to the index (mutable_data) between the forward and the
// backward is the engine's GraphError ("op 'gather': input 1 (2, 3) int64 was modified in
// place ..."), not a gradient taken with other indices. topk's values node saves its indices.
#pragma once
#include <cstdint>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// Rows of weight (N, D) picked by Int64 indices of any shape I -> (I..., D).
// An index outside [0, N) is an IndexError naming its position.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// The adjoint: a zero (num_rows, D) matrix into which each row of g (I..., D) is added at
// its index (torch.index_add / embedding backward).
Tensor embedding_backward(const Tensor& g, const Tensor& indices, std::size_t num_rows);
// (I..., num_classes) float tensor with 1 at each index (non-differentiable).
Tensor one_hot(const Tensor& indices, std::size_t num_classes, DType dtype = DType::Float32);

// --- arg-reductions (Int64 results, never differentiable) ------------------------------------
// Position of the largest (smallest) element along `axis`, as torch.argmax / argmin: the first
// one among ties, and a NaN counts as larger (smaller) than everything, so the first NaN wins.
// x: Float32, Float64 or Int64 (DTypeError for Bool); the axis must not be empty (ShapeError),
// other axes may be. keepdim keeps the axis with size 1. A rank-0 x takes axis 0 or -1.
Tensor argmax(const Tensor& x, long axis, bool keepdim = false);
Tensor argmin(const Tensor& x, long axis, bool keepdim = false);
// Over every element of x (row-major flat position), a rank-0 result; x must not be empty.
Tensor argmax(const Tensor& x);
Tensor argmin(const Tensor& x);

// --- top-k ---------------------------------------------------------------------------------
// The k largest (largest = false: smallest) elements along `axis`, as torch.topk:
//   values  X with axis size k, x's dtype (Float32, Float64 or Int64); differentiable in x:
//           dx = scatter_add(zeros(X), axis, indices, g);
//   indices Int64, same shape: positions along `axis`.
// Order: sorted = true gives the values best first. Ties are broken by position, lower index
// first (PyTorch leaves the order of ties unspecified: its topk returned [2, 4, 1] for three
// tied 3s at positions 1, 2, 4; here it is [1, 2, 4]). NaN counts as larger than every
// number, as in PyTorch (first for largest = true, never picked before a number for
// largest = false). sorted = false gives the same k elements in increasing position order
// (PyTorch: unspecified). Either way the result is the same on every machine.
// k may be 0 (empty results, as PyTorch); k < 0 or k > x.size(axis) is a ValueError naming
// k, the axis and x's shape. A rank-0 x takes axis 0 or -1 and k <= 1.
struct TopK {
  Tensor values;
  Tensor indices;
};
TopK topk(const Tensor& x, long k, long axis = -1, bool largest = true, bool sorted = true);

// --- gather / scatter_add ------------------------------------------------------------------
// torch.gather(x, axis, index): index (Int64) has x's rank, index.size(d) <= x.size(d) for
// every d != axis (ShapeError otherwise); the result has index's shape and x's dtype (any):
//   y[i0..., i_axis, ...] = x[i0..., index[i0..., i_axis, ...], ...].
// Differentiable in x (float): dx = scatter_add(zeros(X), axis, index, g).
Tensor gather(const Tensor& x, long axis, const Tensor& index);
// Tensor.scatter_add(axis, index, src): a copy of x with src added at the gathered positions,
//   y = x;  y[i0..., index[i0..., j, ...], ...] += src[i0..., j, ...]
// (repeated indices add up, in row-major order of index; Int64 wraps around on overflow, as
// PyTorch). x: float or Int64; src: x's dtype
// and exactly index's shape (PyTorch also takes a larger src and ignores the rest: refused
// here, so that scatter_add and gather stay exact adjoints). Differentiable in x and src:
//   dx = g,  dsrc = gather(g, axis, index).
Tensor scatter_add(const Tensor& x, long axis, const Tensor& index, const Tensor& src);

// --- index_select / index_add --------------------------------------------------------------
// torch.index_select(x, axis, index): index is 1-D Int64 (rank 0 counts as one index, as
// PyTorch); the result is X with axis size len(index), x's dtype (any):
//   y[..., j, ...] = x[..., index[j], ...].
// Differentiable in x (float): dx = index_add(zeros(X), axis, index, g).
Tensor index_select(const Tensor& x, long axis, const Tensor& index);
// Tensor.index_add(axis, index, src): y = x;  y[..., index[j], ...] += src[..., j, ...]; src is X
// with axis size len(index), x's dtype (float or Int64). Differentiable in x and src:
//   dx = g,  dsrc = index_select(g, axis, index).
Tensor index_add(const Tensor& x, long axis, const Tensor& index, const Tensor& src);
// index_add(zeros(shape, src.dtype()), axis, index, src) without making and copying the
// zeros: a tensor of `shape` that is 0 except y[..., index[j], ...] += src[..., j, ...] (src is
// `shape` with axis size len(index); float or Int64). index_select's adjoint, and the other
// way round: differentiable in src, dsrc = index_select(g, axis, index). Errors as
// index_add's, naming argument 'shape' for x.
Tensor index_add_zeros(const Shape& shape, long axis, const Tensor& index, const Tensor& src);

// --- pack_rows / unpack_rows ----------------------------------------------------------------
// The rows of x (rows..., F), its leading axes taken as one axis of numel(rows) rows, at a 1-D
// Int64 index: pack_rows(x, index) (len(index), F) = x's rows index[j] (index_select over the
// merged axes, no reshape copy); unpack_rows(src (N, F), index (N), rows) (rows..., F) is 0
// except the rows index[j] += src[j] (index_add_zeros over them). Each is the other's
// adjoint: differentiable in x / src, twice. x any dtype for pack_rows; src float or Int64.
// Padded batches run on their real positions (UnpaddedRows in models/attention.hpp).
// Errors: IndexError for an index outside the rows, ShapeError for x of rank < 2, src not
// (len(index), F) or an index of rank > 1, DTypeError for a non-Int64 index or bool src.
Tensor pack_rows(const Tensor& x, const Tensor& index);
Tensor unpack_rows(const Tensor& src, const Tensor& index, const Shape& rows);

}  // namespace xgrad
