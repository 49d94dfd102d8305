// xgrad/framework/tensor.hpp — the tensor handle.
//
// A Tensor is a cheap, shared handle (like torch.Tensor): copying it shares the value.
// The value is an xtensor container owned by the implementation; this header keeps
// xtensor out so that including it is cheap. Op authors who need the container include
// xgrad/framework/array.hpp.
//
// dtypes: Float32 and Float64 are differentiable; Bool (masks) and Int64 (indices) are
// not. Every op is written once as a template over the float type and dispatched at run
// time on dtype(); mixing float dtypes in one op throws DTypeError.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "xgrad/framework/errors.hpp"

namespace xgrad {

enum class DType { Float32, Float64, Bool, Int64 };
const char* dtype_name(DType dtype);
inline bool is_float(DType d) { return d == DType::Float32 || d == DType::Float64; }
std::size_t itemsize(DType dtype);  // bytes per element: 4, 8, 1 (bool), 8

using Shape = std::vector<std::size_t>;
std::size_t numel(const Shape& shape);

using Rng = std::mt19937_64;

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
  template <class T> T* mutable_data() const;  // writes bypass autodiff: use for optimisers
  const void* raw_data() const;                // the row-major bytes, any dtype
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
Tensor arange(std::size_t n, DType dtype = DType::Float32);

// Throws DTypeError naming op and arg unless t is defined and of a float dtype.
void check_float(const char* op, const char* arg, const Tensor& t);
// Throws DTypeError unless both float and of one dtype.
void check_same_float(const char* op, const char* arg_a, const Tensor& a, const char* arg_b,
                      const Tensor& b);
// Normalises a possibly negative axis of argument 'x' with the given shape (or of a
// tensor of rank `rank`); IndexError naming op, axis and shape otherwise.
std::size_t normalize_axis(const char* op, long axis, const Shape& shape);
std::size_t normalize_axis(const char* op, long axis, std::size_t rank);

}  // namespace xgrad
