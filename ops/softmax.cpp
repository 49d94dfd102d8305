// softmax, log_softmax, masked_softmax along one axis. x: (outer, n, inner) around axis.
//
//   y_i = exp(x_i - m) / sum_j exp(x_j - m),   m = max over allowed j
//   dx  = y * (g - sum(g * y, axis))                          (softmax, masked_softmax)
//   log-softmax: y_i = x_i - m - log sum_j exp(x_j - m);  dx = g - exp(y) * sum(g, axis)
// Excluded entries (mask true, or x = -inf) get y = 0; a row with nothing allowed gets
// y = 0 everywhere, so its gradient y * (...) is 0 too: no NaN anywhere.
#include <cmath>
#include <limits>

#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/reduce.hpp"
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
      T total = 0;
      for (std::size_t i = 0; i < s.n; ++i) {
        const T ex = e[i] == ninf ? T(0) : std::exp(e[i] - m);
        total += ex;
        if (!log_out) e[i] = ex;
      }
      if (log_out) {
        const T log_total = std::log(total);  // (x - m) - log_total: m + log_total may round to m
        for (std::size_t i = 0; i < s.n; ++i) yr[i * s.inner] = e[i] == ninf ? ninf : (e[i] - m) - log_total;
      } else {
        const T inv = T(1) / total;
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
        T dot = 0;
        for (std::size_t i = 0; i < s.n; ++i) dot += pg[base + i * s.inner] * py[base + i * s.inner];
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

Tensor softmax(const Tensor& x, long axis) {
  check_float("softmax", "x", x);
  const long ax = long(normalize_axis("softmax", axis, x.shape()));
  Tensor y = softmax_forward("softmax", x, nullptr, std::size_t(ax), false);
  return record("softmax", y, {x}, backward_from_output(ax));
}

Tensor masked_softmax(const Tensor& x, const Tensor& mask, long axis) {
  check_float("masked_softmax", "x", x);
  const long ax = long(normalize_axis("masked_softmax", axis, x.shape()));
  Tensor y = softmax_forward("masked_softmax", x, &mask, std::size_t(ax), false);
  return record("masked_softmax", y, {x}, backward_from_output(ax));
}

// dx = g - exp(y) * sum(g, axis)
Tensor log_softmax(const Tensor& x, long axis) {
  check_float("log_softmax", "x", x);
  const long ax = long(normalize_axis("log_softmax", axis, x.shape()));
  Tensor y = softmax_forward("log_softmax", x, nullptr, std::size_t(ax), true);
  return record("log_softmax", y, {x}, [ax](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {sub(g, mul(exp(n.output()), sum(g, {ax}, true)))};
  });
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

}  // namespace xgrad
