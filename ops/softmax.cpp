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

template <class T>
void softmax_rows(const T* x, const bool* masked, T* y, detail::AxisSplit s, bool log_out) {
  const T ninf = -std::numeric_limits<T>::infinity();
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t r = 0; r < s.inner; ++r) {
      const std::size_t base = o * s.n * s.inner + r;
      auto allowed = [&](std::size_t k) { return !(masked && masked[k]) && x[k] != ninf; };
      T m = ninf;
      for (std::size_t i = 0; i < s.n; ++i) {
        const std::size_t k = base + i * s.inner;
        if (allowed(k)) m = std::max(m, x[k]);
      }
      if (m == ninf) {  // fully masked row
        for (std::size_t i = 0; i < s.n; ++i) y[base + i * s.inner] = log_out ? ninf : T(0);
        continue;
      }
      T total = 0;
      for (std::size_t i = 0; i < s.n; ++i) {
        const std::size_t k = base + i * s.inner;
        total += allowed(k) ? std::exp(x[k] - m) : T(0);
      }
      const T log_total = std::log(total);
      for (std::size_t i = 0; i < s.n; ++i) {
        const std::size_t k = base + i * s.inner;
        if (log_out) y[k] = allowed(k) ? x[k] - m - log_total : ninf;
        else y[k] = allowed(k) ? std::exp(x[k] - m) / total : T(0);
      }
    }
}

Tensor softmax_forward(const char* op, const Tensor& x, const Tensor* mask, std::size_t axis,
                       bool log_out) {
  Tensor full_mask;
  if (mask) full_mask = expand_mask(op, *mask, x.shape());
  const auto s = detail::split_at(x.shape(), axis);
  return dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    auto y = empty_array<T>(x.shape());
    softmax_rows<T>(value<T>(x).data(), mask ? full_mask.data<bool>() : nullptr, y.data(), s,
                    log_out);
    return make_tensor(std::move(y));
  });
}

// dx = y * (g - sum(g * y, axis))
std::vector<Tensor> softmax_backward(const Node& n, const Tensor& g, long axis) {
  Tensor y = n.output();
  return {mul(y, sub(g, sum(mul(g, y), {axis}, true)))};
}

}  // namespace

Tensor softmax(const Tensor& x, long axis) {
  check_float("softmax", "x", x);
  const long ax = long(normalize_axis("softmax", axis, x.shape()));
  Tensor y = softmax_forward("softmax", x, nullptr, std::size_t(ax), false);
  return record("softmax", y, {x}, [ax](const Node& n, const Tensor& g) {
    return softmax_backward(n, g, ax);
  });
}

Tensor masked_softmax(const Tensor& x, const Tensor& mask, long axis) {
  check_float("masked_softmax", "x", x);
  const long ax = long(normalize_axis("masked_softmax", axis, x.shape()));
  Tensor y = softmax_forward("masked_softmax", x, &mask, std::size_t(ax), false);
  return record("masked_softmax", y, {x}, [ax](const Node& n, const Tensor& g) {
    return softmax_backward(n, g, ax);
  });
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
XGRAD_REGISTER_OP({"masked_softmax", [](const auto& x) { return masked_softmax(x[0], x[1], -1); },
                   masked_samples});

}  // namespace xgrad
