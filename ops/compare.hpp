// xgrad/ops/compare.hpp — elementwise comparisons returning Bool tensors.
//
// eq ne lt le gt ge, as torch.eq / ne / lt / le / gt / ge:
//   - tensor with tensor: numpy/PyTorch broadcasting (ShapeError naming both shapes otherwise);
//     both operands of one dtype, any of Float32, Float64, Int64, Bool (Bool compares as
//     false < true). Mixed dtypes are a DTypeError (PyTorch promotes; convert with .to()).
//   - tensor with a double scalar: a float tensor compares with the scalar rounded to its dtype
//     (as PyTorch: float32(x) == 0.1 is true when x holds float32(0.1)); an Int64 or Bool
//     tensor compares with the scalar's exact value (PyTorch promotes both to float32, so
//     int64 16777217 == 16777216.0 is true there and false here).
//   - NaN compares as IEEE 754: every comparison with a NaN is false except ne, which is true.
// Results are Bool tensors of the broadcast shape and never differentiable (nothing is
// recorded, whether or not an operand requires grad).
#pragma once
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

Tensor eq(const Tensor& a, const Tensor& b);  // a == b
Tensor ne(const Tensor& a, const Tensor& b);  // a != b
Tensor lt(const Tensor& a, const Tensor& b);  // a <  b
Tensor le(const Tensor& a, const Tensor& b);  // a <= b
Tensor gt(const Tensor& a, const Tensor& b);  // a >  b
Tensor ge(const Tensor& a, const Tensor& b);  // a >= b

Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

}  // namespace xgrad
