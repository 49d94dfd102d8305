// Modules and layers: names, modes, conversion, init, and gradchecks of every layer with
// respect to its inputs and every parameter (float64), including each attention mask kind.
#include <cmath>
#include <limits>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/registry.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/models/loss.hpp"
#include "xgrad/models/module.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"

using namespace xgrad;
using test::allclose;
using test::inputs_and_params;
using test::model_check_options;
using test::with_params;

namespace {


}  // namespace

BOOST_AUTO_TEST_SUITE(models)

BOOST_AUTO_TEST_CASE(mha_parameter_names_and_shapes_match_pytorch) {
  Rng rng(0);
  MultiHeadAttention packed(MultiHeadAttentionOptions(8, 2), rng);
  auto p = packed.named_parameters();
  BOOST_TEST_REQUIRE(p.size() == 4u);
  BOOST_TEST(p[0].first == "in_proj_weight");
  BOOST_TEST(p[1].first == "in_proj_bias");
  BOOST_TEST(p[2].first == "out_proj.weight");
  BOOST_TEST(p[3].first == "out_proj.bias");
  BOOST_TEST((p[0].second.shape() == Shape{24, 8}));
  BOOST_TEST((p[1].second.shape() == Shape{24}));
  BOOST_TEST((p[2].second.shape() == Shape{8, 8}));
  BOOST_TEST(packed.parameter_count() == 24u * 8 + 24 + 64 + 8);
  MultiHeadAttention separate(MultiHeadAttentionOptions(8, 2).kdim(5).vdim(3), rng);
  std::vector<std::string> names;
  for (auto& [n, t] : separate.named_parameters()) names.push_back(n);
  BOOST_TEST((names == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight",
                                                "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  BOOST_TEST((separate.k_proj_weight.shape() == Shape{8, 5}));
  BOOST_TEST((separate.v_proj_weight.shape() == Shape{8, 3}));
  MultiHeadAttention nobias(MultiHeadAttentionOptions(8, 2).bias(false), rng);
  BOOST_TEST(nobias.named_parameters().size() == 2u);
}

BOOST_AUTO_TEST_CASE(hierarchical_names_modes_and_conversion) {
  TransformerConfig c;
  c.vocab_size = 7, c.max_len = 6, c.embed_dim = 8, c.num_heads = 2, c.ff_hidden = 16, c.num_layers = 2;
  c.dropout = 0.1;
  TransformerEncoder enc(c);
  std::vector<std::string> names;
  for (auto& [n, t] : enc.named_parameters()) names.push_back(n);
  BOOST_TEST(names.front() == "body.tok_emb.weight");
  BOOST_TEST((std::find(names.begin(), names.end(), "body.blocks.1.attn.in_proj_weight") != names.end()));
  BOOST_TEST((std::find(names.begin(), names.end(), "body.blocks.0.ff.fc2.bias") != names.end()));
  BOOST_TEST(names.back() == "head.bias");
  BOOST_TEST(enc.training());
  enc.eval();
  for (auto& [n, m] : enc.named_modules()) BOOST_TEST(!m->training(), n);
  enc.to(DType::Float64);
  for (auto& [n, t] : enc.named_parameters()) {
    BOOST_TEST(t.dtype() == DType::Float64);
    BOOST_TEST(t.requires_grad());
  }
  BOOST_TEST(enc.dtype() == DType::Float64);
  // Same seed, same initial parameters.
  TransformerEncoder again(c);
  again.to(DType::Float64);
  auto a = enc.named_parameters(), b = again.named_parameters();
  for (std::size_t i = 0; i < a.size(); ++i) BOOST_TEST(allclose(a[i].second, b[i].second, 1e-7, 0));
}

BOOST_AUTO_TEST_CASE(pytorch_default_init_ranges) {
  Rng rng(1);
  Linear lin(16, 4, true, rng);
  for (double v : lin.weight.to_vector()) BOOST_TEST(std::abs(v) <= 0.25);
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2), rng);
  const double xavier = std::sqrt(6.0 / (8 + 24));
  double maxabs = 0;
  for (double v : mha.in_proj_weight.to_vector()) maxabs = std::max(maxabs, std::abs(v));
  BOOST_TEST(maxabs <= xavier);
  BOOST_TEST(maxabs > 0.8 * xavier);
  for (double v : mha.in_proj_bias.to_vector()) BOOST_TEST(v == 0.0);
  for (double v : mha.out_proj.bias.to_vector()) BOOST_TEST(v == 0.0);
  LayerNorm ln(5);
  BOOST_TEST(allclose(ln.weight, {1, 1, 1, 1, 1}));
}

BOOST_AUTO_TEST_CASE(dropout_is_seeded_and_off_in_eval) {
  Dropout d1(0.5, 9), d2(0.5, 9);
  Tensor x = ones({100});
  BOOST_TEST(allclose(d1.forward(x), d2.forward(x), 0, 0));
  auto v = d1.forward(x).to_vector();
  std::size_t zeros = std::count(v.begin(), v.end(), 0.0);
  BOOST_TEST(zeros > 20u);
  BOOST_TEST(zeros < 80u);
  for (double e : v) BOOST_TEST((e == 0.0 || e == 2.0));
  d1.eval();
  BOOST_TEST(allclose(d1.forward(x), x, 0, 0));
}

BOOST_AUTO_TEST_CASE(embedding_out_of_range_is_an_index_error) {
  Rng rng(2);
  Embedding e(4, 3, rng);
  BOOST_CHECK_THROW(e.forward(index_tensor({0, 4}, {2})), IndexError);
  BOOST_CHECK_THROW(e.forward(index_tensor({-1}, {1})), IndexError);
  BOOST_CHECK_THROW(e.forward(tensor({0, 1}, {2})), DTypeError);
}

// --- gradchecks of layers in float64 --------------------------------------------------------

BOOST_AUTO_TEST_CASE(layernorm_gradcheck) {
  Rng rng(3);
  LayerNorm ln(4);
  ln.to(DType::Float64);
  ln.weight.mutable_data<double>()[1] = 1.7;
  ln.bias.mutable_data<double>()[2] = -0.3;
  Tensor x = sample_randn({2, 3, 4}, rng);
  auto f = with_params(ln, 1, [&](const auto& in) { return ln.forward(in[0]); });
  auto r = gradcheck(f, inputs_and_params({x}, ln), {"LayerNorm"});
  BOOST_TEST(r.ok, r.message);
  auto r2 = gradgradcheck(f, inputs_and_params({x}, ln), model_check_options("LayerNorm"));
  BOOST_TEST(r2.ok, r2.message);
}

BOOST_AUTO_TEST_CASE(embedding_gradcheck_wrt_weights) {
  Rng rng(4);
  Embedding e(5, 3, rng);
  e.to(DType::Float64);
  Tensor idx = index_tensor({1, 3, 3, 0}, {2, 2});
  auto f = with_params(e, 0, [&](const auto&) { return e.forward(idx); });
  auto r = gradcheck(f, inputs_and_params({}, e), {"Embedding"});
  BOOST_TEST(r.ok, r.message);
}

BOOST_AUTO_TEST_CASE(cross_entropy_gradcheck_and_values) {
  Rng rng(5);
  Tensor logits = sample_randn({2, 3, 4}, rng);
  Tensor targets = index_tensor({0, 3, -100, 2, 1, -100}, {2, 3});
  for (double smoothing : {0.0, 0.1}) {
    TensorFn f = [&](const auto& in) { return cross_entropy(in[0], targets, -100, smoothing); };
    auto r = gradcheck(f, {logits}, {"cross_entropy"});
    BOOST_TEST(r.ok, r.message);
    auto r2 = gradgradcheck(f, {logits}, {"cross_entropy"});
    BOOST_TEST(r2.ok, r2.message);
  }
  // Value: -mean over kept of log softmax at the target, computed with loops.
  auto lv = logits.to_vector();
  auto tv = std::vector<long>{0, 3, -100, 2, 1, -100};
  double total = 0;
  int kept = 0;
  for (int i = 0; i < 6; ++i) {
    if (tv[i] < 0) continue;
    double m = -1e300, s = 0;
    for (int c = 0; c < 4; ++c) m = std::max(m, lv[i * 4 + c]);
    for (int c = 0; c < 4; ++c) s += std::exp(lv[i * 4 + c] - m);
    total += -(lv[i * 4 + tv[i]] - m - std::log(s));
    ++kept;
  }
  BOOST_TEST(allclose(cross_entropy(logits, targets), {total / kept}, 1e-12));
  // Everything ignored: 0, not NaN.
  BOOST_TEST(allclose(cross_entropy(logits, index_tensor(std::vector<std::int64_t>(6, -100), {2, 3})), {0.0}));
  BOOST_CHECK_THROW(cross_entropy(logits, index_tensor({0, 4, 0, 0, 0, 0}, {2, 3})), IndexError);
}

// cross_entropy is one fused op (softmax_cross_entropy): -inf logits off the target add nothing
// and get gradient 0, a -inf target logit gives inf, every row ignored gives 0 and gradient 0;
// float32 agrees with float64; the errors of the op itself name it.
BOOST_AUTO_TEST_CASE(cross_entropy_fused_edge_cases_and_errors) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor logits = tensor({0.5, -inf, 1.0, -0.25, /**/ 2.0, 0.0, -inf, 1.0}, {2, 4}, DType::Float64);
  logits.set_requires_grad(true);
  const Tensor targets = index_tensor({2, 0}, {2});
  Tensor loss = cross_entropy(logits, targets);
  // by hand: row 0 over classes {0, 2, 3}, row 1 over {0, 1, 3}
  const double lse0 = std::log(std::exp(0.5) + std::exp(1.0) + std::exp(-0.25));
  const double lse1 = std::log(std::exp(2.0) + std::exp(0.0) + std::exp(1.0));
  BOOST_TEST(loss.item() == ((lse0 - 1.0) + (lse1 - 2.0)) / 2, boost::test_tools::tolerance(1e-14));
  loss.backward();
  const auto g = logits.grad().to_vector();
  BOOST_TEST(g[1] == 0.0);
  BOOST_TEST(g[6] == 0.0);
  BOOST_TEST(g[2] == (std::exp(1.0 - lse0) - 1) / 2, boost::test_tools::tolerance(1e-14));
  BOOST_TEST(g[0] == std::exp(0.5 - lse0) / 2, boost::test_tools::tolerance(1e-14));
  // -inf at a target: inf (as PyTorch), its row's gradient finite
  BOOST_TEST(std::isinf(cross_entropy(logits.detach(), index_tensor({1, 0}, {2})).item()));
  // every row ignored: 0 and gradient 0
  Rng rng(2);
  Tensor x = sample_randn({3, 5}, rng);
  Tensor none = cross_entropy(x, index_tensor({-100, -100, -100}, {3}));
  BOOST_TEST(none.item() == 0.0);
  none.backward();
  for (double v : x.grad().to_vector()) BOOST_TEST(v == 0.0);
  // float32 against float64, with label smoothing
  const Tensor l64 = randn({4, 6, 7}, rng, DType::Float64);
  std::vector<std::int64_t> tv(24);
  for (std::size_t i = 0; i < tv.size(); ++i) tv[i] = i % 5 == 0 ? -100 : std::int64_t(i % 7);
  const Tensor tg = index_tensor(tv, {4, 6});
  BOOST_TEST(std::fabs(cross_entropy(l64.to(DType::Float32), tg, -100, 0.1).item() - cross_entropy(l64, tg, -100, 0.1).item()) < 1e-6);
  // the op's own errors
  test::expect_throws([&] { softmax_cross_entropy(zeros({}), index_tensor({0}, {1})); }, "ShapeError",
                      {"softmax_cross_entropy", "'x'", "scalar"});
  test::expect_throws([&] { softmax_cross_entropy(zeros({2, 3}), index_tensor({0, 1, 2}, {3})); }, "ShapeError",
                      {"softmax_cross_entropy", "'targets' (3)", "(2, 3)"});
  test::expect_throws([&] { softmax_cross_entropy(zeros({2, 3}), zeros({2})); }, "DTypeError",
                      {"softmax_cross_entropy", "'targets'", "int64", "float32"});
  test::expect_throws([&] { softmax_cross_entropy(zeros({2, 3}), index_tensor({0, 3}, {2})); }, "IndexError",
                      {"softmax_cross_entropy", "target 3", "3 classes", "(2, 3)"});
  test::expect_throws([&] { softmax_cross_entropy(zeros({2, 3}), index_tensor({0, 1}, {2}), -100, 1.5); }, "ValueError",
                      {"softmax_cross_entropy", "label_smoothing", "1.5"});
  test::expect_throws([&] { softmax_cross_entropy(index_tensor({0, 1}, {1, 2}), index_tensor({0}, {1})); }, "DTypeError",
                      {"softmax_cross_entropy", "'x'"});
}

struct MhaCase {
  std::string name;
  std::size_t T, S, kdim, vdim;
  std::function<void(AttentionOptions&, std::size_t B, std::size_t T, std::size_t S)> masks;
};

BOOST_AUTO_TEST_CASE(mha_gradcheck_inputs_and_every_parameter_for_each_mask_kind) {
  const std::size_t B = 2, E = 4, H = 2;
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<MhaCase> cases = {
      {"self, no mask", 3, 3, 0, 0, [](auto&, auto, auto, auto) {}},
      {"self, is_causal", 3, 3, 0, 0, [](AttentionOptions& o, auto, auto, auto) { o.is_causal = true; }},
      {"cross T=2 S=3", 2, 3, 0, 0, [](auto&, auto, auto, auto) {}},
      {"cross kdim=3 vdim=5", 2, 3, 3, 5, [](auto&, auto, auto, auto) {}},
      {"key_padding_mask", 3, 3, 0, 0,
       [](AttentionOptions& o, auto, auto, auto) {
         o.key_padding_mask = bool_tensor({false, false, true, false, true, true}, {2, 3});
       }},
      {"bool attn_mask (T,S) + padding + causal", 3, 3, 0, 0,
       [](AttentionOptions& o, auto, auto, auto) {
         o.attn_mask = bool_tensor({false, true, false, false, false, false, true, false, false}, {3, 3});
         o.key_padding_mask = bool_tensor({false, false, false, false, false, true}, {2, 3});
         o.is_causal = true;
       }},
      {"float attn_mask", 2, 3, 0, 0,
       [inf](AttentionOptions& o, auto, auto, auto) {
         o.attn_mask = tensor({0.5, -inf, -1.0, 0.0, 0.25, -inf}, {2, 3}, DType::Float64);
       }},
      {"3-D (B*H,T,S) mask with a fully masked row", 2, 3, 0, 0,
       [](AttentionOptions& o, auto B, auto T, auto S) {
         std::vector<bool> m(B * 2 * T * S, false);
         for (std::size_t s = 0; s < S; ++s) m[s] = true;  // (b0, h0, t0) fully masked
         m[S + 1] = true;
         o.attn_mask = bool_tensor(m, {B * 2, T, S});
       }},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT("MHA " << c.name) {
      Rng rng(6);
      MultiHeadAttention mha(MultiHeadAttentionOptions(E, H).kdim(c.kdim).vdim(c.vdim), rng);
      mha.to(DType::Float64);
      for (auto& [n, slot] : mha.parameter_slots())  // non-zero biases
        if (n.find("bias") != std::string::npos) {
          Tensor b = sample_randn(slot->shape(), rng);
          *slot = b;
        }
      AttentionOptions o;
      c.masks(o, B, c.T, c.S);
      const bool self = c.T == c.S && c.kdim == 0;
      std::vector<Tensor> inputs;
      if (self) inputs = {sample_randn({B, c.T, E}, rng)};
      else inputs = {sample_randn({B, c.T, E}, rng), sample_randn({B, c.S, c.kdim ? c.kdim : E}, rng),
                     sample_randn({B, c.S, c.vdim ? c.vdim : E}, rng)};
      const std::size_t n = inputs.size();
      auto f = with_params(mha, n, [&](const auto& in) {
        return n == 1 ? mha.forward(in[0], o).output : mha.forward(in[0], in[1], in[2], o).output;
      });
      auto r = gradcheck(f, inputs_and_params(inputs, mha), model_check_options("MHA " + c.name));
      BOOST_TEST(r.ok, r.message);
      // Attention weights are differentiable too, and asking for them changes nothing.
      AttentionOptions ow = o;
      ow.need_weights = true;
      ow.average_attn_weights = false;
      auto with = n == 1 ? mha.forward(inputs[0], ow) : mha.forward(inputs[0], inputs[1], inputs[2], ow);
      auto without = n == 1 ? mha.forward(inputs[0], o) : mha.forward(inputs[0], inputs[1], inputs[2], o);
      BOOST_TEST(allclose(with.output, without.output, 0, 0));
      BOOST_TEST((with.weights.shape() == Shape{B, H, c.T, c.S}));
      BOOST_TEST(test::all_finite(with.weights));
      BOOST_TEST(test::all_finite(with.output));
    }
  }
}

BOOST_AUTO_TEST_CASE(mha_fully_masked_row_has_zero_weights_and_finite_gradients) {
  Rng rng(7);
  MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2), rng);
  mha.to(DType::Float64);
  Tensor x = sample_randn({1, 3, 4}, rng);
  AttentionOptions o;
  o.attn_mask = bool_tensor({true, true, true, false, true, true, false, false, true}, {3, 3});
  o.need_weights = true;
  o.average_attn_weights = false;
  auto out = mha.forward(x, o);
  auto w = out.weights.to_vector();  // (1, 2, 3, 3)
  for (int h = 0; h < 2; ++h)
    for (int s = 0; s < 3; ++s) BOOST_TEST(w[h * 9 + s] == 0.0);
  Tensor up = randn(out.output.shape(), rng, DType::Float64);
  backward({out.output}, {up});
  for (auto& [n, t] : mha.named_parameters()) BOOST_TEST(test::all_finite(t.grad()), n);
  BOOST_TEST(test::all_finite(x.grad()));
  auto xv = x.grad().to_vector();
  double norm = 0;
  for (double g : xv) norm += g * g;
  BOOST_TEST(norm > 0);
}

BOOST_AUTO_TEST_CASE(mha_gradgradcheck_tiny) {
  Rng rng(8);
  MultiHeadAttention mha(MultiHeadAttentionOptions(2, 1), rng);
  mha.to(DType::Float64);
  AttentionOptions o;
  o.is_causal = true;
  Tensor x = sample_randn({1, 2, 2}, rng);
  auto f = with_params(mha, 1, [&](const auto& in) { return mha.forward(in[0], o).output; });
  auto r = gradgradcheck(f, inputs_and_params({x}, mha), model_check_options("tiny MHA"));
  BOOST_TEST(r.ok, r.message);
}

BOOST_AUTO_TEST_CASE(transformer_block_gradcheck) {
  Rng rng(9);
  TransformerBlock block(TransformerBlockOptions(4, 2, 6), rng);
  block.to(DType::Float64);
  AttentionOptions o;
  o.key_padding_mask = bool_tensor({false, false, true, false, false, false}, {2, 3});
  Tensor x = sample_randn({2, 3, 4}, rng);
  auto f = with_params(block, 1, [&](const auto& in) { return block.forward(in[0], o); });
  auto r = gradcheck(f, inputs_and_params({x}, block), model_check_options("TransformerBlock"));
  BOOST_TEST(r.ok, r.message);
}

BOOST_AUTO_TEST_CASE(models_forward_shapes_and_tied_decoder) {
  TransformerConfig c;
  c.vocab_size = 7, c.max_len = 6, c.embed_dim = 8, c.num_heads = 2, c.ff_hidden = 16, c.num_layers = 1;
  c.tied_output = true;
  TransformerDecoder dec(c);
  Tensor tokens = index_tensor({1, 2, 3, 4, 5, 6, 0, 1}, {2, 4});
  Tensor logits = dec.forward(tokens, true);
  BOOST_TEST((logits.shape() == Shape{2, 4, 7}));
  BOOST_TEST(!dec.head);
  Tensor w = dec.body.attention_weights()[0];  // (B, H, T, T), causal: upper triangle zero
  BOOST_TEST((w.shape() == Shape{2, 2, 4, 4}));
  auto wv = w.to_vector();
  BOOST_TEST(wv[1] == 0.0);
  // Causality: changing a later token does not change earlier logits.
  Tensor tokens2 = index_tensor({1, 2, 3, 0, 5, 6, 0, 1}, {2, 4});
  Tensor l2 = dec.forward(tokens2);
  auto a = narrow(logits, 1, 0, 3), b = narrow(l2, 1, 0, 3);
  BOOST_TEST(allclose(a, b, 1e-6, 1e-6));
  c.tied_output = false;
  c.positional = PositionalKind::Sinusoidal;
  TransformerDecoder untied(c);
  BOOST_TEST(bool(untied.head));
  BOOST_TEST((untied.forward(tokens).shape() == Shape{2, 4, 7}));
  TransformerEncoder enc(c);
  Tensor pad = bool_tensor({false, false, false, true, false, false, false, false}, {2, 4});
  BOOST_TEST((enc.forward(tokens, pad).shape() == Shape{2, 4, 7}));
}

BOOST_AUTO_TEST_CASE(mha_shape_errors_name_argument_and_shapes) {
  Rng rng(10);
  MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2), rng);
  Tensor x = randn({2, 3, 4}, rng);
  auto names = [](const char* what) {
    return [what](const Error& e) {
      std::string m = e.what();
      return m.find("MultiHeadAttention") != std::string::npos && m.find(what) != std::string::npos;
    };
  };
  BOOST_CHECK_EXCEPTION(mha.forward(randn({2, 3, 5}, rng)), ShapeError, names("(2, 3, 5)"));
  AttentionOptions o;
  o.attn_mask = causal_mask(2);
  BOOST_CHECK_EXCEPTION(mha.forward(x, o), ShapeError, names("attn_mask"));
  o = {};
  o.key_padding_mask = bool_tensor({false, false}, {1, 2});
  BOOST_CHECK_EXCEPTION(mha.forward(x, o), ShapeError, names("key_padding_mask"));
  o = {};
  o.key_padding_mask = zeros({2, 3}, DType::Int64);  // float is accepted (added to the scores)
  BOOST_CHECK_EXCEPTION(mha.forward(x, o), DTypeError, names("key_padding_mask"));
  BOOST_CHECK_THROW(MultiHeadAttention(MultiHeadAttentionOptions(5, 2), rng), ValueError);
}

BOOST_AUTO_TEST_SUITE_END()
