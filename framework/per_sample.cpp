// Per-sample gradients from one batched forward (framework/functional.hpp, per_sample_gradients).
//
// Notation: B examples, losses L (B), a parameter p. An op of the recorded graph whose output z
// has the batch on its leading axis and is reached by p is a "frontier" of p: the walk from p
// along the graph stops there. With g = d(sum_j L_j)/dz (one batched backward),
//   d L_i / dz = g with every slice but i zeroed        iff   d L_j / dz_i = 0 for j != i,
// which a second backward checks: with random weights w, d(sum_j w_j L_j)/dz must be w_i g_i
// (an op whose slices reach several losses fails, e.g. a (T, E) positional table that happens
// to have T == B; the walk then continues past it). Per example, d L_i / dp is the sum over
// the frontier edges (op m, its input k, through which p reaches m) of
//   chain(p -> input k)^T  vjp_m,k(g masked to slice i),
// where vjp_m,k is m's own backward (Node::apply; linear's weight and bias instead use the
// closed forms dW_i = sum_t g_it x_it^T, db_i = sum_t g_it for all i at once), and the chain is
// empty when input k is p itself (else one small backward from input k to p per example).
// An input broadcast over the examples (a bias, a positional table, a class token, layer_norm's
// weight and bias) has a vjp that ends in a broadcast reduction, sum_to(Z, shape) with Z's axis 0
// the batch: m's differentiable backward is then run once on all of g and Z summed per slice
// (Z's slice i must come from g's slice i alone: checked with random weights, as the frontiers).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "xgrad/framework/functional.hpp"
#include "xgrad/framework/functional_detail.hpp"
#include "xgrad/ops/detail.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"

namespace xgrad {

using namespace functional_detail;

namespace {

constexpr const char* kOp = "per_sample_gradients";

struct Use {
  std::shared_ptr<Node> node;
  std::size_t input;
};

// Who reads each tensor of the graph behind `root` (keyed as the engine keys tensors).
std::unordered_map<Key, std::vector<Use>> consumers_of(const Tensor& root) {
  std::unordered_map<Key, std::vector<Use>> consumers;
  std::vector<std::shared_ptr<Node>> stack;
  std::unordered_set<const Node*> seen;
  if (root.grad_fn()) stack.push_back(root.grad_fn());
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(n.get()).second) continue;
    for (std::size_t k = 0; k < n->inputs().size(); ++k) {
      const Tensor& in = n->inputs()[k];
      if (!in.requires_grad()) continue;
      consumers[key_of(in)].push_back({n, k});
      if (in.grad_fn()) stack.push_back(in.grad_fn());
    }
  }
  return consumers;
}

enum class Status { Unknown, Frontier, Pass };  // Pass: leading axis is not the batch: walk on

struct Edge {
  std::shared_ptr<Node> node;  // the frontier op
  std::size_t input;           // its input through which p reaches it
  bool direct;                 // that input is p itself
};

// g with every slice along axis 0 but one zeroed, for each example in turn: one buffer, the
// previous example's slice cleared and the next one copied in (a result computed from one
// example must be used before the next call).
class OneExample {
 public:
  OneExample(const Tensor& g, std::size_t B)
      : g_(g), buffer_(zeros(g.shape(), g.dtype())), bytes_(g.numel() / B * itemsize(g.dtype())) {}
  const Tensor& operator()(std::size_t i) {
    char* d = static_cast<char*>(buffer_.mutable_raw_data());
    if (last_ != npos) std::memset(d + last_ * bytes_, 0, bytes_);
    std::memcpy(d + i * bytes_, static_cast<const char*>(g_.raw_data()) + i * bytes_, bytes_);
    last_ = i;
    return buffer_;
  }

 private:
  static constexpr std::size_t npos = std::size_t(-1);
  Tensor g_, buffer_;
  std::size_t bytes_, last_ = npos;
};

// Slice i of t along axis 0, as its own tensor of shape t.shape()[1:].
Tensor example_of(const Tensor& t, std::size_t i) {
  Shape s(t.shape().begin() + 1, t.shape().end());
  Tensor out = zeros(s, t.dtype());
  const std::size_t bytes = out.numel() * itemsize(t.dtype());
  std::memcpy(out.mutable_raw_data(), static_cast<const char*>(t.raw_data()) + i * bytes, bytes);
  return out;
}

// max |a - w_i b_i| <= tol * max |w_i b_i| over a tensor whose axis 0 has B slices, with
// tol = 16 eps(dtype) sqrt(slice): a and w_i b_i are the same sums in another order, whose
// rounding grows like the square root of their length (the slice's size stands in for the
// reductions behind it). Measured on float32 encoders and ViTs (slices of 32 to 1632): at most
// 7 eps, 1/17 of tol or less; a coupling loss z - 1e-4 mean_batch(z) is 170 eps at slice 3.
bool weighted_match(const Tensor& a, const Tensor& b, const std::vector<double>& w) {
  if (!a.defined() || !b.defined()) return !a.defined() && !b.defined();
  const std::vector<double> va = a.to_vector(), vb = b.to_vector();
  const std::size_t slice = vb.size() / w.size();
  double err = 0, scale = 0;
  for (std::size_t j = 0; j < vb.size(); ++j) {
    const double expect = w[j / slice] * vb[j];
    err = std::max(err, std::abs(va[j] - expect));
    scale = std::max(scale, std::abs(expect));
  }
  const double eps = a.dtype() == DType::Float64 ? std::numeric_limits<double>::epsilon()
                                                 : double(std::numeric_limits<float>::epsilon());
  return err <= 16 * eps * std::sqrt(double(std::max<std::size_t>(slice, 1))) * scale;
}

class PerSample {
 public:
  PerSample(const NamedTensors& params, const Tensor& losses, const PerSampleOptions& options)
      : params_(params), losses_(losses), B_(losses.shape()[0]), options_(options), consumers_(consumers_of(losses)) {}

  PerSampleGradients run() {
    PerSampleGradients out;
    out.losses = losses_.detach();
    std::vector<Tensor> result;
    for (const auto& [name, p] : params_) {
      Shape s{B_};
      s.insert(s.end(), p.shape().begin(), p.shape().end());
      result.push_back(zeros(s, p.dtype()));
    }
    std::vector<std::string> methods(params_.size());
    std::vector<std::vector<Edge>> edges(params_.size());
    std::vector<std::size_t> loop, open;
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (key_of(params_[i].second) == key_of(losses_)) {  // the losses are p: no op to walk
        loop.push_back(i);
      } else if (!consumers_.count(key_of(params_[i].second))) {
        if (!options_.allow_unused)
          throw_error<GraphError>(kOp, "parameter '", params_[i].first, "' ", describe(params_[i].second),
                                  " is not used to compute the losses (pass allow_unused for zeros)");
        methods[i] = "unused";
      } else if (options_.method == PerSampleMethod::Loop) {
        loop.push_back(i);
      } else {
        open.push_back(i);
      }
    }
    // Rounds: walk every open parameter to its frontiers; verify the candidates met (two
    // batched backwards for all of them together); repeat until no walk meets a new one.
    for (int round = 0; !open.empty(); ++round) {
      std::vector<std::shared_ptr<Node>> unknown;
      std::vector<std::size_t> still_open;
      for (std::size_t i : open) {
        const Walk w = round < 16 ? walk(params_[i].second, edges[i], unknown) : Walk::Fail;
        if (w == Walk::Fail) loop.push_back(i);
        if (w == Walk::Unverified) still_open.push_back(i);
      }
      if (!unknown.empty()) verify(unknown);
      open = std::move(still_open);
    }
    for (std::size_t i : loop) methods[i] = "loop";
    for (std::size_t i = 0; i < params_.size(); ++i) {
      if (!methods[i].empty()) continue;
      // "linear" when every use is linear's (direct), else "broadcast" when none needs the
      // per-example loop of the op's backward, else "node".
      bool all_linear = true, any_node = false;
      for (const Edge& e : edges[i]) {
        const std::string how = add_edge(e, params_[i].second, result[i]);
        all_linear = all_linear && e.direct && how == "linear";
        any_node = any_node || how == "node";
      }
      methods[i] = all_linear ? "linear" : any_node ? "node" : "broadcast";
    }
    if (!loop.empty()) run_loop(loop, result);
    for (std::size_t i = 0; i < params_.size(); ++i) {
      out.grads.emplace_back(params_[i].first, result[i]);
      out.methods.push_back(methods[i]);
    }
    return out;
  }

 private:
  bool leading_batch(const Node& n) const {
    const Shape& s = output_of(n).shape();
    return !s.empty() && s[0] == B_;
  }
  const Tensor& output_of(const Node& n) const {
    auto it = outputs_.find(&n);
    if (it == outputs_.end()) it = outputs_.emplace(&n, n.output()).first;
    return it->second;
  }

  enum class Walk { Done, Unverified, Fail };

  // Walks from p along the consumers to its frontier edges. Unverified: some candidate frontier
  // met is not checked yet (appended to `unknown`). Fail: the walk reached the losses without a
  // frontier, or an edge's chain would cross another frontier (a path counted twice): the
  // caller loops over the examples instead.
  Walk walk(const Tensor& p, std::vector<Edge>& edges, std::vector<std::shared_ptr<Node>>& unknown) {
    edges.clear();
    bool complete = true;
    std::vector<Tensor> stack{p};
    std::unordered_set<Key> seen{key_of(p)};
    while (!stack.empty()) {
      const Tensor t = std::move(stack.back());
      stack.pop_back();
      auto it = consumers_.find(key_of(t));
      if (it == consumers_.end()) return Walk::Fail;  // t is the losses themselves
      for (const Use& u : it->second) {
        Status& st = status_[u.node.get()];
        if (st == Status::Unknown && !leading_batch(*u.node)) st = Status::Pass;
        if (st == Status::Unknown) unknown.push_back(u.node), complete = false;
        else if (st == Status::Frontier) edges.push_back({u.node, u.input, key_of(t) == key_of(p)});
        else if (seen.insert(u.node.get()).second) stack.push_back(output_of(*u.node));
      }
    }
    if (!complete) return Walk::Unverified;
    std::unordered_set<const Node*> frontier;
    for (const Edge& e : edges) frontier.insert(e.node.get());
    for (const Edge& e : edges)
      if (!e.direct && chain_crosses(e.node->input(e.input), frontier)) return Walk::Fail;
    return Walk::Done;
  }

  // Whether the graph behind t holds one of `frontier`.
  static bool chain_crosses(const Tensor& t, const std::unordered_set<const Node*>& frontier) {
    std::vector<const Node*> stack;
    std::unordered_set<const Node*> seen;
    if (t.grad_fn()) stack.push_back(t.grad_fn().get());
    while (!stack.empty()) {
      const Node* n = stack.back();
      stack.pop_back();
      if (!seen.insert(n).second) continue;
      if (frontier.count(n)) return true;
      for (const auto& in : n->inputs())
        if (in.requires_grad() && in.grad_fn()) stack.push_back(in.grad_fn().get());
    }
    return false;
  }

  // Two batched backwards to the candidates' outputs: with upstream 1 (g, kept for the edges)
  // and with random weights w (the check that slice i reaches loss i only).
  void verify(std::vector<std::shared_ptr<Node>> nodes) {
    std::unordered_set<const Node*> unique;
    std::vector<Tensor> zs;
    std::vector<const Node*> order;
    for (const auto& n : nodes)
      if (unique.insert(n.get()).second) zs.push_back(output_of(*n)), order.push_back(n.get());
    const std::vector<double> w = random_weights();
    const GradOptions keep{true, false, true};
    const Tensors g = grad({losses_}, zs, {ones({B_}, losses_.dtype())}, keep);
    const Tensors gw = grad({losses_}, zs, {tensor(w, {B_}, losses_.dtype())}, keep);
    for (std::size_t j = 0; j < zs.size(); ++j) {
      const bool ok = weighted_match(gw[j], g[j], w);
      status_[order[j]] = ok ? Status::Frontier : Status::Pass;
      if (ok) upstream_[order[j]] = g[j];
    }
  }

  // w (B): one weight per example, uniform in [0.5, 1.5), drawn from rng_ in order.
  std::vector<double> random_weights() {
    std::vector<double> w(B_);
    for (auto& v : w) v = rng_.uniform(0.5, 1.5);
    return w;
  }

  static bool is_linear_weight_or_bias(const Edge& e) {
    return e.node->name() == "linear" && (e.input == 1 || e.input == 2) && e.node->input(0).dim() >= 2;
  }

  // The tensors Z of node n's input gradients that are sum_to(Z, input's shape), for upstream
  // u (a leaf, so that every op of the differentiable backward is recorded); undefined where
  // the gradient is not such a reduction.
  static Tensors reduced_terms(const Node& n, const Tensor& u) {
    EnableGradGuard grad_on;
    const Tensor leaf = u.detach();
    leaf.set_requires_grad();
    const Tensors grads = n.apply(leaf, true);
    Tensors z(grads.size());
    for (std::size_t k = 0; k < grads.size(); ++k)
      if (grads[k].defined() && grads[k].grad_fn() && grads[k].grad_fn()->name() == "sum_to")
        z[k] = grads[k].grad_fn()->input(0).detach();
    return z;
  }

  // (B, ...input k's shape): example i's vjp of input k of the frontier op n, when that vjp is
  // sum_to(Z) with Z (B, ...) whose axis 0 is reduced away (input k broadcast over the examples)
  // and whose slice i depends on g's slice i only; else undefined. Z of every input of n comes
  // from two differentiable backwards of n (upstream g, then w_i g_i when some Z has axis 0 of
  // size B), kept per node.
  Tensor reduced_per_example(const Edge& e, const Tensor& g) {
    auto it = reduced_.find(e.node.get());
    if (it == reduced_.end()) {
      const std::vector<double> w = random_weights();  // drawn even if unused: rng_'s sequence stays fixed
      const Tensors z = reduced_terms(*e.node, g);
      const auto candidate = [&](const Tensor& zk) { return zk.defined() && zk.dim() >= 1 && zk.shape()[0] == B_; };
      Tensors checked(z.size());
      if (std::any_of(z.begin(), z.end(), candidate)) {  // else no second backward: nothing to check
        Shape ws(g.dim(), 1);
        ws[0] = B_;
        const Tensors zw = reduced_terms(*e.node, mul(g, tensor(w, ws, g.dtype())));
        for (std::size_t k = 0; k < z.size(); ++k)
          if (candidate(z[k]) && zw[k].defined() && zw[k].shape() == z[k].shape() && weighted_match(zw[k], z[k], w))
            checked[k] = z[k];
      }
      it = reduced_.emplace(e.node.get(), std::move(checked)).first;
    }
    const Tensor& z = it->second.at(e.input);
    const Tensor& through = e.node->input(e.input);
    if (!z.defined() || through.dim() > z.dim()) return Tensor();
    Shape per = detail::pad_left(through.shape(), z.dim());  // input k's shape aligned with Z's axes
    if (per[0] != 1) return Tensor();                        // not broadcast over the examples
    per[0] = B_;
    Shape out{B_};
    out.insert(out.end(), through.shape().begin(), through.shape().end());
    return reshape(sum_to(z, per), out);
  }

  // Adds one frontier edge's per-example contributions into result (B, ...p's shape); returns
  // how: "linear", "broadcast" (a reduction of the op's backward split per example) or "node".
  const char* add_edge(const Edge& e, const Tensor& p, const Tensor& result) {
    const Tensor& g = upstream_.at(e.node.get());
    const char* how = "node";
    if (!g.defined()) return how;
    NoGradGuard no_grad;
    const Tensor& through = e.node->input(e.input);
    Tensor per_example;  // (B, ...through's shape), when computed for all examples at once
    if (is_linear_weight_or_bias(e)) {
      const Tensor x = e.node->input(0).detach();
      const std::size_t out_f = g.shape().back(), in_f = x.shape().back();
      const Tensor g3 = reshape(g, {B_, g.numel() / (B_ * out_f), out_f});                 // (B, T, out)
      per_example = e.input == 1 ? matmul(g3, reshape(x, {B_, x.numel() / (B_ * in_f), in_f}), true, false)  // (B, out, in)
                                 : sum(g3, {1});                                          // (B, out)
      how = "linear";
    } else {
      per_example = reduced_per_example(e, g);
      if (per_example.defined()) how = "broadcast";
    }
    if (e.direct && per_example.defined()) {
      add_flat(result, 0, per_example);
      return how;
    }
    OneExample upstream(g, B_);
    for (std::size_t i = 0; i < B_; ++i) {
      const Tensor a = per_example.defined() ? example_of(per_example, i) : e.node->apply(upstream(i), false)[e.input];
      if (!a.defined()) continue;
      const Tensor contribution = e.direct ? a : grad({through}, {p}, {a}, GradOptions{true, false, true})[0];
      add_flat(result, i * p.numel(), contribution);
    }
    return how;
  }

  void run_loop(const std::vector<std::size_t>& which, const std::vector<Tensor>& result) {
    Tensors ps;
    for (std::size_t i : which) ps.push_back(params_[i].second);
    for (std::size_t b = 0; b < B_; ++b) {
      const Tensors gs = grad({losses_}, ps, {basis({B_}, losses_.dtype(), b)}, GradOptions{true, false, true});
      for (std::size_t k = 0; k < which.size(); ++k) add_flat(result[which[k]], b * ps[k].numel(), gs[k]);
    }
  }

  const NamedTensors& params_;
  Tensor losses_;
  std::size_t B_;
  PerSampleOptions options_;
  std::unordered_map<Key, std::vector<Use>> consumers_;
  std::unordered_map<const Node*, Status> status_;
  std::unordered_map<const Node*, Tensor> upstream_;  // g at each frontier's output
  std::unordered_map<const Node*, Tensors> reduced_;  // per frontier: checked Z per input (reduced_per_example)
  mutable std::unordered_map<const Node*, Tensor> outputs_;
  Rng rng_{0x5a3e1e5};
};

}  // namespace

PerSampleGradients per_sample_gradients(const NamedTensors& params, const std::function<Tensor()>& per_example_losses,
                                        const PerSampleOptions& options) {
  if (!per_example_losses) throw_error<ValueError>(kOp, "no loss function given");
  if (params.empty()) throw_error<ValueError>(kOp, "no parameters given");
  std::unordered_set<const TensorImpl*> distinct;
  std::vector<std::pair<Shape, DType>> blocks;
  for (const auto& [name, p] : params) {
    if (!p.defined() || !is_float(p.dtype()))
      throw_error<DTypeError>(kOp, "parameter '", name, "' must be a float tensor");
    if (!p.requires_grad() || !p.is_leaf())
      throw_error<GraphError>(kOp, "parameter '", name, "' ", describe(p),
                              " must be a leaf that requires grad (a module parameter)");
    if (!distinct.insert(p.impl()).second) throw_error<ValueError>(kOp, "parameter '", name, "' is given twice");
  }
  Tensor losses;
  {
    EnableGradGuard grad_on;
    losses = per_example_losses();
  }
  if (!losses.defined() || !is_float(losses.dtype()))
    throw_error<DTypeError>(kOp, "the loss function must return a float (B) tensor of per-example losses");
  if (losses.dim() != 1 || losses.shape()[0] == 0)
    throw_error<ShapeError>(kOp, "the loss function must return one loss per example, a (B) tensor with B >= 1; it returned ",
                            describe(losses));
  for (const auto& [name, p] : params) {
    Shape s{losses.shape()[0]};
    s.insert(s.end(), p.shape().begin(), p.shape().end());
    blocks.emplace_back(s, p.dtype());
  }
  check_result_bytes(kOp, "per-sample gradients", blocks, options.max_bytes);
  if (!losses.requires_grad()) {
    if (!options.allow_unused)
      throw_error<GraphError>(kOp, "the losses do not depend on any parameter (pass allow_unused for zeros)");
    PerSampleGradients out{losses, {}, {}};
    for (std::size_t i = 0; i < params.size(); ++i) {
      out.grads.emplace_back(params[i].first, zeros(blocks[i].first, blocks[i].second));
      out.methods.push_back("unused");
    }
    return out;
  }
  return PerSample(params, losses, options).run();
}

PerSampleGradients per_sample_gradients(const Module& module, const std::function<Tensor()>& per_example_losses,
                                        const PerSampleOptions& options) {
  return per_sample_gradients(module.named_parameters(), per_example_losses, options);
}

Tensor cross_entropy_per_example(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index) {
  const char* op = "cross_entropy_per_example";
  check_float(op, "logits", logits);
  if (!targets.defined() || targets.dtype() != DType::Int64)
    throw_error<DTypeError>(op, "argument 'targets' must be int64", targets.defined() ? ", got " + describe(targets) : "");
  const Shape& ls = logits.shape();
  if (ls.size() < 2 || Shape(ls.begin(), ls.end() - 1) != targets.shape())
    throw_error<ShapeError>(op, "argument 'logits' ", ls, " must be (B, ..., C) for 'targets' ", targets.shape(),
                            " = (B, ...): the classes on the last axis");
  const std::size_t C = ls.back(), B = ls[0], N = targets.numel(), per = N / B;
  const std::int64_t* t = targets.data<std::int64_t>();
  std::vector<std::int64_t> safe(N);
  std::vector<double> weight(N);  // 1 / (example's counted positions), 0 where ignored
  for (std::size_t i = 0; i < B; ++i) {
    std::size_t count = 0;
    for (std::size_t j = i * per; j < (i + 1) * per; ++j) {
      if (t[j] != ignore_index && (t[j] < 0 || std::size_t(t[j]) >= C))
        throw_error<IndexError>(op, "target ", t[j], " at flat position ", j, " of argument 'targets' ", targets.shape(),
                                " is out of range for ", C, " classes");
      count += t[j] != ignore_index;
    }
    for (std::size_t j = i * per; j < (i + 1) * per; ++j) {
      safe[j] = t[j] == ignore_index ? 0 : t[j];
      weight[j] = t[j] == ignore_index ? 0.0 : 1.0 / double(count);
    }
  }
  // loss_i = -sum_{positions p of i} w_p log_softmax(logits)_p[target_p]
  const Tensor picked = sum(mul(log_softmax(logits, -1), one_hot(index_tensor(safe, targets.shape()), C, logits.dtype())), {-1});
  const Tensor weighted = mul(picked, tensor(weight, targets.shape(), logits.dtype()));
  return neg(reshape(sum(reshape(weighted, {B, per}), {1}), {B}));
}

}  // namespace xgrad
