// xgrad/framework/errors.hpp — the exceptions every user-caused error throws.
//
// All derive from xgrad::Error (itself a std::runtime_error). Messages always start with
// the op's name and name the offending argument and the shapes involved, e.g.
//   matmul: argument 'b' has shape (3, 4) but 'a' has shape (2, 5): inner dimensions 5 != 3
//
// Build them with throw_error<E>(op, parts...) (or the tensor checks of framework/tensor.hpp:
// check_defined, check_float, check_same_float, check_same_dtype, check_rank, check_shape,
// check_same_shape), not by hand:
//   throw_error<ShapeError>("linear", "argument 'bias' ", bias.shape(), " must be (", out, ")");
// throws ShapeError("linear: argument 'bias' (3) must be (4)").
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "xgrad/framework/shape.hpp"

namespace xgrad {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};
struct ShapeError : Error { using Error::Error; };   // wrong rank or incompatible shapes
struct DTypeError : Error { using Error::Error; };   // wrong or mixed dtypes
struct IndexError : Error { using Error::Error; };   // axis or index out of range
struct ValueError : Error { using Error::Error; };   // an argument's value is invalid
struct GraphError : Error { using Error::Error; };   // misuse of the autodiff graph
struct IOError : Error { using Error::Error; };      // unreadable or malformed file
struct AnomalyError : Error { using Error::Error; }; // anomaly mode: an op made NaN/inf
// A tensor larger than max_tensor_bytes() (framework/runtime.hpp) was requested, checked
// before anything is allocated ("zeros: a float32 tensor of shape (1099511627776) needs
// 4398046511104 bytes, more than max_tensor_bytes() = ..."), or the allocator itself failed
// (a genuine out-of-memory: "allocate: out of memory ..."). State is unchanged either way.
struct MemoryError : Error { using Error::Error; };

// "(2, 3, 4)"; "()" for a scalar.
std::string shape_str(const Shape& shape);

namespace detail {
inline void append_part(std::string& s, const std::string& v) { s += v; }
inline void append_part(std::string& s, const char* v) { s += v; }
inline void append_part(std::string& s, char v) { s += v; }
inline void append_part(std::string& s, const Shape& shape) { s += shape_str(shape); }
void append_part(std::string& s, double v);  // 10 significant digits; "nan", "inf"
template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> && !std::is_same_v<T, char>, int> = 0>
void append_part(std::string& s, T v) { s += std::to_string(v); }
}  // namespace detail

// "op: " followed by the parts (strings, integers, doubles, shapes as "(2, 3)"), thrown as E.
template <class E, class... Parts> [[noreturn]] void throw_error(const std::string& op, const Parts&... parts) {
  std::string s = op + ": ";
  (detail::append_part(s, parts), ...);
  throw E(s);
}

}  // namespace xgrad
