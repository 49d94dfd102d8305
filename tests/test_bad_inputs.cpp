// Bad inputs, table-driven: every case is {name, callable, expected exception type,
// substrings the message must contain, and optionally a fingerprint of the state the call
// must leave untouched}. The runner checks the exception's type, every substring (op or
// function name, argument name, shapes), and, for stateful cases, that the fingerprint
// (raw bytes of every parameter, optimizer state and step counts) is bit-identical before and
// after the failed call: a rejected optimizer step or a failed load changes nothing.
#include <sys/stat.h>  // mkfifo
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "xgrad/framework/array.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/checkpoint.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/models/loss.hpp"
#include "xgrad/models/module.hpp"
#include "xgrad/models/optim.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/compare.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/random.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;
using test::st_file;
using test::TmpDir;
namespace fs = std::filesystem;

namespace {

// --- tensors ---------------------------------------------------------------------------------

Tensor f32(const Shape& s) {  // float32 filled with 1, 2, 3, ...
  std::vector<double> v(numel(s));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i + 1);
  return tensor(v, s, DType::Float32);
}
Tensor f64(const Shape& s) { return f32(s).to(DType::Float64).clone(); }
Tensor bools(const Shape& s) { return bool_tensor(std::vector<bool>(numel(s), false), s); }
Tensor ints(const std::vector<std::int64_t>& v, const Shape& s) { return index_tensor(v, s); }

// --- state fingerprints (bit-exact) ------------------------------------------------------------

std::string fingerprint(const NamedTensors& ts) {
  std::string s;
  for (const auto& [name, t] : ts) {
    s += name + "|" + dtype_name(t.dtype()) + shape_str(t.shape()) + "|";
    if (t.defined() && t.nbytes()) s.append(static_cast<const char*>(t.raw_data()), t.nbytes());
    s += "\n";
  }
  return s;
}
// Parameters (values, and whether a grad is present) of a module.
std::string fingerprint(const Module& m) {
  std::string s = fingerprint(m.named_parameters());
  for (const auto& [n, p] : m.named_parameters()) s += p.grad().defined() ? "g" : "-";
  return s;
}
std::string fingerprint(const Optimizer& o) {
  return "steps=" + std::to_string(o.steps()) + " lr=" + std::to_string(o.lr) + "\n" +
         fingerprint(o.state_dict());
}

// --- files -------------------------------------------------------------------------------------


// --- models -------------------------------------------------------------------------------------

// w (2, 3) and b (3), float32.
struct Small : Module {
  Tensor w, b;
  explicit Small(double shift = 0)
      : w(tensor({1 + shift, 2, 3, 4, 5, 6 - shift}, {2, 3})), b(tensor({0.5, -0.5 + shift, 0.25}, {3})) {
    register_parameter("w", &w);
    register_parameter("b", &b);
  }
};

// --- the table -----------------------------------------------------------------------------------

struct Case {
  std::string name;
  std::function<void()> call;
  std::string expected;                 // "ShapeError", "DTypeError", ...
  std::vector<std::string> parts;       // substrings of what()
  std::function<std::string()> state;   // optional: must be equal before and after
};

}  // namespace

BOOST_AUTO_TEST_SUITE(bad_inputs)

BOOST_AUTO_TEST_CASE(table) {
  Rng rng(7);
  TmpDir dir;
  std::vector<Case> cases;
  auto push = [&](std::string name, std::function<void()> call, std::string type,
                 std::vector<std::string> parts, std::function<std::string()> state = nullptr) {
    cases.push_back({std::move(name), std::move(call), std::move(type), std::move(parts), std::move(state)});
  };

  // ===== ops: shapes, ranks, dtypes, axes, indices, masks =======================================
  push("add: shapes not broadcastable", [] { add(f64({2, 3}), f64({4})); }, "ShapeError",
      {"add", "'a'", "'b'", "(2, 3)", "(4)"});
  push("matmul: inner dims differ", [] { matmul(f64({2, 5}), f64({3, 4})); }, "ShapeError",
      {"matmul", "'a'", "'b'", "(2, 5)", "(3, 4)"});
  push("matmul: rank-0 operand", [] { matmul(scalar(2, DType::Float64), f64({2, 2})); }, "ShapeError",
      {"matmul", "'a'", "()"});
  push("matmul: batch dims not broadcastable", [] { matmul(f64({2, 3, 4}), f64({3, 4, 5})); }, "ShapeError",
      {"matmul", "(2, 3, 4)", "(3, 4, 5)"});
  push("linear: bias of wrong size", [] { linear(f64({2, 4}), f64({3, 4}), f64({4})); }, "ShapeError",
      {"linear", "'bias'", "(4)"});
  push("linear: weight of rank 1", [] { linear(f64({2, 4}), f64({3})); }, "ShapeError",
      {"linear", "'weight'", "(3)"});
  push("mul: float32 with float64", [] { mul(f32({2, 3}), f64({2, 3})); }, "DTypeError",
      {"mul", "float32", "float64"});
  push("exp: bool input", [] { exp(bools({2, 3})); }, "DTypeError", {"exp", "'x'", "bool", "(2, 3)"});
  push("softmax: int64 input", [] { softmax(ints({1, 2, 3}, {3})); }, "DTypeError",
      {"softmax", "'x'", "int64", "(3)"});
  push("sum: axis out of range", [] { sum(f64({2, 3}), {2}); }, "IndexError", {"sum", "axis 2", "(2, 3)"});
  push("log_softmax: negative axis out of range", [] { log_softmax(f64({2, 3}), -3); }, "IndexError",
      {"log_softmax", "axis -3", "(2, 3)"});
  push("transpose: axis out of range", [] { transpose(f64({2, 3}), 0, 2); }, "IndexError",
      {"transpose", "axis 2", "(2, 3)"});
  push("mean: axis given twice", [] { mean(f64({2, 3}), {0, 0}); }, "ValueError", {"mean", "axis 0"});
  push("reshape: element count differs", [] { reshape(f64({2, 3}), {4, 2}); }, "ShapeError",
      {"reshape", "'x'", "(2, 3)", "(4, 2)"});
  push("permute: not a permutation", [] { permute(f64({2, 3}), {0, 0}); }, "ValueError",
      {"permute", "'x'", "(2, 3)", "(0, 0)"});
  push("narrow: range beyond the axis", [] { narrow(f64({2, 4}), 1, 3, 2); }, "IndexError",
      {"narrow", "'x'", "(2, 4)", "[3, 5)"});
  push("concat: shapes disagree off-axis", [] { concat({f64({2, 3}), f64({3, 3})}, 1); }, "ShapeError",
      {"concat", "xs[1]", "(2, 3)", "(3, 3)"});
  push("split: sizes do not add up", [] { split(f64({2, 4}), {1, 2}, 1); }, "ShapeError",
      {"split", "'x'", "(2, 4)", "(1, 2)"});
  push("chunk: not divisible", [] { chunk(f64({2, 5}), 2, 1); }, "ShapeError", {"chunk", "'x'", "(2, 5)"});
  push("squeeze: axis of size 3", [] { squeeze(f64({2, 3}), 1); }, "ShapeError",
      {"squeeze", "'x'", "(2, 3)", "axis 1"});
  push("broadcast_to: incompatible target", [] { broadcast_to(f64({3}), {2, 4}); }, "ShapeError",
      {"broadcast_to", "(3)", "(2, 4)"});
  push("embedding: index past the end", [] { embedding(f64({5, 2}), ints({1, 7}, {2})); }, "IndexError",
      {"embedding", "index 7", "'indices'", "(2)", "5 rows"});
  push("embedding: negative index", [] { embedding(f64({5, 2}), ints({-1}, {1})); }, "IndexError",
      {"embedding", "index -1", "'indices'"});
  push("embedding: float indices", [] { embedding(f64({5, 2}), f32({2})); }, "DTypeError",
      {"embedding", "'indices'", "int64", "float32"});
  push("embedding: weight of rank 1", [] { embedding(f64({5}), ints({0}, {1})); }, "ShapeError",
      {"embedding", "'weight'", "(5)"});
  push("one_hot: index >= num_classes", [] { one_hot(ints({0, 3}, {2}), 3); }, "IndexError",
      {"one_hot", "index 3", "'indices'", "3 classes"});
  push("masked_fill: float mask", [] { masked_fill(f64({2, 3}), f32({2, 3}), 0.0); }, "DTypeError",
      {"masked_fill", "'mask'", "float32", "(2, 3)"});
  push("masked_fill: mask not broadcastable", [] { masked_fill(f64({2, 3}), bools({4}), 0.0); }, "ShapeError",
      {"masked_fill", "'mask'", "(4)", "(2, 3)"});
  push("masked_softmax: mask shape", [] { masked_softmax(f64({2, 3, 4}), bools({3, 5})); }, "ShapeError",
      {"masked_softmax", "'mask'", "(3, 5)", "(2, 3, 4)"});
  push("where: float condition", [] { where(f64({2, 3}), f64({2, 3}), f64({2, 3})); }, "DTypeError",
      {"where", "'cond'", "float64"});
  push("logical_or: shapes", [] { logical_or(bools({2, 3}), bools({3, 2})); }, "ShapeError",
      {"logical_or", "(2, 3)", "(3, 2)"});
  // selection, indexing and sampling (tests/test_select_ops.cpp has more of them)
  push("lt: mixed dtypes", [] { lt(f32({2}), f64({2})); }, "DTypeError", {"lt", "'a'", "float32", "'b'", "float64"});
  push("eq: shapes not broadcastable", [] { eq(f64({2, 3}), f64({2})); }, "ShapeError", {"eq", "(2, 3)", "(2)"});
  push("clamp: no bound", [] { clamp(f64({2}), std::nullopt, std::nullopt); }, "ValueError", {"clamp", "'min'", "'max'"});
  push("clamp: NaN bound", [] { clamp(f64({2}), std::nan(""), 1.0); }, "ValueError", {"clamp", "'min'", "NaN"});
  push("maximum: float32 with float64", [] { maximum(f32({2}), f64({2})); }, "DTypeError", {"maximum", "float32", "float64"});
  push("argmax: empty axis", [] { argmax(f64({2, 0}), 1); }, "ShapeError", {"argmax", "'x'", "(2, 0)", "axis 1"});
  push("argmax: bool input", [] { argmax(bools({3}), 0); }, "DTypeError", {"argmax", "'x'", "bool"});
  push("argmax: axis of a rank-0 input", [] { argmax(scalar(1, DType::Float64), 1); }, "IndexError",
      {"argmax", "axis 1", "'x'", "shape ()", "rank 0"});
  push("cumsum: axis of a rank-0 input", [] { cumsum(scalar(1, DType::Float64), -2); }, "IndexError",
      {"cumsum", "axis -2", "'x'", "shape ()"});
  push("topk: k larger than the axis", [] { topk(f64({2, 3}), 4); }, "ValueError",
      {"topk", "k = 4", "size 3", "'x'", "(2, 3)"});
  push("gather: index out of range", [] { gather(f64({2, 3}), 1, ints({0, 3}, {1, 2})); }, "IndexError",
      {"gather", "index 3", "position (0, 1)", "'index' (1, 2)", "axis 1", "'x' (2, 3)"});
  push("gather: negative index", [] { gather(f64({2, 3}), 0, ints({-1}, {1, 1})); }, "IndexError",
      {"gather", "index -1", "position (0, 0)"});
  push("gather: index of another rank", [] { gather(f64({2, 3}), 1, ints({0}, {1})); }, "ShapeError",
      {"gather", "'index' (1)", "'x' (2, 3)"});
  push("scatter_add: src shape differs from index", [] { scatter_add(f64({2, 3}), 1, ints({0, 1}, {1, 2}), f64({2, 2})); },
      "ShapeError", {"scatter_add", "'src' (2, 2)", "'index' (1, 2)"});
  push("index_select: 2-D index", [] { index_select(f64({2, 3}), 1, ints({0, 1}, {1, 2})); }, "ShapeError",
      {"index_select", "'index' (1, 2)"});
  push("index_add: index past the end", [] { index_add(f64({2, 3}), 0, ints({2}, {1}), f64({1, 3})); }, "IndexError",
      {"index_add", "index 2", "axis 0", "'x' (2, 3)"});
  push("logsumexp: int64 input", [] { logsumexp(ints({1, 2}, {2}), {0}); }, "DTypeError", {"logsumexp", "'x'", "int64"});
  push("cumsum: axis out of range", [] { cumsum(f64({2, 3}), 2); }, "IndexError", {"cumsum", "axis 2", "(2, 3)"});
  push("arange: step 0", [] { arange(0.0, 1.0, 0.0); }, "ValueError", {"arange", "step"});
  push("arange: step away from end", [] { arange(5.0, 0.0, 1.0); }, "ValueError", {"arange", "step 1", "start 5", "end 0"});
  push("arange: more than 2^40 elements", [] { arange(0.0, 1e15, 1.0); }, "ValueError", {"arange", "2^40"});
  // Sampling errors are raised before the first draw: the generator's state is unchanged.
  auto sample_rng = std::make_shared<Rng>(3);
  auto rng_state = [sample_rng] { return std::to_string(Rng(*sample_rng)()); };  // its next output
  push("randint: low >= high", [sample_rng] { randint(2, 2, {3}, *sample_rng); }, "ValueError",
      {"randint", "low = 2", "high = 2"}, rng_state);
  push("multinomial: a row of zeros", [sample_rng] {
        multinomial(tensor({1, 1, 0, 0}, {2, 2}, DType::Float64), 1, true, *sample_rng);
      }, "ValueError", {"multinomial", "row 1", "'weights' (2, 2)", "sums to 0"}, rng_state);
  push("multinomial: negative weight in the second row", [sample_rng] {
        multinomial(tensor({1, 1, 2, -1}, {2, 2}, DType::Float64), 1, true, *sample_rng);
      }, "ValueError", {"multinomial", "row 1", "weight -1", "class 1"}, rng_state);
  push("multinomial: too few classes without replacement", [sample_rng] {
        multinomial(tensor({1, 0, 2}, {3}, DType::Float64), 3, false, *sample_rng);
      }, "ValueError", {"multinomial", "3 distinct samples", "row 0", "2 non-zero"}, rng_state);
  push("sample_categorical: temperature 0", [sample_rng] { sample_categorical(f64({2, 3}), *sample_rng, 0.0); },
      "ValueError", {"sample_categorical", "temperature", "argmax"}, rng_state);
  push("sample_categorical: a row of -inf", [sample_rng] {
        sample_categorical(tensor({1, 2, -INFINITY, -INFINITY}, {2, 2}, DType::Float64), *sample_rng);
      }, "ValueError", {"sample_categorical", "row 1", "'logits' (2, 2)"}, rng_state);
  push("patchify: patch does not divide the image", [] { patchify(f64({1, 1, 5, 4}), 2); }, "ValueError",
      {"patchify", "patch size 2", "height 5", "(1, 1, 5, 4)"});
  push("cross_entropy: float targets", [] { cross_entropy(f64({2, 3}), f64({2})); }, "DTypeError",
      {"cross_entropy", "'targets'", "int64", "float64"});
  push("cross_entropy: target out of range", [] { cross_entropy(f64({2, 3}), ints({0, 7}, {2})); }, "IndexError",
      {"cross_entropy", "target 7", "3 classes"});
  push("cross_entropy: logits rank", [] { cross_entropy(f64({2, 3}), ints({0, 1, 2, 0}, {2, 2})); }, "ShapeError",
      {"cross_entropy", "'logits'", "(2, 3)", "(2, 2)"});
  push("mse_loss: shapes differ", [] { mse_loss(f64({2, 3}), f64({3, 2})); }, "ShapeError",
      {"mse_loss", "'a'", "'b'", "(2, 3)", "(3, 2)"});
  push("backward: non-scalar without grad_output",
      [] {
        Tensor x = f64({2, 3});
        x.set_requires_grad();
        mul(x, x).backward();
      },
      "ShapeError", {"backward", "(2, 3)"});
  push("backward: second time through a freed graph",
      [] {
        Tensor x = f64({2, 3});
        x.set_requires_grad();
        Tensor y = sum(exp(x));
        y.backward();
        y.backward();
      },
      "GraphError", {"backward", "retain_graph"});
  push("item: multi-element tensor", [] { f64({2, 3}).item(); }, "ShapeError", {"item", "(2, 3)"});

  // set_grad with a gradient of the wrong shape / dtype: rejected, .grad unchanged.
  auto held = std::make_shared<Small>();
  held->w.set_grad(full({2, 3}, 0.125));
  push("set_grad: gradient of the wrong shape", [held] { held->w.set_grad(f32({3, 2})); }, "ShapeError",
      {"set_grad", "(3, 2)", "(2, 3)"}, [held] { return fingerprint(NamedTensors{{"g", held->w.grad()}}); });
  // errors.hpp: DTypeError is for "wrong or mixed dtypes" (backward's grad_output does so).
  push("set_grad: gradient of the wrong dtype", [held] { held->w.set_grad(f64({2, 3})); }, "DTypeError",
      {"set_grad", "float64", "float32", "(2, 3)"},
      [held] { return fingerprint(NamedTensors{{"g", held->w.grad()}}); });

  // ===== modules ========================================================================================
  auto mha = std::make_shared<MultiHeadAttention>(MultiHeadAttentionOptions(8, 2), rng);
  auto mha_state = [mha] { return fingerprint(*mha); };
  push("MultiHeadAttention: query of the wrong embed dim", [mha] { mha->forward(f32({2, 3, 5})); }, "ShapeError",
      {"MultiHeadAttention", "query (2, 3, 5)", "(B, T, 8)"}, mha_state);
  push("MultiHeadAttention: unbatched query, batched key",
      [mha] { mha->forward(f32({3, 8}), f32({2, 3, 8}), f32({2, 3, 8})); }, "ShapeError",
      {"MultiHeadAttention", "(B, L, features)", "(L, features)", "query (3, 8)", "key (2, 3, 8)"}, mha_state);
  push("MultiHeadAttention: key batch differs from query's",
      [mha] { mha->forward(f32({2, 3, 8}), f32({1, 4, 8}), f32({1, 4, 8})); }, "ShapeError",
      {"MultiHeadAttention", "query (2, 3, 8)", "key (1, 4, 8)"}, mha_state);
  push("MultiHeadAttention: key and value lengths differ",
      [mha] { mha->forward(f32({2, 3, 8}), f32({2, 4, 8}), f32({2, 5, 8})); }, "ShapeError",
      {"MultiHeadAttention", "key (2, 4, 8)", "value (2, 5, 8)"}, mha_state);
  push("MultiHeadAttention: attn_mask of the wrong shape",
      [mha] {
        AttentionOptions o;
        o.attn_mask = bools({3, 4});
        mha->forward(f32({2, 3, 8}), o);
      },
      "ShapeError", {"MultiHeadAttention", "'attn_mask'", "(3, 4)", "(3, 3)", "(2, 2, 3, 3)"}, mha_state);
  push("MultiHeadAttention: int64 attn_mask",
      [mha] {
        AttentionOptions o;
        o.attn_mask = ints(std::vector<std::int64_t>(9, 0), {3, 3});
        mha->forward(f32({2, 3, 8}), o);
      },
      "DTypeError", {"MultiHeadAttention", "'attn_mask'", "int64"}, mha_state);
  push("MultiHeadAttention: float64 attn_mask with float32 inputs",
      [mha] {
        AttentionOptions o;
        o.attn_mask = f64({3, 3});
        mha->forward(f32({2, 3, 8}), o);
      },
      "DTypeError", {"MultiHeadAttention", "'attn_mask'", "float64", "float32"}, mha_state);
  push("MultiHeadAttention: key_padding_mask of the wrong shape",
      [mha] {
        AttentionOptions o;
        o.key_padding_mask = bools({3, 2});
        mha->forward(f32({2, 3, 8}), o);
      },
      "ShapeError", {"MultiHeadAttention", "'key_padding_mask'", "(3, 2)", "(2, 3)"}, mha_state);
  push("MultiHeadAttention: float64 key_padding_mask with float32 inputs",
      [mha] {
        AttentionOptions o;
        o.key_padding_mask = f64({2, 3});
        mha->forward(f32({2, 3, 8}), o);
      },
      "DTypeError", {"MultiHeadAttention", "'key_padding_mask'", "float64", "float32"}, mha_state);
  push("MultiHeadAttention: int64 query", [mha] { mha->forward(ints(std::vector<std::int64_t>(48, 0), {2, 3, 8})); },
      "DTypeError", {"MultiHeadAttention", "'query'", "int64", "(2, 3, 8)"}, mha_state);
  push("MultiHeadAttention: float64 query, float32 parameters", [mha] { mha->forward(f64({2, 3, 8})); },
      "DTypeError", {"MultiHeadAttention", "'query'", "float64", "float32"}, mha_state);
  push("MultiHeadAttention: embed_dim not divisible by num_heads",
      [] {
        Rng r(0);
        MultiHeadAttention bad(MultiHeadAttentionOptions(10, 3), r);
      },
      "ValueError", {"MultiHeadAttention", "embed_dim 10", "num_heads 3"});

  auto emb = std::make_shared<Embedding>(11, 4, rng);
  push("Embedding: index out of range", [emb] { emb->forward(ints({3, 11, 0}, {3})); }, "IndexError",
      {"embedding", "index 11", "'indices'", "11 rows"}, [emb] { return fingerprint(*emb); });
  auto ln = std::make_shared<LayerNorm>(4);
  push("LayerNorm: last dim differs from the layer's", [ln] { ln->forward(f32({2, 3, 5})); }, "ShapeError",
      {"layer_norm", "'x'", "(2, 3, 5)", "(4)"}, [ln] { return fingerprint(*ln); });

  TransformerConfig tcfg;
  tcfg.vocab_size = 11, tcfg.max_len = 6, tcfg.embed_dim = 8, tcfg.num_heads = 2, tcfg.ff_hidden = 16;
  tcfg.num_layers = 1;
  auto enc = std::make_shared<TransformerEncoder>(tcfg);
  auto enc_state = [enc] { return fingerprint(*enc); };
  push("TransformerEncoder: tokens of rank 3",
      [enc] { enc->forward(ints(std::vector<std::int64_t>(6, 1), {2, 3, 1})); }, "ShapeError",
      {"Transformer", "'tokens'", "(2, 3, 1)"}, enc_state);
  push("TransformerEncoder: float tokens", [enc] { enc->forward(f32({2, 3})); }, "DTypeError",
      {"'tokens'", "int64", "float32"}, enc_state);
  push("TransformerEncoder: sequence longer than max_len",
      [enc] { enc->forward(ints(std::vector<std::int64_t>(14, 1), {2, 7})); }, "ShapeError",
      {"PositionalEncoding", "T <= 6", "(2, 7, 8)"}, enc_state);
  push("TransformerEncoder: token id >= vocab_size",
      [enc] { enc->forward(ints({1, 2, 11}, {1, 3})); }, "IndexError",
      {"embedding", "index 11", "11 rows"}, enc_state);
  push("TransformerEncoder: padding mask of the wrong shape",
      [enc] { enc->forward(ints({1, 2, 3, 4, 5, 6}, {2, 3}), bools({2, 4})); }, "ShapeError",
      {"'key_padding_mask'", "(2, 4)", "(2, 3)"}, enc_state);

  auto small = std::make_shared<Small>();
  auto small_state = [small] { return fingerprint(*small); };
  push("load_parameters: missing parameter",
      [small] { small->load_parameters({{"w", f32({2, 3}) * 9.0}}); }, "ValueError",
      {"load_parameters", "missing", "'b'"}, small_state);
  push("load_parameters: unexpected parameter",
      [small] { small->load_parameters({{"w", f32({2, 3})}, {"b", f32({3})}, {"extra", f32({1})}}); }, "ValueError",
      {"load_parameters", "unexpected", "'extra'"}, small_state);
  push("load_parameters: wrong shape (after a good one)",
      [small] { small->load_parameters({{"w", f32({2, 3}) * 9.0}, {"b", f32({4})}}); }, "ShapeError",
      {"load_parameters", "'b'", "(4)", "(3)"}, small_state);
  push("load_parameters: int64 tensor",
      [small] { small->load_parameters({{"w", ints({1, 2, 3, 4, 5, 6}, {2, 3})}, {"b", f32({3})}}); }, "DTypeError",
      {"load_parameters", "'w'"}, small_state);

  // ===== optimizers ===================================================================================
  // Each optimizer has already taken a step, so that its state is not trivially empty.
  auto sgd_model = std::make_shared<Small>();
  auto sgd = std::make_shared<SGD>(sgd_model->named_parameters(), SGDOptions(0.1).momentum(0.9));
  sgd_model->w.set_grad(full({2, 3}, 0.5));
  sgd_model->b.set_grad(full({3}, -0.5));
  sgd->step();
  auto sgd_state = [sgd_model, sgd] { return fingerprint(*sgd_model) + fingerprint(*sgd); };

  auto adam_model = std::make_shared<Small>();
  auto adam = std::make_shared<AdamW>(adam_model->named_parameters(), 1e-2);
  adam_model->w.set_grad(full({2, 3}, 0.5));
  adam_model->b.set_grad(full({3}, -0.25));
  adam->step();
  auto adam_state = [adam_model, adam] { return fingerprint(*adam_model) + fingerprint(*adam); };

  push("SGD::step: NaN in the second parameter's gradient",
      [sgd_model, sgd] {
        sgd_model->w.set_grad(full({2, 3}, 1.0));  // valid: must not be applied either
        sgd_model->b.set_grad(tensor({0, std::nan(""), 0}, {3}));
        sgd->step();
      },
      "ValueError", {"SGD::step", "'b'", "(3)", "non-finite", "flat index 1", "nothing was updated"},
      sgd_state);
  push("AdamW::step: inf gradient",
      [adam_model, adam] {
        adam_model->w.set_grad(full({2, 3}, 1.0));
        adam_model->b.set_grad(tensor({0, 0, std::numeric_limits<double>::infinity()}, {3}));
        adam->step();
      },
      "ValueError", {"AdamW::step", "'b'", "inf", "flat index 2"}, adam_state);
  push("AdamW::step: gradient of the wrong shape (installed behind set_grad's back)",
      [adam_model, adam] {
        adam_model->w.set_grad(full({2, 3}, 1.0));
        adam_model->b.impl()->grad = f32({4});  // simulates a buggy op / user code
        adam->step();
      },
      "ShapeError", {"AdamW::step", "'b'", "(4)", "(3)", "nothing was updated"}, adam_state);
  push("AdamW::step: gradient of the wrong dtype (installed behind set_grad's back)",
      [adam_model, adam] {
        adam_model->w.set_grad(full({2, 3}, 1.0));
        adam_model->b.impl()->grad = f64({3});
        adam->step();
      },
      "DTypeError", {"AdamW::step", "'b'", "float64", "float32"}, adam_state);
  push("AdamW::step: lr set negative between steps",
      [adam_model, adam] {
        adam_model->w.set_grad(full({2, 3}, 1.0));
        adam_model->b.set_grad(full({3}, 1.0));
        const double keep = adam->lr;
        adam->lr = -1e-3;
        try {
          adam->step();
        } catch (...) {
          adam->lr = keep;
          throw;
        }
        adam->lr = keep;
      },
      "ValueError", {"AdamW", "lr", "-0.001"}, adam_state);
  push("SGD::step: lr NaN",
      [sgd_model, sgd] {
        sgd_model->w.set_grad(full({2, 3}, 1.0));
        const double keep = sgd->lr;
        sgd->lr = std::nan("");
        try {
          sgd->step();
        } catch (...) {
          sgd->lr = keep;
          throw;
        }
        sgd->lr = keep;
      },
      "ValueError", {"SGD", "lr", "nan"}, sgd_state);
  push("SGD: negative lr", [small] { SGD o(small->named_parameters(), -0.1); }, "ValueError",
      {"SGD", "lr", "-0.1"});
  push("Adam: beta1 = 1", [small] { Adam o(small->named_parameters(), AdamOptions(1e-3).betas(1.0, 0.999)); }, "ValueError",
      {"Adam", "beta1", "[0, 1)", "1"});
  push("AdamW: negative beta2", [small] { AdamW o(small->named_parameters(), AdamWOptions(1e-3).betas(0.9, -0.5)); }, "ValueError",
      {"AdamW", "beta2", "-0.5"});
  push("Adam: negative eps", [small] { Adam o(small->named_parameters(), AdamOptions(1e-3).betas(0.9, 0.999).eps(-1e-8)); }, "ValueError",
      {"Adam", "eps", "-1e-08"});
  push("SGD: nesterov without momentum", [small] { SGD o(small->named_parameters(), SGDOptions(0.1).momentum(0.0).dampening(0.0).weight_decay(0.0).nesterov(true)); },
      "ValueError", {"SGD", "nesterov", "momentum", "0"});
  push("SGD: negative momentum", [small] { SGD o(small->named_parameters(), SGDOptions(0.1).momentum(-0.5)); }, "ValueError",
      {"SGD", "momentum", "-0.5"});
  push("Optimizer: duplicate parameter names",
      [small] { SGD o({{"w", small->w}, {"w", small->b}}, 0.1); }, "ValueError", {"Optimizer", "'w'", "more than once"});
  push("Optimizer: int64 parameter", [] { SGD o({{"idx", ints({1, 2}, {2})}}, 0.1); }, "DTypeError",
      {"Optimizer", "'idx'", "int64", "(2)"});
  push("clip_grad_norm: negative max_norm", [small] { clip_grad_norm(small->parameters(), -1.0); }, "ValueError",
      {"clip_grad_norm", "max_norm", "-1"});
  push("warmup_cosine_lr: warmup > total", [] { warmup_cosine_lr(0, 1e-3, 10, 5); }, "ValueError",
      {"warmup_cosine_lr", "warmup_steps 10", "total_steps 5"});

  auto adam_sd = [adam] { return adam->state_dict(); };
  push("AdamW::load_state_dict: entry naming no parameter",
      [adam, adam_sd] {
        NamedTensors sd = adam_sd();
        for (auto& [n, t] : sd)
          if (n == "exp_avg.w") n = "exp_avg.nope";
        adam->load_state_dict(sd);
      },
      "ValueError", {"AdamW::load_state_dict", "'exp_avg.nope'"}, adam_state);
  push("AdamW::load_state_dict: buffer of the wrong shape",
      [adam, adam_sd] {
        NamedTensors sd = adam_sd();
        for (auto& [n, t] : sd)
          if (n == "exp_avg_sq.w") t = f32({3, 2});
        adam->load_state_dict(sd);
      },
      "ShapeError", {"AdamW::load_state_dict", "'exp_avg_sq.w'", "(3, 2)", "(2, 3)"}, adam_state);
  push("AdamW::load_state_dict: buffer of a non-float dtype",
      [adam, adam_sd] {
        NamedTensors sd = adam_sd();
        for (auto& [n, t] : sd)
          if (n == "exp_avg.b") t = ints({0, 0, 0}, {3});
        adam->load_state_dict(sd);
      },
      "DTypeError", {"AdamW::load_state_dict", "'exp_avg.b'", "int64", "float32"}, adam_state);
  push("AdamW::load_state_dict: missing 'step'",
      [adam, adam_sd] {
        NamedTensors sd, all = adam_sd();
        for (auto& e : all)
          if (e.first != "step") sd.push_back(e);
        adam->load_state_dict(sd);
      },
      "ValueError", {"AdamW::load_state_dict", "missing", "'step'"}, adam_state);
  push("AdamW::load_state_dict: one parameter's state incomplete",
      [adam, adam_sd] {
        NamedTensors sd, all = adam_sd();
        for (auto& e : all)
          if (e.first != "exp_avg_sq.b") sd.push_back(e);
        adam->load_state_dict(sd);
      },
      "ValueError", {"AdamW::load_state_dict", "'b'", "incomplete", "'exp_avg_sq.b'"}, adam_state);
  push("AdamW::load_state_dict: negative step",
      [adam, adam_sd] {
        NamedTensors sd = adam_sd();
        for (auto& [n, t] : sd)
          if (n == "step") t = ints({-3}, {});
        adam->load_state_dict(sd);
      },
      "ValueError", {"AdamW::load_state_dict", "'step'", "-3"}, adam_state);
  push("SGD::load_state_dict: Adam's state",
      [sgd, adam_sd] { sgd->load_state_dict(adam_sd()); }, "ValueError",
      {"SGD::load_state_dict", "exp_avg"}, sgd_state);

  // ===== checkpoint I/O ================================================================================
  // The model and optimizer that failed loads must leave untouched; the files hold different
  // values, so a partial load would show.
  auto ck_model = std::make_shared<Small>();
  auto ck_opt = std::make_shared<AdamW>(ck_model->named_parameters(), 1e-2);
  ck_model->w.set_grad(full({2, 3}, 0.5));
  ck_model->b.set_grad(full({3}, 0.5));
  ck_opt->step();
  ck_model->zero_grad();
  auto ck_state = [ck_model, ck_opt] { return fingerprint(*ck_model) + fingerprint(*ck_opt); };

  const std::string good = dir / "good.safetensors";
  {
    Small other(10.0);
    AdamW o(other.named_parameters(), 1e-2);
    other.w.set_grad(full({2, 3}, -1.0));
    other.b.set_grad(full({3}, -1.0));
    o.step();
    o.step();
    save_checkpoint(good, other, &o, {{"note", "good"}});
  }
  const std::string good_bytes = test::read_bytes(good);
  auto load_into = [ck_model, ck_opt](std::string path, bool with_opt) {
    return [=] { load_checkpoint(path, *ck_model, with_opt ? ck_opt.get() : nullptr); };
  };
  auto variant = [&](const std::string& name, const std::string& bytes) {
    const std::string p = dir / name;
    test::write_bytes(p, bytes);
    return p;
  };

  const std::string missing = dir / "does_not_exist.safetensors";
  push("load_checkpoint: missing file", load_into(missing, true), "IOError",
      {"load_safetensors", missing, "cannot open", "No such file"}, ck_state);
  push("load_checkpoint: a directory", load_into(dir.path.string(), true), "IOError",
      {dir.path.string(), "not a regular file"}, ck_state);
  push("load_checkpoint: truncated to 5 bytes", load_into(variant("t5", good_bytes.substr(0, 5)), true),
      "IOError", {"t5", "5 bytes", "8-byte header length"}, ck_state);
  push("load_checkpoint: truncated inside the header",
      load_into(variant("th", good_bytes.substr(0, 40)), true), "IOError", {"th", "header length", "exceeds"},
      ck_state);
  push("load_checkpoint: truncated in the data (last 4 bytes cut)",
      load_into(variant("td", good_bytes.substr(0, good_bytes.size() - 4)), true), "IOError",
      {"td", "truncated"}, ck_state);
  push("load_checkpoint: header is not JSON",
      load_into(variant("bad_json", st_file("{\"w\": {\"dtype\": \"F32\", ", "")), true), "IOError",
      {"bad_json", "not valid JSON"}, ck_state);
  push("load_checkpoint: header is a JSON array", load_into(variant("array", st_file("[1, 2]  ", "")), true),
      "IOError", {"array", "not a JSON object"}, ck_state);
  push("load_checkpoint: unknown dtype F8_E4M3",
      load_into(variant("f8", st_file(R"({"w":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,12]}})",
                                       std::string(12, '\0'))),
                true),
      "IOError", {"f8", "'w'", "unsupported dtype", "F8_E4M3"}, ck_state);
  push("load_checkpoint: offsets beyond the data",
      load_into(variant("offsets", st_file(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
                                           std::string(12, '\0'))),
                true),
      "IOError", {"offsets", "'w'", "[0, 24]", "exceed"}, ck_state);
  push("load_checkpoint: BOOL byte 2",
      load_into(variant("bool2", st_file(R"({"m":{"dtype":"BOOL","shape":[2],"data_offsets":[0,2]}})",
                                         std::string("\x01\x02", 2))),
                true),
      "IOError", {"bool2", "'m'", "BOOL byte 2"}, ck_state);
  // Hostile files (issue 14): bounded depth, repeated fields, NUL bytes, FIFOs, NUL in the path.
  {
    std::string deep = R"({"w":{"dtype":"F32","shape":)";
    for (int i = 0; i < 80000; ++i) deep += '[';
    deep += '2';
    for (int i = 0; i < 80000; ++i) deep += ']';
    deep += R"(,"data_offsets":[0,24]}})";
    push("load_checkpoint: shape nested 80,000 levels deep", load_into(variant("deep", st_file(deep, std::string(24, '\0'))), true),
         "IOError", {"deep", "nests deeper than 3 levels", "'w'"}, ck_state);
  }
  push("load_checkpoint: a field repeated inside one tensor entry",
       load_into(variant("repeat", st_file(R"({"w":{"dtype":"F32","shape":[2,3],"shape":[6],"data_offsets":[0,24]}})",
                                           std::string(24, '\0'))),
                 true),
       "IOError", {"repeat", "'w' names the field 'shape' more than once"}, ck_state);
  push("load_checkpoint: bytes after a NUL inside the header",
       load_into(variant("nul", st_file(std::string(R"({"w":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})") +
                                            std::string("\0junk!!", 7),
                                        std::string(24, '\0'))),
                 true),
       "IOError", {"nul", "NUL byte at offset"}, ck_state);
  {
    const std::string fifo = dir / "fifo.safetensors";
    if (::mkfifo(fifo.c_str(), 0600) == 0)
      push("load_checkpoint: a FIFO with no writer (used to block forever)", load_into(fifo, true), "IOError",
           {"fifo.safetensors", "not a regular file (a FIFO)"}, ck_state);
  }
  push("load_checkpoint: a path with an embedded NUL byte", load_into(good + std::string("\0.x", 3), true), "IOError",
       {"the path contains a NUL byte"}, ck_state);

  auto saved = [&](const std::string& name, const NamedTensors& ts) {
    const std::string p = dir / name;
    save_safetensors(p, ts);
    return p;
  };
  NamedTensors good_opt;  // the good file's optimizer entries
  for (auto& [n, t] : load_safetensors(good).tensors)
    if (n.rfind("optimizer.", 0) == 0) good_opt.emplace_back(n, t);
  auto with_opt = [&](NamedTensors ts) {
    for (auto& e : good_opt) ts.push_back(e);
    return ts;
  };
  push("load_checkpoint: parameter stored as int64",
      load_into(saved("dtype", with_opt({{"w", ints({0, 0, 0, 0, 0, 0}, {2, 3})}, {"b", f32({3})}})), true), "IOError",
      {"load_checkpoint", "dtype", "'w'", "int64", "float32", "(2, 3)", "nothing was loaded"}, ck_state);
  push("load_checkpoint: parameter of the wrong shape",
      load_into(saved("shape", with_opt({{"w", f32({3, 2})}, {"b", f32({3})}})), true), "IOError",
      {"load_checkpoint", "shape", "'w'", "(3, 2)", "(2, 3)", "nothing was loaded"}, ck_state);
  push("load_checkpoint: missing parameter",
      load_into(saved("missing_b", with_opt({{"w", f32({2, 3})}})), true), "IOError",
      {"load_checkpoint", "missing_b", "missing 'b'", "nothing was loaded"}, ck_state);
  push("load_checkpoint: unexpected parameter",
      load_into(saved("extra", with_opt({{"w", f32({2, 3})}, {"b", f32({3})}, {"c", f32({1})}})), true), "IOError",
      {"load_checkpoint", "extra", "unexpected 'c'", "nothing was loaded"}, ck_state);
  push("load_checkpoint: no optimizer state but an optimizer given",
      load_into(saved("no_opt", {{"w", f32({2, 3})}, {"b", f32({3})}}), true), "IOError",
      {"load_checkpoint", "no_opt", "no optimizer state", "nothing was loaded"}, ck_state);
  {
    NamedTensors ts{{"w", f32({2, 3})}, {"b", f32({3})}};
    for (auto e : good_opt) {
      if (e.first == "optimizer.exp_avg.w") e.second = f32({6});
      ts.push_back(e);
    }
    push("load_checkpoint: optimizer buffer of the wrong shape", load_into(saved("opt_shape", ts), true), "IOError",
        {"load_checkpoint", "opt_shape", "optimizer", "'exp_avg.w'", "(6)", "(2, 3)", "nothing was loaded"},
        ck_state);
  }
  {
    NamedTensors ts{{"w", f32({2, 3})}, {"b", f32({3})}};
    for (auto e : good_opt)
      if (e.first != "optimizer.step") ts.push_back(e);
    push("load_checkpoint: optimizer 'step' missing", load_into(saved("opt_nostep", ts), true), "IOError",
        {"load_checkpoint", "opt_nostep", "'step'", "nothing was loaded"}, ck_state);
  }
  {  // a crafted step counter: the next Adam step used to overflow and write NaN everywhere
    NamedTensors ts{{"w", f32({2, 3})}, {"b", f32({3})}};
    for (auto e : good_opt) {
      if (e.first == "optimizer.step") e.second = index_tensor({INT64_MAX}, {});
      ts.push_back(e);
    }
    push("load_checkpoint: optimizer step INT64_MAX", load_into(saved("opt_step_max", ts), true), "IOError",
        {"load_checkpoint", "opt_step_max", "'step' must be in [0, 2^53]", "nothing was loaded"}, ck_state);
  }
  {
    NamedTensors ts{{"w", f32({2, 3})}, {"b", f32({3})}};
    for (auto e : good_opt) {
      if (e.first == "optimizer.exp_avg_sq.w") e.second = full({2, 3}, -1.0);
      ts.push_back(e);
    }
    push("load_checkpoint: negative exp_avg_sq", load_into(saved("opt_neg_sq", ts), true), "IOError",
        {"load_checkpoint", "opt_neg_sq", "'exp_avg_sq.w'", "negative value -1", "nothing was loaded"}, ck_state);
  }
  push("load_checkpoint: model-only load of a truncated file",
      load_into(variant("td2", good_bytes.substr(0, good_bytes.size() / 2)), false), "IOError",
      {"load_safetensors", "td2"}, ck_state);

  push("save_safetensors: duplicate tensor names",
      [&dir] { save_safetensors(dir / "dup", {{"a", f32({1})}, {"a", f32({2})}}); }, "ValueError",
      {"save_safetensors", "'a'", "more than once"});
  push("save_safetensors: undefined tensor",
      [&dir] { save_safetensors(dir / "undef", {{"a", Tensor()}}); }, "ValueError",
      {"save_safetensors", "'a'", "undefined"});
  const std::string nodir = dir / "no_such_dir/ck.safetensors";
  push("save_checkpoint: directory does not exist",
      [nodir, ck_model, ck_opt] { save_checkpoint(nodir, *ck_model, ck_opt.get()); }, "IOError",
      {"save_safetensors", nodir, "temporary file"}, ck_state);
  // A failed save leaves the file system as it was (here: the regular file in the path).
  const std::string under_file = good + "/ck.safetensors";
  push("save_checkpoint: parent path is a regular file",
      [under_file, ck_model, ck_opt] { save_checkpoint(under_file, *ck_model, ck_opt.get()); }, "IOError",
      {"save_safetensors", under_file, "Not a directory"},
      [good] { return test::read_bytes(good); });

  // ===== run the table ===================================================================================
  BOOST_TEST_MESSAGE("bad_inputs: " << cases.size() << " cases");
  BOOST_TEST(cases.size() >= 40u);
  std::size_t passed = 0;
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT("case '" << c.name << "'") {
      const std::string before = c.state ? c.state() : std::string();
      bool threw = false, ok = true;
      try {
        c.call();
      } catch (const std::exception& e) {
        threw = true;
        const std::string msg = e.what();
        if (test::error_kind(e) != c.expected) {
          BOOST_ERROR("expected " << c.expected << ", got " << test::error_kind(e) << ": \"" << msg << "\"");
          ok = false;
        }
        for (const auto& p : c.parts)
          if (msg.find(p) == std::string::npos) {
            BOOST_ERROR("message lacks \"" << p << "\": \"" << msg << "\"");
            ok = false;
          }
        if (msg.find('\n') != std::string::npos) {
          BOOST_ERROR("message spans several lines: \"" << msg << "\"");
          ok = false;
        }
      } catch (...) {
        threw = true;
        ok = false;
        BOOST_ERROR("threw something that is not a std::exception");
      }
      if (!threw) {
        BOOST_ERROR("did not throw (expected " << c.expected << ")");
        ok = false;
      }
      if (c.state && c.state() != before) {
        BOOST_ERROR("state changed although the call failed");
        ok = false;
      }
      passed += ok;
    }
  }
  BOOST_TEST_MESSAGE("bad_inputs: " << passed << " of " << cases.size() << " cases passed");
}

BOOST_AUTO_TEST_SUITE_END()
