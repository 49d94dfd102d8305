// xgrad/distributed/distributed.hpp — processes, ranks and collectives on tensors, over MPI.
//
// Part of the separate library xgrad::distributed (libxgrad_distributed, built when CMake finds
// MPI, option XGRAD_MPI); the core library xgrad::xgrad never links MPI. This header does not
// include <mpi.h>.
//
// Processes. Every process of a job calls init(argc, argv) (or makes an Environment) once,
// then rank() / world_size() say who it is. A process started by an MPI launcher (mpirun,
// mpiexec, srun) joins the job's world over MPI; one started without a launcher is a world of
// one rank and makes no MPI call at all, so an MPI-built program run as `./program` behaves as
// it did without MPI (XGRAD_MPI_INIT=1 forces MPI_Init there, a singleton world).
//
// Collectives. Every rank must call the same collectives in the same order, with tensors of
// one dtype and shape. Each call first exchanges a descriptor (which collective, dtype, shape,
// root) with every rank; when they differ every rank throws the same DistributedError naming
// what each rank called, instead of hanging or mixing data ("ranks calling collectives in
// different orders" is detected at the first call where they differ). Collectives on tensors
// are not recorded in the graph (like torch.distributed's): they read and write values only.
//
// Determinism. A Sum is computed element by element as ((x_0 + x_1) + x_2) + ... + x_{N-1} in
// rank order, in the tensor's dtype, by the one rank that owns the element's chunk (the
// tensor is cut into N contiguous chunks), and the result is then copied to every rank: every
// rank gets the same bits, and a fixed N gives the same bits on every run (no reduction
// depends on message arrival or timing). Average is that Sum divided by N. Communication is
// bandwidth-optimal like a ring all-reduce: each rank sends and receives (N-1)/N of the
// tensor twice (a reduce-scatter by MPI_Ialltoallv, the local sums, an MPI_Iallgatherv).
//
// Faults. Every wait polls with a deadline: when a peer does not answer within timeout()
// (XGRAD_DIST_TIMEOUT seconds, default 300) the call throws DistributedError
// ("rank 1: all_reduce float32 (4096): no reply from the other ranks within 300 s ..."), so a
// dead or stopped peer never hangs a rank forever. mpirun itself ends every rank when one is
// killed (within about a second). After any DistributedError that is not collective() the
// ranks are out of step: end the job with abort().
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"

namespace xgrad::distributed {

// A distributed call failed: a peer did not answer in time, MPI reported an error, or the
// ranks are out of step (different collectives, shapes or models). collective() is true when
// every rank throws it at the same call with the same message (mismatched descriptors or
// models, found by an exchange every rank completed): the job may then end normally
// (finalize); otherwise end it with abort() (a peer may be waiting in a collective).
class DistributedError : public Error {
 public:
  explicit DistributedError(const std::string& message, bool collective = false)
      : Error(message), collective_(collective) {}
  bool collective() const { return collective_; }

 private:
  bool collective_;
};

// --- processes ---------------------------------------------------------------------------
// Joins the job. Under an MPI launcher (the environment holds OMPI_COMM_WORLD_SIZE, PMIX_RANK,
// PMI_RANK or PMI_SIZE) it calls MPI_Init_thread(MPI_THREAD_SERIALIZED) — or uses MPI as the
// program already initialised it — and duplicates MPI_COMM_WORLD for xgrad's own messages;
// otherwise the process is rank 0 of a world of 1 without MPI. XGRAD_MPI_INIT=1 always
// initialises MPI, =0 never (anything else is a ValueError). A second call does nothing;
// init after finalize is a ValueError (MPI cannot be initialised twice).
void init(int& argc, char**& argv);
bool is_initialized();
// Ends the job for this process: MPI_Finalize when init() initialised MPI (a program that
// initialised MPI itself finalizes it itself). Idempotent. Every rank must call it, after its
// last collective.
void finalize();
// Ends every rank of the job now with exit_code (MPI_Abort: mpirun ends the others); in a world
// of one without MPI, std::_Exit(exit_code). Use it after an error that is not collective().
[[noreturn]] void abort(int exit_code);

// rank() in [0, world_size()); 0 and 1 before init(). uses_mpi(): init() joined over MPI.
int rank();
int world_size();
inline bool is_root() { return rank() == 0; }
bool uses_mpi();

// RAII: init() in the constructor; in the destructor finalize(), or abort(1) when it runs
// because an exception is leaving the scope in a world of more than one rank (a peer may be
// waiting in a collective and MPI_Finalize would wait for it).
class Environment {
 public:
  Environment(int& argc, char**& argv);
  ~Environment();
  Environment(const Environment&) = delete;
  Environment& operator=(const Environment&) = delete;

 private:
  int uncaught_;
};

// How long a wait for the other ranks may take before DistributedError, in seconds: the
// environment variable XGRAD_DIST_TIMEOUT (a number > 0; anything else is a ValueError at
// first use), else 300. set_timeout(s) overrides it (s > 0 and finite, else ValueError).
double timeout();
void set_timeout(double seconds);

// --- collectives (every rank, same order, same dtype and shape) --------------------------
enum class ReduceOp { Sum, Average, Max, Min };
const char* reduce_op_name(ReduceOp op);

void barrier();
// Copies root's value of t into t on every rank (in place; bumps t's version). Any dtype.
void broadcast(const Tensor& t, int root = 0);
// Replaces t on every rank by the reduction over the ranks, element by element (in place;
// bumps t's version). Sum, Max, Min: float32, float64, int64; Average: float32, float64. Max
// and Min propagate NaN.
void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::Sum);
// t (N * k, d1, ...) on every rank; returns on rank r the rows [r k, (r + 1) k) of the
// reduction over the ranks: (k, d1, ...). ShapeError (on every rank) unless t has rank >= 1
// and its first dimension is a multiple of N. Dtypes as all_reduce.
Tensor reduce_scatter(const Tensor& t, ReduceOp op = ReduceOp::Sum);
// t (d0, d1, ...), the same shape on every rank; returns the ranks' tensors concatenated along
// the first axis in rank order: (N * d0, d1, ...); a scalar gives (N). Any dtype.
Tensor all_gather(const Tensor& t);

// The contiguous shard [begin, end) of n items that rank `rank` of `world` takes: sizes differ
// by at most one, the first n % world ranks taking one more (an uneven split, documented,
// never an error). ValueError when world > n (a rank would get nothing) or rank is not in
// [0, world).
std::pair<std::size_t, std::size_t> shard_range(std::size_t n, int rank, int world);

}  // namespace xgrad::distributed
