// The argument-check helpers every op uses (framework/errors.hpp, framework/tensor.hpp): the
// exception type and the whole message, naming op, argument and shapes.
#include <limits>
#include <string>

#include "helpers.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/norm.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/unary.hpp"

#include "xgrad/models/loss.hpp"
#include "xgrad/models/optim.hpp"
#include "xgrad/ops/attention.hpp"

using namespace xgrad;

namespace {

// The message of the E that f throws ("" when it throws nothing or something else).
template <class E, class F> std::string message_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (...) {
    return "(another exception)";
  }
  return "(nothing thrown)";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(arg_checks)

BOOST_AUTO_TEST_CASE(throw_error_formats_strings_integers_doubles_and_shapes) {
  const Shape s{2, 3};
  BOOST_TEST(message_of<ShapeError>([&] { throw_error<ShapeError>("op", "argument 'x' ", s, " axis ", -1L, " n ", 7u); }) ==
             "op: argument 'x' (2, 3) axis -1 n 7");
  BOOST_TEST(message_of<ValueError>([] { throw_error<ValueError>("op", "eps ", 1e-5, ' ', 0.1, ' ', 3.0); }) ==
             "op: eps 1e-05 0.1 3");
  BOOST_TEST(message_of<ValueError>([] {
               throw_error<ValueError>("op", std::numeric_limits<double>::quiet_NaN(), ' ',
                                       -std::numeric_limits<double>::infinity(), ' ', Shape{});
             }) == "op: nan -inf ()");
  // Every kind derives from Error.
  BOOST_TEST(message_of<Error>([] { throw_error<IndexError>("op", "x"); }) == "op: x");
}

BOOST_AUTO_TEST_CASE(check_rank_shape_and_same_shape_name_op_argument_and_shapes) {
  const Tensor x = zeros({2, 3});
  check_rank("op", "x", x, 2);
  check_shape("op", "x", x, {2, 3});
  check_same_shape("op", "x", x, "g", zeros({2, 3}));
  BOOST_TEST(message_of<ShapeError>([&] { check_rank("op", "x", x, 4); }) == "op: argument 'x' (2, 3) must have rank 4");
  BOOST_TEST(message_of<ShapeError>([&] { check_rank("op", "x", x, 4, "(B, H, L, D)"); }) ==
             "op: argument 'x' (2, 3) must be (B, H, L, D)");
  BOOST_TEST(message_of<ShapeError>([&] { check_shape("op", "bias", x, {3}); }) == "op: argument 'bias' (2, 3) must be (3)");
  BOOST_TEST(message_of<ShapeError>([&] { check_shape("op", "mask", x, {2, 4}, "(B, S)"); }) ==
             "op: argument 'mask' (2, 3) must be (B, S) = (2, 4)");
  BOOST_TEST(message_of<ShapeError>([&] { check_same_shape("op", "x", x, "g", zeros({3})); }) ==
             "op: argument 'x' (2, 3) and 'g' (3) must have one shape");
}

// Ops converted to the helpers keep their messages.
BOOST_AUTO_TEST_CASE(converted_ops_keep_their_messages) {
  BOOST_TEST(message_of<ShapeError>([] { merge_heads(zeros({2, 3})); }) ==
             "merge_heads: argument 'x' (2, 3) must be (B, H, L, D)");
  BOOST_TEST(message_of<ShapeError>([] { linear(zeros({2, 3}), zeros({3})); }) ==
             "linear: argument 'weight' (3) must be (out_features, in_features)");
  BOOST_TEST(message_of<ShapeError>([] { matmul(zeros({2, 5}), zeros({3, 4})); }) ==
             "matmul: argument 'a' (2, 5) and argument 'b' (3, 4): inner dimensions 5 != 3");
  BOOST_TEST(message_of<ShapeError>([] { gelu_backward(zeros({2}), zeros({3})); }) ==
             "gelu_backward: argument 'x' (2) and 'g' (3) must have one shape");
  BOOST_TEST(message_of<ValueError>([] { layer_norm(zeros({2, 3}), Tensor(), Tensor(), -1.0); }) ==
             "layer_norm: eps must be > 0, got -1 (for 'x' (2, 3))");
}

// Attention and model checks: doubles through throw_error's 10 significant digits, shapes
// through check_shape / check_same_shape.
BOOST_AUTO_TEST_CASE(converted_attention_and_model_messages) {
  const Tensor q = zeros({2, 3, 4}), k = zeros({2, 5, 4});
  BOOST_TEST(message_of<ValueError>([&] {
               attention(q, k, k, 2, {}, std::numeric_limits<double>::infinity());
             }) == "attention: argument 'scale' must be finite, got inf");
  AttentionMasks m;
  m.key_padding_mask = zeros({2, 3}, DType::Bool);
  BOOST_TEST(message_of<ShapeError>([&] { attention(q, k, k, 2, m); }) ==
             "attention: argument 'key_padding_mask' (2, 3) must be (B, S) = (2, 5)");
  m = AttentionMasks();
  m.float_mask = zeros({3, 5}, DType::Float64);
  BOOST_TEST(message_of<DTypeError>([&] { attention_packed(zeros({2, 5, 12}), 2, m); }) ==
             "attention_packed: argument 'float_mask' (3, 5) is float64 but 'qkv' is float32");
  BOOST_TEST(message_of<ShapeError>([] { mse_loss(zeros({2, 3}), zeros({3, 2})); }) ==
             "mse_loss: argument 'a' (2, 3) and 'b' (3, 2) must have one shape");
  BOOST_TEST(message_of<IndexError>([] { cross_entropy(zeros({2, 3}), index_tensor({0, 7}, {2})); }) ==
             "cross_entropy: target 7 at flat position 1 of argument 'targets' (2) is out of range for 3 classes "
             "(the last axis of 'logits' (2, 3))");
  BOOST_TEST(message_of<ValueError>([] { SGD({{"w", zeros({2})}}, -0.001234567891); }) ==
             "SGD: lr must be finite and >= 0, got -0.001234567891");
  BOOST_TEST(message_of<ValueError>([] { warmup_cosine_lr(0, 0.1, 20, 10); }) ==
             "warmup_cosine_lr: need 0 <= warmup_steps <= total_steps, got warmup_steps 20 and total_steps 10");
}

BOOST_AUTO_TEST_SUITE_END()
