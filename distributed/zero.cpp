// ZeroOptimizer: parameter-level sharding of the optimizer state, agreement before a step,
// the parameter all-gather, sharded gradient clipping and the gathered state.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <numeric>

#include "xgrad/distributed/comm.hpp"
#include "xgrad/distributed/zero.hpp"
#include "xgrad/framework/array.hpp"
#include "xgrad/framework/autograd.hpp"

namespace xgrad::distributed {
namespace {

constexpr const char* kWho = "ZeroOptimizer";

// Largest parameters first, each to the rank with the fewest bytes so far (ties: lower rank).
std::vector<int> partition(const NamedTensors& params, int world) {
  std::vector<std::size_t> order(params.size());
  std::iota(order.begin(), order.end(), std::size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return params[a].second.nbytes() > params[b].second.nbytes(); });
  std::vector<std::size_t> load(std::size_t(world), 0);
  std::vector<int> owner(params.size(), 0);
  for (std::size_t i : order) {
    const auto r = std::size_t(std::min_element(load.begin(), load.end()) - load.begin());
    owner[i] = int(r);
    load[r] += params[i].second.nbytes();
  }
  return owner;
}

// The flat index of the first non-finite element, or numel.
std::size_t first_non_finite(const Tensor& g) {
  return dispatch_float(kWho, g.dtype(), [&](auto zero) {
    using T = decltype(zero);
    const T* p = g.data<T>();
    for (std::size_t j = 0, n = g.numel(); j < n; ++j)
      if (!std::isfinite(p[j])) return j;
    return g.numel();
  });
}

// Named tensors as bytes: per entry u64 name length, name, i64 dtype, i64 rank, i64 dims, data.
void append(std::vector<unsigned char>& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const unsigned char*>(p);
  out.insert(out.end(), b, b + n);
}
std::vector<unsigned char> serialize(const NamedTensors& entries) {
  std::vector<unsigned char> out;
  for (const auto& [name, t] : entries) {
    const std::uint64_t len = name.size();
    const std::int64_t dtype = std::int64_t(t.dtype()), ndim = std::int64_t(t.dim());
    append(out, &len, sizeof len);
    append(out, name.data(), name.size());
    append(out, &dtype, sizeof dtype);
    append(out, &ndim, sizeof ndim);
    for (std::size_t d : t.shape()) {
      const std::int64_t v = std::int64_t(d);
      append(out, &v, sizeof v);
    }
    append(out, t.raw_data(), t.nbytes());
  }
  return out;
}
void deserialize(const unsigned char* p, std::size_t n, NamedTensors& out) {
  std::size_t at = 0;
  auto take = [&](void* dst, std::size_t k) {
    if (at + k > n) throw DistributedError(detail::rank_prefix() + kWho + ": a gathered optimizer state is truncated");
    if (k) std::memcpy(dst, p + at, k);
    at += k;
  };
  while (at < n) {
    std::uint64_t len = 0;
    take(&len, sizeof len);
    if (len > n) throw DistributedError(detail::rank_prefix() + kWho + ": a gathered optimizer state is malformed");
    std::string name(std::size_t(len), '\0');
    take(name.data(), name.size());
    std::int64_t dtype = 0, ndim = 0;
    take(&dtype, sizeof dtype);
    take(&ndim, sizeof ndim);
    if (dtype < 0 || dtype > 3 || ndim < 0 || ndim > 64)
      throw DistributedError(detail::rank_prefix() + kWho + ": a gathered optimizer state is malformed");
    Shape shape(static_cast<std::size_t>(ndim));
    for (auto& d : shape) {
      std::int64_t v = 0;
      take(&v, sizeof v);
      d = std::size_t(v);
    }
    Tensor t = empty_tensor(DType(dtype), shape, kWho);
    take(t.mutable_raw_data(), t.nbytes());
    out.emplace_back(std::move(name), std::move(t));
  }
}

// An optimizer's parameter-group records ("param_groups", "param_group.<param>": written when it
// has two or more groups, models/optim.hpp). They describe one optimizer's grouping, so the
// shards' and the unsharded optimizer's are never exchanged: each side keeps its own.
bool is_group_record(const std::string& entry) {
  return entry == "param_groups" || entry.compare(0, 12, "param_group.") == 0;
}
NamedTensors group_records(const Optimizer& opt) {
  NamedTensors out;
  for (auto& e : opt.state_dict())
    if (is_group_record(e.first)) out.push_back(std::move(e));
  return out;
}

}  // namespace

struct ZeroOptimizer::Comms {
  detail::Comm comm;
  std::vector<unsigned char> packed;  // the parameter all-gather's buffer, kept between steps
};

ZeroOptimizer::ZeroOptimizer(DistributedDataParallel& ddp, OptimizerFactory make)
    : Optimizer(ddp.parameters(), 0.0),
      ddp_(ddp),
      ddp_alive_(ddp.lifetime()),
      make_(std::move(make)),
      comms_(std::make_unique<Comms>()) {
  if (!make_) throw_error<ValueError>(kWho, "the optimizer factory is empty");
  owners_ = partition(params_, world_size());
  NamedTensors mine;
  for (std::size_t i = 0; i < params_.size(); ++i)
    if (owners_[i] == rank()) mine.push_back(params_[i]);
  local_ = make_(mine);
  if (!local_) throw_error<ValueError>(kWho, "the optimizer factory returned no optimizer");
  lr = local_->lr;
  name_ = std::string("ZeroOptimizer(") + local_->name() + ")";
  comms_->comm = detail::Comm::duplicate_world(kWho);  // collective
  ddp_.set_gradient_owners(owners_);
}

ZeroOptimizer::~ZeroOptimizer() {
  if (ddp_alive_.expired()) return;
  try {
    ddp_.set_gradient_owners({});
  } catch (...) {  // during a failed backward: the wrapper is broken anyway
  }
}

std::vector<std::string> ZeroOptimizer::buffer_names() const {
  throw_error<ValueError>(name_, "the optimizer state is sharded across the ranks: save and load it with "
                                 "xgrad::distributed::save_checkpoint / load_checkpoint (distributed/checkpoint.hpp), "
                                 "or gather_state_dict / load_full_state_dict");
}

void ZeroOptimizer::update(std::size_t, const Tensor&, const Tensor&) {
  throw std::logic_error("ZeroOptimizer::update: step() updates through the local optimizer");
}

std::unique_ptr<Optimizer> ZeroOptimizer::make_full() const {
  auto full = make_(params_);
  if (!full) throw_error<ValueError>(kWho, "the optimizer factory returned no optimizer");
  return full;
}

void ZeroOptimizer::step() {
  check_hyperparameters();
  const std::string op = name_ + "::step";
  // Every rank checks its own gradients; the ranks agree before anything changes.
  std::string problem;
  for (std::size_t i = 0; i < params_.size() && problem.empty(); ++i) {
    if (owners_[i] != rank()) continue;
    const auto& [n, p] = params_[i];
    const Tensor g = p.grad();
    if (!g.defined()) continue;
    if (g.dtype() != p.dtype() || g.shape() != p.shape())
      problem = "the gradient of parameter '" + n + "' is " + dtype_name(g.dtype()) + " " + shape_str(g.shape()) +
                " but the parameter is " + dtype_name(p.dtype()) + " " + shape_str(p.shape());
    else if (const std::size_t bad = first_non_finite(g); bad < g.numel())
      problem = "the gradient of parameter '" + n + "' " + shape_str(g.shape()) + " has a non-finite value at flat index " +
                std::to_string(bad);
  }
  const MPI_Comm comm = comms_->comm.get();
  const int world = world_size();
  if (comm != MPI_COMM_NULL) {
    int bad = problem.empty() ? 0 : 1;
    std::vector<int> all(static_cast<std::size_t>(world));
    std::vector<MPI_Request> req(1);
    detail::check(MPI_Iallgather(&bad, 1, MPI_INT, all.data(), 1, MPI_INT, comm, &req[0]), op + ": MPI_Iallgather");
    detail::wait_all(req, op + " (checking the gradients of every rank)");
    std::string ranks;
    for (int r = 0; r < world; ++r)
      if (all[std::size_t(r)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    if (!ranks.empty())
      throw DistributedError(op + ": bad gradients on rank " + ranks + (problem.empty() ? "" : " (here: " + problem + ")") +
                                 "; nothing was updated on any rank",
                             /*collective=*/true);
  } else if (!problem.empty()) {
    throw_error<ValueError>(op, problem, "; nothing was updated");
  }
  local_->lr = lr;
  local_->step();
  ++steps_;
  if (comm == MPI_COMM_NULL) return;
  // All-gather: rank r's parameters, in parameter order, then rank r+1's.
  std::vector<int> counts(static_cast<std::size_t>(world), 0), displs(static_cast<std::size_t>(world), 0);
  std::vector<std::vector<std::size_t>> owned(static_cast<std::size_t>(world));
  std::size_t total = 0;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    owned[std::size_t(owners_[i])].push_back(i);
    total += params_[i].second.nbytes();
  }
  auto& packed = comms_->packed;
  packed.resize(total);
  std::size_t at = 0;
  for (int r = 0; r < world; ++r) {
    displs[std::size_t(r)] = detail::checked_count(at, kWho);
    for (std::size_t i : owned[std::size_t(r)]) {
      const Tensor& p = params_[i].second;
      if (r == rank()) std::memcpy(packed.data() + at, p.raw_data(), p.nbytes());
      at += p.nbytes();
    }
    counts[std::size_t(r)] = detail::checked_count(at - std::size_t(displs[std::size_t(r)]), kWho);
  }
  std::vector<MPI_Request> req(1);
  detail::check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, packed.data(), counts.data(), displs.data(), MPI_BYTE,
                                comm, &req[0]),
                op + ": MPI_Iallgatherv");
  detail::wait_all(req, op + " (all-gathering the updated parameters)");
  for (int r = 0; r < world; ++r) {
    if (r == rank()) continue;
    std::size_t from = std::size_t(displs[std::size_t(r)]);
    for (std::size_t i : owned[std::size_t(r)]) {
      const Tensor& p = params_[i].second;
      std::memcpy(p.mutable_raw_data(), packed.data() + from, p.nbytes());
      from += p.nbytes();
    }
  }
}

double ZeroOptimizer::clip_grad_norm(double max_norm) {
  if (!(max_norm >= 0))
    throw_error<ValueError>("clip_grad_norm", "argument 'max_norm' must be >= 0, got ", max_norm);
  // Each parameter's squared gradient norm: the owner's value, +0 elsewhere and for a
  // parameter without gradient, summed over the ranks (x + 0 is exact, so every rank gets the
  // owners' values), then added in parameter order as clip_grad_norm adds them.
  const std::size_t n = params_.size();
  Tensor per = zeros({n}, DType::Float64);
  double* v = per.mutable_data<double>();
  for (std::size_t i = 0; i < n; ++i) {
    const Tensor g = params_[i].second.grad();
    if (owners_[i] == rank() && g.defined()) v[i] = xgrad::detail::grad_squared_norm(g);
  }
  all_reduce(per, ReduceOp::Sum);
  v = per.mutable_data<double>();
  double sq = 0;
  for (std::size_t i = 0; i < n; ++i) sq += v[i];
  const double total = std::sqrt(sq);
  const double coef = max_norm / (total + 1e-6);
  if (coef < 1) {
    NoGradGuard no_grad;
    for (std::size_t i = 0; i < n; ++i) {
      const Tensor& p = params_[i].second;
      const Tensor g = p.grad();
      if (owners_[i] != rank() || !g.defined()) continue;
      p.set_grad(xgrad::detail::scaled_grad(g, coef));
    }
  }
  return total;
}

std::size_t ZeroOptimizer::local_state_bytes() const {
  std::size_t bytes = 0;
  for (const auto& [name, t] : local_->state_dict())
    if (name != "step") bytes += t.nbytes();
  return bytes;
}

std::unique_ptr<Optimizer> ZeroOptimizer::gather_optimizer(int root) const {
  const std::string op = name_ + "::gather_state_dict";
  if (root < 0 || root >= world_size())
    throw_error<ValueError>(op, "root ", root, " is not a rank of this world of ", world_size());
  NamedTensors state = local_->state_dict();
  NamedTensors entries;  // this rank's buffers and per-parameter counts
  for (auto& e : state)
    if (e.first != "step" && !is_group_record(e.first)) entries.push_back(e);
  NamedTensors merged;
  for (auto& e : state)
    if (e.first == "step") merged.push_back(e);
  const MPI_Comm comm = comms_->comm.get();
  if (comm == MPI_COMM_NULL) {
    merged.insert(merged.end(), entries.begin(), entries.end());
  } else {
    const std::vector<unsigned char> mine = serialize(entries);
    const int world = world_size();
    std::int64_t length = std::int64_t(mine.size());
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(world));
    std::vector<MPI_Request> req(1);
    detail::check(MPI_Igather(&length, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, root, comm, &req[0]),
                  op + ": MPI_Igather");
    detail::wait_all(req, op);
    std::vector<int> counts(static_cast<std::size_t>(world), 0), displs(static_cast<std::size_t>(world), 0);
    std::size_t total = 0;
    for (int r = 0; r < world; ++r) {
      displs[std::size_t(r)] = detail::checked_count(total, kWho);
      counts[std::size_t(r)] = detail::checked_count(std::size_t(lengths[std::size_t(r)]), kWho);
      total += std::size_t(lengths[std::size_t(r)]);
    }
    std::vector<unsigned char> all(rank() == root ? total : 0);
    req.assign(1, MPI_REQUEST_NULL);
    detail::check(MPI_Igatherv(mine.data(), int(mine.size()), MPI_BYTE, all.data(), counts.data(), displs.data(), MPI_BYTE,
                               root, comm, &req[0]),
                  op + ": MPI_Igatherv");
    detail::wait_all(req, op);
    if (rank() != root) return nullptr;
    deserialize(all.data(), all.size(), merged);
  }
  auto full = make_full();
  for (auto& e : group_records(*full)) merged.push_back(std::move(e));  // the unsharded grouping
  full->load_state_dict(merged);  // validates, and puts the entries in the unsharded order
  return full;
}

NamedTensors ZeroOptimizer::gather_state_dict(int root) const {
  auto full = gather_optimizer(root);
  return full ? full->state_dict() : NamedTensors{};
}

void ZeroOptimizer::load_full_state_dict(const NamedTensors& state) {
  make_full()->load_state_dict(state);  // the whole state is valid for every parameter
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < params_.size(); ++i) index[params_[i].first] = i;
  // An entry "<kind>.<parameter name>" (kind without a dot) belongs to that parameter's owner;
  // "step" and any other entry naming no parameter go to every rank; the group records are
  // this rank's optimizer's own.
  NamedTensors mine = group_records(*local_);
  std::int64_t steps = 0;
  for (const auto& [entry, t] : state) {
    if (is_group_record(entry)) continue;
    if (entry == "step") steps = t.data<std::int64_t>()[0];
    const std::size_t dot = entry.find('.');
    if (dot != std::string::npos) {
      auto it = index.find(entry.substr(dot + 1));
      if (it != index.end() && owners_[it->second] != rank()) continue;
    }
    mine.emplace_back(entry, t);
  }
  local_->load_state_dict(mine);
  steps_ = steps;
}

}  // namespace xgrad::distributed
