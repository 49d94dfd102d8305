// Helpers shared by op implementations.
#include "xgrad/ops/detail.hpp"

namespace xgrad::detail {

Shape broadcast_shapes(const char* op, const char* arg_a, const Shape& a, const char* arg_b,
                       const Shape& b) {
  std::size_t r = std::max(a.size(), b.size());
  Shape pa = pad_left(a, r), pb = pad_left(b, r), out(r);
  for (std::size_t d = 0; d < r; ++d) {
    if (pa[d] == pb[d] || pb[d] == 1) out[d] = pa[d];
    else if (pa[d] == 1) out[d] = pb[d];
    else
      throw ShapeError(std::string(op) + ": argument '" + arg_a + "' " + shape_str(a) +
                       " and argument '" + arg_b + "' " + shape_str(b) +
                       " cannot be broadcast together (dimension " + std::to_string(d) + ")");
  }
  return out;
}

AxisSplit split_at(const Shape& shape, std::size_t axis) {
  AxisSplit s;
  for (std::size_t d = 0; d < axis; ++d) s.outer *= shape[d];
  s.n = shape[axis];
  for (std::size_t d = axis + 1; d < shape.size(); ++d) s.inner *= shape[d];
  return s;
}

std::vector<std::size_t> broadcast_strides(const Shape& shape, const Shape& full) {
  std::vector<std::size_t> st(shape.size(), 0);
  std::size_t s = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    st[d] = (shape[d] == 1 && full[d] != 1) ? 0 : s;
    s *= shape[d];
  }
  return st;
}

std::vector<std::size_t> contiguous_strides(const Shape& shape) {
  std::vector<std::size_t> st(shape.size());
  std::size_t s = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    st[d] = s;
    s *= shape[d];
  }
  return st;
}

Shape pad_left(const Shape& shape, std::size_t rank) {
  Shape p(rank - std::min(rank, shape.size()), 1);
  p.insert(p.end(), shape.begin(), shape.end());
  return p;
}

}  // namespace xgrad::detail
