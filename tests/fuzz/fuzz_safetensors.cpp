// libFuzzer target: safetensors reading, writing and checkpoint loading.
//
// Each input is written, as is, to a per-process file under $TMPDIR (default /tmp), then
//   1. load_safetensors: the only exception allowed is xgrad::IOError. On success the
//      result is checked (unique names, shapes and dtypes consistent, BOOL values 0/1, the
//      tensors' bytes at most twice the file's: F16 / BF16 load as Float32), saved again
//      with save_safetensors, reloaded, and must be equal: same names in the same order,
//      dtypes, shapes, bytes and metadata.
//   2. load_checkpoint into a Linear(2, 3) (float32 "weight" (3, 2), "bias" (3)), without an
//      optimizer, with SGD (momentum) and with AdamW: the only exception allowed is IOError
//      (always thrown when step 1 threw), and on IOError the parameters and the optimizer
//      state must be unchanged (bit for bit). On success the parameters and the optimizer
//      state must equal the file's entries converted to float32 (the parameters' dtype).
// Anything else prints what went wrong and aborts, which libFuzzer reports as a crash.
//
// Structure-aware mode (always on; scripts/run-fuzz.sh also passes -dict=safetensors.dict,
// JSON and safetensors tokens): LLVMFuzzerCustomMutator splits an input into
//   [u64 little-endian header length n][n bytes of JSON header][data section]
// and, 3 times in 4, mutates that structure (1-3 changes): nests a value 1..100000 levels
// deep in [ ] or {"k": } (as deep as MaxSize allows: ~2000 levels at libFuzzer's default
// -max_len of 4096), repeats a field / a tensor entry, deletes one, sets a number to a limit (2^64-1,
// 2^63, -1, 2^40, 1e308, ...), inserts NUL bytes or "\u0000", swaps dtype strings (F32, F16,
// BF16, BOOL, I64, F64, unknown ones), runs libFuzzer's own mutator on the header text alone,
// or resizes the data section (to the end the largest data_offsets names, or at random).
// The length prefix is rewritten to match the new header, except 1 time in 16 when it is
// set off on purpose (+-1, 0, 2^63, 2^64-1, the file size). The other time in 4, and when
// the result would not fit in MaxSize, it is libFuzzer's mutator on the whole input.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <random>
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

// --- structure-aware mutator ---------------------------------------------------------------

extern "C" size_t LLVMFuzzerMutate(std::uint8_t* data, size_t size, size_t max_size);

namespace {

using Rand = std::mt19937_64;

std::size_t pick(Rand& rng, std::size_t n) { return n == 0 ? 0 : std::size_t(rng() % n); }

// End (one past) of the JSON value starting at p: a string, a container (matched with a
// depth count that skips strings), or a bare token up to , } ] or whitespace.
std::size_t value_end(const std::string& h, std::size_t p) {
  if (p >= h.size()) return h.size();
  if (h[p] == '"') {
    for (std::size_t i = p + 1; i < h.size(); ++i) {
      if (h[i] == '\\') ++i;
      else if (h[i] == '"') return i + 1;
    }
    return h.size();
  }
  if (h[p] == '[' || h[p] == '{') {
    int depth = 0;
    bool in_str = false;
    for (std::size_t i = p; i < h.size(); ++i) {
      const char c = h[i];
      if (in_str) {
        if (c == '\\') ++i;
        else if (c == '"') in_str = false;
      } else if (c == '"') {
        in_str = true;
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if (c == ']' || c == '}') {
        if (--depth == 0) return i + 1;
      }
    }
    return h.size();
  }
  std::size_t i = p;
  while (i < h.size() && h[i] != ',' && h[i] != '}' && h[i] != ']' && h[i] != ' ' && h[i] != '\n') ++i;
  return i;
}

std::size_t skip_ws(const std::string& h, std::size_t p) {
  while (p < h.size() && (h[p] == ' ' || h[p] == '\n' || h[p] == '\t' || h[p] == '\r')) ++p;
  return p;
}

// A "key": value member: [begin, end) covers the key through the value.
struct Member {
  std::size_t begin, value, end;
  std::string key;
};

// Every "key": value member in the header text (any depth), found by scanning strings that
// are followed by a colon.
std::vector<Member> members(const std::string& h) {
  std::vector<Member> out;
  for (std::size_t i = 0; i < h.size(); ++i) {
    if (h[i] != '"') continue;
    const std::size_t close = value_end(h, i);
    if (close > h.size() || close == i) break;
    const std::size_t colon = skip_ws(h, close);
    if (colon < h.size() && h[colon] == ':') {
      const std::size_t v = skip_ws(h, colon + 1);
      out.push_back(Member{i, v, value_end(h, v), h.substr(i + 1, close - i - 2 < h.size() ? close - i - 2 : 0)});
    }
    i = close - 1;
  }
  return out;
}

// Start offsets of number tokens.
std::vector<std::pair<std::size_t, std::size_t>> numbers(const std::string& h) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  bool in_str = false;
  for (std::size_t i = 0; i < h.size(); ++i) {
    const char c = h[i];
    if (in_str) {
      if (c == '\\') ++i;
      else if (c == '"') in_str = false;
      continue;
    }
    if (c == '"') { in_str = true; continue; }
    if (c == '-' || (c >= '0' && c <= '9')) {
      std::size_t j = i + 1;
      while (j < h.size() && (std::isdigit(static_cast<unsigned char>(h[j])) || h[j] == '.' || h[j] == 'e' ||
                              h[j] == 'E' || h[j] == '+' || h[j] == '-'))
        ++j;
      out.emplace_back(i, j);
      i = j - 1;
    }
  }
  return out;
}

const char* const kNumbers[] = {
    "0", "1", "-1", "2", "3", "7", "8", "255", "256", "65535", "2147483647", "2147483648", "4294967295",
    "4294967296", "1099511627776", "1099511627777", "16777216", "16777217", "9007199254740993",
    "9223372036854775807", "9223372036854775808", "-9223372036854775808", "18446744073709551615",
    "18446744073709551616", "36893488147419103232", "1e308", "1e400", "-0", "0.5", "1.0", "1e2",
    "-18446744073709551615", "00", "1E+2"};
const char* const kDtypes[] = {"\"F32\"", "\"F16\"", "\"BF16\"", "\"BOOL\"", "\"I64\"", "\"F64\"",
                               "\"I32\"", "\"U8\"", "\"I8\"", "\"F8_E4M3\"", "\"f32\"", "\"\"",
                               "\"F32\\u0000\"", "1", "null", "[\"F32\"]"};
const std::size_t kDepths[] = {1, 2, 3, 4, 5, 8, 64, 1000, 100000};

// The end of the data section the header's largest data_offsets names (0 if none parse).
std::uint64_t data_end(const std::string& h) {
  std::uint64_t end = 0;
  for (const Member& m : members(h)) {
    if (m.key != "data_offsets" || m.value >= h.size() || h[m.value] != '[') continue;
    const std::size_t comma = h.find(',', m.value);
    if (comma == std::string::npos || comma >= m.end) continue;
    const unsigned long long b = std::strtoull(h.c_str() + comma + 1, nullptr, 10);
    end = std::max<std::uint64_t>(end, b);
  }
  return end;
}

// One structural change to the header text and/or the data section.
void mutate_structure(std::string& h, std::string& data, Rand& rng, std::size_t max_size) {
  const std::vector<Member> ms = members(h);
  switch (pick(rng, 10)) {
    case 0: {  // nest a value many levels deep in [ ] or {"k": }
      std::size_t b, e;
      if (!ms.empty()) {
        const Member& m = ms[pick(rng, ms.size())];
        b = m.value, e = m.end;
      } else {
        b = pick(rng, h.size() + 1), e = b;
      }
      const bool obj = rng() & 1;
      const char* open = obj ? "{\"k\":" : "[";
      const char* close = obj ? "}" : "]";
      const std::size_t per = obj ? 6 : 2;
      std::size_t depth = kDepths[pick(rng, sizeof kDepths / sizeof kDepths[0])];
      const std::size_t room = max_size > h.size() + data.size() + 8 ? max_size - h.size() - data.size() - 8 : 0;
      depth = std::min(depth, room / per);
      if (depth == 0) return;
      std::string pre, post;
      pre.reserve(depth * (per - 1));
      for (std::size_t i = 0; i < depth; ++i) pre += open, post += close;
      h = h.substr(0, b) + pre + h.substr(b, e - b) + post + h.substr(e);
      return;
    }
    case 1:
    case 2: {  // repeat a member (a field inside an entry, or a whole tensor entry), 1-3 times
      if (ms.empty()) return;
      const Member& m = ms[pick(rng, ms.size())];
      const std::string text = h.substr(m.begin, m.end - m.begin);
      const std::size_t times = 1 + pick(rng, 3);
      std::string extra;
      for (std::size_t i = 0; i < times; ++i) extra += "," + text;
      h.insert(m.end, extra);
      return;
    }
    case 3: {  // delete a member and one adjacent comma
      if (ms.empty()) return;
      const Member& m = ms[pick(rng, ms.size())];
      std::size_t b = m.begin, e = m.end;
      const std::size_t after = skip_ws(h, e);
      if (after < h.size() && h[after] == ',') {
        e = after + 1;
      } else {
        std::size_t before = b;
        while (before > 0 && (h[before - 1] == ' ' || h[before - 1] == '\n')) --before;
        if (before > 0 && h[before - 1] == ',') b = before - 1;
      }
      h.erase(b, e - b);
      return;
    }
    case 4: {  // a number set to a limit
      const auto ns = numbers(h);
      if (ns.empty()) return;
      const auto [b, e] = ns[pick(rng, ns.size())];
      h.replace(b, e - b, kNumbers[pick(rng, sizeof kNumbers / sizeof kNumbers[0])]);
      return;
    }
    case 5: {  // NUL bytes (raw, or escaped inside a string)
      const std::size_t at = pick(rng, h.size() + 1);
      if (rng() & 1) h.insert(at, std::string(1 + pick(rng, 4), '\0'));
      else h.insert(at, "\\u0000");
      return;
    }
    case 6: {  // another dtype
      std::vector<const Member*> dts;
      for (const Member& m : ms)
        if (m.key == "dtype") dts.push_back(&m);
      if (dts.empty()) return;
      const Member& m = *dts[pick(rng, dts.size())];
      h.replace(m.value, m.end - m.value, kDtypes[pick(rng, sizeof kDtypes / sizeof kDtypes[0])]);
      return;
    }
    case 7: {  // libFuzzer's mutator (with the dictionary) on the header text alone
      const std::size_t cap = std::min<std::size_t>(max_size, h.size() * 2 + 64);
      if (h.size() > cap) return;  // earlier rounds grew it past max_size: the caller falls back
      std::string buf = h;
      buf.resize(cap);
      const std::size_t n = LLVMFuzzerMutate(reinterpret_cast<std::uint8_t*>(&buf[0]), h.size(), cap);
      buf.resize(n);
      h = buf;
      return;
    }
    case 8: {  // data section sized to what the offsets name, or one byte off
      const std::uint64_t want = data_end(h);
      if (want > max_size) return;
      std::uint64_t n = want;
      if (rng() & 1) n = (rng() & 1) ? want + 1 : (want > 0 ? want - 1 : 0);
      data.resize(std::size_t(n), '\0');
      for (auto& c : data) c = char(rng());  // any bytes (BOOL must still be 0/1)
      if (rng() & 1)
        for (auto& c : data) c = char(rng() & 1);
      return;
    }
    default: {  // data section grown or shrunk at random
      const std::size_t n = pick(rng, 2 * data.size() + 65);
      const std::size_t old = data.size();
      data.resize(n);
      for (std::size_t i = old; i < n; ++i) data[i] = char(rng());
      return;
    }
  }
}

}  // namespace

extern "C" size_t LLVMFuzzerCustomMutator(std::uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  Rand rng(seed);
  if (size < 8 || pick(rng, 4) == 0) return LLVMFuzzerMutate(data, size, max_size);

  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(data[i]) << (8 * i);
  std::string header, rest;
  if (n <= size - 8) {
    header.assign(reinterpret_cast<const char*>(data) + 8, std::size_t(n));
    rest.assign(reinterpret_cast<const char*>(data) + 8 + n, size - 8 - std::size_t(n));
  } else {  // inconsistent prefix: everything after it is the header
    header.assign(reinterpret_cast<const char*>(data) + 8, size - 8);
  }

  const std::size_t rounds = 1 + pick(rng, 3);
  for (std::size_t i = 0; i < rounds; ++i) mutate_structure(header, rest, rng, max_size);

  const std::size_t total = 8 + header.size() + rest.size();
  if (total > max_size) return LLVMFuzzerMutate(data, size, max_size);

  std::uint64_t len = header.size();
  if (pick(rng, 16) == 0) {
    const std::uint64_t off[] = {len + 1, len > 0 ? len - 1 : 0, 0, std::uint64_t(1) << 63,
                                 ~std::uint64_t(0), total, len + 8};
    len = off[pick(rng, sizeof off / sizeof off[0])];
  }
  for (int i = 0; i < 8; ++i) data[i] = std::uint8_t(len >> (8 * i));
  std::memcpy(data + 8, header.data(), header.size());
  std::memcpy(data + 8 + header.size(), rest.data(), rest.size());
  return total;
}
