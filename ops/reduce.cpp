// Reductions. Shapes: x: X (rank r); K: X with reduced axes set to 1 ("keepdim" shape).
#include <algorithm>

#include "xgrad/framework/parallel.hpp"
#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad {
namespace {

// out (shape K, zero-filled) += x (shape X) where K[d] is X[d] or 1.
template <class T> void sum_into(const T* x, const Shape& X, T* out, const Shape& K) {
  detail::for_each_row(X, detail::contiguous_strides(X), detail::broadcast_strides(K, X),
                       [&](std::size_t ox, std::size_t oo, std::size_t, std::size_t n, std::size_t,
                           std::size_t step) {
                         if (step == 0) {
                           T acc = 0;
                           for (std::size_t i = 0; i < n; ++i) acc += x[ox + i];
                           out[oo] += acc;
                         } else {
                           for (std::size_t i = 0; i < n; ++i) out[oo + i] += x[ox + i];
                         }
                       });
}

// out (shape X) = x (shape K) repeated along dims where K[d] = 1.
template <class T> void broadcast_into(const T* x, const Shape& K, T* out, const Shape& X) {
  detail::for_each_row(X, detail::broadcast_strides(K, X), detail::broadcast_strides(K, X),
                       [&](std::size_t ox, std::size_t, std::size_t oo, std::size_t n, std::size_t step,
                           std::size_t) {
                         for (std::size_t i = 0; i < n; ++i) out[oo + i] = x[ox + i * step];
                       });
}

// Sums x over the dims where K has 1 and X does not; result has shape `out_shape`
// (K itself or K with some 1s dropped: same element order).
Tensor reduce_sum(const char* op, const Tensor& x, const Shape& K, const Shape& out_shape) {
  check_tensor_size(op, out_shape, x.dtype());  // (0, 2^64-1) summed over axis 0: too large, not bad_alloc
  return dispatch_float(op, x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    xt::xarray<T> y = xt::zeros<T>(out_shape);
    const Shape& X = x.shape();
    const bool column_sums = X.size() >= 2 && K.back() == X.back() &&
                             std::all_of(K.begin(), K.end() - 1, [](std::size_t k) { return k == 1; });
    if (column_sums) {  // (rows, cols) -> (cols), e.g. a bias gradient: column blocks over the threads
      const std::size_t cols = X.back(), rows = cols ? x.numel() / cols : 0;
      const T* px = value<T>(x).data();
      T* py = y.data();
      constexpr std::size_t kCols = 64;
      parallel_for((cols + kCols - 1) / kCols, kCols * rows, [&](std::size_t begin, std::size_t end) {
        const std::size_t c0 = begin * kCols, c1 = std::min(cols, end * kCols);
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t j = c0; j < c1; ++j) py[j] += px[r * cols + j];
      });
      return make_tensor(std::move(y));
    }
    sum_into(value<T>(x).data(), X, y.data(), K);
    return make_tensor(std::move(y));
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

// y[o, r] = max_i x[o, i, r]          x: (outer, n, inner) around `axis`
// dx[o, i, r] = g[o, r] * [x[o,i,r] == y[o,r]] / #ties[o, r]
Tensor max(const Tensor& x, long axis, bool keepdim) {
  check_float("max", "x", x);
  const std::size_t ax = normalize_axis("max", axis, x.shape());
  if (x.shape()[ax] == 0)
    throw_error<ShapeError>("max", "argument 'x' ", x.shape(), " is empty along axis ", axis);
  Shape K = x.shape();
  K[ax] = 1;
  const auto s = detail::split_at(x.shape(), ax);
  Tensor y = dispatch_float("max", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = value<T>(x).data();
    auto out = empty_array<T>(K, "max");
    for (std::size_t o = 0; o < s.outer; ++o)
      for (std::size_t r = 0; r < s.inner; ++r) {
        T m = px[o * s.n * s.inner + r];
        for (std::size_t i = 1; i < s.n; ++i) m = std::max(m, px[(o * s.n + i) * s.inner + r]);
        out.data()[o * s.inner + r] = m;
      }
    return make_tensor(std::move(out));
  });
  const Tensor yk = y.detach();  // the value only: capturing the output itself would be a cycle
  if (!keepdim) y = reshape(y.detach(), drop_reduced(x.shape(), {axis}));
  return record("max", y, {x}, [K, s, yk](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const Tensor& x = n.input(0);
    Tensor weight = dispatch_float("max", x.dtype(), [&](auto zero) {
      using T = decltype(zero);
      const T* px = value<T>(x).data();
      const T* py = value<T>(yk).data();
      auto w = empty_array<T>(x.shape());
      for (std::size_t o = 0; o < s.outer; ++o)
        for (std::size_t r = 0; r < s.inner; ++r) {
          std::size_t ties = 0;
          const T m = py[o * s.inner + r];
          for (std::size_t i = 0; i < s.n; ++i) ties += px[(o * s.n + i) * s.inner + r] == m;
          for (std::size_t i = 0; i < s.n; ++i) {
            const std::size_t k = (o * s.n + i) * s.inner + r;
            w.data()[k] = px[k] == m ? T(1) / T(ties) : T(0);
          }
        }
      return make_tensor(std::move(w));
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
    auto out = empty_array<T>(shape, "broadcast_to");
    broadcast_into(value<T>(x).data(), K, out.data(), shape);
    return make_tensor(std::move(out));
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
