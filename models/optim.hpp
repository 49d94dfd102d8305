// xgrad/models/optim.hpp — optimizers (torch.optim update rules), gradient clipping and a
// learning-rate schedule.
//
// The update rules are those of torch.optim with its defaults (foreach=False,
// maximize=False, amsgrad=False), computed element by element in the parameter's own
// dtype (float32 or float64), in place on the parameter storage, with grad mode off.
//
// A step is all-or-nothing: every gradient is validated (dtype and shape equal to the
// parameter's, every element finite) before any parameter or state buffer changes.
// Parameters whose .grad is undefined are skipped, and their per-parameter state (moments,
// Adam's per-parameter step count) is neither created nor advanced, as in PyTorch.
//
// state_dict() names (param = the parameter's name as given to the constructor):
//   "step"                          int64 scalar: number of step() calls
//   "momentum_buffer.<param>"       SGD with momentum != 0 (after the first update)
//   "exp_avg.<param>"               Adam / AdamW first moment   (after the first update)
//   "exp_avg_sq.<param>"            Adam / AdamW second moment  (after the first update)
//   "step.<param>"                  Adam / AdamW int64 scalar: this parameter's update count
// A parameter without entries has no state yet (it has never had a gradient).
// With two or more parameter groups the state also records which group each parameter is
// in, so that a state loads only into an optimizer grouped the same way:
//   "param_groups"                  int64 scalar: number of groups
//   "param_group.<param>"           int64 scalar: the group of every parameter
// (a one-group optimizer, i.e. the flat constructors, writes neither: its state is as before).
// Hyper-parameters (lr, betas, ...) are not part of the state.
//
// Parameter groups (torch.optim's param_groups, libtorch's OptimizerParamGroup): each
// group holds its own parameters and may override hyper-parameters; an option a group does
// not set is the optimizer's (its options object, then the public fields below, which may
// be changed between steps). Learning rates are special, so that one schedule drives every
// group as torch's schedulers do (LambdaLR / libtorch's LRScheduler scale each group's
// initial lr): `lr` is the learning rate of the groups without their own, and a group built
// with .lr(x) runs at x * (lr / options.lr()), the same multiple of lr throughout. Setting
// opt.lr = warmup_cosine_lr(step, base, ...) therefore moves every group by the same
// factor; group_lr(g) gives a group's current value. Groups are fixed at construction (their
// parameters and overrides); the optimizer's fields may change between steps. The nanoGPT recipe:
//   AdamW opt(decay_groups(model, 0.1), AdamWOptions(6e-4).betas(0.9, 0.95));
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "xgrad/models/module.hpp"

namespace xgrad {

// Parameters and the hyper-parameters they override, by name:
//   ParamGroup(no_decay_params).name("no_decay").weight_decay(0.0)
// lr and weight_decay apply to every optimizer; momentum, dampening and nesterov to SGD only;
// betas and eps to Adam and AdamW only (an optimizer refuses a group that sets an option it
// does not have: ValueError naming the group and the option). Values are checked by the
// optimizer, like its options.
class ParamGroup {
 public:
  explicit ParamGroup(NamedTensors params) : params_(std::move(params)) {}
  ParamGroup& name(std::string n) { name_ = std::move(n); return *this; }  // for messages only
  ParamGroup& lr(double v) { lr_ = v; return *this; }
  ParamGroup& weight_decay(double v) { weight_decay_ = v; return *this; }
  ParamGroup& momentum(double v) { momentum_ = v; return *this; }
  ParamGroup& dampening(double v) { dampening_ = v; return *this; }
  ParamGroup& nesterov(bool v) { nesterov_ = v; return *this; }
  ParamGroup& betas(double beta1, double beta2) { beta1_ = beta1; beta2_ = beta2; return *this; }
  ParamGroup& eps(double v) { eps_ = v; return *this; }
  const NamedTensors& params() const { return params_; }
  const std::string& name() const { return name_; }
  const std::optional<double>& lr() const { return lr_; }
  const std::optional<double>& weight_decay() const { return weight_decay_; }
  const std::optional<double>& momentum() const { return momentum_; }
  const std::optional<double>& dampening() const { return dampening_; }
  const std::optional<bool>& nesterov() const { return nesterov_; }
  const std::optional<double>& beta1() const { return beta1_; }
  const std::optional<double>& beta2() const { return beta2_; }
  const std::optional<double>& eps() const { return eps_; }
  // Names of the options this group sets ("lr", "weight_decay", "momentum", "dampening",
  // "nesterov", "betas", "eps"), in that order.
  std::vector<std::string> overrides() const;

 private:
  NamedTensors params_;
  std::string name_;
  std::optional<double> lr_, weight_decay_, momentum_, dampening_, beta1_, beta2_, eps_;
  std::optional<bool> nesterov_;
};

class Optimizer {
 public:
  // params: (name, tensor) pairs, e.g. Module::named_parameters(): one group. Names must be
  // non-empty and unique; tensors defined, float, and distinct (ValueError / DTypeError).
  Optimizer(const NamedTensors& params, double lr);
  // Several groups: the same rules over all of them (a name or a tensor in two groups is a
  // ValueError naming both groups). A group may be empty. A group's own lr needs lr > 0
  // (its lr is kept as a multiple of lr, see above).
  Optimizer(const std::vector<ParamGroup>& groups, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Validates every gradient and the hyper-parameters, then updates every parameter that
  // has a gradient and increments steps(). On error nothing changes.
  virtual void step();
  void zero_grad();  // drops every parameter's .grad (set_to_none=True)

  // Learning rate of the groups without their own lr; a group with .lr(x) runs at
  // x * lr / (the options' lr). May be changed between steps (schedules); must be >= 0 and finite.
  double lr;
  std::int64_t steps() const { return steps_; }
  const NamedTensors& params() const { return params_; }  // every group's, in group order
  virtual const char* name() const = 0;

  std::size_t num_groups() const { return groups_.size(); }
  const ParamGroup& group(std::size_t g) const;  // its parameters and overrides; IndexError
  double group_lr(std::size_t g) const;          // group g's learning rate for the next step
  std::size_t group_of(std::size_t param) const;  // the group of params()[param]; IndexError

  // Deep copies of the state, named as described above.
  NamedTensors state_dict() const;
  // Throws (ValueError for names and values, ShapeError, DTypeError) unless `state` is a
  // valid state for these parameters: a "step" entry, only known buffer names of known
  // parameters, each once, of the parameter's shape and of a float dtype, and for each
  // parameter either all of its entries or none.
  void validate_state_dict(const NamedTensors& state) const;
  // validate_state_dict, then replaces the whole state with copies; on error nothing changes.
  // Buffers are converted to their parameter's dtype (float32 <-> float64), as torch.optim's
  // load_state_dict does, so a state saved before Module::to() loads after it.
  void load_state_dict(const NamedTensors& state);

 protected:
  struct ParamState {
    bool initialized = false;
    std::int64_t step = 0;          // per-parameter update count (when tracked)
    std::vector<Tensor> buffers;    // one per buffer_names() entry, parameter's shape/dtype
  };
  // Names of the per-parameter buffers, in state_dict order.
  virtual std::vector<std::string> buffer_names() const = 0;
  // Whether ParamState::step is part of the state ("step.<param>").
  virtual bool tracks_param_step() const { return false; }
  // Whether parameter i's state is created (zero buffers, step 0) before its first update.
  virtual bool needs_state(std::size_t /*i*/) const { return true; }
  // Throws ValueError when a loaded buffer (finite, of the right shape) holds values no run
  // produces; kind is its buffer_names() entry. Default: any finite value is fine.
  virtual void check_buffer_values(const std::string& /*op*/, const std::string& /*kind*/,
                                   const std::string& /*entry*/, const Tensor& /*t*/) const {}
  static constexpr std::int64_t kMaxSteps = std::int64_t(1) << 53;
  // Throws ValueError when a hyper-parameter (including lr, and every group's) is invalid.
  virtual void check_hyperparameters() const;
  // ValueError when a group sets an option not in `allowed` (called by the constructors).
  void check_group_options(const std::vector<std::string>& allowed) const;
  // "group 1 'no_decay'" (the name when it has one), for messages.
  std::string group_title(std::size_t g) const;
  // "" with one group, else " (group 1 'no_decay')": appended to a message's subject.
  std::string group_label(std::size_t g) const;
  // The value group g uses: its override, else the optimizer's.
  template <class T>
  static T option(const std::optional<T>& override_value, T fallback) {
    return override_value ? *override_value : fallback;
  }
  // Updates parameter i from its validated gradient g (same shape and dtype as p).
  virtual void update(std::size_t i, const Tensor& p, const Tensor& g) = 0;

  NamedTensors params_;
  std::vector<ParamGroup> groups_;          // as given (their params are also in params_)
  std::vector<std::size_t> group_index_;    // params_[i] is in groups_[group_index_[i]]
  double initial_lr_;                       // lr at construction: the base of group lrs
  std::vector<ParamState> state_;
  std::int64_t steps_ = 0;
};

// torch.optim.SGD:
//   d = g + weight_decay * p
//   momentum != 0:  buf = d (first update), else buf = momentum * buf + (1 - dampening) * d
//                   d = nesterov ? d + momentum * buf : buf
//   p = p - lr * d
// lr, momentum, dampening, weight_decay >= 0; nesterov needs momentum > 0 and dampening 0.
// Hyper-parameters by name, as torch::optim::SGDOptions: SGDOptions(0.1).momentum(0.9).nesterov(true).
// (No positional list of doubles: a keyword skipped in a port from Python cannot shift the rest.)
class SGDOptions {
 public:
  explicit SGDOptions(double lr) : lr_(lr) {}
  SGDOptions& momentum(double v) { momentum_ = v; return *this; }
  SGDOptions& dampening(double v) { dampening_ = v; return *this; }
  SGDOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  SGDOptions& nesterov(bool v) { nesterov_ = v; return *this; }
  double lr() const { return lr_; }
  double momentum() const { return momentum_; }
  double dampening() const { return dampening_; }
  double weight_decay() const { return weight_decay_; }
  bool nesterov() const { return nesterov_; }
 private:
  double lr_, momentum_ = 0, dampening_ = 0, weight_decay_ = 0;
  bool nesterov_ = false;
};

class SGD : public Optimizer {
 public:
  SGD(const NamedTensors& params, const SGDOptions& options);
  SGD(const NamedTensors& params, double lr) : SGD(params, SGDOptions(lr)) {}
  // Groups may set lr, weight_decay, momentum, dampening, nesterov.
  SGD(const std::vector<ParamGroup>& groups, const SGDOptions& options);
  SGD(const std::vector<ParamGroup>& groups, double lr) : SGD(groups, SGDOptions(lr)) {}
  const char* name() const override { return "SGD"; }
  double momentum, dampening, weight_decay;  // of the groups that do not set their own
  bool nesterov;

 protected:
  std::vector<std::string> buffer_names() const override;
  bool needs_state(std::size_t i) const override;
  void check_hyperparameters() const override;
  void update(std::size_t i, const Tensor& p, const Tensor& g) override;
};

// torch.optim.Adam (L2 weight decay added to the gradient), t = this parameter's step:
//   g = g + weight_decay * p
//   m = beta1 * m + (1 - beta1) * g;   v = beta2 * v + (1 - beta2) * g^2
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// lr, eps, weight_decay >= 0; betas in [0, 1).
// Hyper-parameters by name, as torch::optim::AdamOptions / AdamWOptions:
//   AdamW(params, AdamWOptions(3e-4).betas(0.9, 0.95).weight_decay(0.1))
// Defaults are PyTorch's; AdamWOptions differs only in weight_decay = 1e-2.
class AdamOptions {
 public:
  explicit AdamOptions(double lr = 1e-3) : lr_(lr) {}
  AdamOptions& betas(double beta1, double beta2) { beta1_ = beta1; beta2_ = beta2; return *this; }
  AdamOptions& eps(double v) { eps_ = v; return *this; }
  AdamOptions& weight_decay(double v) { weight_decay_ = v; return *this; }
  double lr() const { return lr_; }
  double beta1() const { return beta1_; }
  double beta2() const { return beta2_; }
  double eps() const { return eps_; }
  double weight_decay() const { return weight_decay_; }
 protected:
  double lr_, beta1_ = 0.9, beta2_ = 0.999, eps_ = 1e-8, weight_decay_ = 0;
};
class AdamWOptions : public AdamOptions {
 public:
  explicit AdamWOptions(double lr = 1e-3) : AdamOptions(lr) { weight_decay_ = 1e-2; }
  using AdamOptions::eps;  // the getters; the setters below return AdamWOptions&
  using AdamOptions::weight_decay;
  AdamWOptions& betas(double beta1, double beta2) { AdamOptions::betas(beta1, beta2); return *this; }
  AdamWOptions& eps(double v) { AdamOptions::eps(v); return *this; }
  AdamWOptions& weight_decay(double v) { AdamOptions::weight_decay(v); return *this; }
};

class Adam : public Optimizer {
 public:
  explicit Adam(const NamedTensors& params, const AdamOptions& options = AdamOptions());
  Adam(const NamedTensors& params, double lr) : Adam(params, AdamOptions(lr)) {}
  // Groups may set lr, weight_decay, betas, eps.
  explicit Adam(const std::vector<ParamGroup>& groups, const AdamOptions& options = AdamOptions());
  Adam(const std::vector<ParamGroup>& groups, double lr) : Adam(groups, AdamOptions(lr)) {}
  const char* name() const override { return "Adam"; }
  double beta1, beta2, eps, weight_decay;  // of the groups that do not set their own

 protected:
  Adam(const std::vector<ParamGroup>& groups, const AdamOptions& options, bool decoupled);
  std::vector<std::string> buffer_names() const override;
  bool tracks_param_step() const override { return true; }
  void check_buffer_values(const std::string& op, const std::string& kind, const std::string& entry,
                           const Tensor& t) const override;
  void check_hyperparameters() const override;
  void update(std::size_t i, const Tensor& p, const Tensor& g) override;

 private:
  bool decoupled_;
};

// torch.optim.AdamW: decoupled weight decay p = p * (1 - lr * weight_decay), then the Adam
// update without the L2 term.
class AdamW : public Adam {
 public:
  explicit AdamW(const NamedTensors& params, const AdamWOptions& options = AdamWOptions());
  AdamW(const NamedTensors& params, double lr) : AdamW(params, AdamWOptions(lr)) {}
  // Groups may set lr, weight_decay, betas, eps.
  explicit AdamW(const std::vector<ParamGroup>& groups, const AdamWOptions& options = AdamWOptions());
  AdamW(const std::vector<ParamGroup>& groups, double lr) : AdamW(groups, AdamWOptions(lr)) {}
  const char* name() const override { return "AdamW"; }
};

// nanoGPT's two parameter groups for `model` (its configure_optimizers): group 0 "decay"
// with .weight_decay(weight_decay), group 1 "no_decay" with .weight_decay(0), each in
// named_parameters() order. The rule goes by module type, not by name patterns:
//   decay:    the weight of every Linear (attention's out_proj, the feed-forward layers,
//             heads), MultiHeadAttention's in_proj_weight / q_proj_weight / k_proj_weight /
//             v_proj_weight;
//   no decay: every Linear bias, MultiHeadAttention's in_proj_bias, bias_k, bias_v, the
//             weight and bias of LayerNorm, Embedding's weight (so also a decoder's output
//             projection tied to it), LearnedPositionalEncoding's weight;
//   parameters of any other module type (a user's own): decay when they have >= 2 axes
//             (matrices), none otherwise (vectors, scalars), nanoGPT's current rule;
//   no_decay: full parameter names forced into the no-decay group whatever their module,
//             e.g. a ViT's {"cls_token", "pos_embed"} (timm's no_weight_decay()); a name
//             that is no parameter of model is a ValueError.
// weight_decay must be finite and >= 0 (ValueError).
std::vector<ParamGroup> decay_groups(const Module& model, double weight_decay,
                                     const std::vector<std::string>& no_decay = {});

// torch.nn.utils.clip_grad_norm_ (norm_type 2): total = ||(||g_1||, ..., ||g_n||)||_2 over
// the defined grads (computed in double). When c = max_norm / (total + 1e-6) < 1 every grad
// is replaced (set_grad, never written in place: it may be shared) by g * c. Returns total.
// max_norm must be >= 0 (ValueError).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// clip_grad_norm's two pieces, also used by distributed::ZeroOptimizer::clip_grad_norm so that
// a sharded clip has the unsharded one's bits.
namespace detail {
double grad_squared_norm(const Tensor& g);         // sum of g^2 in double, in 16 lanes (detail::lane_sum)
Tensor scaled_grad(const Tensor& g, double coef);  // a new tensor g * T(coef)
}  // namespace detail

// Linear warmup then cosine decay:
//   step < warmup_steps:          base_lr * (step + 1) / warmup_steps
//   warmup_steps <= step < total: min_lr + (base_lr - min_lr) * (1 + cos(pi * r)) / 2,
//                                 r = (step - warmup_steps) / (total_steps - warmup_steps)
//   step >= total_steps:          min_lr
// ValueError unless step >= 0, 0 <= warmup_steps <= total_steps, 0 <= min_lr <= base_lr.
double warmup_cosine_lr(std::int64_t step, double base_lr, std::int64_t warmup_steps,
                        std::int64_t total_steps, double min_lr = 0);

}  // namespace xgrad
