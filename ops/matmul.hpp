// xgrad/ops/matmul.hpp — matrix products (one BLAS GEMM per 2-D product).
#pragma once
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// Batched matrix product with broadcast batch dims:
//   a: (..., n, k) (or (..., k, n) with transpose_a), b: (..., k, m) (or (..., m, k) with
//   transpose_b) -> (broadcast(...), n, m). Transposes reach BLAS as flags, never as
//   copies. A 1-D operand is treated as a row (a) or column (b) vector and that dim is
//   dropped from the result, as in torch.matmul.
Tensor matmul(const Tensor& a, const Tensor& b, bool transpose_a = false,
              bool transpose_b = false);

// y[i, j] = sum_n a[n, i] b[n, j] over all leading positions n:
//   a: (..., k), b: (..., m) with the same leading dims -> (k, m). One GEMM with a
//   transposed, no copies: the weight gradient of linear (dW = sum_outer(g, x)).
Tensor sum_outer(const Tensor& a, const Tensor& b);

// y = x W^T + bias, as torch.nn.functional.linear:
//   x: (..., in), weight: (out, in), bias: (out) or undefined -> y: (..., out).
// One GEMM over the flattened leading dims.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace xgrad
