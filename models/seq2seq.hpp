// xgrad/models/seq2seq.hpp — the encoder-decoder Transformer of torch.nn.Transformer, and a
// token-level sequence-to-sequence model built on it.
//
//   TransformerEncoderLayer   torch.nn.TransformerEncoderLayer
//   TransformerDecoderLayer   torch.nn.TransformerDecoderLayer
//   TransformerEncoderStack   torch.nn.TransformerEncoder (layers.N + optional final norm)
//   TransformerDecoderStack   torch.nn.TransformerDecoder
//   Transformer               torch.nn.Transformer (encoder + decoder, both with final norms)
//   Seq2SeqTransformer        embeddings + positions + Transformer + generator Linear, with
//                             incremental decoding (decoding.hpp: greedy_decode, beam_search)
// (xgrad's TransformerEncoder / TransformerDecoder in transformer.hpp are its own small
// encoder-only and GPT-style models; these names do not clash with them.)
//
// Parameter names and shapes are PyTorch's, so a torch.nn.Transformer state_dict saved as
// safetensors loads unchanged (tests/test_seq2seq.cpp, against PyTorch 1.13):
//   encoder.layers.N.{self_attn.in_proj_weight (3E, E), self_attn.in_proj_bias (3E),
//     self_attn.out_proj.weight (E, E), self_attn.out_proj.bias (E), linear1.weight (F, E),
//     linear1.bias (F), linear2.weight (E, F), linear2.bias (E), norm1.weight/bias (E),
//     norm2.weight/bias (E)},  encoder.norm.weight/bias (E),
//   decoder.layers.N.{self_attn.*, multihead_attn.* (cross-attention), linear1.*, linear2.*,
//     norm1.*, norm2.*, norm3.*},  decoder.norm.weight/bias (E).
//
// BATCH-FIRST BY DEFAULT, UNLIKE PyTorch: torch.nn.Transformer and its layers default to
// batch_first=False, i.e. (S, B, E) / (T, B, E). Here the default is batch_first(true) —
// (B, S, E) / (B, T, E) — as for xgrad's MultiHeadAttention: a (T, B, E) tensor ported from
// PyTorch is read as (B, T, E) unless the options say .batch_first(false). Unbatched (S, E) /
// (T, E) inputs work in either setting. The other defaults are PyTorch's: post-LayerNorm
// (norm_first false), ReLU, dropout 0.1, layer_norm_eps 1e-5, dim_feedforward 2048.
//
// Masks: AttentionOptions of attention.hpp (true = masked), per attention block:
//   encoder self-attention   attn_mask = src_mask (S, S), key_padding_mask = src_key_padding_mask (B, S)
//   decoder self-attention   attn_mask = tgt_mask (T, T) or is_causal, key_padding_mask (B, T)
//   decoder cross-attention  attn_mask = memory_mask (T, S), key_padding_mask = memory_key_padding_mask (B, S)
// with every shape MultiHeadAttention accepts. A query whose keys are all masked gets a zero
// attention output and finite gradients (PyTorch gives NaN there).
#pragma once
#include <memory>
#include <vector>

#include "xgrad/models/attention.hpp"
#include "xgrad/models/transformer.hpp"  // PositionalKind

namespace xgrad {

enum class TransformerActivation { ReLU, GELU };  // GELU is exact (erf), as torch's "gelu"

// torch.nn.TransformerEncoderLayer / TransformerDecoderLayer's arguments, by name:
//   TransformerLayerOptions(512, 8).dim_feedforward(2048).dropout(0.1).norm_first(true)
// (PyTorch: TransformerEncoderLayer(512, 8, 2048, 0.1, norm_first=True)). Checked here
// (ValueError naming TransformerLayer and the argument): d_model, nhead, dim_feedforward >= 1,
// nhead divides d_model, 0 <= dropout < 1, layer_norm_eps finite and > 0.
class TransformerLayerOptions {
 public:
  TransformerLayerOptions(Count d_model, Count nhead);
  TransformerLayerOptions& dim_feedforward(Count n);
  TransformerLayerOptions& dropout(double p);  // after attention and feed-forward, inside both, on attention weights
  TransformerLayerOptions& activation(TransformerActivation a) { activation_ = a; return *this; }
  TransformerLayerOptions& layer_norm_eps(double eps);
  // false: (S, B, E) / (T, B, E) inputs and outputs, PyTorch's default (see the file comment).
  TransformerLayerOptions& batch_first(bool b) { batch_first_ = b; return *this; }
  // true: pre-LayerNorm (x + f(norm(x))); false (PyTorch's default): post-LN (norm(x + f(x))).
  TransformerLayerOptions& norm_first(bool b) { norm_first_ = b; return *this; }
  std::size_t d_model() const { return d_model_; }
  std::size_t nhead() const { return nhead_; }
  std::size_t dim_feedforward() const { return dim_feedforward_; }
  double dropout() const { return dropout_; }
  TransformerActivation activation() const { return activation_; }
  double layer_norm_eps() const { return eps_; }
  bool batch_first() const { return batch_first_; }
  bool norm_first() const { return norm_first_; }

 private:
  std::size_t d_model_, nhead_, dim_feedforward_ = 2048;
  double dropout_ = 0.1, eps_ = 1e-5;
  TransformerActivation activation_ = TransformerActivation::ReLU;
  bool batch_first_ = true, norm_first_ = false;
};

// post-LN (norm_first false):  x = norm1(x + dropout1(SA(x)));  x = norm2(x + dropout2(FF(x)))
// pre-LN  (norm_first true):   x = x + dropout1(SA(norm1(x)));  x = x + dropout2(FF(norm2(x)))
// FF(x) = linear2(dropout(activation(linear1(x)))). Initialised as PyTorch's layer alone:
// MultiheadAttention's xavier-uniform in-projection, nn.Linear's default, LayerNorm (1, 0).
class TransformerEncoderLayer : public Module {
 public:
  TransformerEncoderLayer(const TransformerLayerOptions& options, Rng& rng);
  // src (B, S, E) (batch_first), (S, B, E) (batch_first(false)) or (S, E); self_attn holds
  // src_mask / src_key_padding_mask / is_causal (and need_weights: last_self_attn_weights).
  Tensor forward(const Tensor& src, const AttentionOptions& self_attn = {});
  TransformerLayerOptions options;
  MultiHeadAttention self_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2;
  Dropout dropout1, dropout2;
  Tensor last_self_attn_weights;  // when self_attn.need_weights
};

// post-LN: x = norm1(x + SA(x)); x = norm2(x + CA(x, memory)); x = norm3(x + FF(x))
// pre-LN:  x = x + SA(norm1(x)); x = x + CA(norm2(x), memory); x = x + FF(norm3(x))
// (each block's output through dropout1/2/3). SA = self_attn (causal when asked), CA =
// multihead_attn with queries from x and keys/values from memory.
class TransformerDecoderLayer : public Module {
 public:
  TransformerDecoderLayer(const TransformerLayerOptions& options, Rng& rng);
  // tgt (B, T, E), memory (B, S, E) in the options' layout (or unbatched (T, E), (S, E)).
  Tensor forward(const Tensor& tgt, const Tensor& memory, const AttentionOptions& self_attn = {},
                 const AttentionOptions& cross_attn = {});
  // Incremental: tgt holds the next t positions; self-attention over self_cache's positions
  // and tgt's (MultiHeadAttention::forward_cached), cross-attention over memory_kv (made once
  // by multihead_attn.project_key_value(memory, memory)). No autograd.
  Tensor forward_step(const Tensor& tgt, KVCache& self_cache, const ProjectedKeyValues& memory_kv,
                      const AttentionOptions& self_attn, const AttentionOptions& cross_attn);
  TransformerLayerOptions options;
  MultiHeadAttention self_attn, multihead_attn;
  Linear linear1;
  Dropout dropout;
  Linear linear2;
  LayerNorm norm1, norm2, norm3;
  Dropout dropout1, dropout2, dropout3;
  Tensor last_self_attn_weights, last_cross_attn_weights;  // when need_weights was set

 private:
  template <class SelfAttention, class CrossAttention>
  Tensor run(const Tensor& x, SelfAttention&& sa, CrossAttention&& ca);
};

// torch.nn.TransformerEncoder / TransformerDecoder's (layer, num_layers, norm) by name:
//   TransformerStackOptions(TransformerLayerOptions(16, 2), 6).final_norm(true)
// final_norm false is PyTorch's norm=None. Unlike PyTorch (which deep-copies one layer, so its
// layers start equal), every layer is initialised with its own random numbers.
class TransformerStackOptions {
 public:
  TransformerStackOptions(const TransformerLayerOptions& layer, Count num_layers);
  TransformerStackOptions& final_norm(bool b) { final_norm_ = b; return *this; }
  const TransformerLayerOptions& layer() const { return layer_; }
  std::size_t num_layers() const { return num_layers_; }
  bool final_norm() const { return final_norm_; }

 private:
  TransformerLayerOptions layer_;
  std::size_t num_layers_;
  bool final_norm_ = false;
};

class TransformerEncoderStack : public Module {
 public:
  TransformerEncoderStack(const TransformerStackOptions& options, Rng& rng);
  Tensor forward(const Tensor& src, const AttentionOptions& self_attn = {});  // every layer, then norm
  std::vector<Tensor> self_attention_weights() const;  // per layer, after a forward with need_weights
  std::vector<std::unique_ptr<TransformerEncoderLayer>> layers;
  std::unique_ptr<LayerNorm> norm;  // null without final_norm
};

// The decoder's state for incremental decoding: per layer the self-attention KVCache and the
// memory's projected keys and values (computed once per source batch by make_cache), plus the
// memory's key padding mask. select_rows reorders all of them (beam search); the memory rows
// are copied only when some row's source changes (a beam-search reorder stays within the
// beams of one source, whose memory rows are equal, so it copies only the self-attention caches).
// A cache made from unbatched memory holds one row: select_rows throws ValueError (nothing
// changed) unless rows has one entry.
namespace detail {
// The beam-search row reorder of a batch whose row i decodes source row sources[i]: the new row
// i is old row rows[i], so sources becomes sources[rows[i]]. IndexError (naming `op`) for a row
// >= sources.size(), nothing changed; returns true when some row's source changed (the caller
// then copies its memory rows), false when sources stays as it was.
bool reselect_sources(const char* op, std::vector<std::size_t>& sources, const std::vector<std::size_t>& rows);
}  // namespace detail

class TransformerDecoderCache {
 public:
  std::size_t length() const { return self_attn.front().length(); }  // target positions so far
  std::size_t max_len() const { return self_attn.front().max_len(); }
  std::size_t batch() const { return memory.front().batch(); }
  void select_rows(const std::vector<std::size_t>& rows);
  std::vector<KVCache> self_attn;
  std::vector<ProjectedKeyValues> memory;
  Tensor memory_key_padding_mask;   // bool (B, S) or undefined
  std::vector<std::size_t> sources;  // row i attends to row sources[i] of make_cache's memory
};

class TransformerDecoderStack : public Module {
 public:
  TransformerDecoderStack(const TransformerStackOptions& options, Rng& rng);
  Tensor forward(const Tensor& tgt, const Tensor& memory, const AttentionOptions& self_attn = {},
                 const AttentionOptions& cross_attn = {});
  // Projects memory (the encoder output, in the layout of the options) into every layer's
  // cross-attention keys and values, once; max_len bounds the target positions. No autograd.
  // memory_key_padding_mask: bool (B, S) (unbatched (S)) or undefined. Errors as
  // MultiHeadAttention's for memory and the mask.
  TransformerDecoderCache make_cache(const Tensor& memory, const Tensor& memory_key_padding_mask, Count max_len) const;
  // tgt (B, t, E) (options' layout): the next t target positions, causal over the cached ones
  // and each other, cross-attending to the cache's memory: their output (B, t, E), as forward
  // with is_causal would give for those positions (to float rounding). tgt_key_padding_mask:
  // bool (B, length + t) over every target position, or undefined. No autograd. ValueError
  // naming the limit when length + t > cache.max_len(); ShapeError for another batch.
  Tensor forward_step(const Tensor& tgt, TransformerDecoderCache& cache, const Tensor& tgt_key_padding_mask = Tensor());
  std::vector<Tensor> self_attention_weights() const;   // per layer, after forward with need_weights
  std::vector<Tensor> cross_attention_weights() const;  // per layer, after forward with need_weights
  std::vector<std::unique_ptr<TransformerDecoderLayer>> layers;
  std::unique_ptr<LayerNorm> norm;
};

// torch.nn.Transformer's constructor arguments by name (PyTorch: Transformer(d_model=512,
// nhead=8, num_encoder_layers=6, num_decoder_layers=6, dim_feedforward=2048, dropout=0.1, ...)):
//   TransformerOptions(512, 8).num_encoder_layers(6).num_decoder_layers(6).norm_first(true)
// The layer settings are TransformerLayerOptions' (same defaults; batch_first true, unlike PyTorch).
class TransformerOptions {
 public:
  TransformerOptions(Count d_model, Count nhead) : layer_(d_model, nhead) {}
  TransformerOptions& num_encoder_layers(Count n);
  TransformerOptions& num_decoder_layers(Count n);
  TransformerOptions& dim_feedforward(Count n) { layer_.dim_feedforward(n); return *this; }
  TransformerOptions& dropout(double p) { layer_.dropout(p); return *this; }
  TransformerOptions& activation(TransformerActivation a) { layer_.activation(a); return *this; }
  TransformerOptions& layer_norm_eps(double eps) { layer_.layer_norm_eps(eps); return *this; }
  TransformerOptions& batch_first(bool b) { layer_.batch_first(b); return *this; }
  TransformerOptions& norm_first(bool b) { layer_.norm_first(b); return *this; }
  const TransformerLayerOptions& layer() const { return layer_; }
  std::size_t num_encoder_layers() const { return encoder_layers_; }
  std::size_t num_decoder_layers() const { return decoder_layers_; }

 private:
  TransformerLayerOptions layer_;
  std::size_t encoder_layers_ = 6, decoder_layers_ = 6;
};

// nn.Transformer.forward's masks, all optional (true = masked); tgt_is_causal adds the causal
// mask to the decoder's self-attention (PyTorch: tgt_mask = generate_square_subsequent_mask(T)).
struct TransformerMasks {
  Tensor src_mask, tgt_mask, memory_mask;
  Tensor src_key_padding_mask, tgt_key_padding_mask, memory_key_padding_mask;
  bool tgt_is_causal = false;
};

// encoder (final norm) + decoder (final norm); every parameter of rank > 1 re-initialised
// xavier-uniform, as torch.nn.Transformer._reset_parameters.
class Transformer : public Module {
 public:
  Transformer(const TransformerOptions& options, Rng& rng);
  // src (B, S, E), tgt (B, T, E) (batch_first; (S, B, E), (T, B, E) otherwise; or unbatched)
  // -> (B, T, E): decoder(tgt, encoder(src)).
  Tensor forward(const Tensor& src, const Tensor& tgt, const TransformerMasks& masks = {});
  TransformerOptions options;
  TransformerEncoderStack encoder;
  TransformerDecoderStack decoder;
};

// A token-level encoder-decoder for sequence-to-sequence tasks (translation): token
// embeddings (scaled by sqrt(d_model) unless scale_embeddings(false)), positions (sinusoidal
// or learned), a batch-first Transformer, and a generator Linear to the target vocabulary.
// Checked here (ValueError naming Seq2SeqTransformer): vocabularies and lengths >= 1 and the
// layer settings as TransformerLayerOptions.
class Seq2SeqOptions {
 public:
  Seq2SeqOptions(Count src_vocab, Count tgt_vocab, Count d_model, Count nhead);
  Seq2SeqOptions& num_encoder_layers(Count n) { transformer_.num_encoder_layers(n); return *this; }
  Seq2SeqOptions& num_decoder_layers(Count n) { transformer_.num_decoder_layers(n); return *this; }
  Seq2SeqOptions& dim_feedforward(Count n) { transformer_.dim_feedforward(n); return *this; }
  Seq2SeqOptions& dropout(double p) { transformer_.dropout(p); return *this; }
  Seq2SeqOptions& activation(TransformerActivation a) { transformer_.activation(a); return *this; }
  Seq2SeqOptions& layer_norm_eps(double eps) { transformer_.layer_norm_eps(eps); return *this; }
  Seq2SeqOptions& norm_first(bool b) { transformer_.norm_first(b); return *this; }
  Seq2SeqOptions& max_src_len(Count n);  // positions of the encoder (default 128)
  Seq2SeqOptions& max_tgt_len(Count n);  // positions of the decoder, BOS included (default 128)
  Seq2SeqOptions& positional(PositionalKind k) { positional_ = k; return *this; }  // default Sinusoidal
  Seq2SeqOptions& scale_embeddings(bool b) { scale_ = b; return *this; }          // x sqrt(d_model), default true
  std::size_t src_vocab() const { return src_vocab_; }
  std::size_t tgt_vocab() const { return tgt_vocab_; }
  std::size_t max_src_len() const { return max_src_; }
  std::size_t max_tgt_len() const { return max_tgt_; }
  PositionalKind positional() const { return positional_; }
  bool scale_embeddings() const { return scale_; }
  const TransformerOptions& transformer() const { return transformer_; }  // always batch-first

 private:
  std::size_t src_vocab_, tgt_vocab_, max_src_ = 128, max_tgt_ = 128;
  PositionalKind positional_ = PositionalKind::Sinusoidal;
  bool scale_ = true;
  TransformerOptions transformer_;
};

// Parameters: src_emb.weight, tgt_emb.weight, [src_pos.weight, tgt_pos.weight when learned],
// transformer.* (nn.Transformer's names), generator.weight / generator.bias.
class Seq2SeqTransformer : public Module {
 public:
  Seq2SeqTransformer(const Seq2SeqOptions& options, Rng& rng);
  // src (B, S) int64, S <= max_src_len; src_key_padding_mask bool (B, S) (true = padding) or
  // undefined -> memory (B, S, E).
  Tensor encode(const Tensor& src, const Tensor& src_key_padding_mask = Tensor());
  // tgt (B, T) int64 (teacher forcing: BOS y_1 ... y_{T-1}), T <= max_tgt_len; causal
  // self-attention; memory_key_padding_mask as the encoder's padding; tgt_key_padding_mask
  // bool (B, T) or undefined -> logits (B, T, tgt_vocab). need_weights keeps every layer's
  // cross-attention weights (B, H, T, S) (cross_attention_weights()).
  Tensor decode(const Tensor& tgt, const Tensor& memory, const Tensor& memory_key_padding_mask = Tensor(),
                const Tensor& tgt_key_padding_mask = Tensor(), bool need_weights = false);
  Tensor forward(const Tensor& src, const Tensor& tgt, const Tensor& src_key_padding_mask = Tensor(),
                 const Tensor& tgt_key_padding_mask = Tensor()) {
    return decode(tgt, encode(src, src_key_padding_mask), src_key_padding_mask, tgt_key_padding_mask);
  }
  // Incremental decoding (decoding.hpp drives it): the decoder's cache for memory, then the
  // logits (B, t, tgt_vocab) of the next t target tokens (B, t) at positions offset by
  // cache.length(). Both run without autograd. ValueError naming max_tgt_len when it would
  // be exceeded, ShapeError for a batch other than the cache's; nothing changes on an error
  // (not even the dropout generator in training mode).
  TransformerDecoderCache start(const Tensor& memory, const Tensor& memory_key_padding_mask = Tensor()) const;
  Tensor step(const Tensor& tgt, TransformerDecoderCache& cache);
  std::vector<Tensor> cross_attention_weights() const { return transformer.decoder.cross_attention_weights(); }

  Seq2SeqOptions options;
  Embedding src_emb, tgt_emb;
  std::unique_ptr<LearnedPositionalEncoding> src_pos, tgt_pos;  // learned positions only
  std::unique_ptr<SinusoidalPositionalEncoding> sin_pos;         // sinusoidal only (max of both lengths)
  Dropout emb_drop;
  Transformer transformer;
  Linear generator;

 private:
  Tensor embed(const Embedding& emb, const LearnedPositionalEncoding* learned, const Tensor& tokens,
               std::size_t max_len, std::size_t offset, const char* arg);
};

}  // namespace xgrad
