// gradcheck / gradgradcheck: analytic vector-Jacobian products against central differences.
#include <cmath>
#include <sstream>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/ops/shape.hpp"

namespace xgrad {
namespace {

using Vec = std::vector<double>;

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

double max_abs(const Vec& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
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
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
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
      Vec col(ny);
      for (std::size_t o = 0; o < ny; ++o) col[o] = (plus[o] - minus[o]) / (2 * opt.eps);
      numeric[k].push_back(dot(uv, col));
      if (full) columns[k].push_back(std::move(col));
    }
  }

  auto compare = [&](double a, double n, const std::string& where) {
    double err = std::abs(a - n);
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
        worst_msg = "input " + std::to_string(i) + " " + shape_str(s) + " element " +
                    index_str(j, s) + " (random upstream gradient): analytic " +
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
                        std::to_string(i) + index_str(j, s) + ": analytic " + fmt(row[k][j]) +
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
        if (std::abs(gc[k][j] - expect) > 1e-3 * opt.atol + 1e-8 * (1 + std::abs(expect))) {
          fail("backward is not linear in the upstream gradient at input " +
               std::to_string(c.checked[k]) + " element " + std::to_string(j) + ": " +
               fmt(gc[k][j]) + " vs " + fmt(expect));
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
  if (checked.empty()) throw ValueError("gradgradcheck(" + opt.name + "): no input requires grad");
  Tensor y = f(inputs);
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
  GradcheckOptions o2 = opt;
  o2.name = opt.name + " second order";
  return gradcheck(vjp, xs_u, o2);
}

}  // namespace xgrad
