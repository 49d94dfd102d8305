// gradcheck / gradgradcheck: analytic vector-Jacobian products against central differences.
#include <cmath>
#include <limits>
#include <sstream>

#include "xgrad/framework/autograd.hpp"
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

struct Checker {
  const TensorFn& f;
  const std::vector<Tensor>& inputs;
  const GradcheckOptions& opt;
  std::vector<std::size_t> checked;  // indices of inputs that require grad
  Tensor y;

  // Analytic u^T J for every checked input (zeros where unused).
  std::vector<Vec> vjp(const Tensor& u) {
    std::vector<Tensor> xs;
    for (auto i : checked) xs.push_back(inputs[i]);
    std::vector<Vec> out;
    std::vector<Tensor> gs;
    if (y.requires_grad())
      gs = grad({y}, xs, {u}, GradOptions{true, false, true});
    for (std::size_t k = 0; k < xs.size(); ++k) {
      if (k < gs.size() && gs[k].defined()) out.push_back(gs[k].to_vector());
      else out.push_back(Vec(xs[k].numel(), 0.0));
    }
    return out;
  }

  // f evaluated with element j of input i moved by delta.
  Vec eval_perturbed(std::size_t i, std::size_t j, double delta) {
    std::vector<Tensor> xs = inputs;
    Tensor x = inputs[i].clone();
    x.mutable_data<double>()[j] += delta;
    x.set_requires_grad(inputs[i].requires_grad());
    xs[i] = x;
    return f(xs).to_vector();
  }
};

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

}  // namespace

GradcheckResult gradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt) {
  Checker c{f, inputs, opt, {}, {}};
  const std::string who = "gradcheck(" + opt.name + ")";
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    if (inputs[i].dtype() != DType::Float64)
      throw DTypeError(who + ": input " + std::to_string(i) + " must be float64, got " +
                       dtype_name(inputs[i].dtype()));
    c.checked.push_back(i);
  }
  if (c.checked.empty()) throw ValueError(who + ": no input requires grad");
  c.y = f(inputs);
  if (!c.y.defined() || c.y.dtype() != DType::Float64)
    throw DTypeError(who + ": the function must return a float64 tensor");

  GradcheckResult res;
  auto fail = [&](const std::string& msg) {
    if (res.ok) res.message = who + ": " + msg;
    res.ok = false;
  };
  auto fail_nonfinite = [&](const std::string& msg) {
    fail(msg);
    res.max_abs_error = kInf;
    return res;
  };
  // NaN compares false against every tolerance, so non-finite values fail up front.
  if (std::string bad = nonfinite_output(c.y); !bad.empty())
    return fail_nonfinite("forward " + bad + " at the sample: f is not finite there");

  Rng rng(opt.seed);
  const std::size_t ny = c.y.numel();
  Tensor u = randn(c.y.shape(), rng, DType::Float64);
  Tensor v = randn(c.y.shape(), rng, DType::Float64);
  const Vec uv = u.to_vector();
  std::vector<Vec> analytic = c.vjp(u);

  std::size_t total = 0;
  for (auto i : c.checked) total += inputs[i].numel();
  const bool full = ny > 0 && ny * total <= opt.full_jacobian_max;

  // Numeric: central differences, one column of the Jacobian per input element.
  std::vector<Vec> numeric(c.checked.size());
  std::vector<std::vector<Vec>> columns(c.checked.size());
  for (std::size_t k = 0; k < c.checked.size(); ++k) {
    std::size_t i = c.checked[k];
    for (std::size_t j = 0; j < inputs[i].numel(); ++j) {
      Vec plus = c.eval_perturbed(i, j, opt.eps);
      Vec minus = c.eval_perturbed(i, j, -opt.eps);
      for (const Vec* side : {&plus, &minus})
        if (std::size_t o = first_nonfinite(*side); o < ny)
          return fail_nonfinite("f(x " + std::string(side == &plus ? "+" : "-") + " eps) at " +
                                element_str(i, j, inputs[i].shape()) + ": output element " +
                                index_str(o, c.y.shape()) + " (flat " + std::to_string(o) + ") is " +
                                fmt((*side)[o]) + ": f is undefined or not finite near the sample");
      Vec col(ny);
      for (std::size_t o = 0; o < ny; ++o) col[o] = (plus[o] - minus[o]) / (2 * opt.eps);
      numeric[k].push_back(dot(uv, col));
      if (full) columns[k].push_back(std::move(col));
    }
  }

  // 0. Every gradient value is finite.
  for (std::size_t k = 0; k < c.checked.size(); ++k)
    for (std::size_t j = 0; j < analytic[k].size(); ++j)
      if (!std::isfinite(analytic[k][j]) || !std::isfinite(numeric[k][j]))
        return fail_nonfinite(element_str(c.checked[k], j, inputs[c.checked[k]].shape()) +
                              ": gradient is not finite (random upstream gradient): analytic " +
                              fmt(analytic[k][j]) + " vs numeric " + fmt(numeric[k][j]));

  // |a - n| / (atol + rtol |n|); inf when either value is NaN or inf.
  auto compare = [&](double a, double n, const std::string& where) {
    double err = std::isfinite(a) && std::isfinite(n) ? std::abs(a - n) : kInf;
    res.max_abs_error = std::max(res.max_abs_error, err);
    return std::make_pair(err / (opt.atol + opt.rtol * std::abs(n)), where);
  };

  // 1. Random upstream gradient.
  double worst = 0;
  std::string worst_msg;
  bool all_zero = true;
  for (std::size_t k = 0; k < c.checked.size(); ++k) {
    std::size_t i = c.checked[k];
    const Shape& s = inputs[i].shape();
    double ma = max_abs(analytic[k]), mn = max_abs(numeric[k]);
    if (ma > 1e-12 || mn > 1e-12) all_zero = false;
    if (ma <= 1e-12 && mn > 1e-7)
      fail("input " + std::to_string(i) + " " + shape_str(s) +
           ": analytic gradient is all zero but the numeric one is not (max |numeric| = " +
           fmt(mn) + ")");
    for (std::size_t j = 0; j < analytic[k].size(); ++j) {
      auto [ratio, where] = compare(analytic[k][j], numeric[k][j], "");
      if (ratio > worst) {
        worst = ratio;
        worst_msg = element_str(i, j, s) + " (random upstream gradient): analytic " +
                    fmt(analytic[k][j]) + " vs numeric " + fmt(numeric[k][j]);
      }
    }
  }
  if (worst > 1) fail(worst_msg);
  if (all_zero && !opt.allow_all_zero && total > 0)
    fail("every analytic and numeric gradient is zero: the check is vacuous");

  // 2. Full Jacobian, one backward per output element.
  if (full && res.ok) {
    worst = 0;
    for (std::size_t o = 0; o < ny; ++o) {
      Vec e(ny, 0.0);
      e[o] = 1.0;
      std::vector<Vec> row = c.vjp(tensor(e, c.y.shape(), DType::Float64));
      for (std::size_t k = 0; k < c.checked.size(); ++k) {
        std::size_t i = c.checked[k];
        const Shape& s = inputs[i].shape();
        for (std::size_t j = 0; j < row[k].size(); ++j) {
          double n = columns[k][j][o];
          auto [ratio, where] = compare(row[k][j], n, "");
          if (ratio > worst) {
            worst = ratio;
            worst_msg = "Jacobian entry d out" + index_str(o, c.y.shape()) + " / d input " +
                        std::to_string(i) + index_str(j, s) + " (flat " + std::to_string(j) +
                        "): analytic " + fmt(row[k][j]) +
                        " vs numeric " + fmt(n);
          }
        }
      }
    }
    if (worst > 1) fail(worst_msg);
  }

  // 3. Backward is linear in the upstream gradient.
  if (res.ok && ny > 0) {
    const double a = 0.7, b = -1.3;
    std::vector<Vec> gv = c.vjp(v);
    Vec comb(ny);
    Vec vv = v.to_vector();
    for (std::size_t o = 0; o < ny; ++o) comb[o] = a * uv[o] + b * vv[o];
    std::vector<Vec> gc = c.vjp(tensor(comb, c.y.shape(), DType::Float64));
    for (std::size_t k = 0; k < c.checked.size() && res.ok; ++k)
      for (std::size_t j = 0; j < gc[k].size(); ++j) {
        double expect = a * analytic[k][j] + b * gv[k][j];
        if (!(std::abs(gc[k][j] - expect) <= 1e-3 * opt.atol + 1e-8 * (1 + std::abs(expect)))) {
          fail("backward is not linear in the upstream gradient at " +
               element_str(c.checked[k], j, inputs[c.checked[k]].shape()) + ": " + fmt(gc[k][j]) +
               " vs " + fmt(expect));
          if (!std::isfinite(gc[k][j]) || !std::isfinite(expect)) res.max_abs_error = kInf;
          break;
        }
      }
  }
  return res;
}

GradcheckResult gradgradcheck(const TensorFn& f, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& opt) {
  std::vector<std::size_t> checked;
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined() && inputs[i].requires_grad()) checked.push_back(i);
  const std::string who = "gradgradcheck(" + opt.name + ")";
  if (checked.empty()) throw ValueError(who + ": no input requires grad");
  Tensor y = f(inputs);
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
  std::vector<Tensor> xs_u = inputs;
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
  std::vector<std::size_t> checked;
  std::vector<Tensor> wrt;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad()) continue;
    if (inputs[i].dtype() != DType::Float64)
      throw DTypeError(who + ": input " + std::to_string(i) + " must be float64, got " +
                       dtype_name(inputs[i].dtype()));
    checked.push_back(i);
    wrt.push_back(inputs[i]);
  }
  if (checked.empty()) throw ValueError(who + ": no input requires grad");
  Tensor y = f(inputs);
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
