// Decoding sessions (cached and uncached), generation and greedy search.
#include "xgrad/models/decoding.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/ops/ops.hpp"

namespace xgrad {
namespace {

// tokens (N, t) int64 with t >= 1 and, once the session has rows, N == batch.
void check_step_tokens(const char* op, const Tensor& tokens, std::size_t batch) {
  if (!tokens.defined() || tokens.dtype() != DType::Int64)
    throw_error<DTypeError>(op, "argument 'tokens' must be (N, t) int64, got ",
                            tokens.defined() ? dtype_name(tokens.dtype()) : "an undefined tensor");
  check_rank(op, "tokens", tokens, 2, "(N, t)");
  if (tokens.shape()[1] == 0) throw_error<ShapeError>(op, "argument 'tokens' ", tokens.shape(), " holds no token");
  if (batch != 0 && tokens.shape()[0] != batch)
    throw_error<ShapeError>(op, "argument 'tokens' ", tokens.shape(), " has ", tokens.shape()[0],
                            " rows but the session decodes ", batch);
}

// The rows' tokens so far, (N, L) row-major, for sessions that re-run the model on them.
class TokenHistory {
 public:
  explicit TokenHistory(std::size_t rows = 0) : rows_(rows) {}
  std::size_t rows() const { return rows_; }
  std::size_t length() const { return length_; }
  // The history with tokens (N, t) appended, as an (N, L + t) tensor (the history is unchanged).
  Tensor with(const Tensor& tokens) const {
    const std::size_t N = tokens.shape()[0], t = tokens.shape()[1];
    const std::int64_t* p = tokens.data<std::int64_t>();
    std::vector<std::int64_t> all;
    all.reserve(N * (length_ + t));
    for (std::size_t i = 0; i < N; ++i) {
      if (length_) all.insert(all.end(), tokens_.begin() + long(i * length_), tokens_.begin() + long((i + 1) * length_));
      all.insert(all.end(), p + i * t, p + (i + 1) * t);
    }
    return index_tensor(all, {N, length_ + t});
  }
  // The uncached step: full(history + tokens (N, L + t)) -> logits (N, L + t, V) computed without
  // autograd; returns the last t positions' and keeps the tokens. ValueError naming the limit
  // (`limit` = its name) when L + t > max_len; nothing changes on error.
  template <class Full>
  Tensor step(const char* op, const Tensor& tokens, std::size_t max_len, const char* limit, Full&& full) {
    const std::size_t L = length_, t = tokens.shape()[1];
    if (t > max_len - L)
      throw_error<ValueError>(op, "the session holds ", L, " tokens per row and tokens ", tokens.shape(), " add ", t,
                              ": ", L + t, " would exceed the model's ", limit, " ", max_len);
    NoGradGuard no_grad;
    const Tensor all = with(tokens);
    Tensor logits = narrow(full(all), 1, L, t);
    rows_ = all.shape()[0], length_ = all.shape()[1];
    tokens_.assign(all.data<std::int64_t>(), all.data<std::int64_t>() + all.numel());
    return logits;
  }
  void select_rows(const char* op, const std::vector<std::size_t>& rows) {
    if (rows_ == 0 && length_ == 0) return;  // rows not known yet: the first step sets them
    std::vector<std::int64_t> out;
    out.reserve(rows.size() * length_);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (rows[i] >= rows_)
        throw_error<IndexError>(op, "row ", rows[i], " (entry ", i, " of 'rows') is out of range for ", rows_, " rows");
      out.insert(out.end(), tokens_.begin() + long(rows[i] * length_), tokens_.begin() + long((rows[i] + 1) * length_));
    }
    tokens_ = std::move(out);
    rows_ = rows.size();
  }

 private:
  std::size_t rows_ = 0, length_ = 0;
  std::vector<std::int64_t> tokens_;
};

class DecoderSession final : public DecodingSession {
 public:
  DecoderSession(TransformerDecoder& model, bool use_cache)
      : model_(model), use_cache_(use_cache), cache_(model.make_cache()) {}
  Tensor step(const Tensor& tokens) override {
    const char* op = "DecodingSession::step";
    check_step_tokens(op, tokens, batch());
    if (use_cache_) return model_.forward_step(tokens, cache_);
    return history_.step(op, tokens, max_length(), "max_len",
                         [&](const Tensor& all) { return model_.forward(all); });
  }
  void select_rows(const std::vector<std::size_t>& rows) override {
    if (use_cache_) cache_.select_rows(rows);
    else history_.select_rows("DecodingSession::select_rows", rows);
  }
  std::size_t length() const override { return use_cache_ ? cache_.length() : history_.length(); }
  std::size_t max_length() const override { return model_.body.config.max_len; }
  std::size_t batch() const override { return use_cache_ ? cache_.batch() : history_.rows(); }
  bool cached() const override { return use_cache_; }

 private:
  TransformerDecoder& model_;
  bool use_cache_;
  DecoderKVCache cache_;
  TokenHistory history_;
};

class Seq2SeqSession final : public DecodingSession {
 public:
  Seq2SeqSession(Seq2SeqTransformer& model, const Tensor& src, const Tensor& src_key_padding_mask, bool use_cache)
      : model_(model), use_cache_(use_cache) {
    NoGradGuard no_grad;
    const Tensor memory = model.encode(src, src_key_padding_mask);
    if (use_cache_) {
      cache_ = model.start(memory, src_key_padding_mask);
      return;
    }
    memory_ = memory;
    memory_key_padding_mask_ = src_key_padding_mask;
    history_ = TokenHistory(src.shape()[0]);
    sources_.resize(src.shape()[0]);
    for (std::size_t i = 0; i < sources_.size(); ++i) sources_[i] = i;
  }
  Tensor step(const Tensor& tokens) override {
    const char* op = "DecodingSession::step";
    check_step_tokens(op, tokens, batch());
    if (use_cache_) return model_.step(tokens, cache_);
    return history_.step(op, tokens, max_length(), "max_tgt_len",
                         [&](const Tensor& all) { return model_.decode(all, memory_, memory_key_padding_mask_); });
  }
  void select_rows(const std::vector<std::size_t>& rows) override {
    const char* op = "DecodingSession::select_rows";
    if (use_cache_) {
      cache_.select_rows(rows);
      return;
    }
    if (detail::reselect_sources(op, sources_, rows)) {  // memory rows copied only when a source changed
      memory_ = xgrad::select_rows(op, memory_, rows);
      if (memory_key_padding_mask_.defined())
        memory_key_padding_mask_ = xgrad::select_rows(op, memory_key_padding_mask_, rows);
    }
    history_.select_rows(op, rows);
  }
  std::size_t length() const override { return use_cache_ ? cache_.length() : history_.length(); }
  std::size_t max_length() const override { return model_.options.max_tgt_len(); }
  std::size_t batch() const override { return use_cache_ ? cache_.batch() : history_.rows(); }
  bool cached() const override { return use_cache_; }

 private:
  Seq2SeqTransformer& model_;
  bool use_cache_;
  TransformerDecoderCache cache_;  // cached mode
  Tensor memory_, memory_key_padding_mask_;  // uncached mode: the encoder output and its mask,
  std::vector<std::size_t> sources_;         // row i decodes source row sources_[i],
  TokenHistory history_;                     // and the rows' tokens so far
};

// out[j] = x[j] - log(sum_k exp(x[k])) in float64 (the max subtracted first).
void log_softmax_row(const double* x, std::size_t V, double* out) {
  const double mx = *std::max_element(x, x + V);
  double total = 0;
  for (std::size_t j = 0; j < V; ++j) total += std::exp(x[j] - mx);
  const double lse = mx + std::log(total);
  for (std::size_t j = 0; j < V; ++j) out[j] = x[j] - lse;
}

// The session fresh, with rows, and the number of tokens a search may produce.
std::size_t search_length(const char* op, DecodingSession& session, std::size_t max_length) {
  if (session.batch() == 0)
    throw_error<ValueError>(op, "the session has no rows yet (make it from a batch of sources)");
  if (session.length() != 0)
    throw_error<ValueError>(op, "the session already holds ", session.length(), " tokens per row (use a fresh one)");
  const std::size_t limit = session.max_length();
  if (max_length > limit)
    throw_error<ValueError>(op, "max_length ", max_length, " is more than the model's ", limit, " target positions");
  return max_length ? max_length : limit;
}

// (N, 1, V) logits -> per row log-probabilities, row-major (N, V).
std::vector<double> step_log_probs(DecodingSession& session, const std::vector<std::int64_t>& tokens,
                                   std::size_t& V) {
  const Tensor logits = session.step(index_tensor(tokens, {tokens.size(), 1}));
  V = logits.shape()[2];
  std::vector<double> lp = logits.to_vector();
  for (std::size_t i = 0; i < tokens.size(); ++i) log_softmax_row(lp.data() + i * V, V, lp.data() + i * V);
  return lp;
}

}  // namespace

std::unique_ptr<DecodingSession> decoding_session(TransformerDecoder& model, bool use_cache) {
  return std::make_unique<DecoderSession>(model, use_cache);
}

std::unique_ptr<DecodingSession> decoding_session(Seq2SeqTransformer& model, const Tensor& src,
                                                  const Tensor& src_key_padding_mask, bool use_cache) {
  return std::make_unique<Seq2SeqSession>(model, src, src_key_padding_mask, use_cache);
}

std::vector<std::vector<std::int64_t>> greedy_decode(DecodingSession& session, const GreedyOptions& o) {
  const std::size_t m = search_length("greedy_decode", session, o.max_length), N = session.batch();
  std::vector<std::vector<std::int64_t>> out(N);
  std::vector<bool> done(N, false);
  std::vector<std::int64_t> cur(N, o.bos);
  for (std::size_t k = 0; k < m; ++k) {
    const Tensor logits = session.step(index_tensor(cur, {N, 1}));  // (N, 1, V)
    const Tensor chosen = greedy_next_token(reshape(logits, {N, logits.shape()[2]}));
    for (std::size_t i = 0; i < N; ++i) {
      const std::int64_t best = chosen.data<std::int64_t>()[i];  // argmax of the logits = of the log-probabilities
      if (!done[i] && best == o.eos) done[i] = true;
      else if (!done[i]) out[i].push_back(best);
      cur[i] = done[i] ? o.eos : best;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
  }
  return out;
}

std::vector<std::vector<BeamHypothesis>> beam_search(DecodingSession& session, const BeamSearchOptions& o) {
  const char* op = "beam_search";
  if (o.beam_width == 0) throw_error<ValueError>(op, "beam_width must be >= 1, got 0");
  if (!std::isfinite(o.length_penalty))
    throw_error<ValueError>(op, "length_penalty must be finite, got ", o.length_penalty);
  const std::size_t m = search_length(op, session, o.max_length), N = session.batch(), K = o.beam_width;
  const double ninf = -std::numeric_limits<double>::infinity();
  auto penalty = [&](std::size_t len) { return std::pow((5.0 + double(len)) / 6.0, o.length_penalty); };
  struct Beam {
    std::vector<std::int64_t> tokens;
    double log_prob;
  };
  struct Candidate {
    double log_prob;
    std::size_t beam;
    std::int64_t token;
  };
  // What the search holds per hypothesis (the session's row index, its beam, the tokens fed,
  // parents and next tokens) and per row and step (K V candidates), against max_tensor_bytes():
  // an absurd beam_width is a MemoryError before anything is allocated.
  auto check_bytes = [&](std::size_t count, std::size_t item, const char* what) {
    if (count != 0 && item > max_tensor_bytes() / count)
      throw_error<MemoryError>(op, "beam_width ", K, " for ", N, N == 1 ? " row" : " rows", ": ", what, " (", count,
                               " of ", item, " bytes) take more than max_tensor_bytes() = ", max_tensor_bytes());
  };
  if (N != 0 && K > std::numeric_limits<std::size_t>::max() / N)
    throw_error<ValueError>(op, "beam_width ", K, " for ", N, " rows: ", N, " x ", K, " hypotheses do not fit in 64 bits");
  check_bytes(N * K, sizeof(Beam) + 4 * sizeof(std::size_t), "the hypotheses");
  // K rows per source row; only the first beam is live at the start.
  std::vector<std::size_t> rows;
  for (std::size_t n = 0; n < N; ++n) rows.insert(rows.end(), K, n);
  session.select_rows(rows);
  std::vector<std::vector<Beam>> beams(N, std::vector<Beam>(K, Beam{{}, ninf}));
  for (auto& b : beams) b[0].log_prob = 0;
  std::vector<std::vector<BeamHypothesis>> finished(N);
  std::vector<bool> done(N, false);
  auto add_finished = [&](std::size_t n, BeamHypothesis h) {  // keeps the K best, best first (stable)
    auto& f = finished[n];
    f.insert(std::upper_bound(f.begin(), f.end(), h,
                              [](const BeamHypothesis& a, const BeamHypothesis& b) { return a.score > b.score; }),
             std::move(h));
    if (f.size() > K) f.pop_back();
  };
  std::vector<std::int64_t> cur(N * K, o.bos);
  for (std::size_t k = 0; k < m; ++k) {
    std::size_t V = 0;
    const std::vector<double> lp = step_log_probs(session, cur, V);
    if (V != 0 && K > std::numeric_limits<std::size_t>::max() / V)
      throw_error<ValueError>(op, "beam_width ", K, " x vocabulary ", V, " candidates do not fit in 64 bits");
    check_bytes(K * V, sizeof(Candidate), "a row's candidates");
    std::vector<std::size_t> parent(N * K);
    std::vector<std::int64_t> next(N * K, o.eos);
    for (std::size_t n = 0; n < N; ++n) {
      for (std::size_t j = 0; j < K; ++j) parent[n * K + j] = n * K + j;
      if (done[n]) continue;
      std::vector<Candidate> cands;
      for (std::size_t j = 0; j < K; ++j) {
        if (beams[n][j].log_prob == ninf) continue;
        const double* row = lp.data() + (n * K + j) * V;
        for (std::size_t v = 0; v < V; ++v) cands.push_back({beams[n][j].log_prob + row[v], j, std::int64_t(v)});
      }
      const std::size_t top = std::min(cands.size(), 2 * K);
      std::partial_sort(cands.begin(), cands.begin() + long(top), cands.end(), [](const Candidate& a, const Candidate& b) {
        if (a.log_prob != b.log_prob) return a.log_prob > b.log_prob;
        return a.beam != b.beam ? a.beam < b.beam : a.token < b.token;
      });
      std::vector<Beam> live;
      for (std::size_t r = 0; r < top && live.size() < K; ++r) {
        const Candidate& c = cands[r];
        const Beam& from = beams[n][c.beam];
        if (c.token == o.eos) {  // only among the K best ranks, as Hugging Face's scorer
          if (r < K) add_finished(n, {from.tokens, c.log_prob, c.log_prob / penalty(k + 1), true});
          continue;
        }
        parent[n * K + live.size()] = n * K + c.beam;
        next[n * K + live.size()] = c.token;
        live.push_back({from.tokens, c.log_prob});
        live.back().tokens.push_back(c.token);
      }
      while (live.size() < K) live.push_back({{}, ninf});  // fewer candidates than beams (tiny vocabulary)
      beams[n] = std::move(live);
      if (finished[n].size() >= K &&
          (beams[n][0].log_prob == ninf || finished[n].back().score >= beams[n][0].log_prob / penalty(k + 1)))
        done[n] = true;
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; }) || k + 1 == m) break;
    bool identity = true;
    for (std::size_t i = 0; i < parent.size(); ++i) identity = identity && parent[i] == i;
    if (!identity) session.select_rows(parent);
    cur = next;
  }
  for (std::size_t n = 0; n < N; ++n)
    if (!done[n])
      for (const Beam& b : beams[n])
        if (b.log_prob != ninf) add_finished(n, {b.tokens, b.log_prob, b.log_prob / penalty(b.tokens.size()), false});
  return finished;
}

Tensor greedy_next_token(const Tensor& logits) {
  const char* op = "greedy_next_token";
  check_float(op, "logits", logits);
  check_rank(op, "logits", logits, 2, "(N, V)");
  const std::size_t N = logits.shape()[0], V = logits.shape()[1];
  if (V == 0) throw_error<ShapeError>(op, "argument 'logits' ", logits.shape(), " has no class");
  const std::vector<double> v = logits.to_vector();
  std::vector<std::int64_t> out(N);
  for (std::size_t i = 0; i < N; ++i) {
    const double* row = v.data() + i * V;
    std::size_t best = 0;
    for (std::size_t j = 1; j < V; ++j)
      if (row[j] > row[best] || (std::isnan(row[best]) && !std::isnan(row[j]))) best = j;
    out[i] = std::int64_t(best);
  }
  return index_tensor(out, {N});
}

Tensor generate(DecodingSession& session, const Tensor& prompt, std::size_t max_new_tokens, const NextTokenFn& next) {
  const char* op = "generate";
  if (!next) throw_error<ValueError>(op, "argument 'next' is empty");
  check_step_tokens(op, prompt, session.batch());
  if (session.length() != 0)
    throw_error<ValueError>(op, "the session already holds ", session.length(), " tokens per row (use a fresh one)");
  const std::size_t N = prompt.shape()[0], T0 = prompt.shape()[1], limit = session.max_length();
  if (max_new_tokens > limit || T0 > limit - max_new_tokens)
    throw_error<ValueError>(op, "a prompt of ", T0, " tokens plus ", max_new_tokens, " new tokens is longer than the "
                            "model's max_len ", limit);
  std::vector<std::vector<std::int64_t>> rows(N);
  const std::int64_t* p = prompt.data<std::int64_t>();
  for (std::size_t i = 0; i < N; ++i) rows[i].assign(p + i * T0, p + (i + 1) * T0);
  Tensor logits = session.step(prompt);
  for (std::size_t k = 0; k < max_new_tokens; ++k) {
    const std::size_t t = logits.shape()[1], V = logits.shape()[2];
    const Tensor last = reshape(narrow(logits, 1, t - 1, 1), {N, V});
    const Tensor chosen = next(last);
    if (!chosen.defined() || chosen.dtype() != DType::Int64)
      throw_error<DTypeError>(op, "the next-token rule must return (N) int64, got ",
                              chosen.defined() ? dtype_name(chosen.dtype()) : "an undefined tensor");
    check_shape(op, "next(logits)", chosen, {N}, "(N)");
    const std::int64_t* c = chosen.data<std::int64_t>();
    for (std::size_t i = 0; i < N; ++i) rows[i].push_back(c[i]);
    if (k + 1 < max_new_tokens) logits = session.step(reshape(chosen, {N, 1}));
  }
  std::vector<std::int64_t> flat;
  flat.reserve(N * (T0 + max_new_tokens));
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return index_tensor(flat, {N, T0 + max_new_tokens});
}

}  // namespace xgrad
