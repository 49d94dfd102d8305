// The generic test: gradcheck and gradgradcheck (float64, random upstream gradient, full
// Jacobian for small samples) for every registered op and every one of its samples, and the
// fused first-order backwards against the differentiable (create_graph) ones.
#include "helpers.hpp"

using namespace xgrad;

BOOST_AUTO_TEST_SUITE(registry)

BOOST_AUTO_TEST_CASE(every_registered_op_passes_gradcheck_and_gradgradcheck) {
  const auto& ops = registered_ops();
  BOOST_TEST_REQUIRE(ops.size() >= 40u);
  std::size_t checks = 0;
  for (const auto& op : ops) {
    Rng rng(42);
    auto samples = op.samples(rng);
    BOOST_TEST_CONTEXT("op " << op.name) { BOOST_TEST(!samples.empty()); }
    for (const auto& sample : samples) {
      BOOST_TEST_CONTEXT("op " << op.name << ", sample " << sample.label) {
        GradcheckOptions opt = op.options;
        opt.name = op.name + " [" + sample.label + "]";
        opt.allow_all_zero = sample.zero_grad_ok;
        auto first = gradcheck(op.fn, sample.inputs, opt);
        BOOST_TEST(first.ok, first.message);
        if (op.second_order) {
          auto second = gradgradcheck(op.fn, sample.inputs, opt);
          BOOST_TEST(second.ok, second.message);
        }
        ++checks;
      }
    }
  }
  BOOST_TEST_MESSAGE("registry: " << ops.size() << " ops, " << checks << " samples checked");
}

// gradcheck differentiates with create_graph = false, so it checks the fused first-order
// kernels (attention, layer_norm, gelu); gradgradcheck differentiates the create_graph
// formulas. Nothing else ties the two together: compare them on every op and sample, for one
// random upstream u (ops without a fused path agree exactly). Tolerance: both are float64
// evaluations of the same sums in another order, each term rounded at ~1.1e-16 relative to
// the largest term, and terms cancel (softmax rows, layer_norm's mean terms), so the bound is
// relative to the gradient's magnitude: |a - b| <= 1e-10 (|b| + max|b|) (fused_rtol). That
// leaves ~1e6 roundings of room; a wrong formula is off by O(1) relative.
BOOST_AUTO_TEST_CASE(fused_first_order_backward_equals_create_graph_backward) {
  for (const char* fused : {"attention", "attention(masks)", "attention(causal, masks)", "attention(float mask)",
                            "attention_packed", "attention_packed(causal, masks)", "layer_norm",
                            "layer_norm(no affine)", "gelu", "softmax", "masked_softmax"})
    BOOST_TEST(find_op(fused) != nullptr, "op with a fused backward not registered: " << fused);
  std::size_t checks = 0;
  for (const auto& op : registered_ops()) {
    Rng rng(42);
    for (const auto& sample : op.samples(rng)) {
      BOOST_TEST_CONTEXT("op " << op.name << ", sample " << sample.label) {
        GradcheckOptions opt = op.options;
        opt.name = op.name + " [" + sample.label + "]";
        auto r = check_fused_backward(op.fn, sample.inputs, opt);
        BOOST_TEST(r.ok, r.message);
        ++checks;
      }
    }
  }
  BOOST_TEST_MESSAGE("fused backward: " << checks << " samples compared");
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
