// xgrad/ops/elementwise.hpp — broadcasting binary ops, scalar ops and operators.
//
// Binary ops broadcast like numpy/PyTorch; each gradient is summed back to its operand's
// shape. Both operands must have the same float dtype.
#pragma once
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor neg(const Tensor& x);
Tensor add_scalar(const Tensor& x, double s);   // x + s
Tensor mul_scalar(const Tensor& x, double s);   // x * s
Tensor pow(const Tensor& x, double p);          // x ^ p (elementwise)
// Elementwise max / min of a and b with broadcasting, as torch.maximum / torch.minimum: NaN
// if either is NaN. Gradients as PyTorch 1.13: where a == b the gradient is split half and half
// between a and b, the loser gets 0, and at a NaN position both get the full gradient:
//   maximum: da = sum_to(g * (1 - [a < b] - [a == b] / 2), A), db likewise with a, b swapped.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }
inline Tensor operator+(const Tensor& x, double s) { return add_scalar(x, s); }
inline Tensor operator+(double s, const Tensor& x) { return add_scalar(x, s); }
inline Tensor operator-(const Tensor& x, double s) { return add_scalar(x, -s); }
inline Tensor operator-(double s, const Tensor& x) { return add_scalar(neg(x), s); }
inline Tensor operator*(const Tensor& x, double s) { return mul_scalar(x, s); }
inline Tensor operator*(double s, const Tensor& x) { return mul_scalar(x, s); }
inline Tensor operator/(const Tensor& x, double s) { return mul_scalar(x, 1.0 / s); }
inline Tensor operator/(double s, const Tensor& x) { return mul_scalar(pow(x, -1.0), s); }

}  // namespace xgrad
