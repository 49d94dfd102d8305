// Transformer block and models.
#include "xgrad/framework/autograd.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/ops.hpp"

namespace xgrad {

TransformerBlockOptions::TransformerBlockOptions(Count embed_dim, Count num_heads, Count ff_hidden)
    : embed_dim_(check_count("TransformerBlock", "embed_dim", embed_dim)),
      num_heads_(check_count("TransformerBlock", "num_heads", num_heads)),
      ff_hidden_(check_count("TransformerBlock", "ff_hidden", ff_hidden)) {
  if (embed_dim_ % num_heads_ != 0)
    throw_error<ValueError>("TransformerBlock", "argument 'embed_dim' ", embed_dim_,
                            " must be divisible by argument 'num_heads' ", num_heads_);
}

namespace {

const TransformerConfig& checked(const TransformerConfig& c) {
  const char* op = "Transformer";
  const std::pair<const char*, std::size_t> sizes[] = {{"config.vocab_size", c.vocab_size},
                                                       {"config.max_len", c.max_len},
                                                       {"config.embed_dim", c.embed_dim},
                                                       {"config.num_heads", c.num_heads},
                                                       {"config.ff_hidden", c.ff_hidden},
                                                       {"config.num_layers", c.num_layers}};
  for (const auto& s : sizes) check_count(op, s.first, s.second);
  if (c.embed_dim % c.num_heads != 0)
    throw_error<ValueError>(op, "argument 'config.embed_dim' ", c.embed_dim,
                            " must be divisible by argument 'config.num_heads' ", c.num_heads);
  check_dropout(op, "config.dropout", c.dropout);
  return c;
}

}  // namespace

TransformerBlock::TransformerBlock(const TransformerBlockOptions& o, Rng& rng)
    : ln1(LayerNormOptions(o.embed_dim()).bias(o.bias())),
      attn(MultiHeadAttentionOptions(o.embed_dim(), o.num_heads()).dropout(o.dropout()).bias(o.bias()), rng),
      drop(o.dropout(), rng()),
      ln2(LayerNormOptions(o.embed_dim()).bias(o.bias())),
      ff(FeedForwardOptions(o.embed_dim(), o.ff_hidden())
             .dropout(o.dropout())
             .bias(o.bias())
             .gelu_approximate_tanh(o.gelu_approximate_tanh()),
         rng) {
  register_module("ln1", &ln1);
  register_module("attn", &attn);
  register_module("drop", &drop);
  register_module("ln2", &ln2);
  register_module("ff", &ff);
}

namespace {
// x + Dropout(attention), then + FF(LN2(.)): the block after its attention.
Tensor finish_block(TransformerBlock& b, const Tensor& x, const AttentionOutput& a) {
  b.last_weights = a.weights;
  Tensor h = add(x, b.drop.forward(a.output));
  return add(h, b.ff.forward(b.ln2.forward(h)));
}

void check_tokens(const char* op, const Tensor& tokens) {
  if (!tokens.defined())
    throw_error<DTypeError>(op, "argument 'tokens' must be (B, T) int64, got an undefined tensor");
  if (tokens.dtype() != DType::Int64)
    throw_error<DTypeError>(op, "argument 'tokens' must be (B, T) int64, got ", dtype_name(tokens.dtype()),
                            " of shape ", tokens.shape());
  check_rank(op, "tokens", tokens, 2, "(B, T)");
}
}  // namespace

Tensor TransformerBlock::forward(const Tensor& x, const AttentionOptions& options) {
  return finish_block(*this, x, attn.forward(ln1.forward(x), options));
}

Tensor TransformerBlock::forward_unpadded(const Tensor& x, const UnpaddedRows& rows, const AttentionOptions& options) {
  return finish_block(*this, x, attn.forward_unpadded(ln1.forward(x), rows, options));
}

Tensor TransformerBlock::forward_step(const Tensor& x, KVCache& cache, const AttentionOptions& options) {
  return finish_block(*this, x, attn.forward_cached(ln1.forward(x), cache, options));
}

TransformerBody::TransformerBody(const TransformerConfig& c)
    : config(checked(c)), rng(c.seed), tok_emb(c.vocab_size, c.embed_dim, rng), emb_drop(c.dropout, c.seed + 1),
      ln_f(LayerNormOptions(c.embed_dim).bias(c.bias)) {
  register_module("tok_emb", &tok_emb);
  if (c.positional == PositionalKind::Learned) {
    pos_learned = std::make_unique<LearnedPositionalEncoding>(c.max_len, c.embed_dim, rng);
    register_module("pos_emb", pos_learned.get());
  } else {
    pos_sin = std::make_unique<SinusoidalPositionalEncoding>(c.max_len, c.embed_dim);
  }
  register_module("emb_drop", &emb_drop);
  for (std::size_t i = 0; i < c.num_layers; ++i) {
    blocks.push_back(std::make_unique<TransformerBlock>(
        TransformerBlockOptions(c.embed_dim, c.num_heads, c.ff_hidden)
            .dropout(c.dropout)
            .bias(c.bias)
            .gelu_approximate_tanh(c.gelu_approximate_tanh),
        rng));
    register_module("blocks." + std::to_string(i), blocks.back().get());
  }
  register_module("ln_f", &ln_f);
}

Tensor TransformerBody::forward(const Tensor& tokens, const AttentionOptions& options) {
  check_tokens("Transformer", tokens);
  Tensor x = emb_drop.forward(embed(tokens));
  for (auto& b : blocks) x = b->forward(x, options);
  return ln_f.forward(x);
}

Tensor TransformerBody::forward_unpadded(const Tensor& tokens, const UnpaddedRows& rows, const AttentionOptions& options) {
  Tensor x = emb_drop.forward(rows.pack_rows(embed(tokens)));  // (N, E)
  for (auto& b : blocks) x = b->forward_unpadded(x, rows, options);
  return ln_f.forward(x);
}

Tensor TransformerBody::embed(const Tensor& tokens, std::size_t offset) const {
  check_tokens("Transformer", tokens);
  Tensor x = tok_emb.forward(tokens);
  const std::size_t T = tokens.shape()[1];
  if (offset != 0 && (T > config.max_len || offset > config.max_len - T))
    throw_error<ValueError>("Transformer", "positions [", offset, ", ", offset + T, ") of tokens ", tokens.shape(),
                            " exceed config.max_len ", config.max_len);
  return pos_learned ? pos_learned->forward(x, offset) : pos_sin->forward(x, offset);
}

std::vector<Tensor> TransformerBody::attention_weights() const {
  std::vector<Tensor> w;
  for (const auto& b : blocks) w.push_back(b->last_weights);
  return w;
}

TransformerEncoder::TransformerEncoder(const TransformerConfig& c)
    : body(c), head(c.embed_dim, c.vocab_size, c.bias, body.rng) {
  register_module("body", &body);
  register_module("head", &head);
}

Tensor TransformerEncoder::forward(const Tensor& tokens, const Tensor& key_padding_mask, bool need_weights) {
  AttentionOptions o;
  o.need_weights = need_weights;
  o.average_attn_weights = false;
  if (body.config.skip_padding && !need_weights && key_padding_mask.defined() &&
      key_padding_mask.dtype() == DType::Bool && tokens.defined() && key_padding_mask.shape() == tokens.shape()) {
    const UnpaddedRows rows = UnpaddedRows::of(key_padding_mask);
    return rows.unpack_rows(head.forward(body.forward_unpadded(tokens, rows, o)));
  }
  o.key_padding_mask = key_padding_mask;  // other masks: the full batch (and its errors)
  return head.forward(body.forward(tokens, o));
}

TransformerDecoder::TransformerDecoder(const TransformerConfig& c) : body(c) {
  register_module("body", &body);
  if (!c.tied_output) {
    head = std::make_unique<Linear>(c.embed_dim, c.vocab_size, false, body.rng);
    register_module("head", head.get());
  }
}

Tensor TransformerDecoder::forward(const Tensor& tokens, bool need_weights) {
  AttentionOptions o;
  o.is_causal = true;
  o.need_weights = need_weights;
  o.average_attn_weights = false;
  return logits(body.forward(tokens, o));
}

Tensor TransformerDecoder::logits(const Tensor& h) const {
  return head ? head->forward(h) : matmul(h, body.tok_emb.weight, false, true);
}

DecoderKVCache::DecoderKVCache(Count num_layers, Count max_len) {
  const std::size_t n = check_count("DecoderKVCache", "num_layers", num_layers);
  const std::size_t m = check_count("DecoderKVCache", "max_len", max_len);
  layers.reserve(n);
  for (std::size_t i = 0; i < n; ++i) layers.emplace_back(m);
}

void DecoderKVCache::clear() {
  for (auto& l : layers) l.clear();
}

void DecoderKVCache::select_rows(const std::vector<std::size_t>& rows) {
  for (auto& l : layers) l.select_rows(rows);
}

DecoderKVCache TransformerDecoder::make_cache() const { return DecoderKVCache(body.config.num_layers, body.config.max_len); }

Tensor TransformerDecoder::forward_step(const Tensor& tokens, DecoderKVCache& cache) {
  const char* op = "TransformerDecoder::forward_step";
  check_tokens(op, tokens);
  const std::size_t B = tokens.shape()[0], t = tokens.shape()[1], L = cache.layers.empty() ? 0 : cache.length();
  if (cache.layers.size() != body.blocks.size() || cache.max_len() != body.config.max_len)
    throw_error<ValueError>(op, "the cache has ", cache.layers.size(), " layers of max_len ",
                            cache.layers.empty() ? 0 : cache.max_len(), "; this model needs ", body.blocks.size(),
                            " of max_len ", body.config.max_len, " (use make_cache())");
  if (t == 0) throw_error<ShapeError>(op, "argument 'tokens' ", tokens.shape(), " holds no token");
  if (t > body.config.max_len - L)
    throw_error<ValueError>(op, "the cache holds ", L, " positions and tokens ", tokens.shape(), " add ", t, ": ", L + t,
                            " would exceed the model's max_len ", body.config.max_len, " (config.max_len)");
  if (cache.batch() != 0 && cache.batch() != B)
    throw_error<ShapeError>(op, "argument 'tokens' ", tokens.shape(), " has a batch of ", B, " but the cache holds ",
                            cache.batch(), " rows");
  for (std::size_t i = 0; i < body.blocks.size(); ++i) body.blocks[i]->attn.check_cache(op, cache.layers[i]);
  NoGradGuard no_grad;  // every check is done: dropout's draw below is the first change
  Tensor x = body.emb_drop.forward(body.embed(tokens, L));  // IndexError for a bad token: nothing cached yet
  AttentionOptions o;
  o.is_causal = true;
  for (std::size_t i = 0; i < body.blocks.size(); ++i) x = body.blocks[i]->forward_step(x, cache.layers[i], o);
  return logits(body.ln_f.forward(x));
}

}  // namespace xgrad
