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
// Hyper-parameters (lr, betas, ...) are not part of the state.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "xgrad/models/module.hpp"

namespace xgrad {

class Optimizer {
 public:
  // params: (name, tensor) pairs, e.g. Module::named_parameters(). Names must be non-empty
  // and unique; tensors defined, float, and distinct (ValueError / DTypeError otherwise).
  Optimizer(const NamedTensors& params, double lr);
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Validates every gradient and the hyper-parameters, then updates every parameter that
  // has a gradient and increments steps(). On error nothing changes.
  virtual void step();
  void zero_grad();  // drops every parameter's .grad (set_to_none=True)

  double lr;  // may be changed between steps (schedules); must be >= 0 and finite
  std::int64_t steps() const { return steps_; }
  const NamedTensors& params() const { return params_; }
  virtual const char* name() const = 0;

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
  // Whether a parameter's state is created (zero buffers, step 0) before its first update.
  virtual bool needs_state() const { return true; }
  // Throws ValueError when a loaded buffer (finite, of the right shape) holds values no run
  // produces; kind is its buffer_names() entry. Default: any finite value is fine.
  virtual void check_buffer_values(const std::string& /*op*/, const std::string& /*kind*/,
                                   const std::string& /*entry*/, const Tensor& /*t*/) const {}
  static constexpr std::int64_t kMaxSteps = std::int64_t(1) << 53;
  // Throws ValueError when a hyper-parameter (including lr) is invalid.
  virtual void check_hyperparameters() const;
  // Updates parameter i from its validated gradient g (same shape and dtype as p).
  virtual void update(std::size_t i, const Tensor& p, const Tensor& g) = 0;

  NamedTensors params_;
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
  const char* name() const override { return "SGD"; }
  double momentum, dampening, weight_decay;
  bool nesterov;

 protected:
  std::vector<std::string> buffer_names() const override;
  bool needs_state() const override { return momentum != 0; }
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
  const char* name() const override { return "Adam"; }
  double beta1, beta2, eps, weight_decay;

 protected:
  Adam(const NamedTensors& params, const AdamOptions& options, bool decoupled);
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
  const char* name() const override { return "AdamW"; }
};

// torch.nn.utils.clip_grad_norm_ (norm_type 2): total = ||(||g_1||, ..., ||g_n||)||_2 over
// the defined grads (computed in double). When c = max_norm / (total + 1e-6) < 1 every grad
// is replaced (set_grad, never written in place: it may be shared) by g * c. Returns total.
// max_norm must be >= 0 (ValueError).
double clip_grad_norm(const std::vector<Tensor>& params, double max_norm);

// Linear warmup then cosine decay:
//   step < warmup_steps:          base_lr * (step + 1) / warmup_steps
//   warmup_steps <= step < total: min_lr + (base_lr - min_lr) * (1 + cos(pi * r)) / 2,
//                                 r = (step - warmup_steps) / (total_steps - warmup_steps)
//   step >= total_steps:          min_lr
// ValueError unless step >= 0, 0 <= warmup_steps <= total_steps, 0 <= min_lr <= base_lr.
double warmup_cosine_lr(std::int64_t step, double base_lr, std::int64_t warmup_steps,
                        std::int64_t total_steps, double min_lr = 0);

}  // namespace xgrad
