// DistributedDataParallel: the model check, the parameter broadcast and the bucketed,
// overlapped, deterministic gradient reduction driven by the engine's BackwardObserver.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <unordered_map>

#include "xgrad/distributed/comm.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/framework/array.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/ops/elementwise.hpp"

namespace xgrad::distributed {
namespace {

using clock_type = std::chrono::steady_clock;
double since(clock_type::time_point t0) { return std::chrono::duration<double>(clock_type::now() - t0).count(); }

constexpr const char* kWho = "DistributedDataParallel";
constexpr std::uint64_t kSeqModulus = std::uint64_t(1) << 24;  // exact in a float32 header element

// Header element k of a bucket's message, in the bucket's dtype (small integers, exact).
void put(void* header, DType dtype, std::size_t k, double v) {
  if (dtype == DType::Float32) static_cast<float*>(header)[k] = float(v);
  else static_cast<double*>(header)[k] = v;
}
double get(const void* header, DType dtype, std::size_t k) {
  return dtype == DType::Float32 ? double(static_cast<const float*>(header)[k]) : static_cast<const double*>(header)[k];
}

// One rank's parameter list as text: "name\x1fdtype\x1fshape\x1frequires_grad\x1e" per parameter.
std::string describe_model(const NamedTensors& params) {
  std::string s;
  for (const auto& [name, t] : params)
    s += name + '\x1f' + dtype_name(t.dtype()) + '\x1f' + shape_str(t.shape()) + '\x1f' +
         (t.requires_grad() ? "requires grad" : "frozen") + '\x1e';
  return s;
}
std::vector<std::vector<std::string>> parse_model(const std::string& s) {
  std::vector<std::vector<std::string>> out;
  std::size_t b = 0;
  while (b < s.size()) {
    const std::size_t e = s.find('\x1e', b);
    std::vector<std::string> fields;
    std::size_t f = b;
    while (f <= e) {
      const std::size_t g = std::min(s.find('\x1f', f), e);
      fields.push_back(s.substr(f, g - f));
      f = g + 1;
    }
    out.push_back(fields);
    b = e + 1;
  }
  return out;
}

// Every rank's model must be rank 0's: the same parameters (names, dtypes, shapes, which
// require grad) in the same order. Collective; throws the same collective error on every rank.
void check_same_model(MPI_Comm comm, const NamedTensors& params, const char* who) {
  if (comm == MPI_COMM_NULL) return;
  const int n = world_size();
  const std::string mine = describe_model(params);
  std::int64_t length = std::int64_t(mine.size());
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(n));
  std::vector<MPI_Request> req(1);
  detail::check(MPI_Iallgather(&length, 1, MPI_INT64_T, lengths.data(), 1, MPI_INT64_T, comm, &req[0]),
                std::string(who) + ": MPI_Iallgather");
  detail::wait_all(req, std::string(who) + ": comparing the models of the ranks");
  std::vector<int> counts, displs;
  std::size_t total = 0;
  for (auto l : lengths) {
    displs.push_back(detail::checked_count(total, who));
    counts.push_back(detail::checked_count(std::size_t(l), who));
    total += std::size_t(l);
  }
  std::string all(total, '\0');
  req.assign(1, MPI_REQUEST_NULL);
  detail::check(MPI_Iallgatherv(mine.data(), int(mine.size()), MPI_CHAR, all.data(), counts.data(), displs.data(),
                                MPI_CHAR, comm, &req[0]),
                std::string(who) + ": MPI_Iallgatherv");
  detail::wait_all(req, std::string(who) + ": comparing the models of the ranks");
  const auto reference = parse_model(all.substr(0, std::size_t(counts[0])));
  auto show = [](const std::vector<std::string>& p) {
    return "'" + p[0] + "' " + p[1] + " " + p[2] + (p[3] == "frozen" ? " (frozen)" : "");
  };
  for (int r = 1; r < n; ++r) {
    const auto other = parse_model(all.substr(std::size_t(displs[std::size_t(r)]), std::size_t(counts[std::size_t(r)])));
    const std::size_t common = std::min(reference.size(), other.size());
    for (std::size_t i = 0; i <= common; ++i) {
      if (i < common && reference[i] == other[i]) continue;
      if (i == common && reference.size() == other.size()) break;
      std::ostringstream msg;
      msg << who << ": the model differs across the ranks: ";
      if (reference.size() != other.size())
        msg << "rank 0 has " << reference.size() << " parameters, rank " << r << " has " << other.size() << "; ";
      msg << "parameter " << i << " is " << (i < reference.size() ? show(reference[i]) : "missing") << " on rank 0 but "
          << (i < other.size() ? show(other[i]) : "missing") << " on rank " << r
          << " (every rank must build the same model before wrapping it)";
      throw DistributedError(msg.str(), /*collective=*/true);
    }
  }
}

// Copies `root`'s values of every parameter to every rank (one broadcast of the packed bytes).
void broadcast_values(MPI_Comm comm, const NamedTensors& params, int root, const char* who) {
  if (comm == MPI_COMM_NULL) return;
  std::size_t total = 0;
  for (const auto& [name, t] : params) total += t.nbytes();
  std::vector<unsigned char> packed(total);
  const bool sender = rank() == root;
  if (sender) {
    std::size_t at = 0;
    for (const auto& [name, t] : params) {
      std::memcpy(packed.data() + at, t.raw_data(), t.nbytes());
      at += t.nbytes();
    }
  }
  constexpr std::size_t kChunk = std::size_t(1) << 30;
  for (std::size_t at = 0; at < total; at += kChunk) {
    std::vector<MPI_Request> req(1);
    detail::check(MPI_Ibcast(packed.data() + at, int(std::min(kChunk, total - at)), MPI_BYTE, root, comm, &req[0]),
                  std::string(who) + ": MPI_Ibcast");
    detail::wait_all(req, std::string(who) + ": broadcasting rank " + std::to_string(root) + "'s parameters");
  }
  if (sender) return;
  std::size_t at = 0;
  for (const auto& [name, t] : params) {
    std::memcpy(t.mutable_raw_data(), packed.data() + at, t.nbytes());
    at += t.nbytes();
  }
}

}  // namespace

struct DistributedDataParallel::Reducer : BackwardObserver {
  struct Param {
    std::string name;
    Tensor tensor;
    DType dtype;
    Shape shape;
    std::size_t numel = 0, bucket = 0, offset = 0, slot = 0;  // slot: position in its bucket
    int owner = -1;                                            // ZeRO: the rank that keeps its gradient
    // What is reduced is what the backwards since the last synchronisation added to .grad (see
    // the header): with a .grad already there when they started (`base`: the previous
    // synchronisation's result, or one the user kept), their own sum `local`; else .grad itself.
    bool window = false;                 // backwards since the last synchronisation have begun
    Tensor base, local;                  // base undefined: .grad is all local
    const TensorImpl* after = nullptr;   // .grad as the last backward left it (the user did not replace it)
  };
  struct Bucket {
    DType dtype = DType::Float32;
    std::vector<std::size_t> params;  // in message order
    detail::SegmentedReduce red;
    std::size_t pending = 0;
    std::vector<char> used, used_anywhere;  // per slot: this rank had a gradient / some rank had one
  };

  ReduceOp op = ReduceOp::Average;
  bool overlap = true;
  bool zero = false;  // gradients go to their owners only
  std::size_t bucket_bytes = 0;
  std::vector<Param> params;
  std::unordered_map<const TensorImpl*, std::size_t> index;
  std::vector<Bucket> buckets;
  detail::Comm scatter_comm, gather_comm;
  int world = 1, me = 0;

  enum class Phase { Idle, Collecting, Broken } phase = Phase::Idle;
  bool syncing = false, touched = false, no_sync = false;
  std::uint64_t sequence = 0;  // backwards that reached the parameters so far (synchronised or under no_sync)
  std::size_t next_launch = 0, next_reduce = 0, next_gathered = 0;  // buckets [0, next_gathered): gather done
  DDPStats stats;

  std::string what(std::size_t b) const {
    return std::string(kWho) + ": bucket " + std::to_string(b) + " of " + std::to_string(buckets.size()) + " (" +
           dtype_name(buckets[b].dtype) + ", " + std::to_string(buckets[b].red.size()) + " elements) of backward " +
           std::to_string(sequence + 1);
  }

  // Buckets in reverse registration order, cut at bucket_bytes and at dtype changes; with ZeRO
  // owners, each bucket's parameters are grouped by owner so that segment r is rank r's.
  void build_buckets() {
    buckets.clear();
    std::vector<std::vector<std::size_t>> groups;
    std::size_t bytes = 0;
    for (std::size_t k = params.size(); k-- > 0;) {
      const Param& p = params[k];
      const std::size_t b = p.numel * itemsize(p.dtype);
      if (groups.empty() || params[groups.back().front()].dtype != p.dtype || (bytes > 0 && bytes + b > bucket_bytes)) {
        groups.emplace_back();
        bytes = 0;
      }
      groups.back().push_back(k);
      bytes += b;
    }
    for (auto& g : groups) {
      if (zero)
        std::stable_sort(g.begin(), g.end(), [&](std::size_t a, std::size_t c) { return params[a].owner < params[c].owner; });
      Bucket bucket;
      bucket.dtype = params[g.front()].dtype;
      std::size_t offset = 0;
      std::vector<std::size_t> bounds(std::size_t(world) + 1, 0);
      for (std::size_t s = 0; s < g.size(); ++s) {
        Param& p = params[g[s]];
        p.bucket = buckets.size();
        p.offset = offset;
        p.slot = s;
        offset += p.numel;
        if (zero) bounds[std::size_t(p.owner) + 1] += p.numel;
      }
      if (zero) {
        for (int r = 0; r < world; ++r) bounds[std::size_t(r) + 1] += bounds[std::size_t(r)];
      } else {
        bounds = detail::even_bounds(offset, world);
      }
      bucket.params = g;
      bucket.red = detail::SegmentedReduce(bucket.dtype, bounds, 2 + g.size());
      bucket.used.assign(g.size(), 0);
      bucket.used_anywhere.assign(g.size(), 0);
      buckets.push_back(std::move(bucket));
    }
    stats.buckets = buckets.size();
    stats.bytes_per_sync = 0;
    for (const auto& b : buckets) stats.bytes_per_sync += b.red.bytes_sent(/*with_gather=*/!zero);
  }

  void launch(std::size_t b) {
    Bucket& bucket = buckets[b];
    for (int r = 0; r < world; ++r) {
      void* h = bucket.red.send_header(r);
      put(h, bucket.dtype, 0, double(b));
      put(h, bucket.dtype, 1, double((sequence + 1) % kSeqModulus));
      for (std::size_t s = 0; s < bucket.params.size(); ++s) put(h, bucket.dtype, 2 + s, bucket.used[s]);
    }
    bucket.red.start_scatter(scatter_comm.get(), what(b));
  }

  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) launch(next_launch++);
  }

  // After bucket b's scatter: check every sender's tag, learn which ranks had gradients, sum,
  // and (all-reduce) start the gather.
  void reduce(std::size_t b) {
    Bucket& bucket = buckets[b];
    const double seq = double((sequence + 1) % kSeqModulus);
    std::fill(bucket.used_anywhere.begin(), bucket.used_anywhere.end(), 0);
    for (int s = 0; s < world; ++s) {
      const void* h = bucket.red.received_header(s);
      const double their_bucket = get(h, bucket.dtype, 0), their_seq = get(h, bucket.dtype, 1);
      if (their_bucket != double(b) || their_seq != seq)
        throw DistributedError(detail::rank_prefix() + kWho + ": rank " + std::to_string(s) + " sent bucket " +
                               std::to_string(long(their_bucket)) + " of backward " +
                               std::to_string(long(their_seq)) + " (mod 2^24) while this rank reduces bucket " +
                               std::to_string(b) + " of backward " + std::to_string(long(seq)) +
                               ": the ranks are out of step (a rank ran backward more or fewer times, or under "
                               "no_sync at another time)");
      for (std::size_t k = 0; k < bucket.params.size(); ++k)
        if (get(h, bucket.dtype, 2 + k) != 0) bucket.used_anywhere[k] = 1;
    }
    bucket.red.reduce(op);
    if (!zero) bucket.red.start_gather(gather_comm.get(), what(b));
  }

  // Progress without blocking: reduce (in bucket order) every bucket whose scatter arrived.
  void progress() {
    while (next_reduce < next_launch && buckets[next_reduce].red.test_scatter(what(next_reduce))) reduce(next_reduce++);
    if (zero) return;  // ZeRO: the owners keep their reduced segments, nothing is gathered
    while (next_gathered < next_reduce && buckets[next_gathered].red.test_gather(what(next_gathered))) ++next_gathered;
  }

  void backward_started() override {
    if (phase == Phase::Broken || (phase == Phase::Collecting && next_launch > 0))
      throw DistributedError(detail::rank_prefix() + kWho +
                             ": a previous backward ended by an exception after its gradient reductions had started; "
                             "the ranks are out of step: end the job (xgrad::distributed::abort)");
    for (const Param& p : params)
      if (p.tensor.dtype() != p.dtype || p.tensor.shape() != p.shape)
        throw_error<ValueError>(kWho, "parameter '", p.name, "' is now ", dtype_name(p.tensor.dtype()), ' ',
                                p.tensor.shape(), " but was ", dtype_name(p.dtype), ' ', p.shape,
                                " when the model was wrapped (convert the model with Module::to before wrapping it)");
    for (Param& p : params) {  // a new accumulation window after a synchronisation or a .grad the user replaced
      const Tensor g = p.tensor.grad();
      if (p.window && g.impl() == p.after) continue;
      p.window = true;
      p.base = world > 1 ? g : Tensor();  // N = 1: the reduction is the identity; .grad stays as it is
      p.local = Tensor();
    }
    syncing = !no_sync;
    touched = false;
    next_launch = next_reduce = next_gathered = 0;
    for (auto& b : buckets) {
      b.pending = b.params.size();
      std::fill(b.used.begin(), b.used.end(), 0);
    }
    phase = Phase::Collecting;
  }

  void leaf_grad_contribution(const Tensor& leaf, const Tensor& contribution) override {
    if (phase != Phase::Collecting) return;
    auto it = index.find(leaf.impl());
    if (it == index.end()) return;
    Param& p = params[it->second];
    if (p.base.defined()) p.local = p.local.defined() ? add(p.local, contribution) : contribution;
  }

  // What this rank contributes for p: the gradient its backwards added since the last synchronisation.
  static Tensor local_gradient(const Param& p) { return p.base.defined() ? p.local : p.tensor.grad(); }

  void remember_grads() {
    for (Param& p : params) p.after = p.tensor.grad().impl();
  }

  void leaf_grad_ready(const Tensor& leaf) override {
    if (phase != Phase::Collecting) return;
    auto it = index.find(leaf.impl());
    if (it == index.end()) return;
    touched = true;
    if (!syncing) return;
    const auto t0 = clock_type::now();
    try {
      Param& p = params[it->second];
      Bucket& bucket = buckets[p.bucket];
      if (bucket.used[p.slot]) return;  // reported once per backward
      const Tensor g = local_gradient(p);
      bucket.red.write(p.offset, g.raw_data(), p.numel);
      bucket.used[p.slot] = 1;
      if (--bucket.pending == 0 && overlap) launch_ready();
      progress();
    } catch (...) {
      phase = Phase::Broken;
      throw;
    }
    stats.callback_seconds += since(t0);
  }

  void backward_finished() override {
    if (phase != Phase::Collecting) return;
    if (!touched) {  // a backward that reached none of the parameters: not counted, not synchronised
      phase = Phase::Idle;
      remember_grads();
      return;
    }
    if (!syncing) {  // counted (the tag of the next reduction says how many backwards ran)
      phase = Phase::Idle;
      remember_grads();
      ++sequence;
      ++stats.skipped;
      return;
    }
    const auto t0 = clock_type::now();
    try {
      // Gradients that never became final in this backward: the accumulated .grad or zeros.
      for (auto& bucket : buckets) {
        if (bucket.pending == 0) continue;
        for (std::size_t s = 0; s < bucket.params.size(); ++s) {
          if (bucket.used[s]) continue;
          const Param& p = params[bucket.params[s]];
          const Tensor g = local_gradient(p);
          if (g.defined()) {
            bucket.red.write(p.offset, g.raw_data(), p.numel);
            bucket.used[s] = 1;
          } else {
            bucket.red.fill_zero(p.offset, p.numel);
          }
        }
        bucket.pending = 0;
      }
      launch_ready();
      for (; next_reduce < buckets.size(); ++next_reduce) {
        buckets[next_reduce].red.wait_scatter(what(next_reduce));
        reduce(next_reduce);
      }
      if (!zero)
        for (std::size_t b = 0; b < buckets.size(); ++b) buckets[b].red.wait_gather(what(b));
      unpack();
    } catch (...) {
      phase = Phase::Broken;
      throw;
    }
    ++sequence;
    ++stats.syncs;
    stats.wait_seconds += since(t0);
    phase = Phase::Idle;
  }

  // .grad = base + the reduction (or the reduction, or base when no rank had a gradient);
  // ZeRO: dropped where another rank owns the parameter. Closes every accumulation window.
  void unpack() {
    for (Param& p : params) {
      const Bucket& bucket = buckets[p.bucket];
      if (zero && p.owner != me) {
        p.tensor.zero_grad();
      } else if (!bucket.used_anywhere[p.slot]) {
        if (p.base.defined()) p.tensor.set_grad(p.base);
        else p.tensor.zero_grad();
      } else {
        Tensor g = empty_tensor(p.dtype, p.shape, kWho);
        bucket.red.read(p.offset, g.mutable_raw_data(), p.numel);
        p.tensor.set_grad(p.base.defined() ? add(p.base, g) : g);
      }
      p.window = false;
      p.base = p.local = Tensor();
    }
    remember_grads();
  }
};

DistributedDataParallel::DistributedDataParallel(Module& module, const DDPOptions& options)
    : module_(module), options_(options), reducer_(std::make_shared<Reducer>()) {
  detail::require_initialized(kWho);
  if (options.bucket_bytes() < 1) throw_error<ValueError>(kWho, "option 'bucket_bytes' must be >= 1, got 0");
  if (options.reduce_op() != ReduceOp::Average && options.reduce_op() != ReduceOp::Sum)
    throw_error<ValueError>(kWho, "option 'reduce_op' must be Average or Sum, got ", reduce_op_name(options.reduce_op()));
  Reducer& r = *reducer_;
  r.op = options.reduce_op();
  r.overlap = options.overlap();
  r.bucket_bytes = options.bucket_bytes();
  r.world = world_size();
  r.me = rank();
  const NamedTensors all = module.named_parameters();
  for (const auto& [name, t] : all) {
    if (!t.requires_grad()) continue;
    Reducer::Param p;
    p.name = name;
    p.tensor = t;
    p.dtype = t.dtype();
    p.shape = t.shape();
    p.numel = t.numel();
    r.index[t.impl()] = r.params.size();
    r.params.push_back(std::move(p));
  }
  // Collective from here: the communicators, the model check, rank 0's values.
  r.scatter_comm = detail::Comm::duplicate_world(kWho);
  r.gather_comm = detail::Comm::duplicate_world(kWho);
  check_same_model(r.scatter_comm.get(), all, kWho);
  if (options.broadcast_parameters()) broadcast_values(r.scatter_comm.get(), all, 0, kWho);
  for (const auto& p : r.params) params_.emplace_back(p.name, p.tensor);
  r.build_buckets();
  add_backward_observer(reducer_);
}

DistributedDataParallel::~DistributedDataParallel() { remove_backward_observer(reducer_.get()); }

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.reducer_->no_sync) {
  ddp.reducer_->no_sync = true;
}
DistributedDataParallel::NoSync::~NoSync() { ddp_.reducer_->no_sync = previous_; }

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_names() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : reducer_->buckets) {
    out.emplace_back();
    for (std::size_t i : b.params) out.back().push_back(reducer_->params[i].name);
  }
  return out;
}

const DDPStats& DistributedDataParallel::stats() const { return reducer_->stats; }
void DistributedDataParallel::reset_stats() {
  DDPStats fresh;
  fresh.buckets = reducer_->stats.buckets;
  fresh.bytes_per_sync = reducer_->stats.bytes_per_sync;
  reducer_->stats = fresh;
}

const NamedTensors& DistributedDataParallel::parameters() const { return params_; }

void DistributedDataParallel::set_gradient_owners(const std::vector<int>& owners) {
  Reducer& r = *reducer_;
  if (r.phase == Reducer::Phase::Collecting)
    throw_error<ValueError>(kWho, "set_gradient_owners cannot be called during backward");
  if (!owners.empty() && owners.size() != r.params.size())
    throw_error<ValueError>(kWho, "set_gradient_owners: ", owners.size(), " owners for ", r.params.size(), " parameters");
  for (std::size_t i = 0; i < owners.size(); ++i)
    if (owners[i] < 0 || owners[i] >= r.world)
      throw_error<ValueError>(kWho, "set_gradient_owners: owner ", owners[i], " of parameter '", r.params[i].name,
                              "' is not a rank of this world of ", r.world);
  r.zero = !owners.empty();
  for (std::size_t i = 0; i < r.params.size(); ++i) r.params[i].owner = r.zero ? owners[i] : -1;
  r.build_buckets();
}

}  // namespace xgrad::distributed
