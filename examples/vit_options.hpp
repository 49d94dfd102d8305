// The command-line options of the Vision Transformer (examples/vit_model.hpp) that fashion_vit
// and gradexp share: --patch --dim --depth --heads --mlp --pool, tracked by the run
// configuration (a --resume with another value is refused).
#pragma once
#include <string>

#include "common.hpp"
#include "vit_model.hpp"

namespace examples {

// pool: "cls" or "mean" (VitConfig::mean_pool is set from it by finish_vit_options).
inline void add_vit_options(CLI::App& app, RunConfig& run, VitConfig& cfg, std::string& pool) {
  run.add(app, "--patch", cfg.patch, "patch size in pixels (divides 28: 1, 2, 4, 7, 14, 28)",
          CLI::IsMember({"1", "2", "4", "7", "14", "28"}));
  run.add(app, "--dim", cfg.dim, "embedding size (a multiple of --heads)", whole_number(1, 4096));
  run.add(app, "--depth", cfg.depth, "Transformer blocks", whole_number(1, 64));
  run.add(app, "--heads", cfg.heads, "attention heads", whole_number(1, 256));
  run.add(app, "--mlp", cfg.mlp, "hidden width of each block's feed-forward layer", whole_number(1, 65536));
  run.add(app, "--pool", pool, "classify from the class token (cls) or the mean over patches (mean)",
          CLI::IsMember({"cls", "mean"}));
}

// After parsing: ValueError unless --dim is a multiple of --heads; then cfg.mean_pool = (pool == "mean").
inline void finish_vit_options(VitConfig& cfg, const std::string& pool) {
  if (cfg.dim % cfg.heads != 0)
    throw xgrad::ValueError("--dim " + std::to_string(cfg.dim) + " is not a multiple of --heads " +
                            std::to_string(cfg.heads));
  cfg.mean_pool = pool == "mean";
}

}  // namespace examples
