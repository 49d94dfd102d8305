// Code ported from PyTorch that used to compile and run with another meaning: narrowing in the
// options objects and constructors (compile errors now), sizes and hyperparameters checked at
// construction with the module's name, MultiHeadAttention's batch_first, cross_entropy's class
// axis, slice's end index, Embedding's padding_idx and LayerNorm without affine parameters.
// PyTorch parity for the last five: tests/test_mha_api.cpp (fixtures in tests/fixtures/mha_api).
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/models/loss.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

using namespace xgrad;
using namespace xgrad::test;

// --- 1. narrowing does not compile ------------------------------------------------------
// A double or a bool where a size belongs:
static_assert(!std::is_constructible_v<TransformerBlockOptions, int, int, double>);  // (64, 4, 0.1)
static_assert(!std::is_constructible_v<TransformerBlockOptions, int, int, bool>);
static_assert(!std::is_constructible_v<FeedForwardOptions, int, double>);            // (64, 0.1)
static_assert(!std::is_constructible_v<MultiHeadAttentionOptions, int, double>);     // (64, 4.5)
static_assert(!std::is_constructible_v<MultiHeadAttentionOptions, double, int>);
static_assert(!std::is_constructible_v<MultiHeadAttentionOptions, int, bool>);
static_assert(!std::is_constructible_v<LayerNormOptions, double>);
static_assert(!std::is_constructible_v<LayerNorm, double>);
static_assert(!std::is_constructible_v<EmbeddingOptions, int, double>);
static_assert(!std::is_constructible_v<Embedding, int, double, Rng&>);
static_assert(!std::is_constructible_v<Linear, double, int, bool, Rng&>);
static_assert(!std::is_constructible_v<LearnedPositionalEncoding, double, int, Rng&>);
static_assert(!std::is_constructible_v<SinusoidalPositionalEncoding, int, float>);
// Linear's bias only from a bool (Linear(4, 8, 0.5, rng) used to mean bias = true):
static_assert(!std::is_constructible_v<Linear, int, int, double, Rng&>);
static_assert(!std::is_constructible_v<Linear, int, int, int, Rng&>);
// Dropout's seed not from a bool or a floating value (Dropout(0.1, true) used to be seed 1):
static_assert(!std::is_constructible_v<Dropout, double, bool>);
static_assert(!std::is_constructible_v<Dropout, double, double>);
static_assert(!std::is_constructible_v<Dropout, double, float>);
// What stays valid: integer sizes of any integral type, bool bias, integer seeds.
static_assert(std::is_constructible_v<TransformerBlockOptions, int, long, std::size_t>);
static_assert(std::is_constructible_v<MultiHeadAttentionOptions, std::size_t, unsigned>);
static_assert(std::is_constructible_v<FeedForwardOptions, int, int>);
static_assert(std::is_constructible_v<Linear, int, int, bool, Rng&>);
static_assert(std::is_constructible_v<Dropout, double, int>);
static_assert(std::is_constructible_v<Dropout, double, std::uint64_t>);
static_assert(std::is_constructible_v<LayerNorm, int>);
static_assert(std::is_constructible_v<LayerNorm, int, double>);
static_assert(!std::is_convertible_v<int, LayerNormOptions>);
// The kdim / vdim setters take sizes too.
template <class T, class = void>
struct KdimAccepts : std::false_type {};
template <class T>
struct KdimAccepts<T, std::void_t<decltype(std::declval<MultiHeadAttentionOptions&>().kdim(std::declval<T>()))>>
    : std::true_type {};
static_assert(!KdimAccepts<double>::value && !KdimAccepts<bool>::value && KdimAccepts<int>::value);

namespace {

// kind and every part must appear in the message.
template <class F>
void expect_error(F fn, const char* kind, const std::vector<std::string>& parts) {
  try {
    fn();
    BOOST_ERROR("no exception; expected " << kind);
  } catch (const Error& e) {
    BOOST_TEST(std::string(error_kind(e)) == kind, e.what());
    for (const auto& p : parts)
      BOOST_TEST(std::string(e.what()).find(p) != std::string::npos, "'" << p << "' not in: " << e.what());
  }
}

Tensor randn64(const Shape& s, unsigned seed) { return leaf(vals(numel(s), seed), s); }

TransformerConfig small_config() {
  TransformerConfig c;
  c.vocab_size = 7;
  c.max_len = 8;
  c.embed_dim = 8;
  c.num_heads = 2;
  c.ff_hidden = 16;
  c.num_layers = 1;
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(port_traps)

// --- 1. sizes checked at construction ---------------------------------------------------

BOOST_AUTO_TEST_CASE(sizes_must_be_at_least_one) {
  Rng rng(1);
  const char* V = "ValueError";
  expect_error([] { TransformerBlockOptions(64, 4, 0); }, V, {"TransformerBlock", "'ff_hidden'", ">= 1", "got 0"});
  expect_error([] { TransformerBlockOptions(64, 0, 256); }, V, {"TransformerBlock", "'num_heads'", "got 0"});
  expect_error([] { TransformerBlockOptions(-64, 4, 256); }, V, {"TransformerBlock", "'embed_dim'", "got -64"});
  expect_error([] { TransformerBlockOptions(64, 3, 256); }, V, {"TransformerBlock", "'embed_dim' 64", "divisible", "'num_heads' 3"});
  expect_error([] { FeedForwardOptions(64, 0); }, V, {"FeedForward", "'hidden'", "got 0"});
  expect_error([] { FeedForwardOptions(0, 8); }, V, {"FeedForward", "'dim'", "got 0"});
  expect_error([] { MultiHeadAttentionOptions(0, 1); }, V, {"MultiHeadAttention", "'embed_dim'", "got 0"});
  expect_error([] { MultiHeadAttentionOptions(8, 0); }, V, {"MultiHeadAttention", "'num_heads'", "got 0"});
  expect_error([] { MultiHeadAttentionOptions(8, -2); }, V, {"MultiHeadAttention", "'num_heads'", "got -2"});
  expect_error([] { MultiHeadAttentionOptions(8, 2).kdim(-1); }, V, {"MultiHeadAttention", "'kdim'", "got -1"});
  expect_error([&] { Linear(0, 8, true, rng); }, V, {"Linear", "'in_features'", "got 0"});
  expect_error([&] { Linear(4, -8, true, rng); }, V, {"Linear", "'out_features'", "got -8"});
  expect_error([&] { Embedding(0, 4, rng); }, V, {"Embedding", "'num_embeddings'", "got 0"});
  expect_error([&] { Embedding(4, 0, rng); }, V, {"Embedding", "'dim'", "got 0"});
  expect_error([] { EmbeddingOptions(4, 2).padding_idx(4); }, V, {"Embedding", "'padding_idx' 4", "[-4, 4)"});
  expect_error([] { EmbeddingOptions(4, 2).padding_idx(-5); }, V, {"Embedding", "'padding_idx' -5"});
  expect_error([&] { LearnedPositionalEncoding(0, 4, rng); }, V, {"LearnedPositionalEncoding", "'max_len'"});
  expect_error([] { SinusoidalPositionalEncoding(4, 0); }, V, {"SinusoidalPositionalEncoding", "'dim'"});
  expect_error([] { LayerNorm(0); }, V, {"LayerNorm", "'dim'", "got 0"});
  // MultiHeadAttention's own check still names both sizes.
  expect_error([&] { MultiHeadAttention(MultiHeadAttentionOptions(8, 3), rng); }, V,
               {"MultiHeadAttention", "embed_dim 8", "num_heads 3"});
}

// --- 2. hyperparameters checked at construction, naming the module ----------------------

BOOST_AUTO_TEST_CASE(dropout_and_eps_named_by_their_module) {
  const char* V = "ValueError";
  expect_error([] { MultiHeadAttentionOptions(8, 2).dropout(1.0); }, V, {"MultiHeadAttention", "'dropout'", "[0, 1)", "got 1"});
  expect_error([] { MultiHeadAttentionOptions(8, 2).dropout(-0.1); }, V, {"MultiHeadAttention", "'dropout'"});
  expect_error([] { FeedForwardOptions(8, 16).dropout(1.5); }, V, {"FeedForward", "'dropout'"});
  expect_error([] { TransformerBlockOptions(8, 2, 16).dropout(std::nan("")); }, V, {"TransformerBlock", "'dropout'"});
  expect_error([] { Dropout(1.0, 3); }, V, {"Dropout", "'p'"});
  expect_error([] { LayerNorm(64, 0.0); }, V, {"LayerNorm", "'eps'", "> 0", "got 0"});
  expect_error([] { LayerNorm(64, -1.0); }, V, {"LayerNorm", "'eps'", "got -1"});
  expect_error([] { LayerNormOptions(64).eps(0.0); }, V, {"LayerNorm", "'eps'"});
  expect_error([] { LayerNormOptions(64).eps(std::numeric_limits<double>::infinity()); }, V, {"LayerNorm", "'eps'"});
  BOOST_TEST(LayerNorm(4, 1e-6).eps == 1e-6);
}

BOOST_AUTO_TEST_CASE(transformer_config_checked_before_anything_is_built) {
  struct Case {
    const char* field;
    void (*set)(TransformerConfig&);
  };
  const Case cases[] = {
      {"'config.vocab_size'", [](TransformerConfig& c) { c.vocab_size = 0; }},
      {"'config.max_len'", [](TransformerConfig& c) { c.max_len = 0; }},
      {"'config.embed_dim'", [](TransformerConfig& c) { c.embed_dim = 0; }},
      {"'config.num_heads'", [](TransformerConfig& c) { c.num_heads = 0; }},
      {"'config.ff_hidden'", [](TransformerConfig& c) { c.ff_hidden = 0; }},
      {"'config.num_layers'", [](TransformerConfig& c) { c.num_layers = 0; }},
      {"'config.num_heads' 3", [](TransformerConfig& c) { c.num_heads = 3; }},
      {"'config.dropout'", [](TransformerConfig& c) { c.dropout = 1.0; }},
  };
  for (const auto& k : cases) {
    BOOST_TEST_CONTEXT(k.field) {
      TransformerConfig c = small_config();
      k.set(c);
      expect_error([&] { TransformerBody b(c); }, "ValueError", {"Transformer", k.field});
      expect_error([&] { TransformerEncoder e(c); }, "ValueError", {"Transformer", k.field});
      expect_error([&] { TransformerDecoder d(c); }, "ValueError", {"Transformer", k.field});
    }
  }
  TransformerDecoder ok(small_config());
  BOOST_TEST((ok.forward(index_tensor({1, 2, 3}, {1, 3})).shape() == Shape{1, 3, 7}));
}

// --- 3. batch_first -----------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(batch_first_false_reads_sequence_first) {
  BOOST_TEST(MultiHeadAttentionOptions(8, 2).batch_first());
  const std::size_t E = 8, H = 2, B = 2, T = 3, S = 5;
  Rng rng(3);
  MultiHeadAttention bf(MultiHeadAttentionOptions(E, H).kdim(5).vdim(3), rng);
  Rng rng2(3);
  MultiHeadAttention sf(MultiHeadAttentionOptions(E, H).kdim(5).vdim(3).batch_first(false), rng2);
  bf.to(DType::Float64);
  sf.to(DType::Float64);
  sf.load_parameters(bf.named_parameters());
  const Tensor q = randn64({B, T, E}, 1), k = randn64({B, S, 5}, 2), v = randn64({B, S, 3}, 3);
  AttentionOptions o;
  o.need_weights = true;
  o.average_attn_weights = false;
  o.key_padding_mask = bool_tensor({false, false, false, false, true, false, false, false, true, true}, {B, S});
  const AttentionOutput a = bf.forward(q, k, v, o);
  const AttentionOutput b = sf.forward(transpose(q, 0, 1), transpose(k, 0, 1), transpose(v, 0, 1), o);
  BOOST_TEST((b.output.shape() == Shape{T, B, E}));
  BOOST_TEST(allclose(b.output, transpose(a.output, 0, 1), 0, 0));
  BOOST_TEST((b.weights.shape() == Shape{B, H, T, S}));  // weights batch-first, as PyTorch
  BOOST_TEST(allclose(b.weights, a.weights, 0, 0));
  // Self-attention (fused path) and unbatched input (the same in both layouts).
  const Tensor x = randn64({T, B, E}, 4);
  MultiHeadAttention sf_self(MultiHeadAttentionOptions(E, H).batch_first(false), rng);
  sf_self.to(DType::Float64);
  MultiHeadAttention bf_self(MultiHeadAttentionOptions(E, H), rng);
  bf_self.to(DType::Float64);
  bf_self.load_parameters(sf_self.named_parameters());
  AttentionOptions causal;
  causal.is_causal = true;
  BOOST_TEST(allclose(sf_self.forward(x, causal).output,
                      transpose(bf_self.forward(transpose(x, 0, 1), causal).output, 0, 1), 1e-14, 1e-14));
  const Tensor u = randn64({T, E}, 5);
  BOOST_TEST(allclose(sf_self.forward(u, causal).output, bf_self.forward(u, causal).output, 0, 0));
  // A batch-first tensor given to a sequence-first module: the message names the layout.
  expect_error([&] { sf.forward(q, k, v); }, "ShapeError",
               {"MultiHeadAttention", "query (T, B, 8)", "key (S, B, 5)", "batch_first(false)", "(2, 3, 8)"});
}

BOOST_AUTO_TEST_CASE(batch_first_false_gradcheck) {
  const std::size_t E = 4, H = 2, B = 2, T = 2, S = 3;
  Rng rng(7);
  MultiHeadAttention mha(MultiHeadAttentionOptions(E, H).batch_first(false).add_bias_kv(true), rng);
  mha.to(DType::Float64);
  AttentionOptions o;
  o.key_padding_mask = bool_tensor({false, false, true, false, false, false}, {B, S});
  const std::vector<Tensor> in = {randn64({T, B, E}, 11), randn64({S, B, E}, 12), randn64({S, B, E}, 13)};
  auto f = with_params(mha, 3, [&](const auto& x) { return mha.forward(x[0], x[1], x[2], o).output; });
  auto r1 = gradcheck(f, inputs_and_params(in, mha), model_check_options("MHA batch_first(false)"));
  BOOST_TEST(r1.ok, r1.message);
  auto r2 = gradgradcheck(f, inputs_and_params(in, mha), model_check_options("MHA batch_first(false)"));
  BOOST_TEST(r2.ok, r2.message);
}

// --- 4. cross_entropy's class axis --------------------------------------------------------

BOOST_AUTO_TEST_CASE(cross_entropy_class_axis) {
  // logits (N, C, T) with C == T: ClassAxis(1) equals class-last on the permuted logits.
  const Tensor logits = randn64({2, 3, 3}, 21);
  const Tensor targets = index_tensor({0, 2, 1, 2, -100, 0}, {2, 3});
  const Tensor a = cross_entropy(logits, targets, ClassAxis(1), -100, 0.1);
  const Tensor b = cross_entropy(permute(logits, {0, 2, 1}), targets, -100, 0.1);
  BOOST_TEST(allclose(a, b, 1e-15, 0));
  BOOST_TEST(allclose(cross_entropy(logits, targets, ClassAxis(-1)), cross_entropy(logits, targets), 0, 0));
  BOOST_TEST(allclose(cross_entropy(logits, targets, ClassAxis(2)), cross_entropy(logits, targets), 0, 0));
  // Hand-derived: one sample, classes on axis 0 of (C=3, 1).
  const Tensor col = f64({0.0, std::log(2.0), std::log(3.0)}, {3, 1});  // softmax = (1, 2, 3) / 6
  BOOST_TEST(allclose(cross_entropy(col, index_tensor({2}, {1}), ClassAxis(0)), {std::log(2.0)}, 1e-15, 1e-15));
  // Messages say where the classes are.
  expect_error([&] { cross_entropy(logits, index_tensor({0, 1}, {2})); }, "ShapeError",
               {"cross_entropy", "'logits' (2, 3, 3)", "the last axis"});
  expect_error([&] { cross_entropy(randn64({2, 4, 3}, 1), index_tensor({0, 1, 2, 0}, {2, 2}), ClassAxis(1)); },
               "ShapeError", {"cross_entropy", "(2, 4, 3)", "axis 1"});
  expect_error([&] { cross_entropy(logits, index_tensor({0, 3, 0, 0, 0, 0}, {2, 3}), ClassAxis(1)); }, "IndexError",
               {"cross_entropy", "target 3", "3 classes", "axis 1 of 'logits' (2, 3, 3)"});
  expect_error([&] { cross_entropy(logits, index_tensor({0, 3, 0, 0, 0, 0}, {2, 3})); }, "IndexError",
               {"cross_entropy", "target 3", "the last axis of 'logits'"});
  expect_error([&] { cross_entropy(logits, targets, ClassAxis(3)); }, "ShapeError",
               {"cross_entropy", "class axis 3", "(2, 3, 3)"});
  // Gradients through the permutation, first and second order.
  TensorFn f = [&](const auto& in) { return cross_entropy(in[0], targets, ClassAxis(1), -100, 0.1); };
  auto r1 = gradcheck(f, {logits}, {"cross_entropy ClassAxis(1)"});
  BOOST_TEST(r1.ok, r1.message);
  auto r2 = gradgradcheck(f, {logits}, {"cross_entropy ClassAxis(1)"});
  BOOST_TEST(r2.ok, r2.message);
}

// --- 5. slice is libtorch's slice(dim, start, end) ----------------------------------------

BOOST_AUTO_TEST_CASE(slice_takes_an_end_index_like_libtorch) {
  const Tensor x = arange(10, DType::Float64);
  BOOST_TEST(allclose(slice(x, 0, 2, 3), {2.0}, 0, 0));  // narrow(x, 0, 2, 3) is [2, 3, 4]
  BOOST_TEST(allclose(narrow(x, 0, 2, 3), {2.0, 3.0, 4.0}, 0, 0));
  BOOST_TEST(allclose(slice(x, 0, -3, 10), {7.0, 8.0, 9.0}, 0, 0));  // x[-3:]
  BOOST_TEST(allclose(slice(x, 0, 8), {8.0, 9.0}, 0, 0));            // end defaults to the end
  BOOST_TEST(allclose(slice(x, -1, 1, -7), {1.0, 2.0}, 0, 0));       // x[1:-7]
  BOOST_TEST(allclose(slice(x, 0, -20, 2), {0.0, 1.0}, 0, 0));       // clamped as Python slices
  BOOST_TEST(allclose(slice(x, 0, 8, 100), {8.0, 9.0}, 0, 0));
  BOOST_TEST(slice(x, 0, 5, 3).numel() == 0u);                       // end < start: empty
  BOOST_TEST(slice(x, 0, 12, 15).numel() == 0u);
  const Tensor m = randn64({3, 4}, 31);
  BOOST_TEST((slice(m, 1, 1, 3).shape() == Shape{3, 2}));
  BOOST_TEST(allclose(slice(m, 1, 1, 3), narrow(m, 1, 1, 2), 0, 0));
  expect_error([&] { slice(m, 2, 0, 1); }, "IndexError", {"slice", "axis 2", "(3, 4)"});
  TensorFn f = [](const auto& in) { return slice(in[0], 1, -3, -1); };
  auto r = gradcheck(f, {m}, {"slice"});
  BOOST_TEST(r.ok, r.message);
}

// --- 6. Embedding padding_idx, LayerNorm elementwise_affine -------------------------------

BOOST_AUTO_TEST_CASE(embedding_padding_idx_row_zero_and_frozen) {
  Rng rng(5);
  Embedding e(EmbeddingOptions(5, 3).padding_idx(-2), rng);
  BOOST_TEST(e.has_padding_idx);
  BOOST_TEST(e.padding_idx == 3u);
  for (double v : narrow(e.weight, 0, 3, 1).to_vector()) BOOST_TEST(v == 0.0);
  e.to(DType::Float64);
  e.weight = randn64({5, 3}, 41);  // a non-zero padding row is still looked up
  const Tensor idx = index_tensor({3, 1, 3, 0}, {2, 2});
  Rng rng2(5);
  Embedding plain(5, 3, rng2);
  plain.to(DType::Float64);
  plain.weight = e.weight;
  BOOST_TEST(allclose(e.forward(idx), plain.forward(idx), 0, 0));
  const Tensor up = randn64({2, 2, 3}, 42);
  const Tensor g = grad({sum(mul(e.forward(idx), up))}, {e.weight})[0];
  const Tensor gp = grad({sum(mul(plain.forward(idx), up))}, {plain.weight})[0];
  const auto gv = g.to_vector(), gpv = gp.to_vector();
  for (std::size_t i = 0; i < gv.size(); ++i) BOOST_TEST(gv[i] == (i / 3 == 3 ? 0.0 : gpv[i]), "at " << i);
  // With create_graph (the differentiable backward) the padding row's gradient is zero too.
  GradOptions cg;
  cg.create_graph = true;
  const Tensor g1 = grad({sum(mul(e.forward(idx), up))}, {e.weight}, {}, cg)[0];
  BOOST_TEST(allclose(g1, g, 0, 0));
  // Without padding_idx nothing changed: N(0, 1) rows drawn as before.
  Rng a(9), b(9);
  BOOST_TEST(same_bits(Embedding(4, 2, a).weight, Embedding(EmbeddingOptions(4, 2), b).weight));
}

BOOST_AUTO_TEST_CASE(layer_norm_without_affine_has_no_parameters) {
  LayerNorm ln(LayerNormOptions(4).elementwise_affine(false));
  BOOST_TEST(ln.named_parameters().empty());
  BOOST_TEST(!ln.weight.defined());
  BOOST_TEST(!ln.bias.defined());
  // Hand-derived: x = (1, 2, 3, 4): mean 2.5, biased var 1.25.
  const Tensor x = f64({1, 2, 3, 4}, {1, 4});
  const double s = std::sqrt(1.25 + 1e-5);
  BOOST_TEST(allclose(ln.forward(x), {-1.5 / s, -0.5 / s, 0.5 / s, 1.5 / s}, 1e-14, 1e-14));
  TensorFn f = [&](const auto& in) { return ln.forward(in[0]); };
  const Tensor r = randn64({2, 3, 4}, 51);
  auto r1 = gradcheck(f, {r}, {"LayerNorm elementwise_affine=false"});
  BOOST_TEST(r1.ok, r1.message);
  auto r2 = gradgradcheck(f, {r}, {"LayerNorm elementwise_affine=false"});
  BOOST_TEST(r2.ok, r2.message);
}

BOOST_AUTO_TEST_SUITE_END()
