// Shape ops: every gradient routes back through the inverse shape op.
#include <algorithm>
#include <numeric>

#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad {
// Shape ops move values of any dtype (Int64 indices and Bool masks too, through
// dispatch_dtype); only float inputs can require grad, so only they are ever recorded.

// y = x viewed as `shape` (a copy);  dx = reshape(g, X). Masks and indices reshape too.
Tensor reshape(const Tensor& x, const Shape& shape) {
  check_defined("reshape", "x", x);
  if (check_tensor_size("reshape", shape, x.dtype()) != x.numel())
    throw_error<ShapeError>("reshape", "cannot reshape argument 'x' ", x.shape(), " (", x.numel(), " elements) to ", shape);
  if (shape == x.shape()) return x;
  Tensor y = x.clone();  // the same bytes, new storage
  y.impl()->shape = shape;
  return record("reshape", y, {x}, [](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    return {reshape(g, n.input(0).shape())};
  });
}

Tensor flatten(const Tensor& x) { return reshape(x, {x.numel()}); }

Tensor unsqueeze(const Tensor& x, long axis) {
  check_defined("unsqueeze", "x", x);
  Shape s = x.shape();
  const long r = long(x.dim()) + 1;  // the result's rank: -1 appends
  if (axis < -r || axis >= r)
    throw_error<IndexError>("unsqueeze", "axis ", axis, " is out of range for argument 'x' ", x.shape(), " (valid: ", -r,
                            " to ", r - 1, ")");
  s.insert(s.begin() + (axis < 0 ? axis + r : axis), 1);
  return reshape(x, s);
}

Tensor squeeze(const Tensor& x, long axis) {
  check_defined("squeeze", "x", x);
  const std::size_t d = normalize_axis("squeeze", axis, x.shape());
  if (x.shape()[d] != 1)
    throw_error<ShapeError>("squeeze", "axis ", axis, " of argument 'x' ", x.shape(), " has size ", x.shape()[d], ", not 1");
  Shape s = x.shape();
  s.erase(s.begin() + long(d));
  return reshape(x, s);
}

namespace {
// x's data viewed with shape `view` (same number of elements), axes permuted: output axis k
// is view axis perm[k]. One pass; whole rows are copied when the last axis stays.
Tensor permuted_copy(const char* op, const Tensor& x, const Shape& view, const std::vector<std::size_t>& perm) {
  Shape ys(perm.size());
  std::vector<std::size_t> src(perm.size());  // x's stride for each output axis
  const auto vs = detail::contiguous_strides(view);
  for (std::size_t k = 0; k < perm.size(); ++k) ys[k] = view[perm[k]], src[k] = vs[perm[k]];
  return dispatch_dtype(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    Tensor out = empty_tensor<T>(ys, op);
    T* po = fresh_data<T>(out);
    detail::for_each_row(ys, src, src, [&](std::size_t ox, std::size_t, std::size_t oo, std::size_t n,
                                           std::size_t step, std::size_t) {
      if (step == 1) std::copy_n(px + ox, n, po + oo);
      else
        for (std::size_t i = 0; i < n; ++i) po[oo + i] = px[ox + i * step];
    });
    return out;
  });
}
}  // namespace

// y[b, h, l, d] = x[b, l, h * D + d];  dx = merge_heads(g)
Tensor split_heads(const Tensor& x, std::size_t H) {
  check_float("split_heads", "x", x);
  if (x.dim() != 3 || H == 0 || x.shape()[2] % H != 0)
    throw_error<ShapeError>("split_heads", "argument 'x' ", x.shape(), " must be (B, L, E) with E divisible by ", H,
                            " heads");
  const Shape& s = x.shape();
  Tensor y = permuted_copy("split_heads", x, {s[0], s[1], H, s[2] / H}, {0, 2, 1, 3});
  return record("split_heads", y, {x}, [](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {merge_heads(g)};
  });
}

// y[b, l, h * D + d] = x[b, h, l, d];  dx = split_heads(g, H)
Tensor merge_heads(const Tensor& x) {
  check_float("merge_heads", "x", x);
  check_rank("merge_heads", "x", x, 4, "(B, H, L, D)");
  const Shape& s = x.shape();
  Tensor y = permuted_copy("merge_heads", x, s, {0, 2, 1, 3});
  y.impl()->shape = {s[0], s[2], s[1] * s[3]};
  const std::size_t H = s[1];
  return record("merge_heads", y, {x}, [H](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {split_heads(g, H)};
  });
}

// y[..., i_perm[k], ...] = x[...];  y.shape[k] = X[perm[k]];  dx = permute(g, perm^-1)
Tensor permute(const Tensor& x, const std::vector<std::size_t>& perm) {
  check_defined("permute", "x", x);
  std::vector<std::size_t> sorted = perm;
  std::sort(sorted.begin(), sorted.end());
  std::vector<std::size_t> iota(x.dim());
  std::iota(iota.begin(), iota.end(), 0);
  if (sorted != iota)
    throw_error<ValueError>("permute", perm, " is not a permutation of the axes of argument 'x' ", x.shape());
  if (perm == iota) return x;
  Tensor y = permuted_copy("permute", x, x.shape(), perm);
  std::vector<std::size_t> inverse(perm.size());
  for (std::size_t k = 0; k < perm.size(); ++k) inverse[perm[k]] = k;
  return record("permute", y, {x}, [inverse](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {permute(g, inverse)};
  });
}

Tensor transpose(const Tensor& x, long axis0, long axis1) {
  check_defined("transpose", "x", x);
  std::vector<std::size_t> perm(x.dim());
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[normalize_axis("transpose", axis0, x.shape())],
            perm[normalize_axis("transpose", axis1, x.shape())]);
  return permute(x, perm);
}

// (B, C, H, W) -> (B, C, H/p, p, W/p, p) -> (B, H/p, W/p, C, p, p) -> (B, N, C p p);
// dx: the same three ops' gradients (reshape, permute back, reshape).
Tensor patchify(const Tensor& images, std::size_t p) {
  check_float("patchify", "images", images);
  check_rank("patchify", "images", images, 4, "(B, C, H, W)");
  const Shape& s = images.shape();
  if (p == 0 || s[2] % p != 0 || s[3] % p != 0)
    throw_error<ValueError>("patchify", "patch size ", p, " must divide the height ", s[2], " and width ", s[3],
                            " of argument 'images' ", s);
  const std::size_t B = s[0], C = s[1], h = s[2] / p, w = s[3] / p;
  Tensor tiles = reshape(images, {B, C, h, p, w, p});
  return reshape(permute(tiles, {0, 2, 4, 1, 3, 5}), {B, h * w, C * p * p});
}

// x: (outer, n, inner) -> y: (outer, length, inner), y[o, i, r] = x[o, start + i, r]
// dx = unnarrow(g, axis, start, n)
Tensor narrow(const Tensor& x, long axis, std::size_t start, std::size_t length) {
  check_defined("narrow", "x", x);
  const std::size_t ax = normalize_axis("narrow", axis, x.shape());
  if (start > x.shape()[ax] || length > x.shape()[ax] - start)
    throw_error<IndexError>("narrow", "range [", start, ", ",
                            length > SIZE_MAX - start ? std::string("overflow") : std::to_string(start + length),
                            ") is out of bounds for axis ", axis, " of argument 'x' ", x.shape());
  Shape ys = x.shape();
  ys[ax] = length;
  const auto s = detail::split_at(x.shape(), ax);
  Tensor y = dispatch_dtype(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    Tensor out = empty_tensor<T>(ys, "narrow");
    T* po = fresh_data<T>(out);
    for (std::size_t o = 0; o < s.outer; ++o)
      std::copy_n(px + (o * s.n + start) * s.inner, length * s.inner, po + o * length * s.inner);
    return out;
  });
  const std::size_t n = s.n;
  return record("narrow", y, {x}, [ax, start, n](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {unnarrow(g, long(ax), start, n)};
  });
}

// [start, end) resolved as libtorch's slice: +size when negative, clamped to [0, size],
// end raised to start when smaller; then narrow(x, dim, start, end - start).
Tensor slice(const Tensor& x, long dim, long start, long end) {
  check_defined("slice", "x", x);
  const std::size_t ax = normalize_axis("slice", dim, x.shape());
  const long n = long(x.shape()[ax]);
  auto resolve = [n](long i) { return std::min(std::max(i < 0 ? i + n : i, 0L), n); };
  const long s = resolve(start), e = std::max(resolve(end), s);
  return narrow(x, long(ax), std::size_t(s), std::size_t(e - s));
}

// x: (outer, m, inner) -> y: (outer, size, inner), zeros except y[o, start + i, r] = x[o, i, r]
// dx = narrow(g, axis, start, m)
Tensor unnarrow(const Tensor& x, long axis, std::size_t start, std::size_t size) {
  check_defined("unnarrow", "x", x);
  const std::size_t ax = normalize_axis("unnarrow", axis, x.shape());
  const std::size_t m = x.shape()[ax];
  if (start > size || m > size - start)
    throw_error<IndexError>("unnarrow", "argument 'x' ", x.shape(), " placed at ", start, " does not fit in size ", size);
  Shape ys = x.shape();
  ys[ax] = size;
  const auto s = detail::split_at(x.shape(), ax);
  Tensor y = dispatch_dtype(x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* px = data_of<T>(x);
    Tensor out = empty_tensor<T>(ys, "unnarrow");
    T* po = fresh_data<T>(out);
    std::fill_n(po, out.numel(), T(0));
    for (std::size_t o = 0; o < s.outer; ++o)
      std::copy_n(px + o * m * s.inner, m * s.inner, po + (o * size + start) * s.inner);
    return out;
  });
  return record("unnarrow", y, {x}, [ax, start, m](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {narrow(g, long(ax), start, m)};
  });
}

// y = [x_0 | x_1 | ...] along axis;  dx_k = narrow(g, axis, offset_k, n_k)
Tensor concat(const std::vector<Tensor>& xs, long axis) {
  if (xs.empty()) throw_error<ValueError>("concat", "argument 'xs' is an empty list");
  for (std::size_t k = 0; k < xs.size(); ++k) {
    const std::string arg = "xs[" + std::to_string(k) + "]";
    check_defined("concat", arg.c_str(), xs[k]);
    check_same_dtype("concat", "xs[0]", xs[0], arg.c_str(), xs[k]);
  }
  const std::size_t ax = normalize_axis("concat", axis, xs[0].shape());
  Shape ys = xs[0].shape();
  ys[ax] = 0;
  std::vector<std::size_t> sizes;
  for (std::size_t k = 0; k < xs.size(); ++k) {
    Shape a = xs[k].shape(), b = xs[0].shape();
    if (a.size() != b.size() || (a[ax] = 0, b[ax] = 0, a != b))
      throw_error<ShapeError>("concat", "xs[", k, "] has shape ", xs[k].shape(), " but xs[0] has ", xs[0].shape(),
                              "; shapes must agree except along axis ", axis);
    sizes.push_back(xs[k].shape()[ax]);
    ys[ax] += sizes.back();
  }
  const auto s = detail::split_at(ys, ax);
  Tensor y = dispatch_dtype(xs[0].dtype(), [&](auto zero) {
    using T = decltype(zero);
    Tensor out = empty_tensor<T>(ys, "concat");
    T* po = fresh_data<T>(out);
    std::size_t offset = 0;
    for (std::size_t k = 0; k < xs.size(); ++k) {
      const T* px = data_of<T>(xs[k]);
      for (std::size_t o = 0; o < s.outer; ++o)
        std::copy_n(px + o * sizes[k] * s.inner, sizes[k] * s.inner, po + (o * s.n + offset) * s.inner);
      offset += sizes[k];
    }
    return out;
  });
  return record("concat", y, xs, [ax, sizes](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    std::vector<Tensor> grads;
    std::size_t offset = 0;
    for (std::size_t k = 0; k < sizes.size(); ++k) {
      grads.push_back(n.needs_grad(k) ? narrow(g, long(ax), offset, sizes[k]) : Tensor());
      offset += sizes[k];
    }
    return grads;
  });
}

std::vector<Tensor> split(const Tensor& x, const std::vector<std::size_t>& sizes, long axis) {
  check_defined("split", "x", x);
  const std::size_t ax = normalize_axis("split", axis, x.shape());
  const std::size_t total = std::accumulate(sizes.begin(), sizes.end(), std::size_t{0});
  if (total != x.shape()[ax])
    throw_error<ShapeError>("split", "sizes ", sizes, " add up to ", total, " but axis ", axis, " of argument 'x' ", x.shape(),
                            " has size ", x.shape()[ax]);
  std::vector<Tensor> pieces;
  std::size_t offset = 0;
  for (auto n : sizes) {
    pieces.push_back(narrow(x, axis, offset, n));
    offset += n;
  }
  return pieces;
}

std::vector<Tensor> chunk(const Tensor& x, std::size_t n, long axis) {
  check_defined("chunk", "x", x);
  const std::size_t size = x.shape()[normalize_axis("chunk", axis, x.shape())];
  if (n == 0 || size % n != 0)
    throw_error<ShapeError>("chunk", "axis ", axis, " of argument 'x' ", x.shape(), " does not split into ", n,
                            " equal pieces");
  return split(x, std::vector<std::size_t>(n, size / n), axis);
}

// --- registration ----------------------------------------------------------------------
XGRAD_REGISTER_OP({"reshape", [](const auto& x) { return reshape(x[0], {3, 2, 2}); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,6) -> (3,2,2)", {sample_randn({2, 6}, r)}}};
                   }});
XGRAD_REGISTER_OP({"permute", [](const auto& x) { return permute(x[0], {2, 0, 1}); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3,4)", {sample_randn({2, 3, 4}, r)}},
                             {"(1,3,1)", {sample_randn({1, 3, 1}, r)}}};
                   }});
XGRAD_REGISTER_OP({"transpose", [](const auto& x) { return transpose(x[0], -1, -2); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3,4)", {sample_randn({2, 3, 4}, r)}},
                             {"(3,2)", {sample_randn({3, 2}, r)}}};
                   }});
XGRAD_REGISTER_OP({"split_heads", [](const auto& x) { return split_heads(x[0], 2); },
                   [](Rng& r) -> std::vector<OpSample> { return {{"(2,3,4) 2 heads", {sample_randn({2, 3, 4}, r)}}}; }});
XGRAD_REGISTER_OP({"merge_heads", [](const auto& x) { return merge_heads(x[0]); },
                   [](Rng& r) -> std::vector<OpSample> { return {{"(2,2,3,2)", {sample_randn({2, 2, 3, 2}, r)}}}; }});
XGRAD_REGISTER_OP({"narrow", [](const auto& x) { return narrow(x[0], 1, 1, 2); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,4,3) axis 1 [1,3)", {sample_randn({2, 4, 3}, r)}},
                             {"(0,4) empty batch", {sample_randn({0, 4}, r)}, true}};
                   }});
XGRAD_REGISTER_OP({"unnarrow", [](const auto& x) { return unnarrow(x[0], 1, 1, 4); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,2,3) into (2,4,3)", {sample_randn({2, 2, 3}, r)}}};
                   }});
XGRAD_REGISTER_OP({"concat", [](const auto& x) { return concat(x, -1); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3) | (2,1) | (2,2)",
                              {sample_randn({2, 3}, r), sample_randn({2, 1}, r), sample_randn({2, 2}, r)}},
                             {"(2,3) | (2,0)", {sample_randn({2, 3}, r), sample_randn({2, 0}, r)}}};
                   }});
XGRAD_REGISTER_OP({"split", [](const auto& x) {
                     auto p = split(x[0], {1, 3}, 0);  // swap the pieces: routes each back
                     return concat({p[1], p[0]}, 0);
                   },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(4,2)", {sample_randn({4, 2}, r)}}};
                   }});
XGRAD_REGISTER_OP({"patchify(2)", [](const auto& x) { return patchify(x[0], 2); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3,4,6)", {sample_randn({2, 3, 4, 6}, r)}}, {"(1,1,2,2)", {sample_randn({1, 1, 2, 2}, r)}},
                             {"(0,3,4,4) empty batch", {sample_randn({0, 3, 4, 4}, r)}, true}};
                   }});

}  // namespace xgrad
