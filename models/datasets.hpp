// xgrad/models/datasets.hpp — readers for real data sets that Debian ships as packages:
// Fashion-MNIST (IDX files, gzip; package dataset-fashion-mnist) and the fortunes text
// (package fortunes), plus a character vocabulary for character-level language models.
//
// Every problem with a file (missing, not a regular file, not gzip where gzip is expected,
// corrupted or truncated gzip data, a wrong IDX magic number, dtype code, rank or size, a byte
// count that does not match the header, a label out of range) is an IOError naming the file
// and what is wrong; nothing is returned partially filled. A missing data package names the
// apt-get command that installs it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// --- gzip and IDX ---------------------------------------------------------------------------

// The whole content of `path`: inflated when the file starts with the gzip magic bytes
// (1f 8b; every member of a multi-member file, CRC-32 and length checked by zlib), the bytes as
// they are otherwise. At most `max_bytes` bytes are produced (IOError past that: a gzip bomb or
// the wrong file). Only a regular file is read.
std::string read_maybe_gzip(const std::string& path, std::size_t max_bytes);

// The element types of the IDX format (the third byte of its magic number).
enum class IdxType : std::uint8_t { UInt8 = 0x08, Int8 = 0x09, Int16 = 0x0B, Int32 = 0x0C, Float32 = 0x0D, Float64 = 0x0E };
std::size_t idx_type_size(IdxType type);  // 1, 1, 2, 4, 4, 8
const char* idx_type_name(IdxType type);  // "unsigned byte", ...

// An IDX file: magic 00 00 <type code> <rank>, `rank` big-endian uint32 dimensions, then
// exactly prod(dims) elements, big-endian (http://yann.lecun.com/exdb/mnist/ describes it).
struct IdxArray {
  IdxType type = IdxType::UInt8;
  Shape dims;
  std::vector<unsigned char> bytes;  // prod(dims) * idx_type_size(type) bytes, host byte order
};

// What read_idx requires besides a well-formed file; a mismatch is an IOError naming the file,
// the expected and the found value. Unset fields are not checked.
struct IdxExpect {
  bool check_type = false;
  IdxType type = IdxType::UInt8;
  std::size_t rank = 0;      // 0: any rank (1 to 255)
  Shape trailing_dims;       // the last dims, e.g. {28, 28} for images; empty: any
};

// Reads a .gz (or uncompressed) IDX file. Checks the magic number's two zero bytes, the type
// code, the rank (>= 1), that the element count fits max_tensor_bytes(), the exact byte count
// (a truncated file and trailing bytes are both errors) and `expect`.
IdxArray read_idx(const std::string& path, const IdxExpect& expect = {});

// --- Fashion-MNIST --------------------------------------------------------------------------

// Where Debian's dataset-fashion-mnist installs the four IDX files and its documentation.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kFashionMnistDocDir = "/usr/share/doc/dataset-fashion-mnist";

enum class PixelScale { Unit, Raw };  // Unit: value / 255 in [0, 1]; Raw: 0 .. 255 as float

struct FashionMnist {
  Tensor train_images;  // (60000, 28, 28) float32
  Tensor train_labels;  // (60000) int64 in [0, 10)
  Tensor test_images;   // (10000, 28, 28) float32
  Tensor test_labels;   // (10000) int64 in [0, 10)
  std::vector<std::string> class_names;  // the 10 names, label order ("T-shirt/top", ...)
  std::string dir;
};

// The ten class names of Fashion-MNIST, label order.
const std::vector<std::string>& fashion_mnist_class_names();

// Reads train-images-idx3-ubyte.gz, train-labels-idx1-ubyte.gz, t10k-images-idx3-ubyte.gz and
// t10k-labels-idx1-ubyte.gz from `dir`. Images must be unsigned-byte rank-3 (N, 28, 28), labels
// unsigned-byte rank-1 (N) with the same N and values 0..9 (IOError otherwise). When `dir` is
// the package's directory and it is missing: IOError "... install it with: apt-get install
// dataset-fashion-mnist".
FashionMnist load_fashion_mnist(const std::string& dir = kFashionMnistDir, PixelScale scale = PixelScale::Unit);

// One row of the benchmark table that the package's README.md.gz publishes ("submitted
// benchmarks", not re-run by the data set's authors): classifier, preprocessing, Fashion test
// accuracy in [0, 1].
struct PublishedBaseline {
  std::string classifier;
  std::string preprocessing;
  double accuracy = 0;
};

// The published results in the package's doc folder: the rows of README.md.gz's benchmark
// table, in the order the README lists them. IOError when the file is missing or has no such
// table. (The package's benchmark/baselines.json lists the scikit-learn classifiers and
// parameter grids of the authors' automatic benchmark; its accuracies are not in the package:
// fashion_mnist_sklearn_classifiers() returns the classifier names.)
std::vector<PublishedBaseline> fashion_mnist_baselines(const std::string& doc_dir = kFashionMnistDocDir);
std::vector<std::string> fashion_mnist_sklearn_classifiers(const std::string& doc_dir = kFashionMnistDocDir);

// --- text: fortunes and a character vocabulary ----------------------------------------------

inline constexpr const char* kFortunesDir = "/usr/share/games/fortunes";

// Documents of a text corpus, with the file each came from.
struct TextCorpus {
  std::vector<std::string> documents;  // UTF-8, each ending with "\n"
  std::vector<std::string> sources;    // file name (without directory) of each document
  std::vector<std::string> files;      // the files read, sorted
};

// The fortune files of `dir` (the fortunes package's plain-text files, entries separated by
// lines holding only "%"). Read: the regular files of `dir` itself, sorted by name; skipped:
// the strfile indexes (*.dat), the *.u8 links (the same files again), subdirectories such as
// off/ (the offensive fortunes of fortunes-off, if installed) and any other symbolic link.
// Empty entries are dropped. A file that is not valid UTF-8 is an IOError naming the file and
// the byte offset. Missing `dir` (the package's): IOError "... install it with: apt-get install
// fortunes". With max_files > 0, only the first max_files files (in name order).
TextCorpus load_fortunes(const std::string& dir = kFortunesDir, std::size_t max_files = 0);

// Splits documents into a training and a held-out part by document: a seeded permutation
// (xgrad::Rng, Fisher-Yates), the first round(train_fraction * n) documents train, the rest
// validate; each part keeps the corpus order. 0 < train_fraction < 1 and at least one document
// on each side, else ValueError.
struct DocumentSplit {
  std::vector<std::size_t> train, validation;  // document indices
};
DocumentSplit split_documents(std::size_t num_documents, double train_fraction, std::uint64_t seed);

// A character (Unicode code point) vocabulary: ids 0 .. size()-1 in code-point order.
class CharVocab {
 public:
  CharVocab() = default;
  // Every code point that occurs in `texts` (UTF-8; ValueError on invalid UTF-8).
  explicit CharVocab(const std::vector<std::string>& texts);
  // From a stored list of code points (e.g. a checkpoint's metadata): strictly increasing,
  // each a valid code point, else ValueError.
  static CharVocab from_code_points(std::vector<std::uint32_t> code_points);

  std::size_t size() const { return chars_.size(); }
  const std::vector<std::uint32_t>& code_points() const { return chars_; }
  bool contains(std::uint32_t code_point) const;
  // ids of the characters of `text`. A character outside the vocabulary is a ValueError
  // naming it (as U+XXXX and, when printable, itself), its position and `what`.
  std::vector<std::int64_t> encode(const std::string& text, const std::string& what = "text") const;
  // The UTF-8 text of `ids` (IndexError for an id outside [0, size())).
  std::string decode(const std::vector<std::int64_t>& ids) const;
  std::string decode(std::int64_t id) const { return decode(std::vector<std::int64_t>{id}); }

 private:
  std::vector<std::uint32_t> chars_;
};

// Code points of a UTF-8 string; ValueError naming `what` and the byte offset of the first
// invalid sequence (overlong forms, surrogates and values past U+10FFFF are invalid).
std::vector<std::uint32_t> utf8_decode(const std::string& text, const std::string& what = "text");
// The UTF-8 bytes of a Unicode scalar value; ValueError for a surrogate (U+D800-U+DFFF) or a
// value past U+10FFFF.
std::string utf8_encode(std::uint32_t code_point);

}  // namespace xgrad
