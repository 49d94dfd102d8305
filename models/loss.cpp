// Losses.
#include "xgrad/models/loss.hpp"
#include "xgrad/ops/ops.hpp"

namespace xgrad {

// logits (..., C at axis a, ...), targets: logits' shape without axis a. Validated here (the
// messages name the class axis), then with axis a moved last: softmax_cross_entropy (ops/softmax).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, ClassAxis class_axis,
                     std::int64_t ignore_index, double label_smoothing) {
  const char* op = "cross_entropy";
  check_float(op, "logits", logits);
  const Shape& ls = logits.shape();
  const long r = long(ls.size());
  if (r == 0 || class_axis.axis < -r || class_axis.axis >= r)
    throw_error<ShapeError>(op, "class axis ", class_axis.axis, " is out of range for argument 'logits' ", ls,
                            " (rank ", r, ")");
  const std::size_t a = std::size_t(class_axis.axis < 0 ? class_axis.axis + r : class_axis.axis);
  const std::string where = a + 1 == ls.size() ? std::string("the last axis") : "axis " + std::to_string(a);
  if (!targets.defined())
    throw_error<DTypeError>(op, "argument 'targets' must be int64, got an undefined tensor");
  if (targets.dtype() != DType::Int64)
    throw_error<DTypeError>(op, "argument 'targets' must be int64, got ", dtype_name(targets.dtype()),
                            " of shape ", targets.shape());
  Shape expected = ls;
  expected.erase(expected.begin() + std::ptrdiff_t(a));
  if (targets.shape() != expected)
    throw_error<ShapeError>(op, "argument 'logits' ", ls, " must be the shape of 'targets' ", targets.shape(),
                            " plus the class axis at ", where, " (classes on ", where, " of 'logits')");
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    throw_error<ValueError>(op, "argument 'label_smoothing' must be in [0, 1], got ", label_smoothing,
                            " (for 'logits' ", ls, ")");
  const std::size_t C = ls[a], N = targets.numel();
  const std::int64_t* t = targets.data<std::int64_t>();
  for (std::size_t i = 0; i < N; ++i)
    if (t[i] != ignore_index && (t[i] < 0 || std::size_t(t[i]) >= C))
      throw_error<IndexError>(op, "target ", t[i], " at flat position ", i, " of argument 'targets' ",
                              targets.shape(), " is out of range for ", C, " classes (", where, " of 'logits' ",
                              ls, ")");

  // Everything is validated. Classes to the last axis: l (targets..., C).
  Tensor l = logits;
  if (a + 1 != ls.size()) {
    std::vector<std::size_t> perm;
    for (std::size_t i = 0; i < ls.size(); ++i)
      if (i != a) perm.push_back(i);
    perm.push_back(a);
    l = permute(logits, perm);
  }
  return softmax_cross_entropy(l, targets, ignore_index, label_smoothing);
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index,
                     double label_smoothing) {
  return cross_entropy(logits, targets, ClassAxis(-1), ignore_index, label_smoothing);
}

Tensor mse_loss(const Tensor& a, const Tensor& b) {
  check_same_float("mse_loss", "a", a, "b", b);
  check_same_shape("mse_loss", "a", a, "b", b);
  Tensor d = sub(a, b);
  return mean(mul(d, d));
}

}  // namespace xgrad
