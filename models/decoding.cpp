// Decoding sessions (cached and uncached), generation and greedy search.
#include "xgrad/models/decoding.hpp"

#include <cmath>

#include "xgrad/framework/autograd.hpp"
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
  void commit(const Tensor& all) {  // all = with(tokens)
    rows_ = all.shape()[0], length_ = all.shape()[1];
    tokens_.assign(all.data<std::int64_t>(), all.data<std::int64_t>() + all.numel());
  }
  void select_rows(const char* op, const std::vector<std::size_t>& rows) {
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
    const std::size_t L = history_.length(), t = tokens.shape()[1], max_len = max_length();
    if (t > max_len - L)
      throw_error<ValueError>(op, "the session holds ", L, " tokens per row and tokens ", tokens.shape(), " add ", t,
                              ": ", L + t, " would exceed the model's max_len ", max_len, " (config.max_len)");
    NoGradGuard no_grad;
    const Tensor all = history_.with(tokens);
    Tensor logits = narrow(model_.forward(all), 1, L, t);
    history_.commit(all);
    return logits;
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

}  // namespace

std::unique_ptr<DecodingSession> decoding_session(TransformerDecoder& model, bool use_cache) {
  return std::make_unique<DecoderSession>(model, use_cache);
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
