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
  // becomes rows.size()). IndexError for a row >= batch().
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

}  // namespace xgrad
