// Every class of bad input throws the documented exception (framework/errors.hpp), and the
// message starts with the op's name, names the offending argument and shows the shapes.
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;

namespace {

Tensor f32(const std::vector<double>& v, const xgrad::Shape& s) { return tensor(v, s, DType::Float32); }
Tensor f64(const std::vector<double>& v, const xgrad::Shape& s) { return tensor(v, s, DType::Float64); }
Tensor r64(const xgrad::Shape& s) {  // float64 filled with 1, 2, 3, ...
  std::vector<double> v(numel(s));
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = double(i + 1);
  return f64(v, s);
}
Tensor leaf64(const xgrad::Shape& s) {
  Tensor t = r64(s);
  t.set_requires_grad(true);
  return t;
}
Tensor bools(const xgrad::Shape& s) { return bool_tensor(std::vector<bool>(numel(s), false), s); }

// Predicate for BOOST_CHECK_EXCEPTION(statement, std::exception, ...): the exception must be
// an E, its message must start with "<op>:" and contain every one of `parts`.
template <class E>
std::function<bool(const std::exception&)> expect(const char* wanted, std::string op,
                                                 std::vector<std::string> parts) {
  return [=](const std::exception& e) {
    const std::string msg = e.what();
    bool ok = true;
    if (!dynamic_cast<const E*>(&e)) {
      BOOST_ERROR("expected " << wanted << ", got " << test::error_kind(e) << ": \"" << msg << "\"");
      ok = false;
    }
    if (msg.rfind(op + ":", 0) != 0) {
      BOOST_ERROR("message does not start with \"" << op << ":\": \"" << msg << "\"");
      ok = false;
    }
    for (const auto& p : parts)
      if (msg.find(p) == std::string::npos) {
        BOOST_ERROR("message lacks \"" << p << "\": \"" << msg << "\"");
        ok = false;
      }
    return ok;
  };
}

}  // namespace

// Catches std::exception so that a wrong exception type is reported (not escaped), then
// checks type and message.
#define CHECK_THROWS(statement, Exc, op, ...) \
  BOOST_CHECK_EXCEPTION(statement, std::exception, expect<Exc>(#Exc, op, {__VA_ARGS__}))

BOOST_AUTO_TEST_SUITE(errors)

// --- broadcasting --------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(binary_ops_mismatched_broadcast_shapes) {
  Tensor a = r64({2, 3}), b = r64({4});
  CHECK_THROWS(add(a, b), ShapeError, "add", "'a'", "'b'", "(2, 3)", "(4)");
  CHECK_THROWS(sub(a, b), ShapeError, "sub", "'a'", "'b'", "(2, 3)", "(4)");
  CHECK_THROWS(mul(r64({2, 3, 4}), r64({3, 5})), ShapeError, "mul", "(2, 3, 4)", "(3, 5)");
  CHECK_THROWS(div(r64({3, 1}), r64({2, 4})), ShapeError, "div", "(3, 1)", "(2, 4)");
  CHECK_THROWS(a + b, ShapeError, "add", "(2, 3)", "(4)");
}

BOOST_AUTO_TEST_CASE(where_mismatched_shapes) {
  CHECK_THROWS(where(bools({2, 3}), r64({2, 3}), r64({4})), ShapeError, "where", "'a'", "'b'", "(2, 3)", "(4)");
  CHECK_THROWS(where(bools({5}), r64({2, 3}), r64({3})), ShapeError, "where", "'cond'", "(5)", "(2, 3)");
}

BOOST_AUTO_TEST_CASE(broadcast_to_and_sum_to_incompatible) {
  CHECK_THROWS(broadcast_to(r64({3}), {2, 4}), ShapeError, "broadcast_to", "(3)", "(2, 4)");
  CHECK_THROWS(broadcast_to(r64({2, 3}), {3}), ShapeError, "broadcast_to", "(2, 3)", "(3)");
  CHECK_THROWS(sum_to(r64({2, 3}), {4}), ShapeError, "sum_to", "(2, 3)", "(4)");
  CHECK_THROWS(sum_to(r64({3}), {2, 3}), ShapeError, "sum_to", "(3)", "(2, 3)");
}

// --- matmul / linear ---------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(matmul_inner_dim_mismatch) {
  CHECK_THROWS(matmul(r64({2, 5}), r64({3, 4})), ShapeError, "matmul", "'a'", "'b'", "(2, 5)", "(3, 4)");
  // With transpose flags the compared dims change: a^T (5,2) x b (3,4): 2 != 3.
  CHECK_THROWS(matmul(r64({2, 5}), r64({3, 4}), true, false), ShapeError, "matmul", "(2, 5)", "(3, 4)");
  CHECK_THROWS(matmul(r64({2, 5}), r64({4, 3}), false, true), ShapeError, "matmul", "(2, 5)", "(4, 3)");
  CHECK_THROWS(matmul(r64({2, 2, 3}), r64({2, 4, 2})), ShapeError, "matmul", "(2, 2, 3)", "(2, 4, 2)");
}

BOOST_AUTO_TEST_CASE(matmul_vector_operand_mismatch) {
  // The message shows the shapes the user passed, not internal unsqueezed ones.
  CHECK_THROWS(matmul(r64({3}), r64({4, 2})), ShapeError, "matmul", "'a'", "'b'", "(3)", "(4, 2)");
  CHECK_THROWS(matmul(r64({2, 4}), r64({3})), ShapeError, "matmul", "'a'", "'b'", "(2, 4)", "(3)");
}

BOOST_AUTO_TEST_CASE(matmul_batch_dims_not_broadcastable) {
  CHECK_THROWS(matmul(r64({2, 3, 4}), r64({3, 4, 5})), ShapeError, "matmul", "'a'", "'b'", "(2, 3, 4)",
               "(3, 4, 5)");
}

BOOST_AUTO_TEST_CASE(matmul_rank0_operand) {
  CHECK_THROWS(matmul(scalar(2, DType::Float64), r64({2, 2})), ShapeError, "matmul", "'a'", "()", "(2, 2)");
  CHECK_THROWS(matmul(r64({2, 2}), scalar(2, DType::Float64)), ShapeError, "matmul", "'b'", "()", "(2, 2)");
}

BOOST_AUTO_TEST_CASE(linear_weight_and_bias_shapes) {
  CHECK_THROWS(linear(r64({2, 4}), r64({3})), ShapeError, "linear", "'weight'", "(3)");
  CHECK_THROWS(linear(r64({2, 4}), r64({1, 3, 4})), ShapeError, "linear", "'weight'", "(1, 3, 4)");
  CHECK_THROWS(linear(r64({2, 5}), r64({3, 4})), ShapeError, "linear", "'x'", "(2, 5)", "(3, 4)");
  CHECK_THROWS(linear(scalar(1, DType::Float64), r64({3, 4})), ShapeError, "linear", "'x'", "()", "(3, 4)");
  CHECK_THROWS(linear(r64({2, 4}), r64({3, 4}), r64({4})), ShapeError, "linear", "'bias'", "(4)", "(3, 4)");
  CHECK_THROWS(linear(r64({2, 4}), r64({3, 4}), r64({1, 3})), ShapeError, "linear", "'bias'", "(1, 3)");
}

// --- dtypes ------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(mixed_float32_float64) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3}), b = r64({2, 3});
  CHECK_THROWS(add(a, b), DTypeError, "add", "'a'", "'b'", "float32", "float64", "(2, 3)");
  CHECK_THROWS(mul(b, a), DTypeError, "mul", "float32", "float64");
  CHECK_THROWS(matmul(a, r64({3, 2})), DTypeError, "matmul", "'a'", "'b'", "float32", "float64", "(3, 2)");
  CHECK_THROWS(linear(a, r64({4, 3})), DTypeError, "linear", "'x'", "'weight'", "float32", "float64");
  CHECK_THROWS(linear(b, r64({4, 3}), f32({0, 0, 0, 0}, {4})), DTypeError, "linear", "'bias'", "float32", "(4)");
  CHECK_THROWS(concat({b, a}, 0), DTypeError, "concat", "xs[1]", "float32", "(2, 3)");
  CHECK_THROWS(where(bools({2, 3}), a, b), DTypeError, "where", "'a'", "'b'", "float32", "float64");
}

BOOST_AUTO_TEST_CASE(bool_and_int_tensors_in_float_ops) {
  Tensor m = bools({2, 3});
  Tensor idx = index_tensor({0, 1, 2, 3, 4, 5}, {2, 3});
  CHECK_THROWS(exp(m), DTypeError, "exp", "'x'", "bool", "(2, 3)");
  CHECK_THROWS(relu(idx), DTypeError, "relu", "'x'", "int64", "(2, 3)");
  CHECK_THROWS(add(m, m), DTypeError, "add", "'a'", "bool", "(2, 3)");
  CHECK_THROWS(add(r64({2, 3}), idx), DTypeError, "add", "'b'", "int64", "(2, 3)");
  CHECK_THROWS(sum(m), DTypeError, "sum", "'x'", "bool", "(2, 3)");
  CHECK_THROWS(softmax(idx), DTypeError, "softmax", "'x'", "int64", "(2, 3)");
  CHECK_THROWS(matmul(idx, r64({3, 2})), DTypeError, "matmul", "'a'", "int64", "(2, 3)");
  CHECK_THROWS(linear(m, r64({4, 3})), DTypeError, "linear", "'x'", "bool", "(2, 3)");
  CHECK_THROWS(pow(m, 2.0), DTypeError, "pow", "'x'", "bool", "(2, 3)");
  CHECK_THROWS(masked_fill(idx, m, 0.0), DTypeError, "masked_fill", "'x'", "int64", "(2, 3)");
  CHECK_THROWS(split_heads(m, 1), DTypeError, "split_heads", "'x'", "bool", "(2, 3)");  // transpose takes any dtype
  CHECK_THROWS(m.to(DType::Float32), DTypeError, "to", "bool", "(2, 3)");
}

BOOST_AUTO_TEST_CASE(to_non_float_target) {
  CHECK_THROWS(r64({2, 3}).to(DType::Bool), DTypeError, "to", "bool");
  CHECK_THROWS(r64({2, 3}).to(DType::Int64), DTypeError, "to", "int64");
}

// --- masks -------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(mask_of_wrong_dtype) {
  Tensor x = r64({2, 3});
  CHECK_THROWS(masked_fill(x, f32({0, 1, 0, 1, 0, 1}, {2, 3}), 0.0), DTypeError, "masked_fill", "'mask'", "float32", "(2, 3)");
  CHECK_THROWS(masked_softmax(x, index_tensor({0, 1, 0}, {3})), DTypeError, "masked_softmax", "'mask'", "int64", "(3)");
  CHECK_THROWS(where(r64({2, 3}), x, x), DTypeError, "where", "'cond'", "float64", "(2, 3)");
  CHECK_THROWS(logical_or(bools({2, 3}), x), DTypeError, "logical_or", "'b'", "float64", "(2, 3)");
  CHECK_THROWS(logical_and(x, bools({2, 3})), DTypeError, "logical_and", "'a'", "float64", "(2, 3)");
  CHECK_THROWS(logical_not(x), DTypeError, "logical_not", "'a'", "float64", "(2, 3)");
}

BOOST_AUTO_TEST_CASE(mask_not_broadcastable) {
  Tensor x = r64({2, 3});
  CHECK_THROWS(masked_fill(x, bools({4}), 0.0), ShapeError, "masked_fill", "'mask'", "(4)", "(2, 3)");
  // Broadcastable with x but to a bigger shape: the mask may not enlarge x.
  CHECK_THROWS(masked_fill(x, bools({2, 2, 3}), 0.0), ShapeError, "masked_fill", "'mask'", "(2, 2, 3)", "(2, 3)");
  CHECK_THROWS(masked_softmax(r64({2, 3, 4}), bools({3, 5})), ShapeError, "masked_softmax", "'mask'", "(3, 5)",
               "(2, 3, 4)");
  CHECK_THROWS(logical_or(bools({2, 3}), bools({3, 2})), ShapeError, "logical_or", "'a'", "'b'", "(2, 3)", "(3, 2)");
}

// --- axes --------------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(axis_out_of_range) {
  Tensor x = r64({2, 3});
  CHECK_THROWS(sum(x, {2}), IndexError, "sum", "axis 2", "(2, 3)");
  CHECK_THROWS(mean(x, {-3}), IndexError, "mean", "axis -3", "(2, 3)");
  CHECK_THROWS(xgrad::max(x, 2), IndexError, "max", "axis 2", "(2, 3)");
  CHECK_THROWS(amax(x, {0, 5}), IndexError, "amax", "axis 5", "(2, 3)");
  CHECK_THROWS(softmax(x, 2), IndexError, "softmax", "axis 2", "(2, 3)");
  CHECK_THROWS(log_softmax(x, -3), IndexError, "log_softmax", "axis -3", "(2, 3)");
  CHECK_THROWS(transpose(x, 0, 2), IndexError, "transpose", "axis 2", "(2, 3)");
  CHECK_THROWS(narrow(x, 2, 0, 1), IndexError, "narrow", "axis 2", "(2, 3)");
  CHECK_THROWS(squeeze(x, -3), IndexError, "squeeze", "axis -3", "(2, 3)");
  CHECK_THROWS(concat({x, x}, 2), IndexError, "concat", "axis 2", "(2, 3)");
  CHECK_THROWS(split(x, {1, 1}, 2), IndexError, "split", "axis 2", "(2, 3)");
  CHECK_THROWS(chunk(x, 1, -3), IndexError, "chunk", "axis -3", "(2, 3)");
}

BOOST_AUTO_TEST_CASE(unsqueeze_axis_out_of_range) {
  // Valid axes for a rank-2 input are -3 .. 2 (as torch.unsqueeze).
  Tensor x = r64({2, 3});
  CHECK_THROWS(unsqueeze(x, 3), IndexError, "unsqueeze", "axis 3", "(2, 3)");
  CHECK_THROWS(unsqueeze(x, -4), IndexError, "unsqueeze", "axis -4", "(2, 3)");
}

BOOST_AUTO_TEST_CASE(reduction_axis_given_twice) {
  CHECK_THROWS(sum(r64({2, 3}), {1, -1}), ValueError, "sum", "axis");
  CHECK_THROWS(mean(r64({2, 3}), {0, 0}), ValueError, "mean", "axis 0");
}

// --- shape ops ---------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(narrow_out_of_bounds) {
  Tensor x = r64({2, 4});
  CHECK_THROWS(narrow(x, 1, 3, 2), IndexError, "narrow", "'x'", "(2, 4)", "[3, 5)");
  CHECK_THROWS(slice(x, 2, 0, 1), IndexError, "slice", "'x'", "(2, 4)", "axis 2");
  CHECK_THROWS(unnarrow(x, 1, 1, 4), IndexError, "unnarrow", "'x'", "(2, 4)", "4");
}

BOOST_AUTO_TEST_CASE(split_sizes_not_summing) {
  CHECK_THROWS(split(r64({2, 4}), {1, 2}, 1), ShapeError, "split", "'x'", "(2, 4)", "(1, 2)");
  CHECK_THROWS(split(r64({2, 4}), {3, 2}, -1), ShapeError, "split", "'x'", "(2, 4)", "(3, 2)");
}

BOOST_AUTO_TEST_CASE(chunk_not_dividing) {
  CHECK_THROWS(chunk(r64({2, 5}), 2, 1), ShapeError, "chunk", "'x'", "(2, 5)", "2");
  CHECK_THROWS(chunk(r64({2, 5}), 0, 1), ShapeError, "chunk", "'x'", "(2, 5)", "0");
}

BOOST_AUTO_TEST_CASE(reshape_numel_mismatch) {
  CHECK_THROWS(reshape(r64({2, 3}), {4, 2}), ShapeError, "reshape", "'x'", "(2, 3)", "(4, 2)");
  CHECK_THROWS(reshape(r64({2, 3}), {}), ShapeError, "reshape", "'x'", "(2, 3)", "()");
}

BOOST_AUTO_TEST_CASE(permute_not_a_permutation) {
  CHECK_THROWS(permute(r64({2, 3}), {0, 0}), ValueError, "permute", "'x'", "(2, 3)", "(0, 0)");
  CHECK_THROWS(permute(r64({2, 3}), {0, 1, 2}), ValueError, "permute", "'x'", "(2, 3)", "(0, 1, 2)");
  CHECK_THROWS(permute(r64({2, 3}), {1, 2}), ValueError, "permute", "'x'", "(2, 3)", "(1, 2)");
}

BOOST_AUTO_TEST_CASE(squeeze_of_non_1_axis) {
  CHECK_THROWS(squeeze(r64({2, 3}), 1), ShapeError, "squeeze", "'x'", "(2, 3)", "axis 1");
  CHECK_THROWS(squeeze(r64({1, 3}), -1), ShapeError, "squeeze", "'x'", "(1, 3)", "axis -1");
}

BOOST_AUTO_TEST_CASE(concat_shape_mismatch_and_empty_list) {
  CHECK_THROWS(concat({r64({2, 3}), r64({3, 3})}, 1), ShapeError, "concat", "xs[1]", "(2, 3)", "(3, 3)");
  CHECK_THROWS(concat({r64({2, 3}), r64({1, 3}), r64({3})}, 0), ShapeError, "concat", "xs[2]", "(2, 3)", "(3)");
  CHECK_THROWS(concat({}, 0), ValueError, "concat", "'xs'", "empty");
}

BOOST_AUTO_TEST_CASE(max_over_empty_axis) {
  CHECK_THROWS(xgrad::max(f64({}, {2, 0}), 1), ShapeError, "max", "'x'", "(2, 0)");
  CHECK_THROWS(amax(f64({}, {0, 3}), {0}), ShapeError, "amax", "'x'", "(0, 3)");
}

// --- autodiff ----------------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(set_requires_grad_on_non_float) {
  CHECK_THROWS(bools({2, 3}).set_requires_grad(true), DTypeError, "set_requires_grad", "bool", "(2, 3)");
  CHECK_THROWS(index_tensor({1, 2}, {2}).set_requires_grad(), DTypeError, "set_requires_grad", "int64", "(2)");
  // Turning it off on a mask is harmless.
  BOOST_CHECK_NO_THROW(bools({2, 3}).set_requires_grad(false));
}

BOOST_AUTO_TEST_CASE(set_requires_grad_on_non_leaf) {
  Tensor x = leaf64({2, 3});
  Tensor y = mul(x, x);
  CHECK_THROWS(y.set_requires_grad(true), GraphError, "set_requires_grad", "leaf", "mul");
  CHECK_THROWS(y.set_requires_grad(false), GraphError, "set_requires_grad", "leaf");
}

BOOST_AUTO_TEST_CASE(grad_wrt_mask_or_constant) {
  Tensor x = leaf64({2, 3});
  Tensor mask = bools({2, 3});
  Tensor y = sum(masked_fill(x, mask, 0.0));
  CHECK_THROWS(grad({y}, {x, mask}), GraphError, "grad", "input 1");
  Tensor c = r64({2, 3});  // float, but does not require grad
  Tensor z = sum(mul(x, c));
  CHECK_THROWS(grad({z}, {c}), GraphError, "grad", "input 0");
  CHECK_THROWS(grad({z}, {Tensor()}), GraphError, "grad", "input 0");
}

BOOST_AUTO_TEST_CASE(grad_wrt_unused_input) {
  Tensor x = leaf64({2, 3}), unused = leaf64({3});
  Tensor y = sum(mul(x, x));
  CHECK_THROWS(grad({y}, {x, unused}, {}, GradOptions{true, false, false}), GraphError, "grad", "input 1", "(3)");
  // allow_unused: an undefined gradient instead.
  auto g = grad({y}, {x, unused}, {}, GradOptions{false, false, true});
  BOOST_TEST(g.size() == 2u);
  BOOST_TEST(g[0].defined());
  BOOST_TEST(!g[1].defined());
}

BOOST_AUTO_TEST_CASE(backward_on_non_scalar_without_grad_output) {
  Tensor x = leaf64({2, 3});
  Tensor y = mul(x, x);
  CHECK_THROWS(y.backward(), ShapeError, "backward", "(2, 3)");
  CHECK_THROWS(backward({y}), ShapeError, "backward", "(2, 3)");
  CHECK_THROWS(grad({y}, {x}), ShapeError, "grad", "(2, 3)");
}

BOOST_AUTO_TEST_CASE(grad_output_of_wrong_shape_or_dtype) {
  Tensor x = leaf64({2, 3});
  Tensor y = mul(x, x);
  CHECK_THROWS(y.backward(r64({3, 2})), ShapeError, "backward", "(3, 2)", "(2, 3)");
  CHECK_THROWS(grad({y}, {x}, {r64({6})}), ShapeError, "grad", "(6)", "(2, 3)");
  // A dtype mismatch is a DTypeError (errors.hpp: "wrong or mixed dtypes").
  CHECK_THROWS(y.backward(f32({1, 1, 1, 1, 1, 1}, {2, 3})), DTypeError, "backward", "float32", "float64", "(2, 3)");
  // Count mismatch.
  CHECK_THROWS(backward({y}, {r64({2, 3}), r64({2, 3})}), ValueError, "backward", "2");
}

BOOST_AUTO_TEST_CASE(backward_on_tensor_not_requiring_grad) {
  Tensor c = r64({1});
  CHECK_THROWS(c.backward(), GraphError, "backward", "grad");
  CHECK_THROWS(backward({}), ValueError, "backward");
}

BOOST_AUTO_TEST_CASE(second_backward_through_freed_graph) {
  Tensor x = leaf64({2, 3});
  Tensor y = sum(exp(x));
  y.backward();
  CHECK_THROWS(y.backward(), GraphError, "backward", "second time", "retain_graph");
  // The same with the functional API (the engine reports it as backward's error).
  Tensor z = sum(tanh(x));
  grad({z}, {x});
  CHECK_THROWS(grad({z}, {x}), GraphError, "backward", "second time");
  // retain_graph keeps it usable.
  Tensor w = sum(mul(x, x));
  w.backward(Tensor(), true);
  BOOST_CHECK_NO_THROW(w.backward());
}

// --- values and factories ------------------------------------------------------------------

BOOST_AUTO_TEST_CASE(item_on_multi_element_tensor) {
  CHECK_THROWS(r64({2, 3}).item(), ShapeError, "item", "(2, 3)");
  CHECK_THROWS(f64({}, {0}).item(), ShapeError, "item", "(0)");
  BOOST_TEST(r64({1, 1}).item() == 1.0);
}

BOOST_AUTO_TEST_CASE(tensor_factory_wrong_number_of_values) {
  CHECK_THROWS(tensor({1, 2, 3, 4, 5}, {2, 3}), ShapeError, "tensor", "5", "(2, 3)");
  CHECK_THROWS(tensor({1, 2}, {}, DType::Float64), ShapeError, "tensor", "2", "()");
  CHECK_THROWS(bool_tensor({true, false, true}, {2, 2}), ShapeError, "bool_tensor", "3", "(2, 2)");
}

BOOST_AUTO_TEST_CASE(index_tensor_mismatch) {
  CHECK_THROWS(index_tensor({1, 2, 3}, {2, 2}), ShapeError, "index_tensor", "3", "(2, 2)");
}

BOOST_AUTO_TEST_CASE(set_grad_of_wrong_shape) {
  Tensor x = leaf64({2, 3});
  CHECK_THROWS(x.set_grad(r64({3, 2})), ShapeError, "set_grad", "(3, 2)", "(2, 3)");
}

BOOST_AUTO_TEST_CASE(undefined_tensor_arguments) {
  CHECK_THROWS(add(Tensor(), r64({2})), ValueError, "add", "'a'", "undefined");
  CHECK_THROWS(exp(Tensor()), ValueError, "exp", "'x'", "undefined");
  CHECK_THROWS(masked_fill(r64({2}), Tensor(), 0.0), ValueError, "masked_fill", "'mask'", "undefined");
}

BOOST_AUTO_TEST_CASE(data_of_wrong_type_and_size_axis) {
  CHECK_THROWS(r64({2, 3}).data<float>(), DTypeError, "data", "float32", "float64");
  CHECK_THROWS(r64({2, 3}).size(2), IndexError, "size", "axis 2", "(2, 3)");
}

BOOST_AUTO_TEST_CASE(set_num_threads_non_positive) {
  CHECK_THROWS(set_num_threads(0), ValueError, "set_num_threads", "0");
  set_num_threads(1);
}

BOOST_AUTO_TEST_SUITE_END()
