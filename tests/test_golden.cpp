// Golden tests against PyTorch 1.13: forward values and gradients of the models, loaded
// from fixtures written by tools/make_fixtures.py (tests/fixtures/*.safetensors).
//
// Each fixture stores the inputs, the module's parameters ("param.<state_dict name>"), a
// random upstream gradient, PyTorch's outputs and the gradients of sum(output * upstream)
// with respect to every input ("grad.<input>") and parameter ("grad.param.<name>"). The
// tests build the xgrad module in float32, load the parameters, run the same call and
// compare everything; every stored tensor must be used by its test.
//
// Tolerance, elementwise, for each tensor t (torch value t_i, xgrad value x_i):
//   |x_i - t_i| <= kAtol + kNorm * max_j |t_j| + kRtol * |t_i|
// with kRtol = 1e-5, kAtol = 1e-6, kNorm = 4e-6. Both sides compute in float32
// (eps = 1.2e-7) in different orders (BLAS blocking, fused kernels, reduction order), so
// values agree to a few ulps of *the terms that were summed*, not of the result:
// - kRtol = 1e-5 (~80 ulp) is the bound for ordinary values;
// - gradients that are sums of cancelling terms can be far smaller than those terms
//   (the key-bias gradient of attention is exactly 0 in exact arithmetic: softmax ignores
//   a per-row constant), and there the error is a few ulps of the terms, i.e. of the
//   tensor's larger entries. The fixtures' gradients reach |t| ~ 30, so a fixed floor
//   of 1e-6 (~1 ulp at 16) is below float32 resolution: PyTorch's own float32 results
//   differ from the same computation in float64 by up to 4.8e-6 (in_proj_bias gradient,
//   |t| <= 8), 4.8 times such a floor. Measured against each tensor's largest entry,
//   PyTorch's float32 error is at most 7.3e-7 * max|t|, and xgrad's is of the same size;
//   kNorm = 4e-6 (~34 ulp of the largest entry) covers both with margin;
// - kAtol = 1e-6 is the floor for tensors whose entries are all small.
// A wrong formula gives errors of the order of the values themselves, 1e4 to 1e5 times
// larger. Each test reports its largest absolute deviation, its largest relative deviation
// (over elements with |torch| >= 0.1), the largest |diff| / max|torch| of one tensor, and
// the largest ratio of error to bound (must be <= 1) with the tensor where it occurs.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "xgrad/models/attention.hpp"
#include "xgrad/models/checkpoint.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/models/loss.hpp"
#include "xgrad/models/optim.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/xgrad.hpp"

#ifndef XGRAD_FIXTURE_DIR
#error "XGRAD_FIXTURE_DIR must name the directory of the golden fixtures"
#endif

using namespace xgrad;

namespace {

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;
constexpr double kNorm = 4e-6;

const char* const kFixtures[] = {"mha_state_dict", 
    "mha_self",        "mha_self_causal",          "mha_cross",
    "mha_cross_kvdim", "mha_key_padding",          "mha_key_padding_causal",
    "mha_float_mask",  "mha_mask_3d",              "layer_norm",
    "cross_entropy",   "cross_entropy_smoothing",  "transformer_block_causal",
    "transformer_block_padding", "adamw", "gelu_tanh"};  // gelu_tanh: tests/test_gelu_tanh.cpp

// One loaded fixture; remembers which tensors the test used.
struct Golden {
  std::string name;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> meta;
  std::set<std::string> used;

  explicit Golden(const std::string& fixture) : name(fixture) {
    const std::string path = std::string(XGRAD_FIXTURE_DIR) + "/" + fixture + ".safetensors";
    SafetensorsFile file = load_safetensors(path);
    for (auto& [key, t] : file.tensors) tensors[key] = t;
    meta = file.metadata;
    BOOST_TEST_REQUIRE(meta.count("fixture"), path << ": no 'fixture' metadata");
    BOOST_TEST_REQUIRE(meta.at("fixture") == fixture);
  }

  bool has(const std::string& key) const { return tensors.count(key) != 0; }
  const Tensor& at(const std::string& key) {
    auto it = tensors.find(key);
    if (it == tensors.end()) throw ValueError(name + ": fixture has no tensor '" + key + "'");
    used.insert(key);
    return it->second;
  }
  // A fresh float leaf that requires grad, holding the stored value.
  Tensor leaf(const std::string& key) {
    Tensor t = at(key).clone();
    t.set_requires_grad(true);
    return t;
  }
  std::string str(const std::string& key) const {
    auto it = meta.find(key);
    if (it == meta.end()) throw ValueError(name + ": fixture has no metadata '" + key + "'");
    return it->second;
  }
  double num(const std::string& key) const { return std::stod(str(key)); }
  long integer(const std::string& key) const { return std::stol(str(key)); }

  // "param.<name>" entries with the prefix stripped.
  NamedTensors params() {
    NamedTensors out;
    for (auto& [key, t] : tensors)
      if (key.rfind("param.", 0) == 0) {
        used.insert(key);
        out.emplace_back(key.substr(6), t);
      }
    return out;
  }

  void check_all_used() const {
    std::string unused;
    for (auto& [key, t] : tensors)
      if (!used.count(key)) unused += " " + key;
    BOOST_TEST(unused.empty(), name << ": tensors not checked by the test:" << unused);
  }
};

struct Deviation {
  double max_abs = 0, max_rel = 0, max_norm = 0, max_ratio = 0;
  std::string worst;  // tensor with the largest error / bound
  std::size_t tensors = 0, elements = 0;
};

// Elementwise |actual - expected| <= kAtol + kRtol |expected|; NaN anywhere fails.
void compare(const std::string& what, const Tensor& actual, const Tensor& expected,
             Deviation& dev) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(actual.defined());
    BOOST_TEST_REQUIRE(shape_str(actual.shape()) == shape_str(expected.shape()));
    const auto a = actual.to_vector(), b = expected.to_vector();
    double scale = 0;  // largest finite |torch| in this tensor
    for (double v : b)
      if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
    const double floor = kAtol + kNorm * scale;
    double worst_ratio = 0;
    std::size_t at = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (std::isinf(b[i]) && a[i] == b[i]) continue;  // equal infinities
      const double err = std::abs(a[i] - b[i]);
      const double ratio = std::isnan(err) ? INFINITY : err / (floor + kRtol * std::abs(b[i]));
      if (ratio > worst_ratio) worst_ratio = ratio, at = i;
      if (std::isnan(err)) continue;
      dev.max_abs = std::max(dev.max_abs, err);
      if (scale > 0) dev.max_norm = std::max(dev.max_norm, err / scale);
      if (std::abs(b[i]) >= 0.1) dev.max_rel = std::max(dev.max_rel, err / std::abs(b[i]));
    }
    if (worst_ratio > dev.max_ratio) dev.max_ratio = worst_ratio, dev.worst = what;
    dev.tensors += 1;
    dev.elements += a.size();
    std::ostringstream os;
    os.precision(9);
    if (worst_ratio > 1.0)
      os << what << " " << shape_str(expected.shape()) << ": worst at flat index " << at
         << ": xgrad " << a[at] << " vs torch " << b[at] << " (|diff| "
         << std::abs(a[at] - b[at]) << ", " << worst_ratio << " x the bound " << kAtol
         << " + " << kNorm << " * max|torch| (" << scale << ") + " << kRtol << " * |torch|)";
    BOOST_TEST(worst_ratio <= 1.0, os.str());
  }
}

void compare_bool(const std::string& what, const Tensor& actual, const Tensor& expected) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(shape_str(actual.shape()) == shape_str(expected.shape()));
    BOOST_TEST(actual.to_vector() == expected.to_vector(), boost::test_tools::per_element());
  }
}

void report(const Golden& g, const Deviation& d) {
  BOOST_TEST_MESSAGE("golden " << g.name << ": " << d.tensors << " tensors, " << d.elements
                               << " values; max |diff| " << d.max_abs << ", max rel diff "
                               << d.max_rel << " (|torch| >= 0.1), max |diff|/max|torch| "
                               << d.max_norm << " (per tensor), max diff/bound "
                               << d.max_ratio << " (" << d.worst << ")");
}

// Gradients of sum(output * upstream) w.r.t. the named inputs and the module's parameters,
// compared with "grad.<input>" and "grad.param.<name>".
void compare_grads(Golden& g, const Tensor& output, const NamedTensors& inputs,
                   const NamedTensors& params, Deviation& dev) {
  Tensor loss = sum(mul(output, g.at("upstream")));
  std::vector<Tensor> wrt;
  for (auto& [n, t] : inputs) wrt.push_back(t);
  for (auto& [n, t] : params) wrt.push_back(t);
  std::vector<Tensor> gs = grad({loss}, wrt);
  BOOST_TEST_REQUIRE(gs.size() == wrt.size());
  for (std::size_t i = 0; i < inputs.size(); ++i)
    compare("grad." + inputs[i].first, gs[i], g.at("grad." + inputs[i].first), dev);
  for (std::size_t i = 0; i < params.size(); ++i)
    compare("grad.param." + params[i].first, gs[inputs.size() + i],
            g.at("grad.param." + params[i].first), dev);
}

void run_mha(const std::string& fixture) {
  Golden g(fixture);
  BOOST_TEST_REQUIRE(g.str("kind") == "mha");
  const std::size_t E = g.integer("embed_dim"), H = g.integer("num_heads");
  Rng rng(0);
  MultiHeadAttention mha(
      MultiHeadAttentionOptions(E, H).bias(g.integer("bias") != 0).kdim(g.integer("kdim")).vdim(g.integer("vdim")), rng);
  mha.load_parameters(g.params());

  NamedTensors inputs;
  if (g.integer("self")) {
    inputs = {{"x", g.leaf("x")}};
  } else {
    inputs = {{"query", g.leaf("query")}, {"key", g.leaf("key")}, {"value", g.leaf("value")}};
  }
  auto call = [&](const AttentionOptions& o) {
    return inputs.size() == 1 ? mha.forward(inputs[0].second, o)
                              : mha.forward(inputs[0].second, inputs[1].second, inputs[2].second, o);
  };
  AttentionOptions opt;
  if (g.has("attn_mask")) opt.attn_mask = g.at("attn_mask");
  if (g.has("key_padding_mask")) opt.key_padding_mask = g.at("key_padding_mask");
  opt.is_causal = g.integer("is_causal") != 0;
  if (opt.is_causal) {
    const Tensor& ref = g.at("ref.causal_mask");
    compare_bool("causal_mask", causal_mask(ref.shape()[0], ref.shape()[1]), ref);
  }
  opt.need_weights = true;
  opt.average_attn_weights = false;

  Deviation dev;
  AttentionOutput out = call(opt);
  compare("output", out.output, g.at("output"), dev);
  compare("weights", out.weights, g.at("weights"), dev);
  {
    AttentionOptions avg = opt;
    avg.average_attn_weights = true;
    NoGradGuard no_grad;
    AttentionOutput o2 = call(avg);
    compare("weights_avg", o2.weights, g.at("weights_avg"), dev);
  }
  compare_grads(g, out.output, inputs, mha.named_parameters(), dev);
  g.check_all_used();
  report(g, dev);
}

void run_block(const std::string& fixture) {
  Golden g(fixture);
  BOOST_TEST_REQUIRE(g.str("kind") == "transformer_block");
  Rng rng(0);
  TransformerBlock block(TransformerBlockOptions(g.integer("embed_dim"), g.integer("num_heads"), g.integer("ff_hidden")),
                         rng);
  block.load_parameters(g.params());
  NamedTensors inputs{{"x", g.leaf("x")}};
  AttentionOptions opt;
  if (g.has("key_padding_mask")) opt.key_padding_mask = g.at("key_padding_mask");
  opt.is_causal = g.integer("is_causal") != 0;
  if (opt.is_causal) {
    const Tensor& ref = g.at("ref.causal_mask");
    compare_bool("causal_mask", causal_mask(ref.shape()[0], ref.shape()[1]), ref);
  }
  opt.need_weights = true;
  opt.average_attn_weights = false;

  Deviation dev;
  Tensor out = block.forward(inputs[0].second, opt);
  compare("output", out, g.at("output"), dev);
  compare("weights", block.last_weights, g.at("weights"), dev);
  compare_grads(g, out, inputs, block.named_parameters(), dev);
  g.check_all_used();
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
  AdamW opt(params, g.num("lr"), g.num("beta1"), g.num("beta2"), g.num("eps"),
            g.num("weight_decay"));
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
