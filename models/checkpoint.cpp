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

// Structure of a safetensors header: {name: {dtype, shape: [..], data_offsets: [a, b]}, ...,
// "__metadata__": {key: string}}. Nothing legitimate nests deeper than the shape array's
// elements (depth 3) or has an array longer than a shape (rank <= kMaxArray). Both are
// checked while parsing, before the parser allocates anything proportional to the nesting.
constexpr int kMaxDepth = 3;
constexpr std::size_t kMaxArray = 64;

// A JSON value for a message: its text, cut to 60 characters.
std::string brief(const json& v) {
  std::string s = v.dump();
  return s.size() <= 60 ? s : s.substr(0, 57) + "...";
}

const char* st_dtype(DType d) {
  switch (d) {
    case DType::Float32: return "F32";
    case DType::Float64: return "F64";
    case DType::Bool: return "BOOL";
    case DType::Int64: return "I64";
  }
  return "?";
}

// The 2-byte float dtypes of a file, read as Float32: F16 (IEEE 754 binary16: 1 sign, 5
// exponent, 10 mantissa bits) and BF16 (bfloat16: the top 16 bits of a float32).
enum class Half { None, F16, BF16 };

bool parse_st_dtype(const std::string& s, DType& out, Half& half) {
  half = Half::None;
  if (s == "F32") out = DType::Float32;
  else if (s == "F64") out = DType::Float64;
  else if (s == "BOOL") out = DType::Bool;
  else if (s == "I64") out = DType::Int64;
  else if (s == "F16") out = DType::Float32, half = Half::F16;
  else if (s == "BF16") out = DType::Float32, half = Half::BF16;
  else return false;
  return true;
}

// The float32 bits of the same value as F16 bits h. Exact: float32 has more exponent range
// (subnormal F16, m * 2^-24, become normal float32) and more mantissa bits. Keeps the sign of
// 0, inf and NaN; a NaN keeps its payload (mantissa << 13) and comes out quiet (bit 22 set),
// as in PyTorch's conversion.
std::uint32_t f16_to_f32_bits(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return sign | 0x7f800000u | (mant != 0 ? 0x00400000u | (mant << 13) : 0u);
  if (exp != 0) return sign | ((exp + 127 - 15) << 23) | (mant << 13);
  if (mant == 0) return sign;
  // Subnormal m * 2^-24: shift m until its leading 1 reaches bit 10 (the implicit bit), one
  // exponent step per shift from 2^-14's biased float32 exponent 113.
  std::uint32_t e = 127 - 14;
  while ((mant & 0x400u) == 0) mant <<= 1, --e;
  return sign | (e << 23) | ((mant & 0x3ffu) << 13);
}

// BF16 bits are the top half of the float32 bits of the same value (NaN payloads included).
std::uint32_t bf16_to_f32_bits(std::uint16_t h) { return std::uint32_t(h) << 16; }

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
        where = ::fdopen(fd, "wb");
        if (!where) {
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
    if (where) std::fclose(where);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, std::size_t n) {
    if (n && std::fwrite(data, 1, n, where) != n) fail("writing '" + path_ + "'", errno);
  }
  void commit() {
    if (std::fflush(where) != 0) fail("flushing '" + path_ + "'", errno);
    if (::fsync(::fileno(where)) != 0) fail("fsync of '" + path_ + "'", errno);
    FILE* f = where;
    where = nullptr;
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
  FILE* where = nullptr;
  bool committed_ = false;
};

// --- reading -----------------------------------------------------------------------------

class Reader {
 public:
  Reader(const std::string& path, const std::string& op) : path_(printable(path)), op_(op) {
    if (path.find('\0') != std::string::npos)
      fail("the path contains a NUL byte (it would name another file)");
    // O_NONBLOCK: opening a FIFO with no writer returns at once instead of blocking; anything
    // that is not a regular file (FIFO, device, directory, socket) is refused before a read.
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd_ < 0) fail(std::string("cannot open: ") + std::strerror(errno));
    struct stat st;
    if (::fstat(fd_, &st) != 0) fail(std::string("cannot stat: ") + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail("not a regular file (" + file_kind(st.st_mode) + ")");
    const int flags = ::fcntl(fd_, F_GETFL);
    if (flags < 0 || ::fcntl(fd_, F_SETFL, flags & ~O_NONBLOCK) != 0)
      fail(std::string("fcntl failed: ") + std::strerror(errno));
    size_ = std::uint64_t(st.st_size);
  }
  static std::string printable(std::string p) {  // a NUL would cut the message short
    for (auto at = p.find('\0'); at != std::string::npos; at = p.find('\0', at + 2)) p.replace(at, 1, "\\0");
    return p;
  }
  static std::string file_kind(mode_t m) {
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISDIR(m)) return "a directory";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "not a regular file";
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
  Half half;          // F16 / BF16 in the file (dtype Float32 in memory), else None
};

std::uint64_t get_unsigned(const Reader& r, const json& v, const std::string& where) {
  if (!v.is_number_unsigned()) {
    if (v.is_number_integer()) r.fail(where + " must be non-negative, got " + brief(v));
    r.fail(where + " must be a non-negative integer, got " + brief(v));
  }
  return v.get<std::uint64_t>();
}

Entry parse_entry(const Reader& r, const std::string& name, const json& v, std::size_t order,
                  std::uint64_t data_size) {
  const std::string where = "tensor '" + name + "'";
  if (!v.is_object()) r.fail(where + ": entry is not a JSON object");
  Entry e{name, DType::Float32, {}, 0, 0, order, Half::None};

  auto dt = v.find("dtype");
  if (dt == v.end()) r.fail(where + ": missing field 'dtype'");
  if (!dt->is_string()) r.fail(where + ": field 'dtype' must be a string, got " + brief(*dt));
  if (!parse_st_dtype(dt->get<std::string>(), e.dtype, e.half))
    r.fail(where + ": unsupported dtype " + brief(*dt) + " (supported: F32, F64, F16, BF16, BOOL, I64)");

  auto sh = v.find("shape");
  if (sh == v.end()) r.fail(where + ": missing field 'shape'");
  if (!sh->is_array()) r.fail(where + ": field 'shape' must be an array, got " + brief(*sh));
  std::uint64_t n = 1;  // product of the non-zero dimensions
  bool overflow = false;
  for (std::size_t i = 0; i < sh->size(); ++i) {
    std::uint64_t d = get_unsigned(r, (*sh)[i], where + ": shape[" + std::to_string(i) + "]");
    e.shape.push_back(std::size_t(d));
    if (d != 0) overflow = overflow || __builtin_mul_overflow(n, d, &n);
  }
  if (std::any_of(e.shape.begin(), e.shape.end(), [](std::size_t d) { return d == 0; })) {
    // Empty, but the other dimensions still set the strides: held to 2^40 as numel() does.
    if (overflow || n > (std::uint64_t(1) << 40))
      r.fail(where + ": shape " + shape_str(e.shape) +
             " is empty but the product of its non-zero dimensions exceeds 2^40 (its strides would not fit)");
    n = 0;
  }
  std::uint64_t nbytes = 0;
  const std::uint64_t file_itemsize = e.half != Half::None ? 2 : std::uint64_t(itemsize(e.dtype));
  overflow = overflow || __builtin_mul_overflow(n, file_itemsize, &nbytes);

  auto off = v.find("data_offsets");
  if (off == v.end()) r.fail(where + ": missing field 'data_offsets'");
  if (!off->is_array() || off->size() != 2)
    r.fail(where + ": field 'data_offsets' must be an array of two integers, got " + brief(*off));
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
  Tensor t = empty_tensor<T>(e.shape);
  r.read(base + e.begin, fresh_data<T>(t), e.end - e.begin, "tensor '" + e.name + "'");
  return t;
}

// An F16 / BF16 tensor, converted exactly to Float32.
Tensor read_half_tensor(const Reader& r, const Entry& e, std::uint64_t base) {
  std::vector<std::uint16_t> bits(std::size_t((e.end - e.begin) / 2));
  r.read(base + e.begin, bits.data(), e.end - e.begin, "tensor '" + e.name + "'");
  Tensor t = empty_tensor<float>(e.shape);
  float* pt = fresh_data<float>(t);
  for (std::size_t i = 0; i < bits.size(); ++i) {
    const std::uint32_t f = e.half == Half::F16 ? f16_to_f32_bits(bits[i]) : bf16_to_f32_bits(bits[i]);
    std::memcpy(pt + i, &f, sizeof f);
  }
  return t;
}

Tensor read_bool_tensor(const Reader& r, const Entry& e, std::uint64_t base) {
  std::vector<unsigned char> bytes(e.end - e.begin);
  r.read(base + e.begin, bytes.data(), bytes.size(), "tensor '" + e.name + "'");
  Tensor t = empty_tensor<bool>(e.shape);
  bool* pt = fresh_data<bool>(t);
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > 1)
      r.fail("tensor '" + e.name + "': BOOL byte " + std::to_string(bytes[i]) +
             " at flat index " + std::to_string(i) + " is neither 0 nor 1");
    pt[i] = bytes[i] != 0;
  }
  return t;
}

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  const std::string op = "save_safetensors";
  if (path.find('\0') != std::string::npos)
    throw_error<ValueError>(op, "argument 'path' contains a NUL byte (it would name another file)");
  std::set<std::string> names;
  json header = json::object();
  std::uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) throw_error<ValueError>(op, "'", path, "': a tensor has an empty name");
    if (name == "__metadata__")
      throw_error<ValueError>(op, "'", path, "': '__metadata__' is reserved and cannot name a tensor");
    if (!names.insert(name).second)
      throw_error<ValueError>(op, "'", path, "': tensor name '", name, "' appears more than once");
    if (!t.defined()) throw_error<ValueError>(op, "'", path, "': tensor '", name, "' is undefined");
    if (t.dim() > kMaxArray)  // load_safetensors refuses such a shape
      throw_error<ValueError>(op, "'", path, "': tensor '", name, "' has rank ", t.dim(), ", more than the ", kMaxArray,
                              " a safetensors file holds here");
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
    throw_error<ValueError>(op, "'", path, "': a tensor name or metadata string is not valid UTF-8 (", e.what(), ")");
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

SafetensorsFile load_safetensors(const std::string& path, const SafetensorsLimits& limits) {
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
  if (n > limits.max_header_bytes)
    r.fail("header length " + std::to_string(n) + " exceeds the limit of " +
           std::to_string(limits.max_header_bytes) + " bytes (SafetensorsLimits::max_header_bytes)");
  std::string text(std::size_t(n), '\0');
  r.read(8, text.data(), n, "header");

  if (const auto nul = text.find('\0'); nul != std::string::npos)
    r.fail("header has a NUL byte at offset " + std::to_string(nul) + " (JSON text cannot contain one)");

  // Checked while parsing (nlohmann's parser is iterative; the callback sees every event):
  // containers nest at most kMaxDepth deep, arrays hold at most kMaxArray values, and no
  // object names a key twice (the parser would silently keep the last one).
  struct Container {
    bool array;
    std::size_t values = 0;
    std::set<std::string> keys;
  };
  struct Refused {
    std::string why;
  };
  std::vector<Container> open;
  std::string entry;  // the top-level key being parsed, for messages
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    using E = json::parse_event_t;
    switch (event) {
      case E::object_start:
      case E::array_start:
        if (depth >= kMaxDepth)
          throw Refused{"header nests deeper than " + std::to_string(kMaxDepth) + " levels" +
                        (entry.empty() ? std::string() : " inside '" + entry + "'") +
                        " (no safetensors field does)"};
        if (!open.empty() && open.back().array) ++open.back().values;
        open.push_back(Container{event == E::array_start, 0, {}});
        break;
      case E::object_end:
      case E::array_end:
        open.pop_back();
        break;
      case E::key:
        if (depth == 1) entry = parsed.get<std::string>();
        if (!open.back().keys.insert(parsed.get<std::string>()).second)
          throw Refused{depth == 1 ? "header names '" + entry + "' more than once"
                                   : "'" + entry + "' names the field '" + parsed.get<std::string>() +
                                         "' more than once"};
        break;
      case E::value:
        if (!open.empty() && open.back().array && ++open.back().values > kMaxArray)
          throw Refused{"an array inside '" + entry + "' has more than " + std::to_string(kMaxArray) +
                        " elements (a shape has at most " + std::to_string(kMaxArray) + ")"};
        break;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, cb);
  } catch (const Refused& e) {
    r.fail(e.why);
  } catch (const json::exception& e) {
    r.fail(std::string("header is not valid JSON: ") + e.what());
  }
  if (!header.is_object()) r.fail("header is not a JSON object");

  const std::uint64_t base = 8 + n, data_size = r.size() - base;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) r.fail("field '__metadata__' must be an object, got " + brief(*it));
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
      case DType::Float32:
        out.tensors.emplace_back(e.name, e.half != Half::None ? read_half_tensor(r, e, base)
                                                              : read_tensor<float>(r, e, base));
        break;
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

std::map<std::string, std::string> load_checkpoint(const std::string& path, Module& model, Optimizer* opt) {
  const char* op = "load_checkpoint";
  const std::string where = "'" + path + "': ";
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
    throw_error<IOError>(op, where, "parameter names do not match the model:",
                         missing.empty() ? "" : " missing " + quoted_list(missing) + ";",
                         unexpected.empty() ? "" : " unexpected " + quoted_list(unexpected) + ";",
                         " nothing was loaded");
  for (auto& [name, slot] : slots) {
    const Tensor& t = *given[name];
    if (!is_float(t.dtype()) || t.shape() != slot->shape())
      throw_error<IOError>(op, where, "tensor '", name, "' is ", dtype_name(t.dtype()), ' ', t.shape(),
                           " but the model's parameter is ", dtype_name(slot->dtype()), ' ', slot->shape(),
                           is_float(t.dtype()) ? "" : " (parameters load from F32 or F64 only)",
                           "; nothing was loaded");
  }
  if (opt) {
    if (opt_state.empty())
      throw_error<IOError>(op, where, "the file has no optimizer state ('optimizer.*' entries); nothing was loaded");
    try {
      opt->validate_state_dict(opt_state);
    } catch (const Error& e) {
      throw_error<IOError>(op, where, "optimizer state (entries under 'optimizer.'): ", e.what(),
                           "; nothing was loaded");
    }
    opt->load_state_dict(opt_state);
  }
  NoGradGuard no_grad;
  for (auto& [name, slot] : slots) {
    const Tensor v = given[name]->to(slot->dtype());  // float32 <-> float64 when they differ
    std::memcpy(slot->mutable_raw_data(), v.raw_data(), v.nbytes());  // bumps the version
  }
  return std::move(file.metadata);
}

}  // namespace xgrad
