// embedding (row gather) and embedding_backward (row scatter-add): each other's adjoint.
//   y[i, :] = W[idx[i], :]             W: (N, D), idx: I, y: (I..., D)
//   dW = embedding_backward(g, idx, N): dW[idx[i], :] += g[i, :]
#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/index.hpp"

namespace xgrad {
namespace {

void check_indices(const char* op, const Tensor& idx, std::size_t n) {
  if (!idx.defined()) throw_error<ValueError>(op, "argument 'indices' is undefined");
  if (idx.dtype() != DType::Int64)
    throw_error<DTypeError>(op, "argument 'indices' must be int64, got ", dtype_name(idx.dtype()), " of shape ",
                            idx.shape());
  const std::int64_t* p = idx.data<std::int64_t>();
  for (std::size_t i = 0; i < idx.numel(); ++i)
    if (p[i] < 0 || std::size_t(p[i]) >= n)
      throw_error<IndexError>(op, "index ", p[i], " at flat position ", i, " of 'indices' ", idx.shape(),
                              " is out of range for ", n, " rows");
}

}  // namespace

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  check_float("embedding", "weight", weight);
  check_rank("embedding", "weight", weight, 2, "(num_embeddings, dim)");
  const std::size_t N = weight.shape()[0], D = weight.shape()[1];
  check_indices("embedding", indices, N);
  Shape ys = indices.shape();
  ys.push_back(D);
  Tensor y = dispatch_float("embedding", weight.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* w = value<T>(weight).data();
    const std::int64_t* idx = indices.data<std::int64_t>();
    auto out = empty_array<T>(ys, "embedding");
    for (std::size_t i = 0; i < indices.numel(); ++i)
      std::copy_n(w + std::size_t(idx[i]) * D, D, out.data() + i * D);
    return make_tensor(std::move(out));
  });
  return record("embedding", y, {weight}, [indices, N](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {embedding_backward(g, indices, N)};
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
    const T* pg = value<T>(g).data();
    const std::int64_t* idx = indices.data<std::int64_t>();
    xt::xarray<T> out = empty_array<T>({num_rows, D}, "embedding_backward");
    std::fill(out.begin(), out.end(), T(0));
    for (std::size_t i = 0; i < indices.numel(); ++i) {
      T* row = out.data() + std::size_t(idx[i]) * D;
      for (std::size_t d = 0; d < D; ++d) row[d] += pg[i * D + d];
    }
    return make_tensor(std::move(out));
  });
  return record("embedding_backward", y, {g}, [indices](const Node&, const Tensor& gg) -> std::vector<Tensor> {
    return {embedding(gg, indices)};
  });
}

Tensor one_hot(const Tensor& indices, std::size_t num_classes, DType dtype) {
  check_indices("one_hot", indices, num_classes);
  Shape ys = indices.shape();
  ys.push_back(num_classes);
  check_tensor_size("one_hot", ys, dtype);  // before allocating: num_classes is the caller's
  Tensor y = zeros(ys, dtype);
  const std::int64_t* idx = indices.data<std::int64_t>();
  std::visit(
      [&](auto& a) {
        using V = typename std::decay_t<decltype(a)>::value_type;
        for (std::size_t i = 0; i < indices.numel(); ++i) a.data()[i * num_classes + std::size_t(idx[i])] = V(1);
      },
      static_cast<ArrayVariant&>(*y.impl()->value));
  return y;
}

// --- registration ----------------------------------------------------------------------
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

}  // namespace xgrad
