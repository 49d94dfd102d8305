// safetensors reading/writing (atomic) and model + optimizer checkpoints.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "xgrad/framework/array.hpp"
#include "xgrad/models/checkpoint.hpp"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "xgrad checkpoints write raw tensor bytes and need a little-endian target"
#endif

namespace xgrad {
namespace {

using json = nlohmann::ordered_json;

constexpr std::uint64_t kMaxHeader = 100ull << 20;  // 100 MiB

const char* st_dtype(DType d) {
  switch (d) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Bool: return "BOOL";
    case DType::Int64: return "I64";
  }
  return "?";
}

bool parse_st_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::Float32;
  else if (s == "F64") out = DType::Float64;
  else if (s == "BOOL") out = DType::Bool;
  else if (s == "I64") out = DType::Int64;
  else return false;
  return true;
}

std::string quoted_list(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "'" : ", '") + n + "'";
  return s;
}

// --- writing -----------------------------------------------------------------------------

// A temporary file that is removed unless commit() renamed it over its target.
class TempFile {
 public:
  TempFile(const std::string& target, const std::string& op) : target_(target), op_(op) {
    static std::atomic<unsigned> counter{0};
    for (int attempt = 0; attempt < 100; ++attempt) {
      path_ = target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
      int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (fd >= 0) {
        file_ = ::fdopen(fd, "wb");
        if (!file_) {
          int e = errno;
          ::close(fd);
          ::unlink(path_.c_str());
          fail("fdopen of the temporary file '" + path_ + "'", e);
        }
        return;
      }
      if (errno != EEXIST) fail("creating the temporary file '" + path_ + "'", errno);
    }
    fail("creating a temporary file next to it", EEXIST);
  }
  ~TempFile() {
    if (file_) std::fclose(file_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, std::size_t n) {
    if (n && std::fwrite(data, 1, n, file_) != n) fail("writing '" + path_ + "'", errno);
  }
  void commit() {
    if (std::fflush(file_) != 0) fail("flushing '" + path_ + "'", errno);
    if (::fsync(::fileno(file_)) != 0) fail("fsync of '" + path_ + "'", errno);
    FILE* f = file_;
    file_ = nullptr;
    if (std::fclose(f) != 0) fail("closing '" + path_ + "'", errno);
    if (std::rename(path_.c_str(), target_.c_str()) != 0)
      fail("renaming '" + path_ + "' over it", errno);
    committed_ = true;
    // Make the rename itself durable (best effort).
    auto slash = target_.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : target_.substr(0, slash + 1);
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
      ::fsync(dfd);
      ::close(dfd);
    }
  }

 private:
  [[noreturn]] void fail(const std::string& what, int err) const {
    throw IOError(op_ + ": '" + target_ + "': " + what + " failed: " + std::strerror(err) +
                  " (the previous file, if any, is unchanged)");
  }
  std::string target_, op_, path_;
  FILE* file_ = nullptr;
  bool committed_ = false;
};

// --- reading -----------------------------------------------------------------------------

class Reader {
 public:
  Reader(const std::string& path, const std::string& op) : path_(path), op_(op) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) fail(std::string("cannot open: ") + std::strerror(errno));
    struct stat st;
    if (::fstat(fd_, &st) != 0) fail(std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("not a regular file");
    size_ = std::uint64_t(st.st_size);
  }
  ~Reader() {
    if (fd_ >= 0) ::close(fd_);
  }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  std::uint64_t size() const { return size_; }
  // Reads exactly n bytes at `offset` (checked against the size first).
  void read(std::uint64_t offset, void* out, std::uint64_t n, const std::string& what) const {
    if (offset > size_ || n > size_ - offset)
      fail(what + ": bytes [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
           ") lie beyond the end of the " + std::to_string(size_) + "-byte file");
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      ssize_t got = ::pread(fd_, p, std::size_t(std::min<std::uint64_t>(n, 1u << 30)), off_t(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail(what + ": read failed: " + std::strerror(errno));
      if (got == 0) fail(what + ": unexpected end of file");
      p += got;
      offset += std::uint64_t(got);
      n -= std::uint64_t(got);
    }
  }
  [[noreturn]] void fail(const std::string& msg) const {
    throw IOError(op_ + ": '" + path_ + "': " + msg);
  }

 private:
  std::string path_, op_;
  int fd_ = -1;
  std::uint64_t size_ = 0;
};

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  std::uint64_t begin, end;
  std::size_t order;  // position in the header
};

std::uint64_t get_unsigned(const Reader& r, const json& v, const std::string& where) {
  if (!v.is_number_unsigned()) {
    if (v.is_number_integer()) r.fail(where + " must be non-negative, got " + v.dump());
    r.fail(where + " must be a non-negative integer, got " + v.dump());
  }
  return v.get<std::uint64_t>();
}

Entry parse_entry(const Reader& r, const std::string& name, const json& v, std::size_t order,
                  std::uint64_t data_size) {
  const std::string where = "tensor '" + name + "'";
  if (!v.is_object()) r.fail(where + ": entry is not a JSON object");
  Entry e{name, DType::Float32, {}, 0, 0, order};

  auto dt = v.find("dtype");
  if (dt == v.end()) r.fail(where + ": missing field 'dtype'");
  if (!dt->is_string()) r.fail(where + ": field 'dtype' must be a string, got " + dt->dump());
  if (!parse_st_dtype(dt->get<std::string>(), e.dtype))
    r.fail(where + ": unsupported dtype " + dt->dump() + " (supported: F32, F64, BOOL, I64)");

  auto sh = v.find("shape");
  if (sh == v.end()) r.fail(where + ": missing field 'shape'");
  if (!sh->is_array()) r.fail(where + ": field 'shape' must be an array, got " + sh->dump());
  std::uint64_t n = 1;
  bool overflow = false;
  for (std::size_t i = 0; i < sh->size(); ++i) {
    std::uint64_t d = get_unsigned(r, (*sh)[i], where + ": shape[" + std::to_string(i) + "]");
    e.shape.push_back(std::size_t(d));
    overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  if (std::any_of(e.shape.begin(), e.shape.end(), [](std::size_t d) { return d == 0; })) {
    n = 0;
    overflow = false;
  }
  std::uint64_t nbytes = 0;
  overflow = overflow || __builtin_mul_overflow(n, std::uint64_t(itemsize(e.dtype)), &nbytes);

  auto off = v.find("data_offsets");
  if (off == v.end()) r.fail(where + ": missing field 'data_offsets'");
  if (!off->is_array() || off->size() != 2)
    r.fail(where + ": field 'data_offsets' must be an array of two integers, got " + off->dump());
  e.begin = get_unsigned(r, (*off)[0], where + ": data_offsets[0]");
  e.end = get_unsigned(r, (*off)[1], where + ": data_offsets[1]");
  const std::string range =
      "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
  if (e.begin > e.end) r.fail(where + ": " + range + " has begin > end");
  if (e.end > data_size)
    r.fail(where + ": " + range + " exceed the data section of " + std::to_string(data_size) +
           " bytes (truncated file?)");
  if (overflow || e.end - e.begin != nbytes)
    r.fail(where + ": " + range + " span " + std::to_string(e.end - e.begin) +
           " bytes but shape " + shape_str(e.shape) + " of " + dt->get<std::string>() +
           " needs " + (overflow ? std::string("more than 2^64") : std::to_string(nbytes)));
  return e;
}

template <class T> Tensor read_tensor(const Reader& r, const Entry& e, std::uint64_t base) {
  auto a = empty_array<T>(e.shape);
  r.read(base + e.begin, a.data(), e.end - e.begin, "tensor '" + e.name + "'");
  return make_tensor(std::move(a));
}

Tensor read_bool_tensor(const Reader& r, const Entry& e, std::uint64_t base) {
  std::vector<unsigned char> bytes(e.end - e.begin);
  r.read(base + e.begin, bytes.data(), bytes.size(), "tensor '" + e.name + "'");
  auto a = empty_array<bool>(e.shape);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > 1)
      r.fail("tensor '" + e.name + "': BOOL byte " + std::to_string(bytes[i]) +
             " at flat index " + std::to_string(i) + " is neither 0 nor 1");
    a.data()[i] = bytes[i] != 0;
  }
  return make_tensor(std::move(a));
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string op = "save_safetensors";
  std::set<std::string> names;
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) throw ValueError(op + ": '" + path + "': a tensor has an empty name");
    if (name == "__metadata__")
      throw ValueError(op + ": '" + path + "': '__metadata__' is reserved and cannot name a tensor");
    if (!names.insert(name).second)
      throw ValueError(op + ": '" + path + "': tensor name '" + name + "' appears more than once");
    if (!t.defined()) throw ValueError(op + ": '" + path + "': tensor '" + name + "' is undefined");
    const std::uint64_t nbytes = std::uint64_t(t.numel()) * itemsize(t.dtype());
    header[name] = {{"dtype", st_dtype(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {
    throw ValueError(op + ": '" + path + "': a tensor name or metadata string is not valid UTF-8 (" +
                     e.what() + ")");
  }
  text.append((8 - text.size() % 8) % 8, ' ');

  TempFile out(path, op);
  unsigned char len[8];
  const std::uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  out.write(len, 8);
  out.write(text.data(), text.size());
  for (const auto& [name, t] : tensors) {
    switch (t.dtype()) {
      case DType::Float32: out.write(t.data<float>(), t.numel() * 4); break;
      case DType::Float64: out.write(t.data<double>(), t.numel() * 8); break;
      case DType::Int64: out.write(t.data<std::int64_t>(), t.numel() * 8); break;
      case DType::Bool: {
        const bool* b = t.data<bool>();
        std::vector<unsigned char> bytes(t.numel());
        for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = b[i] ? 1 : 0;
        out.write(bytes.data(), bytes.size());
        break;
      }
    }
  }
  out.commit();
}

SafetensorsFile load_safetensors(const std::string& path) {
  Reader r(path, "load_safetensors");
  if (r.size() < 8)
    r.fail("file is " + std::to_string(r.size()) +
           " bytes, shorter than the 8-byte header length");
  unsigned char len[8];
  r.read(0, len, 8, "header length");
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(len[i]) << (8 * i);
  if (n > r.size() - 8)
    r.fail("header length " + std::to_string(n) + " exceeds the " + std::to_string(r.size() - 8) +
           " bytes after the length field");
  if (n > kMaxHeader)
    r.fail("header length " + std::to_string(n) + " exceeds the 100 MiB limit");
  std::string text(std::size_t(n), '\0');
  r.read(8, text.data(), n, "header");

  // Duplicate top-level keys are an error (the JSON parser would keep only one).
  std::set<std::string> keys;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth == 1 && event == json::parse_event_t::key && parsed.is_string() &&
        !keys.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  try {
    header = json::parse(text, cb);
  } catch (const json::exception& e) {
    r.fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) r.fail("header is not a JSON object");
  if (!duplicate.empty()) r.fail("header names '" + duplicate + "' more than once");

  const std::uint64_t base = 8 + n, data_size = r.size() - base;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) r.fail("field '__metadata__' must be an object, got " + it->dump());
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          r.fail("__metadata__ '" + m.key() + "' must be a string, got " + m->dump());
        out.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(r, it.key(), *it, entries.size(), data_size));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.order) < std::tie(b.begin, b.end, b.order);
  });
  std::uint64_t covered = 0;
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    const std::string range =
        "data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + "]";
    if (e.begin < covered)
      r.fail("tensor '" + e.name + "': " + range + " overlap tensor '" + entries[i - 1].name +
             "' [" + std::to_string(entries[i - 1].begin) + ", " +
             std::to_string(entries[i - 1].end) + "]");
    if (e.begin > covered)
      r.fail("tensor '" + e.name + "': " + range + " leave bytes [" + std::to_string(covered) +
             ", " + std::to_string(e.begin) + ") of the data section unused");
    covered = e.end;
  }
  if (covered != data_size)
    r.fail("the data section has " + std::to_string(data_size) + " bytes but the tensors cover " +
           std::to_string(covered));

  for (const Entry& e : entries) {
    switch (e.dtype) {
      case DType::Float32: out.tensors.emplace_back(e.name, read_tensor<float>(r, e, base)); break;
      case DType::Float64: out.tensors.emplace_back(e.name, read_tensor<double>(r, e, base)); break;
      case DType::Int64:
        out.tensors.emplace_back(e.name, read_tensor<std::int64_t>(r, e, base));
        break;
      case DType::Bool: out.tensors.emplace_back(e.name, read_bool_tensor(r, e, base)); break;
    }
  }
  return out;
}

void save_checkpoint(const std::string& path, const Module& model, const Optimizer* opt,
                     const std::map<std::string, std::string>& metadata) {
  NamedTensors all = model.named_parameters();
  if (opt)
    for (auto& [name, t] : opt->state_dict()) all.emplace_back("optimizer." + name, t);
  save_safetensors(path, all, metadata);
}

void load_checkpoint(const std::string& path, Module& model, Optimizer* opt) {
  const std::string op = "load_checkpoint: '" + path + "': ";
  SafetensorsFile file = load_safetensors(path);
  auto slots = model.parameter_slots();
  std::map<std::string, const Tensor*> given;
  for (auto& [name, slot] : slots) given[name] = nullptr;
  NamedTensors opt_state;
  std::vector<std::string> unexpected, missing;
  for (const auto& [name, t] : file.tensors) {
    auto it = given.find(name);
    if (it != given.end())
      it->second = &t;
    else if (name.compare(0, 10, "optimizer.") == 0)
      opt_state.emplace_back(name.substr(10), t);
    else
      unexpected.push_back(name);
  }
  for (auto& [name, slot] : slots)
    if (!given[name]) missing.push_back(name);
  if (!missing.empty() || !unexpected.empty())
    throw IOError(op + "parameter names do not match the model:" +
                  (missing.empty() ? "" : " missing " + quoted_list(missing) + ";") +
                  (unexpected.empty() ? "" : " unexpected " + quoted_list(unexpected) + ";") +
                  " nothing was loaded");
  for (auto& [name, slot] : slots) {
    const Tensor& t = *given[name];
    if (!is_float(t.dtype()) || t.shape() != slot->shape())
      throw IOError(op + "tensor '" + name + "' is " + dtype_name(t.dtype()) + " " +
                    shape_str(t.shape()) + " but the model's parameter is " +
                    dtype_name(slot->dtype()) + " " + shape_str(slot->shape()) +
                    (is_float(t.dtype()) ? "" : " (parameters load from F32 or F64 only)") +
                    "; nothing was loaded");
  }
  if (opt) {
    if (opt_state.empty())
      throw IOError(op + "the file has no optimizer state ('optimizer.*' entries); nothing was "
                    "loaded");
    try {
      opt->validate_state_dict(opt_state);
    } catch (const Error& e) {
      throw IOError(op + "optimizer state (entries under 'optimizer.'): " + e.what() +
                    "; nothing was loaded");
    }
    opt->load_state_dict(opt_state);
  }
  NoGradGuard no_grad;
  for (auto& [name, slot] : slots) {
    const Tensor v = given[name]->to(slot->dtype());  // float32 <-> float64 when they differ
    std::memcpy(slot->mutable_raw_data(), v.raw_data(), v.nbytes());  // bumps the version
  }
}

}  // namespace xgrad
