// Losses.
#include "xgrad/models/loss.hpp"
#include "xgrad/ops/ops.hpp"

namespace xgrad {

// logits: (N..., C), targets: (N...);  loss = -sum(w * log_softmax(logits)) / #kept
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                     double label_smoothing) {
  check_float("cross_entropy", "logits", logits);
  if (!targets.defined() || targets.dtype() != DType::Int64)
    throw DTypeError("cross_entropy: argument 'targets' must be int64" +
                     (targets.defined() ? ", got " + std::string(dtype_name(targets.dtype())) +
                                              " of shape " + shape_str(targets.shape())
                                        : std::string()));
  const Shape& ls = logits.shape();
  if (ls.empty() || targets.dim() + 1 != ls.size() ||
      !std::equal(targets.shape().begin(), targets.shape().end(), ls.begin()))
    throw ShapeError("cross_entropy: argument 'logits' " + shape_str(ls) +
                     " must be targets' shape " + shape_str(targets.shape()) + " plus a class dim");
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    throw ValueError("cross_entropy: label_smoothing must be in [0, 1], got " +
                     std::to_string(label_smoothing));
  const std::size_t C = ls.back(), N = targets.numel();
  const std::int64_t* t = targets.data<std::int64_t>();
  std::vector<double> w(N * C, 0.0);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < N; ++i) {
    if (t[i] == ignore_index) continue;
    if (t[i] < 0 || std::size_t(t[i]) >= C)
      throw IndexError("cross_entropy: target " + std::to_string(t[i]) + " at flat position " +
                       std::to_string(i) + " is out of range for " + std::to_string(C) + " classes");
    ++kept;
    for (std::size_t c = 0; c < C; ++c) w[i * C + c] = label_smoothing / double(C);
    w[i * C + std::size_t(t[i])] += 1.0 - label_smoothing;
  }
  Tensor weights = tensor(w, ls, logits.dtype());
  // Log-probabilities with weight 0 are dropped before the product: a -inf there (a -inf
  // logit, or float overflow) would otherwise make 0 * -inf = NaN.
  std::vector<bool> unused(w.size());
  for (std::size_t i = 0; i < w.size(); ++i) unused[i] = w[i] == 0.0;
  Tensor logp = masked_fill(log_softmax(logits, -1), bool_tensor(unused, ls), 0.0);
  Tensor total = sum(mul(logp, weights));
  return mul_scalar(total, kept ? -1.0 / double(kept) : 0.0);
}

Tensor mse_loss(const Tensor& a, const Tensor& b) {
  check_same_float("mse_loss", "a", a, "b", b);
  if (a.shape() != b.shape())
    throw ShapeError("mse_loss: argument 'a' " + shape_str(a.shape()) + " and 'b' " +
                     shape_str(b.shape()) + " must have one shape");
  Tensor d = sub(a, b);
  return mean(mul(d, d));
}

}  // namespace xgrad
