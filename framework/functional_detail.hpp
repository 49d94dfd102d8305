// xgrad/framework/functional_detail.hpp — internals shared by functional.cpp, per_sample.cpp and
// curvature.cpp (not part of the public API).
#pragma once
#include <string>
#include <vector>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/functional.hpp"
#include "xgrad/framework/gradcheck.hpp"

namespace xgrad::functional_detail {

using Tensors = std::vector<Tensor>;

// A tensor's place in the graph, as the engine keys it: its node when it has one (every
// handle made by Node::output() shares it), else the leaf itself.
using Key = const void*;
inline Key key_of(const Tensor& t) {
  return t.grad_fn() ? static_cast<Key>(t.grad_fn().get()) : static_cast<Key>(t.impl());
}

std::string describe(const Tensor& t);  // "(2, 3) float64"
// ValueError "<op>: no function given" when f (a TensorFn, LinearOperator, ...) is empty.
template <class F> void require_function(const std::string& op, const F& f) {
  if (!f) throw_error<ValueError>(op, "no function given");
}
Shape concat_shapes(const Shape& a, const Shape& b);
// zeros(shape, dtype) with a 1 at flat `index` (float dtypes).
Tensor basis(const Shape& shape, DType dtype, std::size_t index);
// dst.flat[offset + j] += src.flat[j] for every element of src (undefined src: nothing);
// dst a float tensor, src of dst's dtype.
void add_flat(const Tensor& dst, std::size_t offset, const Tensor& src);
// For each x in xs: whether y's graph reaches it.
std::vector<bool> reachable(const Tensor& y, const Tensors& xs);

// Fresh leaves sharing each input's storage (f's graph then starts there and no .grad is
// touched); with create_graph, inputs that already require grad are used as they are.
// ValueError without inputs, DTypeError for an undefined or non-float one.
Tensors prepare_inputs(const char* op, const Tensors& inputs, bool create_graph);
// f(xs) with grad mode on; ValueError / DTypeError unless a float tensor.
Tensor evaluate(const char* op, const TensorFn& f, const Tensors& xs);
void require_scalar(const char* op, const Tensor& y);  // ValueError unless one element
// Which inputs y depends on; GraphError naming the first other one unless allow_unused.
std::vector<bool> used_inputs(const char* op, const Tensor& y, const Tensors& xs, bool allow_unused);
// ShapeError / DTypeError (ValueError if undefined) unless t has like's shape and dtype.
void check_like(const char* op, const std::string& what, const Tensor& t, const std::string& like_what,
                const Tensor& like);
// One vector per input, each like its input ("tangent 1 (3) float32 must have the shape of ...").
void check_vectors(const char* op, const char* what, const Tensors& v, const Tensors& xs);
Tensor zeros_like(const Tensor& t);
// Undefined entries (no path in the graph) replaced by zeros shaped like `like`.
Tensors fill_zeros(Tensors gs, const Tensors& like);
// sum_i <a_i, b_i> over the a_i in the graph, in `dtype`; undefined when none is.
Tensor inner(const Tensors& a, const Tensors& b, DType dtype);

// What the second-order transforms start from: fresh inputs xs, y = f(xs) (one element:
// ValueError otherwise; every input used unless allow_unused), and gs = grad y recorded with
// create_graph (entries undefined where y does not depend on x_i; all undefined when y is
// constant). v, when given, is checked against the inputs first.
struct GradientGraph {
  Tensors xs;
  Tensor y;
  Tensors gs;
};
GradientGraph gradient_graph(const char* op, const TensorFn& f, const Tensors& inputs, const Tensors* v,
                             const FunctionalOptions& options);

}  // namespace xgrad::functional_detail
