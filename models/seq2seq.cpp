// Encoder-decoder Transformer (torch.nn.Transformer) and the token-level Seq2SeqTransformer.
#include "xgrad/models/seq2seq.hpp"

#include <cmath>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/ops/ops.hpp"

namespace xgrad {
namespace {

constexpr const char* kLayer = "TransformerLayer";
constexpr const char* kSeq2Seq = "Seq2SeqTransformer";

// linear2(dropout(activation(linear1(x))))
Tensor feed_forward(const Linear& linear1, Dropout& dropout, const Linear& linear2, TransformerActivation act,
                    const Tensor& x) {
  const Tensor h = linear1.forward(x);
  return linear2.forward(dropout.forward(act == TransformerActivation::ReLU ? relu(h) : gelu(h)));
}

MultiHeadAttentionOptions attention_options(const TransformerLayerOptions& o) {
  return MultiHeadAttentionOptions(o.d_model(), o.nhead()).dropout(o.dropout()).batch_first(o.batch_first());
}

LayerNormOptions norm_options(const TransformerLayerOptions& o) {
  return LayerNormOptions(o.d_model()).eps(o.layer_norm_eps());
}

// A sublayer f with its residual connection: x + f(norm(x)) with norm_first (pre-LN), else
// norm(x + f(x)) (post-LN, torch's default).
template <class Sublayer>
Tensor residual(bool norm_first, const LayerNorm& norm, const Tensor& x, Sublayer&& f) {
  return norm_first ? add(x, f(norm.forward(x))) : norm.forward(add(x, f(x)));
}

void check_tokens(const char* arg, const Tensor& tokens) {
  if (!tokens.defined() || tokens.dtype() != DType::Int64)
    throw_error<DTypeError>(kSeq2Seq, "argument '", arg, "' must be (B, L) int64, got ",
                            tokens.defined() ? dtype_name(tokens.dtype()) : "an undefined tensor",
                            tokens.defined() ? " of shape " + shape_str(tokens.shape()) : "");
  check_rank(kSeq2Seq, arg, tokens, 2, "(B, L)");
  if (tokens.shape()[1] == 0) throw_error<ShapeError>(kSeq2Seq, "argument '", arg, "' ", tokens.shape(), " holds no token");
}

}  // namespace

// --- options ---------------------------------------------------------------------------------

TransformerLayerOptions::TransformerLayerOptions(Count d_model, Count nhead)
    : d_model_(check_count(kLayer, "d_model", d_model)), nhead_(check_count(kLayer, "nhead", nhead)) {
  if (d_model_ % nhead_ != 0)
    throw_error<ValueError>(kLayer, "argument 'd_model' ", d_model_, " must be divisible by argument 'nhead' ", nhead_);
}

TransformerLayerOptions& TransformerLayerOptions::dim_feedforward(Count n) {
  dim_feedforward_ = check_count(kLayer, "dim_feedforward", n);
  return *this;
}

TransformerLayerOptions& TransformerLayerOptions::dropout(double p) {
  dropout_ = check_dropout(kLayer, "dropout", p);
  return *this;
}

TransformerLayerOptions& TransformerLayerOptions::layer_norm_eps(double eps) {
  if (!(eps > 0) || !std::isfinite(eps))
    throw_error<ValueError>(kLayer, "argument 'layer_norm_eps' must be finite and > 0, got ", eps);
  eps_ = eps;
  return *this;
}

TransformerStackOptions::TransformerStackOptions(const TransformerLayerOptions& layer, Count num_layers)
    : layer_(layer), num_layers_(check_count("TransformerStack", "num_layers", num_layers)) {}

TransformerOptions& TransformerOptions::num_encoder_layers(Count n) {
  encoder_layers_ = check_count("Transformer", "num_encoder_layers", n);
  return *this;
}

TransformerOptions& TransformerOptions::num_decoder_layers(Count n) {
  decoder_layers_ = check_count("Transformer", "num_decoder_layers", n);
  return *this;
}

Seq2SeqOptions::Seq2SeqOptions(Count src_vocab, Count tgt_vocab, Count d_model, Count nhead)
    : src_vocab_(check_count(kSeq2Seq, "src_vocab", src_vocab)),
      tgt_vocab_(check_count(kSeq2Seq, "tgt_vocab", tgt_vocab)),
      transformer_(d_model, nhead) {}

Seq2SeqOptions& Seq2SeqOptions::max_src_len(Count n) {
  max_src_ = check_count(kSeq2Seq, "max_src_len", n);
  return *this;
}

Seq2SeqOptions& Seq2SeqOptions::max_tgt_len(Count n) {
  max_tgt_ = check_count(kSeq2Seq, "max_tgt_len", n);
  return *this;
}

// --- layers ----------------------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(const TransformerLayerOptions& o, Rng& rng)
    : options(o),
      self_attn(attention_options(o), rng),
      linear1(o.d_model(), o.dim_feedforward(), true, rng),
      dropout(o.dropout(), rng()),
      linear2(o.dim_feedforward(), o.d_model(), true, rng),
      norm1(norm_options(o)),
      norm2(norm_options(o)),
      dropout1(o.dropout(), rng()),
      dropout2(o.dropout(), rng()) {
  register_module("self_attn", &self_attn);
  register_module("linear1", &linear1);
  register_module("dropout", &dropout);
  register_module("linear2", &linear2);
  register_module("norm1", &norm1);
  register_module("norm2", &norm2);
  register_module("dropout1", &dropout1);
  register_module("dropout2", &dropout2);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const AttentionOptions& sa_options) {
  auto sa = [&](const Tensor& x) {
    AttentionOutput a = self_attn.forward(x, sa_options);
    last_self_attn_weights = a.weights;
    return dropout1.forward(a.output);
  };
  auto ff = [&](const Tensor& x) {
    return dropout2.forward(feed_forward(linear1, dropout, linear2, options.activation(), x));
  };
  const Tensor x = residual(options.norm_first(), norm1, src, sa);
  return residual(options.norm_first(), norm2, x, ff);
}

TransformerDecoderLayer::TransformerDecoderLayer(const TransformerLayerOptions& o, Rng& rng)
    : options(o),
      self_attn(attention_options(o), rng),
      multihead_attn(attention_options(o), rng),
      linear1(o.d_model(), o.dim_feedforward(), true, rng),
      dropout(o.dropout(), rng()),
      linear2(o.dim_feedforward(), o.d_model(), true, rng),
      norm1(norm_options(o)),
      norm2(norm_options(o)),
      norm3(norm_options(o)),
      dropout1(o.dropout(), rng()),
      dropout2(o.dropout(), rng()),
      dropout3(o.dropout(), rng()) {
  register_module("self_attn", &self_attn);
  register_module("multihead_attn", &multihead_attn);
  register_module("linear1", &linear1);
  register_module("dropout", &dropout);
  register_module("linear2", &linear2);
  register_module("norm1", &norm1);
  register_module("norm2", &norm2);
  register_module("norm3", &norm3);
  register_module("dropout1", &dropout1);
  register_module("dropout2", &dropout2);
  register_module("dropout3", &dropout3);
}

// sa(x), ca(x): the self- and cross-attention outputs (before dropout1 / dropout2).
template <class SelfAttention, class CrossAttention>
Tensor TransformerDecoderLayer::run(const Tensor& tgt, SelfAttention&& sa, CrossAttention&& ca) {
  auto self_block = [&](const Tensor& x) {
    AttentionOutput a = sa(x);
    last_self_attn_weights = a.weights;
    return dropout1.forward(a.output);
  };
  auto cross_block = [&](const Tensor& x) {
    AttentionOutput a = ca(x);
    last_cross_attn_weights = a.weights;
    return dropout2.forward(a.output);
  };
  auto ff = [&](const Tensor& x) {
    return dropout3.forward(feed_forward(linear1, dropout, linear2, options.activation(), x));
  };
  Tensor x = residual(options.norm_first(), norm1, tgt, self_block);
  x = residual(options.norm_first(), norm2, x, cross_block);
  return residual(options.norm_first(), norm3, x, ff);
}

Tensor TransformerDecoderLayer::forward(const Tensor& tgt, const Tensor& memory, const AttentionOptions& sa_options,
                                        const AttentionOptions& ca_options) {
  return run(
      tgt, [&](const Tensor& x) { return self_attn.forward(x, sa_options); },
      [&](const Tensor& x) { return multihead_attn.forward(x, memory, memory, ca_options); });
}

Tensor TransformerDecoderLayer::forward_step(const Tensor& tgt, KVCache& self_cache, const ProjectedKeyValues& memory_kv,
                                             const AttentionOptions& sa_options, const AttentionOptions& ca_options) {
  NoGradGuard no_grad;
  return run(
      tgt, [&](const Tensor& x) { return self_attn.forward_cached(x, self_cache, sa_options); },
      [&](const Tensor& x) { return multihead_attn.forward_projected(x, memory_kv, ca_options); });
}

// --- stacks ----------------------------------------------------------------------------------

TransformerEncoderStack::TransformerEncoderStack(const TransformerStackOptions& o, Rng& rng) {
  for (std::size_t i = 0; i < o.num_layers(); ++i) {
    layers.push_back(std::make_unique<TransformerEncoderLayer>(o.layer(), rng));
    register_module("layers." + std::to_string(i), layers.back().get());
  }
  if (o.final_norm()) {
    norm = std::make_unique<LayerNorm>(norm_options(o.layer()));
    register_module("norm", norm.get());
  }
}

Tensor TransformerEncoderStack::forward(const Tensor& src, const AttentionOptions& self_attn) {
  Tensor x = src;
  for (auto& l : layers) x = l->forward(x, self_attn);
  return norm ? norm->forward(x) : x;
}

std::vector<Tensor> TransformerEncoderStack::self_attention_weights() const {
  std::vector<Tensor> w;
  for (const auto& l : layers) w.push_back(l->last_self_attn_weights);
  return w;
}

TransformerDecoderStack::TransformerDecoderStack(const TransformerStackOptions& o, Rng& rng) {
  for (std::size_t i = 0; i < o.num_layers(); ++i) {
    layers.push_back(std::make_unique<TransformerDecoderLayer>(o.layer(), rng));
    register_module("layers." + std::to_string(i), layers.back().get());
  }
  if (o.final_norm()) {
    norm = std::make_unique<LayerNorm>(norm_options(o.layer()));
    register_module("norm", norm.get());
  }
}

Tensor TransformerDecoderStack::forward(const Tensor& tgt, const Tensor& memory, const AttentionOptions& self_attn,
                                        const AttentionOptions& cross_attn) {
  Tensor x = tgt;
  for (auto& l : layers) x = l->forward(x, memory, self_attn, cross_attn);
  return norm ? norm->forward(x) : x;
}

std::vector<Tensor> TransformerDecoderStack::self_attention_weights() const {
  std::vector<Tensor> w;
  for (const auto& l : layers) w.push_back(l->last_self_attn_weights);
  return w;
}

std::vector<Tensor> TransformerDecoderStack::cross_attention_weights() const {
  std::vector<Tensor> w;
  for (const auto& l : layers) w.push_back(l->last_cross_attn_weights);
  return w;
}

bool detail::reselect_sources(const char* op, std::vector<std::size_t>& sources, const std::vector<std::size_t>& rows) {
  std::vector<std::size_t> new_sources(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= sources.size())
      throw_error<IndexError>(op, "row ", rows[i], " (entry ", i, " of 'rows') is out of range for ", sources.size(),
                              " rows");
    new_sources[i] = sources[rows[i]];
  }
  if (new_sources == sources) return false;
  sources = std::move(new_sources);
  return true;
}

void TransformerDecoderCache::select_rows(const std::vector<std::size_t>& rows) {
  const char* op = "TransformerDecoderCache::select_rows";
  if (!memory.empty() && memory.front().unbatched && rows.size() != 1)
    throw_error<ValueError>(op, "the cache was made from unbatched memory (one row) and 'rows' has ", rows.size(),
                            " entries; make it from batched memory (1, S, E) to expand it");
  if (detail::reselect_sources(op, sources, rows)) {  // some row attends to another source now
    for (auto& m : memory) {
      m.k = xgrad::select_rows(op, m.k, rows);
      m.v = xgrad::select_rows(op, m.v, rows);
    }
    if (memory_key_padding_mask.defined())
      memory_key_padding_mask = xgrad::select_rows(op, memory_key_padding_mask, rows);
  }
  for (auto& c : self_attn) c.select_rows(rows);
}

TransformerDecoderCache TransformerDecoderStack::make_cache(const Tensor& memory, const Tensor& memory_key_padding_mask,
                                                            Count max_len) const {
  const char* op = "TransformerDecoderStack::make_cache";
  const std::size_t n = check_count(op, "max_len", max_len);
  NoGradGuard no_grad;
  TransformerDecoderCache cache;
  for (const auto& l : layers) {
    cache.self_attn.emplace_back(n);
    cache.memory.push_back(l->multihead_attn.project_key_value(memory, memory));
  }
  cache.sources.resize(cache.memory.front().batch());
  for (std::size_t i = 0; i < cache.sources.size(); ++i) cache.sources[i] = i;
  if (memory_key_padding_mask.defined()) {
    const ProjectedKeyValues& kv = cache.memory.front();
    const Shape expected = kv.unbatched ? Shape{kv.keys()} : Shape{kv.batch(), kv.keys()};
    if (memory_key_padding_mask.dtype() != DType::Bool)
      throw_error<DTypeError>(op, "argument 'memory_key_padding_mask' must be bool (true = padding), got ",
                              dtype_name(memory_key_padding_mask.dtype()));
    check_shape(op, "memory_key_padding_mask", memory_key_padding_mask, expected, kv.unbatched ? "(S)" : "(B, S)");
    cache.memory_key_padding_mask = memory_key_padding_mask;
  }
  return cache;
}

Tensor TransformerDecoderStack::forward_step(const Tensor& tgt, TransformerDecoderCache& cache,
                                             const Tensor& tgt_key_padding_mask) {
  const char* op = "TransformerDecoderStack::forward_step";
  if (cache.self_attn.size() != layers.size() || cache.memory.size() != layers.size())
    throw_error<ValueError>(op, "the cache has ", cache.self_attn.size(), " layers; this decoder has ", layers.size(),
                            " (use make_cache())");
  check_float(op, "tgt", tgt);
  const auto& o = layers.front()->options;
  const bool unbatched = tgt.dim() == 2;
  if (tgt.dim() != (unbatched ? 2u : 3u) || unbatched != cache.memory.front().unbatched)
    throw_error<ShapeError>(op, "argument 'tgt' ", tgt.shape(), " must be ",
                            cache.memory.front().unbatched ? "unbatched (t, E), as the memory" :
                            o.batch_first() ? "(B, t, E)" : "(t, B, E)");
  const std::size_t t = tgt.shape()[unbatched || !o.batch_first() ? 0 : 1];
  const std::size_t B = unbatched ? 1 : tgt.shape()[o.batch_first() ? 0 : 1], L = cache.length();
  if (B != cache.batch())
    throw_error<ShapeError>(op, "argument 'tgt' ", tgt.shape(), " has a batch of ", B, " but the memory has ",
                            cache.batch());
  if (t > cache.max_len() - L)
    throw_error<ValueError>(op, "the cache holds ", L, " positions and tgt adds ", t, ": ", L + t,
                            " would exceed its max_len ", cache.max_len());
  AttentionOptions sa, ca;
  sa.is_causal = true;
  sa.key_padding_mask = tgt_key_padding_mask;
  ca.key_padding_mask = cache.memory_key_padding_mask;
  Tensor x = tgt;
  for (std::size_t i = 0; i < layers.size(); ++i)
    x = layers[i]->forward_step(x, cache.self_attn[i], cache.memory[i], sa, ca);
  NoGradGuard no_grad;
  return norm ? norm->forward(x) : x;
}

// --- Transformer -----------------------------------------------------------------------------

Transformer::Transformer(const TransformerOptions& o, Rng& rng)
    : options(o),
      encoder(TransformerStackOptions(o.layer(), o.num_encoder_layers()).final_norm(true), rng),
      decoder(TransformerStackOptions(o.layer(), o.num_decoder_layers()).final_norm(true), rng) {
  register_module("encoder", &encoder);
  register_module("decoder", &decoder);
  // torch.nn.Transformer._reset_parameters: xavier_uniform_ on every parameter of rank > 1;
  // fan_in = size(1), fan_out = size(0) for the 2-D weights here.
  NamedTensors init;
  for (const auto& [name, p] : named_parameters()) {
    if (p.dim() < 2) continue;
    const double bound = std::sqrt(6.0 / double(p.shape()[0] + p.shape()[1]));
    init.emplace_back(name, uniform(p.shape(), -bound, bound, rng, p.dtype()));
  }
  load_parameters(init, /*strict=*/false);
}

Tensor Transformer::forward(const Tensor& src, const Tensor& tgt, const TransformerMasks& m) {
  AttentionOptions enc, sa, ca;
  enc.attn_mask = m.src_mask;
  enc.key_padding_mask = m.src_key_padding_mask;
  sa.attn_mask = m.tgt_mask;
  sa.key_padding_mask = m.tgt_key_padding_mask;
  sa.is_causal = m.tgt_is_causal;
  ca.attn_mask = m.memory_mask;
  ca.key_padding_mask = m.memory_key_padding_mask;
  return decoder.forward(tgt, encoder.forward(src, enc), sa, ca);
}

// --- Seq2SeqTransformer ----------------------------------------------------------------------

namespace {
TransformerOptions batch_first(TransformerOptions o) { return o.batch_first(true); }
}  // namespace

Seq2SeqTransformer::Seq2SeqTransformer(const Seq2SeqOptions& o, Rng& rng)
    : options(o),
      src_emb(o.src_vocab(), o.transformer().layer().d_model(), rng),
      tgt_emb(o.tgt_vocab(), o.transformer().layer().d_model(), rng),
      emb_drop(o.transformer().layer().dropout(), rng()),
      transformer(batch_first(o.transformer()), rng),
      generator(o.transformer().layer().d_model(), o.tgt_vocab(), true, rng) {
  const std::size_t E = o.transformer().layer().d_model();
  if (o.scale_embeddings()) {  // N(0, 1/E) rows, times sqrt(E) in forward: unit variance (fairseq)
    for (Tensor* w : {&src_emb.weight, &tgt_emb.weight}) {
      float* p = w->mutable_data<float>();
      for (std::size_t i = 0; i < w->numel(); ++i) p[i] = float(double(p[i]) / std::sqrt(double(E)));
    }
  }
  register_module("src_emb", &src_emb);
  register_module("tgt_emb", &tgt_emb);
  if (o.positional() == PositionalKind::Learned) {
    src_pos = std::make_unique<LearnedPositionalEncoding>(o.max_src_len(), E, rng);
    tgt_pos = std::make_unique<LearnedPositionalEncoding>(o.max_tgt_len(), E, rng);
    register_module("src_pos", src_pos.get());
    register_module("tgt_pos", tgt_pos.get());
  } else {
    sin_pos = std::make_unique<SinusoidalPositionalEncoding>(std::max(o.max_src_len(), o.max_tgt_len()), E);
  }
  register_module("emb_drop", &emb_drop);
  register_module("transformer", &transformer);
  register_module("generator", &generator);
}

// emb(tokens) [* sqrt(E)] + positions [offset, offset + L), then dropout.
Tensor Seq2SeqTransformer::embed(const Embedding& emb, const LearnedPositionalEncoding* learned, const Tensor& tokens,
                                 std::size_t max_len, std::size_t offset, const char* arg) {
  check_tokens(arg, tokens);
  const std::size_t L = tokens.shape()[1];
  if (L > max_len || offset > max_len - L)
    throw_error<ValueError>(kSeq2Seq, "argument '", arg, "' ", tokens.shape(), offset ? " after " : "",
                            offset ? std::to_string(offset) + " positions" : "", " is longer than the model's max_",
                            arg, "_len ", max_len);
  Tensor x = emb.forward(tokens);
  if (options.scale_embeddings()) x = mul_scalar(x, std::sqrt(double(emb.weight.shape()[1])));
  x = learned ? learned->forward(x, offset) : sin_pos->forward(x, offset);
  return emb_drop.forward(x);
}

Tensor Seq2SeqTransformer::encode(const Tensor& src, const Tensor& src_key_padding_mask) {
  AttentionOptions o;
  o.key_padding_mask = src_key_padding_mask;
  return transformer.encoder.forward(embed(src_emb, src_pos.get(), src, options.max_src_len(), 0, "src"), o);
}

Tensor Seq2SeqTransformer::decode(const Tensor& tgt, const Tensor& memory, const Tensor& memory_key_padding_mask,
                                  const Tensor& tgt_key_padding_mask, bool need_weights) {
  AttentionOptions sa, ca;
  sa.is_causal = true;
  sa.key_padding_mask = tgt_key_padding_mask;
  sa.need_weights = ca.need_weights = need_weights;
  sa.average_attn_weights = ca.average_attn_weights = false;
  ca.key_padding_mask = memory_key_padding_mask;
  const Tensor x = embed(tgt_emb, tgt_pos.get(), tgt, options.max_tgt_len(), 0, "tgt");
  return generator.forward(transformer.decoder.forward(x, memory, sa, ca));
}

TransformerDecoderCache Seq2SeqTransformer::start(const Tensor& memory, const Tensor& memory_key_padding_mask) const {
  return transformer.decoder.make_cache(memory, memory_key_padding_mask, options.max_tgt_len());
}

Tensor Seq2SeqTransformer::step(const Tensor& tgt, TransformerDecoderCache& cache) {
  check_tokens("tgt", tgt);
  auto& layers = transformer.decoder.layers;
  if (cache.self_attn.size() != layers.size() || cache.memory.size() != layers.size() ||
      cache.max_len() != options.max_tgt_len())
    throw_error<ValueError>(kSeq2Seq, "the cache was not made by this model's start()");
  if (tgt.shape()[0] != cache.batch())
    throw_error<ShapeError>(kSeq2Seq, "argument 'tgt' ", tgt.shape(), " has a batch of ", tgt.shape()[0],
                            " but the cache holds ", cache.batch(), " rows");
  for (std::size_t i = 0; i < layers.size(); ++i) layers[i]->self_attn.check_cache(kSeq2Seq, cache.self_attn[i]);
  NoGradGuard no_grad;  // every check is done: the embedding's dropout draw is the first change
  const Tensor x = embed(tgt_emb, tgt_pos.get(), tgt, options.max_tgt_len(), cache.length(), "tgt");
  return generator.forward(transformer.decoder.forward_step(x, cache));
}

}  // namespace xgrad
