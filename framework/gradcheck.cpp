// gradcheck / gradgradcheck: analytic vector-Jacobian products against central differences.
#include <cmath>
#include <limits>
#include <sstream>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/functional_detail.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad {
namespace {

using Vec = std::vector<double>;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string index_str(std::size_t flat, const Shape& shape) {
  std::vector<std::size_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? flat % shape[d] : 0;
    flat = shape[d] ? flat / shape[d] : 0;
  }
  std::string s = "[";
  for (std::size_t d = 0; d < idx.size(); ++d) s += (d ? ", " : "") + std::to_string(idx[d]);
  return s + "]";
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

double max_abs(const Vec& v) {  // NaN when v holds a NaN (std::max would drop it)
  double m = 0;
  for (double x : v) {
    if (std::isnan(x)) return x;
    m = std::max(m, std::abs(x));
  }
  return m;
}

// Index of the first NaN or inf in v; v.size() when there is none.
std::size_t first_nonfinite(const Vec& v) {
  std::size_t i = 0;
  while (i < v.size() && std::isfinite(v[i])) ++i;
  return i;
}

// The float64 inputs that require grad: their indices (DTypeError for another dtype;
// ValueError when there is none).
std::vector<std::size_t> checked_inputs(const std::string& who, const std::vector<Tensor>& inputs) {
  std::vector<std::size_t> checked;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    if (inputs[i].dtype() != DType::Float64)
      throw_error<DTypeError>(who, "input ", i, " must be float64, got ", dtype_name(inputs[i].dtype()));
    checked.push_back(i);
  }
  if (checked.empty()) throw_error<ValueError>(who, "no input requires grad");
  return checked;
}

// ValueError unless eps is finite and > 0, and atol, rtol and fused_rtol are finite and >= 0.
void check_options(const std::string& who, const GradcheckOptions& o) {
  const auto need = [&](const char* option, double v, bool positive) {
    if (!std::isfinite(v) || v < 0 || (positive && v == 0))
      throw_error<ValueError>(who, "option ", option, " must be finite and ", positive ? "> 0" : ">= 0", ", got ", v);
  };
  need("eps", o.eps, true);
  need("atol", o.atol, false);
  need("rtol", o.rtol, false);
  need("fused_rtol", o.fused_rtol, false);
}

// What every check starts from: f given and the options valid; slots = the inputs with each
// checked one replaced by its own leaf sharing its storage (the same tensor given twice is two
// variables, differentiated and perturbed one at a time); y = f(slots), a float64 tensor.
struct Sample {
  std::vector<std::size_t> checked;
  std::vector<Tensor> slots;
  Tensor y;
};
Sample sample_of(const std::string& who, const TensorFn& f, const std::vector<Tensor>& inputs,
                 const GradcheckOptions& opt) {
  functional_detail::require_function(who, f);
  check_options(who, opt);
  Sample s{checked_inputs(who, inputs), inputs, {}};
  for (std::size_t i : s.checked) {
    s.slots[i] = inputs[i].detach();
    s.slots[i].set_requires_grad(true);
  }
  s.y = f(s.slots);
  if (!s.y.defined()) throw_error<ValueError>(who, "f returned an undefined tensor; it must return a float64 tensor");
  if (s.y.dtype() != DType::Float64)
    throw_error<DTypeError>(who, "f must return a float64 tensor, got ", s.y.shape(), " ", dtype_name(s.y.dtype()));
  return s;
}

std::string fmt(double v) {
  if (std::isnan(v)) return "nan";  // not "-nan": the sign of a NaN means nothing
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

// "input i (shape) element [multi-index] (flat j)"
std::string element_str(std::size_t i, std::size_t j, const Shape& s) {
  return "input " + std::to_string(i) + " " + shape_str(s) + " element " + index_str(j, s) + " (flat " +
         std::to_string(j) + ")";
}

// Empty when every value of y is finite; else names the first one that is not.
std::string nonfinite_output(const Tensor& y) {
  const Vec v = y.to_vector();
  const std::size_t o = first_nonfinite(v);
  if (o == v.size()) return "";
  return "output element " + index_str(o, y.shape()) + " (flat " + std::to_string(o) + ") is " + fmt(v[o]);
}

// One gradcheck run: the function, the sample, and the result so far.
struct Checker {
  const TensorFn& f;
  const std::vector<Tensor>& inputs;
  const GradcheckOptions& opt;
  std::string who;
  std::vector<std::size_t> checked;  // indices of inputs that require grad
  Tensor y;                          // f(inputs)
  std::size_t ny = 0;                // numel(y)
  GradcheckResult res;

  // Records the first failure's message (later ones only clear ok).
  void fail(const std::string& msg) {
    if (res.ok) res.message = who + ": " + msg;
    res.ok = false;
  }
  GradcheckResult fail_nonfinite(const std::string& msg) {
    fail(msg);
    res.max_abs_error = kInf;
    return res;
  }
  const Shape& shape_of(std::size_t k) const { return inputs[checked[k]].shape(); }
  std::string element(std::size_t k, std::size_t j) const { return element_str(checked[k], j, shape_of(k)); }

  // Analytic u^T J for every checked input (zeros where unused).
  std::vector<Vec> vjp(const Tensor& u) const {
    std::vector<Tensor> xs;
    for (auto i : checked) xs.push_back(inputs[i]);
    std::vector<Vec> out;
    std::vector<Tensor> gs;
    if (y.requires_grad()) gs = grad({y}, xs, {u}, GradOptions{true, false, true});
    for (std::size_t k = 0; k < xs.size(); ++k) {
      if (k < gs.size() && gs[k].defined()) out.push_back(gs[k].to_vector());
      else out.push_back(Vec(xs[k].numel(), 0.0));
    }
    return out;
  }

  // f evaluated with element j of input i moved by delta.
  Vec eval_perturbed(std::size_t i, std::size_t j, double delta) const {
    std::vector<Tensor> xs = inputs;
    Tensor x = inputs[i].clone();
    x.mutable_data<double>()[j] += delta;
    x.set_requires_grad(inputs[i].requires_grad());
    xs[i] = x;
    return f(xs).to_vector();
  }

  // |a - n| / (atol + rtol |n|), keeping the largest |a - n|; inf when either is NaN or inf,
  // 0 when a == n (also for atol = rtol = 0), never NaN.
  double ratio(double a, double n) {
    const double err = std::isfinite(a) && std::isfinite(n) ? std::abs(a - n) : kInf;
    res.max_abs_error = std::max(res.max_abs_error, err);
    return err == 0 ? 0.0 : err / (opt.atol + opt.rtol * std::abs(n));
  }
};

// Central differences: numeric[k][j] = <u, column j of input k's Jacobian>, and the columns
// themselves when `keep_columns`. Returns a failure message when f is not finite at x +- eps.
struct Numeric {
  std::vector<Vec> vjp;
  std::vector<std::vector<Vec>> columns;  // [k][j][o]
  std::string failure;
};
Numeric numeric_gradients(const Checker& c, const Vec& uv, bool keep_columns) {
  Numeric num;
  num.vjp.resize(c.checked.size());
  num.columns.resize(c.checked.size());
  for (std::size_t k = 0; k < c.checked.size(); ++k) {
    const std::size_t i = c.checked[k];
    for (std::size_t j = 0; j < c.inputs[i].numel(); ++j) {
      Vec plus = c.eval_perturbed(i, j, c.opt.eps);
      Vec minus = c.eval_perturbed(i, j, -c.opt.eps);
      for (const Vec* side : {&plus, &minus})
        if (std::size_t o = first_nonfinite(*side); o < c.ny) {
          num.failure = "f(x " + std::string(side == &plus ? "+" : "-") + " eps) at " + c.element(k, j) +
                        ": output element " + index_str(o, c.y.shape()) + " (flat " + std::to_string(o) + ") is " +
                        fmt((*side)[o]) + ": f is undefined or not finite near the sample";
          return num;
        }
      Vec col(c.ny);
      for (std::size_t o = 0; o < c.ny; ++o) col[o] = (plus[o] - minus[o]) / (2 * c.opt.eps);
      num.vjp[k].push_back(dot(uv, col));
      if (keep_columns) num.columns[k].push_back(std::move(col));
    }
  }
  return num;
}

// Step: analytic against numeric for the random upstream gradient; an all-zero analytic
// gradient where the numeric one is not, and a check where every gradient is zero, fail.
void compare_random_upstream(Checker& c, const std::vector<Vec>& analytic, const std::vector<Vec>& numeric,
                             std::size_t total) {
  double worst = 0;
  std::string worst_msg;
  bool all_zero = true;
  for (std::size_t k = 0; k < c.checked.size(); ++k) {
    const double ma = max_abs(analytic[k]), mn = max_abs(numeric[k]);
    if (ma > 1e-12 || mn > 1e-12) all_zero = false;
    if (ma <= 1e-12 && mn > 1e-7)
      c.fail("input " + std::to_string(c.checked[k]) + " " + shape_str(c.shape_of(k)) +
             ": analytic gradient is all zero but the numeric one is not (max |numeric| = " + fmt(mn) + ")");
    for (std::size_t j = 0; j < analytic[k].size(); ++j) {
      const double r = c.ratio(analytic[k][j], numeric[k][j]);
      if (r > worst) {
        worst = r;
        worst_msg = c.element(k, j) + " (random upstream gradient): analytic " + fmt(analytic[k][j]) + " vs numeric " +
                    fmt(numeric[k][j]);
      }
    }
  }
  if (!(worst <= 1)) c.fail(worst_msg);
  if (all_zero && !c.opt.allow_all_zero && total > 0)
    c.fail("every analytic and numeric gradient is zero: the check is vacuous");
}

// Step: the full Jacobian, one backward per output element, against the numeric columns.
void compare_full_jacobian(Checker& c, const std::vector<std::vector<Vec>>& columns) {
  double worst = 0;
  std::string worst_msg;
  for (std::size_t o = 0; o < c.ny; ++o) {
    Vec e(c.ny, 0.0);
    e[o] = 1.0;
    const std::vector<Vec> row = c.vjp(tensor(e, c.y.shape(), DType::Float64));
    for (std::size_t k = 0; k < c.checked.size(); ++k)
      for (std::size_t j = 0; j < row[k].size(); ++j) {
        const double n = columns[k][j][o];
        const double r = c.ratio(row[k][j], n);
        if (r > worst) {
          worst = r;
          worst_msg = "Jacobian entry d out" + index_str(o, c.y.shape()) + " / d input " + std::to_string(c.checked[k]) +
                      index_str(j, c.shape_of(k)) + " (flat " + std::to_string(j) + "): analytic " + fmt(row[k][j]) +
                      " vs numeric " + fmt(n);
        }
      }
  }
  if (!(worst <= 1)) c.fail(worst_msg);
}

// Step: backward is linear in the upstream gradient: vjp(a u + b v) == a vjp(u) + b vjp(v).
void check_linearity(Checker& c, const Tensor& u, const Tensor& v, const std::vector<Vec>& analytic) {
  const double a = 0.7, b = -1.3;
  const std::vector<Vec> gv = c.vjp(v);
  const Vec uv = u.to_vector(), vv = v.to_vector();
  Vec comb(c.ny);
  for (std::size_t o = 0; o < c.ny; ++o) comb[o] = a * uv[o] + b * vv[o];
  const std::vector<Vec> gc = c.vjp(tensor(comb, c.y.shape(), DType::Float64));
  for (std::size_t k = 0; k < c.checked.size(); ++k)
    for (std::size_t j = 0; j < gc[k].size(); ++j) {
      const double expect = a * analytic[k][j] + b * gv[k][j];
      if (!(std::abs(gc[k][j] - expect) <= 1e-3 * c.opt.atol + 1e-8 * (1 + std::abs(expect)))) {
        c.fail("backward is not linear in the upstream gradient at " + c.element(k, j) + ": " + fmt(gc[k][j]) +
               " vs " + fmt(expect));
        if (!std::isfinite(gc[k][j]) || !std::isfinite(expect)) c.res.max_abs_error = kInf;
        return;
      }
    }
}

}  // namespace

GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs, const GradcheckOptions& opt) {
  const std::string who = "gradcheck(" + opt.name + ")";
  Sample s = sample_of(who, f, inputs, opt);
  Checker c{f, s.slots, opt, who, std::move(s.checked), std::move(s.y), 0, {}};
  c.ny = c.y.numel();
  // NaN compares false against every tolerance, so non-finite values fail up front.
  if (std::string bad = nonfinite_output(c.y); !bad.empty())
    return c.fail_nonfinite("forward " + bad + " at the sample: f is not finite there");

  Rng rng(opt.seed);
  const Tensor u = randn(c.y.shape(), rng, DType::Float64);
  const Tensor v = randn(c.y.shape(), rng, DType::Float64);
  const std::vector<Vec> analytic = c.vjp(u);
  std::size_t total = 0;
  for (auto i : c.checked) total += c.inputs[i].numel();
  const bool full = c.ny > 0 && c.ny * total <= opt.full_jacobian_max;
  const Numeric numeric = numeric_gradients(c, u.to_vector(), full);
  if (!numeric.failure.empty()) return c.fail_nonfinite(numeric.failure);

  for (std::size_t k = 0; k < c.checked.size(); ++k)  // every gradient value is finite
    for (std::size_t j = 0; j < analytic[k].size(); ++j)
      if (!std::isfinite(analytic[k][j]) || !std::isfinite(numeric.vjp[k][j]))
        return c.fail_nonfinite(c.element(k, j) + ": gradient is not finite (random upstream gradient): analytic " +
                                fmt(analytic[k][j]) + " vs numeric " + fmt(numeric.vjp[k][j]));
  compare_random_upstream(c, analytic, numeric.vjp, total);
  if (full && c.res.ok) compare_full_jacobian(c, numeric.columns);
  if (c.res.ok && c.ny > 0) check_linearity(c, u, v, analytic);
  return c.res;
}

GradcheckResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& opt) {
  const std::string who = "gradgradcheck(" + opt.name + ")";
  const Sample s = sample_of(who, f, inputs, opt);
  const std::vector<std::size_t>& checked = s.checked;
  const Tensor& y = s.y;
  auto failed = [&](const std::string& msg) {
    GradcheckResult res;
    res.ok = false;
    res.message = who + ": " + msg;
    res.max_abs_error = kInf;
    return res;
  };
  if (std::string bad = nonfinite_output(y); !bad.empty())
    return failed("forward " + bad + " at the sample: f is not finite there");
  Rng rng(opt.seed + 1);
  Tensor u = randn(y.shape(), rng, DType::Float64);
  u.set_requires_grad(true);

  const std::size_t n = inputs.size();
  TensorFn vjp = [&](const std::vector<Tensor>& xs_u) {
    std::vector<Tensor> xs(xs_u.begin(), xs_u.begin() + long(n));
    Tensor up = xs_u[n];
    Tensor out = f(xs);
    std::vector<Tensor> wrt;
    for (auto i : checked) wrt.push_back(xs[i]);
    std::vector<Tensor> gs;
    if (out.requires_grad()) gs = grad({out}, wrt, {up}, GradOptions{true, true, true});
    std::vector<Tensor> parts;
    for (std::size_t k = 0; k < wrt.size(); ++k) {
      if (k < gs.size() && gs[k].defined()) parts.push_back(reshape(gs[k], {wrt[k].numel()}));
      else parts.push_back(zeros({wrt[k].numel()}, DType::Float64));
    }
    return concat(parts, 0);
  };
  std::vector<Tensor> xs_u = s.slots;
  xs_u.push_back(u);
  // The first-order gradient (create_graph) at the sample: (numel of checked inputs).
  const Vec g1 = vjp(xs_u).to_vector();
  if (const std::size_t bad = first_nonfinite(g1); bad < g1.size()) {
    std::size_t k = 0, j = bad;  // back from the concatenation to (input, element)
    while (j >= inputs[checked[k]].numel()) j -= inputs[checked[k++]].numel();
    return failed("first-order gradient (create_graph) at " + element_str(checked[k], j, inputs[checked[k]].shape()) +
                  " is " + fmt(g1[bad]));
  }
  GradcheckOptions o2 = opt;
  o2.name = opt.name + " second order";
  return gradcheck(vjp, xs_u, o2);
}

GradcheckResult check_fused_backward(const TensorFn& f, const std::vector<Tensor>& inputs,
                                     const GradcheckOptions& opt) {
  const std::string who = "check_fused_backward(" + opt.name + ")";
  const Sample s = sample_of(who, f, inputs, opt);
  const std::vector<std::size_t>& checked = s.checked;
  const Tensor& y = s.y;
  std::vector<Tensor> wrt;
  for (auto i : checked) wrt.push_back(s.slots[i]);
  GradcheckResult res;
  if (!y.requires_grad()) return res;  // nothing recorded: no backward to compare
  Rng rng(opt.seed + 2);
  Tensor u = randn(y.shape(), rng, DType::Float64);
  std::vector<Tensor> fused = grad({y}, wrt, {u}, GradOptions{true, false, true});
  std::vector<Tensor> graph = grad({y}, wrt, {u}, GradOptions{true, true, true});
  auto values = [](const Tensor& g, std::size_t n) { return g.defined() ? g.to_vector() : Vec(n, 0.0); };
  for (std::size_t k = 0; k < wrt.size() && res.ok; ++k) {
    const Vec a = values(fused[k], wrt[k].numel()), b = values(graph[k], wrt[k].numel());
    // Rounding in a sum is relative to its largest term, not to its (maybe cancelled) result.
    const double scale = std::max(max_abs(a), max_abs(b));
    for (std::size_t j = 0; j < a.size(); ++j) {
      const double err = std::isfinite(a[j]) && std::isfinite(b[j]) ? std::abs(a[j] - b[j]) : kInf;
      res.max_abs_error = std::max(res.max_abs_error, err);
      if (!(err <= opt.fused_rtol * (std::abs(b[j]) + scale))) {
        res.ok = false;
        res.message = who + ": " + element_str(checked[k], j, wrt[k].shape()) + ": first-order backward " +
                      fmt(a[j]) + " vs create_graph backward " + fmt(b[j]);
        break;
      }
    }
  }
  return res;
}

}  // namespace xgrad
