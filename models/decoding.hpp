// xgrad/models/decoding.hpp — autoregressive decoding: sessions, generation, greedy and beam search.
//
// A DecodingSession is one batch of sequences being decoded by one model. step(tokens)
// appends tokens to every row and returns their logits; select_rows reorders / repeats the
// rows (beam search). A session runs with the model's key/value cache (each step computes
// only the new positions) or without (each step runs the model over the whole sequence so
// far and keeps the new positions' logits): the two give the same logits to float rounding,
// and the same tokens (tests/test_kv_cache.cpp, tests/test_seq2seq.cpp).
//
//   TransformerDecoder gpt(config);
//   gpt.eval();
//   auto session = decoding_session(gpt);                         // cached
//   Tensor out = generate(*session, prompt, 100, greedy_next_token);  // (B, T0 + 100)
//
// Sampling: pass any rule logits (B, V) -> tokens (B) int64 as `next`, e.g. temperature and
// top-k built from ops (softmax, a multinomial draw) with the caller's Rng.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "xgrad/models/seq2seq.hpp"
#include "xgrad/models/transformer.hpp"

namespace xgrad {

class DecodingSession {
 public:
  virtual ~DecodingSession() = default;
  // tokens (N, t) int64, t >= 1, appended to every row: their logits (N, t, V), computed
  // without autograd. ValueError when length() + t > max_length() (naming the limit),
  // ShapeError when N differs from batch() (after the first step), IndexError for a token
  // outside the vocabulary; nothing changes on error.
  virtual Tensor step(const Tensor& tokens) = 0;
  // Row i continues the sequence of old row rows[i] (repeats and drops allowed; the batch
  // becomes rows.size()). IndexError for a row >= batch(). A decoder-only session before its
  // first step has no rows yet: nothing to select (the first step sets the rows).
  virtual void select_rows(const std::vector<std::size_t>& rows) = 0;
  virtual std::size_t length() const = 0;      // tokens per row so far
  virtual std::size_t max_length() const = 0;  // the model's limit on length()
  virtual std::size_t batch() const = 0;       // rows (before the first step: the rows expected, 0 = any)
  virtual bool cached() const = 0;             // uses a key/value cache
};

// A session of a GPT-style decoder: positions from 0, the rows' batch fixed by the first step.
// use_cache = false re-runs model.forward over the whole prefix at every step (the reference).
// The session keeps a reference to the model: it must outlive the session.
std::unique_ptr<DecodingSession> decoding_session(TransformerDecoder& model, bool use_cache = true);

// A session of an encoder-decoder: src (N, S) int64 is encoded once (src_key_padding_mask bool
// (N, S), true = padding, or undefined); the target starts empty (the caller's first step is
// usually BOS). Cached: the memory's cross-attention keys/values are projected once and the
// decoder's self-attention is cached; uncached: every step re-runs model.decode over the
// target so far (the memory is still encoded once). The model must outlive the session.
std::unique_ptr<DecodingSession> decoding_session(Seq2SeqTransformer& model, const Tensor& src,
                                                  const Tensor& src_key_padding_mask = Tensor(),
                                                  bool use_cache = true);

// logits (N, V) float -> (N) int64: the index of each row's largest value (the first one on a
// tie). NaN is never the largest. ShapeError unless logits is 2-D with V >= 1.
Tensor greedy_next_token(const Tensor& logits);

// A rule that picks the next token of every row from the last position's logits (N, V),
// returning (N) int64 (greedy_next_token, or sampling with temperature / top-k).
using NextTokenFn = std::function<Tensor(const Tensor& logits)>;

// Feeds prompt (N, T0) int64, T0 >= 1, then max_new_tokens tokens each chosen by `next` from
// the logits of the position before it: returns (N, T0 + max_new_tokens), prompt first. A
// fresh session (length() == 0) is expected. ValueError naming the limit when T0 +
// max_new_tokens > session.max_length(), before anything runs; ShapeError / DTypeError when
// `next` returns anything but (N) int64.
Tensor generate(DecodingSession& session, const Tensor& prompt, std::size_t max_new_tokens,
                const NextTokenFn& next = greedy_next_token);

// --- sequence-to-sequence search -------------------------------------------------------------
// Both start every row from `bos` in a fresh session and stop a row at `eos` (not included in
// the result) or after max_length tokens (0: as many as the model's positions allow,
// session.max_length(); a larger value is a ValueError naming that limit). Scores are natural
// log-probabilities from log_softmax of the logits, summed in float64.
struct GreedyOptions {
  std::int64_t bos = 1, eos = 2;
  std::size_t max_length = 0;
};
// Per row: greedy_next_token of the logits at every step (the argmax of the log-probabilities;
// the first maximum on a tie). Rows that ended keep being fed `eos` until every row has ended
// (the batch is decoded together).
std::vector<std::vector<std::int64_t>> greedy_decode(DecodingSession& session, const GreedyOptions& options);

// Beam search with beam_width >= 1 hypotheses per row (ValueError for 0). Each step extends
// every live hypothesis by every token, keeps the 2 * beam_width best candidates (score, then
// hypothesis, then token index: deterministic), moves those ending in eos to the finished list
// and the best beam_width others to the next step. Length normalisation (GNMT, Wu et al. 2016):
//   score(Y) = log P(Y) / lp(Y),   lp(Y) = ((5 + |Y|) / 6)^length_penalty
// with |Y| counting eos; length_penalty = 0 ranks by log P(Y) alone. A row is done when it has
// beam_width finished hypotheses and no live one scores better at its current length (the
// heuristic of Hugging Face's BeamSearchScorer, early_stopping=False), or at max_length, when
// the live hypotheses join the finished ones (finished = false). beam_width 1 gives exactly
// greedy_decode's tokens. Returns per row up to beam_width hypotheses, best first.
// MemoryError when the batch's hypotheses, or a row's beam_width x vocabulary candidates,
// would take more than max_tensor_bytes() (checked before they are made).
struct BeamSearchOptions {
  std::size_t beam_width = 4;
  double length_penalty = 0.6;
  std::int64_t bos = 1, eos = 2;
  std::size_t max_length = 0;
};
struct BeamHypothesis {
  std::vector<std::int64_t> tokens;  // without bos and eos
  double log_prob = 0;               // log P(tokens [+ eos])
  double score = 0;                  // log_prob / lp
  bool finished = false;             // ended with eos (false: stopped at max_length)
};
std::vector<std::vector<BeamHypothesis>> beam_search(DecodingSession& session, const BeamSearchOptions& options);

}  // namespace xgrad
