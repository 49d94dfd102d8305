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
};

// Shared body: token embedding + positions + blocks + final LayerNorm.
class TransformerBody : public Module {
 public:
  explicit TransformerBody(const TransformerConfig& config);
  // tokens (B, T) int64 -> hidden (B, T, E)
  Tensor forward(const Tensor& tokens, const AttentionOptions& options);
  Tensor operator()(const Tensor& tokens, const AttentionOptions& options) { return forward(tokens, options); }
  std::vector<Tensor> attention_weights() const;  // per layer, from the last forward with need_weights
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
  // key_padding_mask (B, T) bool, true = padding; may be undefined.
  Tensor forward(const Tensor& tokens, const Tensor& key_padding_mask = Tensor(),
                 bool need_weights = false);
  Tensor operator()(const Tensor& tokens, const Tensor& key_padding_mask = Tensor(), bool need_weights = false) { return forward(tokens, key_padding_mask, need_weights); }
  TransformerBody body;
  Linear head;
};

// GPT-style causal decoder: logits (B, T, vocab); tied or separate output projection.
class TransformerDecoder : public Module {
 public:
  explicit TransformerDecoder(const TransformerConfig& config);
  Tensor forward(const Tensor& tokens, bool need_weights = false);
  Tensor operator()(const Tensor& tokens, bool need_weights = false) { return forward(tokens, need_weights); }
  TransformerBody body;
  std::unique_ptr<Linear> head;  // null when tied
};

}  // namespace xgrad
