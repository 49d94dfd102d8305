// xgrad/models/attention.hpp — multi-head attention laid out like torch.nn.MultiheadAttention.
//
// Built from MultiHeadAttentionOptions (fluent setters, libtorch style), so PyTorch's
// positional order cannot be silently misread:
//   MultiHeadAttention mha(MultiHeadAttentionOptions(64, 4).dropout(0.1).bias(false), rng);
//
// BATCH-FIRST BY DEFAULT, UNLIKE PyTorch: nn.MultiheadAttention defaults to batch_first=False,
// i.e. (T, B, E). A (T, B, E) tensor ported from PyTorch is read here as (B, T, E) unless the
// options say .batch_first(false).
//   batch_first(true)  (default): query (B, T, E), key (B, S, kdim), value (B, S, vdim) -> (B, T, E)
//   batch_first(false) (PyTorch's default): query (T, B, E), key (S, B, kdim), value (S, B, vdim)
//                      -> output (T, B, E); the weights stay (B, T, S') / (B, H, T, S'), as PyTorch
//   unbatched (either setting), all 2-D: query (T, E), key (S, kdim), value (S, vdim) -> (T, E)
// Parameters (state_dict names and shapes exactly as PyTorch's, so weights move between
// the two unchanged):
//   kdim == vdim == E:  in_proj_weight (3E, E)  [q; k; v rows]
//   otherwise:          q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight (E, vdim)
//   bias:               in_proj_bias (3E), out_proj.bias (E)
//   add_bias_kv:        bias_k (1, 1, E), bias_v (1, 1, E)
//   always:             out_proj.weight (E, E)
//
// Keys and values after projection (S' = S + add_bias_kv + add_zero_attn keys), as PyTorch:
//   add_bias_kv:    k = [k; bias_k], v = [v; bias_v] along the sequence (one more key);
//   add_zero_attn:  then a zero key and a zero value row (one more key, every head);
//   every mask gets a not-masked column for each added key (is_causal too: the added keys
//   are visible to every query).
//
// Masks (all combinable). Boolean masks use **true = not allowed to attend**, as PyTorch's
// nn.MultiheadAttention:
//   attn_mask        bool, or float of the inputs' dtype (added to the scores, -inf = masked):
//                    (T, S), (B*H, T, S) [entry b*H + h = batch b, head h, PyTorch's only
//                    3-D form], or 4-D broadcastable to (B, H, T, S). Unbatched: (T, S) or
//                    (H, T, S). Any other shape is a ShapeError, in particular (B, T, S) even
//                    when B == H (use (B, 1, T, S) for a per-batch mask);
//   key_padding_mask (B, S), unbatched (S): bool (true = padding key), or float of the inputs'
//                    dtype added to the scores of every query (as PyTorch >= 2.0);
//   is_causal        adds causal_mask(T, S) (query i sees keys j <= i).
// The rules live in ops/attention.hpp (attention_masks), shared with the attention op.
// A query row whose keys are all masked gets all-zero attention weights and a zero output
// before out_proj (PyTorch returns NaN there), with zero, finite gradients.
#pragma once
#include "xgrad/models/layers.hpp"

namespace xgrad {

struct AttentionOptions {
  Tensor attn_mask;
  Tensor key_padding_mask;
  bool is_causal = false;
  // Also return the attention weights. Default false, unlike PyTorch's need_weights=True:
  // returned weights keep an extra O(B*H*T*S) tensor (and its graph) alive and force the
  // composed attention (attention_reference) instead of the fused kernel. Set
  // need_weights = true (average_attn_weights = true is PyTorch's default too) for
  // PyTorch's default behaviour; the output is the same either way.
  bool need_weights = false;
  bool average_attn_weights = true;    // weights (B, T, S) averaged over heads, else (B, H, T, S)
};

struct AttentionOutput {
  Tensor output;   // (B, T, E), or (T, B, E) with batch_first(false); unbatched (T, E)
  Tensor weights;  // undefined unless need_weights; (B, T, S') or (B, H, T, S'); unbatched
                   // (T, S') or (H, T, S'); S' counts the keys added by add_bias_kv / add_zero_attn
};

// torch::nn::MultiheadAttentionOptions: required embed_dim, num_heads; the rest by name.
// Sizes are Counts (a double or a bool does not compile); embed_dim, num_heads >= 1 and
// 0 <= dropout < 1 are checked here, kdim, vdim >= 0: ValueError naming MultiHeadAttention.
class MultiHeadAttentionOptions {
 public:
  MultiHeadAttentionOptions(Count embed_dim, Count num_heads)
      : embed_dim_(check_count("MultiHeadAttention", "embed_dim", embed_dim)),
        num_heads_(check_count("MultiHeadAttention", "num_heads", num_heads)) {}
  MultiHeadAttentionOptions& dropout(double p) {  // on the weights
    dropout_ = check_dropout("MultiHeadAttention", "dropout", p);
    return *this;
  }
  MultiHeadAttentionOptions& bias(bool b) { bias_ = b; return *this; }          // in_proj_bias, out_proj.bias
  MultiHeadAttentionOptions& add_bias_kv(bool b) { add_bias_kv_ = b; return *this; }
  MultiHeadAttentionOptions& add_zero_attn(bool b) { add_zero_attn_ = b; return *this; }
  MultiHeadAttentionOptions& kdim(Count d) { kdim_ = check_count("MultiHeadAttention", "kdim", d, 0); return *this; }  // 0 = embed_dim
  MultiHeadAttentionOptions& vdim(Count d) { vdim_ = check_count("MultiHeadAttention", "vdim", d, 0); return *this; }  // 0 = embed_dim
  // false: (T, B, E) / (S, B, kdim) / (S, B, vdim) inputs and (T, B, E) output, PyTorch's default.
  MultiHeadAttentionOptions& batch_first(bool b) { batch_first_ = b; return *this; }
  std::size_t embed_dim() const { return embed_dim_; }
  std::size_t num_heads() const { return num_heads_; }
  double dropout() const { return dropout_; }
  bool bias() const { return bias_; }
  bool add_bias_kv() const { return add_bias_kv_; }
  bool add_zero_attn() const { return add_zero_attn_; }
  std::size_t kdim() const { return kdim_ ? kdim_ : embed_dim_; }
  std::size_t vdim() const { return vdim_ ? vdim_ : embed_dim_; }
  bool batch_first() const { return batch_first_; }

 private:
  std::size_t embed_dim_, num_heads_;
  double dropout_ = 0.0;
  bool bias_ = true, add_bias_kv_ = false, add_zero_attn_ = false, batch_first_ = true;
  std::size_t kdim_ = 0, vdim_ = 0;
};

class MultiHeadAttention : public Module {
 public:
  // Initialised as PyTorch: xavier_uniform in-projection, zero biases, out_proj.weight as
  // nn.Linear, bias_k / bias_v xavier_normal (N(0, 1/E) for a (1, 1, E) tensor).
  // ValueError unless num_heads divides embed_dim and 0 <= dropout < 1.
  MultiHeadAttention(const MultiHeadAttentionOptions& options, Rng& rng);

  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const AttentionOptions& options = {});
  AttentionOutput forward(const Tensor& x, const AttentionOptions& options = {}) {
    return forward(x, x, x, options);
  }
  AttentionOutput operator()(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& o = {}) { return forward(q, k, v, o); }
  AttentionOutput operator()(const Tensor& x, const AttentionOptions& o = {}) { return forward(x, o); }

  MultiHeadAttentionOptions options;
  std::size_t embed_dim, num_heads, head_dim, kdim, vdim;
  Tensor in_proj_weight;                               // packed (3E, E), or undefined
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // separate, or undefined
  Tensor in_proj_bias;                                 // (3E) or undefined
  Tensor bias_k, bias_v;                               // (1, 1, E) or undefined
  Linear out_proj;
  Dropout attn_drop;
};

}  // namespace xgrad
