// Optimizers (torch.optim rules, foreach=False), gradient clipping, warmup + cosine schedule.
#include <cmath>
#include <map>
#include <set>

#include "xgrad/framework/array.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/models/optim.hpp"

namespace xgrad {
namespace {

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape());
}

void require(bool ok, const std::string& op, const std::string& what, double value) {
  if (!ok) throw_error<ValueError>(op, what, ", got ", value);
}

template <class T> std::size_t first_non_finite(const Tensor& g) {
  const T* d = g.data<T>();
  const std::size_t n = g.numel();
  for (std::size_t j = 0; j < n; ++j)
    if (!std::isfinite(d[j])) return j;
  return n;
}

Tensor int_scalar(std::int64_t v) { return index_tensor({v}, {}); }

}  // namespace

// --- Optimizer ---------------------------------------------------------------------------

Optimizer::Optimizer(const NamedTensors& params, double lr_) : lr(lr_) {
  std::set<std::string> names;
  std::set<const TensorImpl*> impls;
  for (const auto& [n, p] : params) {
    if (n.empty()) throw_error<ValueError>("Optimizer", "parameter names must be non-empty");
    if (!names.insert(n).second)
      throw_error<ValueError>("Optimizer", "parameter name '", n, "' appears more than once");
    if (!p.defined()) throw_error<ValueError>("Optimizer", "parameter '", n, "' is undefined");
    if (!is_float(p.dtype()))
      throw_error<DTypeError>("Optimizer", "parameter '", n, "' must be float32 or float64, got ", describe(p));
    if (!impls.insert(p.impl()).second)
      throw_error<ValueError>("Optimizer", "parameter '", n, "' is the same tensor as an earlier one");
  }
  params_ = params;
  state_.resize(params_.size());
}

void Optimizer::check_hyperparameters() const {
  require(std::isfinite(lr) && lr >= 0, name(), "lr must be finite and >= 0", lr);
}

void Optimizer::zero_grad() {
  for (auto& [n, p] : params_) p.zero_grad();
}

void Optimizer::step() {
  check_hyperparameters();
  const std::string op = std::string(name()) + "::step";
  std::vector<Tensor> grads(params_.size());
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const auto& [n, p] = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.dtype() != p.dtype())
      throw_error<DTypeError>(op, "gradient of parameter '", n, "' is ", describe(g), " but the parameter is ",
                              describe(p), "; nothing was updated");
    if (g.shape() != p.shape())
      throw_error<ShapeError>(op, "gradient of parameter '", n, "' has shape ", g.shape(),
                              " but the parameter has shape ", p.shape(), "; nothing was updated");
    const std::size_t bad = dispatch_float(op.c_str(), g.dtype(), [&](auto zero) {
      return first_non_finite<decltype(zero)>(g);
    });
    if (bad < g.numel())
      throw_error<ValueError>(op, "gradient of parameter '", n, "' ", g.shape(), " has the non-finite value ",
                              g.to_vector()[bad], " at flat index ", bad, "; nothing was updated");
    grads[i] = g;
  }
  // Allocate missing state first, and convert state whose parameter changed dtype since
  // (Module::to converts parameters in place), so the update loop below cannot fail half-way.
  const std::size_t nbuf = buffer_names().size();
  std::vector<std::vector<Tensor>> fresh(params_.size()), converted(params_.size());
  NoGradGuard no_grad;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!grads[i].defined()) continue;
    const Tensor& p = params_[i].second;
    if (!state_[i].initialized && needs_state())
      for (std::size_t k = 0; k < nbuf; ++k) fresh[i].push_back(zeros(p.shape(), p.dtype()));
    for (const Tensor& b : state_[i].buffers)
      if (b.dtype() != p.dtype()) {
        converted[i].clear();
        for (const Tensor& c : state_[i].buffers) converted[i].push_back(c.to(p.dtype()).clone());
        break;
      }
  }
  for (std::size_t i = 0; i < params_.size(); ++i) {
    if (!fresh[i].empty()) {
      state_[i].buffers = std::move(fresh[i]);
      state_[i].step = 0;
      state_[i].initialized = true;
    }
    if (!converted[i].empty()) state_[i].buffers = std::move(converted[i]);
  }
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (grads[i].defined()) update(i, params_[i].second, grads[i]);
  ++steps_;
}

NamedTensors Optimizer::state_dict() const {
  NamedTensors out;
  out.emplace_back("step", int_scalar(steps_));
  const auto bufs = buffer_names();
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const ParamState& st = state_[i];
    if (!st.initialized) continue;
    const std::string& n = params_[i].first;
    for (std::size_t k = 0; k < bufs.size(); ++k)
      out.emplace_back(bufs[k] + "." + n, st.buffers[k].clone());
    if (tracks_param_step()) out.emplace_back("step." + n, int_scalar(st.step));
  }
  return out;
}

void Optimizer::validate_state_dict(const NamedTensors& state) const {
  const std::string op = std::string(name()) + "::load_state_dict";
  std::vector<std::string> kinds = buffer_names();
  const std::size_t nbuf = kinds.size();
  if (tracks_param_step()) kinds.push_back("step");
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < params_.size(); ++i) index[params_[i].first] = i;

  // Counters a real run can produce: 0 <= step <= kMaxSteps (2^53: the bias corrections
  // compute beta^t in double; a crafted INT64_MAX would overflow on the next step).
  auto check_step_scalar = [&](const std::string& entry, const Tensor& t) {
    if (t.dtype() != DType::Int64 || t.dim() != 0)
      throw_error<DTypeError>(op, "entry '", entry, "' must be an int64 scalar, got ", describe(t));
    const std::int64_t v = t.data<std::int64_t>()[0];
    if (v < 0 || v > kMaxSteps)
      throw_error<ValueError>(op, "entry '", entry, "' must be in [0, 2^53], got ", v);
  };
  std::int64_t global_step = -1;
  for (const auto& [entry, t] : state)
    if (entry == "step" && t.defined() && t.dtype() == DType::Int64 && t.dim() == 0)
      global_step = t.data<std::int64_t>()[0];

  bool have_step = false;
  std::set<std::string> seen;
  std::vector<std::vector<bool>> found(params_.size(), std::vector<bool>(kinds.size(), false));
  for (const auto& [entry, t] : state) {
    if (!seen.insert(entry).second)
      throw_error<ValueError>(op, "entry '", entry, "' appears more than once");
    if (!t.defined()) throw_error<ValueError>(op, "entry '", entry, "' is undefined");
    if (entry == "step") {
      check_step_scalar(entry, t);
      have_step = true;
      continue;
    }
    std::size_t kind = kinds.size(), param = 0;
    for (std::size_t k = 0; k < kinds.size() && kind == kinds.size(); ++k) {
      const std::string prefix = kinds[k] + ".";
      if (entry.compare(0, prefix.size(), prefix) != 0) continue;
      auto it = index.find(entry.substr(prefix.size()));
      if (it == index.end())
        throw_error<ValueError>(op, "entry '", entry, "' names no parameter of this optimizer");
      kind = k;
      param = it->second;
    }
    if (kind == kinds.size())
      throw_error<ValueError>(op, "unexpected entry '", entry, "' (not a state of ", name(), ")");
    if (kind == nbuf) {
      check_step_scalar(entry, t);
      const std::int64_t v = t.data<std::int64_t>()[0];
      if (v < 1 || (global_step >= 0 && v > global_step))
        throw_error<ValueError>(op, "entry '", entry, "' is ", v, " but a parameter with state has been updated at least once",
                                " and at most 'step' = ", global_step, " times");
    } else {
      const Tensor& p = params_[param].second;
      if (!is_float(t.dtype()))
        throw_error<DTypeError>(op, "entry '", entry, "' is ", describe(t), " but parameter '", params_[param].first,
                                "' is ", describe(p), " (buffers must be float32 or float64)");
      if (t.shape() != p.shape())
        throw_error<ShapeError>(op, "entry '", entry, "' has shape ", t.shape(), " but parameter '",
                                params_[param].first, "' has shape ", p.shape());
      const Tensor& buffer = t;  // a reference: clang 14 cannot capture the structured binding itself
      const std::size_t bad =
          dispatch_float(op.c_str(), t.dtype(), [&](auto zero) { return first_non_finite<decltype(zero)>(buffer); });
      if (bad < t.numel())
        throw_error<ValueError>(op, "entry '", entry, "' ", t.shape(), " has the non-finite value ", t.to_vector()[bad],
                                " at flat index ", bad);
      check_buffer_values(op, kinds[kind], entry, t);
    }
    found[param][kind] = true;
  }
  if (!have_step) throw_error<ValueError>(op, "missing entry 'step'");
  for (std::size_t i = 0; i < params_.size(); ++i) {
    std::string missing;
    bool any = false;
    for (std::size_t k = 0; k < kinds.size(); ++k) {
      any = any || found[i][k];
      if (!found[i][k]) missing += (missing.empty() ? "'" : ", '") + kinds[k] + "." + params_[i].first + "'";
    }
    if (any && !missing.empty())
      throw_error<ValueError>(op, "the state of parameter '", params_[i].first, "' is incomplete: missing ", missing);
  }
}

void Optimizer::load_state_dict(const NamedTensors& state) {
  validate_state_dict(state);
  std::vector<std::string> kinds = buffer_names();
  const std::size_t nbuf = kinds.size();
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < params_.size(); ++i) index[params_[i].first] = i;
  std::vector<ParamState> next(params_.size());
  std::int64_t steps = 0;
  for (auto& st : next) st.buffers.resize(nbuf);
  for (const auto& [entry, t] : state) {
    if (entry == "step") {
      steps = t.data<std::int64_t>()[0];
      continue;
    }
    if (tracks_param_step() && entry.compare(0, 5, "step.") == 0) {
      ParamState& st = next[index.at(entry.substr(5))];
      st.step = t.data<std::int64_t>()[0];
      st.initialized = true;
      continue;
    }
    for (std::size_t k = 0; k < nbuf; ++k) {
      const std::string prefix = kinds[k] + ".";
      if (entry.compare(0, prefix.size(), prefix) != 0) continue;
      const std::size_t i = index.at(entry.substr(prefix.size()));
      ParamState& st = next[i];
      st.buffers[k] = t.detach().to(params_[i].second.dtype()).clone();
      st.initialized = true;
      // Without a tracked count, a loaded state counts as already updated once.
      if (!tracks_param_step()) st.step = 1;
      break;
    }
  }
  for (auto& st : next)
    if (!st.initialized) st.buffers.clear();
  state_.swap(next);
  steps_ = steps;
}

// --- SGD ---------------------------------------------------------------------------------

SGD::SGD(const NamedTensors& params, const SGDOptions& o)
    : Optimizer(params, o.lr()),
      momentum(o.momentum()),
      dampening(o.dampening()),
      weight_decay(o.weight_decay()),
      nesterov(o.nesterov()) {
  check_hyperparameters();
}

std::vector<std::string> SGD::buffer_names() const { return {"momentum_buffer"}; }

void SGD::check_hyperparameters() const {
  Optimizer::check_hyperparameters();
  require(std::isfinite(momentum) && momentum >= 0, name(), "momentum must be finite and >= 0",
          momentum);
  require(std::isfinite(dampening) && dampening >= 0, name(),
          "dampening must be finite and >= 0", dampening);
  require(std::isfinite(weight_decay) && weight_decay >= 0, name(),
          "weight_decay must be finite and >= 0", weight_decay);
  if (nesterov && (momentum <= 0 || dampening != 0))
    throw_error<ValueError>(name(), "nesterov momentum requires momentum > 0 and dampening = 0, got momentum ",
                            momentum, " and dampening ", dampening);
}

namespace {

template <class T>
void sgd_update(T* p, const T* g, T* buf, std::size_t n, bool first, double lr, double momentum,
                double dampening, double weight_decay, bool nesterov) {
  const T wd = T(weight_decay), mom = T(momentum), keep = T(1 - dampening), neg_lr = T(-lr);
  for (std::size_t j = 0; j < n; ++j) {
    T d = g[j];
    if (weight_decay != 0) d = d + wd * p[j];
    if (buf) {
      buf[j] = first ? d : buf[j] * mom + keep * d;
      d = nesterov ? d + mom * buf[j] : buf[j];
    }
    p[j] = p[j] + neg_lr * d;
  }
}

}  // namespace

void SGD::update(std::size_t i, const Tensor& p, const Tensor& g) {
  ParamState& st = state_[i];
  const bool use_buf = momentum != 0;
  const bool first = st.step == 0;
  dispatch_float("SGD::step", p.dtype(), [&](auto zero) {
    using T = decltype(zero);
    sgd_update<T>(p.mutable_data<T>(), g.data<T>(),
                  use_buf ? st.buffers[0].mutable_data<T>() : nullptr, p.numel(), first, lr,
                  momentum, dampening, weight_decay, nesterov);
  });
  if (use_buf) ++st.step;
}

// --- Adam / AdamW ------------------------------------------------------------------------

Adam::Adam(const NamedTensors& params, const AdamOptions& o, bool decoupled)
    : Optimizer(params, o.lr()),
      beta1(o.beta1()),
      beta2(o.beta2()),
      eps(o.eps()),
      weight_decay(o.weight_decay()),
      decoupled_(decoupled) {}

Adam::Adam(const NamedTensors& params, const AdamOptions& o) : Adam(params, o, false) {
  check_hyperparameters();
}

AdamW::AdamW(const NamedTensors& params, const AdamWOptions& o) : Adam(params, o, true) {
  check_hyperparameters();
}

std::vector<std::string> Adam::buffer_names() const { return {"exp_avg", "exp_avg_sq"}; }

// exp_avg_sq is a running mean of squares: a negative entry (only a crafted file has one)
// would make sqrt(v) NaN in every later update.
void Adam::check_buffer_values(const std::string& op, const std::string& kind, const std::string& entry,
                               const Tensor& t) const {
  if (kind != "exp_avg_sq") return;
  const auto v = t.to_vector();
  for (std::size_t i = 0; i < v.size(); ++i)
    if (v[i] < 0)
      throw_error<ValueError>(op, "entry '", entry, "' ", t.shape(), " has the negative value ", v[i], " at flat index ", i,
                              " (a mean of squares is >= 0)");
}

void Adam::check_hyperparameters() const {
  Optimizer::check_hyperparameters();
  require(beta1 >= 0 && beta1 < 1, name(), "beta1 must be in [0, 1)", beta1);
  require(beta2 >= 0 && beta2 < 1, name(), "beta2 must be in [0, 1)", beta2);
  require(std::isfinite(eps) && eps >= 0, name(), "eps must be finite and >= 0", eps);
  require(std::isfinite(weight_decay) && weight_decay >= 0, name(),
          "weight_decay must be finite and >= 0", weight_decay);
}

namespace {

// t >= 1 is this parameter's step count after the increment.
template <class T>
void adam_update(T* p, const T* g, T* m, T* v, std::size_t n, std::int64_t t, double lr,
                 double beta1, double beta2, double eps, double weight_decay, bool decoupled) {
  const double bc1 = 1 - std::pow(beta1, double(t));
  const double bc2_sqrt = std::sqrt(1 - std::pow(beta2, double(t)));
  const T neg_step_size = T(-(lr / bc1)), bc2s = T(bc2_sqrt), e = T(eps);
  const T b1 = T(beta1), b2 = T(beta2), one_b1 = T(1 - beta1), one_b2 = T(1 - beta2);
  const T wd = T(weight_decay), decay = T(1 - lr * weight_decay);
  for (std::size_t j = 0; j < n; ++j) {
    T gj = g[j];
    if (decoupled)
      p[j] = p[j] * decay;
    else if (weight_decay != 0)
      gj = gj + wd * p[j];
    m[j] = m[j] * b1 + one_b1 * gj;
    v[j] = v[j] * b2 + one_b2 * gj * gj;
    const T denom = std::sqrt(v[j]) / bc2s + e;
    p[j] = p[j] + neg_step_size * m[j] / denom;
  }
}

}  // namespace

void Adam::update(std::size_t i, const Tensor& p, const Tensor& g) {
  ParamState& st = state_[i];
  ++st.step;
  dispatch_float("Adam::step", p.dtype(), [&](auto zero) {
    using T = decltype(zero);
    adam_update<T>(p.mutable_data<T>(), g.data<T>(), st.buffers[0].mutable_data<T>(),
                   st.buffers[1].mutable_data<T>(), p.numel(), st.step, lr, beta1, beta2, eps,
                   weight_decay, decoupled_);
  });
}

// --- clipping and schedule ---------------------------------------------------------------

namespace {
template <class T> void scale_into(const Tensor& src, const Tensor& dst, double c) {
  const T* s = src.data<T>();
  T* d = dst.mutable_data<T>();
  const T k = T(c);
  for (std::size_t j = 0, n = src.numel(); j < n; ++j) d[j] = s[j] * k;
}

// sum of g^2 in double, without copying g.
double squared_norm(const Tensor& g) {
  double total = 0;
  auto add = [&](const auto* p) {
    for (std::size_t j = 0, n = g.numel(); j < n; ++j) total += double(p[j]) * double(p[j]);
  };
  if (is_float(g.dtype()))
    dispatch_float("clip_grad_norm", g.dtype(), [&](auto zero) { add(g.data<decltype(zero)>()); });
  else
    for (double x : g.to_vector()) total += x * x;
  return total;
}
}  // namespace

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  if (!(max_norm >= 0))
    throw_error<ValueError>("clip_grad_norm", "argument 'max_norm' must be >= 0, got ", max_norm);
  double sq = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined())
      throw_error<ValueError>("clip_grad_norm", "parameter ", i, " of ", params.size(), " is undefined");
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    sq += squared_norm(g);
  }
  const double total = std::sqrt(sq);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    NoGradGuard no_grad;
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      Tensor scaled = zeros(g.shape(), g.dtype());
      dispatch_float("clip_grad_norm", g.dtype(),
                     [&](auto zero) { scale_into<decltype(zero)>(g, scaled, coef); });
      p.set_grad(scaled);
    }
  }
  return total;
}

double warmup_cosine_lr(std::int64_t step, double base_lr, std::int64_t warmup_steps,
                        std::int64_t total_steps, double min_lr) {
  const std::string op = "warmup_cosine_lr";
  if (step < 0) throw_error<ValueError>(op, "argument 'step' must be >= 0, got ", step);
  if (warmup_steps < 0 || warmup_steps > total_steps)
    throw_error<ValueError>(op, "need 0 <= warmup_steps <= total_steps, got warmup_steps ", warmup_steps,
                            " and total_steps ", total_steps);
  if (!(min_lr >= 0 && min_lr <= base_lr) || !std::isfinite(base_lr))
    throw_error<ValueError>(op, "need 0 <= min_lr <= base_lr (finite), got min_lr ", min_lr, " and base_lr ", base_lr);
  if (step < warmup_steps) return base_lr * double(step + 1) / double(warmup_steps);
  if (step >= total_steps) return min_lr;
  const double r = double(step - warmup_steps) / double(total_steps - warmup_steps);
  return min_lr + (base_lr - min_lr) * 0.5 * (1 + std::cos(std::acos(-1.0) * r));
}

}  // namespace xgrad
