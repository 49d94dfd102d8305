// xgrad/distributed/checkpoint.hpp — checkpoints of data-parallel training (collective).
//
// The file is the one models/checkpoint.hpp writes for a single process (parameters under
// their names, optimizer state under "optimizer.<entry>" in the unsharded optimizer's
// format), so it loads with any number of ranks, with or without ZeRO, and in a program
// without MPI. Rank 0 writes it (atomically: a temporary file, fsync, rename), so a rank
// killed mid-save leaves the previous checkpoint intact; every rank reads it on load (the
// path must be visible to every rank: one machine, or a shared filesystem).
// The ranks agree on the outcome: when one rank fails (rank 0 cannot write, one rank cannot
// read), that rank throws its own error and every other rank a collective DistributedError
// naming it, so all of them stop at the same call.
#pragma once
#include <map>
#include <string>

#include "xgrad/models/checkpoint.hpp"

namespace xgrad::distributed {

// opt may be null, an unsharded optimizer (its state is the same on every rank: rank 0's is
// written) or a ZeroOptimizer (its state is gathered to rank 0 first).
void save_checkpoint(const std::string& path, const Module& model, const Optimizer* opt = nullptr,
                     const std::map<std::string, std::string>& metadata = {});
// Loads on every rank (validated as xgrad::load_checkpoint; a ZeroOptimizer keeps its shard).
// Returns the file's metadata.
std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& model, Optimizer* opt = nullptr);

}  // namespace xgrad::distributed
