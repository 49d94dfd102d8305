// Version counter (PyTorch's `_version`): an in-place write to a tensor that a recorded node
// saved, between the forward and the node's backward, is a GraphError naming the op, the
// tensor (input index or output, shape, dtype) and both versions; every other use of
// in-place writes (training loops, writes before the forward) is unaffected.
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/models/module.hpp"
#include "xgrad/models/optim.hpp"
#include "xgrad/ops/attention.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;
using test::f64;

namespace {

// Runs f, which must throw GraphError whose message contains every part.
template <class F> void expect_modified(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    BOOST_ERROR("no exception");
  } catch (const GraphError& e) {
    const std::string msg = e.what();
    BOOST_TEST_INFO("message: " << msg);
    for (const auto& p : parts) BOOST_CHECK(msg.find(p) != std::string::npos);
  } catch (const std::exception& e) {
    BOOST_ERROR("expected GraphError, got " << test::error_kind(e) << ": " << e.what());
  }
}

Tensor leaf64(const std::vector<double>& v, const Shape& s) { return f64(v, s).set_requires_grad(true); }

}  // namespace

BOOST_AUTO_TEST_SUITE(version_counter)

BOOST_AUTO_TEST_CASE(versions_count_in_place_writes_per_storage) {
  Tensor a = f64({1, 2, 3}, {3});
  BOOST_TEST(a.version() == 0u);
  a.mutable_data<double>()[0] = 5;
  BOOST_TEST(a.version() == 1u);
  (void)a.mutable_raw_data();
  BOOST_TEST(a.version() == 2u);
  Tensor d = a.detach();  // shares storage, so shares the counter
  d.mutable_data<double>()[1] = 7;
  BOOST_TEST(a.version() == 3u);
  BOOST_TEST(d.version() == 3u);
  Tensor c = a.clone();  // new storage
  BOOST_TEST(c.version() == 0u);
  (void)a.data<double>();  // reads do not count
  (void)a.raw_data();
  BOOST_TEST(a.version() == 3u);
  a.bump_version();
  BOOST_TEST(a.version() == 4u);
}

BOOST_AUTO_TEST_CASE(mutable_data_write_between_forward_and_backward) {
  Tensor w = leaf64({1, 2, 3}, {3});
  Tensor x = f64({4, 5, 6}, {3});
  Tensor loss = sum(mul(x, w));
  w.mutable_data<double>()[0] = 10;
  expect_modified([&] { loss.backward(); },
                  {"backward: op 'mul': input 1 (3) float64 was modified in place after the forward",
                   "(version saved 0, now 1)"});
  BOOST_TEST(!w.grad().defined());  // nothing accumulated
}

BOOST_AUTO_TEST_CASE(write_through_a_detached_handle_is_seen) {
  Tensor w = leaf64({1, 2}, {2});
  Tensor loss = sum(mul(w, w));
  w.detach().mutable_data<double>()[1] = 0;
  expect_modified([&] { loss.backward(); }, {"op 'mul'", "input 0 (2) float64", "(version saved 0, now 1)"});
}

BOOST_AUTO_TEST_CASE(output_saved_for_backward_modified) {
  Tensor x = leaf64({0.5, 1}, {2});
  Tensor y = exp(x);  // backward uses y
  y.mutable_data<double>()[0] = 3;
  expect_modified([&] { sum(y).backward(); }, {"op 'exp': its output (2) float64", "(version saved 0, now 1)"});
}

BOOST_AUTO_TEST_CASE(optimizer_step_between_forward_and_backward) {
  Rng rng(3);
  Linear layer(3, 2, true, rng);
  layer.to(DType::Float64);
  SGD opt(layer.named_parameters(), 0.1);
  Tensor x = f64({1, 2, 3, 4, 5, 6}, {2, 3});
  sum(layer.forward(x)).backward();  // gradients for the step
  Tensor loss = sum(layer.forward(x));
  opt.step();  // writes weight and bias in place
  // to() above counts as one write (the parameters got new storage): saved 1, now 2.
  expect_modified([&] { loss.backward(); }, {"op 'linear'", "(2, 3) float64", "(version saved 1, now 2)"});
}

// Module::to converts in place: a graph recorded before refuses to backward through the
// converted parameters instead of mixing dtypes.
BOOST_AUTO_TEST_CASE(module_to_between_forward_and_backward) {
  Rng rng(5);
  Linear layer(3, 2, true, rng);
  Tensor loss = sum(layer.forward(ones({2, 3})));
  layer.to(DType::Float64);
  expect_modified([&] { loss.backward(); }, {"op 'linear'", "modified in place after the forward", "(version saved 0, now 1)"});
}

BOOST_AUTO_TEST_CASE(load_parameters_between_forward_and_backward) {
  Rng rng(4);
  Linear layer(2, 2, false, rng);
  layer.to(DType::Float64);
  NamedTensors saved;
  for (const auto& p : layer.named_parameters()) saved.push_back({p.first, p.second.clone()});
  Tensor loss = sum(layer.forward(f64({1, 2}, {1, 2})));
  layer.load_parameters(saved);
  expect_modified([&] { loss.backward(); }, {"op 'linear'", "modified in place after the forward"});
}

BOOST_AUTO_TEST_CASE(grad_function_checks_too) {
  Tensor w = leaf64({1, 2}, {2});
  Tensor loss = sum(mul(w, w));
  w.mutable_data<double>()[0] = 2;
  expect_modified([&] { grad({loss}, {w}); }, {"op 'mul'", "(version saved 0, now 1)"});
}

BOOST_AUTO_TEST_CASE(training_loop_unaffected) {
  Rng rng(5);
  Linear layer(3, 1, true, rng);
  layer.to(DType::Float64);
  Adam opt(layer.named_parameters(), 0.05);
  Tensor x = f64({1, 0, 2, -1, 1, 0.5}, {2, 3});
  const std::uint64_t v0 = layer.weight.version();
  double first = 0, last = 0;
  for (int step = 0; step < 20; ++step) {
    opt.zero_grad();
    Tensor y = layer.forward(x);
    Tensor loss = sum(mul(y, y));
    BOOST_REQUIRE_NO_THROW(loss.backward());
    BOOST_REQUIRE_NO_THROW(opt.step());
    (step == 0 ? first : last) = loss.item();
  }
  BOOST_TEST(last < first);
  BOOST_TEST(layer.weight.version() == v0 + 20);  // one bump per step
}

// The fused attention op records its masks as (non-differentiable) inputs after q, k, v: a
// mask written in place before the backward is refused like any saved input, whose padding
// would otherwise change the key and query extents the backward reads.
BOOST_AUTO_TEST_CASE(attention_mask_written_between_forward_and_backward) {
  const std::size_t B = 2, T = 3, S = 4, H = 2, D = 2;
  auto run = [&](const char* what, auto set_masks, auto write, const std::vector<std::string>& parts) {
    BOOST_TEST_CONTEXT(what) {
      Tensor q = test::leaf(test::vals(B * T * H * D, 1), {B, T, H * D});
      Tensor k = test::leaf(test::vals(B * S * H * D, 2), {B, S, H * D});
      Tensor v = test::leaf(test::vals(B * S * H * D, 3), {B, S, H * D});
      AttentionMasks m;
      set_masks(m);
      Tensor loss = sum(mul(attention(q, k, v, H, m), f64(test::vals(B * T * H * D, 4), {B, T, H * D})));
      write(m);
      expect_modified([&] { loss.backward(); }, parts);
      BOOST_TEST(!q.grad().defined());
      BOOST_TEST(!k.grad().defined());
    }
  };
  auto padding = [&](AttentionMasks& m) {
    m.key_padding_mask = zeros({B, S}, DType::Bool);
    m.key_padding_mask.mutable_data<bool>()[S - 1] = true;  // batch 0: the last key is padding
  };
  run("key_padding_mask", padding, [&](AttentionMasks& m) { m.key_padding_mask.mutable_data<bool>()[S - 1] = false; },
      {"op 'attention': input 3 (2, 4) bool was modified in place", "(version saved 1, now 2)"});
  run("mask and key_padding_mask",
      [&](AttentionMasks& m) {
        padding(m);
        m.mask = zeros({T, S}, DType::Bool);
        m.mask.mutable_data<bool>()[1] = true;  // not causal in content: kept
      },
      [&](AttentionMasks& m) { m.mask.mutable_data<bool>()[2] = true; },
      {"op 'attention': input 3 (3, 4) bool was modified in place"});
  run("float_mask", [&](AttentionMasks& m) { m.float_mask = f64(test::vals(T * S, 5), {T, S}); },
      [&](AttentionMasks& m) { m.float_mask.mutable_data<double>()[0] = 7; },
      {"op 'attention': input 3 (3, 4) float64 was modified in place"});
  // attention_packed: the mask is input 1, after qkv
  Tensor qkv = test::leaf(test::vals(B * T * 3 * H * D, 6), {B, T, 3 * H * D});
  AttentionMasks m;
  m.key_padding_mask = zeros({B, T}, DType::Bool);
  Tensor loss = sum(attention_packed(qkv, H, m));
  m.key_padding_mask.mutable_data<bool>()[0] = true;
  expect_modified([&] { loss.backward(); }, {"op 'attention_packed': input 1 (2, 3) bool was modified in place"});
  // unchanged masks: the backward runs (and a mask written after it is free to change)
  Tensor loss2 = sum(attention_packed(qkv, H, m));
  loss2.backward();
  BOOST_TEST(qkv.grad().defined());
  m.key_padding_mask.mutable_data<bool>()[0] = false;
}

// The index ops and masked_fill / where save their Int64 index or Bool mask as an input of
// their node: a write to it between the forward and the backward is refused (before, the
// backward silently used the new indices), nothing is accumulated, and an unchanged index
// still backwards.
BOOST_AUTO_TEST_CASE(index_or_mask_written_between_forward_and_backward) {
  struct Case {
    const char* what;
    std::function<Tensor(const Tensor& x, const Tensor& index)> op;  // x (3, 4) float64
    std::vector<std::int64_t> index;
    Shape index_shape;
    std::string message;
  };
  const std::vector<Case> cases{
      {"embedding", [](const Tensor& x, const Tensor& i) { return embedding(x, i); },
       {2, 0, 2}, {3}, "op 'embedding': input 1 (3) int64 was modified in place"},
      {"embedding_backward", [](const Tensor& x, const Tensor& i) { return embedding_backward(x, i, 5); },
       {4, 0, 4}, {3}, "op 'embedding_backward': input 1 (3) int64 was modified in place"},
      {"gather", [](const Tensor& x, const Tensor& i) { return gather(x, 1, i); },
       {3, 0, 1, 1, 2, 0}, {3, 2}, "op 'gather': input 1 (3, 2) int64 was modified in place"},
      {"scatter_add",
       [](const Tensor& x, const Tensor& i) { return scatter_add(x, 1, i, narrow(x, 1, 0, 2)); },
       {3, 0, 1, 1, 2, 0}, {3, 2}, "op 'scatter_add': input 2 (3, 2) int64 was modified in place"},
      {"index_select", [](const Tensor& x, const Tensor& i) { return index_select(x, 1, i); },
       {3, 3, 0}, {3}, "op 'index_select': input 1 (3) int64 was modified in place"},
      {"index_add", [](const Tensor& x, const Tensor& i) { return index_add(x, 0, i, narrow(x, 0, 0, 2)); },
       {2, 2}, {2}, "op 'index_add': input 2 (2) int64 was modified in place"},
      {"index_add_zeros", [](const Tensor& x, const Tensor& i) { return index_add_zeros({4, 4}, 0, i, x); },
       {1, 3, 1}, {3}, "op 'index_add_zeros': input 1 (3) int64 was modified in place"},
      {"pack_rows", [](const Tensor& x, const Tensor& i) { return pack_rows(x, i); }, {2, 0}, {2},
       "op 'pack_rows': input 1 (2) int64 was modified in place"},
      {"unpack_rows", [](const Tensor& x, const Tensor& i) { return unpack_rows(x, i, {2, 3}); },
       {5, 0, 2}, {3}, "op 'unpack_rows': input 1 (3) int64 was modified in place"},
  };
  auto loss_of = [](const Tensor& y) { return sum(mul(y, f64(test::vals(y.numel(), 8), y.shape()))); };
  for (const Case& c : cases)
    BOOST_TEST_CONTEXT(c.what) {
      Tensor x = test::leaf(test::vals(12, 7), {3, 4});
      Tensor index = index_tensor(c.index, c.index_shape);
      Tensor y = c.op(x, index);
      Tensor loss = loss_of(y);
      index.mutable_data<std::int64_t>()[0] = 1;  // still in range: only the version tells
      expect_modified([&] { loss.backward(); }, {c.message, "(version saved 0, now 1)"});
      BOOST_TEST(!x.grad().defined());
      Tensor y2 = c.op(x, index);  // an unchanged index: the backward runs
      loss_of(y2).backward();
      BOOST_TEST(x.grad().defined());
    }
  // topk: its values' node saves the indices it returns
  Tensor x = test::leaf(test::vals(12, 9), {3, 4});
  TopK t = topk(x, 2, 1);
  Tensor loss = sum(t.values);
  t.indices.mutable_data<std::int64_t>()[0] = 3;
  expect_modified([&] { loss.backward(); }, {"op 'topk': input 1 (3, 2) int64 was modified in place"});
  // masked_fill and where: the Bool mask after the tensor inputs
  Tensor mask = zeros({3, 4}, DType::Bool);
  mask.mutable_data<bool>()[1] = true;
  Tensor l1 = sum(masked_fill(x, mask, 0.0));
  mask.mutable_data<bool>()[2] = true;
  expect_modified([&] { l1.backward(); }, {"op 'masked_fill': input 1 (3, 4) bool was modified in place"});
  Tensor l2 = sum(where(mask, x, mul(x, x)));
  mask.mutable_data<bool>()[3] = true;
  expect_modified([&] { l2.backward(); }, {"op 'where': input 2 (3, 4) bool was modified in place"});
  BOOST_TEST(!x.grad().defined());
}

BOOST_AUTO_TEST_CASE(writes_before_the_forward_unaffected) {
  Tensor w = leaf64({1, 2, 3}, {3});
  {
    NoGradGuard no_grad;
    w.mutable_data<double>()[2] = 4;  // initialisation, e.g. a custom init
  }
  w.mutable_data<double>()[1] = 5;  // also outside any graph holding w
  Tensor loss = sum(mul(w, w));
  BOOST_REQUIRE_NO_THROW(loss.backward());
  BOOST_TEST(test::allclose(w.grad(), {2, 10, 8}));
}

BOOST_AUTO_TEST_CASE(retain_graph_double_backward_unaffected) {
  Tensor w = leaf64({1, 2}, {2});
  Tensor loss = sum(mul(w, w));
  loss.backward(Tensor(), /*retain_graph=*/true);
  BOOST_REQUIRE_NO_THROW(loss.backward());
  BOOST_TEST(test::allclose(w.grad(), {4, 8}));
}

BOOST_AUTO_TEST_CASE(write_after_a_retained_backward_is_caught_on_the_next) {
  Tensor w = leaf64({1, 2}, {2});
  Tensor loss = sum(mul(w, w));
  loss.backward(Tensor(), /*retain_graph=*/true);
  w.mutable_data<double>()[0] = 3;
  expect_modified([&] { loss.backward(); }, {"op 'mul'", "(version saved 0, now 1)"});
}

BOOST_AUTO_TEST_CASE(create_graph_second_order_unaffected) {
  Tensor x = leaf64({0.5, -1}, {2});
  Tensor y = sum(mul(mul(x, x), x));  // d/dx = 3x^2, d2/dx2 summed: 6x
  std::vector<Tensor> g = grad({y}, {x}, {}, GradOptions{false, true, false});
  BOOST_REQUIRE_NO_THROW(sum(g[0]).backward());
  BOOST_TEST(test::allclose(x.grad(), {3.0, -6.0}));
}

BOOST_AUTO_TEST_SUITE_END()
