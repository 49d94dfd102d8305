// xgrad/ops/norm.hpp — layer normalisation as one fused op.
#pragma once
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// torch.nn.functional.layer_norm(x, (N,), weight, bias, eps) over the last axis:
//   y = (x - mean) / sqrt(var + eps) * weight + bias        (biased variance, eps inside sqrt)
// x: (..., N) float32 or float64, rank >= 1. weight, bias: (N,) of x's dtype, or undefined
// (no scale / no shift). eps > 0.
// Forward and backward are each one fused pass over the rows; with create_graph the backward
// is built from differentiable ops, so second derivatives work.
// Errors: DTypeError (non-float x, dtype of weight/bias differs from x), ShapeError (x of
// rank 0, weight/bias not (N,)), ValueError (x undefined, eps <= 0 or NaN).
Tensor layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5);

}  // namespace xgrad
