// xgrad/framework/errors.hpp — the exceptions every user-caused error throws.
//
// All derive from xgrad::Error (itself a std::runtime_error). Messages always start with
// the op's name and name the offending argument and the shapes involved, e.g.
//   matmul: argument 'b' has shape (3, 4) but 'a' has shape (2, 5): inner dimensions 5 != 3
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

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

// "(2, 3, 4)"; "()" for a scalar.
std::string shape_str(const std::vector<std::size_t>& shape);

}  // namespace xgrad
