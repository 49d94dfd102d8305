// Broadcasting binary ops and scalar ops.
//
//   y = a (op) b          a: A, b: B, y: broadcast(A, B)
//   da = sum_to(dy * dy/da, A),  db = sum_to(dy * dy/db, B)
#include <cmath>

#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"

namespace xgrad {
namespace {

// y = fn(a, b) elementwise with broadcasting; fn is a scalar functor.
template <class Fn>
Tensor binary_forward(const char* op, const Tensor& a, const Tensor& b, Fn fn) {
  check_same_float(op, "a", a, "b", b);
  const Shape Y = detail::broadcast_shapes(op, "a", a.shape(), "b", b.shape());
  return dispatch_float(op, a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = data_of<T>(a);
    const T* pb = data_of<T>(b);
    Tensor y = empty_tensor<T>(Y, op);
    T* py = fresh_data<T>(y);
    if (a.shape() == b.shape()) {  // one flat loop, in chunks over the threads when long
      detail::parallel_chunks(numel(Y), [&](std::size_t lo, std::size_t hi) {
        for (std::size_t i = lo; i < hi; ++i) py[i] = fn(pa[i], pb[i]);
      });
      return y;
    }
    const auto sa = detail::broadcast_strides(a.shape(), Y);
    const auto sb = detail::broadcast_strides(b.shape(), Y);
    detail::for_each_row(Y, sa, sb, [&](std::size_t oa, std::size_t ob, std::size_t oy, std::size_t n,
                                        std::size_t ta, std::size_t tb) {
      if (ta == 1 && tb == 1)
        for (std::size_t i = 0; i < n; ++i) py[oy + i] = fn(pa[oa + i], pb[ob + i]);
      else if (ta == 1 && tb == 0)
        for (std::size_t i = 0; i < n; ++i) py[oy + i] = fn(pa[oa + i], pb[ob]);
      else if (ta == 0 && tb == 1)
        for (std::size_t i = 0; i < n; ++i) py[oy + i] = fn(pa[oa], pb[ob + i]);
      else
        for (std::size_t i = 0; i < n; ++i) py[oy + i] = fn(pa[oa + i * ta], pb[ob + i * tb]);
    });
    return y;
  });
}

}  // namespace

// y = a + b;  da = sum_to(g, A);  db = sum_to(g, B)
Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward("add", a, b, [](const auto& x, const auto& z) { return x + z; });
  return record("add", y, {a, b}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {n.needs_grad(0) ? sum_to(g, n.input(0).shape()) : Tensor(),
            n.needs_grad(1) ? sum_to(g, n.input(1).shape()) : Tensor()};
  });
}

// y = a - b;  da = sum_to(g, A);  db = -sum_to(g, B)
Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward("sub", a, b, [](const auto& x, const auto& z) { return x - z; });
  return record("sub", y, {a, b}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {n.needs_grad(0) ? sum_to(g, n.input(0).shape()) : Tensor(),
            n.needs_grad(1) ? neg(sum_to(g, n.input(1).shape())) : Tensor()};
  });
}

// y = a * b;  da = sum_to(g * b, A);  db = sum_to(g * a, B)
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward("mul", a, b, [](const auto& x, const auto& z) { return x * z; });
  return record("mul", y, {a, b}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const Tensor &a = n.input(0), &b = n.input(1);
    return {n.needs_grad(0) ? sum_to(mul(g, b), a.shape()) : Tensor(),
            n.needs_grad(1) ? sum_to(mul(g, a), b.shape()) : Tensor()};
  });
}

// y = a / b;  da = sum_to(g / b, A);  db = sum_to(-g * a / b^2, B)
Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward("div", a, b, [](const auto& x, const auto& z) { return x / z; });
  return record("div", y, {a, b}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const Tensor &a = n.input(0), &b = n.input(1);
    return {n.needs_grad(0) ? sum_to(div(g, b), a.shape()) : Tensor(),
            n.needs_grad(1) ? sum_to(neg(div(mul(g, a), mul(b, b))), b.shape()) : Tensor()};
  });
}

// y = -x;  dx = -g
Tensor neg(const Tensor& x) {
  Tensor y = detail::map_float("neg", x, [](auto v) { return -v; });
  return record("neg", y, {x}, [](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {neg(g)};
  });
}

// y = x + s;  dx = g
Tensor add_scalar(const Tensor& x, double s) {
  Tensor y = detail::map_float("add_scalar", x, [s](auto v) { return v + decltype(v)(s); });
  return record("add_scalar", y, {x}, [](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {g};
  });
}

// y = x * s;  dx = g * s
Tensor mul_scalar(const Tensor& x, double s) {
  Tensor y = detail::map_float("mul_scalar", x, [s](auto v) { return v * decltype(v)(s); });
  return record("mul_scalar", y, {x}, [s](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {mul_scalar(g, s)};
  });
}

// y = x^p;  dx = g * p * x^(p-1)   (p = 0: dx = 0; p = 1: dx = g)
Tensor pow(const Tensor& x, double p) {
  Tensor y = detail::map_float("pow", x, [p](auto v) { return std::pow(v, decltype(v)(p)); });
  return record("pow", y, {x}, [p](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    if (p == 0.0) return {zeros(g.shape(), g.dtype())};
    if (p == 1.0) return {g};
    return {mul(g, mul_scalar(pow(n.input(0), p - 1.0), p))};
  });
}

namespace {
// maximum's and minimum's gradient weight for the first operand, PyTorch 1.13's rule: 0 where
// it loses, 1/2 on a tie, else 1 (so where either is NaN both operands get the full gradient).
// The weights are constants: the second derivative is 0.
template <bool kMax> Tensor winner_weight(const char* op, const Tensor& a, const Tensor& b) {
  return binary_forward(op, a, b, [](auto x, auto z) {
    using T = decltype(x);
    return (kMax ? x < z : x > z) ? T(0) : (x == z ? T(0.5) : T(1));
  });
}

template <bool kMax> BackwardFn extremum_backward(const char* op) {
  return [op](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const Tensor &a = n.input(0), &b = n.input(1);
    return {n.needs_grad(0) ? sum_to(mul(g, winner_weight<kMax>(op, a, b)), a.shape()) : Tensor(),
            n.needs_grad(1) ? sum_to(mul(g, winner_weight<kMax>(op, b, a)), b.shape()) : Tensor()};
  };
}
}  // namespace

// y = max(a, b), NaN if either is;  da = sum_to(g * w(a, b), A), db = sum_to(g * w(b, a), B),
// w(a, b) = 1 - [a < b] - [a == b] / 2
Tensor maximum(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward("maximum", a, b, [](auto x, auto z) { return (x > z || x != x) ? x : z; });
  return record("maximum", y, {a, b}, extremum_backward<true>("maximum"));
}

// y = min(a, b), NaN if either is;  as maximum with w(a, b) = 1 - [a > b] - [a == b] / 2
Tensor minimum(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward("minimum", a, b, [](auto x, auto z) { return (x < z || x != x) ? x : z; });
  return record("minimum", y, {a, b}, extremum_backward<false>("minimum"));
}

// --- registration ----------------------------------------------------------------------
namespace {

// Same shape, broadcasting both ways, size-1 dims, a rank-0 operand and an empty batch.
std::vector<OpSample> binary_samples(Rng& rng, double lo, double hi) {
  auto s = [&](const Shape& shape) { return sample_uniform(shape, lo, hi, rng); };
  return {{"same shape (2,3)", {s({2, 3}), s({2, 3})}},
          {"broadcast (2,1,3) x (4,3)", {s({2, 1, 3}), s({4, 3})}},
          {"broadcast (3,1) x (1,4)", {s({3, 1}), s({1, 4})}},
          {"scalar x (2,3)", {s({}), s({2, 3})}},
          {"empty batch (0,3) x (3)", {s({0, 3}), s({3})}, true}};
}

std::vector<OpSample> unary_samples(Rng& rng, double lo, double hi) {
  return {{"(2,3)", {sample_uniform({2, 3}, lo, hi, rng)}},
          {"scalar", {sample_uniform({}, lo, hi, rng)}},
          {"empty (0,2)", {sample_uniform({0, 2}, lo, hi, rng)}, true}};
}

}  // namespace

XGRAD_REGISTER_OP({"add", [](const auto& x) { return add(x[0], x[1]); },
                   [](Rng& r) { return binary_samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"sub", [](const auto& x) { return sub(x[0], x[1]); },
                   [](Rng& r) { return binary_samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"mul", [](const auto& x) { return mul(x[0], x[1]); },
                   [](Rng& r) { return binary_samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"div", [](const auto& x) { return div(x[0], x[1]); },
                   [](Rng& r) { return binary_samples(r, 0.5, 2); }});
// maximum / minimum: random operands (ties have probability 0; the half-and-half tie rule is
// checked against PyTorch in tests/test_select_ops.cpp).
XGRAD_REGISTER_OP({"maximum", [](const auto& x) { return maximum(x[0], x[1]); },
                   [](Rng& r) { return binary_samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"minimum", [](const auto& x) { return minimum(x[0], x[1]); },
                   [](Rng& r) { return binary_samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"neg", [](const auto& x) { return neg(x[0]); },
                   [](Rng& r) { return unary_samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"add_scalar", [](const auto& x) { return add_scalar(x[0], 1.5); },
                   [](Rng& r) { return unary_samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"mul_scalar", [](const auto& x) { return mul_scalar(x[0], -2.5); },
                   [](Rng& r) { return unary_samples(r, -2, 2); }});
XGRAD_REGISTER_OP({"pow", [](const auto& x) { return pow(x[0], 2.5); },
                   [](Rng& r) { return unary_samples(r, 0.5, 2); }});
XGRAD_REGISTER_OP({"pow(-1)", [](const auto& x) { return pow(x[0], -1.0); },
                   [](Rng& r) { return unary_samples(r, 0.5, 2); }});

}  // namespace xgrad
