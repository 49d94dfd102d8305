// xgrad/framework/tensor.hpp — the tensor handle.
//
// A Tensor is a cheap, shared handle (like torch.Tensor): copying it shares the value.
// The value is one row-major buffer owned by the implementation; this header keeps xtensor
// out so that including it is cheap. Op authors who need the values (as pointers or as
// xtensor expressions) include xgrad/framework/array.hpp.
//
// dtypes: Float32 and Float64 are differentiable; Bool (masks) and Int64 (indices) are
// not. Every op is written once as a template over the float type and dispatched at run
// time on dtype(); mixing float dtypes in one op throws DTypeError.
#pragma once
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <iosfwd>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "xgrad/framework/errors.hpp"

namespace xgrad {

enum class DType { Float32, Float64, Bool, Int64 };
const char* dtype_name(DType dtype);
inline bool is_float(DType d) { return d == DType::Float32 || d == DType::Float64; }
std::size_t itemsize(DType dtype);  // bytes per element: 4, 8, 1 (bool), 8

// Element count; ValueError when it overflows or exceeds 2^40. A shape with a zero dimension
// has 0 elements, but the product of its other dimensions (its strides) is held to 2^40 too.
std::size_t numel(const Shape& shape);
// Before allocating a tensor of `shape` and `dtype` for op: returns numel(shape); ValueError
// "op: shape (...) has more than 2^40 elements" or MemoryError "op: a float32 tensor of shape
// (...) needs N bytes, more than max_tensor_bytes() = M ..." (framework/runtime.hpp).
std::size_t check_tensor_size(const char* op, const Shape& shape, DType dtype);

// --- random numbers -----------------------------------------------------------------------
// Rng: std::mt19937_64 (whose raw output the C++ standard fixes bit for bit) plus xgrad's
// own samplers. The std:: distributions (normal_distribution, uniform_int_distribution,
// shuffle, ...) use implementation-defined algorithms: libc++ and libstdc++ give different
// numbers for one seed. The members below are defined here, inline, with fixed algorithms,
// so they give the same numbers with every standard library and compiler; normal() calls
// std::log, std::sqrt and std::cos, so it needs the same libm too (glibc's, with either
// libstdc++ or libc++), and no -ffast-math. Rng is still a UniformRandomBitGenerator, so
// std:: algorithms accept it (but then their numbers are the library's again).
//
//   operator()()         the engine's next 64-bit output
//   uniform()            [0, 1): the top 53 bits of one output times 2^-53 (exact)
//   uniform(lo, hi)      [lo, hi): std::fma(hi - lo, uniform(), lo) (one rounding, so
//                        FMA contraction cannot change it), hi itself mapped to the next
//                        double below hi; one output. ValueError unless lo <= hi, finite.
//   normal()             N(0, 1) by Box–Muller, cosine branch only, no cached second value:
//                        u1 = 1 - uniform() in (0, 1], then u2 = uniform();
//                        sqrt(-2 log u1) * cos(2 pi u2). Exactly two outputs per call.
//   uniform_int(lo, hi)  inclusive, unbiased: n = hi - lo + 1 (mod 2^64); outputs x below
//                        2^64 mod n are rejected, the result is lo + x mod n (one output
//                        except with probability < n / 2^64); the full int64 range takes
//                        one output as is. ValueError naming both values if lo > hi.
//   bernoulli(p)         uniform() < p; one output. ValueError unless 0 <= p <= 1.
//   shuffle(first, last) Fisher–Yates from the back: for i = n-1 .. 1 swap element i
//                        with element uniform_int(0, i). Random-access iterators.
// The class sits in its own namespace (an argument-dependent lookup barrier): an Rng
// argument does not pull xgrad's functions into unqualified calls, as with the former
// `using Rng = std::mt19937_64` (a file's own `randn(shape, rng)` stays unambiguous).
namespace rng_detail {
class Rng {
 public:
  using result_type = std::uint64_t;
  static constexpr std::uint64_t default_seed = 5489u;  // std::mt19937_64's

  Rng() : engine_(default_seed) {}
  explicit Rng(std::uint64_t seed) : engine_(seed) {}
  void seed(std::uint64_t s) { engine_.seed(s); }

  static constexpr result_type min() { return std::mt19937_64::min(); }
  static constexpr result_type max() { return std::mt19937_64::max(); }
  result_type operator()() { return engine_(); }

  double uniform() { return double(engine_() >> 11) * 0x1.0p-53; }

  double uniform(double lo, double hi) {
    if (!(lo <= hi) || !std::isfinite(hi - lo))
      throw_error<ValueError>("Rng::uniform", "need lo <= hi and a finite hi - lo, got lo = ", str(lo), ", hi = ", str(hi));
    const double r = std::fma(hi - lo, uniform(), lo);
    return r < hi ? r : (lo < hi ? std::nextafter(hi, lo) : lo);
  }

  double normal() {
    const double u1 = 1.0 - uniform();  // (0, 1]: log(u1) is finite
    const double u2 = uniform();
    constexpr double two_pi = 6.283185307179586;  // nearest double to 2 pi
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2);
  }

  std::int64_t uniform_int(std::int64_t lo, std::int64_t hi) {
    if (lo > hi)
      throw_error<ValueError>("Rng::uniform_int", "lo (", lo, ") > hi (", hi, ")");
    const std::uint64_t span = std::uint64_t(hi) - std::uint64_t(lo);  // n - 1
    std::uint64_t x = engine_();
    if (span != ~std::uint64_t(0)) {
      const std::uint64_t n = span + 1;
      const std::uint64_t reject_below = (0 - n) % n;  // 2^64 mod n
      while (x < reject_below) x = engine_();
      x %= n;
    }
    return from_offset(lo, x);
  }

  bool bernoulli(double p) {
    if (!(p >= 0.0 && p <= 1.0))
      throw_error<ValueError>("Rng::bernoulli", "p must be in [0, 1], got ", str(p));
    return uniform() < p;
  }

  template <class RandomIt>
  void shuffle(RandomIt first, RandomIt last) {
    const auto n = last - first;
    for (auto i = n - 1; i > 0; --i) {
      const auto j = uniform_int(0, std::int64_t(i));
      using std::swap;
      swap(first[i], first[decltype(i)(j)]);
    }
  }

  std::mt19937_64& engine() { return engine_; }
  const std::mt19937_64& engine() const { return engine_; }
  friend bool operator==(const Rng& a, const Rng& b) { return a.engine_ == b.engine_; }
  friend bool operator!=(const Rng& a, const Rng& b) { return !(a == b); }

 private:
  static std::string str(double v) {  // round-trip precision, unlike std::to_string
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.17g", v);
    return buf;
  }
  // lo + offset in two's complement, without signed overflow.
  static std::int64_t from_offset(std::int64_t lo, std::uint64_t offset) {
    const std::uint64_t u = std::uint64_t(lo) + offset;
    return u <= std::uint64_t(std::numeric_limits<std::int64_t>::max())
               ? std::int64_t(u)
               : -std::int64_t(~u) - 1;
  }
  std::mt19937_64 engine_;
};
}  // namespace rng_detail
using Rng = rng_detail::Rng;

struct TensorImpl;
class Node;

class Tensor {
 public:
  Tensor() = default;  // undefined; defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl);

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const;
  std::size_t dim() const { return shape().size(); }
  std::size_t size(int axis) const;  // negative axes count from the end
  std::size_t numel() const;
  DType dtype() const;

  // --- autodiff -------------------------------------------------------------------------
  bool requires_grad() const;
  // Leaves only; float dtypes only. Returns *this for chaining.
  const Tensor& set_requires_grad(bool on = true) const;
  bool is_leaf() const;                        // no grad_fn
  const std::shared_ptr<Node>& grad_fn() const;
  Tensor grad() const;                         // accumulated gradient; undefined if none
  void set_grad(const Tensor& g) const;
  void zero_grad() const;                      // drops .grad (like set_to_none=True)
  // Reverse-mode from this tensor. grad_output defaults to 1 for a one-element tensor.
  void backward(const Tensor& grad_output = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  // Same value (shared storage), cut from the graph, requires_grad false.
  Tensor detach() const;

  // --- values ---------------------------------------------------------------------------
  std::vector<double> to_vector() const;       // any dtype, row-major, as double
  double item() const;                         // one-element tensors
  Tensor to(DType dtype) const;                // differentiable cast between float dtypes
  Tensor clone() const;                        // deep copy of the value, no graph
  // Raw row-major data. T must match dtype() exactly (float, double, bool, int64_t).
  template <class T> const T* data() const;
  // In-place writes. They bypass autodiff (use them for optimisers, loading, initialising)
  // and bump version(): a recorded op that saved this tensor before the write throws
  // GraphError when its backward runs ("modified in place after the forward"), as PyTorch.
  // Write between a backward and the next forward (NoGradGuard does not exempt a write from
  // the check: what matters is whether a graph not yet backpropagated saved the tensor).
  template <class T> T* mutable_data() const;  // bumps version()
  void* mutable_raw_data() const;              // the row-major bytes, any dtype; bumps version()
  const void* raw_data() const;                // the row-major bytes, any dtype (read only)
  // Storage version: 0 when made, +1 per in-place write path above (shared by every handle
  // to the same storage: detach(), a node's saved output). bump_version() is for code that
  // writes through a pointer obtained otherwise.
  std::uint64_t version() const;
  void bump_version() const;
  std::size_t nbytes() const { return numel() * itemsize(dtype()); }

  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);
std::ostream& operator<<(std::ostream& os, DType d);

// --- factories ----------------------------------------------------------------------------
Tensor tensor(const std::vector<double>& values, const Shape& shape,
              DType dtype = DType::Float32);
Tensor scalar(double value, DType dtype = DType::Float32);  // rank 0
Tensor zeros(const Shape& shape, DType dtype = DType::Float32);
Tensor ones(const Shape& shape, DType dtype = DType::Float32);
Tensor full(const Shape& shape, double value, DType dtype = DType::Float32);
Tensor randn(const Shape& shape, Rng& rng, DType dtype = DType::Float32);
Tensor uniform(const Shape& shape, double low, double high, Rng& rng,
               DType dtype = DType::Float32);
Tensor bool_tensor(const std::vector<bool>& values, const Shape& shape);
Tensor index_tensor(const std::vector<std::int64_t>& values, const Shape& shape);
Tensor arange(std::size_t n, DType dtype = DType::Float32);  // 0, 1, ..., n - 1
// start, start + step, ... below end (above end for step < 0), as torch.arange / numpy.arange:
// ceil((end - start) / step) elements, element i = start + i * step computed in float64 and
// rounded to dtype (Float32, Float64 or Int64; DTypeError for Bool). ValueError if step is 0,
// a value is not finite, or step points away from end (as PyTorch: arange(5, 0) is an error,
// arange(3, 3) is empty); for Int64, start, end and step must be whole numbers of magnitude
// at most 2^53 (PyTorch truncates), and the values are computed exactly in int64. The size is
// checked before anything is allocated (check_tensor_size).
Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::Float32);
// Int64 values uniform in [low, high) of the given shape, one Rng::uniform_int(low, high - 1)
// per element in row-major order (so the same on every machine and standard library).
// ValueError unless low < high.
Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Rng& rng);

// ValueError "op: argument 'arg' is undefined" unless t is defined.
void check_defined(const char* op, const char* arg, const Tensor& t);
// check_defined, then DTypeError naming op and arg unless t has a float dtype.
void check_float(const char* op, const char* arg, const Tensor& t);
// check_float on both, then check_same_dtype.
void check_same_float(const char* op, const char* arg_a, const Tensor& a, const char* arg_b,
                      const Tensor& b);
// DTypeError unless a and b (both defined) have one dtype: "op: mixed dtypes: 'a' is float32 (2),
// 'b' is float64 (2) (convert with .to())".
void check_same_dtype(const char* op, const char* arg_a, const Tensor& a, const char* arg_b,
                      const Tensor& b);
// ShapeError unless t has `rank` axes: "op: argument 'arg' (2, 3) must be LAYOUT" when a layout
// such as "(B, H, L, D)" is given, else "... must have rank R".
void check_rank(const char* op, const char* arg, const Tensor& t, std::size_t rank, const char* layout = nullptr);
// ShapeError unless t's shape is `expected`: "op: argument 'arg' (3) must be (4)", or
// "... must be LAYOUT = (4)" when a layout such as "(B, S)" is given.
void check_shape(const char* op, const char* arg, const Tensor& t, const Shape& expected,
                 const char* layout = nullptr);
// ShapeError unless a and b have one shape: "op: argument 'x' (2) and 'g' (3) must have one shape".
void check_same_shape(const char* op, const char* arg_a, const Tensor& a, const char* arg_b, const Tensor& b);
// Normalises a possibly negative axis of argument 'x' with the given shape (or of a
// tensor of rank `rank`); IndexError naming op, axis and shape otherwise.
std::size_t normalize_axis(const char* op, long axis, const Shape& shape);
std::size_t normalize_axis(const char* op, long axis, std::size_t rank);
// For an op that takes a rank-0 argument as one element along axis 0: IndexError naming
// argument `arg` of shape () unless axis is 0 or -1 (as PyTorch).
void check_scalar_axis(const char* op, long axis, const char* arg = "x");

}  // namespace xgrad
