// libFuzzer target: safetensors reading, writing and checkpoint loading.
//
// Each input is written, as is, to a per-process file under $TMPDIR (default /tmp), then
//   1. load_safetensors: the only exception allowed is xgrad::IOError. On success the
//      result is checked (unique names, shapes and dtypes consistent, BOOL values 0/1),
//      saved again with save_safetensors, reloaded, and must be equal: same names in the
//      same order, dtypes, shapes, bytes and metadata.
//   2. load_checkpoint into a Linear(2, 3) (float32 "weight" (3, 2), "bias" (3)), without an
//      optimizer, with SGD (momentum) and with AdamW: the only exception allowed is IOError
//      (always thrown when step 1 threw), and on IOError the parameters and the optimizer
//      state must be unchanged (bit for bit). On success the parameters and the optimizer
//      state must equal the file's entries converted to float32 (the parameters' dtype).
// Anything else prints what went wrong and aborts, which libFuzzer reports as a crash.
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace {

std::string g_input_path, g_roundtrip_path;

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "\nfuzz_safetensors: BUG: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

void remove_files() {
  ::unlink(g_input_path.c_str());
  ::unlink(g_roundtrip_path.c_str());
}

void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror(path.c_str());
    std::abort();  // harness problem, not a library bug: stop loudly
  }
  while (size > 0) {
    ssize_t n = ::write(fd, data, size);
    if (n <= 0) {
      std::perror(path.c_str());
      std::abort();
    }
    data += n;
    size -= std::size_t(n);
  }
  ::close(fd);
}

std::size_t bytes_per_element(DType d) {
  switch (d) {
    case DType::Float32: return 4;
    case DType::Float64: return 8;
    case DType::Bool: return 1;
    case DType::Int64: return 8;
  }
  fail("tensor with an unknown dtype");
}

// The tensor's bytes as written to a file (bools as 0/1 bytes).
std::string raw_bytes(const Tensor& t) {
  const std::size_t n = t.numel();
  switch (t.dtype()) {
    case DType::Float32: return std::string(reinterpret_cast<const char*>(t.data<float>()), n * 4);
    case DType::Float64: return std::string(reinterpret_cast<const char*>(t.data<double>()), n * 8);
    case DType::Int64:
      return std::string(reinterpret_cast<const char*>(t.data<std::int64_t>()), n * 8);
    case DType::Bool: {
      std::string s(n, '\0');
      const bool* b = t.data<bool>();
      for (std::size_t i = 0; i < n; ++i) s[i] = b[i] ? 1 : 0;
      return s;
    }
  }
  fail("tensor with an unknown dtype");
}

std::string describe(const std::string& name, const Tensor& t) {
  return "'" + name + "' " + dtype_name(t.dtype()) + " " + shape_str(t.shape());
}

// Checks what load_safetensors returned.
void check_loaded(const SafetensorsFile& f, std::size_t file_size) {
  std::set<std::string> names;
  std::uint64_t total = 0;
  for (const auto& [name, t] : f.tensors) {
    if (!names.insert(name).second) fail("load_safetensors returned the name '" + name + "' twice");
    if (name == "__metadata__") fail("load_safetensors returned a tensor named '__metadata__'");
    if (!t.defined()) fail("load_safetensors returned an undefined tensor '" + name + "'");
    std::uint64_t n = 1;
    for (auto d : t.shape())
      if (__builtin_mul_overflow(n, std::uint64_t(d), &n))
        fail("load_safetensors returned " + describe(name, t) + " whose element count overflows");
    if (n != t.numel()) fail("numel() of " + describe(name, t) + " disagrees with its shape");
    if (t.to_vector().size() != n)
      fail("tensor " + describe(name, t) + " holds " + std::to_string(t.to_vector().size()) +
           " elements");
    total += n * bytes_per_element(t.dtype());
    if (t.dtype() == DType::Bool)
      for (double v : t.to_vector())
        if (v != 0.0 && v != 1.0) fail("BOOL tensor '" + name + "' holds a value other than 0/1");
    if (t.requires_grad()) fail("a loaded tensor requires grad");
  }
  // F16 / BF16 (2 bytes in the file) load as float32: at most twice the file's bytes.
  if (total > 2 * std::uint64_t(file_size)) fail("the loaded tensors hold more than twice the bytes the file has");
}

void check_equal(const SafetensorsFile& a, const SafetensorsFile& b) {
  if (a.tensors.size() != b.tensors.size())
    fail("round trip: " + std::to_string(a.tensors.size()) + " tensors saved, " +
         std::to_string(b.tensors.size()) + " loaded back");
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& [na, ta] = a.tensors[i];
    const auto& [nb, tb] = b.tensors[i];
    if (na != nb) fail("round trip: tensor " + std::to_string(i) + " was '" + na + "', is '" + nb + "'");
    if (ta.dtype() != tb.dtype() || ta.shape() != tb.shape())
      fail("round trip: " + describe(na, ta) + " came back as " + describe(nb, tb));
    if (raw_bytes(ta) != raw_bytes(tb)) fail("round trip: the bytes of '" + na + "' changed");
  }
  if (a.metadata != b.metadata) fail("round trip: __metadata__ changed");
}

// --- checkpoints ---------------------------------------------------------------------------

struct Snapshot {
  std::map<std::string, std::string> params;  // name -> dtype/shape/bytes
  std::map<std::string, std::string> opt;
};

std::string fingerprint(const Tensor& t) {
  return std::string(dtype_name(t.dtype())) + shape_str(t.shape()) + ":" + raw_bytes(t);
}

Snapshot snapshot(const Module& m, const Optimizer* opt) {
  Snapshot s;
  for (const auto& [name, t] : m.named_parameters()) s.params[name] = fingerprint(t);
  if (opt)
    for (const auto& [name, t] : opt->state_dict()) s.opt[name] = fingerprint(t);
  return s;
}

struct Model {
  Rng rng{1234};
  Linear linear{2, 3, true, rng};
  SGD sgd{linear.named_parameters(), SGDOptions(0.1).momentum(0.9)};
  AdamW adamw{linear.named_parameters()};
  NamedTensors initial_params;  // deep copies
  NamedTensors sgd_initial, adamw_initial;

  Model() {
    for (const auto& [name, t] : linear.named_parameters()) initial_params.emplace_back(name, t.clone());
    sgd_initial = sgd.state_dict();
    adamw_initial = adamw.state_dict();
  }
  // Back to the initial values, so that every input sees the same starting point.
  void reset() {
    linear.load_parameters(initial_params);
    sgd.load_state_dict(sgd_initial);
    adamw.load_state_dict(adamw_initial);
  }
};

Model* g_model = nullptr;

void try_checkpoint(const std::string& path, Optimizer* opt, const char* label, bool file_ok,
                    const SafetensorsFile* file) {
  Model& m = *g_model;
  m.reset();
  const Snapshot before = snapshot(m.linear, opt);
  bool loaded = false;
  try {
    load_checkpoint(path, m.linear, opt);
    loaded = true;
  } catch (const IOError&) {
  } catch (const Error& e) {
    fail(std::string("load_checkpoint (") + label + ") threw a non-IOError xgrad::Error: " + e.what());
  } catch (const std::exception& e) {
    fail(std::string("load_checkpoint (") + label + ") threw std::exception: " + e.what());
  } catch (...) {
    fail(std::string("load_checkpoint (") + label + ") threw a non-standard exception");
  }
  const Snapshot after = snapshot(m.linear, opt);
  if (!loaded) {
    if (after.params != before.params)
      fail(std::string("load_checkpoint (") + label + ") threw IOError but changed the parameters");
    if (after.opt != before.opt)
      fail(std::string("load_checkpoint (") + label + ") threw IOError but changed the optimizer state");
    return;
  }
  if (!file_ok) fail(std::string("load_checkpoint (") + label + ") accepted a file load_safetensors rejects");
  // Loaded: the parameters are the file's tensors, the optimizer state its optimizer.* entries,
  // floating tensors converted to the parameters' dtype (float32: the Linear's parameters,
  // hence its optimizer buffers, are float32; F64 / F16 / BF16 entries load converted).
  std::map<std::string, std::string> in_file, opt_in_file;
  for (const auto& [name, t] : file->tensors) {
    const bool floating = t.dtype() == DType::Float32 || t.dtype() == DType::Float64;
    const std::string fp = fingerprint(floating ? t.to(DType::Float32) : t);
    in_file[name] = fp;
    if (name.compare(0, 10, "optimizer.") == 0) opt_in_file[name.substr(10)] = fp;
  }
  for (const auto& [name, fp] : after.params) {
    auto it = in_file.find(name);
    if (it == in_file.end())
      fail(std::string("load_checkpoint (") + label + ") succeeded without parameter '" + name + "'");
    if (it->second != fp)
      fail(std::string("load_checkpoint (") + label + "): parameter '" + name + "' differs from the file");
  }
  if (opt && after.opt != opt_in_file)
    fail(std::string("load_checkpoint (") + label + "): optimizer state differs from the file's entries");
  // The parameters must still be usable leaves.
  for (const auto& [name, t] : m.linear.named_parameters())
    if (!t.requires_grad() || !t.is_leaf())
      fail(std::string("load_checkpoint (") + label + "): parameter '" + name + "' is no longer a leaf requiring grad");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  set_num_threads(1);
  const char* tmp = std::getenv("TMPDIR");
  std::string dir = tmp && *tmp ? tmp : "/tmp";
  const std::string stem = dir + "/xgrad-fuzz-safetensors-" + std::to_string(::getpid());
  g_input_path = stem + ".safetensors";
  g_roundtrip_path = stem + "-roundtrip.safetensors";
  g_model = new Model();
  std::atexit(remove_files);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  write_file(g_input_path, data, size);

  SafetensorsFile file;
  bool ok = false;
  try {
    file = load_safetensors(g_input_path);
    ok = true;
  } catch (const IOError&) {
  } catch (const Error& e) {
    fail(std::string("load_safetensors threw a non-IOError xgrad::Error: ") + e.what());
  } catch (const std::exception& e) {
    fail(std::string("load_safetensors threw std::exception: ") + e.what());
  } catch (...) {
    fail("load_safetensors threw a non-standard exception");
  }

  if (ok) {
    check_loaded(file, size);
    bool empty_name = false;
    for (const auto& [name, t] : file.tensors) empty_name = empty_name || name.empty();
    try {
      save_safetensors(g_roundtrip_path, file.tensors, file.metadata);
      if (empty_name) fail("save_safetensors accepted an empty tensor name");
      check_equal(file, load_safetensors(g_roundtrip_path));
    } catch (const ValueError& e) {
      // Documented: empty names are rejected by save (the loader accepts them).
      if (!empty_name) fail(std::string("round trip: save_safetensors threw ValueError: ") + e.what());
    } catch (const Error& e) {
      fail(std::string("round trip threw: ") + e.what());
    } catch (const std::exception& e) {
      fail(std::string("round trip threw std::exception: ") + e.what());
    }
  }

  try_checkpoint(g_input_path, nullptr, "no optimizer", ok, ok ? &file : nullptr);
  try_checkpoint(g_input_path, &g_model->sgd, "SGD", ok, ok ? &file : nullptr);
  try_checkpoint(g_input_path, &g_model->adamw, "AdamW", ok, ok ? &file : nullptr);
  return 0;
}
