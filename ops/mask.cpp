// Masks and selection. Masks are Bool tensors; true = masked.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "xgrad/ops/detail.hpp"
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

// A mask's bools as bytes (0 or 1): GCC vectorises loops that read and write uint8_t, and gives
// up on bool loads (then a branch per element, which mispredicts on random masks: ~4 ns each).
const std::uint8_t* mask_bytes(const Tensor& mask) {
  return reinterpret_cast<const std::uint8_t*>(data_of<bool>(mask));
}
std::uint8_t* fresh_mask_bytes(const Tensor& mask) { return reinterpret_cast<std::uint8_t*>(fresh_data<bool>(mask)); }

// out[i] = c[i] ? a(i) : b(i) for i < n. Both sides are read unconditionally, so with unit
// strides the loop vectorises to a blend (masked_fill, where).
template <class T, class A, class B> void select(const std::uint8_t* c, A a, B b, T* out, std::size_t n) {
  for (std::size_t i = 0; i < n; ++i) {
    const T va = a(i), vb = b(i);
    out[i] = c[i] != 0 ? va : vb;
  }
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
  const std::uint8_t* pm = mask_bytes(mask);
  Tensor y = empty_tensor<bool>(shape, op);
  std::uint8_t* py = fresh_mask_bytes(y);
  const auto sm = detail::broadcast_strides(mask.shape(), shape);
  detail::for_each_row(shape, sm, sm, [&](std::size_t om, std::size_t, std::size_t oy, std::size_t n, std::size_t step,
                                          std::size_t) {
    if (step == 0) std::fill_n(py + oy, n, pm[om]);
    else
      for (std::size_t i = 0; i < n; ++i) py[oy + i] = pm[om + i * step];
  });
  return y;
}

// y = mask ? fill : x;  dx = masked_fill(g, mask, 0)
Tensor masked_fill(const Tensor& x, const Tensor& mask, double fill) {
  check_float("masked_fill", "x", x);
  Tensor m = expand_mask("masked_fill", mask, x.shape());
  Tensor y = dispatch_float("masked_fill", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    const T f = T(fill);
    Tensor out = empty_tensor<T>(x.shape(), "masked_fill");
    select(mask_bytes(m), [f](std::size_t) { return f; }, [px](std::size_t i) { return px[i]; },  // m has x's shape
           fresh_data<T>(out), out.numel());
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
  const Tensor c = expand_mask("where", cond, ys);
  Tensor y = dispatch_float("where", a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const std::uint8_t* pc = mask_bytes(c);  // ys, row-major: indexed like the output
    const T* pa = data_of<T>(a);
    const T* pb = data_of<T>(b);
    Tensor out = empty_tensor<T>(ys, "where");
    T* po = fresh_data<T>(out);
    const auto unit = [](const T* p) { return [p](std::size_t i) { return p[i]; }; };
    if (a.shape() == ys && b.shape() == ys) {  // no broadcasting: one row (for_each_row's stride vectors cost ~40 ns)
      select(pc, unit(pa), unit(pb), po, out.numel());
      return out;
    }
    detail::for_each_row(ys, detail::broadcast_strides(a.shape(), ys), detail::broadcast_strides(b.shape(), ys),
                         [&](std::size_t oa, std::size_t ob, std::size_t oo, std::size_t n, std::size_t ta,
                             std::size_t tb) {
                           if (ta == 1 && tb == 1)
                             select(pc + oo, unit(pa + oa), unit(pb + ob), po + oo, n);
                           else
                             select(pc + oo, [p = pa + oa, ta](std::size_t i) { return p[i * ta]; },
                                    [p = pb + ob, tb](std::size_t i) { return p[i * tb]; }, po + oo, n);
                         });
    return out;
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
  const Shape Y = detail::broadcast_shapes(op, "a", a.shape(), "b", b.shape());
  const std::uint8_t* pa = mask_bytes(a);
  const std::uint8_t* pb = mask_bytes(b);
  Tensor y = empty_tensor<bool>(Y, op);
  std::uint8_t* py = fresh_mask_bytes(y);
  if (a.shape() == b.shape()) {  // no broadcasting: one row
    for (std::size_t i = 0, n = y.numel(); i < n; ++i) py[i] = fn(pa[i], pb[i]);
    return y;
  }
  detail::for_each_row(Y, detail::broadcast_strides(a.shape(), Y), detail::broadcast_strides(b.shape(), Y),
                       [&](std::size_t oa, std::size_t ob, std::size_t oy, std::size_t n, std::size_t ta,
                           std::size_t tb) {
                         if (ta == 1 && tb == 1)
                           for (std::size_t i = 0; i < n; ++i) py[oy + i] = fn(pa[oa + i], pb[ob + i]);
                         else
                           for (std::size_t i = 0; i < n; ++i) py[oy + i] = fn(pa[oa + i * ta], pb[ob + i * tb]);
                       });
  return y;
}
// On bytes 0 or 1, | and & are or and and, and give 0 or 1.
Tensor logical_or(const Tensor& a, const Tensor& b) {
  return logical("logical_or", a, b, [](std::uint8_t x, std::uint8_t y) { return std::uint8_t(x | y); });
}
Tensor logical_and(const Tensor& a, const Tensor& b) {
  return logical("logical_and", a, b, [](std::uint8_t x, std::uint8_t y) { return std::uint8_t(x & y); });
}
Tensor logical_not(const Tensor& a) {
  check_bool("logical_not", "a", a);
  const std::uint8_t* pa = mask_bytes(a);
  Tensor y = empty_tensor<bool>(a.shape(), "logical_not");
  std::uint8_t* py = fresh_mask_bytes(y);
  for (std::size_t i = 0, n = y.numel(); i < n; ++i) py[i] = std::uint8_t(pa[i] ^ 1u);
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
