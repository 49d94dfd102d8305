// Integer indexing. Shapes: x: X; around an axis, X viewed as (outer, n, inner).
//
//   embedding:     y[i, :] = W[idx[i], :]                     dW = embedding_backward(g, idx, N)
//   gather:        y[.., j, ..] = x[.., index[.., j, ..], ..]  dx = scatter_add(0, axis, index, g)
//   scatter_add:   y = x;  y[.., index[.., j, ..], ..] += src  dx = g, dsrc = gather(g, axis, index)
//   index_select:  y[o, j, r] = x[o, index[j], r]             dx = index_add_zeros(X, axis, index, g)
//   index_add:     y = x;  y[o, index[j], r] += src[o, j, r]  dx = g, dsrc = index_select(g, axis, index)
//   index_add_zeros: y = 0; y[o, index[j], r] += src[o, j, r]  dsrc = index_select(g, axis, index)
//   pack_rows:     y[j, f] = x[index[j], f]  (x (rows..., F))   dx = unpack_rows(g, index, rows)
//   unpack_rows:   y = 0 (rows..., F); y[index[j], f] += src[j, f]  dsrc = pack_rows(g, index)
//   topk values:   a gather at the selected positions          dx = scatter_add(0, axis, indices, g)
// argmax / argmin / topk indices are Int64 and never recorded.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad {
namespace {

// "(1, 2)": the multi-index of row-major position `flat` in `shape`.
std::string position_str(const Shape& shape, std::size_t flat) {
  Shape pos(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    pos[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  return shape_str(pos);
}

void check_int64(const char* op, const char* arg, const Tensor& idx) {
  check_defined(op, arg, idx);
  if (idx.dtype() != DType::Int64)
    throw_error<DTypeError>(op, "argument '", arg, "' must be int64, got ", dtype_name(idx.dtype()), " of shape ",
                            idx.shape());
}

// IndexError unless every element of idx is in [0, n): "op: index 7 at position (0, 1) of
// argument 'index' (2, 3) is out of range for <range> (valid: 0 to n-1)".
template <class... Range>
void check_index_values(const char* op, const char* arg, const Tensor& idx, std::size_t n, const Range&... range) {
  const std::int64_t* p = idx.data<std::int64_t>();
  for (std::size_t i = 0, count = idx.numel(); i < count; ++i)
    if (p[i] < 0 || std::uint64_t(p[i]) >= n) {
      if (n == 0)
        throw_error<IndexError>(op, "index ", p[i], " at position ", position_str(idx.shape(), i), " of argument '",
                                arg, "' ", idx.shape(), " is out of range for ", range..., " (it is empty)");
      throw_error<IndexError>(op, "index ", p[i], " at position ", position_str(idx.shape(), i), " of argument '", arg,
                              "' ", idx.shape(), " is out of range for ", range..., " (valid: 0 to ", n - 1, ")");
    }
}

// what: the indexed things ("rows" of a table, "classes").
void check_indices(const char* op, const Tensor& idx, std::size_t n, const char* what = "rows") {
  check_int64(op, "indices", idx);
  check_index_values(op, "indices", idx, n, n, ' ', what);
}

template <class T> bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  else return false;
}

// DTypeError unless x is Float32, Float64 or Int64 (the dtypes with an order and arithmetic).
void check_numeric(const char* op, const Tensor& x) {
  check_defined(op, "x", x);
  if (x.dtype() == DType::Bool)
    throw_error<DTypeError>(op, "argument 'x' must be float32, float64 or int64, got bool of shape ", x.shape());
}

// Calls f(T{}) for T = float, double or int64_t by x's dtype (check_numeric first).
template <class F> decltype(auto) dispatch_numeric(const Tensor& x, F&& f) {
  if (x.dtype() == DType::Int64) return f(std::int64_t{});
  if (x.dtype() == DType::Float64) return f(double{});
  return f(float{});
}

// x with the dims of a rank-0 tensor turned into (1), for ops that take an axis: the axis
// must then be 0 or -1 (as PyTorch); returns the normalised axis of the (possibly reshaped) x.
std::size_t axis_of(const char* op, long axis, Tensor& x) {
  if (x.dim() == 0) {
    check_scalar_axis(op, axis, "x");
    x = reshape(x, {1});
    return 0;
  }
  return normalize_axis(op, axis, x.shape());
}

// --- gather / scatter_add kernels ------------------------------------------------------------

// index (Int64, shape I) against x (shape X) for gather / scatter_add along axis.
void check_gather_index(const char* op, const Tensor& x, std::size_t axis, const Tensor& index) {
  check_int64(op, "index", index);
  if (index.dim() != x.dim())
    throw_error<ShapeError>(op, "argument 'index' ", index.shape(), " must have the rank of argument 'x' ", x.shape());
  for (std::size_t d = 0; d < x.dim(); ++d)
    if (d != axis && index.shape()[d] > x.shape()[d])
      throw_error<ShapeError>(op, "argument 'index' ", index.shape(), " is larger than argument 'x' ", x.shape(),
                              " along axis ", d, " (only axis ", axis, " may be larger)");
  check_index_values(op, "index", index, x.shape()[axis], "axis ", axis, " of argument 'x' ", x.shape());
}

// Walks index's (shape I) positions one row at a time: f(ox, oi, n, sx, ax) where element i of
// the row is index[oi + i] (and the result's / src's, same layout) and reads or writes
// x[ox + i * sx + index[oi + i] * ax] (ax: x's stride along the axis).
template <class F> void for_each_gather_row(const Shape& X, const Shape& I, std::size_t axis, F&& f) {
  auto xs = detail::contiguous_strides(X);
  const std::size_t ax = xs[axis];
  xs[axis] = 0;
  detail::for_each_row(I, xs, detail::contiguous_strides(I),
                       [&](std::size_t ox, std::size_t oi, std::size_t, std::size_t n, std::size_t sx, std::size_t) {
                         f(ox, oi, n, sx, ax);
                       });
}

// y (shape I) = x gathered along axis; indices already checked. Any dtype.
Tensor gather_values(const char* op, const Tensor& x, std::size_t axis, const Tensor& index) {
  return dispatch_dtype(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    const std::int64_t* pi = index.data<std::int64_t>();
    Tensor y = empty_tensor<T>(index.shape(), op);
    T* py = fresh_data<T>(y);
    for_each_gather_row(x.shape(), index.shape(), axis,
                        [&](std::size_t ox, std::size_t oi, std::size_t n, std::size_t sx, std::size_t ax) {
                          for (std::size_t i = 0; i < n; ++i)
                            py[oi + i] = px[ox + i * sx + std::size_t(pi[oi + i]) * ax];
                        });
    return y;
  });
}

// gather's backward (also topk's), node inputs {x, index}: dx = scatter_add(zeros(X), axis, index, g).
BackwardFn gather_backward(std::size_t axis) {
  return [axis](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {scatter_add(zeros(n.input(0).shape(), g.dtype()), long(axis), n.input(1), g), Tensor()};
  };
}

// a + b; for Int64 in two's complement (wrapping like PyTorch, without signed overflow).
template <class T> T add_wrapping(T a, T b) {
  if constexpr (std::is_same_v<T, std::int64_t>) return std::int64_t(std::uint64_t(a) + std::uint64_t(b));
  else return a + b;
}

// x float or Int64, src of x's dtype.
void check_addable(const char* op, const Tensor& x, const Tensor& src) {
  check_numeric(op, x);
  check_defined(op, "src", src);
  if (src.dtype() != x.dtype())
    throw_error<DTypeError>(op, "argument 'src' is ", dtype_name(src.dtype()), ' ', src.shape(), " but argument 'x' is ",
                            dtype_name(x.dtype()), ' ', x.shape());
}

// --- arg-reductions --------------------------------------------------------------------------

// out[o, r] = position i of the best x[o, i, r] (first among ties, NaN best).
template <bool kMax, class T> void arg_extreme(const T* x, const detail::AxisSplit& s, std::int64_t* out) {
  std::vector<T> best(s.inner);
  for (std::size_t o = 0; o < s.outer; ++o) {
    const T* base = x + o * s.n * s.inner;
    std::int64_t* ob = out + o * s.inner;
    for (std::size_t r = 0; r < s.inner; ++r) best[r] = base[r], ob[r] = 0;
    for (std::size_t i = 1; i < s.n; ++i) {
      const T* row = base + i * s.inner;
      for (std::size_t r = 0; r < s.inner; ++r) {
        const T v = row[r], b = best[r];
        const bool better = !is_nan(b) && (is_nan(v) || (kMax ? v > b : v < b));
        if (better) best[r] = v, ob[r] = std::int64_t(i);
      }
    }
  }
}

template <bool kMax> Tensor arg_reduce(const char* op, Tensor x, long axis, bool keepdim) {
  check_numeric(op, x);
  const bool scalar_in = x.dim() == 0;
  const std::size_t ax = axis_of(op, axis, x);
  if (x.shape()[ax] == 0)
    throw_error<ShapeError>(op, "argument 'x' ", x.shape(), " is empty along axis ", axis);
  Shape K = x.shape();
  K[ax] = 1;
  const auto s = detail::split_at(x.shape(), ax);
  Tensor y = empty_tensor<std::int64_t>(K, op);
  dispatch_numeric(x, [&](auto zero) {
    using T = decltype(zero);
    arg_extreme<kMax>(data_of<T>(x), s, fresh_data<std::int64_t>(y));
  });
  if (scalar_in) return reshape(y, {});
  if (keepdim) return y;
  K.erase(K.begin() + long(ax));
  return reshape(y, K);
}

template <bool kMax> Tensor arg_reduce_all(const char* op, const Tensor& x) {
  check_numeric(op, x);
  if (x.numel() == 0) throw_error<ShapeError>(op, "argument 'x' ", x.shape(), " is empty");
  return reshape(arg_reduce<kMax>(op, reshape(x, {x.numel()}), 0, false), {});
}

}  // namespace

// --- embedding -----------------------------------------------------------------------------

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_float("embedding", "weight", weight);
  check_rank("embedding", "weight", weight, 2, "(num_embeddings, dim)");
  const std::size_t N = weight.shape()[0], D = weight.shape()[1];
  check_indices("embedding", indices, N);
  Shape ys = indices.shape();
  ys.push_back(D);
  Tensor y = dispatch_float("embedding", weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* w = data_of<T>(weight);
    const std::int64_t* idx = indices.data<std::int64_t>();
    Tensor out = empty_tensor<T>(ys, "embedding");
    T* po = fresh_data<T>(out);
    for (std::size_t i = 0, count = indices.numel(); i < count; ++i)
      std::copy_n(w + std::size_t(idx[i]) * D, D, po + i * D);
    return out;
  });
  return record("embedding", y, {weight, indices}, [N](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {embedding_backward(g, n.input(1), N), Tensor()};
  });
}

Tensor embedding_backward(const Tensor& g, const Tensor& indices, std::size_t num_rows) {
  check_float("embedding_backward", "g", g);
  check_indices("embedding_backward", indices, num_rows);
  Shape expect = indices.shape();
  if (g.dim() != expect.size() + 1 || !std::equal(expect.begin(), expect.end(), g.shape().begin()))
    throw_error<ShapeError>("embedding_backward", "argument 'g' ", g.shape(), " must be indices' shape ", expect,
                            " plus a last dim");
  const std::size_t D = g.shape().back();
  Tensor y = dispatch_float("embedding_backward", g.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pg = data_of<T>(g);
    const std::int64_t* idx = indices.data<std::int64_t>();
    Tensor out = empty_tensor<T>({num_rows, D}, "embedding_backward");
    T* po = fresh_data<T>(out);
    std::fill_n(po, out.numel(), T(0));
    for (std::size_t i = 0, count = indices.numel(); i < count; ++i) {
      T* row = po + std::size_t(idx[i]) * D;
      for (std::size_t d = 0; d < D; ++d) row[d] += pg[i * D + d];
    }
    return out;
  });
  return record("embedding_backward", y, {g, indices}, [](const Node& n, const Tensor& gg) -> std::vector<Tensor> {
    return {embedding(gg, n.input(1)), Tensor()};
  });
}

Tensor one_hot(const Tensor& indices, std::size_t num_classes, DType dtype) {
  check_indices("one_hot", indices, num_classes, "classes");
  Shape ys = indices.shape();
  ys.push_back(num_classes);
  check_tensor_size("one_hot", ys, dtype);  // before allocating: num_classes is the caller's
  Tensor y = zeros(ys, dtype);
  const std::int64_t* idx = indices.data<std::int64_t>();
  dispatch_dtype(dtype, [&](auto zero) {
    using V = decltype(zero);
    V* py = fresh_data<V>(y);
    for (std::size_t i = 0, count = indices.numel(); i < count; ++i)
      py[i * num_classes + std::size_t(idx[i])] = V(1);
  });
  return y;
}

// --- arg-reductions ------------------------------------------------------------------------

Tensor argmax(const Tensor& x, long axis, bool keepdim) { return arg_reduce<true>("argmax", x, axis, keepdim); }
Tensor argmin(const Tensor& x, long axis, bool keepdim) { return arg_reduce<false>("argmin", x, axis, keepdim); }
Tensor argmax(const Tensor& x) { return arg_reduce_all<true>("argmax", x); }
Tensor argmin(const Tensor& x) { return arg_reduce_all<false>("argmin", x); }

// --- topk ----------------------------------------------------------------------------------

namespace {
// An unsigned key whose order is topk's order of values, better first: the value order with
// -0 == +0 and every NaN above +inf (largest), or its reverse (smallest). For floats: the
// IEEE bits with the sign flipped (positive) or all bits flipped (negative) order like the
// numbers; NaN becomes the largest key. Integer comparisons only in the selection loop.
template <class T> std::uint64_t rank_key(T v, bool largest) {
  std::uint64_t key;
  if constexpr (std::is_same_v<T, std::int64_t>) {
    key = std::uint64_t(v) ^ (std::uint64_t(1) << 63);
  } else {
    using U = std::conditional_t<std::is_same_v<T, float>, std::uint32_t, std::uint64_t>;
    constexpr U sign = U(1) << (8 * sizeof(U) - 1);
    U bits;
    if (std::isnan(v)) {
      bits = U(~U(0));
    } else {
      const T canonical = v == T(0) ? T(0) : v;  // -0 -> +0
      std::memcpy(&bits, &canonical, sizeof bits);
      bits = (bits & sign) ? U(~bits) : U(bits | sign);
    }
    key = bits;
    if (!largest) key = U(~bits);
    return key;
  }
  return largest ? key : ~key;
}

// row[0, k) = the k first items of row in the strict total order `before`, in that order.
// Small k (the logits case: k <= 32 of V ~ 100): one pass keeping the best k so far sorted,
// most items costing one comparison with the current k-th; larger k: std::partial_sort. Both
// give the one correct answer of a total order, so the result never depends on the path or on
// the standard library.
template <class Item, class Before> void select_best(std::vector<Item>& row, std::size_t k, Before before) {
  if (k > 32) {
    std::partial_sort(row.begin(), row.begin() + long(k), row.end(), before);
    return;
  }
  std::size_t have = 0;  // row[0, have) holds the best so far, sorted; have <= i
  for (std::size_t i = 0; i < row.size() && k > 0; ++i) {
    const Item item = row[i];
    if (have == k && !before(item, row[k - 1])) continue;
    std::size_t j = have < k ? have++ : k - 1;
    for (; j > 0 && before(item, row[j - 1]); --j) row[j] = row[j - 1];
    row[j] = item;
  }
}
}  // namespace

// Per (o, r): the first k of the row x[o, :, r] in the strict total order "better value first,
// then lower position" (NaN better than any number when largest, worse when smallest).
TopK topk(const Tensor& x_in, long k, long axis, bool largest, bool sorted) {
  const char* op = "topk";
  check_numeric(op, x_in);
  Tensor x = x_in;
  const bool scalar_in = x.dim() == 0;
  const std::size_t ax = axis_of(op, axis, x);
  const std::size_t n = x.shape()[ax];
  if (k < 0 || std::uint64_t(k) > n)
    throw_error<ValueError>(op, "k = ", k, " is out of range for axis ", axis, " of size ", n, " of argument 'x' ",
                            x_in.shape(), " (valid: 0 to ", n, ")");
  const std::size_t kk = std::size_t(k);
  Shape ys = x.shape();
  ys[ax] = kk;
  const auto s = detail::split_at(x.shape(), ax);
  Tensor indices = empty_tensor<std::int64_t>(ys, op);
  std::int64_t* pi = fresh_data<std::int64_t>(indices);
  dispatch_numeric(x, [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    struct Item {
      std::uint64_t key;  // larger is better (rank_key)
      std::int64_t i;
    };
    auto before = [](const Item& a, const Item& b) { return a.key > b.key || (a.key == b.key && a.i < b.i); };
    std::vector<Item> row(n);
    for (std::size_t o = 0; o < s.outer; ++o)
      for (std::size_t r = 0; r < s.inner; ++r) {
        const T* xr = px + o * n * s.inner + r;
        for (std::size_t i = 0; i < n; ++i) row[i] = {rank_key(xr[i * s.inner], largest), std::int64_t(i)};
        select_best(row, kk, before);
        if (!sorted)
          std::sort(row.begin(), row.begin() + long(kk), [](const Item& a, const Item& b) { return a.i < b.i; });
        std::int64_t* ir = pi + o * kk * s.inner + r;
        for (std::size_t j = 0; j < kk; ++j) ir[j * s.inner] = row[j].i;
      }
  });
  Tensor values = gather_values(op, x, ax, indices);
  if (is_float(x.dtype())) values = record(op, values, {x, indices}, gather_backward(ax));
  if (scalar_in && kk == 1) return {reshape(values, {}), reshape(indices, {})};
  return {values, indices};
}

// --- gather / scatter_add ------------------------------------------------------------------

Tensor gather(const Tensor& x_in, long axis, const Tensor& index_in) {
  const char* op = "gather";
  check_defined(op, "x", x_in);
  check_int64(op, "index", index_in);
  Tensor x = x_in, index = index_in;
  const bool scalar_in = x.dim() == 0;
  if (scalar_in && index.dim() == 0) index = reshape(index, {1});
  const std::size_t ax = axis_of(op, axis, x);
  check_gather_index(op, x, ax, index);
  Tensor y = gather_values(op, x, ax, index);
  if (is_float(x.dtype())) y = record(op, y, {x, index}, gather_backward(ax));
  return scalar_in && index_in.dim() == 0 ? reshape(y, {}) : y;
}

Tensor scatter_add(const Tensor& x, long axis, const Tensor& index, const Tensor& src) {
  const char* op = "scatter_add";
  check_addable(op, x, src);
  check_int64(op, "index", index);
  if (x.dim() == 0) {  // the rank-0 case through rank 1, as gather
    check_scalar_axis(op, axis, "x");
    return reshape(scatter_add(reshape(x, {1}), 0, index.dim() == 0 ? reshape(index, {1}) : index,
                               src.dim() == 0 ? reshape(src, {1}) : src),
                   {});
  }
  const std::size_t ax = normalize_axis(op, axis, x.shape());
  if (src.shape() != index.shape())
    throw_error<ShapeError>(op, "argument 'src' ", src.shape(), " must have the shape of argument 'index' ",
                            index.shape());
  check_gather_index(op, x, ax, index);
  Tensor y = dispatch_numeric(x, [&](auto zero) {
    using T = decltype(zero);
    Tensor out = empty_tensor<T>(x.shape(), op);
    T* po = fresh_data<T>(out);
    std::copy_n(data_of<T>(x), x.numel(), po);
    const T* ps = data_of<T>(src);
    const std::int64_t* pi = index.data<std::int64_t>();
    for_each_gather_row(x.shape(), index.shape(), ax,
                        [&](std::size_t ox, std::size_t oi, std::size_t n, std::size_t sx, std::size_t as) {
                          for (std::size_t i = 0; i < n; ++i) {
                            T& to = po[ox + i * sx + std::size_t(pi[oi + i]) * as];
                            to = add_wrapping(to, ps[oi + i]);
                          }
                        });
    return out;
  });
  if (!is_float(x.dtype())) return y;
  return record(op, y, {x, src, index}, [ax](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {n.needs_grad(0) ? g : Tensor(), n.needs_grad(1) ? gather(g, long(ax), n.input(2)) : Tensor(), Tensor()};
  });
}

// --- index_select / index_add --------------------------------------------------------------

namespace {
// The 1-D (or rank-0) Int64 index of rows, each in [0, n) ("... is out of range for <range>").
template <class... Range>
Tensor check_row_index(const char* op, const Tensor& index, std::size_t n, const Range&... range) {
  check_int64(op, "index", index);
  if (index.dim() > 1) throw_error<ShapeError>(op, "argument 'index' ", index.shape(), " must be 1-D (or rank 0)");
  check_index_values(op, "index", index, n, range...);
  return index.dim() == 0 ? reshape(index, {1}) : index;
}

// index for index_select / index_add along axis of x: the 1-D index.
Tensor check_select_index(const char* op, const Tensor& x, std::size_t axis, const Tensor& index) {
  return check_row_index(op, index, x.shape()[axis], "axis ", axis, " of argument 'x' ", x.shape());
}

// dst (outer, m, inner) = src (outer, n, inner) at rows index[j] of each outer block.
template <class T>
void gather_rows(const T* src, const std::int64_t* index, std::size_t m, std::size_t outer, std::size_t n,
                 std::size_t inner, T* dst) {
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t j = 0; j < m; ++j)
      std::copy_n(src + (o * n + std::size_t(index[j])) * inner, inner, dst + (o * m + j) * inner);
}
}  // namespace

Tensor index_select(const Tensor& x_in, long axis, const Tensor& index_in) {
  const char* op = "index_select";
  check_defined(op, "x", x_in);
  Tensor x = x_in;
  const std::size_t ax = axis_of(op, axis, x);
  const Tensor index = check_select_index(op, x, ax, index_in);
  const std::size_t m = index.numel();
  Shape ys = x.shape();
  ys[ax] = m;
  const auto s = detail::split_at(x.shape(), ax);
  Tensor y = dispatch_dtype(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Tensor out = empty_tensor<T>(ys, op);
    gather_rows(data_of<T>(x), index.data<std::int64_t>(), m, s.outer, s.n, s.inner, fresh_data<T>(out));
    return out;
  });
  if (is_float(x.dtype()))
    y = record(op, y, {x, index}, [ax](const Node& n, const Tensor& g) -> std::vector<Tensor> {
      return {index_add_zeros(n.input(0).shape(), long(ax), n.input(1), g), Tensor()};
    });
  return x_in.dim() == 0 && index_in.dim() == 0 ? reshape(y, {}) : y;
}

Tensor index_add(const Tensor& x, long axis, const Tensor& index_in, const Tensor& src) {
  const char* op = "index_add";
  check_addable(op, x, src);
  if (x.dim() == 0) {  // the rank-0 case through rank 1, as index_select
    check_scalar_axis(op, axis, "x");
    return reshape(index_add(reshape(x, {1}), 0, index_in, src.dim() == 0 ? reshape(src, {1}) : src), {});
  }
  const std::size_t ax = normalize_axis(op, axis, x.shape());
  const Tensor index = check_select_index(op, x, ax, index_in);
  const std::size_t m = index.numel();
  Shape expect = x.shape();
  expect[ax] = m;
  if (src.shape() != expect)
    throw_error<ShapeError>(op, "argument 'src' ", src.shape(), " must be ", expect, " (argument 'x' ", x.shape(),
                            " with axis ", axis, " of the size of argument 'index' ", index_in.shape(), ")");
  const auto s = detail::split_at(x.shape(), ax);
  Tensor y = dispatch_numeric(x, [&](auto zero) {
    using T = decltype(zero);
    Tensor out = empty_tensor<T>(x.shape(), op);
    T* po = fresh_data<T>(out);
    std::copy_n(data_of<T>(x), x.numel(), po);
    const T* ps = data_of<T>(src);
    const std::int64_t* pi = index.data<std::int64_t>();
    for (std::size_t o = 0; o < s.outer; ++o)
      for (std::size_t j = 0; j < m; ++j) {
        T* row = po + (o * s.n + std::size_t(pi[j])) * s.inner;
        const T* from = ps + (o * m + j) * s.inner;
        for (std::size_t r = 0; r < s.inner; ++r) row[r] = add_wrapping(row[r], from[r]);
      }
    return out;
  });
  if (!is_float(x.dtype())) return y;
  return record(op, y, {x, src, index}, [ax](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {n.needs_grad(0) ? g : Tensor(), n.needs_grad(1) ? index_select(g, long(ax), n.input(2)) : Tensor(),
            Tensor()};
  });
}

namespace {
// out (outer, n, row) = 0 except out[o, index[j], :] += src[o, j, :] (src (outer, m, row)).
// Strictly increasing indices write each row at most once: copied, the others zeroed.
template <class T>
void add_rows_into_zeros(T* out, const T* src, const std::int64_t* index, std::size_t m, std::size_t outer,
                         std::size_t n, std::size_t row) {
  bool increasing = true;
  for (std::size_t j = 1; j < m && increasing; ++j) increasing = index[j] > index[j - 1];
  for (std::size_t o = 0; o < outer; ++o) {
    T* block = out + o * n * row;
    const T* from = src + o * m * row;
    if (increasing) {
      std::size_t next = 0;  // first row of block not yet written
      for (std::size_t j = 0; j < m; ++j) {
        const std::size_t at = std::size_t(index[j]);
        std::fill(block + next * row, block + at * row, T(0));
        for (std::size_t r = 0; r < row; ++r) block[at * row + r] = T(0) + from[j * row + r];  // 0 + x: -0 -> +0 as index_add
        next = at + 1;
      }
      std::fill(block + next * row, block + n * row, T(0));
    } else {
      std::fill(block, block + n * row, T(0));
      for (std::size_t j = 0; j < m; ++j) {
        T* to = block + std::size_t(index[j]) * row;
        for (std::size_t r = 0; r < row; ++r) to[r] = add_wrapping(to[r], from[j * row + r]);
      }
    }
  }
}

void check_addable_src(const char* op, const Tensor& src) {
  check_defined(op, "src", src);
  if (src.dtype() == DType::Bool)
    throw_error<DTypeError>(op, "argument 'src' must be float32, float64 or int64, got bool of shape ", src.shape());
}

}  // namespace

Tensor index_add_zeros(const Shape& shape, long axis, const Tensor& index_in, const Tensor& src) {
  const char* op = "index_add_zeros";
  check_addable_src(op, src);
  if (shape.empty()) {  // the rank-0 case through rank 1, as index_add
    check_scalar_axis(op, axis, "shape");
    return reshape(index_add_zeros({1}, 0, index_in, src.dim() == 0 ? reshape(src, {1}) : src), {});
  }
  const std::size_t ax = normalize_axis(op, axis, shape);
  const Tensor index = check_row_index(op, index_in, shape[ax], "axis ", ax, " of argument 'shape' ", shape);
  const std::size_t m = index.numel();
  Shape expect = shape;
  expect[ax] = m;
  if (src.shape() != expect)
    throw_error<ShapeError>(op, "argument 'src' ", src.shape(), " must be ", expect, " (argument 'shape' ", shape,
                            " with axis ", axis, " of the size of argument 'index' ", index_in.shape(), ")");
  const auto s = detail::split_at(shape, ax);
  Tensor y = dispatch_numeric(src, [&](auto zero) {
    using T = decltype(zero);
    Tensor out = empty_tensor<T>(shape, op);
    add_rows_into_zeros(fresh_data<T>(out), data_of<T>(src), index.data<std::int64_t>(), m, s.outer, s.n,
                        s.inner);
    return out;
  });
  if (!is_float(src.dtype())) return y;
  return record(op, y, {src, index}, [ax](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {index_select(g, long(ax), n.input(1)), Tensor()};
  });
}

// --- pack_rows / unpack_rows ---------------------------------------------------------------

Tensor pack_rows(const Tensor& x, const Tensor& index_in) {
  const char* op = "pack_rows";
  check_defined(op, "x", x);
  if (x.dim() < 2)
    throw_error<ShapeError>(op, "argument 'x' ", x.shape(), " must have rank >= 2 (rows..., F)");
  const std::size_t F = x.shape().back(), R = F ? x.numel() / F : numel(Shape(x.shape().begin(), x.shape().end() - 1));
  const Tensor index = check_row_index(op, index_in, R, "the rows of argument 'x' ", x.shape());
  const std::size_t m = index.numel();
  Tensor y = dispatch_dtype(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Tensor out = empty_tensor<T>({m, F}, op);
    gather_rows(data_of<T>(x), index.data<std::int64_t>(), m, 1, R, F, fresh_data<T>(out));
    return out;
  });
  if (!is_float(x.dtype())) return y;
  return record(op, y, {x, index}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    const Shape& xs = n.input(0).shape();
    return {unpack_rows(g, n.input(1), Shape(xs.begin(), xs.end() - 1)), Tensor()};
  });
}

Tensor unpack_rows(const Tensor& y, const Tensor& index_in, const Shape& rows) {
  const char* op = "unpack_rows";
  check_addable_src(op, y);
  if (y.dim() != 2) throw_error<ShapeError>(op, "argument 'src' ", y.shape(), " must be (N, F)");
  if (rows.empty())  // the result (rows..., F) must keep a rows axis for pack_rows, its adjoint
    throw_error<ShapeError>(op, "argument 'rows' must have at least one axis, got ", rows);
  const std::size_t R = numel(rows), F = y.shape()[1];
  const Tensor index = check_row_index(op, index_in, R, "the rows of argument 'rows' ", rows);
  const std::size_t m = index.numel();
  if (y.shape()[0] != m)
    throw_error<ShapeError>(op, "argument 'src' ", y.shape(), " must have one row per entry of argument 'index' ",
                            index_in.shape());
  Shape out_shape = rows;
  out_shape.push_back(F);
  Tensor out = dispatch_numeric(y, [&](auto zero) {
    using T = decltype(zero);
    Tensor t = empty_tensor<T>(out_shape, op);
    add_rows_into_zeros(fresh_data<T>(t), data_of<T>(y), index.data<std::int64_t>(), m, 1, R, F);
    return t;
  });
  if (!is_float(y.dtype())) return out;
  return record(op, out, {y, index}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {pack_rows(g, n.input(1)), Tensor()};
  });
}

// --- registration ----------------------------------------------------------------------
namespace {
// Distinct values in a random order (topk is not differentiable where values tie).
Tensor distinct_sample(const Shape& shape, Rng& rng) {
  std::vector<double> v(numel(shape));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = 0.25 * double(i) - 2.0;
  rng.shuffle(v.begin(), v.end());
  Tensor x = tensor(v, shape, DType::Float64);
  x.set_requires_grad(true);
  return x;
}
}  // namespace

XGRAD_REGISTER_OP({"embedding", [](const auto& x) { return embedding(x[0], x[1]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"W (5,3), idx (2,3) with repeats",
                              {sample_randn({5, 3}, r), index_tensor({0, 4, 4, 1, 0, 2}, {2, 3})}},
                             {"W (4,2), idx ()", {sample_randn({4, 2}, r), index_tensor({3}, {})}}};
                   }});
XGRAD_REGISTER_OP({"embedding_backward", [](const auto& x) { return embedding_backward(x[0], x[1], 5); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"g (2,3,2), idx (2,3) with repeats",
                              {sample_randn({2, 3, 2}, r), index_tensor({0, 4, 4, 1, 0, 2}, {2, 3})}}};
                   }});
// The sample's last input is the axis, as an Int64 scalar (so one registration covers several).
XGRAD_REGISTER_OP({"gather", [](const auto& x) { return gather(x[0], long(x[2].item()), x[1]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"x (3,4) axis 1, index (2,3) with repeats, smaller on axis 0",
                              {sample_randn({3, 4}, r), index_tensor({3, 0, 3, 1, 1, 2}, {2, 3}), scalar(1, DType::Int64)}},
                             {"x (2,3,4) axis -3, index (4,3,2) larger on the axis",
                              {sample_randn({2, 3, 4}, r),
                               index_tensor({0, 1, 1, 1, 0, 0, 1, 1, 0, 1, 0, 0, 0, 0, 1, 1, 1, 0, 1, 0, 0, 1, 1, 1}, {4, 3, 2}),
                               scalar(-3, DType::Int64)}},
                             {"x () index ()", {sample_randn({}, r), index_tensor({0}, {}), scalar(0, DType::Int64)}},
                             {"x (2,3) axis 0, empty index (0,3)",
                              {sample_randn({2, 3}, r), index_tensor({}, {0, 3}), scalar(0, DType::Int64)}, true}};
                   }});
XGRAD_REGISTER_OP({"scatter_add", [](const auto& x) { return scatter_add(x[0], long(x[3].item()), x[2], x[1]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"x (3,4) axis 1, src/index (2,3) with repeats",
                              {sample_randn({3, 4}, r), sample_randn({2, 3}, r), index_tensor({3, 0, 3, 1, 1, 1}, {2, 3}),
                               scalar(1, DType::Int64)}},
                             {"x (2,3) axis -2, src/index (4,3)",
                              {sample_randn({2, 3}, r), sample_randn({4, 3}, r),
                               index_tensor({0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1}, {4, 3}), scalar(-2, DType::Int64)}}};
                   }});
XGRAD_REGISTER_OP({"index_select", [](const auto& x) { return index_select(x[0], long(x[2].item()), x[1]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"x (3,4) axis 0, index (5) with repeats",
                              {sample_randn({3, 4}, r), index_tensor({2, 0, 2, 1, 2}, {5}), scalar(0, DType::Int64)}},
                             {"x (2,3,4) axis -1, index (2)",
                              {sample_randn({2, 3, 4}, r), index_tensor({3, 1}, {2}), scalar(-1, DType::Int64)}},
                             {"x (2,3) axis 1, index ()", {sample_randn({2, 3}, r), index_tensor({2}, {}), scalar(1, DType::Int64)}},
                             {"x (2,3) axis 1, empty index (0)",
                              {sample_randn({2, 3}, r), index_tensor({}, {0}), scalar(1, DType::Int64)}, true}};
                   }});
XGRAD_REGISTER_OP({"index_add", [](const auto& x) { return index_add(x[0], long(x[3].item()), x[2], x[1]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"x (3,4) axis 0, src (5,4), index (5) with repeats",
                              {sample_randn({3, 4}, r), sample_randn({5, 4}, r), index_tensor({2, 0, 2, 1, 2}, {5}),
                               scalar(0, DType::Int64)}},
                             {"x (2,3,4) axis -1, src (2,3,2)",
                              {sample_randn({2, 3, 4}, r), sample_randn({2, 3, 2}, r), index_tensor({3, 3}, {2}),
                               scalar(-1, DType::Int64)}}};
                   }});
XGRAD_REGISTER_OP({"index_add_zeros", [](const auto& x) { return index_add_zeros({3, 4}, 0, x[1], x[0]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"shape (3,4) axis 0, src (4,4), index (4) with repeats",
                              {sample_randn({4, 4}, r), index_tensor({2, 0, 2, 1}, {4})}},
                             {"shape (3,4) axis 0, src (2,4), index (2) increasing with a gap",
                              {sample_randn({2, 4}, r), index_tensor({0, 2}, {2})}}};
                   }});
XGRAD_REGISTER_OP({"index_add_zeros(axis -1)", [](const auto& x) { return index_add_zeros({2, 3, 4}, -1, x[1], x[0]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"shape (2,3,4), src (2,3,2), index (2) increasing", {sample_randn({2, 3, 2}, r), index_tensor({1, 3}, {2})}}};
                   }});
XGRAD_REGISTER_OP({"pack_rows", [](const auto& x) { return pack_rows(x[0], x[1]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"x (2,3,4), index (4) increasing", {sample_randn({2, 3, 4}, r), index_tensor({0, 2, 3, 5}, {4})}},
                             {"x (3,2), index (3) with repeats", {sample_randn({3, 2}, r), index_tensor({2, 0, 2}, {3})}}};
                   }});
XGRAD_REGISTER_OP({"unpack_rows", [](const auto& x) { return unpack_rows(x[0], x[1], {2, 3}); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"src (3,4) into (2,3,4), index increasing", {sample_randn({3, 4}, r), index_tensor({0, 4, 5}, {3})}},
                             {"src (3,2) into (2,3,2), index with repeats", {sample_randn({3, 2}, r), index_tensor({1, 1, 0}, {3})}}};
                   }});
XGRAD_REGISTER_OP({"topk(k 2)", [](const auto& x) { return topk(x[0], 2).values; },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(3,5) distinct", {distinct_sample({3, 5}, r)}}, {"(4) distinct", {distinct_sample({4}, r)}}};
                   }});
XGRAD_REGISTER_OP({"topk(k 3, axis 0, smallest)", [](const auto& x) { return topk(x[0], 3, 0, false).values; },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(4,2,3) distinct", {distinct_sample({4, 2, 3}, r)}}};
                   }});
XGRAD_REGISTER_OP({"topk(k 2, axis 1, unsorted)", [](const auto& x) { return topk(x[0], 2, 1, true, false).values; },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,4,3) distinct", {distinct_sample({2, 4, 3}, r)}},
                             {"(0,4) empty", {sample_randn({0, 4}, r)}, true}};
                   }});

}  // namespace xgrad
