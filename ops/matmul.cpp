// matmul and linear on cblas_{s,d}gemm.
#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad {

namespace {

// C (M x N, contiguous) = op(A) op(B) + beta C (or + bias, a row of N), op(A): M x K,
// op(B): K x N, contiguous.
template <class T>
void gemm(bool ta, bool tb, std::size_t M, std::size_t N, std::size_t K, const T* A,
          const T* B, T beta, T* C, const T* bias = nullptr) {
  detail::gemm<T>(ta, tb, M, N, K, T(1), A, ta ? M : K, B, tb ? K : N, beta, C, N, bias);
}

// Batched product of rank >= 2 operands; see matmul() for shapes.
Tensor matmul_forward(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  const Shape &as = a.shape(), &bs = b.shape();
  const std::size_t n = ta ? as[as.size() - 1] : as[as.size() - 2];
  const std::size_t k = ta ? as[as.size() - 2] : as[as.size() - 1];
  const std::size_t kb = tb ? bs[bs.size() - 1] : bs[bs.size() - 2];
  const std::size_t m = tb ? bs[bs.size() - 2] : bs[bs.size() - 1];
  if (k != kb)
    throw_error<ShapeError>("matmul", "argument 'a' ", as, ta ? " (transposed)" : "", " and argument 'b' ", bs,
                            tb ? " (transposed)" : "", ": inner dimensions ", k, " != ", kb);
  const Shape abatch(as.begin(), as.end() - 2), bbatch(bs.begin(), bs.end() - 2);
  Shape batch;  // broadcast batch dims; none for two 2-D operands
  if (!abatch.empty() || !bbatch.empty()) {
    try {
      batch = detail::broadcast_shapes("matmul", "a", abatch, "b", bbatch);
    } catch (const ShapeError&) {
      throw_error<ShapeError>("matmul", "batch dimensions of argument 'a' ", as, " and argument 'b' ", bs,
                              " cannot be broadcast together");
    }
  }
  Shape ys(batch.size() + 2);
  std::copy(batch.begin(), batch.end(), ys.begin());
  ys[batch.size()] = n;
  ys[batch.size() + 1] = m;
  const std::size_t nbatch = numel(batch);
  return dispatch_float("matmul", a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* pa = data_of<T>(a);
    const T* pb = data_of<T>(b);
    Tensor out = empty_tensor<T>(ys, "matmul");
    T* po = fresh_data<T>(out);
    if (nbatch == 1 || (!ta && numel(bbatch) == 1 && numel(abatch) == nbatch)) {
      // One GEMM: a single product (two 2-D operands, or batch dims all 1), or b shared by
      // every batch, over (batch * n) rows of a.
      gemm<T>(ta, tb, nbatch * n, m, k, pa, pb, T(0), po);
      return out;
    }
    const Shape pa_b = detail::pad_left(abatch, batch.size());
    const Shape pb_b = detail::pad_left(bbatch, batch.size());
    const auto sa = detail::broadcast_strides(pa_b, batch);
    const auto sb = detail::broadcast_strides(pb_b, batch);
    std::vector<std::size_t> idx(batch.size(), 0);
    for (std::size_t i = 0; i < nbatch; ++i) {
      std::size_t oa = 0, ob = 0;
      for (std::size_t d = 0; d < batch.size(); ++d) {
        oa += idx[d] * sa[d];
        ob += idx[d] * sb[d];
      }
      gemm<T>(ta, tb, n, m, k, pa + oa * n * k, pb + ob * k * m, T(0), po + i * n * m);
      for (std::size_t d = batch.size(); d-- > 0;)
        if (++idx[d] < batch[d]) break;
        else idx[d] = 0;
    }
    return out;
  });
}

}  // namespace

// C = op(A) op(B)   A: (..., n, k)   B: (..., k, m)   C: (..., n, m)
//   (ta, tb) = (0, 0): dA = G B^T      dB = A^T G
//              (0, 1): dA = G B        dB = G^T A
//              (1, 0): dA = B G^T      dB = A G
//              (1, 1): dA = B^T G^T    dB = G^T A^T
// each summed back over broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b, bool ta, bool tb) {
  check_same_float("matmul", "a", a, "b", b);
  if (a.dim() == 0 || b.dim() == 0)
    throw_error<ShapeError>("matmul", "arguments must have rank >= 1, got 'a' ", a.shape(), " and 'b' ", b.shape());
  if (a.dim() == 1 || b.dim() == 1) {  // vectors: check with the shapes the caller gave
    const std::size_t ka = a.dim() == 1 ? a.shape()[0] : a.shape()[a.dim() - (ta ? 2 : 1)];
    const std::size_t kb = b.dim() == 1 ? b.shape()[0] : b.shape()[b.dim() - (tb ? 1 : 2)];
    if (ka != kb)
      throw_error<ShapeError>("matmul", "argument 'a' ", a.shape(), " and argument 'b' ", b.shape(),
                              ": inner dimensions ", ka, " != ", kb);
    if (a.dim() == 1 && b.dim() == 1) return reshape(matmul(unsqueeze(a, 0), unsqueeze(b, 1)), {});
    if (a.dim() == 1) return squeeze(matmul(unsqueeze(a, 0), b, false, tb), -2);
    return squeeze(matmul(a, unsqueeze(b, 1), ta, false), -1);
  }
  Tensor y = matmul_forward(a, b, ta, tb);
  if (!will_record(a, b)) return y;
  return record("matmul", y, {a, b}, [ta, tb](const Node& nd, const Tensor& g) -> std::vector<Tensor> {
    const Tensor &a = nd.input(0), &b = nd.input(1);
    Tensor da, db;
    if (nd.needs_grad(0)) {
      if (!ta) da = tb ? matmul(g, b) : matmul(g, b, false, true);
      else da = tb ? matmul(b, g, true, true) : matmul(b, g, false, true);
      da = sum_to(da, a.shape());
    }
    if (nd.needs_grad(1)) {
      if (b.dim() == 2 && a.dim() > 2 && !ta) {
        db = tb ? sum_outer(g, a) : sum_outer(a, g);  // shared 2-D b: one GEMM over the batch
      } else {
        if (!tb) db = ta ? matmul(a, g) : matmul(a, g, true, false);
        else db = ta ? matmul(g, a, true, true) : matmul(g, a, true, false);
        db = sum_to(db, b.shape());
      }
    }
    return {da, db};
  });
}

// y (k, m) = A^T B, A = a as (N, k), B = b as (N, m), N = product of the leading dims
// da = b U^T = linear(b, U);  db = a U = matmul(a, U)       (U: upstream (k, m))
Tensor sum_outer(const Tensor& a, const Tensor& b) {
  check_same_float("sum_outer", "a", a, "b", b);
  if (a.dim() == 0 || b.dim() == 0 || !std::equal(a.shape().begin(), a.shape().end() - 1, b.shape().begin(), b.shape().end() - 1))
    throw_error<ShapeError>("sum_outer", "arguments 'a' ", a.shape(), " and 'b' ", b.shape(),
                            " must have rank >= 1 and the same leading dimensions");
  const std::size_t k = a.shape().back(), m = b.shape().back();
  const std::size_t N = numel(Shape(a.shape().begin(), a.shape().end() - 1));
  Tensor y = dispatch_float("sum_outer", a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Tensor out = empty_tensor<T>({k, m}, "sum_outer");
    T* po = fresh_data<T>(out);
    if (N == 0) std::fill_n(po, k * m, T(0));
    gemm<T>(true, false, k, m, N, data_of<T>(a), data_of<T>(b), T(0), po);
    return out;
  });
  return record("sum_outer", y, {a, b}, [](const Node& n, const Tensor& u) -> std::vector<Tensor> {
    return {n.needs_grad(0) ? linear(n.input(1), u) : Tensor(),
            n.needs_grad(1) ? matmul(n.input(0), u) : Tensor()};
  });
}

// y (N, out) = x (N, in) W^T (in, out) + bias      N = product of x's leading dims
// dx = g W;  dW = g^T x (over the flattened N);  dbias = sum of g over N
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& bias) {
  check_same_float("linear", "x", x, "weight", w);
  check_rank("linear", "weight", w, 2, "(out_features, in_features)");
  if (x.dim() == 0 || x.shape().back() != w.shape()[1])
    throw_error<ShapeError>("linear", "argument 'x' ", x.shape(), " must end in in_features = ", w.shape()[1],
                            " (weight ", w.shape(), ")");
  const std::size_t in = w.shape()[1], out = w.shape()[0];
  const std::size_t N = numel(Shape(x.shape().begin(), x.shape().end() - 1));  // leading dims
  if (bias.defined()) {
    check_same_float("linear", "x", x, "bias", bias);
    if (bias.shape() != Shape{out})
      throw_error<ShapeError>("linear", "argument 'bias' ", bias.shape(), " must be (", out, ") for weight ",
                              w.shape());
  }
  Shape ys = x.shape();
  ys.back() = out;
  Tensor y = dispatch_float("linear", x.dtype(), [&](auto zero) {
    using T = decltype(zero);
    Tensor yv = empty_tensor<T>(ys, "linear");
    T* py = fresh_data<T>(yv);
    gemm<T>(false, true, N, out, in, data_of<T>(x), data_of<T>(w), T(0), py,
            bias.defined() ? data_of<T>(bias) : nullptr);
    return yv;
  });
  std::vector<Tensor> inputs{x, w};
  if (bias.defined()) inputs.push_back(bias);
  return record("linear", y, inputs, [out](const Node& n, const Tensor& g) -> std::vector<Tensor> {
    std::vector<Tensor> grads(n.inputs().size());
    // G (N, out) is A of both products below: its rows of exact zeros found once
    const detail::ZeroRowsScope g_zero_rows(g.dtype() == DType::Float32 ? data_of<float>(g) : nullptr,
                                            out ? g.numel() / out : 0, out);
    if (n.needs_grad(0)) grads[0] = matmul(g, n.input(1));
    if (n.needs_grad(1)) grads[1] = sum_outer(g, n.input(0));
    if (n.inputs().size() > 2 && n.needs_grad(2)) grads[2] = sum_to(g, {out});
    return grads;
  });
}

// --- registration ----------------------------------------------------------------------
namespace {
std::vector<OpSample> matmul_samples(Rng& r) {
  auto s = [&](const Shape& sh) { return sample_randn(sh, r); };
  return {{"2-D (3,4) x (4,2)", {s({3, 4}), s({4, 2})}},
          {"batched (2,3,4) x (2,4,2)", {s({2, 3, 4}), s({2, 4, 2})}},
          {"broadcast (2,1,2,3) x (3,3,2)", {s({2, 1, 2, 3}), s({3, 3, 2})}},
          {"shared b (2,3,4) x (4,2)", {s({2, 3, 4}), s({4, 2})}},
          {"shared a (3,4) x (2,4,2)", {s({3, 4}), s({2, 4, 2})}},
          {"vector (4) x (4,2)", {s({4}), s({4, 2})}},
          {"size-1 (1,1) x (1,3)", {s({1, 1}), s({1, 3})}},
          {"empty batch (0,3,4) x (4,2)", {s({0, 3, 4}), s({4, 2})}, true}};
}
// Shapes for op(a) op(b) with the given flags: transposed operands swap their last two dims.
std::vector<OpSample> transposed_samples(Rng& r, bool ta, bool tb) {
  auto s = [&](Shape sh, bool t) {
    if (t) std::swap(sh[sh.size() - 1], sh[sh.size() - 2]);
    return sample_randn(sh, r);
  };
  return {{"2-D", {s({3, 4}, ta), s({4, 2}, tb)}},
          {"batched broadcast", {s({2, 3, 4}, ta), s({1, 4, 2}, tb)}},
          {"shared b", {s({2, 3, 4}, ta), s({4, 2}, tb)}}};
}
std::vector<OpSample> linear_samples(Rng& r, bool with_bias) {
  auto s = [&](const Shape& sh) { return sample_randn(sh, r); };
  auto make = [&](const Shape& xs) {
    std::vector<Tensor> v{s(xs), s({3, xs.back()})};
    if (with_bias) v.push_back(s({3}));
    return v;
  };
  return {{"x (2,4)", make({2, 4})}, {"x (2,2,4)", make({2, 2, 4})}, {"x (4)", make({4})},
          {"x (0,4) empty batch", make({0, 4}), true}};
}
}  // namespace

XGRAD_REGISTER_OP({"matmul", [](const auto& x) { return matmul(x[0], x[1]); }, matmul_samples});
XGRAD_REGISTER_OP({"matmul(a, b^T)", [](const auto& x) { return matmul(x[0], x[1], false, true); },
                   [](Rng& r) { return transposed_samples(r, false, true); }});
XGRAD_REGISTER_OP({"matmul(a^T, b)", [](const auto& x) { return matmul(x[0], x[1], true, false); },
                   [](Rng& r) { return transposed_samples(r, true, false); }});
XGRAD_REGISTER_OP({"matmul(a^T, b^T)", [](const auto& x) { return matmul(x[0], x[1], true, true); },
                   [](Rng& r) { return transposed_samples(r, true, true); }});
XGRAD_REGISTER_OP({"sum_outer", [](const auto& x) { return sum_outer(x[0], x[1]); },
                   [](Rng& r) -> std::vector<OpSample> {
                     return {{"(2,3,4) x (2,3,2)", {sample_randn({2, 3, 4}, r), sample_randn({2, 3, 2}, r)}},
                             {"(3,4) x (3,2)", {sample_randn({3, 4}, r), sample_randn({3, 2}, r)}},
                             {"(4) x (2): outer product", {sample_randn({4}, r), sample_randn({2}, r)}},
                             {"(0,4) x (0,2) empty", {sample_randn({0, 4}, r), sample_randn({0, 2}, r)}, true}};
                   }});
XGRAD_REGISTER_OP({"linear", [](const auto& x) { return linear(x[0], x[1], x[2]); },
                   [](Rng& r) { return linear_samples(r, true); }});
XGRAD_REGISTER_OP({"linear(no bias)", [](const auto& x) { return linear(x[0], x[1]); },
                   [](Rng& r) { return linear_samples(r, false); }});

}  // namespace xgrad
