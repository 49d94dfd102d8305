// The generic test: check_op for every registered op and every one of its samples: gradcheck
// and gradgradcheck (float64, random upstream gradient, full Jacobian for small samples), and
// the fused first-order backwards against the differentiable (create_graph) ones.
#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/registry.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/attention.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/norm.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;

BOOST_AUTO_TEST_SUITE(registry)

// check_op (framework/registry.hpp) on every registered op: gradcheck, gradgradcheck and, on
// every sample whose graph holds a record_fused node, the fused first-order backward against
// the differentiable (create_graph) one. Tolerance of that comparison: both are float64
// evaluations of the same sums in another order, each term rounded at ~1.1e-16 relative to
// the largest term, and terms cancel (softmax rows, layer_norm's mean terms), so the bound is
// relative to the gradient's magnitude: |a - b| <= 1e-10 (|b| + max|b|) (fused_rtol). That
// leaves ~1e6 roundings of room; a wrong formula is off by O(1) relative.
BOOST_AUTO_TEST_CASE(every_registered_op_passes_check_op) {
  const auto& ops = registered_ops();
  BOOST_TEST_REQUIRE(ops.size() >= 40u);
  std::size_t samples = 0, fused = 0;
  for (const auto& op : ops) {
    BOOST_TEST_CONTEXT("op " << op.name) {
      const OpCheckResult r = check_op(op);
      BOOST_TEST(r.ok, r.message());
      BOOST_TEST(r.samples > 0u);
      samples += r.samples;
      fused += r.fused_compared;
    }
  }
  BOOST_TEST_MESSAGE("registry: " << ops.size() << " ops, " << samples << " samples checked, " << fused
                                  << " with their two backwards compared");
}

// The ops recorded with record_fused get their two backwards compared without being listed
// anywhere; plain ops (softmax's backward is one differentiable kernel) get none.
BOOST_AUTO_TEST_CASE(check_op_without_a_function_is_a_value_error) {
  OpInfo op;
  op.name = "nothing";
  op.samples = [](Rng& rng) { return std::vector<OpSample>{{"x", {sample_randn({2}, rng)}}}; };
  try {  // a failure "threw: bad_function_call" per sample before
    check_op(op);
    BOOST_ERROR("no error for an op without a function");
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()) == "check_op(nothing): no function given");
  }
}

BOOST_AUTO_TEST_CASE(fused_ops_are_compared_and_plain_ops_are_not) {
  for (const char* name : {"attention", "attention(masks)", "attention(causal, masks)", "attention(float mask)",
                           "attention_packed", "attention_packed(causal, masks)", "layer_norm",
                           "layer_norm(no affine)", "gelu", "gelu(tanh)"}) {
    BOOST_TEST_CONTEXT("op " << name) {
      BOOST_TEST_REQUIRE(find_op(name) != nullptr);
      const OpCheckResult r = check_registered_op(name);
      BOOST_TEST(r.ok, r.message());
      BOOST_TEST(r.fused_compared > 0u);
    }
  }
  for (const char* name : {"exp", "matmul", "softmax", "masked_softmax", "gelu_backward"}) {
    BOOST_TEST_CONTEXT("op " << name) {
      BOOST_TEST_REQUIRE(find_op(name) != nullptr);
      const OpCheckResult r = check_registered_op(name);
      BOOST_TEST(r.ok, r.message());
      BOOST_TEST(r.fused_compared == 0u);
    }
  }
  BOOST_CHECK_THROW(check_registered_op("no such op"), ValueError);
}

namespace {
// y = 3x with two backwards: the first-order one off by `first_order_scale`.
Tensor triple(const Tensor& x, double first_order_scale) {
  Tensor y = mul_scalar(x.detach(), 3.0);
  return record_fused("triple", y, {x},
                      [first_order_scale](const Node&, const Tensor& g) -> std::vector<Tensor> {
                        return {mul_scalar(g, 3.0 * first_order_scale)};
                      },
                      [](const Node&, const Tensor& g) -> std::vector<Tensor> { return {mul_scalar(g, 3.0)}; });
}
OpInfo triple_op(double first_order_scale) {
  return {"triple", [first_order_scale](const std::vector<Tensor>& x) { return triple(x[0], first_order_scale); },
          [](Rng& r) -> std::vector<OpSample> { return {{"(2,3)", {sample_randn({2, 3}, r)}}}; }};
}
}  // namespace

// An op outside the registry (as a user's would be) gets the same checks through check_op: a
// fused pair is compared, so a first-order backward 1e-7 off (inside gradcheck's tolerance)
// fails; a plain op is never compared.
BOOST_AUTO_TEST_CASE(check_op_compares_an_unregistered_fused_pair) {
  const OpCheckResult good = check_op(triple_op(1.0));
  BOOST_TEST(good.ok, good.message());
  BOOST_TEST(good.samples == 1u);
  BOOST_TEST(good.fused_compared == 1u);

  const OpCheckResult bad = check_op(triple_op(1.0 + 1e-7));
  BOOST_TEST(!bad.ok);
  BOOST_TEST_REQUIRE(bad.failures.size() == 1u);
  BOOST_TEST(bad.failures[0].find("check_fused_backward(triple [(2,3)])") != std::string::npos, bad.message());

  OpInfo plain{"plain triple", [](const std::vector<Tensor>& x) { return mul_scalar(x[0], 3.0); },
               [](Rng& r) -> std::vector<OpSample> { return {{"(4)", {sample_randn({4}, r)}}}; }};
  const OpCheckResult p = check_op(plain);
  BOOST_TEST(p.ok, p.message());
  BOOST_TEST(p.fused_compared == 0u);

  OpInfo no_samples{"no samples", plain.fn, [](Rng&) { return std::vector<OpSample>{}; }};
  BOOST_TEST(!check_op(no_samples).ok);
}

BOOST_AUTO_TEST_CASE(float32_samples_match_float64_forward) {
  // Every op serves both dtypes: run each sample in float32 and compare to float64.
  for (const auto& op : registered_ops()) {
    Rng rng(7);
    for (const auto& sample : op.samples(rng)) {
      BOOST_TEST_CONTEXT("op " << op.name << ", sample " << sample.label) {
        std::vector<Tensor> in32;
        for (const auto& t : sample.inputs) in32.push_back(is_float(t.dtype()) ? t.detach().to(DType::Float32) : t);
        Tensor y64 = op.fn(sample.inputs), y32 = op.fn(in32);
        if (op.name.rfind("to(", 0) != 0) BOOST_TEST(y32.dtype() == DType::Float32);
        BOOST_TEST(test::allclose(y32.to(DType::Float64), y64, 1e-4, 1e-5));
      }
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
