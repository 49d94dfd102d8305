// Absurd sizes: every allocation whose size a caller's argument decides is checked before
// anything is allocated (element count against 2^40: ValueError; bytes against
// max_tensor_bytes(): MemoryError), and the error names the op and the shape. None of these
// cases allocates: the suite passes under `ulimit -v` of a few GiB. A message from the
// allocator backstop ("allocate: ...") would mean the op allocated before checking, so each
// case requires the op's own name first. Empty tensors work while the product of their other dimensions (their strides) is within 2^40.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <exception>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "sanitized.hpp"
#include "xgrad/framework/array.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include <xtensor/xbroadcast.hpp>

using namespace xgrad;

namespace {

constexpr std::size_t kMax = SIZE_MAX;
constexpr std::size_t k20 = std::size_t(1) << 20;

template <class E, class F> void expect_error(F&& f, const std::string& op, const std::vector<std::string>& parts) {
  try {
    f();
    BOOST_ERROR("no exception (" << op << ")");
  } catch (const E& e) {
    const std::string msg = e.what();
    BOOST_TEST_INFO("message: " << msg);
    BOOST_CHECK(msg.rfind(op + ": ", 0) == 0);
    for (const auto& p : parts) BOOST_CHECK(msg.find(p) != std::string::npos);
  } catch (const std::exception& e) {
    BOOST_ERROR("expected " << op << " to throw the documented xgrad error, got " << test::error_kind(e) << ": "
                            << e.what());
  }
}

// Restores the limit when a test changes it.
struct LimitGuard {
  std::size_t saved = max_tensor_bytes();
  ~LimitGuard() { set_max_tensor_bytes(saved); }
};

// Tests must not depend on the machine's RAM: a fixed limit well below 2^40 bytes.
struct FixedLimit : LimitGuard {
  FixedLimit() { set_max_tensor_bytes(std::size_t(64) << 30); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(sizes)

BOOST_AUTO_TEST_CASE(factories_check_bytes_before_allocating) {
  FixedLimit limit;
  const std::string big = "(1099511627776)";
  expect_error<MemoryError>([] { zeros({std::size_t(1) << 40}); }, "zeros",
                            {"float32 tensor of shape " + big, "4398046511104 bytes", "max_tensor_bytes() = 68719476736"});
  expect_error<MemoryError>([] { ones({k20, k20}, DType::Float64); }, "ones", {"float64", "(1048576, 1048576)"});
  expect_error<MemoryError>([] { full({k20, k20}, 2.0); }, "full", {"(1048576, 1048576)"});
  Rng rng(1);
  expect_error<MemoryError>([&] { randn({k20, k20}, rng); }, "randn", {"(1048576, 1048576)"});
  expect_error<MemoryError>([&] { uniform({k20, k20}, 0, 1, rng); }, "uniform", {"(1048576, 1048576)"});
  BOOST_TEST((rng == Rng(1)));  // no number drawn
}

BOOST_AUTO_TEST_CASE(element_count_overflow_is_a_value_error) {
  expect_error<ValueError>([] { arange(kMax); }, "arange", {"shape (18446744073709551615)", "more than 2^40 elements"});
  expect_error<ValueError>([] { zeros({kMax, 2}); }, "zeros", {"(18446744073709551615, 2)", "2^40"});
  expect_error<ValueError>([] { zeros({std::size_t(1) << 32, std::size_t(1) << 32}); }, "zeros", {"2^40"});
  expect_error<ValueError>([] { tensor({1}, {kMax, kMax}); }, "tensor", {"(18446744073709551615, 18446744073709551615)"});
}

BOOST_AUTO_TEST_CASE(causal_mask_too_large) {
  FixedLimit limit;
  expect_error<MemoryError>([] { causal_mask(k20, k20); }, "causal_mask",
                            {"bool tensor of shape (1048576, 1048576)", "1099511627776 bytes"});
  expect_error<ValueError>([] { causal_mask(kMax, 2); }, "causal_mask", {"(18446744073709551615, 2)"});
}

BOOST_AUTO_TEST_CASE(op_outputs_too_large) {
  FixedLimit limit;
  Tensor col = zeros({k20, 1}), row = zeros({1, k20});
  expect_error<MemoryError>([&] { add(col, row); }, "add", {"(1048576, 1048576)"});
  expect_error<MemoryError>([&] { mul(col, row); }, "mul", {"(1048576, 1048576)"});
  expect_error<ValueError>([&] { add(zeros({4 * k20, 1}), zeros({1, 4 * k20})); }, "add", {"(4194304, 4194304)", "2^40"});
  expect_error<MemoryError>([&] { matmul(col, row); }, "matmul", {"(1048576, 1048576)"});
  expect_error<MemoryError>([&] { linear(col, zeros({k20, 1})); }, "linear", {"(1048576, 1048576)"});
  expect_error<MemoryError>([&] { broadcast_to(zeros({1}), {k20, k20}); }, "broadcast_to", {"(1048576, 1048576)"});
  expect_error<MemoryError>([] { one_hot(index_tensor({0, 1}, {2}), std::size_t(1) << 36); }, "one_hot",
                            {"(2, 68719476736)"});
  expect_error<MemoryError>([] { unnarrow(zeros({2}), 0, 0, std::size_t(1) << 38); }, "unnarrow", {"(274877906944)"});
}

// An empty tensor's other dimensions still set its strides (the stride of a dim is the
// product of the dims after it): their product is held to 2^40 like an element count. At
// the limit an empty tensor works; past it (where xtensor's strides would overflow a
// ptrdiff_t: (0, 2^63, 1) was found by fuzz_safetensors) it is a ValueError naming the shape.
constexpr std::size_t k40 = std::size_t(1) << 40;

BOOST_AUTO_TEST_CASE(concat_and_reshape_of_empty_tensors_at_the_stride_limit) {
  FixedLimit limit;
  Tensor e = zeros({0, k40});  // 0 elements, valid
  BOOST_TEST(e.numel() == 0u);
  Tensor c = concat({e, e}, 0);
  BOOST_TEST((c.shape() == Shape{0, k40}));
  Tensor r = reshape(zeros({0, 4}), {k40, 0});
  BOOST_TEST((r.shape() == Shape{k40, 0}));
  expect_error<ValueError>([] { reshape(zeros({1, 1}), {kMax, 2}); }, "reshape", {"(18446744073709551615, 2)", "2^40"});
}

BOOST_AUTO_TEST_CASE(empty_tensors_past_the_stride_limit_are_refused) {
  const std::string why = "product of its non-zero dimensions exceeds 2^40";
  expect_error<ValueError>([] { zeros({0, kMax}); }, "zeros", {"(0, 18446744073709551615)", why});
  expect_error<ValueError>([] { zeros({0, std::size_t(1) << 63, 1}); }, "zeros", {"(0, 9223372036854775808, 1)", why});
  expect_error<ValueError>([] { zeros({k40, 0, 2}); }, "zeros", {"(1099511627776, 0, 2)", why});
  expect_error<ValueError>([] { reshape(zeros({0, 4}), {kMax, 0}); }, "reshape", {"(18446744073709551615, 0)", why});
}

BOOST_AUTO_TEST_CASE(sum_over_empty_tensor_with_large_dimension) {
  FixedLimit limit;
  Tensor e = zeros({0, k40});
  BOOST_TEST(sum(e).item() == 0.0);
  Tensor s1 = sum(e, {1});  // (0)
  BOOST_TEST((s1.shape() == Shape{0}));
  Tensor m1 = mean(e, {1});
  BOOST_TEST((m1.shape() == Shape{0}));
  // Summing away the zero axis would give 2^40 zeros (4 TiB): a clear error, not bad_array_new_length.
  expect_error<MemoryError>([&] { sum(e, {0}); }, "sum", {"(1099511627776)"});
  expect_error<MemoryError>([&] { mean(e, {0}); }, "mean", {"(1, 1099511627776)"});
  Tensor small = zeros({0, 3});
  BOOST_TEST(test::allclose(sum(small, {0}), {0, 0, 0}));
}

BOOST_AUTO_TEST_CASE(linear_layer_too_large) {
  FixedLimit limit;
  Rng rng(2);
  // The layer checks its parameter before the initialiser allocates: the message names the
  // module, the parameter and the shape.
  expect_error<MemoryError>([&] { Linear(k20, k20, true, rng); }, "Linear",
                            {"parameter 'weight' (out_features, in_features)", "(1048576, 1048576)"});
}

// The messages that did not name the module or the argument (size_t(-1) and
// size_t(-8) wrapped; they are reported as given).
BOOST_AUTO_TEST_CASE(absurd_module_sizes_name_the_module_and_parameter) {
  Rng rng(3);
  expect_error<ValueError>([&] { MultiHeadAttention m(MultiHeadAttentionOptions(std::size_t(-1), 1), rng); },
                           "MultiHeadAttention",
                           {"parameter 'out_proj.weight' (embed_dim, embed_dim)", "18446744073709551615", "2^40"});
  expect_error<ValueError>([&] { Embedding e(std::size_t(-8), 4, rng); }, "Embedding",
                           {"parameter 'weight' (num_embeddings, dim)", "(18446744073709551608, 4)"});
  expect_error<ValueError>([&] { MultiHeadAttention m(MultiHeadAttentionOptions(8, 2).kdim(std::size_t(1) << 40), rng); },
                           "MultiHeadAttention", {"parameter 'k_proj_weight' (embed_dim, kdim)", "(8, 1099511627776)"});
  expect_error<ValueError>([&] { LearnedPositionalEncoding p(std::size_t(1) << 39, 4, rng); }, "LearnedPositionalEncoding",
                           {"parameter 'weight' (max_len, dim)"});
  expect_error<ValueError>([&] { SinusoidalPositionalEncoding p(std::size_t(1) << 39, 4); }, "SinusoidalPositionalEncoding",
                           {"parameter 'table' (max_len, dim)"});
  expect_error<ValueError>([&] { LayerNorm l(std::size_t(1) << 41); }, "LayerNorm", {"parameter 'weight' (dim)"});
}

// A genuine out-of-memory under max_tensor_bytes() (here: the address space limited to 1 GiB
// in a forked child) is a MemoryError naming the op and the shape, not std::bad_alloc.
// Skipped under sanitizers, whose shadow memory needs more address space than that.
BOOST_AUTO_TEST_CASE(genuine_out_of_memory_is_a_memory_error_naming_the_op) {
#ifdef XGRAD_TEST_SANITIZED
  BOOST_TEST_MESSAGE("skipped under a sanitizer");
#else
  const pid_t pid = ::fork();
  BOOST_TEST_REQUIRE(pid >= 0);
  if (pid == 0) {
    struct rlimit lim {std::size_t(1) << 30, std::size_t(1) << 30};
    if (::setrlimit(RLIMIT_AS, &lim) != 0) ::_exit(10);
    set_max_tensor_bytes(std::size_t(1) << 40);
    try {
      zeros({std::size_t(1) << 29});  // 2 GiB of float32: under the limit, over the address space
      ::_exit(11);
    } catch (const MemoryError& e) {
      const std::string m = e.what();
      ::_exit(m.rfind("zeros: out of memory for a float32 tensor of shape (536870912)", 0) == 0 ? 0 : 12);
    } catch (...) {
      ::_exit(13);
    }
  }
  int status = 0;
  BOOST_TEST_REQUIRE(::waitpid(pid, &status, 0) == pid);
  BOOST_TEST_REQUIRE(WIFEXITED(status));
  BOOST_TEST(WEXITSTATUS(status) == 0, "child exit " << WEXITSTATUS(status)
                                                     << " (10 setrlimit failed, 11 no error, 12 wrong message, 13 not MemoryError)");
#endif
}

BOOST_AUTO_TEST_CASE(limit_is_settable_and_checked) {
  LimitGuard guard;
  BOOST_CHECK_THROW(set_max_tensor_bytes(0), ValueError);
  set_max_tensor_bytes(1000);
  BOOST_TEST(max_tensor_bytes() == 1000u);
  BOOST_CHECK_NO_THROW(zeros({250}));  // exactly 1000 bytes
  expect_error<MemoryError>([] { zeros({251}); }, "zeros", {"(251)", "1004 bytes", "max_tensor_bytes() = 1000"});
  Tensor a = zeros({100}), b = zeros({100, 1});
  expect_error<MemoryError>([&] { add(a, b); }, "add", {"(100, 100)", "40000 bytes"});
  // Outputs larger than any input: many references to one tensor, a batched product.
  expect_error<MemoryError>([&] { concat({a, a, a}, 0); }, "concat", {"(300)", "1200 bytes"});
  Tensor col = zeros({16, 1}), row = zeros({1, 16});
  expect_error<MemoryError>([&] { matmul(col, row); }, "matmul", {"(16, 16)", "1024 bytes"});
  BOOST_CHECK_NO_THROW(concat({a, a}, 0));  // 800 bytes
}

BOOST_AUTO_TEST_CASE(allocator_backstop_is_a_memory_error) {
  LimitGuard guard;
  set_max_tensor_bytes(4096);
  Tensor m = bool_tensor(std::vector<bool>(64, false), {64});
  // An op's xtensor expression is evaluated into a tensor checked under the op's name.
  expect_error<MemoryError>([&] { expand_mask("probe", m, {128, 64}); }, "probe",
                            {"bool tensor of shape (128, 64)", "max_tensor_bytes() = 4096"});
  // One evaluated into a container outside the ops' checks still goes through the tensor
  // allocator, which refuses buffers over the limit with MemoryError (never std::bad_alloc).
  expect_error<MemoryError>(
      [&] {
        xt::xarray<bool> a = xt::broadcast(value<bool>(m), std::vector<std::size_t>{128, 64});
        (void)a;
      },
      "allocate", {"8192 elements of 1 bytes", "max_tensor_bytes() = 4096"});
}

BOOST_AUTO_TEST_SUITE_END()
