// xgrad/ops/attention.hpp — fused multi-head scaled dot-product attention.
//
// Heads are column blocks of (B, L, H*D) tensors, read in place through GEMM leading
// dimensions: no split/merge copies, one saved (B, H, T, S) probability tensor, and a
// hand-derived backward (llm.c style) in ops/attention.cpp.
#pragma once
#include <functional>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// Every mask is optional. Bool masks use the mask.hpp convention: true = may NOT attend.
struct AttentionMasks {
  Tensor mask;              // Bool, broadcastable to (B, H, T, S)
  Tensor key_padding_mask;  // Bool (B, S): true = padding key
  Tensor float_mask;        // q's dtype, broadcastable to (B, H, T, S), added to the scores
  bool is_causal = false;   // query i may not attend key j > i (causal_mask(T, S), top-left)
};

// q (B, T, H*D), k (B, S, H*D), v (B, S, H*Dv) -> out (B, T, H*Dv). For every head h:
//   P_h = softmax(scale * Q_h K_h^T + float_mask) over the keys allowed by the masks  (T, S)
//   out_h = P_h V_h                                                                   (T, Dv)
// scale = 1/sqrt(D) when given 0. A query with no allowed key gets P = 0: its output and
// all gradients through it are 0, never NaN. Differentiable in q, k, v and float_mask;
// twice differentiable (under create_graph the backward is composed of xgrad ops).
// Errors: ShapeError / DTypeError naming 'q', 'k', 'v' or the mask and the shapes.
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t num_heads,
                 const AttentionMasks& masks = {}, double scale = 0);

// Self-attention after one packed projection: qkv (B, T, 3*H*D) = [q | k | v] column
// blocks (as x in_proj_weight^T of torch.nn.MultiheadAttention) -> (B, T, H*D).
Tensor attention_packed(const Tensor& qkv, std::size_t num_heads, const AttentionMasks& masks = {},
                        double scale = 0);

// The same function composed of split_heads, matmul, (masked_)softmax and merge_heads,
// also returning the probabilities P (B, H, T, S) after `transform_weights` (e.g.
// dropout), which is applied to P before P V. Slower; used when weights are requested or
// dropout is active, and as the reference the fused op is tested against.
struct AttentionResult {
  Tensor out;      // (B, T, H*Dv)
  Tensor weights;  // (B, H, T, S)
};
AttentionResult attention_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                                    std::size_t num_heads, const AttentionMasks& masks = {},
                                    double scale = 0,
                                    const std::function<Tensor(const Tensor&)>& transform_weights = nullptr);

}  // namespace xgrad
