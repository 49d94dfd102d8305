// xgrad/models/checkpoint.hpp — safetensors files and training checkpoints.
//
// safetensors layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value", ...}}
// (padded with spaces to a multiple of 8), then the raw little-endian row-major tensor
// bytes; offsets are relative to the first byte after the header. dtypes: F32, F64,
// BOOL (one byte, 0 or 1), I64; reading also accepts F16 (IEEE binary16) and BF16
// (bfloat16), as PyTorch saves half-precision state_dicts, converted exactly to Float32
// (every F16 and BF16 value is a float32 value: subnormals, +-0, +-inf and NaN included; a
// NaN keeps its sign and payload, F16 NaNs come out quiet as in PyTorch). Writing stores
// F32, F64, BOOL and I64 only, so a half-precision file saved again becomes F32.
//
// Writes are atomic: the file is written to a temporary file in the same directory,
// flushed and fsync'ed, then renamed over the target, so a failed save leaves the previous
// file intact. Reads validate the whole file before returning anything.
#pragma once
#include <cstdint>
#include <map>
#include <string>

#include "xgrad/models/module.hpp"
#include "xgrad/models/optim.hpp"

namespace xgrad {

struct SafetensorsFile {
  NamedTensors tensors;                         // in data-offset order
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

// Writes `tensors` (offsets contiguous in the given order) and `metadata` to `path`.
// ValueError for bad arguments (undefined tensor, rank over 64, empty, duplicate or
// "__metadata__" name), checked before any file is touched; IOError for any I/O failure
// (temporary file removed, previous file at `path` intact).
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});

// Reads a safetensors file (F16 and BF16 tensors become Float32, see above). Any problem
// (unreadable file, bad header length, malformed JSON, unknown dtype, bad shape, offsets
// out of range / not matching the shape / overlapping / leaving holes, BOOL bytes other
// than 0 and 1, ...) throws IOError naming the file and the tensor or field. Never reads
// out of bounds.
//
// Untrusted files are safe to load: the loader runs no code, reads only regular files (a
// FIFO, device or directory is refused before any read, so nothing blocks), refuses a path
// with a NUL byte, and bounds memory and time before allocating: the header is at most
// limits.max_header_bytes (16 MiB by default: about 150,000 tensors' entries), JSON nests at
// most 3 levels and arrays hold at most 64 values (what a safetensors header needs), no key
// repeats, and every tensor's byte range is checked against the file before it is read.
struct SafetensorsLimits {
  std::uint64_t max_header_bytes = std::uint64_t(16) << 20;
};
SafetensorsFile load_safetensors(const std::string& path, const SafetensorsLimits& limits = {});

// Saves model.named_parameters() under their own names and, when opt is given, its
// state_dict() under "optimizer.<name>" (including "optimizer.step"), atomically.
void save_checkpoint(const std::string& path, const Module& model, const Optimizer* opt = nullptr,
                     const std::map<std::string, std::string>& metadata = {});

// Loads a checkpoint written by save_checkpoint into model (and opt). Validates everything
// first — the file, the parameter names (missing and unexpected ones are listed), each
// parameter's shape (equal to the model's) and dtype (F32 or F64), and, when opt is
// given, the optimizer state (opt->validate_state_dict) — and throws IOError naming the
// file and the problem; then copies the values into the existing parameter storage and
// replaces the optimizer's state. On error the model and optimizer are unchanged. Entries
// under "optimizer." are ignored when opt is null.
//
// dtype rule (the same as Module::load_parameters and torch's load_state_dict): values
// are converted to the dtype of the parameter they land in — an F32 file loads into a
// model converted with Module::to(Float64) and the other way round (rounded to float32) —
// and optimizer buffers to their parameter's dtype (Optimizer::load_state_dict).
// Returns the file's "__metadata__" (what save_checkpoint was given), so a caller that
// stored its run there does not read the file a second time.
std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& model, Optimizer* opt = nullptr);

}  // namespace xgrad
