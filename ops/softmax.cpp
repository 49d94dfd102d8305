// softmax, log_softmax, masked_softmax along one axis. x: (outer, n, inner) around axis.
//
//   y_i = exp(x_i - m) / sum_j exp(x_j - m),   m = max over allowed j
//   dx  = y * (g - sum(g * y, axis))                          (softmax, masked_softmax)
//   log-softmax: y_i = x_i - m - log sum_j exp(x_j - m);  dx = g - exp(y) * sum(g, axis)
// Excluded entries (mask true, or x = -inf) get y = 0; a row with nothing allowed gets
// y = 0 everywhere, so its gradient y * (...) is 0 too: no NaN anywhere.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"
#include "xgrad/ops/unary.hpp"

namespace xgrad {
namespace {

// The mask is read through broadcast strides `ms` (one per axis of x, 0 where broadcast),
// so a (T, S) or (B, 1, 1, S) mask is never expanded to x's shape.
template <class T>
void softmax_rows(const T* x, const bool* mask, const std::vector<std::size_t>& ms, const Shape& shape,
                  std::size_t axis, T* y, bool log_out) {
  const detail::AxisSplit s = detail::split_at(shape, axis);
  const T ninf = -std::numeric_limits<T>::infinity();
  const std::size_t mstep = mask ? ms[axis] : 0;
  std::vector<T> e(s.n);
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t r = 0; r < s.inner; ++r) {
      const T* xr = x + o * s.n * s.inner + r;  // element i of the row: xr[i * inner]
      T* yr = y + o * s.n * s.inner + r;
      const bool* mr = nullptr;                 // mask of element i: mr[i * mstep]
      if (mask) {
        std::size_t off = 0, oo = o, rr = r;
        for (std::size_t d = shape.size(); d-- > axis + 1;) off += (rr % shape[d]) * ms[d], rr /= shape[d];
        for (std::size_t d = axis; d-- > 0;) off += (oo % shape[d]) * ms[d], oo /= shape[d];
        mr = mask + off;
      }
      T m = ninf;
      for (std::size_t i = 0; i < s.n; ++i) {
        const T v = xr[i * s.inner];
        e[i] = (mr && mr[i * mstep]) ? ninf : v;  // excluded entries become -inf
        m = std::max(m, e[i]);
      }
      if (m == ninf) {  // fully masked row
        for (std::size_t i = 0; i < s.n; ++i) yr[i * s.inner] = log_out ? ninf : T(0);
        continue;
      }
      detail::Accumulator<T> total = 0;  // float32 rows sum in float64
      for (std::size_t i = 0; i < s.n; ++i) {
        const T ex = e[i] == ninf ? T(0) : std::exp(e[i] - m);
        total += ex;
        if (!log_out) e[i] = ex;
      }
      if (log_out) {
        const T log_total = T(std::log(total));  // (x - m) - log_total: m + log_total may round to m
        for (std::size_t i = 0; i < s.n; ++i) yr[i * s.inner] = e[i] == ninf ? ninf : (e[i] - m) - log_total;
      } else {
        const T inv = T(1 / total);
        for (std::size_t i = 0; i < s.n; ++i) yr[i * s.inner] = e[i] * inv;
      }
    }
}

Tensor softmax_forward(const char* op, const Tensor& x, const Tensor* mask, std::size_t axis,
                       bool log_out) {
  std::vector<std::size_t> ms;
  if (mask) {
    check_mask_fits(op, *mask, x.shape());
    ms = detail::broadcast_strides(mask->shape(), x.shape());
  }
  return dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Tensor y = empty_tensor<T>(x.shape(), op);
    if (x.numel() == 0) return y;
    softmax_rows<T>(data_of<T>(x), mask ? mask->data<bool>() : nullptr, ms, x.shape(), axis,
                    fresh_data<T>(y), log_out);
    return y;
  });
}

}  // namespace

// dx = y * (g - s),  s = sum(g * y, axis)                      y, g, dx: same shape
// with upstream U:  d/dg = softmax_backward(y, U)
//                   d/dy = U * (g - s) - g * sum(U * y, axis)
Tensor softmax_backward(const Tensor& y, const Tensor& g, long axis) {
  check_same_float("softmax_backward", "y", y, "g", g);
  check_same_shape("softmax_backward", "y", y, "g", g);
  const std::size_t ax = normalize_axis("softmax_backward", axis, y.shape());
  const auto s = detail::split_at(y.shape(), ax);
  Tensor dx = dispatch_float("softmax_backward", y.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* py = data_of<T>(y);
    const T* pg = data_of<T>(g);
    Tensor out = empty_tensor<T>(y.shape(), "softmax_backward");
    T* po = fresh_data<T>(out);
    if (y.numel() == 0) return out;
    for (std::size_t o = 0; o < s.outer; ++o)
      for (std::size_t r = 0; r < s.inner; ++r) {
        const std::size_t base = o * s.n * s.inner + r;
        detail::Accumulator<T> acc = 0;
        for (std::size_t i = 0; i < s.n; ++i) acc += pg[base + i * s.inner] * py[base + i * s.inner];
        const T dot = T(acc);
        for (std::size_t i = 0; i < s.n; ++i) {
          const std::size_t k = base + i * s.inner;
          po[k] = py[k] * (pg[k] - dot);
        }
      }
    return out;
  });
  const long a = long(ax);
  return record("softmax_backward", dx, {y, g}, [a](const Node& n, const Tensor& u) -> std::vector<Tensor> {
    const Tensor &y = n.input(0), &g = n.input(1);
    Tensor dy;
    if (n.needs_grad(0)) {
      Tensor s = sum(mul(g, y), {a}, true);
      dy = sub(mul(u, sub(g, s)), mul(g, sum(mul(u, y), {a}, true)));
    }
    return {dy, n.needs_grad(1) ? softmax_backward(y, u, a) : Tensor()};
  });
}

namespace {
// softmax's and masked_softmax's backward, from the saved output y: dx = softmax_backward(y, g).
BackwardFn backward_from_output(long ax) {
  return [ax](const Node& n, const Tensor& g) -> std::vector<Tensor> { return {softmax_backward(n.output(), g, ax)}; };
}
}  // namespace

// A rank-0 x is a one-element row along axis 0 or -1 (as PyTorch): softmax 1, log_softmax 0.
template <class F> Tensor as_scalar_row(const char* op, const Tensor& x, long axis, F&& f) {
  check_scalar_axis(op, axis);
  return reshape(f(reshape(x, {1})), {});
}

Tensor softmax(const Tensor& x, long axis) {
  check_float("softmax", "x", x);
  if (x.dim() == 0) return as_scalar_row("softmax", x, axis, [](const Tensor& r) { return softmax(r, 0); });
  const long ax = long(normalize_axis("softmax", axis, x.shape()));
  Tensor y = softmax_forward("softmax", x, nullptr, std::size_t(ax), false);
  return record("softmax", y, {x}, backward_from_output(ax));
}

Tensor masked_softmax(const Tensor& x, const Tensor& mask, long axis) {
  check_float("masked_softmax", "x", x);
  if (x.dim() == 0) {
    check_mask_fits("masked_softmax", mask, x.shape());
    return as_scalar_row("masked_softmax", x, axis, [&](const Tensor& r) { return masked_softmax(r, reshape(mask, {1}), 0); });
  }
  const long ax = long(normalize_axis("masked_softmax", axis, x.shape()));
  Tensor y = softmax_forward("masked_softmax", x, &mask, std::size_t(ax), false);
  return record("masked_softmax", y, {x}, backward_from_output(ax));
}

// dx = g - exp(y) * sum(g, axis)
Tensor log_softmax(const Tensor& x, long axis) {
  check_float("log_softmax", "x", x);
  if (x.dim() == 0) return as_scalar_row("log_softmax", x, axis, [](const Tensor& r) { return log_softmax(r, 0); });
  const long ax = long(normalize_axis("log_softmax", axis, x.shape()));
  Tensor y = softmax_forward("log_softmax", x, nullptr, std::size_t(ax), true);
  return record("log_softmax", y, {x}, [ax](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {sub(g, mul(exp(n.output()), sum(g, {ax}, true)))};
  });
}

// --- softmax_cross_entropy -----------------------------------------------------------------
// Forward, per row i not ignored (x_i: C contiguous logits):
//   m = max_c x_ic, lt = log sum_c exp(x_ic - m), log p_c = (x_ic - m) - lt   (log_softmax's own
//   operations, so its bits), loss += w_ic log p_c over w_ic != 0, in row and class order
//   (float32 in float64); loss *= -1 / K. Saved: (m, lt) per row.
// Backward (first order), rows not ignored: dx_ic = (g / K) (W_i p_c - w_ic), p_c = exp(log p_c)
// (0 for a row of all -inf); ignored rows 0. Under create_graph the same from softmax, mul, sub.
namespace {

// The class weights of one row: w_c = base, plus (1 - label_smoothing) at the target.
struct CrossEntropyWeights {
  double base, hit;  // label_smoothing / C, 1 - label_smoothing
  double at(std::size_t c, std::int64_t target) const { return base + (std::int64_t(c) == target ? hit : 0.0); }
};

// v rounded to dt (the weights the first-order kernel uses as T).
double in_dtype(DType dt, double v) { return dt == DType::Float32 ? double(float(v)) : v; }

template <class T>
void row_log_softmax_stats(const T* x, std::size_t C, T& m, T& lt) {
  const T ninf = -std::numeric_limits<T>::infinity();
  m = ninf;
  for (std::size_t c = 0; c < C; ++c) m = std::max(m, x[c]);
  if (m == ninf) return lt = T(0), void();  // every logit -inf: log p = -inf
  detail::Accumulator<T> total = 0;  // as softmax_rows
  for (std::size_t c = 0; c < C; ++c) total += x[c] == ninf ? T(0) : std::exp(x[c] - m);
  lt = T(std::log(total));
}
template <class T>
T row_log_p(T x, T m, T lt) {
  const T ninf = -std::numeric_limits<T>::infinity();
  return x == ninf || m == ninf ? ninf : (x - m) - lt;
}

}  // namespace

Tensor softmax_cross_entropy(const Tensor& x, const Tensor& targets, std::int64_t ignore_index,
                             double label_smoothing) {
  const char* op = "softmax_cross_entropy";
  check_float(op, "x", x);
  if (x.dim() == 0) throw_error<ShapeError>(op, "argument 'x' must have a class axis (the last), got a scalar");
  check_defined(op, "targets", targets);
  if (targets.dtype() != DType::Int64)
    throw_error<DTypeError>(op, "argument 'targets' must be int64, got ", dtype_name(targets.dtype()), " of shape ",
                            targets.shape());
  const Shape rows_shape(x.shape().begin(), x.shape().end() - 1);
  if (targets.shape() != rows_shape)
    throw_error<ShapeError>(op, "argument 'targets' ", targets.shape(), " must be the shape of 'x' ", x.shape(),
                            " without its last (class) axis");
  if (!(label_smoothing >= 0 && label_smoothing <= 1))
    throw_error<ValueError>(op, "argument 'label_smoothing' must be in [0, 1], got ", label_smoothing);
  const std::size_t C = x.shape().back(), N = targets.numel();
  const std::int64_t* t = targets.data<std::int64_t>();
  std::size_t kept = 0;
  for (std::size_t i = 0; i < N; ++i) {
    if (t[i] == ignore_index) continue;
    if (t[i] < 0 || std::size_t(t[i]) >= C)
      throw_error<IndexError>(op, "target ", t[i], " at flat position ", i, " of argument 'targets' ",
                              targets.shape(), " is out of range for ", C, " classes (last axis of 'x' ", x.shape(), ")");
    ++kept;
  }
  const CrossEntropyWeights wt{label_smoothing / double(C), 1.0 - label_smoothing};
  const double inv_kept = kept ? 1.0 / double(kept) : 0.0;
  auto stats = std::make_shared<std::vector<double>>(2 * N);  // (m, lt) per row, as T
  Tensor loss = dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    detail::Accumulator<T> acc = 0;  // N * C terms with label smoothing
    for (std::size_t i = 0; i < N; ++i) {
      if (t[i] == ignore_index) continue;
      const T* xi = px + i * C;
      T m, lt;
      row_log_softmax_stats(xi, C, m, lt);
      (*stats)[2 * i] = double(m), (*stats)[2 * i + 1] = double(lt);
      for (std::size_t c = 0; c < C; ++c) {
        const T w = T(wt.at(c, t[i]));
        if (w != T(0)) acc += w * row_log_p(xi[c], m, lt);
      }
    }
    Tensor out = empty_tensor<T>({}, op);
    fresh_data<T>(out)[0] = kept ? T(acc * -inv_kept) : T(0);
    return out;
  });
  // The constant parts of the VJP as tensors (create_graph): w (rows..., C), W (rows..., 1).
  auto weights = [=](DType dt, const std::int64_t* tg) {
    std::vector<double> w(N * C, 0.0), row(N, 0.0);
    for (std::size_t i = 0; i < N; ++i) {
      if (tg[i] == ignore_index) continue;
      for (std::size_t c = 0; c < C; ++c) row[i] += (w[i * C + c] = in_dtype(dt, wt.at(c, tg[i])));
    }
    Shape rs = rows_shape;
    rs.push_back(1);
    Shape ws = rows_shape;
    ws.push_back(C);
    return std::make_pair(tensor(w, ws, dt), tensor(row, rs, dt));
  };
  auto differentiable = [=](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const auto [w, W] = weights(g.dtype(), n.input(1).data<std::int64_t>());
    const Tensor& xi = n.input(0);
    return {mul(mul_scalar(sub(mul(softmax(xi, -1), W), w), inv_kept), g), Tensor()};
  };
  auto first_order = [=](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return dispatch_float(op, g.dtype(), [&](auto zero) -> std::vector<Tensor> {
      using T = decltype(zero);
      const T* px = data_of<T>(n.input(0));
      const std::int64_t* tt = n.input(1).data<std::int64_t>();
      const T scale = data_of<T>(g)[0] * T(inv_kept);
      Tensor dx = empty_tensor<T>(n.input(0).shape(), op);
      T* pd = fresh_data<T>(dx);
      for (std::size_t i = 0; i < N; ++i) {
        T* di = pd + i * C;
        if (tt[i] == ignore_index) {
          std::fill_n(di, C, T(0));
          continue;
        }
        const T* xi = px + i * C;
        const T m = T((*stats)[2 * i]), lt = T((*stats)[2 * i + 1]);
        T W = 0;
        for (std::size_t c = 0; c < C; ++c) W += T(wt.at(c, tt[i]));
        for (std::size_t c = 0; c < C; ++c) {
          const T lp = row_log_p(xi[c], m, lt);
          const T p = lp == -std::numeric_limits<T>::infinity() ? T(0) : std::exp(lp);
          di[c] = scale * (W * p - T(wt.at(c, tt[i])));
        }
      }
      return {dx, Tensor()};
    });
  };
  return record_fused(op, loss, {x, targets}, first_order, differentiable);
}

// --- registration ----------------------------------------------------------------------
namespace {
std::vector<OpSample> softmax_samples(Rng& r) {
  return {{"(2,5)", {sample_randn({2, 5}, r)}},
          {"(2,3,4)", {sample_randn({2, 3, 4}, r)}},
          {"(3,1): size-1 axis -1 has zero gradient", {sample_randn({3, 1}, r)}, true}};
}
// Row 0 partly masked, row 1 fully masked, row 2 open; the mask broadcasts over the batch.
std::vector<OpSample> masked_samples(Rng& r) {
  Tensor mask = bool_tensor({false, true, false, true,  //
                             true, true, true, true,    //
                             false, false, false, false},
                            {3, 4});
  return {{"(2,3,4) with a fully masked row", {sample_randn({2, 3, 4}, r), mask}},
          {"(3,4) causal", {sample_randn({3, 4}, r), causal_mask(3, 4)}}};
}
}  // namespace

XGRAD_REGISTER_OP({"softmax", [](const auto& x) { return softmax(x[0], -1); }, softmax_samples});
XGRAD_REGISTER_OP({"softmax(axis 0)", [](const auto& x) { return softmax(x[0], 0); }, softmax_samples});
XGRAD_REGISTER_OP({"log_softmax", [](const auto& x) { return log_softmax(x[0], -1); }, softmax_samples});
XGRAD_REGISTER_OP({"log_softmax(axis 0)", [](const auto& x) { return log_softmax(x[0], 0); },
                   softmax_samples});
XGRAD_REGISTER_OP({"softmax_backward", [](const auto& x) { return softmax_backward(x[0], x[1], -1); },
                   [](Rng& r) -> std::vector<OpSample> {
                     // y: rows of a softmax (with an exact-zero masked entry), g: any
                     Tensor y = tensor({0.2, 0.5, 0.3, 0.0, 0.6, 0.1, 0.25, 0.05}, {2, 4}, DType::Float64);
                     y.set_requires_grad(true);
                     return {{"(2,4)", {y, sample_randn({2, 4}, r)}},
                             {"(2,3,4) random y", {sample_uniform({2, 3, 4}, 0.1, 0.9, r), sample_randn({2, 3, 4}, r)}}};
                   }});
XGRAD_REGISTER_OP({"masked_softmax", [](const auto& x) { return masked_softmax(x[0], x[1], -1); },
                   masked_samples});
// Targets of (2, 3) rows over 4 classes, two ignored; a -inf logit off the targets (adds nothing).
XGRAD_REGISTER_OP({"softmax_cross_entropy",
                   [](const auto& x) { return softmax_cross_entropy(x[0], index_tensor({0, 3, -100, 2, 1, -100}, {2, 3})); },
                   [](Rng& r) -> std::vector<OpSample> {
                     Tensor with_ninf = sample_randn({2, 3, 4}, r);
                     with_ninf.mutable_data<double>()[1] = -std::numeric_limits<double>::infinity();  // row 0, class 1
                     return {{"(2,3,4)", {sample_randn({2, 3, 4}, r)}}, {"(2,3,4) with a -inf logit", {with_ninf}}};
                   }});
XGRAD_REGISTER_OP({"softmax_cross_entropy(label_smoothing 0.2)",
                   [](const auto& x) { return softmax_cross_entropy(x[0], index_tensor({4, 0, 2, -1}, {4}), -1, 0.2); },
                   [](Rng& r) -> std::vector<OpSample> { return {{"(4,5), ignore_index -1", {sample_randn({4, 5}, r)}}}; }});

}  // namespace xgrad
