// xgrad/models/attention.hpp — multi-head attention laid out like torch.nn.MultiheadAttention.
//
// Inputs are batch-first: query (B, T, E), key (B, S, kdim), value (B, S, vdim).
// Parameters (state_dict names and shapes exactly as PyTorch's, so weights move between
// the two unchanged):
//   kdim == vdim == E:  in_proj_weight (3E, E)  [q; k; v rows]
//   otherwise:          q_proj_weight (E, E), k_proj_weight (E, kdim), v_proj_weight (E, vdim)
//   bias:               in_proj_bias (3E), out_proj.bias (E)
//   always:             out_proj.weight (E, E)
//
// Masks (all combinable). Boolean masks use **true = not allowed to attend**, as PyTorch's
// nn.MultiheadAttention:
//   attn_mask        (T, S), (B*H, T, S) or broadcastable to (B, H, T, S); bool, or float
//                    (added to the scores, -inf = masked);
//   key_padding_mask (B, S) bool, true = padding key;
//   is_causal        adds causal_mask(T, S) (query i sees keys j <= i).
// A query row whose keys are all masked gets all-zero attention weights and a zero output
// before out_proj (PyTorch returns NaN there), with zero, finite gradients.
#pragma once
#include "xgrad/models/layers.hpp"

namespace xgrad {

struct AttentionOptions {
  Tensor attn_mask;
  Tensor key_padding_mask;
  bool is_causal = false;
  bool need_weights = false;           // also return the attention weights
  bool average_attn_weights = true;    // weights (B, T, S) averaged over heads, else (B, H, T, S)
};

struct AttentionOutput {
  Tensor output;   // (B, T, E)
  Tensor weights;  // undefined unless need_weights
};

class MultiHeadAttention : public Module {
 public:
  // kdim / vdim = 0 mean embed_dim. Initialised as PyTorch: xavier_uniform in-projection,
  // zero biases, out_proj.weight as nn.Linear.
  MultiHeadAttention(std::size_t embed_dim, std::size_t num_heads, bool bias, double dropout,
                     Rng& rng, std::size_t kdim = 0, std::size_t vdim = 0);

  AttentionOutput forward(const Tensor& query, const Tensor& key, const Tensor& value,
                          const AttentionOptions& options = {});
  AttentionOutput forward(const Tensor& x, const AttentionOptions& options = {}) {
    return forward(x, x, x, options);
  }

  std::size_t embed_dim, num_heads, head_dim, kdim, vdim;
  Tensor in_proj_weight;                               // packed (3E, E), or undefined
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // separate, or undefined
  Tensor in_proj_bias;                                 // (3E) or undefined
  Linear out_proj;
  Dropout attn_drop;
};

}  // namespace xgrad
