// xgrad/models/transformer.hpp — pre-LayerNorm Transformer block and two small models.
#pragma once
#include <memory>

#include "xgrad/models/attention.hpp"

namespace xgrad {

// TransformerBlock's settings by name:
//   TransformerBlockOptions(embed_dim, num_heads, ff_hidden).dropout(0.1).bias(false)
// Sizes are Counts: TransformerBlockOptions(64, 4, 0.1) does not compile. embed_dim,
// num_heads, ff_hidden >= 1, num_heads dividing embed_dim and 0 <= dropout < 1 are checked
// here (ValueError naming TransformerBlock and the argument).
class TransformerBlockOptions {
 public:
  TransformerBlockOptions(Count embed_dim, Count num_heads, Count ff_hidden);
  TransformerBlockOptions& dropout(double p) { dropout_ = check_dropout("TransformerBlock", "dropout", p); return *this; }
  // false: no bias parameter anywhere (LayerNorms keep their weight; GPT-2 / nanoGPT bias=False)
  TransformerBlockOptions& bias(bool b) { bias_ = b; return *this; }
  TransformerBlockOptions& gelu_approximate_tanh(bool b) { gelu_tanh_ = b; return *this; }  // FeedForward's GELU
  std::size_t embed_dim() const { return embed_dim_; }
  std::size_t num_heads() const { return num_heads_; }
  std::size_t ff_hidden() const { return ff_hidden_; }
  double dropout() const { return dropout_; }
  bool bias() const { return bias_; }
  bool gelu_approximate_tanh() const { return gelu_tanh_; }

 private:
  std::size_t embed_dim_, num_heads_, ff_hidden_;
  double dropout_ = 0.0;
  bool bias_ = true, gelu_tanh_ = false;
};

// x = x + Dropout(MHA(LN1(x)));  x = x + FF(LN2(x))
class TransformerBlock : public Module {
 public:
  TransformerBlock(const TransformerBlockOptions& options, Rng& rng);
  // x (B, T, E); options carry the masks (need_weights is honoured: see last_weights).
  Tensor forward(const Tensor& x, const AttentionOptions& options = {});
  // Incremental: x (B, t, E) holds the next t positions; attention runs over the cache's
  // positions and x's (MultiHeadAttention::forward_cached; options.is_causal for causality).
  Tensor forward_step(const Tensor& x, KVCache& cache, const AttentionOptions& options);
  // The block on a padded batch's real positions only: x (N, E) = rows.pack_rows of the
  // (B, T, E) input; LayerNorms, projections and the feed-forward run on the N rows
  // (MultiHeadAttention::forward_unpadded). Returns (N, E), forward's rows at rows.index.
  Tensor forward_unpadded(const Tensor& x, const UnpaddedRows& rows, const AttentionOptions& options = {});
  Tensor operator()(const Tensor& x, const AttentionOptions& options = {}) { return forward(x, options); }
  Tensor last_weights;  // (B, H, T, S) or (B, T, S) when options.need_weights
  LayerNorm ln1;
  MultiHeadAttention attn;
  Dropout drop;
  LayerNorm ln2;
  FeedForward ff;
};

enum class PositionalKind { Learned, Sinusoidal };

// Checked by the TransformerBody / Encoder / Decoder constructor before anything is built
// (ValueError "Transformer: config.<field> ..."): vocab_size, max_len, embed_dim, num_heads,
// ff_hidden, num_layers >= 1, num_heads divides embed_dim, 0 <= dropout < 1.
struct TransformerConfig {
  std::size_t vocab_size = 16;
  std::size_t max_len = 64;
  std::size_t embed_dim = 64;
  std::size_t num_heads = 4;
  std::size_t ff_hidden = 256;
  std::size_t num_layers = 2;
  double dropout = 0.0;
  PositionalKind positional = PositionalKind::Learned;
  bool tied_output = false;  // decoder only: logits use the token embedding matrix
  std::uint64_t seed = 0;
  bool bias = true;  // false: no bias parameter in any block, ln_f or the head (GPT-2 style)
  bool gelu_approximate_tanh = false;  // true: GELU's tanh approximation in every block (GPT-2)
  // Encoder only. true: forward with a bool key padding mask runs the embeddings' real
  // positions only through the blocks, ln_f and the head (UnpaddedRows), and the logits at
  // padding positions are 0. With dropout 0 (or in eval mode) the logits elsewhere are those
  // of false (to float rounding), and so are the loss and every gradient of a loss that
  // ignores the padding positions (cross_entropy with ignore_index there); active dropout
  // draws its masks over the N real rows instead of all B*T, so its random numbers differ.
  // The work drops with the share of padding.
  // A loss that reads the padding logits sees constants. need_weights runs as false does.
  // per_sample_gradients stays exact but finds no batch axis in the packed rows, so its Auto
  // method falls back to per-example backwards (reverse model: 629 ms against 31.5 ms with
  // false, benchmarks/bench_functional): keep false for per-sample gradients.
  bool skip_padding = false;
};

// Shared body: token embedding + positions + blocks + final LayerNorm.
class TransformerBody : public Module {
 public:
  explicit TransformerBody(const TransformerConfig& config);
  // tokens (B, T) int64 -> hidden (B, T, E)
  Tensor forward(const Tensor& tokens, const AttentionOptions& options);
  Tensor operator()(const Tensor& tokens, const AttentionOptions& options) { return forward(tokens, options); }
  std::vector<Tensor> attention_weights() const;  // per layer, from the last forward with need_weights
  // forward's hidden states at the real positions only: (rows.rows(), E), rows of tokens (B, T)
  // (TransformerConfig::skip_padding). ShapeError unless rows are of tokens' (B, T).
  Tensor forward_unpadded(const Tensor& tokens, const UnpaddedRows& rows, const AttentionOptions& options = {});
  // Token embeddings plus the positions [offset, offset + T) of tokens (B, T) int64, before
  // emb_drop (forward uses offset 0). ValueError when offset + T > config.max_len.
  Tensor embed(const Tensor& tokens, std::size_t offset = 0) const;
  TransformerConfig config;
  Rng rng;
  Embedding tok_emb;
  std::unique_ptr<LearnedPositionalEncoding> pos_learned;
  std::unique_ptr<SinusoidalPositionalEncoding> pos_sin;
  Dropout emb_drop;
  std::vector<std::unique_ptr<TransformerBlock>> blocks;
  LayerNorm ln_f;
};

// Bidirectional encoder with a per-token classification head: logits (B, T, vocab).
class TransformerEncoder : public Module {
 public:
  explicit TransformerEncoder(const TransformerConfig& config);
  // key_padding_mask (B, T) bool, true = padding; may be undefined. With
  // config.skip_padding, a bool mask runs the real positions only (see TransformerConfig).
  Tensor forward(const Tensor& tokens, const Tensor& key_padding_mask = Tensor(),
                 bool need_weights = false);
  Tensor operator()(const Tensor& tokens, const Tensor& key_padding_mask = Tensor(), bool need_weights = false) { return forward(tokens, key_padding_mask, need_weights); }
  TransformerBody body;
  Linear head;
};

// The keys and values of every block of a TransformerDecoder (one KVCache per block), for
// TransformerDecoder::forward_step; make it with TransformerDecoder::make_cache().
class DecoderKVCache {
 public:
  DecoderKVCache(Count num_layers, Count max_len);
  std::size_t length() const { return layers.front().length(); }  // positions fed so far = the next position
  std::size_t max_len() const { return layers.front().max_len(); }
  std::size_t batch() const { return layers.front().batch(); }       // 0 before the first step
  void clear();                                                      // back to length 0
  void select_rows(const std::vector<std::size_t>& rows);            // every layer's KVCache::select_rows
  std::vector<KVCache> layers;
};

// GPT-style causal decoder: logits (B, T, vocab); tied or separate output projection.
//
// Incremental decoding (sampling, greedy search) with a key/value cache:
//   DecoderKVCache cache = model.make_cache();
//   Tensor logits = model.forward_step(prompt, cache);      // (B, T0) -> (B, T0, V); cache.length() == T0
//   logits = model.forward_step(next_tokens, cache);        // (B, 1) -> (B, 1, V), position T0
// Each step computes only the new positions (their projections, feed-forward and head) and
// attends over the cached keys; the positions are offset by cache.length(). The logits equal
// forward(whole sequence)'s rows for those positions to float rounding (tests/test_kv_cache.cpp).
// decoding.hpp's generate() runs the loop with any next-token rule (greedy, sampling).
class TransformerDecoder : public Module {
 public:
  explicit TransformerDecoder(const TransformerConfig& config);
  Tensor forward(const Tensor& tokens, bool need_weights = false);
  // An empty cache for this model: config.num_layers layers of at most config.max_len positions.
  DecoderKVCache make_cache() const;
  // tokens (B, t) int64, t >= 1, at positions [cache.length(), cache.length() + t): their logits
  // (B, t, vocab), causal over every cached position and each other. Runs without autograd
  // (the logits do not require grad; train with forward). Dropout follows train()/eval() as in
  // forward: call eval() first for deterministic decoding. Errors (nothing is changed):
  // ValueError when cache.length() + t > config.max_len (naming the limit) or the cache is
  // not of this model's shape; DTypeError / ShapeError for tokens; ShapeError when B differs
  // from the cache's batch; DTypeError / ShapeError for a cache holding keys of another dtype /
  // width (the model converted after caching); IndexError for a token outside [0, vocab_size).
  Tensor forward_step(const Tensor& tokens, DecoderKVCache& cache);
  Tensor operator()(const Tensor& tokens, bool need_weights = false) { return forward(tokens, need_weights); }
  TransformerBody body;
  std::unique_ptr<Linear> head;  // null when tied

 private:
  Tensor logits(const Tensor& hidden) const;
};

}  // namespace xgrad
