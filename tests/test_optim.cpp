// Optimizers against torch.optim's documented update rules (recomputed here in double with
// plain loops), all-or-nothing steps, state_dict round trips, gradient clipping and the
// warmup + cosine schedule; parameter groups (per-group hyper-parameters by hand and against
// PyTorch, schedules scaling every group, state and checkpoints with groups, errors) and
// decay_groups (nanoGPT's weight-decay groups).
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "golden.hpp"
#include "expect_error.hpp"
#include "helpers.hpp"
#include "xgrad/framework/array.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/checkpoint.hpp"
#include "xgrad/models/containers.hpp"
#include "xgrad/models/module.hpp"
#include "xgrad/models/optim.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"

using namespace xgrad;
using test::same_bits;
using test::allclose;
using test::expect_error;

namespace {

using Vec = std::vector<double>;

// Two parameters: w (2, 2) and b (3).
struct Tiny : Module {
  Tensor w, b;
  explicit Tiny(DType dt)
      : w(tensor({0.5, -1.0, 2.0, 0.25}, {2, 2}, dt)), b(tensor({0.1, -0.2, 3.0}, {3}, dt)) {
    register_parameter("w", &w);
    register_parameter("b", &b);
  }
};

const Vec kW0 = {0.5, -1.0, 2.0, 0.25}, kB0 = {0.1, -0.2, 3.0};

// Fixed gradients for steps 0, 1, 2 (signs and magnitudes vary; one element is 0).
Vec grad_w(int t) {
  const Vec g[3] = {{0.3, -0.7, 1.5, 0.0}, {-0.2, 0.4, 0.9, -1.1}, {0.05, -0.6, -2.0, 0.8}};
  return g[t];
}
Vec grad_b(int t) {
  const Vec g[3] = {{1.0, -0.5, 0.25}, {0.75, 0.1, -3.0}, {-0.4, 0.0, 0.6}};
  return g[t];
}

void set_grads(Tiny& m, int t) {
  m.w.set_grad(tensor(grad_w(t), {2, 2}, m.w.dtype()));
  m.b.set_grad(tensor(grad_b(t), {3}, m.b.dtype()));
}


boost::test_tools::predicate_result same_state(const NamedTensors& a, const NamedTensors& b) {
  boost::test_tools::predicate_result r(true);
  if (a.size() != b.size()) {
    r = false;
    r.message() << a.size() << " vs " << b.size() << " entries";
    return r;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].first != b[i].first) {
      r = false;
      r.message() << "entry " << i << ": '" << a[i].first << "' vs '" << b[i].first << "'";
      return r;
    }
    auto s = same_bits(a[i].second, b[i].second);
    if (!s) {
      r = false;
      r.message() << "entry '" << a[i].first << "': " << s.message();
      return r;
    }
  }
  return r;
}

double tol(DType dt) { return dt == DType::Float32 ? 2e-6 : 1e-13; }

// --- reference rules (torch.optim documentation, in double) -----------------------------

struct SgdRef {
  double lr, momentum = 0, dampening = 0, wd = 0;
  bool nesterov = false;
  Vec buf;
  void step(Vec& p, const Vec& g0) {
    Vec g = g0;
    for (std::size_t j = 0; j < p.size(); ++j) g[j] += wd * p[j];
    if (momentum != 0) {
      if (buf.empty())
        buf = g;
      else
        for (std::size_t j = 0; j < p.size(); ++j) buf[j] = momentum * buf[j] + (1 - dampening) * g[j];
      for (std::size_t j = 0; j < p.size(); ++j) g[j] = nesterov ? g[j] + momentum * buf[j] : buf[j];
    }
    for (std::size_t j = 0; j < p.size(); ++j) p[j] -= lr * g[j];
  }
};

// m_hat = m / (1 - b1^t), v_hat = v / (1 - b2^t), p -= lr * m_hat / (sqrt(v_hat) + eps)
struct AdamRef {
  AdamRef(double lr_, double b1_ = 0.9, double b2_ = 0.999, double eps_ = 1e-8, double wd_ = 0,
          bool decoupled_ = false)
      : lr(lr_), b1(b1_), b2(b2_), eps(eps_), wd(wd_), decoupled(decoupled_) {}
  double lr, b1, b2, eps, wd;
  bool decoupled;
  Vec m, v;
  int t = 0;
  void step(Vec& p, const Vec& g0) {
    if (m.empty()) m = v = Vec(p.size(), 0.0);
    ++t;
    Vec g = g0;
    for (std::size_t j = 0; j < p.size(); ++j) {
      if (decoupled)
        p[j] *= 1 - lr * wd;
      else
        g[j] += wd * p[j];
      m[j] = b1 * m[j] + (1 - b1) * g[j];
      v[j] = b2 * v[j] + (1 - b2) * g[j] * g[j];
      double mh = m[j] / (1 - std::pow(b1, t)), vh = v[j] / (1 - std::pow(b2, t));
      p[j] -= lr * mh / (std::sqrt(vh) + eps);
    }
  }
};

// Runs 3 steps of `opt` on Tiny and of the reference `ref` (one per parameter), comparing
// after each step.
template <class Ref>
void check_three_steps(Tiny& m, Optimizer& opt, Ref ref_w, Ref ref_b) {
  Vec pw = kW0, pb = kB0;
  for (int t = 0; t < 3; ++t) {
    BOOST_TEST_CONTEXT("step " << t + 1) {
      set_grads(m, t);
      opt.step();
      ref_w.step(pw, grad_w(t));
      ref_b.step(pb, grad_b(t));
      BOOST_TEST(allclose(m.w, pw, tol(m.w.dtype()), tol(m.w.dtype())));
      BOOST_TEST(allclose(m.b, pb, tol(m.b.dtype()), tol(m.b.dtype())));
      BOOST_TEST(opt.steps() == t + 1);
    }
  }
}

const DType kDTypes[] = {DType::Float32, DType::Float64};

}  // namespace

// Hyper-parameters go by name (SGDOptions / AdamOptions / AdamWOptions, as libtorch): a list
// of positional doubles, where a keyword skipped in a port from Python (betas=..., then
// weight_decay=0.1 written as the next number) silently lands in eps, does not compile.
static_assert(!std::is_constructible_v<AdamW, const NamedTensors&, double, double, double, double>);
static_assert(!std::is_constructible_v<AdamW, const NamedTensors&, double, double, double, double, double>);
static_assert(!std::is_constructible_v<Adam, const NamedTensors&, double, double>);
static_assert(!std::is_constructible_v<SGD, const NamedTensors&, double, double>);
static_assert(!std::is_constructible_v<AdamW, const NamedTensors&, const AdamOptions&>);  // Adam's defaults
static_assert(std::is_constructible_v<AdamW, const NamedTensors&, double>);              // lr alone is unambiguous

BOOST_AUTO_TEST_SUITE(optim)

BOOST_AUTO_TEST_CASE(options_objects_have_pytorchs_defaults) {
  const AdamOptions a;
  BOOST_TEST(a.lr() == 1e-3);
  BOOST_TEST(a.beta1() == 0.9);
  BOOST_TEST(a.beta2() == 0.999);
  BOOST_TEST(a.eps() == 1e-8);
  BOOST_TEST(a.weight_decay() == 0.0);
  const AdamWOptions w = AdamWOptions(3e-4).betas(0.9, 0.95);
  BOOST_TEST(w.weight_decay() == 1e-2);  // torch.optim.AdamW's default
  BOOST_TEST(w.beta2() == 0.95);
  const SGDOptions s = SGDOptions(0.1).momentum(0.9).nesterov(true);
  BOOST_TEST((s.lr() == 0.1 && s.momentum() == 0.9 && s.dampening() == 0.0 && s.weight_decay() == 0.0 && s.nesterov()));
  Tensor p = zeros({2});
  p.set_requires_grad(true);
  AdamW opt({{"p", p}}, AdamWOptions(3e-4).betas(0.8, 0.95).eps(1e-6).weight_decay(0.1));
  BOOST_TEST((opt.lr == 3e-4 && opt.beta1 == 0.8 && opt.beta2 == 0.95 && opt.eps == 1e-6 && opt.weight_decay == 0.1));
}

// Module::to converts in place (torch's Module.to): an optimizer built before keeps training
// the model, its state follows the parameters' dtype, and the result equals a run whose
// conversion happened before the optimizer was built.
BOOST_AUTO_TEST_CASE(optimizer_built_before_module_to_keeps_training) {
  Tiny late(DType::Float32), early(DType::Float32);
  AdamW opt_late(late.named_parameters(), 0.1);
  set_grads(late, 0);
  opt_late.step();  // state (exp_avg, exp_avg_sq) created in float32
  late.to(DType::Float64);
  BOOST_TEST((late.w.dtype() == DType::Float64 && opt_late.params()[0].second.dtype() == DType::Float64));
  BOOST_TEST(!late.w.grad().defined());
  set_grads(late, 1);
  opt_late.step();  // updates the float64 parameters; the float32 state is converted first
  for (const auto& [name, t] : opt_late.state_dict())
    if (t.dtype() != DType::Int64) BOOST_TEST(t.dtype() == DType::Float64, name);

  AdamW opt_early(early.named_parameters(), 0.1);
  set_grads(early, 0);
  opt_early.step();
  early.to(DType::Float64);
  AdamW rebuilt(early.named_parameters(), 0.1);
  rebuilt.load_state_dict(opt_early.state_dict());  // float32 state converted on load
  set_grads(early, 1);
  rebuilt.step();
  BOOST_TEST(same_bits(late.w, early.w));
  BOOST_TEST(same_bits(late.b, early.b));
  BOOST_TEST(late.w.to_vector() != kW0);
}

BOOST_AUTO_TEST_CASE(sgd_plain_by_hand) {
  // p = p - lr * g:  0.5 - 0.1 * 0.3 = 0.47, -1 + 0.07 = -0.93, 2 - 0.15 = 1.85, 0.25
  Tiny m(DType::Float64);
  SGD opt(m.named_parameters(), 0.1);
  set_grads(m, 0);
  opt.step();
  BOOST_TEST(allclose(m.w, {0.47, -0.93, 1.85, 0.25}, 1e-15));
  BOOST_TEST(allclose(m.b, {0.0, -0.15, 2.975}, 1e-15, 1e-16));
}

BOOST_AUTO_TEST_CASE(sgd_variants_match_reference) {
  struct Case {
    const char* name;
    double lr, momentum, dampening, wd;
    bool nesterov;
  };
  const Case cases[] = {{"plain", 0.1, 0, 0, 0, false},
                        {"weight decay", 0.05, 0, 0, 0.1, false},
                        {"momentum", 0.1, 0.9, 0, 0, false},
                        {"momentum + dampening + weight decay", 0.1, 0.8, 0.25, 0.01, false},
                        {"nesterov", 0.1, 0.9, 0, 0, true},
                        {"nesterov + weight decay", 0.03, 0.5, 0, 0.2, true}};
  for (DType dt : kDTypes)
    for (const Case& c : cases)
      BOOST_TEST_CONTEXT(c.name << ", " << dtype_name(dt)) {
        Tiny m(dt);
        SGD opt(m.named_parameters(), SGDOptions(c.lr).momentum(c.momentum).dampening(c.dampening).weight_decay(c.wd).nesterov(c.nesterov));
        SgdRef ref{c.lr, c.momentum, c.dampening, c.wd, c.nesterov, {}};
        check_three_steps(m, opt, ref, ref);
      }
}

BOOST_AUTO_TEST_CASE(sgd_first_momentum_step_ignores_dampening) {
  // PyTorch initialises the buffer with the gradient itself (no (1 - dampening) factor).
  Tiny m(DType::Float64);
  SGD opt(m.named_parameters(), SGDOptions(1.0).momentum(0.9).dampening(0.5));
  set_grads(m, 0);
  opt.step();
  BOOST_TEST(allclose(m.w, {0.5 - 0.3, -1.0 + 0.7, 2.0 - 1.5, 0.25}, 1e-15));
  auto sd = opt.state_dict();
  BOOST_TEST(sd[1].first == "momentum_buffer.w");
  BOOST_TEST(allclose(sd[1].second, grad_w(0), 0, 0));
}

BOOST_AUTO_TEST_CASE(adam_first_step_moves_each_element_by_lr) {
  // t = 1: m_hat = g, v_hat = g^2, so p -= lr * g / (|g| + eps) = lr * sign(g) (0 for g = 0).
  Tiny m(DType::Float64);
  Adam opt(m.named_parameters(), 0.01);
  set_grads(m, 0);
  opt.step();
  BOOST_TEST(allclose(m.w, {0.49, -0.99, 1.99, 0.25}, 1e-9));
  BOOST_TEST(allclose(m.b, {0.09, -0.19, 2.99}, 1e-9));
}

BOOST_AUTO_TEST_CASE(adam_and_adamw_match_reference) {
  for (DType dt : kDTypes) {
    BOOST_TEST_CONTEXT("Adam, " << dtype_name(dt)) {
      Tiny m(dt);
      Adam opt(m.named_parameters(), 0.01);
      AdamRef ref{0.01};
      check_three_steps(m, opt, ref, ref);
    }
    BOOST_TEST_CONTEXT("Adam, L2 weight decay, custom betas, " << dtype_name(dt)) {
      Tiny m(dt);
      Adam opt(m.named_parameters(), AdamOptions(0.05).betas(0.8, 0.99).eps(1e-6).weight_decay(0.1));
      AdamRef ref{0.05, 0.8, 0.99, 1e-6, 0.1, false};
      check_three_steps(m, opt, ref, ref);
    }
    BOOST_TEST_CONTEXT("AdamW, default weight decay, " << dtype_name(dt)) {
      Tiny m(dt);
      AdamW opt(m.named_parameters(), 0.01);
      AdamRef ref{0.01, 0.9, 0.999, 1e-8, 1e-2, true};
      check_three_steps(m, opt, ref, ref);
    }
    BOOST_TEST_CONTEXT("AdamW, weight decay 0.5, " << dtype_name(dt)) {
      Tiny m(dt);
      AdamW opt(m.named_parameters(), AdamWOptions(0.1).betas(0.9, 0.95).eps(1e-8).weight_decay(0.5));
      AdamRef ref{0.1, 0.9, 0.95, 1e-8, 0.5, true};
      check_three_steps(m, opt, ref, ref);
    }
  }
}

BOOST_AUTO_TEST_CASE(adamw_decay_is_decoupled_from_adam_l2) {
  // With a zero gradient, Adam's L2 term still moves p (by ~lr), AdamW only shrinks it.
  Tiny a(DType::Float64), b(DType::Float64);
  Adam adam(a.named_parameters(), AdamOptions(0.1).betas(0.9, 0.999).eps(1e-8).weight_decay(0.5));
  AdamW adamw(b.named_parameters(), AdamWOptions(0.1).betas(0.9, 0.999).eps(1e-8).weight_decay(0.5));
  a.w.set_grad(zeros({2, 2}, DType::Float64));
  b.w.set_grad(zeros({2, 2}, DType::Float64));
  adam.step();
  adamw.step();
  BOOST_TEST(allclose(a.w, {0.4, -0.9, 1.9, 0.15}, 1e-7));  // eps: lr * 0.5p / (0.5|p| + eps)
  BOOST_TEST(allclose(b.w, {0.5 * 0.95, -0.95, 2.0 * 0.95, 0.25 * 0.95}, 1e-15));
}

BOOST_AUTO_TEST_CASE(params_without_grad_are_skipped_with_their_own_step_count) {
  Tiny m(DType::Float64);
  Adam opt(m.named_parameters(), 0.01);
  AdamRef ref_w{0.01}, ref_b{0.01};
  Vec pw = kW0, pb = kB0;
  // Step 1: only w has a gradient; b is untouched and gets no state.
  m.w.set_grad(tensor(grad_w(0), {2, 2}, DType::Float64));
  opt.step();
  ref_w.step(pw, grad_w(0));
  BOOST_TEST(allclose(m.w, pw, 1e-13));
  BOOST_TEST(allclose(m.b, kB0, 0, 0));
  auto sd = opt.state_dict();
  BOOST_TEST(sd.size() == 4u);  // step, exp_avg.w, exp_avg_sq.w, step.w
  // Step 2: both; b's bias correction uses its own t = 1.
  set_grads(m, 1);
  opt.step();
  ref_w.step(pw, grad_w(1));
  ref_b.step(pb, grad_b(1));
  BOOST_TEST(allclose(m.w, pw, 1e-13));
  BOOST_TEST(allclose(m.b, pb, 1e-13));
  sd = opt.state_dict();
  BOOST_TEST(sd.size() == 7u);
  BOOST_TEST(sd[0].first == "step");
  BOOST_TEST(sd[0].second.item() == 2);
  BOOST_TEST(sd[3].first == "step.w");
  BOOST_TEST(sd[3].second.item() == 2);
  BOOST_TEST(sd[6].first == "step.b");
  BOOST_TEST(sd[6].second.item() == 1);
}

BOOST_AUTO_TEST_CASE(zero_grad_drops_grads) {
  Tiny m(DType::Float32);
  SGD opt(m.named_parameters(), 0.1);
  set_grads(m, 0);
  opt.zero_grad();
  BOOST_TEST(!m.w.grad().defined());
  BOOST_TEST(!m.b.grad().defined());
  opt.step();  // nothing to do
  BOOST_TEST(allclose(m.w, kW0, 0, 0));
  BOOST_TEST(opt.steps() == 1);
}

BOOST_AUTO_TEST_CASE(training_with_backward_reduces_the_loss) {
  // loss = mean((x W^T - y)^2) + 1e-3 * |b|^2
  for (DType dt : kDTypes)
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Tiny m(dt);
      AdamW opt(m.named_parameters(), 0.05);
      Tensor x = tensor({1, 2, -1, 0.5, 0, 1}, {3, 2}, dt);
      Tensor y = tensor({1, 0, 0, 1, 0.5, 0.5}, {3, 2}, dt);
      auto loss_fn = [&] {
        Tensor d = sub(linear(x, m.w), y);
        return add(mean(mul(d, d)), mul_scalar(sum(mul(m.b, m.b)), 1e-3));
      };
      double first = loss_fn().item(), last = first;
      for (int i = 0; i < 50; ++i) {
        opt.zero_grad();
        Tensor loss = loss_fn();
        loss.backward();
        opt.step();
        last = loss.item();
      }
      BOOST_TEST(last < 0.5 * first);
      BOOST_TEST(m.w.requires_grad());
      BOOST_TEST(m.w.is_leaf());
    }
}

BOOST_AUTO_TEST_CASE(state_dict_round_trip_continues_identically) {
  for (DType dt : kDTypes)
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      auto run = [&](auto make_opt) {
        // Uninterrupted: 3 steps. Interrupted: 2 steps, state copied into a fresh optimizer
        // over a copy of the parameters, then step 3.
        Tiny a(dt), b(dt);
        auto opt_a = make_opt(a);
        for (int t = 0; t < 2; ++t) {
          set_grads(a, t);
          opt_a->step();
        }
        NamedTensors sd = opt_a->state_dict();
        b.load_parameters(a.named_parameters());
        auto opt_b = make_opt(b);
        opt_b->load_state_dict(sd);
        BOOST_TEST(opt_b->steps() == 2);
        BOOST_TEST(same_state(opt_b->state_dict(), sd));
        set_grads(a, 2);
        set_grads(b, 2);
        opt_a->step();
        opt_b->step();
        BOOST_TEST(same_bits(a.w, b.w));
        BOOST_TEST(same_bits(a.b, b.b));
        BOOST_TEST(same_state(opt_a->state_dict(), opt_b->state_dict()));
        // The state_dict is a copy: stepping did not change `sd`.
        BOOST_TEST(sd[0].second.item() == 2);
      };
      run([](Tiny& m) { return std::make_unique<Adam>(m.named_parameters(), 0.01); });
      run([](Tiny& m) { return std::make_unique<AdamW>(m.named_parameters(), 0.01); });
      run([](Tiny& m) { return std::make_unique<SGD>(m.named_parameters(), SGDOptions(0.1).momentum(0.9).dampening(0.1)); });
      run([](Tiny& m) { return std::make_unique<SGD>(m.named_parameters(), SGDOptions(0.1).momentum(0.9).dampening(0).weight_decay(0).nesterov(true)); });
    }
}

BOOST_AUTO_TEST_CASE(state_dict_names) {
  Tiny m(DType::Float32);
  SGD plain(m.named_parameters(), 0.1);
  set_grads(m, 0);
  plain.step();
  auto sd = plain.state_dict();
  BOOST_TEST(sd.size() == 1u);  // momentum 0 keeps no buffers
  BOOST_TEST(sd[0].first == "step");
  BOOST_TEST(sd[0].second.dtype() == DType::Int64);
  BOOST_TEST(sd[0].second.dim() == 0u);
  Adam adam(m.named_parameters());
  adam.step();
  std::vector<std::string> names;
  for (auto& [n, t] : adam.state_dict()) names.push_back(n);
  std::vector<std::string> expected = {"step", "exp_avg.w", "exp_avg_sq.w", "step.w",
                                       "exp_avg.b", "exp_avg_sq.b", "step.b"};
  BOOST_TEST(names == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(load_state_dict_rejects_bad_state_and_changes_nothing) {
  Tiny m(DType::Float32);
  Adam opt(m.named_parameters(), 0.01);
  set_grads(m, 0);
  opt.step();
  const NamedTensors good = opt.state_dict();
  auto with = [&](const std::string& name, const Tensor& t) { return test::replaced(good, name, t); };
  auto without = [&](const std::string& name) { return test::removed(good, name); };
  auto plus = [&](const std::string& name, const Tensor& t) {
    NamedTensors s = good;
    s.emplace_back(name, t);
    return s;
  };
  // Advance the optimizer so that a partial load would be visible.
  set_grads(m, 1);
  opt.step();
  const NamedTensors before = opt.state_dict();
  auto expect = [&](const NamedTensors& s, auto type_tag, const std::string& needle) {
    using E = decltype(type_tag);
    BOOST_CHECK_EXCEPTION(opt.load_state_dict(s), E, [&](const E& e) {
      bool ok = std::string(e.what()).find(needle) != std::string::npos &&
                std::string(e.what()).find("Adam::load_state_dict") != std::string::npos;
      if (!ok) BOOST_TEST_MESSAGE("message: " << e.what());
      return ok;
    });
    BOOST_TEST(same_state(opt.state_dict(), before));
  };
  expect(with("exp_avg.w", zeros({4}, DType::Float32)), ShapeError{""}, "exp_avg.w");
  expect(with("exp_avg_sq.b", index_tensor({0, 0, 0}, {3})), DTypeError{""}, "exp_avg_sq.b");
  expect(with("step", scalar(1.0, DType::Float32)), DTypeError{""}, "'step'");
  expect(with("step.w", index_tensor({-1}, {})), ValueError{""}, "step.w");
  expect(without("step"), ValueError{""}, "missing entry 'step'");
  expect(without("exp_avg_sq.w"), ValueError{""}, "exp_avg_sq.w");
  expect(plus("momentum_buffer.w", zeros({2, 2})), ValueError{""}, "momentum_buffer.w");
  expect(plus("exp_avg.nope", zeros({2, 2})), ValueError{""}, "exp_avg.nope");
  expect(plus("exp_avg.w", zeros({2, 2})), ValueError{""}, "more than once");
  // Loading the good state works, and an empty-but-for-step state clears every buffer.
  opt.load_state_dict(good);
  BOOST_TEST(same_state(opt.state_dict(), good));
  opt.load_state_dict({{"step", index_tensor({0}, {})}});
  BOOST_TEST(opt.state_dict().size() == 1u);
  BOOST_TEST(opt.steps() == 0);
}

// Float buffers are converted to their parameter's dtype (torch.optim's rule), so a state
// saved before Module::to() loads after it; the conversion is exact for float32 -> float64.
BOOST_AUTO_TEST_CASE(load_state_dict_converts_buffers_to_the_parameters_dtype) {
  for (DType from : {DType::Float32, DType::Float64})
    BOOST_TEST_CONTEXT("state in " << dtype_name(from)) {
      const DType to = from == DType::Float32 ? DType::Float64 : DType::Float32;
      Tiny src(from);
      Adam src_opt(src.named_parameters(), 0.01);
      for (int k = 0; k < 2; ++k) {
        set_grads(src, k);
        src_opt.step();
      }
      Tiny m(to);
      Adam opt(m.named_parameters(), 0.01);
      opt.load_state_dict(src_opt.state_dict());
      const NamedTensors got = opt.state_dict(), want = src_opt.state_dict();
      BOOST_TEST_REQUIRE(got.size() == want.size());
      for (std::size_t i = 0; i < got.size(); ++i)
        BOOST_TEST_CONTEXT(got[i].first) {
          BOOST_TEST(got[i].first == want[i].first);
          const Tensor& w = want[i].second;
          const Tensor expected = is_float(w.dtype()) ? w.to(to) : w;
          BOOST_TEST(got[i].second.dtype() == expected.dtype());
          BOOST_TEST(got[i].second.to_vector() == expected.to_vector(), boost::test_tools::per_element());
        }
      // Training continues in the parameter's dtype.
      set_grads(m, 2);
      opt.step();
      BOOST_TEST(opt.state_dict()[1].second.dtype() == to);
      BOOST_TEST(opt.steps() == 3);
    }
}

BOOST_AUTO_TEST_CASE(rejected_step_changes_nothing) {
  for (DType dt : kDTypes)
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Tiny m(dt);
      Adam opt(m.named_parameters(), 0.01);
      set_grads(m, 0);
      opt.step();
      const Tensor w0 = m.w.clone(), b0 = m.b.clone();
      const NamedTensors s0 = opt.state_dict();
      auto unchanged = [&] {
        BOOST_TEST(same_bits(m.w, w0));
        BOOST_TEST(same_bits(m.b, b0));
        BOOST_TEST(same_state(opt.state_dict(), s0));
        BOOST_TEST(opt.steps() == 1);
      };
      // w's gradient is fine, b's (later in the list) has a NaN / an inf.
      for (double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
        set_grads(m, 1);
        m.b.set_grad(tensor({0.1, bad, 0.2}, {3}, dt));
        BOOST_CHECK_EXCEPTION(opt.step(), ValueError, [](const ValueError& e) {
          std::string s = e.what();
          return s.find("Adam::step") != std::string::npos && s.find("'b'") != std::string::npos &&
                 s.find("flat index 1") != std::string::npos;
        });
        unchanged();
      }
      // Wrong shape / dtype (set directly: set_grad itself refuses them).
      set_grads(m, 1);
      m.b.impl()->grad = tensor({1, 2}, {2}, dt);
      BOOST_CHECK_EXCEPTION(opt.step(), ShapeError, [](const ShapeError& e) {
        std::string s = e.what();
        return s.find("'b'") != std::string::npos && s.find("(2)") != std::string::npos &&
               s.find("(3)") != std::string::npos;
      });
      unchanged();
      m.b.impl()->grad = tensor({1, 2, 3}, {3}, dt == DType::Float32 ? DType::Float64 : DType::Float32);
      BOOST_CHECK_THROW(opt.step(), DTypeError);
      unchanged();
      // A negative lr set between steps.
      set_grads(m, 1);
      opt.lr = -0.1;
      BOOST_CHECK_THROW(opt.step(), ValueError);
      unchanged();
      opt.lr = 0.01;
      opt.step();
      BOOST_TEST(opt.steps() == 2);
    }
}

BOOST_AUTO_TEST_CASE(bad_hyperparameters_throw_value_error) {
  Tiny m(DType::Float32);
  auto p = m.named_parameters();
  BOOST_CHECK_THROW(SGD(p, -0.1), ValueError);
  BOOST_CHECK_THROW(SGD(p, std::nan("")), ValueError);
  BOOST_CHECK_THROW(SGD(p, SGDOptions(0.1).momentum(-0.5)), ValueError);
  BOOST_CHECK_THROW(SGD(p, SGDOptions(0.1).momentum(0.9).dampening(0).weight_decay(-1e-4)), ValueError);
  BOOST_CHECK_THROW(SGD(p, SGDOptions(0.1).momentum(0).dampening(0).weight_decay(0).nesterov(true)), ValueError);     // nesterov without momentum
  BOOST_CHECK_THROW(SGD(p, SGDOptions(0.1).momentum(0.9).dampening(0.1).weight_decay(0).nesterov(true)), ValueError); // nesterov with dampening
  BOOST_CHECK_THROW(Adam(p, -1e-3), ValueError);
  BOOST_CHECK_THROW(Adam(p, AdamOptions(1e-3).betas(1.0, 0.999)), ValueError);
  BOOST_CHECK_THROW(Adam(p, AdamOptions(1e-3).betas(-0.1, 0.999)), ValueError);
  BOOST_CHECK_THROW(Adam(p, AdamOptions(1e-3).betas(0.9, 1.0)), ValueError);
  BOOST_CHECK_THROW(Adam(p, AdamOptions(1e-3).betas(0.9, 0.999).eps(-1e-8)), ValueError);
  BOOST_CHECK_THROW(Adam(p, AdamOptions(1e-3).betas(0.9, 0.999).eps(1e-8).weight_decay(-0.1)), ValueError);
  BOOST_CHECK_EXCEPTION(AdamW(p, AdamWOptions(1e-3).betas(0.9, 1.5)), ValueError, [](const ValueError& e) {
    return std::string(e.what()).find("AdamW: beta2") != std::string::npos;
  });
  BOOST_CHECK_NO_THROW(Adam(p, AdamOptions(0.0).betas(0.0, 0.0).eps(0.0)));
  // Parameter lists: duplicates and non-float tensors.
  NamedTensors dup = {{"a", m.w}, {"a", m.b}};
  BOOST_CHECK_THROW(SGD(dup, 0.1), ValueError);
  NamedTensors same = {{"a", m.w}, {"b", m.w}};
  BOOST_CHECK_THROW(SGD(same, 0.1), ValueError);
  NamedTensors ints = {{"i", index_tensor({1}, {1})}};
  BOOST_CHECK_THROW(SGD(ints, 0.1), DTypeError);
}

BOOST_AUTO_TEST_CASE(clip_grad_norm_value_and_scaling) {
  for (DType dt : kDTypes)
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      Tensor a = tensor({0, 0}, {2}, dt).set_requires_grad(), b = tensor({0}, {1}, dt).set_requires_grad();
      Tensor c = tensor({1}, {1}, dt).set_requires_grad();  // no grad: skipped
      Tensor ga = tensor({3, 4}, {2}, dt), gb = tensor({12}, {1}, dt);
      a.set_grad(ga);
      b.set_grad(gb);
      // Large max_norm: total 13 returned, grads untouched (same tensors).
      BOOST_TEST(clip_grad_norm({a, b, c}, 100.0) == 13.0, boost::test_tools::tolerance(1e-12));
      BOOST_TEST(a.grad().impl() == ga.impl());
      // max_norm 6.5: grads scaled by 6.5 / (13 + 1e-6) into new tensors; the old ones keep
      // their values (they may be shared).
      double total = clip_grad_norm({a, b, c}, 6.5);
      BOOST_TEST(total == 13.0, boost::test_tools::tolerance(1e-12));
      const double k = 6.5 / (13.0 + 1e-6);
      BOOST_TEST(allclose(a.grad(), {3 * k, 4 * k}, tol(dt)));
      BOOST_TEST(allclose(b.grad(), {12 * k}, tol(dt)));
      BOOST_TEST(a.grad().dtype() == dt);
      BOOST_TEST(a.grad().impl() != ga.impl());
      BOOST_TEST(allclose(ga, {3, 4}, 0, 0));
      BOOST_TEST(!c.grad().defined());
      // The norm is now 6.5 * 13 / (13 + 1e-6); with max_norm 7 the coefficient is > 1 and
      // nothing changes.
      Tensor kept = a.grad();
      BOOST_TEST(clip_grad_norm({a, b, c}, 7.0) == 13 * k, boost::test_tools::tolerance(1e-6));
      BOOST_TEST(a.grad().impl() == kept.impl());
      BOOST_CHECK_THROW(clip_grad_norm({a}, -1.0), ValueError);
      BOOST_TEST(clip_grad_norm({c}, 1.0) == 0.0);
    }
}

// The squared norm of a long gradient: element j into lane j mod 16 of double sums, then the
// lanes pairwise in halves (models/optim.hpp, detail::lane_sum), that order exactly;
// clip_grad_norm is its square root.
BOOST_AUTO_TEST_CASE(clip_grad_norm_sums_squares_in_sixteen_lanes) {
  for (DType dt : kDTypes)
    for (std::size_t n : {1, 16, 33, 5003})
      BOOST_TEST_CONTEXT(dtype_name(dt) << " n " << n) {
        const auto gv = test::vals(n, unsigned(n) + 7, -3.0, 3.0);
        Tensor p = zeros({n}, dt).set_requires_grad();
        p.set_grad(tensor(gv, {n}, dt));
        const auto stored = p.grad().to_vector();  // as rounded to dt
        double lane[16] = {};
        for (std::size_t j = 0; j < n; ++j) lane[j % 16] += stored[j] * stored[j];
        const double expect = test::add_lanes_in_halves(lane);
        BOOST_TEST(detail::grad_squared_norm(p.grad()) == expect);
        BOOST_TEST(clip_grad_norm({p}, 1e9) == std::sqrt(expect));
      }
}

// step()'s check for non-finite gradients (blocks of 256) names the first one of a long
// gradient, in any block, and updates nothing.
BOOST_AUTO_TEST_CASE(step_names_the_first_non_finite_gradient_element) {
  const double inf = std::numeric_limits<double>::infinity();
  for (DType dt : kDTypes)
    for (const auto& [bad, first] : std::vector<std::pair<std::vector<std::pair<std::size_t, double>>, std::string>>{
             {{{999, inf}}, "flat index 999"},
             {{{900, std::nan("")}, {600, -inf}, {601, inf}}, "flat index 600"},
             {{{256, std::nan("")}}, "flat index 256"},
             {{{255, -inf}, {256, inf}}, "flat index 255"}})
      BOOST_TEST_CONTEXT(dtype_name(dt) << " " << first) {
        Tensor p = zeros({1000}, dt).set_requires_grad();
        std::vector<double> g(1000, 0.5);
        for (const auto& [i, v] : bad) g[i] = v;
        p.set_grad(tensor(g, {1000}, dt));
        AdamW opt({{"p", p}}, 1e-2);
        test::expect_error<ValueError>([&] { opt.step(); }, {"AdamW::step", "'p'", first, "nothing was updated"});
        BOOST_TEST(allclose(p, std::vector<double>(1000, 0.0), 0, 0));
      }
}

BOOST_AUTO_TEST_CASE(warmup_cosine_schedule) {
  const double base = 1e-3, lo = 1e-5;
  const double pi = std::acos(-1.0);
  auto lr = [&](std::int64_t s) { return warmup_cosine_lr(s, base, 10, 110, lo); };
  auto close = boost::test_tools::tolerance(1e-12);
  BOOST_TEST(lr(0) == 1e-4, close);
  BOOST_TEST(lr(4) == 5e-4, close);
  BOOST_TEST(lr(9) == 1e-3, close);
  BOOST_TEST(lr(10) == 1e-3, close);
  BOOST_TEST(lr(35) == lo + (base - lo) * 0.5 * (1 + std::cos(pi * 0.25)), close);
  BOOST_TEST(lr(60) == (base + lo) / 2, close);
  BOOST_TEST(lr(109) == lo + (base - lo) * 0.5 * (1 + std::cos(pi * 0.99)), close);
  BOOST_TEST(lr(110) == lo, close);
  BOOST_TEST(lr(1000) == lo, close);
  for (std::int64_t s = 11; s < 110; ++s) BOOST_TEST(lr(s) < lr(s - 1));
  BOOST_TEST(warmup_cosine_lr(0, 0.1, 0, 100) == 0.1, close);
  BOOST_TEST(warmup_cosine_lr(50, 0.1, 0, 100) == 0.05, close);
  BOOST_TEST(warmup_cosine_lr(100, 0.1, 0, 100) == 0.0);
  BOOST_TEST(warmup_cosine_lr(3, 0.1, 5, 5) == 0.08, close);
  BOOST_TEST(warmup_cosine_lr(5, 0.1, 5, 5) == 0.0);
  BOOST_CHECK_THROW(warmup_cosine_lr(-1, base, 10, 110), ValueError);
  BOOST_CHECK_THROW(warmup_cosine_lr(0, base, 20, 10), ValueError);
  BOOST_CHECK_THROW(warmup_cosine_lr(0, base, -1, 10), ValueError);
  BOOST_CHECK_THROW(warmup_cosine_lr(0, base, 1, 10, 2 * base), ValueError);
  BOOST_CHECK_THROW(warmup_cosine_lr(0, -base, 1, 10, 0), ValueError);
}

// --- parameter groups --------------------------------------------------------------------

namespace {

// w in group 0, b in group 1.
std::vector<ParamGroup> two_groups(Tiny& m) {
  return {ParamGroup({{"w", m.w}}).name("matrices"), ParamGroup({{"b", m.b}}).name("vectors")};
}

std::vector<std::string> names(const NamedTensors& ts) {
  std::vector<std::string> out;
  for (const auto& [n, t] : ts) out.push_back(n);
  return out;
}

}  // namespace

// Each group's own lr / weight_decay / momentum / nesterov / betas / eps against the reference
// rules run with that group's values; the options fill in what a group does not set.
BOOST_AUTO_TEST_CASE(groups_use_their_own_hyperparameters) {
  for (DType dt : kDTypes) {
    BOOST_TEST_CONTEXT("SGD, " << dtype_name(dt)) {
      Tiny m(dt);
      auto g = two_groups(m);
      g[0].weight_decay(0.01);
      g[1].lr(0.3).momentum(0.5).nesterov(true);
      SGD opt(g, SGDOptions(0.1).momentum(0.9));
      BOOST_TEST(opt.num_groups() == 2u);
      BOOST_TEST(opt.group_lr(0) == 0.1);
      BOOST_TEST(opt.group_lr(1) == 0.3);  // exactly the group's value while lr is unchanged
      check_three_steps(m, opt, SgdRef{0.1, 0.9, 0, 0.01, false, {}}, SgdRef{0.3, 0.5, 0, 0, true, {}});
    }
    BOOST_TEST_CONTEXT("Adam, " << dtype_name(dt)) {
      Tiny m(dt);
      auto g = two_groups(m);
      g[0].betas(0.8, 0.99).weight_decay(0.1);
      g[1].lr(0.01).eps(1e-6);
      Adam opt(g, AdamOptions(0.05));
      check_three_steps(m, opt, AdamRef(0.05, 0.8, 0.99, 1e-8, 0.1), AdamRef(0.01, 0.9, 0.999, 1e-6, 0.0));
    }
    BOOST_TEST_CONTEXT("AdamW, " << dtype_name(dt)) {
      Tiny m(dt);
      auto g = two_groups(m);
      g[1].weight_decay(0.0).lr(0.2);  // group 0 keeps the options' weight decay 0.5
      AdamW opt(g, AdamWOptions(0.1).betas(0.9, 0.95).weight_decay(0.5));
      check_three_steps(m, opt, AdamRef(0.1, 0.9, 0.95, 1e-8, 0.5, true), AdamRef(0.2, 0.9, 0.95, 1e-8, 0.0, true));
    }
  }
}

// One group holding everything is the flat optimizer, bit for bit, and writes the same state.
BOOST_AUTO_TEST_CASE(one_group_is_the_flat_optimizer) {
  Tiny a(DType::Float32), b(DType::Float32);
  AdamW flat(a.named_parameters(), AdamWOptions(0.1).weight_decay(0.2));
  AdamW grouped(std::vector<ParamGroup>{ParamGroup(b.named_parameters())}, AdamWOptions(0.1).weight_decay(0.2));
  BOOST_TEST((flat.num_groups() == 1u && grouped.num_groups() == 1u));
  for (int t = 0; t < 3; ++t) {
    set_grads(a, t);
    set_grads(b, t);
    flat.step();
    grouped.step();
  }
  BOOST_TEST(same_bits(a.w, b.w));
  BOOST_TEST(same_bits(a.b, b.b));
  BOOST_TEST(same_state(flat.state_dict(), grouped.state_dict()));
  BOOST_TEST((names(flat.state_dict()) ==
              std::vector<std::string>{"step", "exp_avg.w", "exp_avg_sq.w", "step.w", "exp_avg.b", "exp_avg_sq.b", "step.b"}));
}

// A schedule sets opt.lr; every group keeps its ratio to it (torch's LambdaLR multiplies each
// group's initial lr by the same factor).
BOOST_AUTO_TEST_CASE(schedule_scales_every_group) {
  Tiny m(DType::Float64);
  auto g = two_groups(m);
  g[1].lr(0.03);
  SGD opt(g, 0.01);
  SgdRef ref_w{0.01, 0, 0, 0, false, {}}, ref_b{0.03, 0, 0, 0, false, {}};
  Vec pw = kW0, pb = kB0;
  for (int t = 0; t < 3; ++t) {
    const double factor = warmup_cosine_lr(t, 1.0, 2, 3, 0.1);  // 0.5, 1, 0.1 * ...
    opt.lr = 0.01 * factor;
    BOOST_TEST(opt.group_lr(0) == 0.01 * factor);
    BOOST_TEST(opt.group_lr(1) == 0.03 * factor, boost::test_tools::tolerance(1e-15));
    set_grads(m, t);
    opt.step();
    ref_w.lr = 0.01 * factor;
    ref_b.lr = 0.03 * factor;
    ref_w.step(pw, grad_w(t));
    ref_b.step(pb, grad_b(t));
    BOOST_TEST(allclose(m.w, pw, 1e-15, 1e-16));
    BOOST_TEST(allclose(m.b, pb, 1e-15, 1e-16));
  }
}

BOOST_AUTO_TEST_CASE(group_errors_name_the_group_and_the_parameter) {
  Tiny m(DType::Float32);
  Tensor other = zeros({2}).set_requires_grad();
  // The same tensor in two groups (under two names, or one).
  expect_error<ValueError>([&] { SGD o({ParamGroup({{"w", m.w}}), ParamGroup({{"w2", m.w}}).name("again")}, 0.1); },
                           {"Optimizer", "'w2'", "group 1 'again'", "same tensor as parameter 'w'", "group 0",
                            "one group only"});
  expect_error<ValueError>([&] { SGD o({ParamGroup({{"w", m.w}}), ParamGroup({{"w", m.w}})}, 0.1); },
                           {"Optimizer", "'w'", "more than once", "group 0 and group 1"});
  expect_error<ValueError>([&] { SGD o({ParamGroup({{"p", m.w}}), ParamGroup({{"p", other}})}, 0.1); },
                           {"Optimizer", "'p'", "more than once", "group 0 and group 1"});
  expect_error<ValueError>([&] { SGD o({ParamGroup({{"w", m.w}, {"x", m.w}})}, 0.1); },
                           {"Optimizer", "'x'", "same tensor as an earlier one ('w')"});
  // Options a group may not set.
  expect_error<ValueError>([&] { Adam o({ParamGroup({{"w", m.w}}).name("g").momentum(0.9)}, 0.1); },
                           {"Adam", "group 0 'g'", "'momentum'", "may set lr, weight_decay, betas, eps"});
  expect_error<ValueError>([&] { AdamW o({ParamGroup({{"w", m.w}}), ParamGroup({{"b", m.b}}).nesterov(true)}, 0.1); },
                           {"AdamW", "group 1", "'nesterov'"});
  expect_error<ValueError>([&] { SGD o({ParamGroup({{"w", m.w}}).betas(0.9, 0.9)}, 0.1); },
                           {"SGD", "group 0", "'betas'", "momentum, dampening, nesterov"});
  expect_error<ValueError>([&] { SGD o({ParamGroup({{"w", m.w}}).eps(1e-8)}, 0.1); }, {"SGD", "'eps'"});
  // Invalid group values, named with the group.
  auto bad_wd = two_groups(m);
  bad_wd[1].weight_decay(-1.0);
  expect_error<ValueError>([&] { AdamW o(bad_wd, 0.1); },
                           {"AdamW", "group 1 'vectors'", "weight_decay must be finite and >= 0", "-1"});
  auto bad_beta = two_groups(m);
  bad_beta[0].betas(0.9, 1.0);
  expect_error<ValueError>([&] { Adam o(bad_beta, 0.1); }, {"Adam", "group 0 'matrices'", "beta2", "[0, 1)"});
  auto bad_nesterov = two_groups(m);
  bad_nesterov[1].nesterov(true);
  expect_error<ValueError>([&] { SGD o(bad_nesterov, 0.1); }, {"SGD", "group 1 'vectors'", "nesterov", "momentum 0"});
  auto neg_lr = two_groups(m);
  neg_lr[1].lr(-0.5);
  expect_error<ValueError>([&] { SGD o(neg_lr, 0.1); }, {"SGD", "group 1 'vectors'", "lr", "-0.5"});
  auto zero_base = two_groups(m);
  zero_base[1].lr(0.5);
  expect_error<ValueError>([&] { SGD o(zero_base, 0.0); },
                           {"Optimizer", "group 1 'vectors'", "sets lr 0.5", "optimizer's lr is 0", "multiple"});
  SGD ok(two_groups(m), 0.1);
  expect_error<IndexError>([&] { ok.group(2); }, {"SGD::group", "group 2", "2 groups"});
  BOOST_TEST(ok.group(1).name() == "vectors");
  BOOST_TEST(ok.group_of(1) == 1u);
  expect_error<IndexError>([&] { ok.group_of(2); }, {"SGD::group_of", "parameter 2", "2 parameters"});
  SGD zero_groups(std::vector<ParamGroup>{}, 0.1);  // no group at all: one empty group
  BOOST_TEST(zero_groups.num_groups() == 1u);
  zero_groups.step();
}

// state_dict with groups: the group of every parameter is recorded; a state loads only into an
// optimizer grouped the same way (errors name the group and the parameter; nothing changes).
BOOST_AUTO_TEST_CASE(state_dict_with_groups_round_trip_and_mismatches) {
  Tiny m(DType::Float32);
  auto g = two_groups(m);
  g[1].lr(0.05).weight_decay(0.0);
  AdamW opt(g, AdamWOptions(0.1).weight_decay(0.3));
  for (int t = 0; t < 2; ++t) {
    set_grads(m, t);
    opt.step();
  }
  const NamedTensors sd = opt.state_dict();
  BOOST_TEST((names(sd) == std::vector<std::string>{"step", "param_groups", "param_group.w", "param_group.b",
                                                     "exp_avg.w", "exp_avg_sq.w", "step.w", "exp_avg.b",
                                                     "exp_avg_sq.b", "step.b"}));
  BOOST_TEST(sd[1].second.to_vector() == (Vec{2}));
  BOOST_TEST(sd[3].second.to_vector() == (Vec{1}));
  // Round trip: a new optimizer with the same groups continues exactly.
  Tiny m2(DType::Float32);
  m2.load_parameters(m.named_parameters());
  auto g2 = two_groups(m2);
  g2[1].lr(0.05).weight_decay(0.0);
  AdamW resumed(g2, AdamWOptions(0.1).weight_decay(0.3));
  resumed.load_state_dict(sd);
  BOOST_TEST(same_state(resumed.state_dict(), sd));
  set_grads(m, 2);
  set_grads(m2, 2);
  opt.step();
  resumed.step();
  BOOST_TEST(same_bits(m.w, m2.w));
  BOOST_TEST(same_bits(m.b, m2.b));

  // Mismatches.
  Tiny m3(DType::Float32);
  AdamW flat(m3.named_parameters(), 0.1);
  const NamedTensors flat_before = flat.state_dict();
  expect_error<ValueError>([&] { flat.load_state_dict(sd); }, {"AdamW::load_state_dict", "2 parameter groups", "has 1"});
  BOOST_TEST(same_state(flat.state_dict(), flat_before));
  AdamW swapped({ParamGroup({{"b", m3.b}}).name("first"), ParamGroup({{"w", m3.w}}).name("second")}, 0.1);
  const NamedTensors swapped_before = swapped.state_dict();
  expect_error<ValueError>([&] { swapped.load_state_dict(sd); },
                           {"AdamW::load_state_dict", "parameter 'w'", "group 0 of the state", "group 1 'second'"});
  BOOST_TEST(same_state(swapped.state_dict(), swapped_before));
  AdamW grouped(two_groups(m3), 0.1);
  set_grads(m, 0);
  AdamW flat_trained(m.named_parameters(), 0.1);
  flat_trained.step();
  expect_error<ValueError>([&] { grouped.load_state_dict(flat_trained.state_dict()); },
                           {"AdamW::load_state_dict", "no parameter groups", "one group", "has 2"});
  // Crafted structure entries.
  auto edited = [&](const std::string& entry, const Tensor& value) { return test::replaced(sd, entry, value); };
  auto without = [&](const std::string& entry) { return test::removed(sd, entry); };
  const NamedTensors grouped_before = grouped.state_dict();
  expect_error<DTypeError>([&] { grouped.load_state_dict(edited("param_groups", scalar(2.0))); },
                           {"'param_groups'", "int64 scalar"});
  expect_error<ValueError>([&] { grouped.load_state_dict(edited("param_groups", index_tensor({3}, {}))); },
                           {"3 parameter groups", "has 2"});
  expect_error<ValueError>([&] { grouped.load_state_dict(edited("param_group.b", index_tensor({7}, {}))); },
                           {"parameter 'b'", "group 7 of the state", "group 1 'vectors'"});
  expect_error<DTypeError>([&] { grouped.load_state_dict(edited("param_group.b", index_tensor({1, 1}, {2}))); },
                           {"'param_group.b'", "int64 scalar"});
  expect_error<ValueError>([&] { grouped.load_state_dict(without("param_group.b")); },
                           {"missing entry 'param_group.b'", "group 1 'vectors'"});
  expect_error<ValueError>([&] { grouped.load_state_dict(without("param_groups")); }, {"missing entry 'param_groups'"});
  NamedTensors extra = sd;
  extra.emplace_back("param_group.nope", index_tensor({0}, {}));
  expect_error<ValueError>([&] { grouped.load_state_dict(extra); }, {"'param_group.nope'", "names no parameter"});
  BOOST_TEST(same_state(grouped.state_dict(), grouped_before));
}

BOOST_AUTO_TEST_CASE(checkpoint_round_trip_with_groups) {
  test::TmpDir dir;
  Rng rng(5);
  Sequential model{std::make_unique<Linear>(3, 4, true, rng), std::make_unique<LayerNorm>(4),
                   std::make_unique<Linear>(4, 2, true, rng)};
  AdamW opt(decay_groups(model, 0.1), AdamWOptions(0.01).betas(0.9, 0.95));
  Tensor x = randn({5, 3}, rng);
  auto train_step = [&](Sequential& mdl, Optimizer& o) {
    mdl.zero_grad();
    sum(mul(mdl(x), mdl(x))).backward();
    o.step();
  };
  train_step(model, opt);
  train_step(model, opt);
  save_checkpoint(dir / "ckpt.safetensors", model, &opt);

  Rng rng2(99);
  Sequential model2{std::make_unique<Linear>(3, 4, true, rng2), std::make_unique<LayerNorm>(4),
                    std::make_unique<Linear>(4, 2, true, rng2)};
  AdamW opt2(decay_groups(model2, 0.1), AdamWOptions(0.01).betas(0.9, 0.95));
  load_checkpoint(dir / "ckpt.safetensors", model2, &opt2);
  train_step(model, opt);
  train_step(model2, opt2);
  for (std::size_t i = 0; i < model.named_parameters().size(); ++i)
    BOOST_TEST(same_bits(model.named_parameters()[i].second, model2.named_parameters()[i].second));
  BOOST_TEST(same_state(opt.state_dict(), opt2.state_dict()));

  // A flat optimizer refuses the grouped state: IOError naming the file and the groups; the
  // model and the optimizer are unchanged.
  Rng rng3(7);
  Sequential model3{std::make_unique<Linear>(3, 4, true, rng3), std::make_unique<LayerNorm>(4),
                    std::make_unique<Linear>(4, 2, true, rng3)};
  AdamW flat(model3.named_parameters(), 0.01);
  const NamedTensors before = model3.named_parameters();
  std::vector<Tensor> copies;
  for (const auto& [n, t] : before) copies.push_back(t.clone());
  expect_error<IOError>([&] { load_checkpoint(dir / "ckpt.safetensors", model3, &flat); },
                        {"load_checkpoint", "ckpt.safetensors", "2 parameter groups", "has 1", "nothing was loaded"});
  for (std::size_t i = 0; i < copies.size(); ++i) BOOST_TEST(same_bits(model3.named_parameters()[i].second, copies[i]));
  BOOST_TEST(flat.steps() == 0);
  // Grouped the other way round (every parameter decayed except the first Linear's weight):
  // IOError naming the parameter and both groups.
  AdamW regrouped({ParamGroup({{"0.weight", model3.at<Linear>(0).weight}}),
                   ParamGroup({{"0.bias", model3.at<Linear>(0).bias},
                               {"1.weight", model3.at<LayerNorm>(1).weight},
                               {"1.bias", model3.at<LayerNorm>(1).bias},
                               {"2.weight", model3.at<Linear>(2).weight},
                               {"2.bias", model3.at<Linear>(2).bias}})},
                  0.01);
  expect_error<IOError>([&] { load_checkpoint(dir / "ckpt.safetensors", model3, &regrouped); },
                        {"load_checkpoint", "parameter '2.weight'", "group 0 of the state", "group 1 of this optimizer"});
}

// nanoGPT's groups by module type: Linear and attention projection weights decay; biases,
// LayerNorm, embeddings and learned positions do not.
BOOST_AUTO_TEST_CASE(decay_groups_follow_module_types) {
  TransformerConfig c;
  c.vocab_size = 7, c.max_len = 5, c.embed_dim = 4, c.num_heads = 2, c.ff_hidden = 8, c.num_layers = 1;
  TransformerDecoder dec(c);
  auto groups = decay_groups(dec, 0.1);
  BOOST_TEST_REQUIRE(groups.size() == 2u);
  BOOST_TEST(groups[0].name() == "decay");
  BOOST_TEST(*groups[0].weight_decay() == 0.1);
  BOOST_TEST(groups[1].name() == "no_decay");
  BOOST_TEST(*groups[1].weight_decay() == 0.0);
  const std::string b = "body.blocks.0.";
  BOOST_TEST((names(groups[0].params()) ==
              std::vector<std::string>{b + "attn.in_proj_weight", b + "attn.out_proj.weight", b + "ff.fc1.weight",
                                       b + "ff.fc2.weight", "head.weight"}));
  BOOST_TEST((names(groups[1].params()) ==
              std::vector<std::string>{"body.tok_emb.weight", "body.pos_emb.weight", b + "ln1.weight", b + "ln1.bias",
                                       b + "attn.in_proj_bias", b + "attn.out_proj.bias", b + "ln2.weight",
                                       b + "ln2.bias", b + "ff.fc1.bias", b + "ff.fc2.bias", "body.ln_f.weight",
                                       "body.ln_f.bias"}));
  AdamW opt(groups, AdamWOptions(1e-3).betas(0.9, 0.95));
  BOOST_TEST(opt.params().size() == dec.named_parameters().size());

  // Tied output: the embedding (also the output projection) is not decayed.
  c.tied_output = true;
  TransformerDecoder tied(c);
  auto tied_groups = decay_groups(tied, 0.1);
  BOOST_TEST(names(tied_groups[1].params()).front() == "body.tok_emb.weight");
  BOOST_TEST(names(tied_groups[0].params()).size() == 4u);

  // MultiHeadAttention with kdim/vdim and bias_k/bias_v.
  Rng rng(3);
  MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2).kdim(3).vdim(5).add_bias_kv(true), rng);
  auto mg = decay_groups(mha, 0.5);
  BOOST_TEST((names(mg[0].params()) ==
              std::vector<std::string>{"q_proj_weight", "k_proj_weight", "v_proj_weight", "out_proj.weight"}));
  BOOST_TEST((names(mg[1].params()) == std::vector<std::string>{"in_proj_bias", "bias_k", "bias_v", "out_proj.bias"}));

  // A user's module: matrices decay, vectors do not; no_decay forces names out.
  struct Custom : Module {
    Tensor cls_token = zeros({1, 1, 4}), scale = ones({4}), proj = zeros({4, 4});
    Linear fc;
    explicit Custom(Rng& r) : fc(4, 4, true, r) {
      register_parameter("cls_token", &cls_token);
      register_parameter("scale", &scale);
      register_parameter("proj", &proj);
      register_module("fc", &fc);
    }
  } custom(rng);
  auto cg = decay_groups(custom, 0.05);
  BOOST_TEST((names(cg[0].params()) == std::vector<std::string>{"cls_token", "proj", "fc.weight"}));
  BOOST_TEST((names(cg[1].params()) == std::vector<std::string>{"scale", "fc.bias"}));
  auto forced = decay_groups(custom, 0.05, {"cls_token", "fc.weight"});
  BOOST_TEST((names(forced[0].params()) == std::vector<std::string>{"proj"}));
  BOOST_TEST((names(forced[1].params()) == std::vector<std::string>{"cls_token", "scale", "fc.weight", "fc.bias"}));
  expect_error<ValueError>([&] { decay_groups(custom, 0.05, {"pos_embed"}); },
                           {"decay_groups", "'no_decay'", "'pos_embed'", "no parameter"});
  expect_error<ValueError>([&] { decay_groups(custom, -0.1); }, {"decay_groups", "'weight_decay'", "-0.1"});
  // A model without any no-decay parameter gives an empty second group, which is fine.
  Linear nobias(3, 3, false, rng);
  auto ng = decay_groups(nobias, 0.1);
  BOOST_TEST((ng[0].params().size() == 1u && ng[1].params().empty()));
  AdamW nb_opt(ng, 0.1);
  nobias.weight.set_grad(ones({3, 3}));
  nb_opt.step();
}

// Two groups built by decay_groups on Sequential(Embedding, LayerNorm, Linear), a few steps
// with a LambdaLR schedule, against torch.optim (tools/make_containers_fixtures.py).
namespace {
void run_groups_fixture(const std::string& fixture) {
  test::Golden g(fixture, std::string(XGRAD_FIXTURE_DIR) + "/containers");
  BOOST_TEST_REQUIRE(g.str("kind") == "optim_groups");
  Rng rng(0);
  Sequential model{std::make_unique<Embedding>(5, 4, rng), std::make_unique<LayerNorm>(4),
                   std::make_unique<Linear>(4, 3, true, rng)};
  model.load_parameters(g.params());
  g.at("tokens");  // the fixture's input, used by PyTorch to make the gradients stored below
  auto groups = decay_groups(model, g.num("decay.weight_decay"));
  auto joined = [](const NamedTensors& ts) {
    std::string s;
    for (const auto& [n, t] : ts) s += (s.empty() ? "" : ",") + n;
    return s;
  };
  BOOST_TEST(joined(groups[0].params()) == g.str("decay"));
  BOOST_TEST(joined(groups[1].params()) == g.str("no_decay"));
  std::unique_ptr<Optimizer> opt;
  const double base = g.num("lr");
  if (g.str("optimizer") == "AdamW") {
    groups[0].lr(g.num("decay.lr"));
    groups[1].weight_decay(g.num("no_decay.weight_decay"));
    opt = std::make_unique<AdamW>(groups, AdamWOptions(base)
                                              .betas(g.num("beta1"), g.num("beta2"))
                                              .eps(g.num("eps"))
                                              .weight_decay(g.num("weight_decay")));
  } else {
    groups[1].lr(g.num("no_decay.lr")).momentum(g.num("no_decay.momentum")).nesterov(g.integer("no_decay.nesterov") != 0);
    opt = std::make_unique<SGD>(groups, SGDOptions(base).momentum(g.num("momentum")).weight_decay(g.num("weight_decay")));
  }
  std::vector<double> factors;
  {
    std::stringstream ss(g.str("factors"));
    for (std::string f; std::getline(ss, f, ',');) factors.push_back(std::stod(f));
  }
  const long steps = g.integer("steps");
  BOOST_TEST_REQUIRE(factors.size() == std::size_t(steps));
  test::Deviation dev;
  for (long s = 1; s <= steps; ++s) {
    const std::string k = std::to_string(s);
    opt->lr = base * factors[std::size_t(s - 1)];
    for (auto& [name, p] : model.named_parameters()) p.set_grad(g.at("grad" + k + "." + name).clone());
    opt->step();
    for (auto& [name, p] : model.named_parameters()) test::compare("after" + k + "." + name, p, g.at("after" + k + "." + name), dev);
  }
  for (const auto& [entry, t] : opt->state_dict())
    if (t.dtype() != DType::Int64) test::compare("state." + entry, t, g.at("state." + entry), dev);
  g.check_all_used();
  test::report(g, dev);
}
}  // namespace

BOOST_AUTO_TEST_CASE(adamw_groups_match_pytorch) { run_groups_fixture("adamw_groups"); }
BOOST_AUTO_TEST_CASE(sgd_groups_match_pytorch) { run_groups_fixture("sgd_groups"); }

BOOST_AUTO_TEST_SUITE_END()
