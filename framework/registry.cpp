// The op registry (filled by XGRAD_REGISTER_OP blocks at static-initialisation time).
#include "xgrad/framework/registry.hpp"

#include <exception>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/functional_detail.hpp"

namespace xgrad {

static std::vector<OpInfo>& registry() {
  static std::vector<OpInfo> ops;
  return ops;
}

void register_op(OpInfo info) {
  if (find_op(info.name)) throw_error<ValueError>("register_op", "op '", info.name, "' registered twice");
  registry().push_back(std::move(info));
}

const std::vector<OpInfo>& registered_ops() { return registry(); }

const OpInfo* find_op(const std::string& name) {
  for (const auto& op : registry())
    if (op.name == name) return &op;
  return nullptr;
}

std::string OpCheckResult::message() const {
  std::string s;
  for (const auto& f : failures) s += (s.empty() ? "" : "\n") + f;
  return s;
}

OpCheckResult check_op(const OpInfo& op, std::uint64_t seed) {
  functional_detail::require_function("check_op(" + op.name + ")", op.fn);
  OpCheckResult res;
  Rng rng(seed);
  const std::vector<OpSample> samples = op.samples ? op.samples(rng) : std::vector<OpSample>{};
  if (samples.empty()) {
    res.ok = false;
    res.failures.push_back(op.name + ": no samples");
    return res;
  }
  for (const auto& sample : samples) {
    GradcheckOptions opt = op.options;
    opt.name = op.name + " [" + sample.label + "]";
    opt.allow_all_zero = sample.zero_grad_ok;
    auto note = [&](const GradcheckResult& r) {
      if (r.ok) return;
      res.ok = false;
      res.failures.push_back(r.message);
    };
    try {
      note(gradcheck(op.fn, sample.inputs, opt));
      if (op.second_order) note(gradgradcheck(op.fn, sample.inputs, opt));
      if (graph_has_fused_backward(op.fn(sample.inputs))) {
        note(check_fused_backward(op.fn, sample.inputs, opt));
        ++res.fused_compared;
      }
    } catch (const std::exception& e) {
      res.ok = false;
      res.failures.push_back(opt.name + ": threw: " + e.what());
    }
    ++res.samples;
  }
  return res;
}

OpCheckResult check_registered_op(const std::string& name, std::uint64_t seed) {
  const OpInfo* op = find_op(name);
  if (!op) throw_error<ValueError>("check_registered_op", "no op named '", name, "' is registered");
  return check_op(*op, seed);
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
