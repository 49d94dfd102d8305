// xgrad/ops/attention.hpp — fused multi-head scaled dot-product attention.
//
// Heads are column blocks of (B, L, H*D) tensors, read in place through GEMM leading
// dimensions: no split/merge copies, and a hand-derived backward (llm.c style) in
// ops/attention.cpp. Memory is linear in the sequence length: the probabilities exist one
// block of 64 query rows at a time; for the backward the forward keeps (B, H, T, 2) row
// statistics (softmax max and 1 / sum) and the backward recomputes each block's
// probabilities from them (FlashAttention's recomputation) — or, when the probabilities its
// row blocks compute (the causal future and padding left out) take at most 32 MiB, keeps
// those instead (the same bits either way).
#pragma once
#include <functional>
#include <vector>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// Every mask is optional. Bool masks use the mask.hpp convention: true = may NOT attend.
// `mask` and `float_mask` take the shapes of check_attention_mask_shape below.
struct AttentionMasks {
  Tensor mask;              // Bool, (T, S), (B*H, T, S) or 4-D broadcastable to (B, H, T, S)
  Tensor key_padding_mask;  // Bool (B, S): true = padding key
  Tensor float_mask;        // q's dtype, shapes as `mask`, added to the scores
  bool is_causal = false;   // query i may not attend key j > i (causal_mask(T, S), top-left)
  // Self-attention over a padded batch whose padding queries are not used (T == S and a
  // key_padding_mask, else ValueError): a query at a padding position attends to nothing, so
  // its output row is 0 and no gradient flows through it, and the queries after a batch's
  // last unpadded position are not computed at all (MultiHeadAttention::forward_unpadded).
  // The fused op never reads q, k, v at trailing padding positions (nor k, v at trailing
  // padding keys in any case), so an inf or NaN there stays out of the result; the composed
  // path (create_graph, weights) multiplies it by 0 and gives NaN, as padding inside does.
  bool skip_padded_queries = false;
};
// Causality is best given as is_causal (no mask tensor is read). A `mask` or constant
// `float_mask` that is causal in content (bool true / additive -inf exactly where j > i, for
// every batch and head it covers) takes the same path: it is dropped and is_causal set, and
// the future key blocks of each row block are skipped; one that masks the future and more
// keeps the rest and gains the skip; one that masks nothing is dropped. Each distinct mask
// (storage, version, shape) is scanned once and remembered (8 masks).

// The one shape rule for attention masks (attention, attention_packed, MultiHeadAttention).
// scores = (B, H, T, S). Accepted shapes of a bool or additive float mask:
//   (T, S)                              shared by every batch and head;
//   (B*H, T, S)                         PyTorch's only 3-D form: entry b*H + h is batch b, head h;
//   4-D broadcastable to (B, H, T, S)   every dim equal or 1.
// Every other shape is a ShapeError naming op, argument, its shape and the accepted shapes
// with their numbers; in particular (B, T, S) and (H, T, S) (ambiguous when B == H), (1, T, S)
// and (S). unbatched = true words the message for MultiHeadAttention's unbatched call
// (B = 1: (T, S) or (H, T, S)). Returns the mask as (T, S) or 4-D (3-D reshaped, same data).
Tensor check_attention_mask_shape(const char* op, const char* arg, const Tensor& mask, const Shape& scores,
                                  bool unbatched = false);

// nn.MultiheadAttention's mask arguments, checked and converted to AttentionMasks for the
// scores (B, H, T, S); nothing is changed when a check throws.
//   attn_mask         bool (true = masked) or float of `dtype` (added to the scores);
//                     shapes of check_attention_mask_shape.
//   key_padding_mask  (B, S), unbatched (S): bool (true = padding key) or float of `dtype`,
//                     added to every query row of its batch (as PyTorch >= 2.0; 1.13 does the
//                     same when attn_mask is absent), i.e. float_mask += kpm as (B, 1, 1, S).
// Errors: DTypeError (other dtypes, float of another dtype), ShapeError (shapes), both naming
// op, the argument and the shapes.
AttentionMasks attention_masks(const char* op, const Tensor& attn_mask, const Tensor& key_padding_mask,
                               bool is_causal, const Shape& scores, DType dtype, bool unbatched = false);

// q (B, T, H*D), k (B, S, H*D), v (B, S, H*Dv) -> out (B, T, H*Dv). For every head h:
//   P_h = softmax(scale * Q_h K_h^T + float_mask) over the keys allowed by the masks  (T, S)
//   out_h = P_h V_h                                                                   (T, Dv)
// scale = 1/sqrt(D) when given 0. A query with no allowed key gets P = 0: its output and
// all gradients through it are 0, never NaN. Differentiable in q, k, v and float_mask;
// twice differentiable (under create_graph the backward is composed of xgrad ops).
// Errors: ShapeError / DTypeError naming 'q', 'k', 'v' or the mask and the shapes; ValueError for
// skip_padded_queries without a key_padding_mask or with T != S. The masks are saved for the
// backward as inputs after q, k, v (qkv): one written in place before it is a GraphError, as
// for any saved input (framework/autograd.hpp).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, std::size_t num_heads,
                 const AttentionMasks& masks = {}, double scale = 0);

// Self-attention after one packed projection: qkv (B, T, 3*H*D) = [q | k | v] column
// blocks (as x in_proj_weight^T of torch.nn.MultiheadAttention) -> (B, T, H*D).
Tensor attention_packed(const Tensor& qkv, std::size_t num_heads, const AttentionMasks& masks = {},
                        double scale = 0);

// Self-attention over a right-padded batch packed without its padding (FlashAttention's
// variable-length form; TransformerConfig::skip_padding): qkv (N, 3*H*D) holds batch b's L_b =
// lengths[b] <= max_len positions as rows [o_b, o_b + L_b), o_b = L_0 + ... + L_{b-1}, N = sum L_b.
// Returns (N, H*D): the rows of attention_packed over the padded (B, max_len, 3*H*D) batch with
// key padding t >= L_b and skip_padded_queries, the same bits, without copying rows into a padded
// batch and back (nor its zero rows). masks: mask, float_mask over (B, H, max_len, max_len) and
// is_causal as for attention_packed. Errors: ShapeError for a qkv that is not (N, 3E) with H
// dividing E or whose N is not the lengths' sum; ValueError for a length over max_len, and for a
// key_padding_mask or skip_padded_queries in masks (the lengths do both); mask errors as attention.
Tensor attention_packed_rows(const Tensor& qkv, const std::vector<std::size_t>& lengths, std::size_t max_len,
                             std::size_t num_heads, const AttentionMasks& masks = {}, double scale = 0);

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
