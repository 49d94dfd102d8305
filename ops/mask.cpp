// Masks and selection. Masks are Bool tensors; true = masked.
#include <cmath>
#include <cstdint>

#include "xgrad/ops/detail.hpp"  // before xtensor headers (array.hpp sets xtensor's allocator)

#include <xtensor/xbroadcast.hpp>

#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/reduce.hpp"

namespace xgrad {
namespace {

void check_bool(const char* op, const char* arg, const Tensor& t) {
  check_defined(op, arg, t);
  if (t.dtype() != DType::Bool)
    throw_error<DTypeError>(op, "argument '", arg, "' must be a bool mask, got ", dtype_name(t.dtype()), " of shape ",
                            t.shape());
}

}  // namespace

void check_mask_fits(const char* op, const Tensor& mask, const Shape& shape) {
  check_bool(op, "mask", mask);
  if (mask.shape() != shape && detail::broadcast_shapes(op, "mask", mask.shape(), "x", shape) != shape)
    throw_error<ShapeError>(op, "argument 'mask' ", mask.shape(), " does not broadcast to x ", shape);
}

Tensor expand_mask(const char* op, const Tensor& mask, const Shape& shape) {
  check_mask_fits(op, mask, shape);
  if (mask.shape() == shape) return mask;
  return make_tensor(xt::broadcast(value<bool>(mask), shape), op);
}

// y = mask ? fill : x;  dx = masked_fill(g, mask, 0)
Tensor masked_fill(const Tensor& x, const Tensor& mask, double fill) {
  check_float("masked_fill", "x", x);
  Tensor m = expand_mask("masked_fill", mask, x.shape());
  Tensor y = dispatch_float("masked_fill", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    // m has x's shape (expand_mask). Its bools read as bytes and x read unconditionally: GCC then
    // vectorises the loop into a blend (on bool loads it gave up, and its branch mispredicts on
    // random masks: ~4 ns per element).
    const auto* pm = reinterpret_cast<const std::uint8_t*>(data_of<bool>(m));
    const T* px = data_of<T>(x);
    Tensor out = empty_tensor<T>(x.shape(), "masked_fill");
    T* po = fresh_data<T>(out);
    const T f = T(fill);
    for (std::size_t i = 0, n = out.numel(); i < n; ++i) {
      const T v = px[i];
      po[i] = pm[i] != 0 ? f : v;
    }
    return out;
  });
  return record(
      "masked_fill", y, {x, m},
      [](const Node& n, const Tensor& g) -> std::vector<Tensor> { return {masked_fill(g, n.input(1), 0.0), Tensor()}; },
      /*allow_nonfinite=*/!std::isfinite(fill));
}

// y = cond ? a : b (broadcast);  da = sum_to(where(cond, g, 0), A);  db = sum_to(where(cond, 0, g), B)
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_bool("where", "cond", cond);
  check_same_float("where", "a", a, "b", b);
  Shape ys = detail::broadcast_shapes("where", "a", a.shape(), "b", b.shape());
  ys = detail::broadcast_shapes("where", "cond", cond.shape(), "a, b", ys);
  Tensor y = dispatch_float("where", a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    return make_tensor(xt::where(value<bool>(cond), value<T>(a), value<T>(b)), "where");
  });
  return record("where", y, {a, b, cond}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const Tensor& cond = n.input(2);
    Tensor zero = scalar(0.0, g.dtype());
    return {n.needs_grad(0) ? sum_to(where(cond, g, zero), n.input(0).shape()) : Tensor(),
            n.needs_grad(1) ? sum_to(where(cond, zero, g), n.input(1).shape()) : Tensor(), Tensor()};
  });
}

Tensor causal_mask(std::size_t T, std::size_t S, CausalAlign align) {
  Tensor y = empty_tensor<bool>({T, S}, "causal_mask");
  bool* m = fresh_data<bool>(y);
  const long shift = align == CausalAlign::BottomRight ? long(S) - long(T) : 0;
  for (std::size_t i = 0; i < T; ++i)
    for (std::size_t j = 0; j < S; ++j) m[i * S + j] = long(j) > long(i) + shift;
  return y;
}

template <class Fn> static Tensor logical(const char* op, const Tensor& a, const Tensor& b, Fn fn) {
  check_bool(op, "a", a);
  check_bool(op, "b", b);
  detail::broadcast_shapes(op, "a", a.shape(), "b", b.shape());
  return make_tensor(fn(value<bool>(a), value<bool>(b)), op);
}
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return logical("logical_or", a, b, [](const auto& x, const auto& y) { return x || y; });
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return logical("logical_and", a, b, [](const auto& x, const auto& y) { return x && y; });
}
Tensor logical_not(const Tensor& a) {
  check_bool("logical_not", "a", a);
  const bool* pa = data_of<bool>(a);
  Tensor y = empty_tensor<bool>(a.shape(), "logical_not");
  bool* py = fresh_data<bool>(y);
  for (std::size_t i = 0, n = y.numel(); i < n; ++i) py[i] = !pa[i];
  return y;
}

// --- registration ----------------------------------------------------------------------
XGRAD_REGISTER_OP({"masked_fill", [](const auto& x) { return masked_fill(x[0], x[1], -3.0); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3,4) causal (3,4)", {sample_randn({2, 3, 4}, r), causal_mask(3, 4)}},
                             {"(2,3) row mask (2,1)",
                              {sample_randn({2, 3}, r), bool_tensor({true, false}, {2, 1})}}};
                   }});
XGRAD_REGISTER_OP({"where", [](const auto& x) { return where(x[0], x[1], x[2]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     Tensor c = bool_tensor({true, false, false, true, true, false}, {2, 3});
                     return {{"cond (2,3), a (2,3), b (3)", {c, sample_randn({2, 3}, r), sample_randn({3}, r)}},
                             {"cond (2,3), a (), b (2,1)", {c, sample_randn({}, r), sample_randn({2, 1}, r)}}};
                   }});

}  // namespace xgrad
