// The op registry (filled by XGRAD_REGISTER_OP blocks at static-initialisation time).
#include "xgrad/framework/registry.hpp"

namespace xgrad {

static std::vector<OpInfo>& registry() {
  static std::vector<OpInfo> ops;
  return ops;
}

void register_op(OpInfo info) {
  if (find_op(info.name)) throw ValueError("register_op: op '" + info.name + "' registered twice");
  registry().push_back(std::move(info));
}

const std::vector<OpInfo>& registered_ops() { return registry(); }

const OpInfo* find_op(const std::string& name) {
  for (const auto& op : registry())
    if (op.name == name) return &op;
  return nullptr;
}

Tensor sample_randn(const Shape& shape, Rng& rng) {
  Tensor t = randn(shape, rng, DType::Float64);
  t.set_requires_grad(true);
  return t;
}

Tensor sample_uniform(const Shape& shape, double low, double high, Rng& rng) {
  Tensor t = uniform(shape, low, high, rng, DType::Float64);
  t.set_requires_grad(true);
  return t;
}

}  // namespace xgrad
