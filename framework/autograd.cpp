// Graph nodes, grad modes and the backward engine (Kahn's algorithm over tensors).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <unordered_map>
#include <unordered_set>

#include "xgrad/framework/array.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/parallel.hpp"
#include "xgrad/ops/elementwise.hpp"

namespace xgrad {

// --- grad modes --------------------------------------------------------------------------
static thread_local bool g_grad_enabled = true;
bool is_grad_enabled() { return g_grad_enabled; }
void set_grad_enabled(bool on) { g_grad_enabled = on; }
NoGradGuard::NoGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = false; }
NoGradGuard::~NoGradGuard() { g_grad_enabled = prev_; }
EnableGradGuard::EnableGradGuard() : prev_(g_grad_enabled) { g_grad_enabled = true; }
EnableGradGuard::~EnableGradGuard() { g_grad_enabled = prev_; }

static thread_local bool g_anomaly = false;
bool is_anomaly_enabled() { return g_anomaly; }
void set_anomaly_enabled(bool on) { g_anomaly = on; }
AnomalyModeGuard::AnomalyModeGuard(bool on) : prev_(g_anomaly) { g_anomaly = on; }
AnomalyModeGuard::~AnomalyModeGuard() { g_anomaly = prev_; }

namespace {

// Flat index of the first NaN/inf of a float tensor, or npos.
std::size_t first_nonfinite(const Tensor& t) {
  if (!t.defined() || !is_float(t.dtype())) return std::string::npos;
  return dispatch_float("anomaly", t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = data_of<T>(t);
    for (std::size_t i = 0, count = t.numel(); i < count; ++i)
      if (!std::isfinite(p[i])) return i;
    return std::string::npos;
  });
}

std::string describe(const std::vector<Tensor>& ts) {
  std::string s;
  for (std::size_t i = 0; i < ts.size(); ++i)
    s += (i ? ", " : "") + std::string("input ") + std::to_string(i) + " " +
         (ts[i].defined() ? shape_str(ts[i].shape()) + " " + dtype_name(ts[i].dtype()) : "undefined");
  return s;
}

thread_local const std::string* g_in_backward_of = nullptr;  // the node being differentiated

[[noreturn]] void anomaly(const std::string& op, const char* pass, const std::string& what,
                          const Tensor& bad, std::size_t at, const std::vector<Tensor>& inputs) {
  const double v = bad.to_vector()[at];
  throw_error<AnomalyError>("anomaly", "op '", op, "' produced ", std::isnan(v) ? "NaN" : "inf", " in ", pass, " (", what,
                            ' ', bad.shape(), ", flat index ", at, ") from finite inputs",
                            g_in_backward_of ? " while computing the backward of '" + *g_in_backward_of + "'" : "",
                            "; ", describe(inputs));
}

[[noreturn]] void modified_in_place(const std::string& op, const std::string& which, const Tensor& t,
                                    std::uint64_t saved) {
  throw_error<GraphError>("backward", "op '", op, "': ", which, ' ', t.shape(), ' ', dtype_name(t.dtype()),
                          " was modified in place after the forward (version saved ", saved, ", now ", t.version(),
                          "); the gradient would use the new values. Write parameters (optimizer.step(), "
                          "mutable_data, load_parameters) after backward or before the next forward");
}

}  // namespace

// --- nodes -------------------------------------------------------------------------------
Node::Node(std::string name, std::vector<Tensor> inputs, BackwardFn backward,
           std::shared_ptr<TensorImpl> output_value_owner, BackwardFn differentiable)
    : name_(std::move(name)),
      inputs_(std::move(inputs)),
      backward_(std::move(backward)),
      differentiable_(std::move(differentiable)),
      output_(std::move(output_value_owner)),
      fused_(static_cast<bool>(differentiable_)) {
  versions_.reserve(inputs_.size());
  for (const auto& t : inputs_) versions_.push_back(t.defined() ? t.impl()->value->version : 0);
  if (output_) output_version_ = output_->value->version;
}

Node::~Node() {
  // Destroying the last handle to a long chain would otherwise recurse once per node.
  // Steal the inputs of every node we are the last owner of, then let them die flat.
  backward_ = nullptr;  // captured tensors first, so the inputs below are last owners
  differentiable_ = nullptr;
  std::vector<Tensor> stack = std::move(inputs_);
  while (!stack.empty()) {
    Tensor t = std::move(stack.back());
    stack.pop_back();
    const auto& impl = t.impl_ptr();
    if (impl && impl.use_count() == 1 && impl->grad_fn && impl->grad_fn.use_count() == 1) {
      Node& n = *impl->grad_fn;
      n.backward_ = nullptr;
      n.differentiable_ = nullptr;
      for (auto& in : n.inputs_) stack.push_back(std::move(in));
      n.inputs_.clear();
    }
  }
}

bool Node::needs_grad(std::size_t i) const { return i < inputs_.size() && inputs_[i].requires_grad(); }

Tensor Node::output() const {
  auto impl = new_tensor_impl(output_->shape);
  impl->value = output_->value;
  impl->dtype = output_->dtype;
  impl->requires_grad = true;
  impl->grad_fn = std::const_pointer_cast<Node>(shared_from_this());
  return Tensor(std::move(impl));
}

void Node::check_runnable() const {
  if (released_)
    throw_error<GraphError>("backward", "trying to backward through the graph a second time (at op '", name_,
                            "'): its saved values were freed by the first backward; pass retain_graph=true to the "
                            "first backward");
  for (std::size_t i = 0; i < inputs_.size(); ++i)
    if (inputs_[i].defined() && inputs_[i].impl()->value->version != versions_[i])
      modified_in_place(name_, "input " + std::to_string(i), inputs_[i], versions_[i]);
  if (output_ && output_->value->version != output_version_)
    modified_in_place(name_, "its output", Tensor(output_), output_version_);
}

std::vector<Tensor> Node::apply(const Tensor& grad, bool create_graph) const {
  check_runnable();
  const std::string* outer = g_in_backward_of;
  g_in_backward_of = &name_;
  std::vector<Tensor> grads;
  try {
    grads = create_graph && fused_ ? differentiable_(*this, grad) : backward_(*this, grad);
  } catch (...) {
    g_in_backward_of = outer;
    throw;
  }
  g_in_backward_of = outer;
  if (g_anomaly && first_nonfinite(grad) == std::string::npos)
    for (std::size_t i = 0; i < grads.size(); ++i) {
      const std::size_t at = first_nonfinite(grads[i]);
      if (at != std::string::npos)
        anomaly(name_, "backward", "gradient of input " + std::to_string(i), grads[i], at, inputs_);
    }
  if (grads.size() != inputs_.size())
    throw_error<GraphError>("backward of '" + name_ + "'", "returned ", grads.size(), " gradients for ", inputs_.size(),
                            " inputs");
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (!grads[i].defined() || !needs_grad(i)) continue;
    if (grads[i].shape() != inputs_[i].shape() || grads[i].dtype() != inputs_[i].dtype())
      throw_error<GraphError>("backward of '" + name_ + "'", "returned a gradient ", grads[i].shape(), ' ',
                              dtype_name(grads[i].dtype()), " for input ", i, " of shape ", inputs_[i].shape(), ' ',
                              dtype_name(inputs_[i].dtype()));
  }
  return grads;
}

// Sequentially consistent: a hold that release() does not count either came first (release
// then leaves the freeing to the last drop) or sees released_ and reads nothing.
void Node::hold() {
  holds_.fetch_add(1);
  if (released_.load()) {
    drop();
    check_runnable();  // throws the "second time" error
  }
}

void Node::drop() {
  if (holds_.fetch_sub(1) == 1 && released_.load()) free_saved();
}

void Node::release() {
  released_.store(true);
  if (holds_.load() == 1) free_saved();  // the caller's hold is the only one
}

void Node::free_saved() {
  if (freed_.exchange(true)) return;
  backward_ = nullptr;
  differentiable_ = nullptr;
  inputs_.clear();
  output_.reset();
}

namespace {

Tensor attach(const char* op_name, Tensor out, std::vector<Tensor> inputs, BackwardFn backward,
              BackwardFn differentiable, bool allow_nonfinite) {
  if (g_anomaly && !allow_nonfinite) {
    const std::size_t at = first_nonfinite(out);
    bool inputs_finite = true;
    for (const auto& t : inputs) inputs_finite = inputs_finite && first_nonfinite(t) == std::string::npos;
    if (at != std::string::npos && inputs_finite) anomaly(op_name, "forward", "output", out, at, inputs);
  }
  if (!is_grad_enabled()) return out;
  bool any = false;
  for (const auto& t : inputs) any = any || t.requires_grad();
  if (!any) return out;
  auto node = std::make_shared<Node>(op_name, std::move(inputs), std::move(backward),
                                     out.detach().impl_ptr(), std::move(differentiable));
  out.impl()->grad_fn = std::move(node);
  out.impl()->requires_grad = true;
  return out;
}

}  // namespace

Tensor record(const char* op_name, Tensor out, std::vector<Tensor> inputs, BackwardFn backward,
              bool allow_nonfinite) {
  if (!backward) throw std::logic_error(std::string("record: op '") + op_name + "' has no backward");
  return attach(op_name, std::move(out), std::move(inputs), std::move(backward), nullptr, allow_nonfinite);
}

Tensor record_fused(const char* op_name, Tensor out, std::vector<Tensor> inputs, BackwardFn first_order,
                    BackwardFn differentiable, bool allow_nonfinite) {
  if (!first_order || !differentiable)
    throw std::logic_error(std::string("record_fused: op '") + op_name + "' needs both backwards");
  return attach(op_name, std::move(out), std::move(inputs), std::move(first_order), std::move(differentiable),
                allow_nonfinite);
}

bool graph_has_fused_backward(const Tensor& y) {
  if (!y.defined()) return false;
  std::vector<const Node*> stack;
  std::unordered_set<const Node*> seen;
  if (const auto& node = y.impl()->grad_fn) stack.push_back(node.get());
  while (!stack.empty()) {
    const Node* n = stack.back();
    stack.pop_back();
    if (!seen.insert(n).second) continue;
    if (n->is_fused()) return true;
    for (const auto& in : n->inputs())
      if (in.defined() && in.impl()->grad_fn) stack.push_back(in.impl()->grad_fn.get());
  }
  return false;
}

// --- engine ------------------------------------------------------------------------------
namespace {

class GradModeScope {
 public:
  explicit GradModeScope(bool on) : prev_(is_grad_enabled()) { set_grad_enabled(on); }
  ~GradModeScope() { set_grad_enabled(prev_); }
 private:
  bool prev_;
};

// A tensor's place in the graph: its node when it has one (node.output() makes a second
// handle to the same node's output; both must share one gradient), else the leaf itself.
using Key = const void*;
Key key_of(const Tensor& t) {
  return t.impl()->grad_fn ? static_cast<Key>(t.impl()->grad_fn.get()) : static_cast<Key>(t.impl());
}

// Step 1: the upstream gradient of each output (ones for a one-element output given none).
std::vector<Tensor> seed_gradients(const char* who, const std::vector<Tensor>& outputs,
                                   const std::vector<Tensor>& grad_outputs) {
  if (outputs.empty()) throw_error<ValueError>(who, "no outputs given");
  if (!grad_outputs.empty() && grad_outputs.size() != outputs.size())
    throw_error<ValueError>(who, grad_outputs.size(), " grad_outputs for ", outputs.size(), " outputs");
  std::vector<Tensor> seeds(outputs.size());
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const Tensor& y = outputs[i];
    if (!y.defined() || !y.requires_grad())
      throw_error<GraphError>(who, "output ", i, " does not require grad and has no grad_fn");
    if (grad_outputs.empty() || !grad_outputs[i].defined()) {
      if (y.numel() != 1)
        throw_error<ShapeError>(who, "grad_output can be omitted only for one-element outputs; output ", i,
                                " has shape ", y.shape());
      seeds[i] = ones(y.shape(), y.dtype());
      continue;
    }
    const Tensor& g = grad_outputs[i];
    if (g.dtype() != y.dtype())
      throw_error<DTypeError>(who, "grad_output ", i, " is ", dtype_name(g.dtype()), ' ', g.shape(),
                              " but the output is ", dtype_name(y.dtype()), ' ', y.shape());
    if (g.shape() != y.shape())
      throw_error<ShapeError>(who, "grad_output ", i, " is ", g.shape(), ' ', dtype_name(g.dtype()),
                              " but the output is ", y.shape(), ' ', dtype_name(y.dtype()));
    seeds[i] = g;
  }
  return seeds;
}

// Step 2: every tensor reachable from the outputs through edges that require grad, each
// once, and for each the number of edges into it (the consumers that will send it a
// gradient). `tensors` keeps them all alive while nodes release their inputs.
struct Graph {
  std::vector<Tensor> tensors;
  std::unordered_map<Key, int> consumers;
};

// The nodes one backward holds (Node::hold), each dropped when the backward ends.
class Holds {
 public:
  Holds() = default;
  Holds(const Holds&) = delete;
  Holds& operator=(const Holds&) = delete;
  ~Holds() {
    for (const auto& n : nodes_) n->drop();
  }
  void hold(const std::shared_ptr<Node>& n) {
    n->hold();
    nodes_.push_back(n);
  }
 private:
  std::vector<std::shared_ptr<Node>> nodes_;  // owned: a failed discovery frees its tensors first
};

Graph discover(const std::vector<Tensor>& outputs, Holds& holds) {
  Graph graph;
  std::vector<Tensor> stack;  // each output once: a repeated one's node counted twice left its inputs never ready
  std::unordered_set<Key> seen;
  for (const auto& y : outputs)
    if (seen.insert(key_of(y)).second) stack.push_back(y);
  while (!stack.empty()) {
    Tensor t = std::move(stack.back());
    stack.pop_back();
    if (const auto& node = t.impl()->grad_fn) {
      holds.hold(node);  // throws the "second time" error for a released node
      for (const auto& in : node->inputs()) {
        if (!in.requires_grad()) continue;
        ++graph.consumers[key_of(in)];
        if (seen.insert(key_of(in)).second) stack.push_back(in);
      }
    }
    graph.tensors.push_back(std::move(t));
  }
  return graph;
}

// Visits the tensors `keep` accepts in Kahn's order from the outputs: each one after all its
// consumers. visit(t) returns the inputs of t's node (empty for a leaf), read before it may
// release the node.
template <class Keep, class Visit>
void kahn_order(const std::vector<Tensor>& outputs, std::unordered_map<Key, int> pending, const Keep& keep,
                const Visit& visit) {
  std::vector<Tensor> ready;
  std::unordered_set<Key> seeded;
  for (const auto& y : outputs)
    if (keep(key_of(y)) && pending[key_of(y)] == 0 && seeded.insert(key_of(y)).second) ready.push_back(y);
  while (!ready.empty()) {
    Tensor t = std::move(ready.back());
    ready.pop_back();
    for (const Tensor& in : visit(t))
      if (in.requires_grad() && keep(key_of(in)) && --pending[key_of(in)] == 0) ready.push_back(in);
  }
}

std::vector<Tensor> inputs_of(const Tensor& t) {
  const auto& node = t.impl()->grad_fn;
  return node ? node->inputs() : std::vector<Tensor>{};
}

// Step 3 (grad() only): the tensors from which a requested input is reachable, the requested
// inputs included. Every consumer of such a tensor is one too, so pruning the others changes
// no pending count, and the kept tensors are visited in the same order as without pruning.
std::unordered_set<Key> reaching_targets(const std::vector<Tensor>& outputs, const Graph& graph,
                                         const std::unordered_map<Key, Tensor>& targets) {
  std::vector<Tensor> order;  // consumers before producers
  kahn_order(outputs, graph.consumers, [](Key) { return true; }, [&](const Tensor& t) {
    order.push_back(t);
    return inputs_of(t);
  });
  std::unordered_set<Key> reach;
  for (auto t = order.rbegin(); t != order.rend(); ++t) {
    bool r = targets.count(key_of(*t)) > 0;
    if (const auto& node = t->impl()->grad_fn)
      for (const auto& in : node->inputs()) r = r || (in.requires_grad() && reach.count(key_of(in)) > 0);
    if (r) reach.insert(key_of(*t));
  }
  return reach;
}

// Backward observers: a copy-on-write list, so a running backward keeps the observers it
// started with while another thread adds or removes one.
std::mutex g_observers_mutex;
std::shared_ptr<const std::vector<std::shared_ptr<BackwardObserver>>> g_observers;
std::atomic<bool> g_have_observers{false};

std::shared_ptr<const std::vector<std::shared_ptr<BackwardObserver>>> observers_now() {
  if (!g_have_observers.load(std::memory_order_acquire)) return nullptr;
  std::lock_guard<std::mutex> lock(g_observers_mutex);
  return g_observers;
}

// acc += g in place (the sums add(acc, g) makes, without a new tensor) when nothing but this
// backward can see acc: its handle and its storage held once (so not a user's grad_output, a
// node's saved tensor, a view or an input's gradient passed on to two inputs), no graph, and g
// of its shape and float dtype. False, nothing written, otherwise. Not under create_graph,
// where the sum is recorded. (PyTorch's engine accumulates in place when it can, too. The
// reverse model's step sums four gradients so: paired, the new side won 22-31 of 40 rounds,
// ~1%, within the machine's noise in medians; docs/PERFORMANCE_HISTORY.md, twenty-fifth round.)
template <class T>
void add_into(const Tensor& acc, const Tensor& g) {
  T* pa = acc.mutable_data<T>();
  const T* pg = g.data<T>();
  parallel_for(acc.numel(), kElementCost, [&](std::size_t begin, std::size_t end) {
    for (std::size_t i = begin; i < end; ++i) pa[i] = pa[i] + pg[i];
  });
}
bool accumulate_in_place(const Tensor& acc, const Tensor& g) {
  const TensorImpl& a = *acc.impl();
  if (acc.impl_ptr().use_count() != 1 || !a.value || a.value.use_count() != 1 || a.grad_fn || a.requires_grad ||
      g.dtype() != a.dtype || g.shape() != a.shape)
    return false;
  if (a.dtype == DType::Float32) add_into<float>(acc, g);
  else if (a.dtype == DType::Float64) add_into<double>(acc, g);
  else return false;
  return true;
}

// g itself when this backward holds it alone, else a copy: a leaf's .grad never shares its
// storage with another leaf's .grad, a user's grad_output or a node's saved tensor (add's
// backward sends one tensor to both inputs), so writing one gradient in place (mutable_data)
// changes no other. PyTorch's AccumulateGrad steals or clones by the same rule.
Tensor owned(Tensor g) {
  const TensorImpl& i = *g.impl();
  if (g.impl_ptr().use_count() == 1 && (!i.value || i.value.use_count() == 1)) return g;
  return g.clone();
}

// Two backwards in two threads may add into one leaf's .grad (a parameter shared by two
// graphs, Hogwild-style): the read-add-write of .grad holds the leaf's lock, as PyTorch's
// AccumulateGrad does. Striped: 64 locks, chosen by the leaf's address.
std::mutex& leaf_grad_lock(const TensorImpl* leaf) {
  static std::mutex locks[64];
  return locks[(reinterpret_cast<std::uintptr_t>(leaf) / alignof(std::max_align_t)) % 64];
}

// Runs reverse mode from outputs. When `targets` is null, leaf gradients accumulate into
// .grad; otherwise the gradient reaching each target tensor is stored in (*targets)[key], and
// only nodes with a target behind them run their backward.
void run_backward(const char* who, const std::vector<Tensor>& outputs,
                  const std::vector<Tensor>& grad_outputs, bool retain_graph, bool create_graph,
                  std::unordered_map<Key, Tensor>* targets) {
  const std::vector<Tensor> seeds = seed_gradients(who, outputs, grad_outputs);
  Holds holds;
  const Graph graph = discover(outputs, holds);
  std::unordered_set<Key> reach;
  if (targets) reach = reaching_targets(outputs, graph, *targets);
  auto keep = [&](Key key) { return !targets || reach.count(key) > 0; };
  // A kept tensor's node runs when some input is kept: else it is a target with nothing to
  // reach behind it.
  auto expands = [&](const Node& node) {
    for (const auto& in : node.inputs())
      if (in.requires_grad() && keep(key_of(in))) return true;
    return false;
  };

  // Every node that will run is checked first (released, inputs modified in place), so a
  // backward that fails there has changed nothing; one that fails later (a backward function
  // throws, memory runs out) restores the .grad it had set, though nodes it ran are released.
  for (const Tensor& t : graph.tensors)
    if (const auto& node = t.impl()->grad_fn; node && keep(key_of(t)) && expands(*node)) node->check_runnable();

  const auto observers = targets ? nullptr : observers_now();
  if (observers)
    for (const auto& o : *observers) o->backward_started();

  GradModeScope mode(create_graph);
  std::unordered_map<Key, Tensor> grads;
  auto accumulate = [&](Key key, const Tensor& g) {
    auto it = grads.find(key);
    if (it == grads.end() || !it->second.defined()) grads[key] = g;
    else if (create_graph || !accumulate_in_place(it->second, g)) it->second = add(it->second, g);
  };
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (keep(key_of(outputs[i]))) accumulate(key_of(outputs[i]), seeds[i]);

  // Step 4: Kahn's algorithm. A tensor's gradient is complete once all its consumers ran;
  // its node's backward (the fused op's differentiable one under create_graph) then sends
  // one contribution to each kept input.
  std::vector<std::pair<TensorImpl*, Tensor>> set_grads;  // each leaf written, with its .grad before
  try {
    kahn_order(outputs, graph.consumers, keep, [&](const Tensor& t) -> std::vector<Tensor> {
      const Key key = key_of(t);
      Tensor g = std::move(grads[key]);
      grads.erase(key);
      if (targets) {
        auto it = targets->find(key);
        if (it != targets->end()) it->second = g;
      }
      const auto& node = t.impl()->grad_fn;
      if (!node) {
        if (!targets && g.defined()) {
          Tensor contribution;  // what this backward added: g, or the new .grad when there was none
          {
            std::lock_guard<std::mutex> lock(leaf_grad_lock(t.impl()));
            const bool had_grad = t.impl()->grad.defined();
            Tensor acc = had_grad ? add(t.impl()->grad, g) : create_graph ? g : owned(std::move(g));
            set_grads.emplace_back(t.impl(), t.impl()->grad);
            t.impl()->grad = create_graph ? acc : acc.detach();
            if (observers) contribution = had_grad ? g : t.impl()->grad;
          }
          if (observers)
            for (const auto& o : *observers) {
              o->leaf_grad_contribution(t, contribution);
              o->leaf_grad_ready(t);
            }
        }
        return {};
      }
      if (!expands(*node)) return {};
      std::vector<Tensor> inputs = node->inputs();
      std::vector<Tensor> in_grads;
      if (g.defined()) in_grads = node->apply(g, create_graph);
      if (!retain_graph) node->release();
      for (std::size_t i = 0; i < inputs.size() && i < in_grads.size(); ++i)
        if (inputs[i].requires_grad() && keep(key_of(inputs[i])) && in_grads[i].defined())
          accumulate(key_of(inputs[i]), in_grads[i]);
      return inputs;
    });
  } catch (...) {
    for (auto it = set_grads.rbegin(); it != set_grads.rend(); ++it) {
      std::lock_guard<std::mutex> lock(leaf_grad_lock(it->first));
      it->first->grad = std::move(it->second);
    }
    throw;
  }
  if (observers)
    for (const auto& o : *observers) o->backward_finished();
}

}  // namespace

void backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grad_outputs,
              bool retain_graph, bool create_graph) {
  run_backward("backward", outputs, grad_outputs, retain_graph || create_graph, create_graph,
               nullptr);
}

void add_backward_observer(std::shared_ptr<BackwardObserver> observer) {
  if (!observer) throw_error<ValueError>("add_backward_observer", "the observer is null");
  std::lock_guard<std::mutex> lock(g_observers_mutex);
  auto next = g_observers ? std::make_shared<std::vector<std::shared_ptr<BackwardObserver>>>(*g_observers)
                          : std::make_shared<std::vector<std::shared_ptr<BackwardObserver>>>();
  if (std::find(next->begin(), next->end(), observer) != next->end()) return;
  next->push_back(std::move(observer));
  g_observers = std::move(next);
  g_have_observers.store(true, std::memory_order_release);
}

void remove_backward_observer(const BackwardObserver* observer) {
  std::lock_guard<std::mutex> lock(g_observers_mutex);
  if (!g_observers) return;
  auto next = std::make_shared<std::vector<std::shared_ptr<BackwardObserver>>>();
  for (const auto& o : *g_observers)
    if (o.get() != observer) next->push_back(o);
  g_have_observers.store(!next->empty(), std::memory_order_release);
  g_observers = next->empty() ? nullptr : std::move(next);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& grad_outputs, GradOptions options) {
  std::unordered_map<Key, Tensor> targets;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined() || !inputs[i].requires_grad())
      throw_error<GraphError>("grad", "input ", i, " does not require grad (masks, indices and constants have no gradient)");
    targets[key_of(inputs[i])] = Tensor();
  }
  run_backward("grad", outputs, grad_outputs, options.retain_graph || options.create_graph,
               options.create_graph, &targets);
  std::vector<Tensor> result;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Tensor g = targets[key_of(inputs[i])];
    if (!g.defined() && !options.allow_unused)
      throw_error<GraphError>("grad", "input ", i, " of shape ", inputs[i].shape(),
                              " is not used to compute the outputs (pass allow_unused)");
    if (!options.create_graph && g.defined()) {
      // no two results share a storage (add's backward sends one tensor to both inputs)
      bool shared = false;
      for (const Tensor& r : result)
        shared = shared || (r.defined() && r.impl()->value && r.impl()->value == g.impl()->value);
      g = shared ? g.clone() : g.detach();
    }
    result.push_back(g);
  }
  return result;
}

}  // namespace xgrad
