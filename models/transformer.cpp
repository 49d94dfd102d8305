// Transformer block and models.
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

Tensor TransformerBlock::forward(const Tensor& x, const AttentionOptions& options) {
  AttentionOutput a = attn.forward(ln1.forward(x), options);
  last_weights = a.weights;
  Tensor h = add(x, drop.forward(a.output));
  return add(h, ff.forward(ln2.forward(h)));
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
  if (!tokens.defined())
    throw_error<DTypeError>("Transformer", "argument 'tokens' must be (B, T) int64, got an undefined tensor");
  if (tokens.dtype() != DType::Int64)
    throw_error<DTypeError>("Transformer", "argument 'tokens' must be (B, T) int64, got ", dtype_name(tokens.dtype()),
                            " of shape ", tokens.shape());
  check_rank("Transformer", "tokens", tokens, 2, "(B, T)");
  Tensor x = tok_emb.forward(tokens);
  x = pos_learned ? pos_learned->forward(x) : pos_sin->forward(x);
  x = emb_drop.forward(x);
  for (auto& b : blocks) x = b->forward(x, options);
  return ln_f.forward(x);
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
  o.key_padding_mask = key_padding_mask;
  o.need_weights = need_weights;
  o.average_attn_weights = false;
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
  Tensor h = body.forward(tokens, o);
  return head ? head->forward(h) : matmul(h, body.tok_emb.weight, false, true);
}

}  // namespace xgrad
