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

struct AttentionMasks;  // ops/attention.hpp

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

// The real (non-padding) positions of a padded batch, for running it on those rows only
// (TransformerConfig::skip_padding; BERT-style "unpadding"). From a bool key padding mask
// (B, T), true = padding:
//   index  Int64 (N): the flat positions b*T + t where the mask is false, increasing;
//   pack_rows(x (B, T, F)) = x's rows at index (N, F); unpack_rows(y (N, F)) = (B, T, F) with
//   y's rows at index and zeros at the padding positions. Each is the other's adjoint, so both
//   are differentiable (index_select / index_add). A fully padded batch gives N = 0.
// Errors: DTypeError unless the mask is bool, ShapeError unless it is (B, T); ShapeError in
// pack_rows / unpack_rows for an x of another (B, T) or N, naming the op and the shapes.
struct UnpaddedRows {
  static UnpaddedRows of(const Tensor& key_padding_mask);
  Tensor pack_rows(const Tensor& x) const;
  Tensor unpack_rows(const Tensor& y) const;
  std::size_t rows() const { return index.numel(); }
  Tensor index;
  Tensor key_padding_mask;  // a copy of the (B, T) mask
  std::size_t batch = 0, length = 0;
  // When every batch's padding is trailing (positions [0, L_b) real, the rest padding): L_b per
  // batch, and the rows are attention_packed_rows' layout (MultiHeadAttention::forward_unpadded
  // then attends on them in place); empty otherwise.
  std::vector<std::size_t> lengths;
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

// Keys and values already projected by MultiHeadAttention::project_key_value, batch-first,
// for attending to one memory many times (the encoder output in an encoder-decoder's
// cross-attention: projected once per source sequence, reused at every decoding step).
struct ProjectedKeyValues {
  Tensor k;                    // (B, S', E): key W_k^T + b_k, then bias_k / a zero key appended
  Tensor v;                    // (B, S', E)
  std::size_t extra_keys = 0;  // keys appended by add_bias_kv / add_zero_attn: S' = S + extra_keys
  bool unbatched = false;      // projected from unbatched (S, kdim) input (B = 1)
  std::size_t batch() const { return k.defined() ? k.shape()[0] : 0; }
  std::size_t keys() const { return k.defined() ? k.shape()[1] - extra_keys : 0; }  // S
};

// One self-attention layer's keys and values of the positions decoded so far, for
// incremental (autoregressive) decoding: MultiHeadAttention::forward_cached appends the new
// positions' projected keys and values in place and attends over all of them, so a new
// token costs one position's projections instead of the whole prefix's.
//
// Storage: (B, allocated, E) key and value buffers, zero beyond length(). The buffers grow
// geometrically (x2, at least 16 positions, capped at max_len()), so appending t positions costs
// O(t E) amortised and nothing is re-concatenated; reserve(n) allocates n positions up front.
// Attention reads the buffers in place (positions >= length() are masked), so a step costs
// O(allocated E) <= 2 O(length E) for the scores. Every row of the batch has the same length.
// Values are copies: a cache records no graph (forward_cached runs without autograd).
class KVCache {
 public:
  explicit KVCache(Count max_len);  // the most positions the cache may hold (>= 1)
  std::size_t length() const { return length_; }
  std::size_t max_len() const { return max_len_; }
  std::size_t allocated() const { return k_.defined() ? k_.shape()[1] : 0; }
  std::size_t batch() const { return k_.defined() ? k_.shape()[0] : 0; }  // 0 before the first append
  bool empty() const { return length_ == 0; }
  // The cached keys / values (B, length, E): copies, for inspection.
  Tensor keys() const;
  Tensor values() const;
  // The buffers themselves (B, allocated, E), undefined before the first append.
  const Tensor& key_storage() const { return k_; }
  const Tensor& value_storage() const { return v_; }
  // k, v (B, t, E) of one float dtype written at positions [length, length + t). The first
  // append fixes B, E and the dtype (until clear()). ValueError when length + t > max_len (naming
  // the limit), ShapeError / DTypeError for a batch, width or dtype other than the cache's.
  void append(const Tensor& k, const Tensor& v);
  // Allocates room for n positions (n <= max_len, ValueError otherwise) for batch B, width E,
  // dtype; keeps the cached positions. Later appends up to n positions allocate nothing.
  // ShapeError for a batch or width, DTypeError for a dtype other than the cache's.
  void reserve(std::size_t n, std::size_t B, std::size_t E, DType dtype);
  // Forgets every position (length 0, storage released).
  void clear();
  // Beam search: row i of the new cache is row rows[i] of this one (rows may repeat or drop
  // rows; the batch becomes rows.size()). IndexError for a row >= batch(). Nothing to do
  // before the first append (no storage: the next append sets the batch).
  void select_rows(const std::vector<std::size_t>& rows);

 private:
  void grow(std::size_t needed);
  std::size_t max_len_, length_ = 0;
  Tensor k_, v_;
};

// Rows rows[0], rows[1], ... of x along axis 0, any dtype (a copy; records no graph):
// the batch reorder of beam search. IndexError naming op for a row >= x.shape()[0].
Tensor select_rows(const char* op, const Tensor& x, const std::vector<std::size_t>& rows);

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

  // --- incremental decoding ----------------------------------------------------------------
  // The projected keys and values of (key, value) in this module's layout (batch_first or
  // not, or unbatched (S, kdim)), for forward_projected: computed once, attended many times.
  // Differentiable (the projections are ordinary ops). Errors as forward's for key and value.
  ProjectedKeyValues project_key_value(const Tensor& key, const Tensor& value) const;
  // forward(query, key, value, options) with kv = project_key_value(key, value), without
  // projecting key and value again: the same output (to float rounding). The masks are those
  // of forward for S = kv.keys() keys; query's layout must be kv's (batched with the same B,
  // or unbatched for unbatched kv). Differentiable in query, kv and the parameters.
  AttentionOutput forward_projected(const Tensor& query, const ProjectedKeyValues& kv,
                                    const AttentionOptions& options = {});
  // Self-attention of x (B, t, E) in this module's layout (or unbatched (t, E)) over the
  // cache's length() earlier positions and x's own t positions: x's keys and values are
  // appended to the cache, then every new query attends to the positions allowed by
  //   options.is_causal       query i (position length + i) sees positions <= length + i
  //                           (causal_mask(t, length + t, CausalAlign::BottomRight)), else all;
  //   options.key_padding_mask bool (B, length + t) (unbatched (length + t)): true = padding,
  //                           over every cached and new position.
  // With is_causal, feeding a sequence in pieces gives forward(sequence, {is_causal = true})
  // piece by piece, to float rounding. attn_mask and float key padding masks are refused
  // (ValueError), as are add_bias_kv and add_zero_attn (their extra keys belong to no
  // position). Runs without autograd (NoGradGuard): the output does not require grad.
  // need_weights: (B, t, length + t) / (B, H, t, length + t) weights over the positions.
  // Errors: ValueError when length + t would exceed the cache's max_len (nothing appended),
  // ShapeError / DTypeError for x or a mask, or a batch other than the cache's.
  AttentionOutput forward_cached(const Tensor& x, KVCache& cache, const AttentionOptions& options = {});
  // forward_cached's check that cache (if it holds storage) is this module's: DTypeError naming
  // op for keys of another dtype, ShapeError for another width. For callers that must check
  // before they change anything (a model's step runs dropout before its first layer's cache).
  void check_cache(const char* op, const KVCache& cache) const;

  // Self-attention of a padded batch run on its real positions only: x (N, E) holds the rows
  // of the batch-first (B, T, E) input at rows.index (rows.pack_rows of it). Returns (N, E):
  // forward's output at those positions for a batch whose keys are masked by
  // rows.key_padding_mask (to float rounding); its padding rows never reach a query.
  // The projections run on the N rows; the attention op on (B, T) with q, k, v zero at the
  // padding rows. options: attn_mask and is_causal as forward's; options.key_padding_mask
  // must be undefined (the mask is rows'; ValueError otherwise). need_weights, active dropout
  // on the weights, separate q/k/v weights, add_bias_kv or add_zero_attn run forward on the
  // unpacked batch instead (same result, no saving); the weights are then forward's (B, ...).
  // Errors: ShapeError naming the op unless x is (rows.rows(), E); as forward's for the masks.
  AttentionOutput forward_unpadded(const Tensor& x, const UnpaddedRows& rows, const AttentionOptions& options = {});

  MultiHeadAttentionOptions options;
  std::size_t embed_dim, num_heads, head_dim, kdim, vdim;
  Tensor in_proj_weight;                               // packed (3E, E), or undefined
  Tensor q_proj_weight, k_proj_weight, v_proj_weight;  // separate, or undefined
  Tensor in_proj_bias;                                 // (3E) or undefined
  Tensor bias_k, bias_v;                               // (1, 1, E) or undefined
  Linear out_proj;
  Dropout attn_drop;

 private:
  Tensor project(std::size_t which, const Tensor& x) const;  // 0: q, 1: k, 2: v; x batch-first
  AttentionOutput attend(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionMasks& masks,
                         const AttentionOptions& options, bool unbatched, std::size_t weight_keys);
};

}  // namespace xgrad
