// Readers for Fashion-MNIST (IDX + gzip through zlib) and the fortunes text.
#include "xgrad/models/datasets.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>

#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/runtime.hpp"

namespace xgrad {

namespace {

[[noreturn]] void file_error(const char* op, const std::string& path, const std::string& what) {
  throw IOError(std::string(op) + ": '" + path + "': " + what);
}

// The bytes of a regular file. Opened non-blocking so that a FIFO without a writer is refused
// instead of blocking; a directory, device or socket is refused before any read.
std::string read_regular_file(const char* op, const std::string& path, std::size_t max_bytes) {
  if (path.find('\0') != std::string::npos) file_error(op, path, "the path contains a NUL byte");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) file_error(op, path, std::string("cannot open: ") + std::strerror(errno));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) file_error(op, path, std::string("cannot stat: ") + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) file_error(op, path, S_ISDIR(st.st_mode) ? "is a directory, not a file" : "not a regular file");
  if (std::uint64_t(st.st_size) > max_bytes)
    file_error(op, path, "the file has " + std::to_string(st.st_size) + " bytes, more than the " +
                             std::to_string(max_bytes) + " this reader accepts");
  std::string bytes(std::size_t(st.st_size), '\0');
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t got = ::read(fd, &bytes[done], bytes.size() - done);
    if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (got < 0) file_error(op, path, std::string("read failed: ") + std::strerror(errno));
    if (got == 0) file_error(op, path, "the file shrank while it was read");
    done += std::size_t(got);
  }
  return bytes;
}

constexpr std::size_t kMaxCompressedBytes = std::size_t(1) << 32;  // 4 GiB of file

bool is_gzip(const std::string& bytes) {
  return bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f && static_cast<unsigned char>(bytes[1]) == 0x8b;
}

// Sequential reads from a file's content, inflated on the fly when it is gzip: memory stays
// what the caller asks for, whatever the compressed data claims.
class ByteStream {
 public:
  ByteStream(const char* op, std::string path, std::string data)
      : op_(op), path_(std::move(path)), data_(std::move(data)), gzip_(is_gzip(data_)) {
    if (gzip_) {
      std::memset(&z_, 0, sizeof z_);
      if (inflateInit2(&z_, 15 + 16) != Z_OK) fail("zlib's inflateInit2 failed");  // 15 + 16: gzip wrapper only
      z_open_ = true;
      z_.next_in = reinterpret_cast<Bytef*>(data_.data());
      z_.avail_in = 0;
    }
  }
  ~ByteStream() {
    if (z_open_) inflateEnd(&z_);
  }
  ByteStream(const ByteStream&) = delete;
  ByteStream& operator=(const ByteStream&) = delete;

  bool compressed() const { return gzip_; }
  std::uint64_t produced() const { return produced_; }

  // Up to n bytes; fewer only at the end of the data.
  std::size_t read(unsigned char* out, std::size_t n) {
    if (!gzip_) {
      const std::size_t k = std::min(n, data_.size() - pos_);
      std::memcpy(out, data_.data() + pos_, k);
      pos_ += k;
      produced_ += k;
      return k;
    }
    std::size_t done = 0;
    while (done < n && !finished_) {
      if (member_ended_) start_next_member();
      if (finished_) break;
      if (z_.avail_in == 0) {
        const std::size_t k = std::min<std::size_t>(data_.size() - pos_, 1u << 30);
        z_.next_in = reinterpret_cast<Bytef*>(data_.data() + pos_);
        z_.avail_in = uInt(k);
        pos_ += k;
      }
      const std::size_t want = std::min<std::size_t>(n - done, 1u << 30);
      z_.next_out = out + done;
      z_.avail_out = uInt(want);
      const int rc = inflate(&z_, Z_NO_FLUSH);
      const std::size_t got = want - z_.avail_out;
      done += got;
      produced_ += got;
      if (rc == Z_STREAM_END) {
        member_ended_ = true;
      } else if (rc == Z_DATA_ERROR) {
        fail(std::string("corrupted gzip data (zlib: ") + (z_.msg ? z_.msg : "invalid data") + ") after " +
             std::to_string(produced_) + " decompressed bytes");
      } else if (rc == Z_MEM_ERROR) {
        fail("zlib ran out of memory");
      } else if (rc == Z_OK || rc == Z_BUF_ERROR) {
        // No progress and no input left: the stream stops before its end marker.
        if (got == 0 && z_.avail_in == 0 && pos_ == data_.size())
          fail("truncated gzip data: the compressed stream ends before its end marker (after " +
               std::to_string(produced_) + " decompressed bytes)");
      } else {
        fail("zlib's inflate failed with code " + std::to_string(rc));
      }
    }
    return done;
  }

  // How many bytes remain (reading them, at most `limit` + 1 counted).
  std::uint64_t drain(std::uint64_t limit) {
    std::uint64_t n = 0;
    std::vector<unsigned char> buf(1 << 16);
    while (n <= limit) {
      const std::size_t got = read(buf.data(), buf.size());
      if (got == 0) break;
      n += got;
    }
    return n;
  }

  [[noreturn]] void fail(const std::string& what) const { file_error(op_, path_, what); }

 private:
  // After a member's end: another member may follow (gzip allows concatenation); anything else
  // is trailing garbage.
  void start_next_member() {
    member_ended_ = false;
    const std::size_t left = z_.avail_in + (data_.size() - pos_);
    if (left == 0) {
      finished_ = true;
      return;
    }
    if (z_.avail_in == 0) {
      z_.next_in = reinterpret_cast<Bytef*>(data_.data() + pos_);
      z_.avail_in = uInt(std::min<std::size_t>(data_.size() - pos_, 1u << 30));
      pos_ += z_.avail_in;
    }
    if (z_.avail_in < 2 || z_.next_in[0] != 0x1f || z_.next_in[1] != 0x8b)
      fail(std::to_string(left) + " trailing bytes after the end of the gzip data (not another gzip member)");
    if (inflateReset(&z_) != Z_OK) fail("zlib's inflateReset failed");
  }

  const char* op_;
  std::string path_;
  std::string data_;
  bool gzip_;
  z_stream z_{};
  bool z_open_ = false, member_ended_ = false, finished_ = false;
  std::size_t pos_ = 0;
  std::uint64_t produced_ = 0;
};

std::uint32_t big_endian_u32(const unsigned char* p) {
  return (std::uint32_t(p[0]) << 24) | (std::uint32_t(p[1]) << 16) | (std::uint32_t(p[2]) << 8) | std::uint32_t(p[3]);
}

bool valid_idx_type(unsigned code) {
  return code == 0x08 || code == 0x09 || code == 0x0B || code == 0x0C || code == 0x0D || code == 0x0E;
}

bool exists_dir(const std::string& dir) {
  std::error_code ec;
  return std::filesystem::is_directory(dir, ec);
}

// A data package's directory must exist; the package's own directory names the apt command.
void require_package_dir(const char* op, const std::string& dir, const char* package_dir, const char* package,
                         const char* what) {
  if (exists_dir(dir)) return;
  if (dir == package_dir)
    throw IOError(std::string(op) + ": " + dir + " does not exist: " + what + " is not installed; install it with: apt-get install " +
                  package);
  throw IOError(std::string(op) + ": directory '" + dir + "' does not exist (Debian's " + package + " package installs " + what +
                " in " + package_dir + ": apt-get install " + package + ")");
}

std::string printable_char(std::uint32_t cp) {
  char hex[16];
  std::snprintf(hex, sizeof hex, "U+%04X", unsigned(cp));
  std::string s = hex;
  const bool scalar_value = cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
  if (scalar_value && cp >= 0x20 && cp != 0x7f && !(cp >= 0x80 && cp < 0xa0)) s += " '" + utf8_encode(cp) + "'";
  return s;
}

}  // namespace

// --- gzip and IDX ---------------------------------------------------------------------------

std::string read_maybe_gzip(const std::string& path, std::size_t max_bytes) {
  ByteStream in("read_maybe_gzip", path, read_regular_file("read_maybe_gzip", path, kMaxCompressedBytes));
  std::string out;
  std::vector<unsigned char> buf(1 << 16);
  for (;;) {
    const std::size_t got = in.read(buf.data(), buf.size());
    if (got == 0) break;
    if (out.size() + got > max_bytes)
      in.fail("more than " + std::to_string(max_bytes) + " bytes of content, the most this caller accepts");
    out.append(reinterpret_cast<const char*>(buf.data()), got);
  }
  return out;
}

std::size_t idx_type_size(IdxType type) {
  switch (type) {
    case IdxType::UInt8: case IdxType::Int8: return 1;
    case IdxType::Int16: return 2;
    case IdxType::Int32: case IdxType::Float32: return 4;
    case IdxType::Float64: return 8;
  }
  return 0;
}

const char* idx_type_name(IdxType type) {
  switch (type) {
    case IdxType::UInt8: return "unsigned byte (0x08)";
    case IdxType::Int8: return "signed byte (0x09)";
    case IdxType::Int16: return "int16 (0x0B)";
    case IdxType::Int32: return "int32 (0x0C)";
    case IdxType::Float32: return "float32 (0x0D)";
    case IdxType::Float64: return "float64 (0x0E)";
  }
  return "unknown";
}

IdxArray read_idx(const std::string& path, const IdxExpect& expect) {
  const char* op = "read_idx";
  ByteStream in(op, path, read_regular_file(op, path, kMaxCompressedBytes));
  const std::string kind = in.compressed() ? "decompressed data" : "file";
  unsigned char magic[4];
  const std::size_t got_magic = in.read(magic, 4);
  if (got_magic < 4)
    in.fail("the " + kind + " has " + std::to_string(got_magic) + " bytes, too short for an IDX magic number (4 bytes)");
  if (magic[0] != 0 || magic[1] != 0 || !valid_idx_type(magic[2]) || magic[3] == 0) {
    char hex[64];
    std::snprintf(hex, sizeof hex, "%02x %02x %02x %02x", magic[0], magic[1], magic[2], magic[3]);
    in.fail(std::string("not an IDX file: magic number ") + hex +
            " (expected 00 00 <type: 08 09 0b 0c 0d 0e> <rank >= 1>, e.g. 00 00 08 03 for images)");
  }
  IdxArray a;
  a.type = IdxType(magic[2]);
  const std::size_t rank = magic[3];
  if (expect.check_type && a.type != expect.type)
    in.fail(std::string("element type ") + idx_type_name(a.type) + ", expected " + idx_type_name(expect.type));
  if (expect.rank != 0 && rank != expect.rank)
    in.fail("rank " + std::to_string(rank) + " (magic number byte 4), expected " + std::to_string(expect.rank));
  std::vector<unsigned char> header(4 * rank);
  const std::size_t got_dims = in.read(header.data(), header.size());
  if (got_dims < header.size())
    in.fail("truncated header: " + std::to_string(rank) + " dimensions need " + std::to_string(header.size()) +
            " bytes after the magic number, the " + kind + " has " + std::to_string(got_dims));
  for (std::size_t d = 0; d < rank; ++d) a.dims.push_back(big_endian_u32(&header[4 * d]));
  if (!expect.trailing_dims.empty()) {
    const auto& t = expect.trailing_dims;
    if (rank < t.size() || !std::equal(t.begin(), t.end(), a.dims.end() - std::ptrdiff_t(t.size())))
      in.fail("dimensions " + shape_str(a.dims) + ", expected (N, " + shape_str(t).substr(1));
  }
  const std::size_t elem = idx_type_size(a.type);
  // Each dim < 2^32 and rank <= 255: the product is checked step by step against the limit.
  std::uint64_t count = 1;
  const std::uint64_t limit = max_tensor_bytes() / elem;
  for (std::size_t d : a.dims) {
    if (d != 0 && count > limit / d)
      in.fail("dimensions " + shape_str(a.dims) + " declare more than max_tensor_bytes() = " +
              std::to_string(max_tensor_bytes()) + " bytes of data");
    count *= d;
  }
  const std::uint64_t nbytes = count * elem;
  a.bytes.resize(std::size_t(nbytes));
  const std::size_t got = nbytes ? in.read(a.bytes.data(), std::size_t(nbytes)) : 0;
  if (got < nbytes)
    in.fail("truncated data: the header declares " + shape_str(a.dims) + " " + idx_type_name(a.type) + " = " +
            std::to_string(nbytes) + " bytes after the " + std::to_string(4 + header.size()) + "-byte header, the " +
            kind + " has " + std::to_string(got));
  const std::uint64_t extra = in.drain(std::uint64_t(1) << 30);
  if (extra > 0)
    in.fail(std::to_string(extra) + (extra > (std::uint64_t(1) << 30) ? "+" : "") + " trailing bytes after the " +
            std::to_string(nbytes) + " bytes of data the header declares " + shape_str(a.dims) +
            " (the count in the header is wrong or the file is not what it claims)");
  if (elem > 1) {  // big-endian to host order
    const std::uint16_t probe = 1;
    unsigned char first;
    std::memcpy(&first, &probe, 1);
    if (first == 1)
      for (std::size_t i = 0; i < a.bytes.size(); i += elem) std::reverse(&a.bytes[i], &a.bytes[i] + elem);
  }
  return a;
}

// --- Fashion-MNIST --------------------------------------------------------------------------

const std::vector<std::string>& fashion_mnist_class_names() {
  static const std::vector<std::string> names{"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  return names;
}

FashionMnist load_fashion_mnist(const std::string& dir, PixelScale scale) {
  const char* op = "load_fashion_mnist";
  require_package_dir(op, dir, kFashionMnistDir, "dataset-fashion-mnist", "the Fashion-MNIST data set");
  auto load = [&](const std::string& prefix, Tensor& images, Tensor& labels) {
    const std::string image_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
    const std::string label_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
    IdxExpect ei;
    ei.check_type = true, ei.rank = 3, ei.trailing_dims = {28, 28};
    IdxArray im = read_idx(image_path, ei);
    IdxExpect el;
    el.check_type = true, el.rank = 1;
    IdxArray lb = read_idx(label_path, el);
    const std::size_t n = im.dims[0];
    if (n == 0) file_error(op, image_path, "holds no images (N = 0)");
    if (lb.dims[0] != n)
      file_error(op, label_path, std::to_string(lb.dims[0]) + " labels, but " + image_path + " has " + std::to_string(n) + " images");
    std::vector<std::int64_t> lv(n);
    for (std::size_t i = 0; i < n; ++i) {
      if (lb.bytes[i] > 9)
        file_error(op, label_path, "label " + std::to_string(int(lb.bytes[i])) + " at index " + std::to_string(i) +
                                       " is not a class (0 to 9)");
      lv[i] = lb.bytes[i];
    }
    images = zeros({n, 28, 28});
    float* p = images.mutable_data<float>();
    const float k = scale == PixelScale::Unit ? 255.0f : 1.0f;  // v / 255 correctly rounded, as torchvision's ToTensor
    for (std::size_t i = 0; i < im.bytes.size(); ++i) p[i] = float(im.bytes[i]) / k;
    labels = index_tensor(lv, {n});
  };
  FashionMnist d;
  load("train", d.train_images, d.train_labels);
  load("t10k", d.test_images, d.test_labels);
  d.class_names = fashion_mnist_class_names();
  d.dir = dir;
  return d;
}

namespace {
std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}
std::vector<std::string> table_cells(const std::string& line) {
  std::vector<std::string> cells;
  std::size_t b = line.find('|');
  while (b != std::string::npos) {
    const std::size_t e = line.find('|', b + 1);
    if (e == std::string::npos) break;
    cells.push_back(trim(line.substr(b + 1, e - b - 1)));
    b = e;
  }
  return cells;
}
}  // namespace

std::vector<PublishedBaseline> fashion_mnist_baselines(const std::string& doc_dir) {
  const char* op = "fashion_mnist_baselines";
  require_package_dir(op, doc_dir, kFashionMnistDocDir, "dataset-fashion-mnist", "the Fashion-MNIST documentation");
  const std::string path = doc_dir + "/README.md.gz";
  const std::string text = read_maybe_gzip(path, std::size_t(64) << 20);
  std::vector<PublishedBaseline> rows;
  std::size_t b = 0;
  int accuracy_col = -1, preprocessing_col = -1;
  while (b < text.size()) {
    std::size_t e = text.find('\n', b);
    if (e == std::string::npos) e = text.size();
    const std::string line = trim(text.substr(b, e - b));
    b = e + 1;
    if (line.empty() || line[0] != '|') {
      if (accuracy_col >= 0 && !rows.empty()) break;  // the table ended
      continue;
    }
    const auto cells = table_cells(line);
    if (accuracy_col < 0) {
      for (std::size_t c = 0; c < cells.size(); ++c) {
        if (cells[c] == "Fashion test accuracy") accuracy_col = int(c);
        if (cells[c] == "Preprocessing") preprocessing_col = int(c);
      }
      continue;
    }
    if (int(cells.size()) <= accuracy_col || cells[0].empty() || cells[0].find("---") != std::string::npos) continue;
    char* end = nullptr;
    const double acc = std::strtod(cells[std::size_t(accuracy_col)].c_str(), &end);
    if (end == cells[std::size_t(accuracy_col)].c_str() || !(acc > 0 && acc <= 1)) continue;  // e.g. "-"
    rows.push_back({cells[0], preprocessing_col >= 0 ? cells[std::size_t(preprocessing_col)] : "", acc});
  }
  if (rows.empty()) file_error(op, path, "has no benchmark table with a 'Fashion test accuracy' column");
  return rows;
}

std::vector<std::string> fashion_mnist_sklearn_classifiers(const std::string& doc_dir) {
  const char* op = "fashion_mnist_sklearn_classifiers";
  require_package_dir(op, doc_dir, kFashionMnistDocDir, "dataset-fashion-mnist", "the Fashion-MNIST documentation");
  const std::string path = doc_dir + "/benchmark/baselines.json";
  const std::string text = read_regular_file(op, path, std::size_t(1) << 20);
  // {"common": {...}, "classifiers": {"Name": [...], ...}}: the keys of "classifiers" at depth 2.
  std::vector<std::string> names;
  const std::size_t at = text.find("\"classifiers\"");
  if (at == std::string::npos) file_error(op, path, "has no \"classifiers\" object");
  int depth = 0;
  bool in_string = false;
  std::string current;
  for (std::size_t i = text.find('{', at); i != std::string::npos && i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') { ++i; continue; }
      if (c == '"') {
        in_string = false;
        std::size_t j = text.find_first_not_of(" \t\r\n", i + 1);
        if (depth == 1 && j != std::string::npos && text[j] == ':') names.push_back(current);
      } else {
        current += c;
      }
      continue;
    }
    if (c == '"') in_string = true, current.clear();
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && --depth == 0) break;
  }
  if (names.empty()) file_error(op, path, "lists no classifiers");
  return names;
}

// --- UTF-8 ----------------------------------------------------------------------------------

namespace {
// Decodes into `out`; on invalid input returns false with the byte offset and the reason.
bool decode_utf8(const std::string& text, std::vector<std::uint32_t>& out, std::size_t& bad_at, const char*& why) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  for (std::size_t i = 0; i < n;) {
    const unsigned c = s[i];
    bad_at = i;
    if (c < 0x80) {
      out.push_back(c);
      ++i;
      continue;
    }
    std::size_t len = 0;
    std::uint32_t cp = 0, min = 0;
    if ((c & 0xe0) == 0xc0) len = 2, cp = c & 0x1f, min = 0x80;
    else if ((c & 0xf0) == 0xe0) len = 3, cp = c & 0x0f, min = 0x800;
    else if ((c & 0xf8) == 0xf0) len = 4, cp = c & 0x07, min = 0x10000;
    else return why = "not a leading byte", false;
    if (i + len > n) return why = "a multi-byte sequence is cut short", false;
    for (std::size_t k = 1; k < len; ++k) {
      if ((s[i + k] & 0xc0) != 0x80) return why = "a continuation byte is missing", false;
      cp = (cp << 6) | (s[i + k] & 0x3f);
    }
    if (cp < min) return why = "overlong encoding", false;
    if (cp > 0x10ffff) return why = "past U+10FFFF", false;
    if (cp >= 0xd800 && cp <= 0xdfff) return why = "a UTF-16 surrogate", false;
    out.push_back(cp);
    i += len;
  }
  return true;
}
}  // namespace

std::vector<std::uint32_t> utf8_decode(const std::string& text, const std::string& what) {
  std::vector<std::uint32_t> out;
  out.reserve(text.size());
  std::size_t at = 0;
  const char* why = "";
  if (!decode_utf8(text, out, at, why))
    throw_error<ValueError>("utf8_decode", what, ": invalid UTF-8 at byte offset ", at, " (", why, ")");
  return out;
}

std::string utf8_encode(std::uint32_t cp) {
  if ((cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
    throw_error<ValueError>("utf8_encode", "code point ", cp, cp > 0x10ffff ? " is past U+10FFFF" : " is a UTF-16 surrogate",
                            ": not a Unicode scalar value");
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xc0 | (cp >> 6)), s += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    s += char(0xe0 | (cp >> 12)), s += char(0x80 | ((cp >> 6) & 0x3f)), s += char(0x80 | (cp & 0x3f));
  } else {
    s += char(0xf0 | (cp >> 18)), s += char(0x80 | ((cp >> 12) & 0x3f)), s += char(0x80 | ((cp >> 6) & 0x3f));
    s += char(0x80 | (cp & 0x3f));
  }
  return s;
}

// --- fortunes -------------------------------------------------------------------------------

TextCorpus load_fortunes(const std::string& dir, std::size_t max_files) {
  const char* op = "load_fortunes";
  require_package_dir(op, dir, kFortunesDir, "fortunes", "the fortune files");
  namespace fs = std::filesystem;
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const fs::file_status st = it->symlink_status(ec);
    if (ec) break;
    const std::string name = it->path().filename().string();
    auto ends_with = [&](const char* suffix) {
      const std::size_t k = std::strlen(suffix);
      return name.size() >= k && name.compare(name.size() - k, k, suffix) == 0;
    };
    if (!fs::is_regular_file(st) || ends_with(".dat") || ends_with(".u8") || name[0] == '.') continue;
    names.push_back(name);
  }
  if (ec) throw IOError(std::string(op) + ": cannot list '" + dir + "': " + ec.message());
  std::sort(names.begin(), names.end());
  if (max_files > 0 && names.size() > max_files) names.resize(max_files);
  if (names.empty()) throw IOError(std::string(op) + ": '" + dir + "' holds no fortune files (plain-text files besides *.dat)");
  TextCorpus c;
  for (const auto& name : names) {
    const std::string path = dir + "/" + name;
    const std::string text = read_regular_file(op, path, std::size_t(256) << 20);
    std::vector<std::uint32_t> cps;
    std::size_t at = 0;
    const char* why = "";
    if (!decode_utf8(text, cps, at, why))
      file_error(op, path, "not UTF-8 text: invalid byte sequence at byte offset " + std::to_string(at) + " (" + why + ")");
    std::string entry;
    std::size_t b = 0;
    auto flush = [&] {
      if (entry.find_first_not_of(" \t\r\n") != std::string::npos) {
        c.documents.push_back(entry);
        c.sources.push_back(name);
      }
      entry.clear();
    };
    while (b < text.size()) {
      std::size_t e = text.find('\n', b);
      const bool last = e == std::string::npos;
      if (last) e = text.size();
      const std::string line = text.substr(b, e - b);
      b = e + 1;
      if (line == "%" || line == "%\r") flush();
      else entry += line + "\n";
    }
    flush();
    c.files.push_back(name);
  }
  return c;
}

DocumentSplit split_documents(std::size_t n, double train_fraction, std::uint64_t seed) {
  if (!(train_fraction > 0 && train_fraction < 1))
    throw_error<ValueError>("split_documents", "argument 'train_fraction' must be in (0, 1), got ", train_fraction);
  if (n < 2) throw_error<ValueError>("split_documents", "need at least 2 documents to split, got ", n);
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  Rng rng(seed);
  for (std::size_t i = n - 1; i > 0; --i) std::swap(order[i], order[std::size_t(rng.uniform_int(0, std::int64_t(i)))]);
  const std::size_t n_train = std::clamp<std::size_t>(std::size_t(std::llround(train_fraction * double(n))), 1, n - 1);
  DocumentSplit s;
  s.train.assign(order.begin(), order.begin() + std::ptrdiff_t(n_train));
  s.validation.assign(order.begin() + std::ptrdiff_t(n_train), order.end());
  std::sort(s.train.begin(), s.train.end());
  std::sort(s.validation.begin(), s.validation.end());
  return s;
}

// --- CharVocab ------------------------------------------------------------------------------

CharVocab::CharVocab(const std::vector<std::string>& texts) {
  std::vector<bool> seen;
  for (std::size_t t = 0; t < texts.size(); ++t)
    for (std::uint32_t cp : utf8_decode(texts[t], "CharVocab: text " + std::to_string(t))) {
      if (cp >= seen.size()) seen.resize(std::size_t(cp) + 1, false);
      seen[cp] = true;
    }
  for (std::size_t cp = 0; cp < seen.size(); ++cp)
    if (seen[cp]) chars_.push_back(std::uint32_t(cp));
}

CharVocab CharVocab::from_code_points(std::vector<std::uint32_t> cps) {
  for (std::size_t i = 0; i < cps.size(); ++i) {
    if (cps[i] > 0x10ffff || (cps[i] >= 0xd800 && cps[i] <= 0xdfff))
      throw_error<ValueError>("CharVocab::from_code_points", "entry ", i, " (", std::to_string(cps[i]), ") is not a Unicode code point");
    if (i > 0 && cps[i] <= cps[i - 1])
      throw_error<ValueError>("CharVocab::from_code_points", "entries must be strictly increasing; entry ", i, " (",
                              std::to_string(cps[i]), ") follows ", std::to_string(cps[i - 1]));
  }
  CharVocab v;
  v.chars_ = std::move(cps);
  return v;
}

bool CharVocab::contains(std::uint32_t cp) const { return std::binary_search(chars_.begin(), chars_.end(), cp); }

std::vector<std::int64_t> CharVocab::encode(const std::string& text, const std::string& what) const {
  const std::vector<std::uint32_t> cps = utf8_decode(text, what);
  std::vector<std::int64_t> ids(cps.size());
  for (std::size_t i = 0; i < cps.size(); ++i) {
    auto it = std::lower_bound(chars_.begin(), chars_.end(), cps[i]);
    if (it == chars_.end() || *it != cps[i])
      throw_error<ValueError>("CharVocab::encode", what, ": character ", printable_char(cps[i]), " at position ", i,
                              " is not in the vocabulary (", chars_.size(), " characters seen in the training text)");
    ids[i] = std::int64_t(it - chars_.begin());
  }
  return ids;
}

std::string CharVocab::decode(const std::vector<std::int64_t>& ids) const {
  std::string s;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || std::uint64_t(ids[i]) >= chars_.size())
      throw_error<IndexError>("CharVocab::decode", "id ", ids[i], " at position ", i, " is outside [0, ", chars_.size(), ")");
    s += utf8_encode(chars_[std::size_t(ids[i])]);
  }
  return s;
}

}  // namespace xgrad
