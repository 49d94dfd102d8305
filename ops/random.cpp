// Seeded categorical sampling by inverse CDF in float64 (algorithm: ops/random.hpp).
//   multinomial:        weights (N, C) or (C) -> Int64 (N, S) or (S)
//   sample_categorical: logits (..., C)        -> Int64 (...)
#include <algorithm>
#include <cmath>
#include <limits>

#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/random.hpp"

namespace xgrad {
namespace {

// The first k with c[k] > u * c.back(): c holds a row's cumulative weights (non-decreasing,
// c.back() > 0), u one Rng::uniform() in [0, 1). u * c.back() < c.back() in float64 for every
// such u, so a k always exists; the fallback (the last class with a non-zero weight) is a guard.
std::size_t inverse_cdf(const std::vector<double>& c, double u) {
  auto it = std::upper_bound(c.begin(), c.end(), u * c.back());
  if (it == c.end()) it = std::lower_bound(c.begin(), c.end(), c.back());
  return std::size_t(it - c.begin());
}

// c = cumulative sums of w[0..C), left to right in float64.
template <class T> void cumulative(const T* w, std::size_t C, std::vector<double>& c) {
  double acc = 0;
  for (std::size_t k = 0; k < C; ++k) c[k] = acc += double(w[k]);
}

}  // namespace

Tensor multinomial(const Tensor& weights, long num_samples, bool replacement, Rng& rng) {
  const char* op = "multinomial";
  check_float(op, "weights", weights);
  if (weights.dim() != 1 && weights.dim() != 2)
    throw_error<ShapeError>(op, "argument 'weights' ", weights.shape(), " must be (C) or (N, C)");
  if (num_samples < 0) throw_error<ValueError>(op, "num_samples must be >= 0, got ", num_samples);
  const std::size_t C = weights.shape().back(), rows = weights.dim() == 2 ? weights.shape()[0] : 1,
                    S = std::size_t(num_samples);
  Shape ys = weights.dim() == 2 ? Shape{rows, S} : Shape{S};
  Tensor y = empty_tensor<std::int64_t>(ys, op);
  std::int64_t* out = fresh_data<std::int64_t>(y);
  dispatch_float(op, weights.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pw = data_of<T>(weights);
    // Every row first: nothing is drawn unless all rows are valid.
    for (std::size_t row = 0; row < rows; ++row) {
      const T* w = pw + row * C;
      double total = 0;
      std::size_t nonzero = 0;
      for (std::size_t k = 0; k < C; ++k) {
        if (!(w[k] >= 0) || std::isinf(w[k]))
          throw_error<ValueError>(op, "row ", row, " of argument 'weights' ", weights.shape(), " has weight ",
                                  double(w[k]), " at class ", k, "; weights must be finite and >= 0");
        total += double(w[k]);
        nonzero += w[k] != 0;
      }
      if (!(total > 0) || std::isinf(total))
        throw_error<ValueError>(op, "row ", row, " of argument 'weights' ", weights.shape(), " sums to ", total,
                                "; it needs a finite, positive sum");
      if (!replacement && nonzero < S)
        throw_error<ValueError>(op, "cannot draw ", S, " distinct samples (replacement = false) from row ", row,
                                " of argument 'weights' ", weights.shape(), ", which has ", nonzero,
                                " non-zero weights");
    }
    std::vector<double> c(C), w(C);
    for (std::size_t row = 0; row < rows; ++row) {
      const T* wr = pw + row * C;
      std::int64_t* yr = out + row * S;
      if (replacement) {
        cumulative(wr, C, c);
        for (std::size_t j = 0; j < S; ++j) yr[j] = std::int64_t(inverse_cdf(c, rng.uniform()));
        continue;
      }
      std::copy_n(wr, C, w.begin());
      for (std::size_t j = 0; j < S; ++j) {
        cumulative(w.data(), C, c);
        const std::size_t k = inverse_cdf(c, rng.uniform());
        yr[j] = std::int64_t(k);
        w[k] = 0;  // drawn: removed from the row
      }
    }
  });
  return y;
}

Tensor sample_categorical(const Tensor& logits, Rng& rng, double temperature) {
  const char* op = "sample_categorical";
  check_float(op, "logits", logits);
  if (logits.dim() == 0)
    throw_error<ShapeError>(op, "argument 'logits' () must have a class axis: (..., C)");
  if (!(temperature > 0) || std::isinf(temperature))
    throw_error<ValueError>(op, "temperature must be finite and > 0, got ", temperature,
                            " (for greedy decoding use argmax)");
  const std::size_t C = logits.shape().back();
  Shape ys(logits.shape().begin(), logits.shape().end() - 1);
  const std::size_t rows = numel(ys);
  Tensor y = empty_tensor<std::int64_t>(ys, op);
  std::int64_t* out = fresh_data<std::int64_t>(y);
  dispatch_float(op, logits.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pl = data_of<T>(logits);
    std::vector<double> row_max(rows);
    for (std::size_t row = 0; row < rows; ++row) {  // every row first, as multinomial
      const T* l = pl + row * C;
      double m = -std::numeric_limits<double>::infinity();
      for (std::size_t k = 0; k < C; ++k) {
        if (std::isnan(l[k]) || l[k] == std::numeric_limits<T>::infinity())
          throw_error<ValueError>(op, "row ", row, " of argument 'logits' ", logits.shape(), " has logit ",
                                  double(l[k]), " at class ", k, "; logits must be finite or -inf");
        m = std::max(m, double(l[k]));
      }
      if (m == -std::numeric_limits<double>::infinity())
        throw_error<ValueError>(op, "row ", row, " of argument 'logits' ", logits.shape(),
                                " has no finite logit: every class is excluded");
      row_max[row] = m;
    }
    std::vector<double> c(C), p(C);
    for (std::size_t row = 0; row < rows; ++row) {
      const T* l = pl + row * C;
      for (std::size_t k = 0; k < C; ++k) p[k] = std::exp((double(l[k]) - row_max[row]) / temperature);
      cumulative(p.data(), C, c);
      out[row] = std::int64_t(inverse_cdf(c, rng.uniform()));
    }
  });
  return y;
}

}  // namespace xgrad
