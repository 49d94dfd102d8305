// xgrad/ops/mask.hpp — boolean masks and selection.
//
// Convention (as torch.nn.MultiheadAttention's boolean masks): **true = masked**, i.e. the
// position is excluded / not allowed to attend. Masks are Bool tensors and never
// differentiable. masked_fill and where save their mask as an input of their node (after x,
// or after a and b): writing it in place before the backward is the engine's GraphError.
#pragma once
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// y = x where mask is false, `fill` where mask is true. mask broadcasts to x's shape.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double fill);
// y = a where cond is true, b elsewhere (cond, a, b broadcast together).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

enum class CausalAlign {
  TopLeft,      // query i sees keys j <= i (torch SDPA is_causal; T == S usual case)
  BottomRight,  // query i sees keys j <= i + (S - T): the last query sees every key
                // (decoding with a cache of S - T earlier keys)
};
// (T, S) Bool mask, true where query i may NOT attend key j (j in its future).
Tensor causal_mask(std::size_t T, std::size_t S, CausalAlign align = CausalAlign::TopLeft);
inline Tensor causal_mask(std::size_t T) { return causal_mask(T, T); }

// Elementwise logic on Bool tensors, with broadcasting (combine attention masks).
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);

// The mask broadcast to `shape` (a Bool tensor); ShapeError naming op if it does not fit.
Tensor expand_mask(const char* op, const Tensor& mask, const Shape& shape);
// Throws unless mask is a Bool tensor that broadcasts to `shape` (without expanding it).
void check_mask_fits(const char* op, const Tensor& mask, const Shape& shape);

}  // namespace xgrad
