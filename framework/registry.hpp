// xgrad/framework/registry.hpp — the op registry.
//
// Every op registers its name, a callable taking its tensor inputs, and sample inputs
// (float64; inputs to differentiate are marked requires_grad). One generic test runs
// check_op over every registered op, so an op added in one file with an XGRAD_REGISTER_OP
// block is tested automatically. An op defined outside the tree gets the same checks in its
// own tests: check_op(OpInfo{...}) without registering, or register_op + check_registered_op.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

struct OpSample {
  std::string label;            // e.g. "broadcast (2,1,3) x (4,3)"
  std::vector<Tensor> inputs;
  bool zero_grad_ok = false;    // e.g. empty tensors: every gradient is legitimately empty
};

struct OpInfo {
  std::string name;
  TensorFn fn;
  std::function<std::vector<OpSample>(Rng&)> samples;
  GradcheckOptions options = {};  // per-op tolerances if needed
  bool second_order = true;       // run gradgradcheck too
};

// Every check of one op, on every sample (samples drawn from Rng(seed)):
//   - gradcheck (first order, the fast first-order backward of a fused op),
//   - gradgradcheck when op.second_order (the differentiable backward),
//   - check_fused_backward on every sample whose graph holds a node recorded with
//     record_fused (autograd.hpp), so a fused op's two backwards are always compared and a
//     plain op's never need to be.
struct OpCheckResult {
  bool ok = true;
  std::vector<std::string> failures;  // one per failed check, e.g. "gradcheck(op [sample]): ..."
  std::size_t samples = 0;            // samples checked
  std::size_t fused_compared = 0;     // samples whose two backwards were compared
  explicit operator bool() const { return ok; }
  std::string message() const;        // the failures, one a line
};
// ValueError "check_op(name): no function given" when op.fn is empty; an op without samples
// is a failure ("name: no samples").
OpCheckResult check_op(const OpInfo& op, std::uint64_t seed = 42);
// check_op on a registered op; ValueError naming it when no op has that name.
OpCheckResult check_registered_op(const std::string& name, std::uint64_t seed = 42);

void register_op(OpInfo info);
const std::vector<OpInfo>& registered_ops();
const OpInfo* find_op(const std::string& name);  // nullptr when absent

// Sample helpers: float64 leaves requiring grad.
Tensor sample_randn(const Shape& shape, Rng& rng);
Tensor sample_uniform(const Shape& shape, double low, double high, Rng& rng);

}  // namespace xgrad

#define XGRAD_CONCAT_INNER(a, b) a##b
#define XGRAD_CONCAT(a, b) XGRAD_CONCAT_INNER(a, b)
// XGRAD_REGISTER_OP({ "name", fn, samples }) at namespace scope in the op's .cpp file.
#define XGRAD_REGISTER_OP(...)                                                 \
  static const bool XGRAD_CONCAT(xgrad_registered_op_, __LINE__) =            \
      (::xgrad::register_op(::xgrad::OpInfo __VA_ARGS__), true)
