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

BOOST_AUTO_TEST_SUITE_END()
