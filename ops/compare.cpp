// Elementwise comparisons -> Bool. Never recorded (a comparison has no gradient).
//   tensor-tensor: y[i] = a[ia] OP b[ib] over the broadcast shape (one dtype)
//   tensor-scalar: y[i] = a[i] OP s (floats: s rounded to a's dtype; Int64/Bool: exact)
#include <cmath>
#include <type_traits>

#include "xgrad/ops/compare.hpp"
#include "xgrad/ops/detail.hpp"

namespace xgrad {
namespace {

enum class Cmp { Eq, Ne, Lt, Le, Gt, Ge };

template <Cmp c, class T> inline bool compare(T a, T b) {
  if constexpr (c == Cmp::Eq) return a == b;
  if constexpr (c == Cmp::Ne) return a != b;
  if constexpr (c == Cmp::Lt) return a < b;
  if constexpr (c == Cmp::Le) return a <= b;
  if constexpr (c == Cmp::Gt) return a > b;
  if constexpr (c == Cmp::Ge) return a >= b;
}

// Calls f(std::integral_constant<Cmp, c>) for the runtime c, so that the loops are compiled
// once per comparison with the operator inlined.
template <class F> void with_cmp(Cmp c, F&& f) {
  switch (c) {
    case Cmp::Eq: return f(std::integral_constant<Cmp, Cmp::Eq>{});
    case Cmp::Ne: return f(std::integral_constant<Cmp, Cmp::Ne>{});
    case Cmp::Lt: return f(std::integral_constant<Cmp, Cmp::Lt>{});
    case Cmp::Le: return f(std::integral_constant<Cmp, Cmp::Le>{});
    case Cmp::Gt: return f(std::integral_constant<Cmp, Cmp::Gt>{});
    case Cmp::Ge: return f(std::integral_constant<Cmp, Cmp::Ge>{});
  }
}

Tensor compare_tensors(const char* op, Cmp c, const Tensor& a, const Tensor& b) {
  check_defined(op, "a", a);
  check_defined(op, "b", b);
  if (a.dtype() != b.dtype())
    throw_error<DTypeError>(op, "argument 'a' is ", dtype_name(a.dtype()), ' ', a.shape(), " and argument 'b' is ",
                            dtype_name(b.dtype()), ' ', b.shape(), ": comparisons need one dtype (convert with .to())");
  const Shape Y = detail::broadcast_shapes(op, "a", a.shape(), "b", b.shape());
  Tensor y = empty_tensor<bool>(Y, op);
  bool* py = fresh_data<bool>(y);
  dispatch_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = data_of<T>(a);
    const T* pb = data_of<T>(b);
    const auto sa = detail::broadcast_strides(a.shape(), Y);
    const auto sb = detail::broadcast_strides(b.shape(), Y);
    with_cmp(c, [&](auto cc) {
      constexpr Cmp C = decltype(cc)::value;
      detail::for_each_row(Y, sa, sb, [&](std::size_t oa, std::size_t ob, std::size_t oy, std::size_t n,
                                          std::size_t ta, std::size_t tb) {
        if (ta == 1 && tb == 1)
          for (std::size_t i = 0; i < n; ++i) py[oy + i] = compare<C>(pa[oa + i], pb[ob + i]);
        else if (tb == 0)
          for (std::size_t i = 0; i < n; ++i) py[oy + i] = compare<C>(pa[oa + i * ta], pb[ob]);
        else
          for (std::size_t i = 0; i < n; ++i) py[oy + i] = compare<C>(pa[oa + i * ta], pb[ob + i * tb]);
      });
    });
  });
  return y;
}

// The order of an integer v relative to a double s, exactly: -1 (v < s), 0, 1, or 2 when s is
// NaN (unordered). s is split into floor(s) (an integer when |s| < 2^63) and whether s has a
// fractional part, once per call.
struct ExactScalar {
  enum Kind { Below, Above, Finite, Unordered } kind;  // s < every int64, s > every int64, ...
  std::int64_t floor = 0;
  bool fractional = false;
  explicit ExactScalar(double s) {
    if (std::isnan(s)) kind = Unordered;
    else if (s >= 9223372036854775808.0) kind = Above;  // 2^63
    else if (s < -9223372036854775808.0) kind = Below;
    else {
      kind = Finite;
      const double f = std::floor(s);
      floor = std::int64_t(f);
      fractional = f != s;
    }
  }
  int order(std::int64_t v) const {
    switch (kind) {
      case Unordered: return 2;
      case Above: return -1;
      case Below: return 1;
      case Finite: break;
    }
    if (v < floor) return -1;
    if (v > floor) return 1;
    return fractional ? -1 : 0;  // v == floor(s) < s
  }
};

template <Cmp c> inline bool from_order(int o) {
  if constexpr (c == Cmp::Eq) return o == 0;
  if constexpr (c == Cmp::Ne) return o != 0;  // NaN: unordered, so not equal
  if constexpr (c == Cmp::Lt) return o == -1;
  if constexpr (c == Cmp::Le) return o == -1 || o == 0;
  if constexpr (c == Cmp::Gt) return o == 1;
  if constexpr (c == Cmp::Ge) return o == 1 || o == 0;
}

Tensor compare_scalar(const char* op, Cmp c, const Tensor& a, double s) {
  check_defined(op, "a", a);
  Tensor y = empty_tensor<bool>(a.shape(), op);
  bool* py = fresh_data<bool>(y);
  const std::size_t n = a.numel();
  dispatch_dtype(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = data_of<T>(a);
    with_cmp(c, [&](auto cc) {
      constexpr Cmp C = decltype(cc)::value;
      if constexpr (std::is_floating_point_v<T>) {
        const T st = T(s);
        for (std::size_t i = 0; i < n; ++i) py[i] = compare<C>(pa[i], st);
      } else {
        const ExactScalar e(s);
        for (std::size_t i = 0; i < n; ++i) py[i] = from_order<C>(e.order(std::int64_t(pa[i])));
      }
    });
  });
  return y;
}

}  // namespace

Tensor eq(const Tensor& a, const Tensor& b) { return compare_tensors("eq", Cmp::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_tensors("ne", Cmp::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_tensors("lt", Cmp::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_tensors("le", Cmp::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_tensors("gt", Cmp::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_tensors("ge", Cmp::Ge, a, b); }

Tensor eq(const Tensor& a, double b) { return compare_scalar("eq", Cmp::Eq, a, b); }
Tensor ne(const Tensor& a, double b) { return compare_scalar("ne", Cmp::Ne, a, b); }
Tensor lt(const Tensor& a, double b) { return compare_scalar("lt", Cmp::Lt, a, b); }
Tensor le(const Tensor& a, double b) { return compare_scalar("le", Cmp::Le, a, b); }
Tensor gt(const Tensor& a, double b) { return compare_scalar("gt", Cmp::Gt, a, b); }
Tensor ge(const Tensor& a, double b) { return compare_scalar("ge", Cmp::Ge, a, b); }

}  // namespace xgrad
