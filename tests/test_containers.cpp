// Sequential, ModuleList, Functional and operator() on modules: names (PyTorch's state_dict
// layout, checked against PyTorch fixtures), parameter counts, forward equal to composing by
// hand, a float64 gradcheck through a Sequential, modes and conversions through containers,
// typed access and errors.
#include <memory>

#include "expect_error.hpp"
#include "golden.hpp"
#include "helpers.hpp"
#include "xgrad/framework/registry.hpp"  // sample_randn
#include "xgrad/models/containers.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;
using test::same_bits;

namespace {

std::vector<std::string> names_of(const Module& m) {
  std::vector<std::string> out;
  for (const auto& [name, t] : m.named_parameters()) out.push_back(name);
  return out;
}

const std::string kFixtures = std::string(XGRAD_FIXTURE_DIR) + "/containers";

// An nn.Module holding nn.ModuleList "layers" of Linear(dim, dim) and a LayerNorm "norm":
// x = x + tanh(layer(x)) per layer, then norm(x) (tools/make_containers_fixtures.py).
struct Residual : Module {
  ModuleList layers;
  LayerNorm norm;
  Residual(std::size_t dim, std::size_t depth, Rng& rng) : norm(dim) {
    for (std::size_t i = 0; i < depth; ++i) layers.push_back(std::make_unique<Linear>(dim, dim, true, rng));
    register_module("layers", &layers);
    register_module("norm", &norm);
  }
  Tensor forward(const Tensor& x0) const {
    Tensor x = x0;
    for (const auto& layer : layers) x = add(x, tanh(static_cast<const Linear&>(*layer)(x)));
    return norm(x);
  }
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

// Loads the fixture's state_dict into `model` unchanged (same names), runs forward on "x"
// and compares the output and every gradient with PyTorch's.
template <class Model>
void check_against_torch(const std::string& fixture, Model& model) {
  test::Golden g(fixture, kFixtures);
  const NamedTensors torch_params = g.params();
  BOOST_TEST((test::names_of(model.named_parameters()) == test::names_of(torch_params)));
  model.load_parameters(torch_params);
  NamedTensors inputs{{"x", g.leaf("x")}};
  test::Deviation dev;
  Tensor out = model(inputs[0].second);
  test::compare("output", out, g.at("output"), dev);
  test::compare_grads(g, out, inputs, model.named_parameters(), dev);
  g.check_all_used();
  test::report(g, dev);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(containers)

BOOST_AUTO_TEST_CASE(operator_call_is_forward_for_every_module) {
  Rng rng(1);
  Tensor x = randn({2, 3, 4}, rng);
  Linear lin(4, 5, true, rng);
  LayerNorm ln(4);
  FeedForward ff(FeedForwardOptions(4, 8), rng);
  Dropout drop(0.0, 7);
  LearnedPositionalEncoding pos(3, 4, rng);
  SinusoidalPositionalEncoding sin_pos(3, 4);
  GELU gelu_tanh(GeluApproximation::Tanh);
  BOOST_TEST(same_bits(lin(x), lin.forward(x)));
  BOOST_TEST(same_bits(ln(x), ln.forward(x)));
  BOOST_TEST(same_bits(ff(x), ff.forward(x)));
  BOOST_TEST(same_bits(drop(x), x));
  BOOST_TEST(same_bits(pos(x), pos.forward(x)));
  BOOST_TEST(same_bits(sin_pos(x), sin_pos.forward(x)));
  BOOST_TEST(same_bits(ReLU()(x), relu(x)));
  BOOST_TEST(same_bits(gelu_tanh(x), gelu(x, GeluApproximation::Tanh)));
  BOOST_TEST(same_bits(GELU()(x), gelu(x)));
  BOOST_TEST(same_bits(Tanh()(x), tanh(x)));
  BOOST_TEST(same_bits(Sigmoid()(x), sigmoid(x)));
  Embedding emb(6, 4, rng);
  Tensor idx = index_tensor({0, 5, 2}, {3});
  BOOST_TEST(same_bits(emb(idx), emb.forward(idx)));

  MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2), rng);
  AttentionOptions causal;
  causal.is_causal = true;
  BOOST_TEST(same_bits(mha(x, causal).output, mha.forward(x, causal).output));
  BOOST_TEST(same_bits(mha(x, x, x).output, mha.forward(x, x, x).output));
  TransformerBlock block(TransformerBlockOptions(4, 2, 8), rng);
  BOOST_TEST(same_bits(block(x, causal), block.forward(x, causal)));
  TransformerConfig c;
  c.vocab_size = 6, c.max_len = 4, c.embed_dim = 4, c.num_heads = 2, c.ff_hidden = 8, c.num_layers = 1;
  TransformerEncoder enc(c);
  TransformerDecoder dec(c);
  Tensor tokens = index_tensor({1, 2, 3, 4, 5, 0}, {2, 3});
  BOOST_TEST(same_bits(enc(tokens), enc.forward(tokens)));
  BOOST_TEST(same_bits(dec(tokens), dec.forward(tokens)));
  BOOST_TEST(same_bits(enc.body(tokens, causal), enc.body.forward(tokens, causal)));
}

BOOST_AUTO_TEST_CASE(sequential_names_counts_and_forward_equal_to_composition) {
  Rng rng(2), rng2(2);
  Sequential mlp{std::make_unique<Linear>(4, 8, true, rng), std::make_unique<ReLU>(),
                 std::make_unique<Linear>(8, 3, true, rng)};
  BOOST_TEST(mlp.size() == 3u);
  BOOST_TEST((names_of(mlp) == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  BOOST_TEST(mlp.parameter_count() == 4u * 8 + 8 + 8 * 3 + 3);
  BOOST_TEST(mlp.name(1) == "1");
  // The same layers built one by one from the same seed: same values, so the braced list
  // was evaluated left to right.
  Linear fc1(4, 8, true, rng2), fc2(8, 3, true, rng2);
  BOOST_TEST(same_bits(mlp.at<Linear>(0).weight, fc1.weight));
  BOOST_TEST(same_bits(mlp.at<Linear>(2).bias, fc2.bias));
  Tensor x = randn({5, 4}, rng);
  BOOST_TEST(same_bits(mlp(x), fc2(relu(fc1(x)))));
  BOOST_TEST(same_bits(mlp.forward(x), mlp(x)));
  // Parameters are the layers' own tensors (not copies).
  BOOST_TEST(mlp.named_parameters()[0].second.impl() == mlp.at<Linear>(0).weight.impl());
}

BOOST_AUTO_TEST_CASE(sequential_push_back_names_functions_and_nesting) {
  Rng rng(3);
  Sequential seq;
  BOOST_TEST(seq.empty());
  Tensor x = randn({2, 4}, rng);
  BOOST_TEST(same_bits(seq(x), x));  // empty: identity, as torch.nn.Sequential
  Linear& fc1 = seq.push_back("fc1", std::make_unique<Linear>(4, 6, true, rng));
  seq.push_back("act", [](const Tensor& t) { return gelu(t, GeluApproximation::Tanh); });
  seq.push_back(relu);  // named "2"
  auto inner = std::make_unique<Sequential>();
  inner->push_back(std::make_unique<Linear>(6, 2, false, rng));
  inner->push_back(gelu);  // the one-argument overload of gelu, as a Functional
  Sequential& nested = seq.push_back("head", std::move(inner));
  BOOST_TEST((names_of(seq) == std::vector<std::string>{"fc1.weight", "fc1.bias", "head.0.weight"}));
  BOOST_TEST(seq.name(2) == "2");
  BOOST_TEST(&seq.at<Sequential>(3) == &nested);
  Tensor expect = gelu(nested.at<Linear>(0)(relu(gelu(fc1(x), GeluApproximation::Tanh))));
  BOOST_TEST(same_bits(seq(x), expect));
  // named_modules sees through: "", fc1, act, 2, head, head.0, head.1
  std::vector<std::string> mods;
  for (const auto& [name, m] : seq.named_modules()) mods.push_back(name);
  BOOST_TEST((mods == std::vector<std::string>{"", "fc1", "act", "2", "head", "head.0", "head.1"}));
  // A non-unary module with a one-tensor forward (default options): a TransformerBlock.
  Sequential blocks;
  auto& b0 = blocks.push_back(std::make_unique<TransformerBlock>(TransformerBlockOptions(4, 2, 8), rng));
  Tensor h = randn({2, 3, 4}, rng);
  BOOST_TEST(same_bits(blocks(h), b0(h)));
  BOOST_TEST(names_of(blocks).front() == "0.ln1.weight");
}

BOOST_AUTO_TEST_CASE(module_list_names_iteration_typed_access) {
  Rng rng(4);
  ModuleList list;
  Linear& a = list.push_back(std::make_unique<Linear>(3, 3, true, rng));
  list.push_back(std::make_unique<LayerNorm>(3));
  list.push_back(std::make_unique<Dropout>(0.5, 1));
  BOOST_TEST(list.size() == 3u);
  BOOST_TEST((names_of(list) == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"}));
  BOOST_TEST(&list.at<Linear>(0) == &a);
  BOOST_TEST(&list[1] == &list.at<LayerNorm>(1));
  std::size_t n = 0;
  for (const auto& m : list) n += m->parameter_count();
  BOOST_TEST(n == list.parameter_count());
  ModuleList braced{std::make_unique<Linear>(2, 2, false, rng), std::make_unique<ReLU>()};
  BOOST_TEST(braced.size() == 2u);
  BOOST_TEST((names_of(braced) == std::vector<std::string>{"0.weight"}));
}

BOOST_AUTO_TEST_CASE(train_eval_to_zero_grad_and_load_through_containers) {
  Rng rng(5);
  Residual net(3, 2, rng);
  Sequential seq{std::make_unique<Linear>(3, 3, true, rng), std::make_unique<Dropout>(0.5, 9)};
  BOOST_TEST(seq[1].training());
  seq.eval();
  BOOST_TEST(!seq[1].training());
  BOOST_TEST(!seq.at<Linear>(0).training());
  Tensor x = randn({4, 3}, rng);
  BOOST_TEST(same_bits(seq(x), seq.at<Linear>(0)(x)));  // dropout off in eval mode
  seq.train();
  BOOST_TEST(seq[1].training());
  net.eval();
  for (const auto& m : net.layers) BOOST_TEST(!m->training());
  // to(Float64) converts the parameters held in the list, in place.
  Tensor w = net.layers.at<Linear>(1).weight;
  net.to(DType::Float64);
  BOOST_TEST(w.dtype() == DType::Float64);
  BOOST_TEST(net.layers.at<Linear>(0).bias.dtype() == DType::Float64);
  BOOST_TEST(net.norm.weight.dtype() == DType::Float64);
  // zero_grad reaches them too.
  sum(net(randn({2, 3}, rng, DType::Float64))).backward();
  BOOST_TEST(net.layers.at<Linear>(0).weight.grad().defined());
  net.zero_grad();
  BOOST_TEST(!net.layers.at<Linear>(0).weight.grad().defined());
  // load_parameters by the container names.
  NamedTensors src = net.named_parameters();
  Residual other(3, 2, rng);
  other.to(DType::Float64);
  other.load_parameters(src);
  Tensor y = randn({2, 3}, rng, DType::Float64);
  BOOST_TEST(same_bits(other(y), net(y)));
}

// Gradients through a Sequential (Linear, GELU tanh, LayerNorm, Linear) in float64, with
// respect to the input and every parameter.
BOOST_AUTO_TEST_CASE(sequential_gradcheck_float64) {
  Rng rng(6);
  Sequential seq{std::make_unique<Linear>(3, 4, true, rng), std::make_unique<GELU>(GeluApproximation::Tanh),
                 std::make_unique<LayerNorm>(4), std::make_unique<Linear>(4, 2, true, rng)};
  seq.to(DType::Float64);
  seq.at<LayerNorm>(2).weight.mutable_data<double>()[1] = 1.5;
  seq.at<LayerNorm>(2).bias.mutable_data<double>()[0] = -0.25;
  Tensor x = sample_randn({2, 3}, rng);
  auto f = test::with_params(seq, 1, [&](const auto& in) { return seq(in[0]); });
  auto r = gradcheck(f, test::inputs_and_params({x}, seq), {"Sequential"});
  BOOST_TEST(r.ok, r.message);
  auto r2 = gradgradcheck(f, test::inputs_and_params({x}, seq), test::model_check_options("Sequential"));
  BOOST_TEST(r2.ok, r2.message);
}

// PyTorch's state_dicts load unchanged and give PyTorch's outputs and gradients.
BOOST_AUTO_TEST_CASE(torch_sequential_state_dict_loads_unchanged) {
  Rng rng(7);
  Sequential mlp{std::make_unique<Linear>(4, 8, true, rng), std::make_unique<ReLU>(),
                 std::make_unique<Linear>(8, 3, true, rng)};
  check_against_torch("sequential_mlp", mlp);
}

BOOST_AUTO_TEST_CASE(torch_named_sequential_state_dict_loads_unchanged) {
  Rng rng(8);
  Sequential seq;
  seq.push_back("fc1", std::make_unique<Linear>(4, 6, true, rng));
  seq.push_back("act", std::make_unique<GELU>(GeluApproximation::Tanh));
  seq.push_back("norm", std::make_unique<LayerNorm>(6));
  seq.push_back("drop", std::make_unique<Dropout>(0.0, 1));
  seq.push_back("fc2", std::make_unique<Linear>(6, 3, false, rng));
  check_against_torch("sequential_named", seq);
}

BOOST_AUTO_TEST_CASE(torch_module_list_state_dict_loads_unchanged) {
  Rng rng(9);
  Residual net(4, 3, rng);
  check_against_torch("module_list", net);
}

BOOST_AUTO_TEST_CASE(errors) {
  Rng rng(10);
  Sequential seq;
  seq.push_back("fc", std::make_unique<Linear>(2, 2, true, rng));
  test::expect_error<ValueError>([&] { seq.push_back("fc", std::make_unique<ReLU>()); }, {"Sequential", "'fc'", "taken"});
  test::expect_error<ValueError>([&] { seq.push_back("a.b", std::make_unique<ReLU>()); }, {"Sequential", "'a.b'", "'.'"});
  test::expect_error<ValueError>([&] { seq.push_back("", std::make_unique<ReLU>()); }, {"Sequential", "non-empty"});
  test::expect_error<ValueError>([&] { seq.push_back(std::unique_ptr<Linear>()); }, {"Sequential", "'1'", "null"});
  BOOST_TEST(seq.size() == 1u);  // nothing was added by the failed calls
  BOOST_TEST((names_of(seq) == std::vector<std::string>{"fc.weight", "fc.bias"}));
  test::expect_error<IndexError>([&] { (void)seq[1]; }, {"Sequential", "index 1", "1 module"});
  test::expect_error<IndexError>([&] { seq.name(3); }, {"Sequential", "index 3"});
  test::expect_error<ValueError>([&] { seq.at<LayerNorm>(0); }, {"Sequential", "module 0 ('fc')", "Linear", "LayerNorm"});
  ModuleList list;
  list.push_back(std::make_unique<ReLU>());
  test::expect_error<IndexError>([&] { (void)list[2]; }, {"ModuleList", "index 2", "1 module"});
  test::expect_error<ValueError>([&] { list.at<Linear>(0); }, {"ModuleList", "module 0", "ReLU", "Linear"});
  test::expect_error<ValueError>([&] { list.push_back(std::unique_ptr<ReLU>()); }, {"ModuleList", "null"});
  BOOST_TEST(list.size() == 1u);
  test::expect_error<ValueError>([] {
    const Functional empty{Functional::Fn()};
    empty(scalar(1.0));
  }, {"Functional", "empty"});
  // Shape errors inside a layer reach the caller with the layer's message.
  test::expect_error<ShapeError>([&] { seq(zeros({2, 3})); }, {"linear", "(2, 3)"});
}

BOOST_AUTO_TEST_SUITE_END()
