// xgrad/distributed/comm.hpp — INTERNAL to libxgrad_distributed (not installed): the MPI
// plumbing shared by the collectives, DistributedDataParallel and ZeroOptimizer.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "xgrad/distributed/distributed.hpp"

namespace xgrad::distributed::detail {

// A communicator of its own (a duplicate of MPI_COMM_WORLD with MPI_ERRORS_RETURN, so MPI
// errors become DistributedError), or MPI_COMM_NULL in a world of one without MPI. Making one
// is collective (every rank, same order). Freed by the destructor.
class Comm {
 public:
  Comm() = default;
  static Comm duplicate_world(const char* who);
  ~Comm();
  Comm(Comm&& o) noexcept : comm_(o.comm_) { o.comm_ = MPI_COMM_NULL; }
  Comm& operator=(Comm&& o) noexcept;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  MPI_Comm get() const { return comm_; }
  bool null() const { return comm_ == MPI_COMM_NULL; }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
};

// The communicator of the user-level collectives (distributed.hpp); throws ValueError before init().
const Comm& user_comm(const char* who);
void require_initialized(const char* who);

// "rank 1: " — every message of a failure seen by one rank starts with it.
std::string rank_prefix();
// Throws DistributedError "rank R: what: <MPI's error string>" unless rc is MPI_SUCCESS.
void check(int rc, const std::string& what);
// Waits for every request, polling (MPI_Testall, then short sleeps) until timeout(); throws
// DistributedError "rank R: what: no reply from the other ranks within T s ..." after it.
void wait_all(std::vector<MPI_Request>& requests, const std::string& what);
// One progress step: true when every request completed (the vector is then all null).
bool test_all(std::vector<MPI_Request>& requests, const std::string& what);
MPI_Datatype mpi_type(DType dtype);
int checked_count(std::size_t n, const char* who);  // n as an MPI count; ValueError past 2^31 - 1

// A collective's descriptor: every rank's is exchanged (one MPI_Allgather of fixed size on
// `comm`) and compared before the collective moves data; if they differ, every rank throws
// the same collective DistributedError naming each rank's call.
struct Descriptor {
  std::int64_t op = 0;      // which collective
  std::int64_t detail = 0;  // its reduce op, root, or a caller's tag
  std::int64_t dtype = -1;
  std::int64_t numel = 0;
  std::int64_t ndim = 0;
  std::int64_t dims[8] = {0, 0, 0, 0, 0, 0, 0, 0};  // the first 8 dimensions
};
// describe(d) names a call for the message, e.g. "all_reduce(float32 (3), sum)".
void agree(MPI_Comm comm, const Descriptor& mine, std::string (*describe)(const Descriptor&), const std::string& who);
std::string tensor_text(const Descriptor& d);  // "float32 (3)"

// The deterministic reduction over a flat buffer of n elements cut into one contiguous segment
// per rank: bounds[r] .. bounds[r + 1] (logical element offsets, bounds[0] = 0, bounds[N] = n).
// Each segment is preceded by `header` elements (a tag the sender writes for the receiver of
// that segment), so the physical buffer is n + N * header elements:
//   [header 0][segment 0][header 1][segment 1] ... [header N-1][segment N-1]
// 1. scatter (MPI_Ialltoallv): rank r receives every rank's header r + segment r;
// 2. reduce: rank r sums the N received segments element by element in rank order
//    (((s_0 + s_1) + s_2) + ...), writes the result (divided by N for Average) into its own
//    segment of the buffer;
// 3. gather (MPI_Iallgatherv in place): every rank receives every reduced segment.
// Scatter and gather may run on two communicators, so that one bucket's gather can start while
// a later bucket's scatter is in flight (on each communicator every rank starts the operations
// in the same order). In a world of one without MPI (null communicators) every step is local.
class SegmentedReduce {
 public:
  SegmentedReduce() = default;
  SegmentedReduce(DType dtype, std::vector<std::size_t> bounds, std::size_t header);
  SegmentedReduce(SegmentedReduce&&) = default;
  SegmentedReduce& operator=(SegmentedReduce&&) = default;
  ~SegmentedReduce();  // a reduction still in flight is left to MPI (the buffers are kept alive)

  DType dtype() const { return dtype_; }
  std::size_t size() const { return bounds_.back(); }            // logical elements
  std::size_t segment_begin(int r) const { return bounds_[std::size_t(r)]; }
  std::size_t segment_end(int r) const { return bounds_[std::size_t(r) + 1]; }
  // Element access in logical offsets (a range may span segments).
  void write(std::size_t offset, const void* src, std::size_t count);
  void read(std::size_t offset, void* dst, std::size_t count) const;
  void fill_zero(std::size_t offset, std::size_t count);
  // The header the sender puts in front of segment r (header() elements), and, after the
  // scatter, the header rank `source` sent with this rank's segment.
  void* send_header(int r);
  const void* received_header(int source) const;
  const void* received_segment(int source) const;
  std::size_t header() const { return header_; }
  // What this rank sends per reduction: the scatter (headers + the other ranks' segments) and,
  // with_gather, its reduced segment to every other rank.
  std::size_t bytes_sent(bool with_gather) const;

  void start_scatter(MPI_Comm comm, const std::string& what);
  bool test_scatter(const std::string& what);   // progress; true once received
  void wait_scatter(const std::string& what);
  void reduce(ReduceOp op);                     // after the scatter
  void start_gather(MPI_Comm comm, const std::string& what);
  bool test_gather(const std::string& what);
  void wait_gather(const std::string& what);
  bool in_flight() const;

 private:
  DType dtype_ = DType::Float32;
  std::size_t item_ = 4, header_ = 0;
  int world_ = 1, rank_ = 0;
  std::vector<std::size_t> bounds_{0};
  struct Buffers {
    std::vector<unsigned char> data, received;
    std::vector<int> send_counts, send_displs, recv_counts, recv_displs, gather_counts, gather_displs;
  };
  std::unique_ptr<Buffers> buf_ = std::make_unique<Buffers>();  // stable addresses across moves
  std::vector<MPI_Request> scatter_, gather_;
};

// Rank r's share of n items split as evenly as possible: [b[r], b[r+1]), the first n % world
// ranks one item more (shard_range, all_reduce's segments, the DDP buckets' segments).
std::vector<std::size_t> even_bounds(std::size_t n, int world);

}  // namespace xgrad::distributed::detail
