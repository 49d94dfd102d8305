// Optimizers (torch.optim rules, foreach=False), gradient clipping, warmup + cosine schedule.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <type_traits>

#include "xgrad/framework/array.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/models/attention.hpp"  // decay_groups classifies by module type
#include "xgrad/models/optim.hpp"
#include "xgrad/ops/detail.hpp"  // lane_sum

namespace xgrad {
namespace {

std::string describe(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + " " + shape_str(t.shape());
}

void require(bool ok, const std::string& op, const std::string& what, double value) {
  if (!ok) throw_error<ValueError>(op, what, ", got ", value);
}

// Blocks of 256 checked without an early exit, on the bits (a loop of integer and, add, or
// that the compiler vectorises; a float compare with NaN in play stays scalar): NaN and +-inf
// have every exponent bit set, so adding the lowest exponent bit carries into the top bit.
// The index is searched for only inside a block that has one.
template <class T> std::size_t first_non_finite(const Tensor& g) {
  using U = std::conditional_t<sizeof(T) == 4, std::uint32_t, std::uint64_t>;
  static_assert(sizeof(U) == sizeof(T) && std::numeric_limits<T>::is_iec559);
  constexpr int kMantissa = std::numeric_limits<T>::digits - 1;  // 23, 52
  constexpr U kLowExp = U(1) << kMantissa, kTop = U(1) << (8 * sizeof(U) - 1), kExp = kTop - kLowExp;
  const T* d = g.data<T>();
  const std::size_t n = g.numel();
  constexpr std::size_t kBlock = 256;
  for (std::size_t j0 = 0; j0 < n; j0 += kBlock) {
    const std::size_t j1 = std::min(n, j0 + kBlock);
    U any = 0;
    for (std::size_t j = j0; j < j1; ++j) {
      U u;
      std::memcpy(&u, d + j, sizeof u);
      any |= (u & kExp) + kLowExp;
    }
    if (any & kTop)
      for (std::size_t j = j0; j < j1; ++j)
        if (!std::isfinite(d[j])) return j;
  }
  return n;
}

Tensor int_scalar(std::int64_t v) { return index_tensor({v}, {}); }

}  // namespace

// --- ParamGroup / Optimizer --------------------------------------------------------------

std::vector<std::string> ParamGroup::overrides() const {
  std::vector<std::string> out;
  if (lr_) out.push_back("lr");
  if (weight_decay_) out.push_back("weight_decay");
  if (momentum_) out.push_back("momentum");
  if (dampening_) out.push_back("dampening");
  if (nesterov_) out.push_back("nesterov");
  if (beta1_ || beta2_) out.push_back("betas");
  if (eps_) out.push_back("eps");
  return out;
}

Optimizer::Optimizer(const NamedTensors& params, double lr_) : Optimizer(std::vector<ParamGroup>{ParamGroup(params)}, lr_) {}

Optimizer::Optimizer(const std::vector<ParamGroup>& groups, double lr_) : lr(lr_), groups_(groups), initial_lr_(lr_) {
  if (groups_.empty()) groups_.emplace_back(NamedTensors{});  // num_groups() >= 1
  // Where each name and tensor was first seen: (group, parameter name).
  std::map<std::string, std::size_t> names;
  std::map<const TensorImpl*, std::pair<std::size_t, std::string>> impls;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::string in = group_label(g);
    for (const auto& [n, p] : groups_[g].params()) {
      if (n.empty()) throw_error<ValueError>("Optimizer", "parameter names must be non-empty", in);
      auto seen = names.find(n);
      if (seen != names.end())
        throw_error<ValueError>("Optimizer", "parameter name '", n, "' appears more than once",
                                groups_.size() > 1 ? " (in group " + std::to_string(seen->second) + " and group " +
                                                         std::to_string(g) + ")"
                                                   : std::string());
      names.emplace(n, g);
      if (!p.defined()) throw_error<ValueError>("Optimizer", "parameter '", n, "'", in, " is undefined");
      if (!is_float(p.dtype()))
        throw_error<DTypeError>("Optimizer", "parameter '", n, "'", in, " must be float32 or float64, got ", describe(p));
      auto [it, fresh] = impls.emplace(p.impl(), std::make_pair(g, n));
      if (!fresh) {
        if (it->second.first != g)
          throw_error<ValueError>("Optimizer", "parameter '", n, "'", in, " is the same tensor as parameter '",
                                  it->second.second, "'", group_label(it->second.first),
                                  ": a parameter may be in one group only");
        throw_error<ValueError>("Optimizer", "parameter '", n, "'", in, " is the same tensor as an earlier one ('",
                                it->second.second, "')");
      }
    }
  }
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (groups_[g].lr() && !(lr_ > 0 && std::isfinite(lr_)))
      throw_error<ValueError>("Optimizer", group_title(g), " sets lr ",
                              *groups_[g].lr(), " but the optimizer's lr is ", lr_,
                              ": a group's lr is kept as a multiple of the optimizer's lr (so that a schedule "
                              "scales every group), which must then be finite and > 0");
    for (const auto& np : groups_[g].params()) {
      params_.push_back(np);
      group_index_.push_back(g);
    }
  }
  state_.resize(params_.size());
}

std::string Optimizer::group_title(std::size_t g) const {
  const std::string& n = groups_.at(g).name();
  return "group " + std::to_string(g) + (n.empty() ? "" : " '" + n + "'");
}

std::string Optimizer::group_label(std::size_t g) const {
  return groups_.size() <= 1 ? "" : " (" + group_title(g) + ")";
}

const ParamGroup& Optimizer::group(std::size_t g) const {
  if (g >= groups_.size())
    throw_error<IndexError>(std::string(name()) + "::group", "group ", g, " is out of range for ", groups_.size(),
                            groups_.size() == 1 ? " group" : " groups");
  return groups_[g];
}

std::size_t Optimizer::group_of(std::size_t param) const {
  if (param >= params_.size())
    throw_error<IndexError>(std::string(name()) + "::group_of", "parameter ", param, " is out of range for ",
                            params_.size(), params_.size() == 1 ? " parameter" : " parameters");
  return group_index_[param];
}

double Optimizer::group_lr(std::size_t g) const {
  const ParamGroup& G = group(g);
  // lr / initial_lr_ is exactly 1 while lr is unchanged, so the group runs at its own value.
  return G.lr() ? *G.lr() * (lr / initial_lr_) : lr;
}

void Optimizer::check_group_options(const std::vector<std::string>& allowed) const {
  for (std::size_t g = 0; g < groups_.size(); ++g)
    for (const std::string& o : groups_[g].overrides())
      if (std::find(allowed.begin(), allowed.end(), o) == allowed.end()) {
        std::string list;
        for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
        throw_error<ValueError>(name(), group_title(g), " sets '", o, "', which ", name(),
                                " does not have (a group may set ", list, ")");
      }
}

void Optimizer::check_hyperparameters() const {
  require(std::isfinite(lr) && lr >= 0, name(), "lr must be finite and >= 0", lr);
  for (std::size_t g = 0; g < groups_.size(); ++g)
    if (groups_[g].lr()) {
      const double v = *groups_[g].lr();
      require(std::isfinite(v) && v >= 0, name(), group_title(g) + ": lr must be finite and >= 0", v);
    }
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
    if (!state_[i].initialized && needs_state(i))
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
  if (groups_.size() > 1) {
    out.emplace_back("param_groups", int_scalar(std::int64_t(groups_.size())));
    for (std::size_t i = 0; i < params_.size(); ++i)
      out.emplace_back("param_group." + params_[i].first, int_scalar(std::int64_t(group_index_[i])));
  }
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

  // The group structure ("param_groups", "param_group.<param>"): all of it or none, and
  // none only for a one-group optimizer; every parameter in the group it is in here.
  auto check_group_scalar = [&](const std::string& entry, const Tensor& t) {
    if (t.dtype() != DType::Int64 || t.dim() != 0)
      throw_error<DTypeError>(op, "entry '", entry, "' must be an int64 scalar, got ", describe(t));
    return t.data<std::int64_t>()[0];
  };
  const std::string group_prefix = "param_group.";
  bool have_groups = false;
  std::vector<bool> group_found(params_.size(), false);

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
    if (entry == "param_groups") {
      const std::int64_t v = check_group_scalar(entry, t);
      if (v != std::int64_t(groups_.size()))
        throw_error<ValueError>(op, "the state has ", v, " parameter groups ('param_groups') but this optimizer has ",
                                groups_.size());
      have_groups = true;
      continue;
    }
    if (entry.compare(0, group_prefix.size(), group_prefix) == 0) {
      auto it = index.find(entry.substr(group_prefix.size()));
      if (it == index.end()) throw_error<ValueError>(op, "entry '", entry, "' names no parameter of this optimizer");
      const std::int64_t v = check_group_scalar(entry, t);
      const std::size_t want = group_index_[it->second];
      if (v != std::int64_t(want))
        throw_error<ValueError>(op, "parameter '", it->first, "' is in group ", v, " of the state ('", entry,
                                "') but in ", group_title(want), " of this optimizer");
      group_found[it->second] = true;
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
  const bool any_group_entry = std::find(group_found.begin(), group_found.end(), true) != group_found.end();
  if (groups_.size() > 1 && !have_groups && !any_group_entry)
    throw_error<ValueError>(op, "the state has no parameter groups (no 'param_groups' entry: it was saved by an ",
                            "optimizer with one group) but this optimizer has ", groups_.size());
  if (have_groups || any_group_entry) {
    if (!have_groups) throw_error<ValueError>(op, "missing entry 'param_groups'");
    for (std::size_t i = 0; i < params_.size(); ++i)
      if (!group_found[i])
        throw_error<ValueError>(op, "missing entry '", group_prefix, params_[i].first, "' (the group of parameter '",
                                params_[i].first, "', ", group_title(group_index_[i]), " here)");
  }
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
    if (entry == "param_groups" || entry.compare(0, 12, "param_group.") == 0) continue;  // validated above
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

SGD::SGD(const NamedTensors& params, const SGDOptions& o) : SGD(std::vector<ParamGroup>{ParamGroup(params)}, o) {}

SGD::SGD(const std::vector<ParamGroup>& groups, const SGDOptions& o)
    : Optimizer(groups, o.lr()),
      momentum(o.momentum()),
      dampening(o.dampening()),
      weight_decay(o.weight_decay()),
      nesterov(o.nesterov()) {
  check_group_options({"lr", "weight_decay", "momentum", "dampening", "nesterov"});
  check_hyperparameters();
}

std::vector<std::string> SGD::buffer_names() const { return {"momentum_buffer"}; }

bool SGD::needs_state(std::size_t i) const { return option(groups_[group_index_[i]].momentum(), momentum) != 0; }

namespace {
// subject: "" for the optimizer's own values, "group 1 'x': " for a group's.
void check_sgd_values(const char* op, const std::string& subject, double momentum, double dampening,
                      double weight_decay, bool nesterov) {
  require(std::isfinite(momentum) && momentum >= 0, op, subject + "momentum must be finite and >= 0", momentum);
  require(std::isfinite(dampening) && dampening >= 0, op, subject + "dampening must be finite and >= 0", dampening);
  require(std::isfinite(weight_decay) && weight_decay >= 0, op, subject + "weight_decay must be finite and >= 0",
          weight_decay);
  if (nesterov && (momentum <= 0 || dampening != 0))
    throw_error<ValueError>(op, subject, "nesterov momentum requires momentum > 0 and dampening = 0, got momentum ",
                            momentum, " and dampening ", dampening);
}
}  // namespace

void SGD::check_hyperparameters() const {
  Optimizer::check_hyperparameters();
  check_sgd_values(name(), "", momentum, dampening, weight_decay, nesterov);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& G = groups_[g];
    if (G.weight_decay() || G.momentum() || G.dampening() || G.nesterov())
      check_sgd_values(name(), group_title(g) + ": ", option(G.momentum(), momentum),
                       option(G.dampening(), dampening), option(G.weight_decay(), weight_decay),
                       option(G.nesterov(), nesterov));
  }
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
  const std::size_t gi = group_index_[i];
  const ParamGroup& G = groups_[gi];
  const double mom = option(G.momentum(), momentum), damp = option(G.dampening(), dampening);
  const double wd = option(G.weight_decay(), weight_decay), step_lr = group_lr(gi);
  const bool nest = option(G.nesterov(), nesterov);
  const bool use_buf = mom != 0;
  const bool first = st.step == 0;
  dispatch_float("SGD::step", p.dtype(), [&](auto zero) {
    using T = decltype(zero);
    sgd_update<T>(p.mutable_data<T>(), g.data<T>(), use_buf ? st.buffers[0].mutable_data<T>() : nullptr, p.numel(),
                  first, step_lr, mom, damp, wd, nest);
  });
  if (use_buf) ++st.step;
}

// --- Adam / AdamW ------------------------------------------------------------------------

Adam::Adam(const std::vector<ParamGroup>& groups, const AdamOptions& o, bool decoupled)
    : Optimizer(groups, o.lr()),
      beta1(o.beta1()),
      beta2(o.beta2()),
      eps(o.eps()),
      weight_decay(o.weight_decay()),
      decoupled_(decoupled) {}

Adam::Adam(const NamedTensors& params, const AdamOptions& o) : Adam(std::vector<ParamGroup>{ParamGroup(params)}, o) {}

Adam::Adam(const std::vector<ParamGroup>& groups, const AdamOptions& o) : Adam(groups, o, false) {
  check_group_options({"lr", "weight_decay", "betas", "eps"});
  check_hyperparameters();
}

AdamW::AdamW(const NamedTensors& params, const AdamWOptions& o)
    : AdamW(std::vector<ParamGroup>{ParamGroup(params)}, o) {}

AdamW::AdamW(const std::vector<ParamGroup>& groups, const AdamWOptions& o) : Adam(groups, o, true) {
  check_group_options({"lr", "weight_decay", "betas", "eps"});
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

namespace {
void check_adam_values(const char* op, const std::string& subject, double beta1, double beta2, double eps,
                       double weight_decay) {
  require(beta1 >= 0 && beta1 < 1, op, subject + "beta1 must be in [0, 1)", beta1);
  require(beta2 >= 0 && beta2 < 1, op, subject + "beta2 must be in [0, 1)", beta2);
  require(std::isfinite(eps) && eps >= 0, op, subject + "eps must be finite and >= 0", eps);
  require(std::isfinite(weight_decay) && weight_decay >= 0, op, subject + "weight_decay must be finite and >= 0",
          weight_decay);
}
}  // namespace

void Adam::check_hyperparameters() const {
  Optimizer::check_hyperparameters();
  check_adam_values(name(), "", beta1, beta2, eps, weight_decay);
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& G = groups_[g];
    if (G.beta1() || G.beta2() || G.eps() || G.weight_decay())
      check_adam_values(name(), group_title(g) + ": ", option(G.beta1(), beta1), option(G.beta2(), beta2),
                        option(G.eps(), eps), option(G.weight_decay(), weight_decay));
  }
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
  const std::size_t gi = group_index_[i];
  const ParamGroup& G = groups_[gi];
  const double b1 = option(G.beta1(), beta1), b2 = option(G.beta2(), beta2), e = option(G.eps(), eps);
  const double wd = option(G.weight_decay(), weight_decay), step_lr = group_lr(gi);
  ++st.step;
  dispatch_float("Adam::step", p.dtype(), [&](auto zero) {
    using T = decltype(zero);
    adam_update<T>(p.mutable_data<T>(), g.data<T>(), st.buffers[0].mutable_data<T>(), st.buffers[1].mutable_data<T>(),
                   p.numel(), st.step, step_lr, b1, b2, e, wd, decoupled_);
  });
}

// --- parameter groups for weight decay -----------------------------------------------------

std::vector<ParamGroup> decay_groups(const Module& model, double weight_decay, const std::vector<std::string>& no_decay) {
  const char* op = "decay_groups";
  if (!(std::isfinite(weight_decay) && weight_decay >= 0))
    throw_error<ValueError>(op, "argument 'weight_decay' must be finite and >= 0, got ", weight_decay);
  std::set<std::string> forced(no_decay.begin(), no_decay.end());
  std::set<std::string> names;
  for (const auto& [n, t] : model.named_parameters()) names.insert(n);
  for (const auto& n : no_decay)
    if (!names.count(n)) throw_error<ValueError>(op, "argument 'no_decay' names '", n, "', which is no parameter of the model");
  NamedTensors decay, keep;
  for (const auto& [prefix, m] : model.named_modules()) {
    const auto* linear = dynamic_cast<const Linear*>(m);
    const auto* mha = dynamic_cast<const MultiHeadAttention*>(m);
    const bool never = dynamic_cast<const LayerNorm*>(m) || dynamic_cast<const Embedding*>(m) ||
                       dynamic_cast<const LearnedPositionalEncoding*>(m);
    for (const auto& [local, t] : m->named_parameters(false)) {
      const std::string full = prefix.empty() ? local : prefix + "." + local;
      const TensorImpl* id = t.impl();
      bool decays;
      if (linear)
        decays = id == linear->weight.impl();
      else if (mha)
        decays = id == mha->in_proj_weight.impl() || id == mha->q_proj_weight.impl() || id == mha->k_proj_weight.impl() ||
                 id == mha->v_proj_weight.impl();
      else
        decays = !never && t.dim() >= 2;
      if (forced.count(full)) decays = false;
      (decays ? decay : keep).emplace_back(full, t);
    }
  }
  return {ParamGroup(decay).name("decay").weight_decay(weight_decay), ParamGroup(keep).name("no_decay").weight_decay(0.0)};
}

// --- clipping and schedule ---------------------------------------------------------------

namespace detail {
// Element j into lane j mod 16, then the lanes pairwise (detail::lane_sum): independent adds
// the compiler vectorises, where one accumulator was a serial chain (1.3% of the reverse
// model's training step).
double grad_squared_norm(const Tensor& g) {
  double total = 0;
  auto add = [&](const auto* p) {
    total = lane_sum<double, 16>(g.numel(), [p](std::size_t j) { return double(p[j]) * double(p[j]); });
  };
  if (is_float(g.dtype()))
    dispatch_float("clip_grad_norm", g.dtype(), [&](auto zero) { add(g.data<decltype(zero)>()); });
  else
    for (double x : g.to_vector()) total += x * x;
  return total;
}

Tensor scaled_grad(const Tensor& g, double coef) {
  Tensor scaled = empty_tensor(g.dtype(), g.shape(), "clip_grad_norm");  // every element written below
  dispatch_float("clip_grad_norm", g.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* s = g.data<T>();
    T* d = scaled.mutable_data<T>();
    const T k = T(coef);
    for (std::size_t j = 0, n = g.numel(); j < n; ++j) d[j] = s[j] * k;
  });
  return scaled;
}
}  // namespace detail

double clip_grad_norm(const std::vector<Tensor>& params, double max_norm) {
  if (!(max_norm >= 0))
    throw_error<ValueError>("clip_grad_norm", "argument 'max_norm' must be >= 0, got ", max_norm);
  double sq = 0;
  for (std::size_t i = 0; i < params.size(); ++i) {
    if (!params[i].defined())
      throw_error<ValueError>("clip_grad_norm", "parameter ", i, " of ", params.size(), " is undefined");
    Tensor g = params[i].grad();
    if (!g.defined()) continue;
    sq += detail::grad_squared_norm(g);
  }
  const double total = std::sqrt(sq);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    NoGradGuard no_grad;
    for (const Tensor& p : params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      p.set_grad(detail::scaled_grad(g, coef));
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
