// Processes, the timed waits, the deterministic segmented reduction and the collectives.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <limits>
#include <thread>
#include <type_traits>

#include "xgrad/distributed/comm.hpp"
#include "xgrad/framework/array.hpp"

namespace xgrad::distributed {
namespace detail {
namespace {

struct Context {
  bool initialized = false, finalized = false, mpi = false, owns_mpi = false;
  int rank = 0, size = 1;
  Comm user;
  double timeout = 0;  // 0: not read yet
};
Context& ctx() {
  static Context c;
  return c;
}

// A positive finite number from an environment variable, or `fallback` when unset.
double env_seconds(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  char* end = nullptr;
  const double s = std::strtod(v, &end);
  if (*v == '\0' || *end != '\0' || !std::isfinite(s) || !(s > 0))
    throw_error<ValueError>("xgrad::distributed", "environment variable ", name, "='", std::string(v).substr(0, 64),
                            "' must be a number of seconds > 0");
  return s;
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(var)) return true;
  return false;
}

std::string mpi_error_string(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, std::size_t(len));
}

}  // namespace

Comm Comm::duplicate_world(const char* who) {
  Comm c;
  if (!ctx().mpi) return c;
  std::vector<MPI_Request> req(1);
  check(MPI_Comm_idup(MPI_COMM_WORLD, &c.comm_, &req[0]), std::string(who) + ": MPI_Comm_idup");
  wait_all(req, std::string(who) + ": making a communicator (every rank must reach this call)");
  check(MPI_Comm_set_errhandler(c.comm_, MPI_ERRORS_RETURN), std::string(who) + ": MPI_Comm_set_errhandler");
  return c;
}
Comm::~Comm() {
  int finalized = 0;
  if (comm_ != MPI_COMM_NULL && MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) MPI_Comm_free(&comm_);
}
Comm& Comm::operator=(Comm&& o) noexcept {
  if (this != &o) {
    Comm dead(std::move(*this));
    comm_ = o.comm_;
    o.comm_ = MPI_COMM_NULL;
  }
  return *this;
}

void require_initialized(const char* who) {
  if (!ctx().initialized || ctx().finalized)
    throw_error<ValueError>(who, ctx().finalized ? "called after xgrad::distributed::finalize()"
                                                 : "xgrad::distributed::init(argc, argv) was not called");
}
const Comm& user_comm(const char* who) {
  require_initialized(who);
  return ctx().user;
}

std::string rank_prefix() { return "rank " + std::to_string(ctx().rank) + ": "; }

void check(int rc, const std::string& what) {
  if (rc != MPI_SUCCESS) throw DistributedError(rank_prefix() + what + ": " + mpi_error_string(rc));
}

bool test_all(std::vector<MPI_Request>& requests, const std::string& what) {
  if (requests.empty()) return true;
  int done = 0;
  check(MPI_Testall(int(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE), what);
  if (done) requests.clear();
  return done != 0;
}

void wait_all(std::vector<MPI_Request>& requests, const std::string& what) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  const double limit = timeout();
  for (;;) {
    if (test_all(requests, what)) return;
    const double waited = std::chrono::duration<double>(clock::now() - start).count();
    if (waited > limit) {
      char secs[32];
      std::snprintf(secs, sizeof secs, "%g", limit);
      throw DistributedError(rank_prefix() + what + ": no reply from the other ranks within " + secs +
                             " s (XGRAD_DIST_TIMEOUT): a rank died, hangs, or runs other collectives");
    }
    // Poll without pause for the first 50 ms (Open MPI moves large messages only inside MPI
    // calls, and a pause or a yield to another process delays them by a time slice), then every
    // 50 us up to 1 s and every ms after that (a peer that is evaluating or writing a
    // checkpoint does not make this one burn a core).
    if (waited >= 0.05) std::this_thread::sleep_for(std::chrono::microseconds(waited < 1.0 ? 50 : 1000));
  }
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::Float32: return MPI_FLOAT;
    case DType::Float64: return MPI_DOUBLE;
    case DType::Int64: return MPI_INT64_T;
    case DType::Bool: return MPI_UNSIGNED_CHAR;  // bool is one byte (checked below)
  }
  return MPI_BYTE;
}
static_assert(sizeof(bool) == 1, "xgrad::distributed sends bool tensors as bytes");

int checked_count(std::size_t n, const char* who) {
  if (n > std::size_t(std::numeric_limits<int>::max()))
    throw_error<ValueError>(who, n, " elements in one message is more than MPI's 2^31 - 1");
  return int(n);
}

std::string tensor_text(const Descriptor& d) {
  if (d.dtype < 0 || d.dtype > 3) return "no tensor";
  Shape shape;
  for (std::int64_t i = 0; i < std::min<std::int64_t>(d.ndim, 8); ++i) shape.push_back(std::size_t(d.dims[i]));
  return std::string(dtype_name(DType(d.dtype))) + " " + shape_str(shape) + (d.ndim > 8 ? "..." : "");
}

void agree(MPI_Comm comm, const Descriptor& mine, std::string (*describe)(const Descriptor&), const std::string& who) {
  if (comm == MPI_COMM_NULL) return;
  const int n = ctx().size;
  std::vector<Descriptor> all(static_cast<std::size_t>(n));
  constexpr int words = int(sizeof(Descriptor) / sizeof(std::int64_t));
  std::vector<MPI_Request> req(1);
  check(MPI_Iallgather(&mine, words, MPI_INT64_T, all.data(), words, MPI_INT64_T, comm, &req[0]),
        who + ": MPI_Iallgather");
  wait_all(req, who + " (agreeing on the call with the other ranks)");
  auto same = [](const Descriptor& a, const Descriptor& b) { return std::memcmp(&a, &b, sizeof a) == 0; };
  if (std::all_of(all.begin(), all.end(), [&](const Descriptor& d) { return same(d, all[0]); })) return;
  std::string msg = who + ": the ranks called different collectives or passed different tensors:";
  for (int r = 0; r < n; ++r) msg += (r ? "," : "") + std::string(" rank ") + std::to_string(r) + " " + describe(all[std::size_t(r)]);
  msg += "; every rank must call the same collectives in the same order with tensors of one dtype and shape";
  throw DistributedError(msg, /*collective=*/true);
}

// --- SegmentedReduce -----------------------------------------------------------------------

SegmentedReduce::SegmentedReduce(DType dtype, std::vector<std::size_t> bounds, std::size_t header)
    : dtype_(dtype), item_(itemsize(dtype)), header_(header), world_(ctx().size), rank_(ctx().rank),
      bounds_(std::move(bounds)) {
  if (bounds_.size() != std::size_t(world_) + 1 || bounds_.front() != 0 ||
      !std::is_sorted(bounds_.begin(), bounds_.end()))
    throw std::logic_error("SegmentedReduce: bounds must be N + 1 sorted offsets from 0");
  const std::size_t n = bounds_.back(), mine = segment_end(rank_) - segment_begin(rank_);
  auto& b = *buf_;
  b.data.assign((n + std::size_t(world_) * header_) * item_, 0);
  b.received.assign(std::size_t(world_) * (header_ + mine) * item_, 0);
  for (int r = 0; r < world_; ++r) {
    const std::size_t len = segment_end(r) - segment_begin(r);
    b.send_counts.push_back(checked_count(header_ + len, "SegmentedReduce"));
    b.send_displs.push_back(checked_count(segment_begin(r) + std::size_t(r) * header_, "SegmentedReduce"));
    b.recv_counts.push_back(checked_count(header_ + mine, "SegmentedReduce"));
    b.recv_displs.push_back(checked_count(std::size_t(r) * (header_ + mine), "SegmentedReduce"));
    b.gather_counts.push_back(checked_count(len, "SegmentedReduce"));
    b.gather_displs.push_back(checked_count(segment_begin(r) + std::size_t(r + 1) * header_, "SegmentedReduce"));
  }
}

SegmentedReduce::~SegmentedReduce() {
  // MPI may still write into the buffers of a reduction a failed backward left in flight;
  // the job is out of step then and must end (abort), so they are left allocated.
  if (in_flight()) (void)buf_.release();
}

bool SegmentedReduce::in_flight() const { return !scatter_.empty() || !gather_.empty(); }

// Copies count elements at logical offset `offset`, piece by piece across segment borders.
template <class Copy> static void piecewise(const std::vector<std::size_t>& bounds, std::size_t header,
                                            std::size_t offset, std::size_t count, const Copy& copy) {
  std::size_t done = 0;
  while (done < count) {
    const std::size_t at = offset + done;
    const auto s = std::size_t(std::upper_bound(bounds.begin() + 1, bounds.end() - 1, at) - bounds.begin() - 1);
    const std::size_t take = std::min(count - done, bounds[s + 1] - at);
    copy(at + (s + 1) * header, done, take);
    done += take;
  }
}

void SegmentedReduce::write(std::size_t offset, const void* src, std::size_t count) {
  auto* base = buf_->data.data();
  piecewise(bounds_, header_, offset, count, [&](std::size_t phys, std::size_t from, std::size_t n) {
    if (n) std::memcpy(base + phys * item_, static_cast<const unsigned char*>(src) + from * item_, n * item_);
  });
}
void SegmentedReduce::read(std::size_t offset, void* dst, std::size_t count) const {
  const auto* base = buf_->data.data();
  piecewise(bounds_, header_, offset, count, [&](std::size_t phys, std::size_t to, std::size_t n) {
    if (n) std::memcpy(static_cast<unsigned char*>(dst) + to * item_, base + phys * item_, n * item_);
  });
}
void SegmentedReduce::fill_zero(std::size_t offset, std::size_t count) {
  auto* base = buf_->data.data();
  piecewise(bounds_, header_, offset, count,
            [&](std::size_t phys, std::size_t, std::size_t n) { if (n) std::memset(base + phys * item_, 0, n * item_); });
}
void* SegmentedReduce::send_header(int r) {
  return buf_->data.data() + (segment_begin(r) + std::size_t(r) * header_) * item_;
}
const void* SegmentedReduce::received_header(int source) const {
  return buf_->received.data() + std::size_t(buf_->recv_displs[std::size_t(source)]) * item_;
}
const void* SegmentedReduce::received_segment(int source) const {
  return static_cast<const unsigned char*>(received_header(source)) + header_ * item_;
}
std::size_t SegmentedReduce::bytes_sent(bool with_gather) const {
  const std::size_t mine = segment_end(rank_) - segment_begin(rank_);
  std::size_t scatter = 0;
  for (int r = 0; r < world_; ++r)
    if (r != rank_) scatter += header_ + segment_end(r) - segment_begin(r);
  return (scatter + (with_gather ? std::size_t(world_ - 1) * mine : 0)) * item_;
}

void SegmentedReduce::start_scatter(MPI_Comm comm, const std::string& what) {
  auto& b = *buf_;
  if (comm == MPI_COMM_NULL) {  // a world of one: header + segment 0 to ourselves
    if (!b.received.empty()) std::memcpy(b.received.data(), b.data.data(), b.received.size());
    return;
  }
  scatter_.assign(1, MPI_REQUEST_NULL);
  const MPI_Datatype t = mpi_type(dtype_);
  check(MPI_Ialltoallv(b.data.data(), b.send_counts.data(), b.send_displs.data(), t, b.received.data(),
                       b.recv_counts.data(), b.recv_displs.data(), t, comm, &scatter_[0]),
        what + ": MPI_Ialltoallv");
}
bool SegmentedReduce::test_scatter(const std::string& what) { return test_all(scatter_, what); }
void SegmentedReduce::wait_scatter(const std::string& what) { wait_all(scatter_, what); }

namespace {
template <class T> void reduce_segments(const unsigned char* received, std::size_t stride_bytes, std::size_t header,
                                        int world, std::size_t n, ReduceOp op, T* out) {
  auto src = [&](int s) { return reinterpret_cast<const T*>(received + std::size_t(s) * stride_bytes) + header; };
  // out[i] = ((s_0[i] + s_1[i]) + s_2[i]) + ...: rank order, one element at a time.
  if (n == 0) return;  // an empty segment (fewer elements than ranks): its buffers may be null
  std::memcpy(out, src(0), n * sizeof(T));
  for (int s = 1; s < world; ++s) {
    const T* x = src(s);
    switch (op) {
      case ReduceOp::Sum:
      case ReduceOp::Average:
        for (std::size_t i = 0; i < n; ++i) out[i] += x[i];
        break;
      case ReduceOp::Max:
      case ReduceOp::Min:
        for (std::size_t i = 0; i < n; ++i) {
          if constexpr (std::is_floating_point_v<T>)
            if (std::isnan(out[i]) || std::isnan(x[i])) {
              out[i] = std::numeric_limits<T>::quiet_NaN();
              continue;
            }
          out[i] = op == ReduceOp::Max ? std::max(out[i], x[i]) : std::min(out[i], x[i]);
        }
        break;
    }
  }
  if constexpr (std::is_floating_point_v<T>)
    if (op == ReduceOp::Average)
      for (std::size_t i = 0; i < n; ++i) out[i] /= T(world);
}
}  // namespace

void SegmentedReduce::reduce(ReduceOp op) {
  auto& b = *buf_;
  const std::size_t mine = segment_end(rank_) - segment_begin(rank_);
  unsigned char* out = b.data.data() + std::size_t(b.gather_displs[std::size_t(rank_)]) * item_;
  const std::size_t stride = (header_ + mine) * item_;
  switch (dtype_) {
    case DType::Float32:
      reduce_segments(b.received.data(), stride, header_, world_, mine, op, reinterpret_cast<float*>(out));
      break;
    case DType::Float64:
      reduce_segments(b.received.data(), stride, header_, world_, mine, op, reinterpret_cast<double*>(out));
      break;
    case DType::Int64:
      reduce_segments(b.received.data(), stride, header_, world_, mine, op, reinterpret_cast<std::int64_t*>(out));
      break;
    case DType::Bool: throw std::logic_error("SegmentedReduce: bool is not reducible");
  }
}

void SegmentedReduce::start_gather(MPI_Comm comm, const std::string& what) {
  if (comm == MPI_COMM_NULL) return;
  auto& b = *buf_;
  gather_.assign(1, MPI_REQUEST_NULL);
  check(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, b.data.data(), b.gather_counts.data(),
                        b.gather_displs.data(), mpi_type(dtype_), comm, &gather_[0]),
        what + ": MPI_Iallgatherv");
}
bool SegmentedReduce::test_gather(const std::string& what) { return test_all(gather_, what); }
void SegmentedReduce::wait_gather(const std::string& what) { wait_all(gather_, what); }

std::vector<std::size_t> even_bounds(std::size_t n, int world) {
  std::vector<std::size_t> b(std::size_t(world) + 1, 0);
  const std::size_t base = n / std::size_t(world), extra = n % std::size_t(world);
  for (std::size_t q = 1; q <= std::size_t(world); ++q) b[q] = q * base + std::min(q, extra);
  return b;
}

}  // namespace detail

using detail::ctx;

// --- processes -------------------------------------------------------------------------------

void init(int& argc, char**& argv) {
  auto& c = ctx();
  if (c.finalized)
    throw_error<ValueError>("xgrad::distributed::init", "called after finalize() (MPI cannot be initialised twice)");
  if (c.initialized) return;
  bool use_mpi = detail::launched_by_mpi();
  if (const char* force = std::getenv("XGRAD_MPI_INIT")) {
    const std::string f = force;
    if (f != "0" && f != "1")
      throw_error<ValueError>("xgrad::distributed::init", "XGRAD_MPI_INIT='", f.substr(0, 64), "' must be 0 or 1");
    use_mpi = f == "1";
  }
  int already = 0;
  MPI_Initialized(&already);
  if (already) use_mpi = true;
  if (use_mpi) {
    if (!already) {
      int provided = 0;
      if (MPI_Init_thread(&argc, &argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS)
        throw DistributedError("xgrad::distributed::init: MPI_Init_thread failed");
      c.owns_mpi = true;
    }
    c.mpi = true;
    MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &c.size);
    c.user = detail::Comm::duplicate_world("xgrad::distributed::init");
  }
  c.initialized = true;
}

bool is_initialized() { return ctx().initialized && !ctx().finalized; }
bool uses_mpi() { return is_initialized() && ctx().mpi; }
int rank() { return ctx().rank; }
int world_size() { return ctx().size; }

void finalize() {
  auto& c = ctx();
  if (!c.initialized || c.finalized) return;
  c.user = detail::Comm();
  if (c.owns_mpi) MPI_Finalize();
  c.finalized = true;
}

void abort(int exit_code) {
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized && ctx().size > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

Environment::Environment(int& argc, char**& argv) : uncaught_(std::uncaught_exceptions()) { init(argc, argv); }
Environment::~Environment() {
  if (std::uncaught_exceptions() > uncaught_ && world_size() > 1) abort(1);
  finalize();
}

double timeout() {
  auto& c = ctx();
  if (c.timeout == 0) c.timeout = detail::env_seconds("XGRAD_DIST_TIMEOUT", 300);
  return c.timeout;
}
void set_timeout(double seconds) {
  if (!std::isfinite(seconds) || !(seconds > 0))
    throw_error<ValueError>("xgrad::distributed::set_timeout", "argument 'seconds' must be finite and > 0, got ", seconds);
  ctx().timeout = seconds;
}

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Average: return "average";
    case ReduceOp::Max: return "max";
    case ReduceOp::Min: return "min";
  }
  return "?";
}

std::pair<std::size_t, std::size_t> shard_range(std::size_t n, int rank, int world) {
  if (world < 1 || rank < 0 || rank >= world)
    throw_error<ValueError>("shard_range", "rank ", rank, " is not in [0, ", world, ")");
  if (std::size_t(world) > n)
    throw_error<ValueError>("shard_range", n, " items cannot be shared by ", world,
                            " ranks: every rank needs at least one (use at most ", n, " ranks or more items)");
  const std::vector<std::size_t> b = detail::even_bounds(n, world);
  return {b[std::size_t(rank)], b[std::size_t(rank) + 1]};
}

// --- collectives -----------------------------------------------------------------------------
namespace {

enum Op : std::int64_t { kBarrier, kBroadcast, kAllReduce, kReduceScatter, kAllGather };

// "all_reduce(float32 (3), sum)", "broadcast(float32 (3), root 0)", "barrier()".
std::string describe_call(const detail::Descriptor& d) {
  switch (d.op) {
    case kBarrier: return "barrier()";
    case kBroadcast: return "broadcast(" + detail::tensor_text(d) + ", root " + std::to_string(d.detail) + ")";
    case kAllReduce:
    case kReduceScatter:
      return std::string(d.op == kAllReduce ? "all_reduce(" : "reduce_scatter(") + detail::tensor_text(d) + ", " +
             (d.detail >= 0 && d.detail <= 3 ? reduce_op_name(ReduceOp(d.detail)) : "?") + ")";
    case kAllGather: return "all_gather(" + detail::tensor_text(d) + ")";
  }
  return "an unknown call";
}

detail::Descriptor describe(Op op, std::int64_t detail, const Tensor* t) {
  detail::Descriptor d;
  d.op = op;
  d.detail = detail;
  if (t) {
    d.dtype = std::int64_t(t->dtype());
    d.numel = std::int64_t(t->numel());
    d.ndim = std::int64_t(t->dim());
    for (std::size_t i = 0; i < std::min<std::size_t>(t->dim(), 8); ++i) d.dims[i] = std::int64_t(t->shape()[i]);
  }
  return d;
}

std::string what(const char* op, const Tensor& t) {
  return std::string(op) + " " + dtype_name(t.dtype()) + " " + shape_str(t.shape());
}

void check_reducible(const char* op, const Tensor& t, ReduceOp r) {
  if (!t.defined()) throw_error<ValueError>(op, "argument 't' is undefined");
  const bool ok = r == ReduceOp::Average ? is_float(t.dtype()) : t.dtype() != DType::Bool;
  if (!ok)
    throw_error<DTypeError>(op, "cannot ", reduce_op_name(r), " a ", dtype_name(t.dtype()), " tensor of shape ", t.shape(),
                            r == ReduceOp::Average ? " (average needs float32 or float64)" : " (bool is not reducible)");
}

// Reduces the flat values of t (every rank's), returning the full result on every rank
// (gather = true) or this rank's segment of it.
detail::SegmentedReduce reduce_values(const char* op, const Tensor& t, ReduceOp r, std::vector<std::size_t> bounds,
                                      bool gather) {
  const auto& comm = detail::user_comm(op);
  detail::SegmentedReduce red(t.dtype(), std::move(bounds), 0);
  red.write(0, t.raw_data(), t.numel());
  const std::string w = what(op, t);
  red.start_scatter(comm.get(), w);
  red.wait_scatter(w);
  red.reduce(r);
  if (gather) {
    red.start_gather(comm.get(), w);
    red.wait_gather(w);
  }
  return red;
}


}  // namespace

void barrier() {
  const auto& comm = detail::user_comm("barrier");
  if (comm.null()) return;
  detail::agree(comm.get(), describe(kBarrier, 0, nullptr), describe_call, "barrier");
  std::vector<MPI_Request> req(1);
  detail::check(MPI_Ibarrier(comm.get(), &req[0]), "barrier: MPI_Ibarrier");
  detail::wait_all(req, "barrier");
}

void broadcast(const Tensor& t, int root) {
  const auto& comm = detail::user_comm("broadcast");
  if (!t.defined()) throw_error<ValueError>("broadcast", "argument 't' is undefined");
  if (root < 0 || root >= world_size())
    throw_error<ValueError>("broadcast", "root ", root, " is not a rank of this world of ", world_size());
  if (comm.null()) {  // a world of one: the value stays, the write is still counted
    t.bump_version();
    return;
  }
  detail::agree(comm.get(), describe(kBroadcast, root, &t), describe_call, "broadcast");
  std::vector<MPI_Request> req(1);
  void* data = t.mutable_raw_data();
  detail::check(MPI_Ibcast(data, detail::checked_count(t.numel(), "broadcast"), detail::mpi_type(t.dtype()), root,
                           comm.get(), &req[0]),
                "broadcast: MPI_Ibcast");
  detail::wait_all(req, what("broadcast", t));
}

void all_reduce(const Tensor& t, ReduceOp op) {
  const auto& comm = detail::user_comm("all_reduce");
  check_reducible("all_reduce", t, op);
  detail::agree(comm.get(), describe(kAllReduce, std::int64_t(op), &t), describe_call, "all_reduce");
  auto red = reduce_values("all_reduce", t, op, detail::even_bounds(t.numel(), world_size()), true);
  red.read(0, t.mutable_raw_data(), t.numel());
}

Tensor reduce_scatter(const Tensor& t, ReduceOp op) {
  const auto& comm = detail::user_comm("reduce_scatter");
  check_reducible("reduce_scatter", t, op);
  detail::agree(comm.get(), describe(kReduceScatter, std::int64_t(op), &t), describe_call, "reduce_scatter");
  const std::size_t n = std::size_t(world_size());
  if (t.dim() == 0 || t.shape()[0] % n != 0)
    throw_error<ShapeError>("reduce_scatter", "argument 't' ", t.shape(), " must have a first dimension that is a multiple of the ",
                            n, " ranks");
  const std::size_t row = t.shape()[0] == 0 ? 0 : t.numel() / t.shape()[0], k = t.shape()[0] / n;
  std::vector<std::size_t> bounds(n + 1);
  for (std::size_t r = 0; r <= n; ++r) bounds[r] = r * k * row;
  auto red = reduce_values("reduce_scatter", t, op, bounds, false);
  Shape shape = t.shape();
  shape[0] = k;
  Tensor out = empty_tensor(t.dtype(), shape, "reduce_scatter");
  red.read(bounds[std::size_t(rank())], out.mutable_raw_data(), k * row);
  return out;
}

Tensor all_gather(const Tensor& t) {
  const auto& comm = detail::user_comm("all_gather");
  if (!t.defined()) throw_error<ValueError>("all_gather", "argument 't' is undefined");
  detail::agree(comm.get(), describe(kAllGather, 0, &t), describe_call, "all_gather");
  const std::size_t n = std::size_t(world_size());
  Shape shape = t.shape();
  if (shape.empty()) shape = {n};
  else shape[0] *= n;
  Tensor out = empty_tensor(t.dtype(), shape, "all_gather");
  if (comm.null()) {
    std::memcpy(out.mutable_raw_data(), t.raw_data(), t.nbytes());
    return out;
  }
  std::vector<MPI_Request> req(1);
  const int count = detail::checked_count(t.numel(), "all_gather");
  detail::check(MPI_Iallgather(t.raw_data(), count, detail::mpi_type(t.dtype()), out.mutable_raw_data(), count,
                               detail::mpi_type(t.dtype()), comm.get(), &req[0]),
                "all_gather: MPI_Iallgather");
  detail::wait_all(req, what("all_gather", t));
  return out;
}

}  // namespace xgrad::distributed
