// Reductions. Shapes: x: X (rank r); K: X with reduced axes set to 1 ("keepdim" shape).
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "xgrad/framework/parallel.hpp"
#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"

namespace xgrad {
namespace {

// out (shape K, zero-filled) += x (shape X) where K[d] is X[d] or 1.
// A row summed into one element (a loss's sum or mean, a sum over the last axis) goes into
// kSumLanes independent accumulators (detail::lane_sum: element i into lane i mod kSumLanes,
// then the lanes pairwise in halves): vectorised, where one accumulator was a serial chain of
// dependent adds (0.8 ns per element: 0.8 ms for a (4, 512, 512) loss). The order depends on
// the shape only.
// Float32 sums accumulate in float64 (detail::Accumulator) and round once (2^20 x 0.1f in 16
// float32 lanes summed to 1.0006x the exact value); PyTorch's CPU sums are cascaded for the
// same reason.
constexpr std::size_t kSumLanes = 16;
template <class T, class A> void sum_into(const T* x, const Shape& X, A* out, const Shape& K) {
  detail::for_each_row(X, detail::contiguous_strides(X), detail::broadcast_strides(K, X),
                       [&](std::size_t ox, std::size_t oo, std::size_t, std::size_t n, std::size_t,
                           std::size_t step) {
                         if (step == 0) {
                           const T* row = x + ox;
                           out[oo] += detail::lane_sum<A, kSumLanes>(n, [row](std::size_t i) { return A(row[i]); });
                         } else {
                           for (std::size_t i = 0; i < n; ++i) out[oo + i] += A(x[ox + i]);
                         }
                       });
}

// out (shape X) = x (shape K) repeated along dims where K[d] = 1.
template <class T> void broadcast_into(const T* x, const Shape& K, T* out, const Shape& X) {
  detail::for_each_row(X, detail::broadcast_strides(K, X), detail::broadcast_strides(K, X),
                       [&](std::size_t ox, std::size_t, std::size_t oo, std::size_t n, std::size_t step,
                           std::size_t) {
                         if (step == 0) {  // a broadcast dim: a fill of a local copy (vectorised)
                           const T v = x[ox];
                           std::fill_n(out + oo, n, v);
                         } else if (step == 1) std::copy_n(x + ox, n, out + oo);
                         else
                           for (std::size_t i = 0; i < n; ++i) out[oo + i] = x[ox + i * step];
                       });
}

// Sums x over the dims where K has 1 and X does not; result has shape `out_shape`
// (K itself or K with some 1s dropped: same element order).
Tensor reduce_sum(const char* op, const Tensor& x, const Shape& K, const Shape& out_shape) {
  return dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    using A = detail::Accumulator<T>;
    Tensor y = empty_tensor<T>(out_shape, op);
    std::vector<A> wide;  // float32: the float64 sums, rounded into y at the end
    A* py;
    if constexpr (std::is_same_v<A, T>) py = fresh_data<T>(y);
    else wide.resize(y.numel()), py = wide.data();
    std::fill_n(py, y.numel(), A(0));
    auto rounded = [&] {
      if constexpr (!std::is_same_v<A, T>) std::copy(wide.begin(), wide.end(), fresh_data<T>(y));
      return y;
    };
    const Shape& X = x.shape();
    const bool column_sums = X.size() >= 2 && K.back() == X.back() &&
                             std::all_of(K.begin(), K.end() - 1, [](std::size_t k) { return k == 1; });
    if (column_sums) {  // (rows, cols) -> (cols), e.g. a bias gradient: column blocks over the threads
      const std::size_t cols = X.back(), rows = cols ? x.numel() / cols : 0;
      const T* px = data_of<T>(x);
      constexpr std::size_t kCols = 64 * sizeof(T) / sizeof(A);  // 32 float64 sums of float32 columns
      // Panels of kRows rows (kRows x cols stays in L2), and within one, a whole block of kCols
      // columns carried in a local array that the compiler keeps in vector registers (kCols sums:
      // 8 AVX-512 / 16 AVX2 registers) instead of a load and a store per element. Each column is
      // still 0 + x_0 + x_1 + ... in row order (py holds the running sums between panels), so the
      // same bits.
      constexpr std::size_t kRows = 32;
      parallel_for((cols + kCols - 1) / kCols, kCols * rows * kElementCost, [&](std::size_t begin, std::size_t end) {
        const std::size_t c_end = std::min(cols, end * kCols);
        for (std::size_t r0 = 0; r0 < rows; r0 += kRows) {
          const std::size_t r1 = std::min(rows, r0 + kRows);
          for (std::size_t c0 = begin * kCols; c0 < c_end; c0 += kCols) {
            if (c0 + kCols <= c_end) {
              A acc[kCols];
              std::copy_n(py + c0, kCols, acc);
              for (std::size_t r = r0; r < r1; ++r)
                for (std::size_t j = 0; j < kCols; ++j) acc[j] += A(px[r * cols + c0 + j]);
              std::copy_n(acc, kCols, py + c0);
            } else {
              for (std::size_t r = r0; r < r1; ++r)
                for (std::size_t j = c0; j < c_end; ++j) py[j] += A(px[r * cols + j]);
            }
          }
        }
      });
      return rounded();
    }
    sum_into(data_of<T>(x), X, py, K);
    return rounded();
  });
}

// K for reducing `axes` of X; an empty list means every axis.
Shape keepdim_shape(const char* op, const Shape& X, const std::vector<long>& axes) {
  Shape K = X;
  if (axes.empty()) std::fill(K.begin(), K.end(), 1);
  for (long a : axes) {
    std::size_t d = normalize_axis(op, a, X);
    if (K[d] == 1 && X[d] != 1)
      throw_error<ValueError>(op, "axis ", a, " given twice (argument 'x' ", X, ")");
    K[d] = 1;
  }
  return K;
}

Shape drop_reduced(const Shape& X, const std::vector<long>& axes) {
  std::vector<bool> reduced(X.size(), axes.empty());
  for (long a : axes) reduced[normalize_axis("sum", a, X)] = true;
  Shape s;
  for (std::size_t d = 0; d < X.size(); ++d)
    if (!reduced[d]) s.push_back(X[d]);
  return s;
}

}  // namespace

// y = sum of x over axes (shape K or K squeezed);  dx = broadcast_to(reshape(g, K), X)
Tensor sum(const Tensor& x, const std::vector<long>& axes, bool keepdim) {
  check_float("sum", "x", x);
  const Shape K = keepdim_shape("sum", x.shape(), axes);
  Tensor y = reduce_sum("sum", x, K, keepdim ? K : drop_reduced(x.shape(), axes));
  return record("sum", y, {x}, [K](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {broadcast_to(reshape(g, K), n.input(0).shape())};
  });
}

Tensor sum(const Tensor& x) { return sum(x, {}, false); }

// y = sum(x, axes) / count;  backward through sum and mul_scalar
Tensor mean(const Tensor& x, const std::vector<long>& axes, bool keepdim) {
  check_float("mean", "x", x);
  const Shape K = keepdim_shape("mean", x.shape(), axes);
  std::size_t count = x.numel() / std::max<std::size_t>(1, check_tensor_size("mean", K, x.dtype()));
  if (x.numel() == 0) count = 0;
  return mul_scalar(sum(x, axes, keepdim), 1.0 / double(count));
}

Tensor mean(const Tensor& x) { return mean(x, {}, false); }

// y[o, r] = max_i x[o, i, r]          x: (outer, n, inner) around `axis`; NaN if any x is (torch.max)
// dx[o, i, r] = g[o, r] * [x[o,i,r] == y[o,r]] / #ties[o, r]   (NaN == NaN here: a NaN row's
// gradient is split between its NaNs)
Tensor max(const Tensor& x, long axis, bool keepdim) {
  check_float("max", "x", x);
  if (x.dim() == 0) {  // a one-element row along axis 0 or -1 (as PyTorch): x itself
    check_scalar_axis("max", axis);
    return reshape(max(reshape(x, {1}), 0), {});
  }
  const std::size_t ax = normalize_axis("max", axis, x.shape());
  if (x.shape()[ax] == 0)
    throw_error<ShapeError>("max", "argument 'x' ", x.shape(), " is empty along axis ", axis);
  Shape K = x.shape();
  K[ax] = 1;
  const auto s = detail::split_at(x.shape(), ax);
  Tensor y = dispatch_float("max", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    Tensor out = empty_tensor<T>(K, "max");
    T* po = fresh_data<T>(out);
    for (std::size_t o = 0; o < s.outer; ++o)
      for (std::size_t r = 0; r < s.inner; ++r) {
        T m = px[o * s.n * s.inner + r];
        for (std::size_t i = 1; i < s.n; ++i) {
          const T v = px[(o * s.n + i) * s.inner + r];
          if (v > m || v != v) m = v;  // a NaN stays: v > NaN is false, and a NaN v is taken
        }
        po[o * s.inner + r] = m;
      }
    return out;
  });
  const Tensor yk = y.detach();  // the value only: capturing the output itself would be a cycle
  if (!keepdim) y = reshape(y.detach(), drop_reduced(x.shape(), {axis}));
  return record("max", y, {x}, [K, s, yk](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const Tensor& x = n.input(0);
    Tensor weight = dispatch_float("max", x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* px = data_of<T>(x);
      const T* py = data_of<T>(yk);
      Tensor w = empty_tensor<T>(x.shape(), "max");
      T* pw = fresh_data<T>(w);
      for (std::size_t o = 0; o < s.outer; ++o)
        for (std::size_t r = 0; r < s.inner; ++r) {
          std::size_t ties = 0;
          const T m = py[o * s.inner + r];
          auto is_max = [m](T v) { return v == m || (v != v && m != m); };
          for (std::size_t i = 0; i < s.n; ++i) ties += is_max(px[(o * s.n + i) * s.inner + r]);
          for (std::size_t i = 0; i < s.n; ++i) {
            const std::size_t k = (o * s.n + i) * s.inner + r;
            pw[k] = is_max(px[k]) ? T(1) / T(ties) : T(0);
          }
        }
      return w;
    });
    return {mul(broadcast_to(reshape(g, K), x.shape()), weight)};
  });
}

// Moves the reduced axes last, flattens them into one, and takes one max over it, so tied
// maxima across several axes share the gradient equally (as torch.amax).
Tensor amax(const Tensor& x, const std::vector<long>& axes, bool keepdim) {
  check_float("amax", "x", x);
  const Shape K = keepdim_shape("amax", x.shape(), axes);
  std::vector<bool> reduced(x.dim(), axes.empty());
  for (long a : axes) reduced[normalize_axis("amax", a, x.shape())] = true;
  std::vector<std::size_t> perm;
  Shape flat;
  std::size_t r = 1;
  for (std::size_t d = 0; d < x.dim(); ++d)
    if (!reduced[d]) perm.push_back(d), flat.push_back(x.shape()[d]);
  for (std::size_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) perm.push_back(d), r *= x.shape()[d];
  if (r == 0)
    throw_error<ShapeError>("amax", "argument 'x' ", x.shape(), " is empty along the reduced axes");
  flat.push_back(r);
  Tensor y = max(reshape(permute(x, perm), flat), -1);
  return reshape(y, keepdim ? K : drop_reduced(x.shape(), axes));
}

namespace {

// y[o, r] = log sum_i exp(x[o, i, r]), max-shifted; NaN row -> NaN, all -inf (or n = 0) -> -inf,
// max +inf -> +inf (and has_posinf is set).
template <class T> void logsumexp_rows(const T* x, const detail::AxisSplit& s, T* y, bool& has_posinf) {
  const T inf = std::numeric_limits<T>::infinity();
  for (std::size_t o = 0; o < s.outer; ++o)
    for (std::size_t r = 0; r < s.inner; ++r) {
      const T* xr = x + o * s.n * s.inner + r;  // element i: xr[i * inner]
      T m = -inf;
      bool nan = false;
      for (std::size_t i = 0; i < s.n; ++i) {
        const T v = xr[i * s.inner];
        if (std::isnan(v)) nan = true;
        else m = std::max(m, v);
      }
      T out = m;  // -inf, +inf
      if (nan) out = std::numeric_limits<T>::quiet_NaN();
      else if (m == inf) has_posinf = true;
      else if (m != -inf) {
        detail::Accumulator<T> total = 0;
        for (std::size_t i = 0; i < s.n; ++i) total += std::exp(xr[i * s.inner] - m);
        out = m + T(std::log(total));
      }
      y[o * s.inner + r] = out;
    }
}

// x with every row (along axis) whose maximum is +inf replaced by 0 at its +inf entries and
// -inf elsewhere (a constant), so that softmax of it puts equal weight on the +inf entries:
// the limit of logsumexp's gradient. Other rows are x itself (where() passes their gradient).
Tensor posinf_rows_to_limit(const Tensor& x, std::size_t axis) {
  const auto s = detail::split_at(x.shape(), axis);
  Tensor mask = empty_tensor<bool>(x.shape(), "logsumexp");
  bool* pm = fresh_data<bool>(mask);
  Tensor limit = dispatch_float("logsumexp", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T inf = std::numeric_limits<T>::infinity();
    const T* px = data_of<T>(x);
    Tensor c = empty_tensor<T>(x.shape(), "logsumexp");
    T* pc = fresh_data<T>(c);
    for (std::size_t o = 0; o < s.outer; ++o)
      for (std::size_t r = 0; r < s.inner; ++r) {
        const std::size_t base = o * s.n * s.inner + r;
        bool any = false;
        for (std::size_t i = 0; i < s.n; ++i) any = any || px[base + i * s.inner] == inf;
        for (std::size_t i = 0; i < s.n; ++i) {
          const std::size_t k = base + i * s.inner;
          pm[k] = any;
          pc[k] = px[k] == inf ? T(0) : -inf;
        }
      }
    return c;
  });
  return where(mask, limit, x);
}

// logsumexp over one axis, keepdim shape K.
//   y = m + log sum exp(x - m);   dx = broadcast_to(g, X) * softmax(x, axis)
Tensor logsumexp_axis(const Tensor& x, std::size_t axis) {
  Shape K = x.shape();
  K[axis] = 1;
  const auto s = detail::split_at(x.shape(), axis);
  bool has_posinf = false;
  Tensor y = dispatch_float("logsumexp", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Tensor out = empty_tensor<T>(K, "logsumexp");
    logsumexp_rows(data_of<T>(x), s, fresh_data<T>(out), has_posinf);
    return out;
  });
  const long ax = long(axis);
  return record(
      "logsumexp", y, {x},
      [K, ax, has_posinf](const Node& n, const Tensor& g) -> std::vector<Tensor> {
        const Tensor& x = n.input(0);
        const Tensor p = softmax(has_posinf ? posinf_rows_to_limit(x, std::size_t(ax)) : x, ax);
        return {mul(broadcast_to(reshape(g, K), x.shape()), p)};
      },
      /*allow_nonfinite=*/s.n == 0);  // an empty axis gives -inf from no input at all
}

// y[o, i, r] = sum_{j <= i} x[o, j, r] (reverse: j >= i), accumulated in Acc.
template <class T, class Acc>
void cumsum_rows(const T* x, const detail::AxisSplit& s, T* y, bool reverse) {
  std::vector<Acc> acc(s.inner);
  for (std::size_t o = 0; o < s.outer; ++o) {
    std::fill(acc.begin(), acc.end(), Acc(0));
    for (std::size_t step = 0; step < s.n; ++step) {
      const std::size_t i = reverse ? s.n - 1 - step : step;
      const T* xr = x + (o * s.n + i) * s.inner;
      T* yr = y + (o * s.n + i) * s.inner;
      for (std::size_t r = 0; r < s.inner; ++r) {
        acc[r] += Acc(xr[r]);
        yr[r] = T(acc[r]);
      }
    }
  }
}

// cumsum along axis (reverse: from the end);  dx = cumsum of g in the other direction.
Tensor cumsum_dir(const Tensor& x, std::size_t axis, bool reverse) {
  const char* op = "cumsum";
  const auto s = detail::split_at(x.shape(), axis);
  auto run = [&](auto zero, auto acc_zero) {
    using T = decltype(zero);
    Tensor out = empty_tensor<T>(x.shape(), op);
    cumsum_rows<T, decltype(acc_zero)>(data_of<T>(x), s, fresh_data<T>(out), reverse);
    return out;
  };
  if (x.dtype() == DType::Int64) return run(std::int64_t{}, std::uint64_t{});  // wraps, no signed overflow
  Tensor y = x.dtype() == DType::Float32 ? run(float{}, double{}) : run(double{}, double{});
  return record(op, y, {x}, [axis, reverse](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {cumsum_dir(g, axis, !reverse)};
  });
}

}  // namespace

Tensor logsumexp(const Tensor& x, const std::vector<long>& axes, bool keepdim) {
  check_float("logsumexp", "x", x);
  if (x.dim() == 0) {  // one element: axis 0 or -1, or every axis
    for (long a : axes) check_scalar_axis("logsumexp", a);
    return reshape(logsumexp_axis(reshape(x, {1}), 0), {});
  }
  const Shape K = keepdim_shape("logsumexp", x.shape(), axes);
  const Shape out_shape = keepdim ? K : drop_reduced(x.shape(), axes);
  std::vector<bool> reduced(x.dim(), axes.empty());
  for (long a : axes) reduced[normalize_axis("logsumexp", a, x.shape())] = true;
  const auto count = std::size_t(std::count(reduced.begin(), reduced.end(), true));
  if (count == 1) {
    const auto axis = std::size_t(std::find(reduced.begin(), reduced.end(), true) - reduced.begin());
    return reshape(logsumexp_axis(x, axis), out_shape);
  }
  // Several axes: move them last and flatten them into one (as amax).
  std::vector<std::size_t> perm;
  Shape flat;
  std::size_t r = 1;
  for (std::size_t d = 0; d < x.dim(); ++d)
    if (!reduced[d]) perm.push_back(d), flat.push_back(x.shape()[d]);
  for (std::size_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) perm.push_back(d), r *= x.shape()[d];
  flat.push_back(r);
  return reshape(logsumexp_axis(reshape(permute(x, perm), flat), flat.size() - 1), out_shape);
}

Tensor cumsum(const Tensor& x, long axis) {
  check_defined("cumsum", "x", x);
  if (x.dtype() == DType::Bool)
    throw_error<DTypeError>("cumsum", "argument 'x' must be float32, float64 or int64, got bool of shape ", x.shape());
  if (x.dim() == 0) {
    check_scalar_axis("cumsum", axis);
    return reshape(cumsum_dir(reshape(x, {1}), 0, false), {});
  }
  return cumsum_dir(x, normalize_axis("cumsum", axis, x.shape()), false);
}

// y = x summed to S;  dx = broadcast_to(g, X)
Tensor sum_to(const Tensor& x, const Shape& shape) {
  check_float("sum_to", "x", x);
  if (x.shape() == shape) return x;
  const Shape& X = x.shape();
  if (shape.size() > X.size())
    throw_error<ShapeError>("sum_to", "target shape ", shape, " has more dimensions than x ", X);
  const Shape K = detail::pad_left(shape, X.size());
  for (std::size_t d = 0; d < X.size(); ++d)
    if (K[d] != X[d] && K[d] != 1)
      throw_error<ShapeError>("sum_to", "target shape ", shape, " does not broadcast to x ", X);
  Tensor y = reduce_sum("sum_to", x, K, shape);
  return record("sum_to", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {broadcast_to(g, n.input(0).shape())};
  });
}

// y = x repeated to S;  dx = sum_to(g, X)
Tensor broadcast_to(const Tensor& x, const Shape& shape) {
  check_float("broadcast_to", "x", x);
  if (x.shape() == shape) return x;
  const Shape& X = x.shape();
  if (X.size() > shape.size())
    throw_error<ShapeError>("broadcast_to", "x ", X, " has more dimensions than target ", shape);
  const Shape K = detail::pad_left(X, shape.size());
  for (std::size_t d = 0; d < K.size(); ++d)
    if (K[d] != shape[d] && K[d] != 1)
      throw_error<ShapeError>("broadcast_to", "x ", X, " cannot be broadcast to ", shape);
  Tensor y = dispatch_float("broadcast_to", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Tensor out = empty_tensor<T>(shape, "broadcast_to");
    broadcast_into(data_of<T>(x), K, fresh_data<T>(out), shape);
    return out;
  });
  return record("broadcast_to", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {sum_to(g, n.input(0).shape())};
  });
}

// --- registration ----------------------------------------------------------------------
namespace {
std::vector<OpSample> reduce_samples(Rng& rng) {
  return {{"(2,3,4)", {sample_randn({2, 3, 4}, rng)}},
          {"(3,1)", {sample_randn({3, 1}, rng)}},
          {"(5)", {sample_randn({5}, rng)}}};
}
// Distinct values so that max has no ties (a tie makes max non-differentiable).
std::vector<OpSample> max_samples(Rng& rng) {
  std::vector<double> v(24);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.1 * double((i * 7) % 24) - 1.0;
  rng.shuffle(v.begin(), v.end());
  Tensor x = tensor(v, {2, 3, 4}, DType::Float64);
  x.set_requires_grad(true);
  return {{"(2,3,4) distinct", {x}}};
}
}  // namespace

XGRAD_REGISTER_OP({"sum", [](const auto& x) { return sum(x[0]); }, reduce_samples});
XGRAD_REGISTER_OP({"sum(axis -1, keepdim)", [](const auto& x) { return sum(x[0], {-1}, true); },
                   reduce_samples});
XGRAD_REGISTER_OP({"sum(axes 0,-1)",
                   [](const auto& x) { return x[0].dim() >= 2 ? sum(x[0], {0, -1}) : sum(x[0], {0}); },
                   reduce_samples});
XGRAD_REGISTER_OP({"mean(axis 0)", [](const auto& x) { return mean(x[0], {0}); }, reduce_samples});
XGRAD_REGISTER_OP({"max(axis 1)", [](const auto& x) { return max(x[0], 1); }, max_samples});
XGRAD_REGISTER_OP({"max(axis -1, keepdim)", [](const auto& x) { return max(x[0], -1, true); },
                   max_samples});
XGRAD_REGISTER_OP({"amax(axes 0,2)", [](const auto& x) { return amax(x[0], {0, 2}); }, max_samples});
// logsumexp: one axis (last, first, middle), several axes, every axis, and rows with -inf
// entries (a masked logit: zero probability, zero gradient).
namespace {
std::vector<OpSample> logsumexp_samples(Rng& r) {
  const double ninf = -std::numeric_limits<double>::infinity();
  Tensor masked = tensor({0.3, ninf, -1.2, 2.0, ninf, 0.5, 0.7, -0.4}, {2, 4}, DType::Float64);
  masked.set_requires_grad(true);
  return {{"(2,3,4)", {sample_randn({2, 3, 4}, r)}},
          {"(3,2) large values", {sample_uniform({3, 2}, 500, 800, r)}},
          {"(2,4) with -inf entries", {masked}}};
}
}  // namespace
XGRAD_REGISTER_OP({"logsumexp(axis -1)", [](const auto& x) { return logsumexp(x[0], {-1}); }, logsumexp_samples});
XGRAD_REGISTER_OP({"logsumexp(axis 0, keepdim)", [](const auto& x) { return logsumexp(x[0], {0}, true); },
                   logsumexp_samples});
XGRAD_REGISTER_OP({"logsumexp(axes 0,-1)", [](const auto& x) { return logsumexp(x[0], {0, -1}); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3,4)", {sample_randn({2, 3, 4}, r)}}, {"(3,2)", {sample_randn({3, 2}, r)}}};
                   }});
XGRAD_REGISTER_OP({"logsumexp(all)", [](const auto& x) { return logsumexp(x[0], {}); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3)", {sample_randn({2, 3}, r)}}, {"()", {sample_randn({}, r)}}};
                   }});
XGRAD_REGISTER_OP({"cumsum(axis 1)", [](const auto& x) { return cumsum(x[0], 1); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3,4)", {sample_randn({2, 3, 4}, r)}}, {"(3,5)", {sample_randn({3, 5}, r)}},
                             {"(0,3) empty", {sample_randn({0, 3}, r)}, true}};
                   }});
XGRAD_REGISTER_OP({"cumsum(axis -1)", [](const auto& x) { return cumsum(x[0], -1); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3,4)", {sample_randn({2, 3, 4}, r)}}, {"(6)", {sample_randn({6}, r)}},
                             {"()", {sample_randn({}, r)}}};
                   }});
XGRAD_REGISTER_OP({"sum_to", [](const auto& x) { return sum_to(x[0], {3, 1}); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3,4) -> (3,1)", {sample_randn({2, 3, 4}, r)}},
                             {"(3,1) -> (3,1)", {sample_randn({3, 1}, r)}}};
                   }});
XGRAD_REGISTER_OP({"broadcast_to", [](const auto& x) { return broadcast_to(x[0], {2, 3, 4}); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(3,1) -> (2,3,4)", {sample_randn({3, 1}, r)}},
                             {"(4) -> (2,3,4)", {sample_randn({4}, r)}},
                             {"() -> (2,3,4)", {sample_randn({}, r)}}};
                   }});

}  // namespace xgrad
