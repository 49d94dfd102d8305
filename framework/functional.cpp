// vjp, jvp, jacobian, hessian, hvp, vhp on the reverse-mode engine (framework/functional.hpp).
#include "xgrad/framework/functional.hpp"

#include <algorithm>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "xgrad/framework/functional_detail.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad {

namespace functional_detail {

std::string describe(const Tensor& t) { return shape_str(t.shape()) + " " + dtype_name(t.dtype()); }

Shape concat_shapes(const Shape& a, const Shape& b) {
  Shape s = a;
  s.insert(s.end(), b.begin(), b.end());
  return s;
}

Tensor basis(const Shape& shape, DType dtype, std::size_t index) {
  Tensor e = zeros(shape, dtype);
  if (dtype == DType::Float64) e.mutable_data<double>()[index] = 1.0;
  else e.mutable_data<float>()[index] = 1.0f;
  return e;
}

namespace {
template <class T> void add_flat_typed(const Tensor& dst, std::size_t offset, const Tensor& src) {
  T* d = dst.mutable_data<T>() + offset;
  const T* s = src.data<T>();
  for (std::size_t j = 0, n = src.numel(); j < n; ++j) d[j] += s[j];
}
}  // namespace

void add_flat(const Tensor& dst, std::size_t offset, const Tensor& src) {
  if (!src.defined()) return;
  if (src.dtype() != dst.dtype())
    throw_error<DTypeError>("add_flat", "a ", describe(src), " tensor added into a ", describe(dst), " one");
  if (dst.dtype() == DType::Float64) add_flat_typed<double>(dst, offset, src);
  else add_flat_typed<float>(dst, offset, src);
}

std::vector<bool> reachable(const Tensor& y, const Tensors& xs) {
  std::unordered_map<Key, std::vector<std::size_t>> wanted;
  for (std::size_t i = 0; i < xs.size(); ++i) wanted[key_of(xs[i])].push_back(i);
  std::vector<bool> found(xs.size(), false);
  if (!y.defined() || !y.requires_grad()) return found;
  std::vector<Tensor> stack{y};
  std::unordered_set<Key> seen{key_of(y)};
  while (!stack.empty()) {
    Tensor t = std::move(stack.back());
    stack.pop_back();
    auto it = wanted.find(key_of(t));
    if (it != wanted.end())
      for (std::size_t i : it->second) found[i] = true;
    if (const auto& node = t.grad_fn())
      for (const auto& in : node->inputs())
        if (in.requires_grad() && seen.insert(key_of(in)).second) stack.push_back(in);
  }
  return found;
}

// The variable of one input slot whose tensor requires grad, under create_graph: the tensor
// itself, or (when the same tensor fills several slots) a recorded identity of it per slot, so
// each slot is its own node as without create_graph and gradients still reach the tensor.
Tensor slot_variable(const Tensor& x, bool repeated) {
  if (!repeated) return x;
  return record("identity", x.detach(), {x}, [](const Node&, const Tensor& g) { return Tensors{g}; });
}

// Fresh leaves sharing each input's storage (f's graph then starts here and no .grad is
// touched); with create_graph an input that already requires grad is kept, so results stay
// differentiable with respect to it. Every slot is its own variable in both modes.
Tensors prepare_inputs(const char* op, const Tensors& inputs, bool create_graph) {
  if (inputs.empty()) throw_error<ValueError>(op, "no inputs given");
  std::unordered_map<Key, std::size_t> uses;  // slots holding each input that requires grad
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& x = inputs[i];
    if (!x.defined()) throw_error<DTypeError>(op, "input ", i, " is undefined");
    if (!is_float(x.dtype()))
      throw_error<DTypeError>(op, "input ", i, " ", describe(x), " is not differentiable: inputs must be float32 or float64");
    if (x.requires_grad()) ++uses[key_of(x)];
  }
  Tensors xs;
  for (const Tensor& x : inputs) {
    if (create_graph && x.requires_grad()) {
      EnableGradGuard grad_on;
      xs.push_back(slot_variable(x, uses[key_of(x)] > 1));
    } else {
      Tensor leaf = x.detach();
      leaf.set_requires_grad(true);
      xs.push_back(leaf);
    }
  }
  return xs;
}

Tensor evaluate(const char* op, const TensorFn& f, const Tensors& xs) {
  require_function(op, f);
  EnableGradGuard grad_on;
  Tensor y = f(xs);
  if (!y.defined()) throw_error<ValueError>(op, "f returned an undefined tensor");
  if (!is_float(y.dtype()))
    throw_error<DTypeError>(op, "f returned a ", describe(y), " tensor: its output must be float32 or float64");
  return y;
}

void require_scalar(const char* op, const Tensor& y) {
  if (y.numel() != 1)
    throw_error<ValueError>(op, "f must return a scalar (one element), but it returned ", describe(y));
}

// The inputs y depends on; GraphError for the others unless allow_unused.
std::vector<bool> used_inputs(const char* op, const Tensor& y, const Tensors& xs, bool allow_unused) {
  std::vector<bool> used = reachable(y, xs);
  for (std::size_t i = 0; i < xs.size(); ++i)
    if (!used[i] && !allow_unused)
      throw_error<GraphError>(op, "input ", i, " ", describe(xs[i]),
                              " is not used to compute f's output (pass allow_unused for zeros)");
  return used;
}

// ShapeError / DTypeError unless `t` (argument `what` number i) has `like`'s shape and dtype.
void check_like(const char* op, const std::string& what, const Tensor& t, const std::string& like_what,
                const Tensor& like) {
  if (!t.defined()) throw_error<ValueError>(op, what, " is undefined; it must be ", describe(like), " as ", like_what);
  if (t.shape() != like.shape())
    throw_error<ShapeError>(op, what, " ", describe(t), " must have the shape of ", like_what, " ", describe(like));
  if (t.dtype() != like.dtype())
    throw_error<DTypeError>(op, what, " ", describe(t), " must have the dtype of ", like_what, " ", describe(like));
}

void check_vectors(const char* op, const char* what, const Tensors& v, const Tensors& xs) {
  if (v.size() != xs.size()) throw_error<ValueError>(op, v.size(), " ", what, "s given for ", xs.size(), " inputs");
  for (std::size_t i = 0; i < v.size(); ++i)
    check_like(op, std::string(what) + " " + std::to_string(i), v[i], "input " + std::to_string(i), xs[i]);
}

Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype()); }

// Undefined gradients (no path) become zeros; results are detached unless create_graph.
Tensors fill_zeros(Tensors gs, const Tensors& like) {
  for (std::size_t i = 0; i < gs.size(); ++i)
    if (!gs[i].defined()) gs[i] = zeros_like(like[i]);
  return gs;
}

// sum_i <a_i, b_i> over the a_i that are in the graph, in dtype `dtype`; undefined if none is.
Tensor inner(const Tensors& a, const Tensors& b, DType dtype) {
  Tensor s;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (!a[i].defined() || !a[i].requires_grad()) continue;
    Tensor term = sum(mul(a[i], b[i]));
    if (term.dtype() != dtype) term = term.to(dtype);
    s = s.defined() ? add(s, term) : term;
  }
  return s;
}

GradientGraph gradient_graph(const char* op, const TensorFn& f, const Tensors& inputs, const Tensors* v,
                             const FunctionalOptions& o) {
  if (v) check_vectors(op, "vector", *v, inputs);
  GradientGraph g;
  g.xs = prepare_inputs(op, inputs, o.create_graph);
  g.y = evaluate(op, f, g.xs);
  require_scalar(op, g.y);
  used_inputs(op, g.y, g.xs, o.allow_unused);
  g.gs = Tensors(g.xs.size());
  if (g.y.requires_grad()) g.gs = grad({g.y}, g.xs, {}, GradOptions{true, true, true});
  return g;
}

}  // namespace functional_detail

using namespace functional_detail;

namespace {

Tensor result_output(const Tensor& y, bool create_graph) { return create_graph ? y : y.detach(); }

GradOptions engine_options(bool retain, bool create_graph) { return GradOptions{retain, create_graph, true}; }

// One block of a Jacobian or Hessian, (rows..., cols...), filled row by row or column by
// column. Without create_graph it is one buffer written in place; with it, the pieces are
// joined with differentiable ops (concat) so the block stays in the graph.
class JacobianBlock {
 public:
  JacobianBlock(const Shape& row_shape, const Shape& col_shape, DType dtype, bool graph)
      : shape_(concat_shapes(row_shape, col_shape)), rows_(numel(row_shape)), cols_(numel(col_shape)),
        dtype_(dtype), graph_(graph && rows_ > 0 && cols_ > 0) {
    if (!graph_) buffer_ = zeros(shape_, dtype_);
  }
  void set_row(std::size_t r, const Tensor& g) {  // g: col_shape, or undefined (zeros)
    if (graph_) {
      row_mode_ = true;
      pieces_.resize(rows_);
      pieces_[r] = g.defined() ? reshape(cast(g), {1, cols_}) : zeros({1, cols_}, dtype_);
    } else if (g.defined()) {
      add_flat(buffer_, r * cols_, g);
    }
  }
  void set_column(std::size_t c, const Tensor& g) {  // g: row_shape, or undefined (zeros)
    if (graph_) {
      pieces_.resize(cols_);
      pieces_[c] = g.defined() ? reshape(cast(g), {rows_, 1}) : zeros({rows_, 1}, dtype_);
    } else if (g.defined()) {
      const std::vector<double> v = g.to_vector();
      if (dtype_ == DType::Float64) {
        double* d = buffer_.mutable_data<double>();
        for (std::size_t r = 0; r < rows_; ++r) d[r * cols_ + c] = v[r];
      } else {
        float* d = buffer_.mutable_data<float>();
        for (std::size_t r = 0; r < rows_; ++r) d[r * cols_ + c] = float(v[r]);
      }
    }
  }
  Tensor finish() {
    if (!graph_) return buffer_;
    if (pieces_.empty()) return zeros(shape_, dtype_);
    for (auto& p : pieces_)
      if (!p.defined()) p = zeros(row_mode_ ? Shape{1, cols_} : Shape{rows_, 1}, dtype_);
    return reshape(concat(pieces_, row_mode_ ? 0 : 1), shape_);
  }

 private:
  Tensor cast(const Tensor& g) const { return g.dtype() == dtype_ ? g : g.to(dtype_); }
  Shape shape_;
  std::size_t rows_, cols_;
  DType dtype_;
  bool graph_, row_mode_ = false;
  Tensor buffer_;
  Tensors pieces_;
};

VjpResult vjp_impl(const char* op, const TensorFn& f, const Tensors& inputs, Tensor u, const FunctionalOptions& o) {
  EnableGradGuard grad_on;  // every transform records what it composes, even inside NoGradGuard
  const Tensors xs = prepare_inputs(op, inputs, o.create_graph);
  const Tensor y = evaluate(op, f, xs);
  if (!u.defined()) {
    if (y.numel() != 1)
      throw_error<ValueError>(op, "f returned ", describe(y),
                              ", not a scalar: pass a cotangent of that shape (only a one-element output has the "
                              "default cotangent 1)");
    u = ones(y.shape(), y.dtype());
  } else {
    check_like(op, "cotangent", u, "f's output", y);
  }
  const std::vector<bool> used = used_inputs(op, y, xs, o.allow_unused);
  Tensors gs(xs.size());
  if (y.requires_grad()) gs = grad({y}, xs, {u}, engine_options(o.create_graph, o.create_graph));
  return {result_output(y, o.create_graph), fill_zeros(gs, xs)};
}

}  // namespace

VjpResult vjp(const TensorFn& f, const Tensors& inputs, const Tensor& cotangent, const FunctionalOptions& options) {
  return vjp_impl("vjp", f, inputs, cotangent, options);
}

VjpResult value_and_grad(const TensorFn& f, const Tensors& inputs, const FunctionalOptions& options) {
  const char* op = "value_and_grad";
  TensorFn checked = [&](const Tensors& xs) {
    Tensor y = f(xs);
    if (y.defined()) require_scalar(op, y);
    return y;
  };
  return vjp_impl(op, checked, inputs, Tensor(), options);
}

JvpResult jvp(const TensorFn& f, const Tensors& inputs, const Tensors& tangents, const FunctionalOptions& o) {
  const char* op = "jvp";
  EnableGradGuard grad_on;
  check_vectors(op, "tangent", tangents, inputs);
  const Tensors xs = prepare_inputs(op, inputs, o.create_graph);
  const Tensor y = evaluate(op, f, xs);
  used_inputs(op, y, xs, o.allow_unused);
  Tensor out;
  if (y.requires_grad()) {
    // J^T u recorded for a dummy cotangent u (its value never matters: J^T u is linear in u),
    // then J v = d/du <J^T u, v>.
    Tensor u = zeros_like(y);
    u.set_requires_grad(true);
    const Tensors ws = grad({y}, xs, {u}, engine_options(true, true));
    const Tensor s = inner(ws, tangents, y.dtype());
    if (s.defined()) out = grad({s}, {u}, {}, engine_options(o.create_graph, o.create_graph))[0];
  }
  if (!out.defined()) out = zeros_like(y);
  return {result_output(y, o.create_graph), out};
}

Tensors jacobian(const TensorFn& f, const Tensors& inputs, JacobianMode mode, const FunctionalOptions& o) {
  const char* op = "jacobian";
  EnableGradGuard grad_on;
  const Tensors xs = prepare_inputs(op, inputs, o.create_graph);
  const Tensor y = evaluate(op, f, xs);
  const std::vector<bool> used = used_inputs(op, y, xs, o.allow_unused);
  std::vector<std::pair<Shape, DType>> blocks;
  std::size_t columns = 0;
  for (const auto& x : xs) {
    blocks.emplace_back(concat_shapes(y.shape(), x.shape()), x.dtype());
    columns += x.numel();
  }
  check_result_bytes(op, "Jacobian of f's output " + describe(y), blocks, o.max_bytes);
  std::vector<JacobianBlock> J;
  for (const auto& x : xs) J.emplace_back(y.shape(), x.shape(), x.dtype(), o.create_graph);
  const std::size_t rows = y.numel();
  if (mode == JacobianMode::Auto) mode = rows <= columns ? JacobianMode::Reverse : JacobianMode::Forward;
  if (y.requires_grad() && mode == JacobianMode::Reverse) {
    for (std::size_t r = 0; r < rows; ++r) {
      const Tensors gs = grad({y}, xs, {basis(y.shape(), y.dtype(), r)}, engine_options(true, o.create_graph));
      for (std::size_t i = 0; i < xs.size(); ++i) J[i].set_row(r, gs[i]);
    }
  } else if (y.requires_grad()) {
    Tensor u = zeros_like(y);
    u.set_requires_grad(true);
    const Tensors ws = grad({y}, xs, {u}, engine_options(true, true));  // J^T u, linear in u
    for (std::size_t i = 0; i < xs.size(); ++i) {
      if (!ws[i].defined() || !ws[i].requires_grad()) continue;  // column block is zero
      for (std::size_t c = 0; c < xs[i].numel(); ++c) {
        const Tensor col = grad({ws[i]}, {u}, {basis(xs[i].shape(), xs[i].dtype(), c)},
                                engine_options(true, o.create_graph))[0];
        J[i].set_column(c, col);
      }
    }
  }
  Tensors out;
  for (auto& b : J) out.push_back(b.finish());
  return out;
}

std::vector<Tensors> hessian(const TensorFn& f, const Tensors& inputs, const FunctionalOptions& o) {
  const char* op = "hessian";
  EnableGradGuard grad_on;
  const GradientGraph g = gradient_graph(op, f, inputs, nullptr, o);
  const Tensors& xs = g.xs;
  std::vector<std::pair<Shape, DType>> blocks;
  for (const auto& a : xs)
    for (const auto& b : xs) blocks.emplace_back(concat_shapes(a.shape(), b.shape()), b.dtype());
  check_result_bytes(op, "Hessian", blocks, o.max_bytes);
  std::vector<std::vector<JacobianBlock>> H(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i)
    for (const auto& b : xs) H[i].emplace_back(xs[i].shape(), b.shape(), b.dtype(), o.create_graph);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const Tensor& gi = g.gs[i];
    if (!gi.defined() || !gi.requires_grad()) continue;  // f is linear in x_i (or constant): rows are zero
    for (std::size_t r = 0; r < xs[i].numel(); ++r) {
      const Tensors row = grad({gi}, xs, {basis(gi.shape(), gi.dtype(), r)}, engine_options(true, o.create_graph));
      for (std::size_t j = 0; j < xs.size(); ++j) H[i][j].set_row(r, row[j]);
    }
  }
  std::vector<Tensors> out(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i)
    for (auto& b : H[i]) out[i].push_back(b.finish());
  return out;
}

HvpResult vhp(const TensorFn& f, const Tensors& inputs, const Tensors& v, const FunctionalOptions& o) {
  EnableGradGuard grad_on;
  const GradientGraph g = gradient_graph("vhp", f, inputs, &v, o);
  Tensors prod(g.xs.size());
  const Tensor s = inner(g.gs, v, g.y.dtype());  // <grad f, v>; its gradient is v^T H
  if (s.defined()) prod = grad({s}, g.xs, {}, engine_options(o.create_graph, o.create_graph));
  return {result_output(g.y, o.create_graph), fill_zeros(prod, g.xs)};
}

HvpResult hvp(const TensorFn& f, const Tensors& inputs, const Tensors& v, const FunctionalOptions& o) {
  EnableGradGuard grad_on;
  const GradientGraph g = gradient_graph("hvp", f, inputs, &v, o);
  // H^T u = vjp(grad f, u) recorded for dummy cotangents u; H v = d/du <H^T u, v>.
  Tensors prod(g.xs.size()), active, us;
  std::vector<std::size_t> where;
  for (std::size_t i = 0; i < g.gs.size(); ++i) {
    if (!g.gs[i].defined() || !g.gs[i].requires_grad()) continue;
    Tensor u = zeros_like(g.gs[i]);
    u.set_requires_grad(true);
    active.push_back(g.gs[i]);
    us.push_back(u);
    where.push_back(i);
  }
  if (!active.empty()) {
    const Tensors hu = grad(active, g.xs, us, engine_options(true, true));
    const Tensor s = inner(hu, v, g.y.dtype());
    if (s.defined()) {
      const Tensors hv = grad({s}, us, {}, engine_options(o.create_graph, o.create_graph));
      for (std::size_t k = 0; k < where.size(); ++k) prod[where[k]] = hv[k];
    }
  }
  return {result_output(g.y, o.create_graph), fill_zeros(prod, g.xs)};
}

// --- modules ------------------------------------------------------------------------------------

namespace {

// Puts `values` into the module's parameter slots for its lifetime, then the originals back.
class ParameterSwap {
 public:
  ParameterSwap(std::vector<std::pair<std::string, Tensor*>> slots, const Tensors& values) : slots_(std::move(slots)) {
    const char* op = "parameter_function";
    if (values.size() != slots_.size())
      throw_error<ValueError>(op, values.size(), " tensors given for a module with ", slots_.size(), " parameters");
    for (std::size_t i = 0; i < values.size(); ++i) {
      const Tensor& p = *slots_[i].second;
      const std::string what = "tensor " + std::to_string(i) + " (for parameter '" + slots_[i].first + "')";
      check_like(op, what, values[i], "the parameter", p);
    }
    for (std::size_t i = 0; i < values.size(); ++i) {
      saved_.push_back(*slots_[i].second);
      *slots_[i].second = values[i];
    }
  }
  ~ParameterSwap() {
    for (std::size_t i = 0; i < saved_.size(); ++i) *slots_[i].second = saved_[i];
  }
  ParameterSwap(const ParameterSwap&) = delete;
  ParameterSwap& operator=(const ParameterSwap&) = delete;

 private:
  std::vector<std::pair<std::string, Tensor*>> slots_;
  Tensors saved_;
};

}  // namespace

TensorFn parameter_function(Module& module, std::function<Tensor()> loss) {
  if (!loss) throw_error<ValueError>("parameter_function", "no loss function given");
  Module* m = &module;
  return [m, loss = std::move(loss)](const Tensors& params) {
    ParameterSwap swap(m->parameter_slots(), params);
    return loss();
  };
}

NamedTensors named_like(const Module& module, const Tensors& values) {
  const NamedTensors names = module.named_parameters();
  if (names.size() != values.size())
    throw_error<ValueError>("named_like", values.size(), " tensors given for a module with ", names.size(), " parameters");
  NamedTensors out;
  for (std::size_t i = 0; i < values.size(); ++i) out.emplace_back(names[i].first, values[i]);
  return out;
}

// --- helpers ------------------------------------------------------------------------------------

std::vector<double> flatten_values(const Tensors& ts) {
  std::vector<double> out;
  for (const auto& t : ts) {
    const std::vector<double> v = t.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

Tensors unflatten_values(const std::vector<double>& values, const Tensors& like) {
  std::size_t total = 0;
  for (const auto& t : like) total += t.numel();
  if (values.size() != total)
    throw_error<ValueError>("unflatten_values", values.size(), " values for tensors of ", total, " elements");
  Tensors out;
  std::size_t at = 0;
  for (const auto& t : like) {
    out.push_back(tensor(std::vector<double>(values.begin() + long(at), values.begin() + long(at + t.numel())),
                         t.shape(), t.dtype()));
    at += t.numel();
  }
  return out;
}

void check_result_bytes(const char* op, const std::string& what, const std::vector<std::pair<Shape, DType>>& blocks,
                        std::size_t limit) {
  if (limit == 0) limit = max_tensor_bytes();
  const std::size_t max_elements = std::size_t(1) << 40;
  std::size_t total = 0;  // saturating
  std::string list;
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    const Shape& shape = blocks[b].first;
    std::size_t n = 1;
    const bool empty = std::find(shape.begin(), shape.end(), std::size_t(0)) != shape.end();
    for (std::size_t d : shape) {
      if (empty) break;
      if (n > max_elements / d)
        throw_error<ValueError>(op, "the ", what, " has a block of shape ", shape, ": more than 2^40 elements");
      n *= d;
    }
    const std::size_t bytes = empty ? 0 : n * itemsize(blocks[b].second);
    total = total > std::size_t(-1) - bytes ? std::size_t(-1) : total + bytes;
    if (b < 4) list += (b ? ", " : "") + shape_str(shape) + " " + dtype_name(blocks[b].second);
    else if (b == 4) list += ", ...";
  }
  if (total > limit)
    throw_error<MemoryError>(op, "the ", what, " (", blocks.size(), blocks.size() == 1 ? " block: " : " blocks: ", list,
                             ") needs ", total, " bytes, more than the limit of ", limit,
                             " bytes (FunctionalOptions::max_bytes; 0 means max_tensor_bytes())");
}

}  // namespace xgrad
