// Losses.
#include "xgrad/models/loss.hpp"
#include "xgrad/ops/ops.hpp"

namespace xgrad {

// logits: (N..., C), targets: (N...);  loss = -sum(w * log_softmax(logits)) / #kept
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                     double label_smoothing) {
  check_float("cross_entropy", "logits", logits);
  if (!targets.defined())
    throw_error<DTypeError>("cross_entropy", "argument 'targets' must be int64, got an undefined tensor");
  if (targets.dtype() != DType::Int64)
    throw_error<DTypeError>("cross_entropy", "argument 'targets' must be int64, got ", dtype_name(targets.dtype()),
                            " of shape ", targets.shape());
  const Shape& ls = logits.shape();
  if (ls.empty() || targets.dim() + 1 != ls.size() ||
      !std::equal(targets.shape().begin(), targets.shape().end(), ls.begin()))
    throw_error<ShapeError>("cross_entropy", "argument 'logits' ", ls, " must be the shape of 'targets' ",
                            targets.shape(), " plus a class axis");
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    throw_error<ValueError>("cross_entropy", "argument 'label_smoothing' must be in [0, 1], got ", label_smoothing,
                            " (for 'logits' ", ls, ")");
  const std::size_t C = ls.back(), N = targets.numel();
  const std::int64_t* t = targets.data<std::int64_t>();
  std::vector<double> w(N * C, 0.0);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < N; ++i) {
    if (t[i] == ignore_index) continue;
    if (t[i] < 0 || std::size_t(t[i]) >= C)
      throw_error<IndexError>("cross_entropy", "target ", t[i], " at flat position ", i, " of argument 'targets' ",
                              targets.shape(), " is out of range for ", C, " classes of 'logits' ", ls);
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
  check_same_shape("mse_loss", "a", a, "b", b);
  Tensor d = sub(a, b);
  return mean(mul(d, d));
}

}  // namespace xgrad
