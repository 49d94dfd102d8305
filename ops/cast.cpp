// Tensor::to(dtype): cast between float32 and float64.  dx = g cast back to x's dtype.
#include "xgrad/ops/detail.hpp"

namespace xgrad {

Tensor Tensor::to(DType dtype) const {
  check_float("to", "x", *this);
  if (!is_float(dtype))
    throw_error<DTypeError>("to", "target dtype must be float32 or float64, got ", dtype_name(dtype));
  if (dtype == this->dtype()) return *this;
  Tensor y = dispatch_float("to", this->dtype(), [&](auto from) {
    using F = decltype(from);
    return dispatch_float("to", dtype, [&](auto to) {
      using T = decltype(to);
      const F* px = data_of<F>(*this);
      Tensor out = empty_tensor<T>(shape(), "to");
      T* po = fresh_data<T>(out);
      for (std::size_t i = 0, n = out.numel(); i < n; ++i) po[i] = T(px[i]);
      return out;
    });
  });
  const DType from = this->dtype();
  return record("to", y, {*this}, [from](const Node&, const Tensor& g) -> std::vector<Tensor> {
    return {g.to(from)};
  });
}

XGRAD_REGISTER_OP({"to(float32) and back", [](const auto& x) { return x[0].to(DType::Float32).to(DType::Float64); },
                   [](Rng& r) -> std::vector<OpSample> { return {{"(2,3)", {sample_randn({2, 3}, r)}}}; },
                   GradcheckOptions{"to", 1e-3, 1e-3, 1e-3}});

}  // namespace xgrad
