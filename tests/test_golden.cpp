// Golden tests against PyTorch 1.13: forward values and gradients of the models, loaded
// from fixtures written by tools/make_fixtures.py (tests/fixtures/*.safetensors).
//
// Each fixture stores the inputs, the module's parameters ("param.<state_dict name>"), a
// random upstream gradient, PyTorch's outputs and the gradients of sum(output * upstream)
// with respect to every input ("grad.<input>") and parameter ("grad.param.<name>"). The
// tests build the xgrad module in float32, load the parameters, run the same call and
// compare everything; every stored tensor must be used by its test.
//
// Tolerance and its derivation: tests/golden.hpp.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/checkpoint.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/models/loss.hpp"
#include "xgrad/models/module.hpp"
#include "xgrad/models/optim.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/reduce.hpp"

#include "golden.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

const char* const kFixtures[] = {"mha_state_dict", 
    "mha_self",        "mha_self_causal",          "mha_cross",
    "mha_cross_kvdim", "mha_key_padding",          "mha_key_padding_causal",
    "mha_float_mask",  "mha_mask_3d",              "layer_norm",
    "cross_entropy",   "cross_entropy_smoothing",  "transformer_block_causal",
    "transformer_block_padding", "adamw", "gelu_tanh"};  // gelu_tanh: tests/test_gelu_tanh.cpp

void run_mha(const std::string& fixture) {
  Golden g(fixture);
  Deviation dev;
  run_mha_fixture(g, dev);
  report(g, dev);
}

void run_block(const std::string& fixture) {
  Golden g(fixture);
  Deviation dev;
  run_block_fixture(g, dev);
  report(g, dev);
}

void run_cross_entropy(const std::string& fixture) {
  Golden g(fixture);
  BOOST_TEST_REQUIRE(g.str("kind") == "cross_entropy");
  NamedTensors inputs{{"logits", g.leaf("logits")}};
  Tensor loss = cross_entropy(inputs[0].second, g.at("targets"), g.integer("ignore_index"),
                              g.num("label_smoothing"));
  Deviation dev;
  compare("output", loss, g.at("output"), dev);
  compare_grads(g, loss, inputs, {}, dev);
  g.check_all_used();
  report(g, dev);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(golden)

BOOST_AUTO_TEST_CASE(mha_self) { run_mha("mha_self"); }
BOOST_AUTO_TEST_CASE(mha_self_causal) { run_mha("mha_self_causal"); }
BOOST_AUTO_TEST_CASE(mha_cross) { run_mha("mha_cross"); }
BOOST_AUTO_TEST_CASE(mha_cross_kvdim) { run_mha("mha_cross_kvdim"); }
BOOST_AUTO_TEST_CASE(mha_key_padding) { run_mha("mha_key_padding"); }
BOOST_AUTO_TEST_CASE(mha_key_padding_causal) { run_mha("mha_key_padding_causal"); }
BOOST_AUTO_TEST_CASE(mha_float_mask) { run_mha("mha_float_mask"); }
BOOST_AUTO_TEST_CASE(mha_mask_3d) { run_mha("mha_mask_3d"); }

BOOST_AUTO_TEST_CASE(layer_norm) {
  Golden g("layer_norm");
  BOOST_TEST_REQUIRE(g.str("kind") == "layer_norm");
  LayerNorm ln(g.integer("dim"), g.num("eps"));
  ln.load_parameters(g.params());
  NamedTensors inputs{{"x", g.leaf("x")}};
  Deviation dev;
  Tensor out = ln.forward(inputs[0].second);
  compare("output", out, g.at("output"), dev);
  compare_grads(g, out, inputs, ln.named_parameters(), dev);
  g.check_all_used();
  report(g, dev);
}

BOOST_AUTO_TEST_CASE(cross_entropy_plain) { run_cross_entropy("cross_entropy"); }
BOOST_AUTO_TEST_CASE(cross_entropy_smoothing) { run_cross_entropy("cross_entropy_smoothing"); }

BOOST_AUTO_TEST_CASE(transformer_block_causal) { run_block("transformer_block_causal"); }
BOOST_AUTO_TEST_CASE(transformer_block_padding) { run_block("transformer_block_padding"); }

// torch.optim.AdamW(foreach=False), non-default hyper-parameters, two steps: parameters
// after each step and the moments after the last one.
BOOST_AUTO_TEST_CASE(adamw) {
  Golden g("adamw");
  BOOST_TEST_REQUIRE(g.str("kind") == "adamw");
  NamedTensors params;
  for (auto& [name, t] : g.params()) {
    Tensor p = t.clone();
    p.set_requires_grad(true);
    params.emplace_back(name, p);
  }
  AdamW opt(params, AdamWOptions(g.num("lr")).betas(g.num("beta1"), g.num("beta2")).eps(g.num("eps")).weight_decay(g.num("weight_decay")));
  Deviation dev;
  const long steps = g.integer("steps");
  for (long s = 1; s <= steps; ++s) {
    const std::string k = std::to_string(s);
    for (auto& [name, p] : params) p.set_grad(g.at("grad" + k + "." + name).clone());
    opt.step();
    for (auto& [name, p] : params) compare("after" + k + "." + name, p, g.at("after" + k + "." + name), dev);
  }
  BOOST_TEST(opt.steps() == steps);
  std::map<std::string, Tensor> state;
  for (auto& [key, t] : opt.state_dict()) state[key] = t;
  for (auto& [name, p] : params) {
    for (const char* buf : {"exp_avg", "exp_avg_sq"}) {
      const std::string key = std::string(buf) + "." + name;
      BOOST_TEST_REQUIRE(state.count(key), "AdamW state_dict has no '" << key << "'");
      compare("state." + key, state[key], g.at("state." + key), dev);
    }
    BOOST_TEST_REQUIRE(state.count("step." + name));
    BOOST_TEST(state["step." + name].item() == double(steps));
  }
  g.check_all_used();
  report(g, dev);
}

// Every fixture file in the directory is exercised by a test above.
// tools/make_fixtures.py saves mha_self's module state_dict() alone, as a torch user would;
// load_checkpoint puts it into MultiHeadAttention unchanged and the output matches.
BOOST_AUTO_TEST_CASE(mha_state_dict) {
  Rng rng(0);
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2), rng);
  load_checkpoint(std::string(XGRAD_FIXTURE_DIR) + "/mha_state_dict.safetensors", mha);
  Golden g("mha_self");
  auto params = g.params();
  auto mine = mha.named_parameters();
  BOOST_TEST_REQUIRE(params.size() == mine.size());
  std::map<std::string, Tensor> torch_params(params.begin(), params.end());
  for (const auto& [name, t] : mine) {
    BOOST_TEST_REQUIRE(torch_params.count(name), name);
    BOOST_TEST(t.to_vector() == torch_params[name].to_vector(), name);  // bit-exact
  }
  Deviation dev;
  NoGradGuard no_grad;
  compare("output", mha.forward(g.at("x")).output, g.at("output"), dev);
}

BOOST_AUTO_TEST_CASE(every_fixture_is_tested) {
  std::set<std::string> tested(std::begin(kFixtures), std::end(kFixtures)), found;
  for (const auto& e : std::filesystem::directory_iterator(XGRAD_FIXTURE_DIR))
    if (e.path().extension() == ".safetensors") found.insert(e.path().stem().string());
  for (const auto& f : found) BOOST_TEST(tested.count(f), "fixture " << f << " has no test");
  for (const auto& f : tested) BOOST_TEST(found.count(f), "fixture " << f << " is missing");
}

BOOST_AUTO_TEST_SUITE_END()
