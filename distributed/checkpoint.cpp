// Collective checkpoints: rank 0 writes, every rank reads, the ranks agree on the outcome.
#include <exception>

#include "xgrad/distributed/checkpoint.hpp"
#include "xgrad/distributed/comm.hpp"
#include "xgrad/distributed/zero.hpp"

namespace xgrad::distributed {
namespace {

// Every rank's outcome (0 = ok); rethrows this rank's own failure, or throws a collective
// DistributedError naming the ranks that failed.
void agree_on_outcome(const char* op, const std::string& path, std::exception_ptr failure) {
  const auto& comm = detail::user_comm(op);
  if (comm.null()) {
    if (failure) std::rethrow_exception(failure);
    return;
  }
  int bad = failure ? 1 : 0;
  std::vector<int> all(static_cast<std::size_t>(world_size()));
  std::vector<MPI_Request> req(1);
  detail::check(MPI_Iallgather(&bad, 1, MPI_INT, all.data(), 1, MPI_INT, comm.get(), &req[0]),
                std::string(op) + ": MPI_Iallgather");
  detail::wait_all(req, std::string(op) + " '" + path + "' (agreeing on the outcome)");
  if (failure) std::rethrow_exception(failure);
  std::string ranks;
  for (int r = 0; r < world_size(); ++r)
    if (all[std::size_t(r)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
  if (!ranks.empty())
    throw DistributedError(std::string(op) + ": '" + path + "' failed on rank " + ranks + " (see its error)",
                           /*collective=*/true);
}

}  // namespace

void save_checkpoint(const std::string& path, const Module& model, const Optimizer* opt,
                     const std::map<std::string, std::string>& metadata) {
  std::exception_ptr failure;
  std::unique_ptr<Optimizer> gathered;
  if (const auto* zero = dynamic_cast<const ZeroOptimizer*>(opt)) {
    gathered = zero->gather_optimizer(0);  // collective; failures here are DistributedErrors on every rank
    opt = gathered.get();
  }
  if (is_root()) {
    try {
      xgrad::save_checkpoint(path, model, opt, metadata);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  agree_on_outcome("save_checkpoint", path, failure);
}

std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& model, Optimizer* opt) {
  std::exception_ptr failure;
  std::map<std::string, std::string> metadata;
  try {
    if (auto* zero = dynamic_cast<ZeroOptimizer*>(opt)) {
      auto full = zero->make_full();
      metadata = xgrad::load_checkpoint(path, model, full.get());
      zero->load_full_state_dict(full->state_dict());
    } else {
      metadata = xgrad::load_checkpoint(path, model, opt);
    }
  } catch (...) {
    failure = std::current_exception();
  }
  agree_on_outcome("load_checkpoint", path, failure);
  return metadata;
}

}  // namespace xgrad::distributed
