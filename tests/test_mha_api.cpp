// MultiHeadAttention and the layers as a PyTorch user writes them: options objects (the
// swapped positional calls do not compile), the accepted attn_mask shapes (B == H tested),
// the need_weights default, unbatched input, add_bias_kv / add_zero_attn, float
// key_padding_mask, blocks without biases, batch_first=False, Embedding's padding_idx,
// LayerNorm without affine parameters and cross_entropy on axis 1. PyTorch 1.13 parity from the fixtures in
// tests/fixtures/mha_api (tools/make_fixtures.py, mha_api_fixtures), with the tolerance of
// tests/test_golden.cpp; gradients checked in float64 (first and second order).
#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <type_traits>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/registry.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/checkpoint.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/models/loss.hpp"
#include "xgrad/models/module.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/attention.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

#include "golden.hpp"

using namespace xgrad;
using namespace xgrad::test;
using test::allclose;

// PyTorch's positional order (embed_dim, num_heads, dropout, bias) and the old xgrad order
// (embed_dim, num_heads, bias, dropout) must both fail to compile: only the options object
// names dropout and bias.
static_assert(!std::is_constructible_v<MultiHeadAttention, int, int, double, bool, Rng&>);
static_assert(!std::is_constructible_v<MultiHeadAttention, std::size_t, std::size_t, bool, double, Rng&>);
static_assert(!std::is_constructible_v<MultiHeadAttention, std::size_t, std::size_t, bool, double, Rng&,
                                       std::size_t, std::size_t>);
static_assert(std::is_constructible_v<MultiHeadAttention, const MultiHeadAttentionOptions&, Rng&>);
static_assert(!std::is_constructible_v<FeedForward, std::size_t, std::size_t, double, Rng&>);
static_assert(!std::is_constructible_v<TransformerBlock, std::size_t, std::size_t, std::size_t, double, Rng&>);
static_assert(std::is_constructible_v<TransformerBlock, const TransformerBlockOptions&, Rng&>);
static_assert(std::is_constructible_v<FeedForward, const FeedForwardOptions&, Rng&>);
static_assert(!std::is_convertible_v<std::size_t, LayerNormOptions>);

namespace {

const std::string kApiDir = std::string(XGRAD_FIXTURE_DIR) + "/mha_api";
const char* const kApiFixtures[] = {"unbatched_self", "unbatched_cross", "unbatched_self_causal", "bias_kv",
                                    "zero_attn", "bias_kv_zero_attn", "bias_kv_zero_attn_causal", "float_kpm",
                                    "float_kpm_self", "unbatched_float_kpm_bias_kv_zero_attn", "block_no_bias",
                                    "block_no_bias_gelu_tanh", "seq_first_cross", "seq_first_self_causal",
                                    "embedding_padding_idx", "embedding_padding_idx_negative",
                                    "layer_norm_no_affine", "cross_entropy_class_axis1"};

void run_mha(const std::string& fixture) {
  Golden g(fixture, kApiDir);
  Deviation dev;
  run_mha_fixture(g, dev);
  report(g, dev);
}

template <class F>
void expect_error(F fn, const char* kind, const std::vector<std::string>& parts) {
  try {
    fn();
    BOOST_ERROR("no exception; expected " << kind);
  } catch (const Error& e) {
    BOOST_TEST(std::string(test::error_kind(e)) == kind, e.what());
    for (const auto& p : parts)
      BOOST_TEST(std::string(e.what()).find(p) != std::string::npos, "'" << p << "' not in: " << e.what());
  }
}


}  // namespace

BOOST_AUTO_TEST_SUITE(mha_api)

// --- options objects --------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(options_name_every_setting) {
  const MultiHeadAttentionOptions d(64, 4);
  BOOST_TEST(d.dropout() == 0.0);
  BOOST_TEST(d.bias());
  BOOST_TEST(!d.add_bias_kv());
  BOOST_TEST(!d.add_zero_attn());
  BOOST_TEST(d.kdim() == 64u);
  BOOST_TEST(d.vdim() == 64u);
  Rng rng(1);
  // PyTorch's MultiheadAttention(64, 4, dropout=0.1, bias=False), spelled by name.
  MultiHeadAttention mha(MultiHeadAttentionOptions(64, 4).dropout(0.1).bias(false), rng);
  BOOST_TEST(mha.attn_drop.p == 0.1);
  BOOST_TEST(!mha.in_proj_bias.defined());
  BOOST_TEST(!mha.out_proj.bias.defined());
  BOOST_TEST((names_of(mha.named_parameters()) == std::set<std::string>{"in_proj_weight", "out_proj.weight"}));

  MultiHeadAttention kv(MultiHeadAttentionOptions(8, 2).kdim(5).vdim(3).add_bias_kv(true).add_zero_attn(true), rng);
  BOOST_TEST(kv.kdim == 5u);
  BOOST_TEST(kv.vdim == 3u);
  BOOST_TEST(kv.options.add_zero_attn());
  std::vector<std::string> names;
  for (auto& [n, t] : kv.named_parameters()) names.push_back(n);
  BOOST_TEST((names == std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "in_proj_bias",
                                                "bias_k", "bias_v", "out_proj.weight", "out_proj.bias"}));
  BOOST_TEST((kv.bias_k.shape() == Shape{1, 1, 8}));
  BOOST_TEST((kv.bias_v.shape() == Shape{1, 1, 8}));

  BOOST_CHECK_THROW(MultiHeadAttention(MultiHeadAttentionOptions(8, 3), rng), ValueError);
  BOOST_CHECK_THROW(MultiHeadAttention(MultiHeadAttentionOptions(8, 2).dropout(1.5), rng), ValueError);

  FeedForward ff(FeedForwardOptions(4, 6).dropout(0.25).bias(false), rng);
  BOOST_TEST(ff.drop.p == 0.25);
  BOOST_TEST((names_of(ff.named_parameters()) == std::set<std::string>{"fc1.weight", "fc2.weight"}));
  LayerNorm ln(LayerNormOptions(4).eps(1e-6).bias(false));
  BOOST_TEST(ln.eps == 1e-6);
  BOOST_TEST((names_of(ln.named_parameters()) == std::set<std::string>{"weight"}));
  BOOST_TEST(LayerNorm(4).named_parameters().size() == 2u);
}

// bias_k, bias_v ~ xavier_normal_ on (1, 1, E): N(0, 2 / (E + E)) = N(0, 1/E).
BOOST_AUTO_TEST_CASE(bias_kv_initialised_as_pytorch) {
  Rng rng(2);
  const std::size_t E = 1024;
  MultiHeadAttention mha(MultiHeadAttentionOptions(E, 8).add_bias_kv(true), rng);
  for (const Tensor* t : {&mha.bias_k, &mha.bias_v}) {
    BOOST_TEST(t->requires_grad());
    const auto v = t->to_vector();
    double mean = 0, sq = 0;
    for (double x : v) mean += x / double(E);
    for (double x : v) sq += (x - mean) * (x - mean) / double(E - 1);
    // 2048 draws: the sample std is within 10% of 1/sqrt(E) = 0.03125 (about 4.5 standard errors)
    BOOST_TEST(std::abs(std::sqrt(sq) * std::sqrt(double(E)) - 1.0) < 0.1, "std " << std::sqrt(sq));
    BOOST_TEST(std::abs(mean) < 4.0 / double(E), "mean " << mean);  // 4 standard errors of 1/32/32
  }
}

// --- need_weights ------------------------------------------------------------------------

// Documented default: false (unlike PyTorch), so forward returns no weights unless asked.
BOOST_AUTO_TEST_CASE(need_weights_default_is_false_and_true_gives_pytorch_behaviour) {
  BOOST_TEST(!AttentionOptions{}.need_weights);
  BOOST_TEST(AttentionOptions{}.average_attn_weights);
  Rng rng(3);
  MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2), rng);
  Tensor x = randn({2, 3, 4}, rng);
  AttentionOutput plain = mha.forward(x);
  BOOST_TEST(!plain.weights.defined());
  AttentionOptions o;
  o.need_weights = true;
  AttentionOutput with = mha.forward(x, o);
  BOOST_TEST((with.weights.shape() == Shape{2, 3, 3}));  // averaged over heads, as PyTorch
  BOOST_TEST(allclose(with.output, plain.output, 1e-6, 1e-7));
}

// --- attn_mask shapes --------------------------------------------------------------------

// B == H == 2: a per-batch (B, T, S) mask has the shape of a per-head (H, T, S) one. Both
// readings are refused, with a message listing the accepted shapes with their numbers.
BOOST_AUTO_TEST_CASE(attn_mask_3d_must_be_batch_times_heads_even_when_batch_equals_heads) {
  const std::size_t B = 2, H = 2, T = 3, S = 4, E = 4;
  Rng rng(4);
  MultiHeadAttention mha(MultiHeadAttentionOptions(E, H).kdim(3), rng);
  mha.to(DType::Float64);
  Tensor q = randn({B, T, E}, rng, DType::Float64), k = randn({B, S, 3}, rng, DType::Float64),
         v = randn({B, S, E}, rng, DType::Float64);
  const std::vector<std::string> accepted = {"MultiHeadAttention", "'attn_mask'", "(T, S) = (3, 4)",
                                             "(B*H, T, S) = (4, 3, 4)", "(B, H, T, S) = (2, 2, 3, 4)"};
  for (const Shape& bad : {Shape{B, T, S}, Shape{1, T, S}, Shape{S}, Shape{T, 1}, Shape{1, 1, 1, T, S},
                           Shape{B, 3, T, S}}) {
    BOOST_TEST_CONTEXT(shape_str(bad)) {
      for (bool is_bool : {true, false}) {
        AttentionOptions o;
        o.attn_mask = is_bool ? zeros(bad, DType::Bool) : zeros(bad, DType::Float64);
        auto parts = accepted;
        parts.push_back(shape_str(bad));
        expect_error([&] { mha.forward(q, k, v, o); }, "ShapeError", parts);
      }
    }
  }
  // The op itself applies the same rule (one check for both), naming itself.
  AttentionMasks m;
  m.mask = zeros({B, T, S}, DType::Bool);
  Tensor qp = randn({B, T, E}, rng), kp = randn({B, S, E}, rng), vp = randn({B, S, E}, rng);
  expect_error([&] { attention(qp, kp, vp, H, m); }, "ShapeError",
               {"attention:", "'mask' (2, 3, 4)", "(B*H, T, S) = (4, 3, 4)"});
  m = {};
  m.float_mask = zeros({1, T, S});
  expect_error([&] { attention(qp, kp, vp, H, m); }, "ShapeError", {"attention:", "'float_mask' (1, 3, 4)"});

  // Accepted: (B*H, T, S) is entry b*H + h, the same as (B, H, T, S); a per-batch mask is
  // (B, 1, T, S) and equals running each batch alone with its (T, S) mask.
  std::vector<bool> bits(B * H * T * S);
  Rng mr(5);
  for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = mr.uniform() < 0.3 && i % S != (i / S) % S;
  AttentionOptions o3, o4;
  o3.attn_mask = bool_tensor(bits, {B * H, T, S});
  o4.attn_mask = bool_tensor(bits, {B, H, T, S});
  o3.need_weights = o4.need_weights = true;
  o3.average_attn_weights = o4.average_attn_weights = false;
  BOOST_TEST(allclose(mha.forward(q, k, v, o3).weights, mha.forward(q, k, v, o4).weights, 0, 0));
  AttentionOptions per_batch;
  per_batch.attn_mask = bool_tensor(std::vector<bool>(bits.begin(), bits.begin() + long(B * T * S)), {B, 1, T, S});
  const Tensor out = mha.forward(q, k, v, per_batch).output;
  for (std::size_t b = 0; b < B; ++b) {
    AttentionOptions one;
    one.attn_mask = bool_tensor(std::vector<bool>(bits.begin() + long(b * T * S), bits.begin() + long((b + 1) * T * S)),
                                {T, S});
    const Tensor ob = mha.forward(narrow(q, 0, b, 1), narrow(k, 0, b, 1), narrow(v, 0, b, 1), one).output;
    BOOST_TEST(allclose(narrow(out, 0, b, 1), ob, 1e-13, 1e-14));
  }
}

BOOST_AUTO_TEST_CASE(unbatched_mask_shapes) {
  const std::size_t H = 2, T = 3, S = 4, E = 4;
  Rng rng(6);
  MultiHeadAttention mha(MultiHeadAttentionOptions(E, H), rng);
  Tensor q = randn({T, E}, rng), kv = randn({S, E}, rng);
  for (const Shape& bad : {Shape{1, T, S}, Shape{4, T, S}, Shape{T}}) {
    AttentionOptions o;
    o.attn_mask = zeros(bad, DType::Bool);
    expect_error([&] { mha.forward(q, kv, kv, o); }, "ShapeError",
                 {"MultiHeadAttention", "'attn_mask'", shape_str(bad), "(T, S) = (3, 4)", "(H, T, S) = (2, 3, 4)",
                  "unbatched"});
  }
  AttentionOptions o;
  o.key_padding_mask = zeros({1, S}, DType::Bool);
  expect_error([&] { mha.forward(q, kv, kv, o); }, "ShapeError",
               {"MultiHeadAttention", "'key_padding_mask' (1, 4)", "(S) = (4)", "unbatched"});
  // (H, T, S) for unbatched input is (B*H, T, S) with B = 1: same result as batched with B = 1.
  std::vector<bool> bits(H * T * S);
  for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = (i * 7) % 5 == 0 && i % S != 3;
  o = {};
  o.attn_mask = bool_tensor(bits, {H, T, S});
  o.key_padding_mask = bool_tensor({false, true, false, false}, {S});
  o.need_weights = true;
  o.average_attn_weights = false;
  AttentionOutput u = mha.forward(q, kv, kv, o);
  AttentionOptions ob = o;
  ob.key_padding_mask = bool_tensor({false, true, false, false}, {1, S});
  AttentionOutput b = mha.forward(reshape(q, {1, T, E}), reshape(kv, {1, S, E}), reshape(kv, {1, S, E}), ob);
  BOOST_TEST((u.output.shape() == Shape{T, E}));
  BOOST_TEST((u.weights.shape() == Shape{H, T, S}));
  BOOST_TEST(allclose(u.output, reshape(b.output, {T, E}), 0, 0));
  BOOST_TEST(allclose(u.weights, reshape(b.weights, {H, T, S}), 0, 0));
}

BOOST_AUTO_TEST_CASE(key_padding_mask_dtypes) {
  Rng rng(7);
  MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2), rng);
  Tensor x = randn({2, 3, 4}, rng);
  AttentionOptions o;
  o.key_padding_mask = zeros({2, 3}, DType::Float64);
  expect_error([&] { mha.forward(x, o); }, "DTypeError",
               {"MultiHeadAttention", "'key_padding_mask' (2, 3)", "float64", "float32"});
  o.key_padding_mask = zeros({2, 3}, DType::Int64);
  expect_error([&] { mha.forward(x, o); }, "DTypeError", {"MultiHeadAttention", "'key_padding_mask'", "int64"});
  // A float mask of 0 / -inf is the bool mask false / true.
  const double ninf = -std::numeric_limits<double>::infinity();
  o.key_padding_mask = tensor({0, 0, ninf, 0, ninf, 0}, {2, 3});
  AttentionOptions ob;
  ob.key_padding_mask = bool_tensor({false, false, true, false, true, false}, {2, 3});
  BOOST_TEST(allclose(mha.forward(x, o).output, mha.forward(x, ob).output, 1e-6, 1e-7));
}

// add_bias_kv with is_causal: the bias key is visible to every query (PyTorch pads the
// causal mask with a not-masked column), unlike causal_mask(T, S + 1).
BOOST_AUTO_TEST_CASE(added_keys_are_visible_to_every_query) {
  Rng rng(8);
  MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2).add_bias_kv(true).add_zero_attn(true), rng);
  Tensor x = randn({1, 3, 4}, rng);
  AttentionOptions o;
  o.is_causal = true;
  o.key_padding_mask = bool_tensor({true, true, true}, {1, 3});  // every real key is padding
  o.need_weights = true;
  o.average_attn_weights = false;
  const auto w = mha.forward(x, o).weights;  // (1, 2, 3, 5)
  BOOST_TEST((w.shape() == Shape{1, 2, 3, 5}));
  const auto wv = w.to_vector();
  for (std::size_t r = 0; r < 6; ++r) {
    for (std::size_t j = 0; j < 3; ++j) BOOST_TEST(wv[r * 5 + j] == 0.0);
    BOOST_TEST(std::abs(wv[r * 5 + 3] + wv[r * 5 + 4] - 1.0) < 1e-6, "row " << r);
    BOOST_TEST(wv[r * 5 + 3] > 0.0);
  }
}

// --- PyTorch parity ----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(golden_unbatched_self) { run_mha("unbatched_self"); }
BOOST_AUTO_TEST_CASE(golden_unbatched_cross) { run_mha("unbatched_cross"); }
BOOST_AUTO_TEST_CASE(golden_unbatched_self_causal) { run_mha("unbatched_self_causal"); }
BOOST_AUTO_TEST_CASE(golden_bias_kv) { run_mha("bias_kv"); }
BOOST_AUTO_TEST_CASE(golden_zero_attn) { run_mha("zero_attn"); }
BOOST_AUTO_TEST_CASE(golden_bias_kv_zero_attn) { run_mha("bias_kv_zero_attn"); }
BOOST_AUTO_TEST_CASE(golden_bias_kv_zero_attn_causal) { run_mha("bias_kv_zero_attn_causal"); }
BOOST_AUTO_TEST_CASE(golden_float_kpm) { run_mha("float_kpm"); }
BOOST_AUTO_TEST_CASE(golden_float_kpm_self) { run_mha("float_kpm_self"); }
BOOST_AUTO_TEST_CASE(golden_unbatched_float_kpm_bias_kv_zero_attn) { run_mha("unbatched_float_kpm_bias_kv_zero_attn"); }

// A pre-LN block without any bias (nn.LayerNorm(bias=False) written as nanoGPT's LayerNorm
// for torch 1.13), causal; GELU exact or tanh-approximate (GPT-2).
void run_block_no_bias(const std::string& fixture) {
  Golden g(fixture, kApiDir);
  BOOST_TEST_REQUIRE(g.integer("bias") == 0);
  Deviation dev;
  run_block_fixture(g, dev);
  report(g, dev);
}
BOOST_AUTO_TEST_CASE(golden_block_no_bias) { run_block_no_bias("block_no_bias"); }
BOOST_AUTO_TEST_CASE(golden_block_no_bias_gelu_tanh) { run_block_no_bias("block_no_bias_gelu_tanh"); }

// nn.MultiheadAttention(batch_first=False), PyTorch's default: (T, B, E) in and out.
BOOST_AUTO_TEST_CASE(golden_seq_first_cross) { run_mha("seq_first_cross"); }
BOOST_AUTO_TEST_CASE(golden_seq_first_self_causal) { run_mha("seq_first_self_causal"); }

// nn.Embedding(num, dim, padding_idx=k): the padding row is zero at construction, is still
// looked up (the fixture sets it non-zero) and its gradient is exactly zero.
void run_embedding_padding(const std::string& fixture) {
  Golden g(fixture, kApiDir);
  BOOST_TEST_REQUIRE(g.str("kind") == "embedding");
  Deviation dev;
  Rng rng(0);
  Embedding emb(EmbeddingOptions(g.integer("num_embeddings"), g.integer("dim")).padding_idx(g.integer("padding_idx")),
                rng);
  const std::size_t dim = std::size_t(g.integer("dim")), k = emb.padding_idx;
  const Tensor init_row = narrow(emb.weight, 0, k, 1);
  compare("init_pad_row", reshape(init_row, {dim}), g.at("ref.init_pad_row"), dev);
  for (double v : init_row.to_vector()) BOOST_TEST(v == 0.0);
  emb.load_parameters(g.params());
  const Tensor out = emb.forward(g.at("indices"));
  compare("output", out, g.at("output"), dev);
  compare_grads(g, out, {}, emb.named_parameters(), dev);
  const Tensor gw = grad({sum(mul(emb.forward(g.at("indices")), g.at("upstream")))}, {emb.weight})[0];
  for (double v : narrow(gw, 0, k, 1).to_vector()) BOOST_TEST(v == 0.0);
  g.check_all_used();
  report(g, dev);
}
BOOST_AUTO_TEST_CASE(golden_embedding_padding_idx) { run_embedding_padding("embedding_padding_idx"); }
BOOST_AUTO_TEST_CASE(golden_embedding_padding_idx_negative) { run_embedding_padding("embedding_padding_idx_negative"); }

// nn.LayerNorm(E, elementwise_affine=False): no parameters.
BOOST_AUTO_TEST_CASE(golden_layer_norm_no_affine) {
  Golden g("layer_norm_no_affine", kApiDir);
  Deviation dev;
  LayerNorm ln(LayerNormOptions(g.at("x").shape().back()).eps(g.num("eps")).elementwise_affine(false));
  BOOST_TEST(ln.named_parameters().empty());
  const Tensor x = g.leaf("x");
  const Tensor out = ln.forward(x);
  compare("output", out, g.at("output"), dev);
  compare_grads(g, out, {{"x", x}}, {}, dev);
  g.check_all_used();
  report(g, dev);
}

// F.cross_entropy(logits (N, C, T), targets (N, T)) with C == T: ClassAxis(1).
BOOST_AUTO_TEST_CASE(golden_cross_entropy_class_axis1) {
  Golden g("cross_entropy_class_axis1", kApiDir);
  BOOST_TEST_REQUIRE(g.integer("class_axis") == 1);
  Deviation dev;
  const Tensor logits = g.leaf("logits");
  const Tensor out =
      cross_entropy(logits, g.at("targets"), ClassAxis(1), g.integer("ignore_index"), g.num("label_smoothing"));
  compare("output", out, g.at("output"), dev);
  compare_grads(g, out, {{"logits", logits}}, {}, dev);
  g.check_all_used();
  report(g, dev);
}

BOOST_AUTO_TEST_CASE(every_api_fixture_is_tested) {
  std::set<std::string> tested(std::begin(kApiFixtures), std::end(kApiFixtures)), found;
  for (const auto& e : std::filesystem::directory_iterator(kApiDir))
    if (e.path().extension() == ".safetensors") found.insert(e.path().stem().string());
  BOOST_TEST((tested == found));
}

// --- models without biases ---------------------------------------------------------------

BOOST_AUTO_TEST_CASE(transformer_config_bias_false_has_no_bias_parameter) {
  TransformerConfig c;
  c.vocab_size = 7;
  c.max_len = 8;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.ff_hidden = 16;
  c.num_layers = 2;
  c.bias = false;
  TransformerDecoder dec(c);
  TransformerEncoder enc(c);
  for (Module* m : {static_cast<Module*>(&dec), static_cast<Module*>(&enc)})
    for (const auto& [n, t] : m->named_parameters()) BOOST_TEST(n.find("bias") == std::string::npos, n);
  BOOST_TEST(names_of(enc.named_parameters()).count("body.ln_f.weight") == 1u);
  BOOST_TEST(names_of(enc.named_parameters()).count("body.blocks.1.ln2.weight") == 1u);
  Tensor tokens = index_tensor({1, 2, 3, 4, 5, 6}, {2, 3});
  BOOST_TEST((dec.forward(tokens).shape() == Shape{2, 3, 7}));
  c.bias = true;
  TransformerDecoder with(c);
  BOOST_TEST(names_of(with.named_parameters()).count("body.blocks.0.attn.in_proj_bias") == 1u);
  BOOST_TEST(names_of(with.named_parameters()).count("body.ln_f.bias") == 1u);
}

BOOST_AUTO_TEST_CASE(block_without_bias_gradcheck) {
  Rng rng(9);
  TransformerBlock block(TransformerBlockOptions(4, 2, 6).bias(false), rng);
  block.to(DType::Float64);
  for (auto& [n, slot] : block.parameter_slots()) *slot = sample_randn(slot->shape(), rng);
  AttentionOptions o;
  o.is_causal = true;
  Tensor x = sample_randn({2, 3, 4}, rng);
  auto f = with_params(block, 1, [&](const auto& in) { return block.forward(in[0], o); });
  auto r = gradcheck(f, inputs_and_params({x}, block), model_check_options("block without bias"));
  BOOST_TEST(r.ok, r.message);
}

// --- gradients: first and second order, float64, tiny configurations ---------------------

BOOST_AUTO_TEST_CASE(feed_forward_gelu_tanh_gradcheck_and_gradgradcheck) {
  Rng rng(11);
  FeedForward ff(FeedForwardOptions(3, 5).gelu_approximate_tanh(true), rng);
  ff.to(DType::Float64);
  Tensor x = sample_randn({2, 3}, rng);
  auto f = with_params(ff, 1, [&](const auto& in) { return ff.forward(in[0]); });
  const auto all = inputs_and_params({x}, ff);
  auto r1 = gradcheck(f, all, model_check_options("FeedForward gelu tanh"));
  BOOST_TEST(r1.ok, r1.message);
  auto r2 = gradgradcheck(f, all, model_check_options("FeedForward gelu tanh"));
  BOOST_TEST(r2.ok, r2.message);
}

struct ApiCase {
  std::string name;
  bool bias_kv, zero_attn, unbatched, self, float_kpm_input;
  std::function<void(AttentionOptions&)> masks;
};

BOOST_AUTO_TEST_CASE(gradcheck_and_gradgradcheck_new_features) {
  const std::size_t E = 4, H = 2, T = 2, S = 3;
  const double ninf = -std::numeric_limits<double>::infinity();
  const std::vector<ApiCase> cases = {
      {"add_bias_kv + bool (T,S) mask + padding", true, false, false, false, false,
       [](AttentionOptions& o) {
         o.attn_mask = bool_tensor({false, true, false, false, false, true}, {2, 3});
         o.key_padding_mask = bool_tensor({false, false, true, false, false, false}, {2, 3});
       }},
      {"add_zero_attn + (B*H,T,S) mask", false, true, false, false, false,
       [](AttentionOptions& o) {
         std::vector<bool> m(2 * 2 * 2 * 3, false);
         m[1] = m[8] = m[15] = true;
         o.attn_mask = bool_tensor(m, {4, 2, 3});
       }},
      {"add_bias_kv + add_zero_attn, self, causal", true, true, false, true, false,
       [](AttentionOptions& o) { o.is_causal = true; }},
      {"unbatched cross, (H,T,S) mask + (S) padding", false, false, true, false, false,
       [](AttentionOptions& o) {
         o.attn_mask = bool_tensor({false, false, true, true, false, false, false, false, false, false, true, false},
                                   {2, 2, 3});
         o.key_padding_mask = bool_tensor({false, false, true}, {3});
       }},
      {"unbatched, add_bias_kv + add_zero_attn, float (S) padding", true, true, true, false, false,
       [ninf](AttentionOptions& o) { o.key_padding_mask = tensor({0.3, ninf, -0.4}, {3}, DType::Float64); }},
      {"float key_padding_mask + float attn_mask", false, false, false, false, false,
       [ninf](AttentionOptions& o) {
         o.key_padding_mask = tensor({0.5, -1.0, ninf, 0.0, 0.25, 0.75}, {2, 3}, DType::Float64);
         o.attn_mask = tensor({0.1, -0.2, 0.3, ninf, 0.5, 0.0}, {2, 3}, DType::Float64);
       }},
      {"float key_padding_mask differentiated", false, false, false, false, true, [](AttentionOptions&) {}},
  };
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.name) {
      Rng rng(10);
      MultiHeadAttention mha(MultiHeadAttentionOptions(E, H).add_bias_kv(c.bias_kv).add_zero_attn(c.zero_attn), rng);
      mha.to(DType::Float64);
      for (auto& [n, slot] : mha.parameter_slots())  // non-zero biases
        if (n.find("bias") != std::string::npos) *slot = sample_randn(slot->shape(), rng);
      AttentionOptions o;
      c.masks(o);
      const Shape lead = c.unbatched ? Shape{} : Shape{2};
      auto shape = [&](std::size_t L) {
        Shape s = lead;
        s.push_back(L);
        s.push_back(E);
        return s;
      };
      std::vector<Tensor> inputs;
      if (c.self) inputs = {sample_randn(shape(T), rng)};
      else inputs = {sample_randn(shape(T), rng), sample_randn(shape(S), rng), sample_randn(shape(S), rng)};
      if (c.float_kpm_input) inputs.push_back(sample_randn({2, S}, rng));
      const std::size_t n = inputs.size();
      auto f = with_params(mha, n, [&, self = c.self, kpm_input = c.float_kpm_input](const auto& in) {
        AttentionOptions oo = o;
        if (kpm_input) oo.key_padding_mask = in.back();
        return self ? mha.forward(in[0], oo).output : mha.forward(in[0], in[1], in[2], oo).output;
      });
      const auto all = inputs_and_params(inputs, mha);
      auto r1 = gradcheck(f, all, model_check_options(c.name));
      BOOST_TEST(r1.ok, r1.message);
      auto r2 = gradgradcheck(f, all, model_check_options(c.name));
      BOOST_TEST(r2.ok, r2.message);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
