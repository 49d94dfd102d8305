// Golden fixtures from PyTorch 1.13 (tools/make_fixtures.py): reading them and comparing
// xgrad's values and gradients with PyTorch's; shared by tests/test_golden.cpp and
// tests/test_mha_api.cpp.
//
// Each fixture stores the inputs, the module's parameters ("param.<state_dict name>"), a
// random upstream gradient, PyTorch's outputs and the gradients of sum(output * upstream)
// with respect to every input ("grad.<input>") and parameter ("grad.param.<name>").
// Metadata (strings) says how to build and call the module; every stored tensor must be
// used by its test (check_all_used).
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
#pragma once
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/checkpoint.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/reduce.hpp"

#ifndef XGRAD_FIXTURE_DIR
#error "XGRAD_FIXTURE_DIR must name the directory of the golden fixtures"
#endif

namespace xgrad::test {

constexpr double kRtol = 1e-5;
constexpr double kAtol = 1e-6;
constexpr double kNorm = 4e-6;

// The bound above with other constants (float64 fixtures: tests/test_seq2seq.cpp).
struct Tolerance {
  double rtol = kRtol, atol = kAtol, norm = kNorm;
};

// One loaded fixture; remembers which tensors the test used.
struct Golden {
  std::string name;
  std::map<std::string, Tensor> tensors;
  std::map<std::string, std::string> meta;
  std::set<std::string> used;

  // <dir>/<fixture>.safetensors; dir defaults to tests/fixtures.
  explicit Golden(const std::string& fixture, const std::string& dir = XGRAD_FIXTURE_DIR) : name(fixture) {
    const std::string path = dir + "/" + fixture + ".safetensors";
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

// The worst element of one tensor against the bound kAtol + kNorm max|expected| + kRtol |expected|
// (ratio > 1: outside it; NaN: infinite), with dev updated; asserts nothing.
struct Worst {
  double ratio = 0, scale = 0;  // scale: the largest finite |expected|
  std::size_t at = 0;
};
inline Worst measure(const std::string& what, const Tensor& actual, const Tensor& expected, Deviation& dev,
                     const Tolerance& tol = {}) {
  const auto a = actual.to_vector(), b = expected.to_vector();
  Worst w;
  for (double v : b)
    if (std::isfinite(v)) w.scale = std::max(w.scale, std::abs(v));
  const double floor = tol.atol + tol.norm * w.scale;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(b[i]) && a[i] == b[i]) continue;  // equal infinities
    const double err = std::abs(a[i] - b[i]);
    const double ratio = std::isnan(err) ? INFINITY : err / (floor + tol.rtol * std::abs(b[i]));
    if (ratio > w.ratio) w.ratio = ratio, w.at = i;
    if (std::isnan(err)) continue;
    dev.max_abs = std::max(dev.max_abs, err);
    if (w.scale > 0) dev.max_norm = std::max(dev.max_norm, err / w.scale);
    if (std::abs(b[i]) >= 0.1) dev.max_rel = std::max(dev.max_rel, err / std::abs(b[i]));
  }
  if (w.ratio > dev.max_ratio) dev.max_ratio = w.ratio, dev.worst = what;
  dev.tensors += 1;
  dev.elements += a.size();
  return w;
}

// Elementwise |actual - expected| <= kAtol + kNorm max|expected| + kRtol |expected|; NaN anywhere fails.
inline void compare(const std::string& what, const Tensor& actual, const Tensor& expected,
             Deviation& dev, const Tolerance& tol = {}) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(actual.defined());
    BOOST_TEST_REQUIRE(shape_str(actual.shape()) == shape_str(expected.shape()));
    const Worst w = measure(what, actual, expected, dev, tol);
    std::ostringstream os;
    os.precision(9);
    if (w.ratio > 1.0) {
      const double a = actual.to_vector()[w.at], b = expected.to_vector()[w.at];
      os << what << " " << shape_str(expected.shape()) << ": worst at flat index " << w.at << ": xgrad " << a
         << " vs torch " << b << " (|diff| " << std::abs(a - b) << ", " << w.ratio << " x the bound " << tol.atol
         << " + " << tol.norm << " * max|torch| (" << w.scale << ") + " << tol.rtol << " * |torch|)";
    }
    BOOST_TEST(w.ratio <= 1.0, os.str());
  }
}

inline void compare_bool(const std::string& what, const Tensor& actual, const Tensor& expected) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_TEST_REQUIRE(shape_str(actual.shape()) == shape_str(expected.shape()));
    BOOST_TEST(actual.to_vector() == expected.to_vector(), boost::test_tools::per_element());
  }
}

inline void report(const Golden& g, const Deviation& d) {
  BOOST_TEST_MESSAGE("golden " << g.name << ": " << d.tensors << " tensors, " << d.elements
                               << " values; max |diff| " << d.max_abs << ", max rel diff "
                               << d.max_rel << " (|torch| >= 0.1), max |diff|/max|torch| "
                               << d.max_norm << " (per tensor), max diff/bound "
                               << d.max_ratio << " (" << d.worst << ")");
}

// Gradients of sum(output * upstream) w.r.t. the named inputs and the module's parameters:
// check(key, gradient) with key "grad.<input>" or "grad.param.<name>".
template <class Check>
void for_each_grad(Golden& g, const Tensor& output, const NamedTensors& inputs, const NamedTensors& params,
                   Check&& check) {
  Tensor loss = sum(mul(output, g.at("upstream")));
  std::vector<Tensor> wrt;
  std::vector<std::string> keys;
  for (auto& [n, t] : inputs) wrt.push_back(t), keys.push_back("grad." + n);
  for (auto& [n, t] : params) wrt.push_back(t), keys.push_back("grad.param." + n);
  std::vector<Tensor> gs = grad({loss}, wrt);
  BOOST_TEST_REQUIRE(gs.size() == wrt.size());
  for (std::size_t i = 0; i < gs.size(); ++i) check(keys[i], gs[i]);
}

// The same gradients compared with the fixture's "grad.<input>" and "grad.param.<name>".
inline void compare_grads(Golden& g, const Tensor& output, const NamedTensors& inputs,
                   const NamedTensors& params, Deviation& dev, const Tolerance& tol = {}) {
  for_each_grad(g, output, inputs, params,
                [&](const std::string& key, const Tensor& dx) { compare(key, dx, g.at(key), dev, tol); });
}

inline std::set<std::string> names_of(const NamedTensors& ts) {
  std::set<std::string> out;
  for (const auto& [n, t] : ts) out.insert(n);
  return out;
}
inline long integer_or(const Golden& g, const std::string& key, long fallback) {
  return g.meta.count(key) ? g.integer(key) : fallback;
}
inline void check_causal_mask(Golden& g) {
  const Tensor& ref = g.at("ref.causal_mask");
  compare_bool("causal_mask", causal_mask(ref.shape()[0], ref.shape()[1]), ref);
}

// An nn.MultiheadAttention fixture (kind "mha"): the module built from the metadata (bias,
// kdim, vdim; add_bias_kv, add_zero_attn, unbatched, batch_first when present), PyTorch's state_dict
// loaded as is (same names), the fused output (need_weights = false), the output, the
// per-head and averaged weights and every gradient compared.
inline void run_mha_fixture(Golden& g, Deviation& dev) {
  BOOST_TEST_REQUIRE(g.str("kind") == "mha");
  Rng rng(0);
  MultiHeadAttention mha(MultiHeadAttentionOptions(g.integer("embed_dim"), g.integer("num_heads"))
                             .bias(g.integer("bias") != 0)
                             .kdim(g.integer("kdim"))
                             .vdim(g.integer("vdim"))
                             .add_bias_kv(integer_or(g, "add_bias_kv", 0) != 0)
                             .add_zero_attn(integer_or(g, "add_zero_attn", 0) != 0)
                             .batch_first(integer_or(g, "batch_first", 1) != 0),
                         rng);
  const NamedTensors torch_params = g.params();
  BOOST_TEST((names_of(mha.named_parameters()) == names_of(torch_params)));  // the state_dict loads as is
  mha.load_parameters(torch_params);

  NamedTensors inputs;
  if (g.integer("self")) inputs = {{"x", g.leaf("x")}};
  else inputs = {{"query", g.leaf("query")}, {"key", g.leaf("key")}, {"value", g.leaf("value")}};
  BOOST_TEST(inputs[0].second.dim() == (integer_or(g, "unbatched", 0) ? 2u : 3u));
  AttentionOptions opt;
  if (g.has("attn_mask")) opt.attn_mask = g.at("attn_mask");
  if (g.has("key_padding_mask")) {
    opt.key_padding_mask = g.at("key_padding_mask");
    if (g.meta.count("kpm"))
      BOOST_TEST(g.str("kpm") == (opt.key_padding_mask.dtype() == DType::Bool ? "bool" : "float"));
  }
  opt.is_causal = g.integer("is_causal") != 0;
  if (opt.is_causal) check_causal_mask(g);
  auto call = [&](const AttentionOptions& o) {
    return inputs.size() == 1 ? mha.forward(inputs[0].second, o)
                              : mha.forward(inputs[0].second, inputs[1].second, inputs[2].second, o);
  };
  {
    NoGradGuard no_grad;  // the fused path (need_weights = false) gives the same output
    compare("output (fused)", call(opt).output, g.at("output"), dev);
  }
  opt.need_weights = true;
  opt.average_attn_weights = false;
  AttentionOutput out = call(opt);
  compare("output", out.output, g.at("output"), dev);
  compare("weights", out.weights, g.at("weights"), dev);
  {
    AttentionOptions avg = opt;
    avg.average_attn_weights = true;
    NoGradGuard no_grad;
    compare("weights_avg", call(avg).weights, g.at("weights_avg"), dev);
  }
  compare_grads(g, out.output, inputs, mha.named_parameters(), dev);
  g.check_all_used();
}

// A pre-LN TransformerBlock fixture (kind "transformer_block"); bias and gelu_approximate
// ("none" / "tanh") from the metadata when present.
inline void run_block_fixture(Golden& g, Deviation& dev) {
  BOOST_TEST_REQUIRE(g.str("kind") == "transformer_block");
  const std::string gelu = g.meta.count("gelu_approximate") ? g.str("gelu_approximate") : "none";
  BOOST_TEST_REQUIRE((gelu == "none" || gelu == "tanh"));
  Rng rng(0);
  TransformerBlock block(TransformerBlockOptions(g.integer("embed_dim"), g.integer("num_heads"), g.integer("ff_hidden"))
                             .bias(integer_or(g, "bias", 1) != 0)
                             .gelu_approximate_tanh(gelu == "tanh"),
                         rng);
  const NamedTensors torch_params = g.params();
  BOOST_TEST((names_of(block.named_parameters()) == names_of(torch_params)));
  block.load_parameters(torch_params);
  NamedTensors inputs{{"x", g.leaf("x")}};
  AttentionOptions opt;
  if (g.has("key_padding_mask")) opt.key_padding_mask = g.at("key_padding_mask");
  opt.is_causal = g.integer("is_causal") != 0;
  if (opt.is_causal) check_causal_mask(g);
  opt.need_weights = true;
  opt.average_attn_weights = false;
  Tensor out = block.forward(inputs[0].second, opt);
  compare("output", out, g.at("output"), dev);
  compare("weights", block.last_weights, g.at("weights"), dev);
  compare_grads(g, out, inputs, block.named_parameters(), dev);
  g.check_all_used();
}

}  // namespace xgrad::test
