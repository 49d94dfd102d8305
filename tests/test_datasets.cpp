// Data readers (models/datasets.hpp): IDX files, plain and gzip (crafted here with zlib), every
// malformed-file class rejected with an IOError naming the file and the problem, Fashion-MNIST
// and fortunes directories, the document split and the character vocabulary; and, when the
// Debian packages are installed, the real files' counts.
#include <sys/stat.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "helpers.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/models/datasets.hpp"

using namespace xgrad;
using xgrad::test::TmpDir;

namespace {

std::string gzip(const std::string& data) {
  z_stream z{};
  BOOST_REQUIRE(deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, uLong(data.size())) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(data.data()));
  z.avail_in = uInt(data.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(out.size());
  BOOST_REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

std::string be32(std::uint32_t v) {
  return {char(v >> 24), char((v >> 16) & 0xff), char((v >> 8) & 0xff), char(v & 0xff)};
}

// An IDX header: 00 00 type rank, then the dims.
std::string idx_header(unsigned type, const std::vector<std::uint32_t>& dims) {
  std::string h{char(0), char(0), char(type), char(dims.size())};
  for (auto d : dims) h += be32(d);
  return h;
}

std::string ubytes(std::size_t n, unsigned start = 0) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += char((start + i) % 256);
  return s;
}

// The IOError of read_idx(path, expect) must name the file and contain `what`.
void expect_idx_error(const std::string& path, const std::string& what, const IdxExpect& expect = {}) {
  BOOST_TEST_CONTEXT("file " << path << ", expecting '" << what << "'") {
    try {
      (void)read_idx(path, expect);
      BOOST_ERROR("read_idx accepted the file");
    } catch (const IOError& e) {
      const std::string m = e.what();
      BOOST_TEST(m.find("read_idx: '" + path + "'") != std::string::npos, m);
      BOOST_TEST(m.find(what) != std::string::npos, m);
    }
  }
}

template <class F>
void expect_io_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    BOOST_ERROR("no IOError");
  } catch (const IOError& e) {
    const std::string m = e.what();
    for (const auto& p : parts) BOOST_TEST(m.find(p) != std::string::npos, "'" << p << "' not in: " << m);
  }
}

// A Fashion-MNIST-shaped directory with n_train / n_test images of 28x28.
void write_fashion_dir(const std::string& dir, std::uint32_t n_train, std::uint32_t n_test) {
  std::filesystem::create_directories(dir);
  auto write_set = [&](const std::string& prefix, std::uint32_t n) {
    write_file(dir + "/" + prefix + "-images-idx3-ubyte.gz", gzip(idx_header(0x08, {n, 28, 28}) + ubytes(n * 784)));
    std::string labels;
    for (std::uint32_t i = 0; i < n; ++i) labels += char(i % 10);
    write_file(dir + "/" + prefix + "-labels-idx1-ubyte.gz", gzip(idx_header(0x08, {n}) + labels));
  };
  write_set("train", n_train);
  write_set("t10k", n_test);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(datasets)

BOOST_AUTO_TEST_CASE(idx_round_trips_gzip_plain_multi_member_and_big_endian) {
  TmpDir tmp;
  const std::string body = idx_header(0x08, {3, 4, 5}) + ubytes(60, 7);
  write_file(tmp / "a.gz", gzip(body));
  write_file(tmp / "a.idx", body);
  // gzip allows concatenated members: the data continues in the second one.
  write_file(tmp / "multi.gz", gzip(body.substr(0, 25)) + gzip(body.substr(25)));
  for (const char* name : {"a.gz", "a.idx", "multi.gz"}) {
    BOOST_TEST_CONTEXT(name) {
      IdxArray a = read_idx(tmp / name);
      BOOST_TEST((a.type == IdxType::UInt8));
      BOOST_TEST(a.dims == Shape({3, 4, 5}), shape_str(a.dims));
      BOOST_REQUIRE(a.bytes.size() == 60u);
      for (std::size_t i = 0; i < 60; ++i) BOOST_TEST(a.bytes[i] == (7 + i) % 256);
    }
  }
  // int32 elements are big-endian in the file, host order in memory.
  write_file(tmp / "i32.gz", gzip(idx_header(0x0C, {2}) + be32(0x01020304) + be32(0xfffffffe)));
  IdxArray b = read_idx(tmp / "i32.gz");
  BOOST_TEST((b.type == IdxType::Int32));
  BOOST_REQUIRE(b.bytes.size() == 8u);
  std::int32_t v[2];
  std::memcpy(v, b.bytes.data(), 8);
  BOOST_TEST(v[0] == 0x01020304);
  BOOST_TEST(v[1] == -2);
  // An empty array is well-formed.
  write_file(tmp / "empty.gz", gzip(idx_header(0x08, {0, 28, 28})));
  BOOST_TEST(read_idx(tmp / "empty.gz").bytes.empty());
  BOOST_TEST(read_maybe_gzip(tmp / "a.gz", 1000) == body);
  BOOST_TEST(read_maybe_gzip(tmp / "a.idx", 1000) == body);
}

BOOST_AUTO_TEST_CASE(idx_every_malformed_file_is_an_io_error_naming_file_and_problem) {
  TmpDir tmp;
  const std::string good = idx_header(0x08, {10}) + ubytes(10);
  const std::string gz = gzip(good);
  auto file = [&](const std::string& name, const std::string& bytes) {
    write_file(tmp / name, bytes);
    return tmp / name;
  };
  expect_idx_error(tmp / "missing.gz", "cannot open: No such file or directory");
  std::filesystem::create_directory(tmp / "dir.gz");
  expect_idx_error(tmp / "dir.gz", "is a directory");
  BOOST_REQUIRE(::mkfifo((tmp / "fifo.gz").c_str(), 0600) == 0);
  expect_idx_error(tmp / "fifo.gz", "not a regular file");  // refused without blocking
  expect_idx_error(file("empty", ""), "has 0 bytes, too short for an IDX magic number");
  expect_idx_error(file("empty.gz", gzip("")), "decompressed data has 0 bytes, too short");
  expect_idx_error(file("magic.gz", gzip("\x12\x34\x08\x01" + be32(10) + ubytes(10))), "not an IDX file: magic number 12 34 08 01");
  expect_idx_error(file("type.gz", gzip(idx_header(0x07, {10}) + ubytes(10))), "magic number 00 00 07 01");
  expect_idx_error(file("rank0.gz", gzip(idx_header(0x08, {}))), "magic number 00 00 08 00");
  expect_idx_error(file("header.gz", gzip(idx_header(0x08, {10, 28, 28}).substr(0, 9))),
                   "truncated header: 3 dimensions need 12 bytes after the magic number, the decompressed data has 5");
  expect_idx_error(file("short.gz", gzip(good.substr(0, good.size() - 1))),
                   "truncated data: the header declares (10) unsigned byte (0x08) = 10 bytes after the 8-byte header, "
                   "the decompressed data has 9");
  expect_idx_error(file("short.idx", good.substr(0, good.size() - 3)), "the file has 7");
  expect_idx_error(file("long.gz", gzip(good + "xy")), "2 trailing bytes after the 10 bytes of data the header declares (10)");
  // The compressed stream cut short, a flipped CRC-32 byte, a flipped data byte, garbage after it.
  expect_idx_error(file("cut.gz", gz.substr(0, gz.size() / 2)), "truncated gzip data: the compressed stream ends before its end marker");
  std::string crc = gz;
  crc[crc.size() - 8] = char(crc[crc.size() - 8] ^ 0x5a);
  expect_idx_error(file("crc.gz", crc), "corrupted gzip data (zlib: incorrect data check)");
  std::string len = gz;
  len[len.size() - 4] = char(len[len.size() - 4] ^ 0x01);
  expect_idx_error(file("len.gz", len), "corrupted gzip data (zlib: incorrect length check)");
  std::string header = gz;
  header[2] = 7;  // compression method 7 instead of 8 (deflate)
  expect_idx_error(file("method.gz", header), "corrupted gzip data (zlib: unknown compression method)");
  expect_idx_error(file("garbage.gz", gz + "garbage"), "7 trailing bytes after the end of the gzip data (not another gzip member)");
  // Absurd dims: refused before anything is allocated.
  expect_idx_error(file("huge.gz", gzip(idx_header(0x0E, {0xffffffffu, 0xffffffffu, 4}))), "declare more than max_tensor_bytes()");
  // Expectations of the caller.
  IdxExpect images;
  images.check_type = true, images.rank = 3, images.trailing_dims = {28, 28};
  expect_idx_error(file("rank.gz", gz), "rank 1 (magic number byte 4), expected 3", images);
  expect_idx_error(file("i32.gz", gzip(idx_header(0x0C, {1, 28, 28}) + std::string(784 * 4, '\0'))),
                   "element type int32 (0x0C), expected unsigned byte (0x08)", images);
  expect_idx_error(file("27.gz", gzip(idx_header(0x08, {1, 27, 28}) + ubytes(27 * 28))),
                   "dimensions (1, 27, 28), expected (N, 28, 28)", images);
  // A gzip bomb against read_maybe_gzip's limit.
  expect_io_error([&] { (void)read_maybe_gzip(file("bomb.gz", gzip(std::string(1 << 20, 'a'))), 1000); },
                  {"read_maybe_gzip: '" + tmp / "bomb.gz" + "'", "more than 1000 bytes of content"});
}

BOOST_AUTO_TEST_CASE(fashion_mnist_directory_checks) {
  TmpDir tmp;
  const std::string dir = tmp / "fm";
  write_fashion_dir(dir, 12, 5);
  FashionMnist d = load_fashion_mnist(dir);
  BOOST_TEST(d.train_images.shape() == Shape({12, 28, 28}));
  BOOST_TEST(d.train_labels.shape() == Shape({12}));
  BOOST_TEST(d.test_images.shape() == Shape({5, 28, 28}));
  BOOST_TEST(d.train_labels.dtype() == DType::Int64);
  BOOST_TEST(d.train_images.dtype() == DType::Float32);
  BOOST_TEST(d.class_names.size() == 10u);
  BOOST_TEST(d.class_names[9] == "Ankle boot");
  BOOST_TEST(d.train_labels.data<std::int64_t>()[11] == 1);
  // Pixel k of the stream is k % 256: scaled to [0, 1] or kept raw.
  BOOST_TEST(d.train_images.data<float>()[255] == 1.0f);
  BOOST_TEST(d.train_images.data<float>()[51] == 0.2f);
  FashionMnist raw = load_fashion_mnist(dir, PixelScale::Raw);
  BOOST_TEST(raw.train_images.data<float>()[300] == 44.0f);

  expect_io_error([&] { (void)load_fashion_mnist(tmp / "nowhere"); },
                  {"load_fashion_mnist: directory '" + tmp / "nowhere" + "' does not exist",
                   "apt-get install dataset-fashion-mnist"});
  std::filesystem::remove(dir + "/t10k-labels-idx1-ubyte.gz");
  expect_io_error([&] { (void)load_fashion_mnist(dir); },
                  {"read_idx: '" + dir + "/t10k-labels-idx1-ubyte.gz': cannot open"});
  write_file(dir + "/t10k-labels-idx1-ubyte.gz", gzip(idx_header(0x08, {4}) + std::string(4, '\1')));
  expect_io_error([&] { (void)load_fashion_mnist(dir); },
                  {"load_fashion_mnist: '" + dir + "/t10k-labels-idx1-ubyte.gz': 4 labels, but", "has 5 images"});
  write_file(dir + "/t10k-labels-idx1-ubyte.gz", gzip(idx_header(0x08, {5}) + std::string("\1\2\3\12\4")));
  expect_io_error([&] { (void)load_fashion_mnist(dir); }, {"label 10 at index 3 is not a class (0 to 9)"});
  write_file(dir + "/t10k-labels-idx1-ubyte.gz", gzip(idx_header(0x08, {5, 1}) + std::string(5, '\1')));
  expect_io_error([&] { (void)load_fashion_mnist(dir); }, {"rank 2 (magic number byte 4), expected 1"});

  // The published benchmark table of a README.md.gz.
  const std::string doc = tmp / "doc";
  std::filesystem::create_directories(doc + "/benchmark");
  write_file(doc + "/README.md.gz",
             gzip("# x\n\n| Classifier | Preprocessing | Fashion test accuracy | MNIST test accuracy |\n"
                  "| --- | --- | --- | --- |\n|2 Conv | None | 0.916| - |\n|MLP 256-128-100| None | 0.8833| - |\n"
                  "|Human | - | - | - |\n\nafter\n| other | table |\n"));
  auto rows = fashion_mnist_baselines(doc);
  BOOST_REQUIRE(rows.size() == 2u);
  BOOST_TEST(rows[1].classifier == "MLP 256-128-100");
  BOOST_TEST(rows[1].preprocessing == "None");
  BOOST_TEST(rows[1].accuracy == 0.8833);
  write_file(doc + "/benchmark/baselines.json",
             "{\"common\": {}, \"classifiers\": {\"SVC\": [{\"C\": [1.0]}], \"MLPClassifier\": [{\"a\": {\"b\": 1}}]}}");
  BOOST_TEST(fashion_mnist_sklearn_classifiers(doc) == std::vector<std::string>({"SVC", "MLPClassifier"}));
  write_file(doc + "/README.md.gz", gzip("no table\n"));
  expect_io_error([&] { (void)fashion_mnist_baselines(doc); }, {"README.md.gz': has no benchmark table"});
}

BOOST_AUTO_TEST_CASE(fashion_mnist_package_files) {
  if (!std::filesystem::is_directory(kFashionMnistDir)) {
    // CI installs the package; tests/examples/run_real_data.sh fails without it.
    expect_io_error([] { (void)load_fashion_mnist(); }, {"install it with: apt-get install dataset-fashion-mnist"});
    return;
  }
  FashionMnist d = load_fashion_mnist();
  BOOST_TEST(d.train_images.shape() == Shape({60000, 28, 28}));
  BOOST_TEST(d.train_labels.shape() == Shape({60000}));
  BOOST_TEST(d.test_images.shape() == Shape({10000, 28, 28}));
  BOOST_TEST(d.test_labels.shape() == Shape({10000}));
  std::vector<int> count(10, 0);
  for (std::size_t i = 0; i < 60000; ++i) ++count[std::size_t(d.train_labels.data<std::int64_t>()[i])];
  for (int c : count) BOOST_TEST(c == 6000);  // balanced classes, as published
  const float* p = d.test_images.data<float>();
  BOOST_TEST(*std::min_element(p, p + 784 * 10000) == 0.0f);
  BOOST_TEST(*std::max_element(p, p + 784 * 10000) == 1.0f);
  auto rows = fashion_mnist_baselines();
  BOOST_TEST(rows.size() >= 20u);
  BOOST_TEST(std::any_of(rows.begin(), rows.end(), [](const PublishedBaseline& r) { return r.classifier == "MLP 256-128-100"; }));
  auto sk = fashion_mnist_sklearn_classifiers();
  BOOST_TEST((std::find(sk.begin(), sk.end(), "SVC") != sk.end()));
}

BOOST_AUTO_TEST_CASE(fortunes_directory_reading) {
  TmpDir tmp;
  const std::string dir = tmp / "fortunes";
  std::filesystem::create_directories(dir + "/off");
  write_file(dir + "/b", "Second file.\n%\n");
  write_file(dir + "/a", "One line.\n%\nTwo\nlines \xc3\xa9.\n%\n%\n  \n%\nLast, no separator after it.");
  write_file(dir + "/a.dat", std::string("\0\0\0\2binary", 10));
  std::filesystem::create_symlink("a", dir + "/a.u8");
  std::filesystem::create_symlink("b", dir + "/link");
  write_file(dir + "/off/rude", "skipped\n%\n");
  TextCorpus c = load_fortunes(dir);
  BOOST_TEST(c.files == std::vector<std::string>({"a", "b"}));
  BOOST_TEST(c.documents == std::vector<std::string>({"One line.\n", "Two\nlines \xc3\xa9.\n", "Last, no separator after it.\n",
                                                      "Second file.\n"}));
  BOOST_TEST(c.sources == std::vector<std::string>({"a", "a", "a", "b"}));
  BOOST_TEST(load_fortunes(dir, 1).files == std::vector<std::string>({"a"}));
  write_file(dir + "/c", "bad \xff byte\n");
  expect_io_error([&] { (void)load_fortunes(dir); },
                  {"load_fortunes: '" + dir + "/c': not UTF-8 text: invalid byte sequence at byte offset 4"});
  expect_io_error([&] { (void)load_fortunes(tmp / "none"); },
                  {"load_fortunes: directory '" + tmp / "none" + "' does not exist", "apt-get install fortunes"});
  std::filesystem::create_directories(tmp / "empty");
  expect_io_error([&] { (void)load_fortunes(tmp / "empty"); }, {"holds no fortune files"});
}

BOOST_AUTO_TEST_CASE(fortunes_package_files) {
  if (!std::filesystem::is_directory(kFortunesDir)) {
    expect_io_error([] { (void)load_fortunes(); }, {"install it with: apt-get install fortunes"});
    return;
  }
  TextCorpus c = load_fortunes();
  BOOST_TEST(c.files.size() >= 30u);
  BOOST_TEST((std::find(c.files.begin(), c.files.end(), "fortunes") != c.files.end()));
  for (const auto& f : c.files) BOOST_TEST((f.size() < 4 || f.substr(f.size() - 4) != ".dat"), f);
  BOOST_TEST(c.documents.size() > 10000u);
  std::size_t chars = 0;
  for (const auto& d : c.documents) chars += d.size();
  BOOST_TEST(chars > 2000000u);  // about 2.5 MB of text
  CharVocab v(c.documents);
  BOOST_TEST(v.size() > 90u);
  BOOST_TEST(v.size() < 200u);
}

BOOST_AUTO_TEST_CASE(document_split_is_seeded_disjoint_and_complete) {
  DocumentSplit a = split_documents(1000, 0.9, 7), b = split_documents(1000, 0.9, 7), c = split_documents(1000, 0.9, 8);
  BOOST_TEST(a.train.size() == 900u);
  BOOST_TEST(a.validation.size() == 100u);
  BOOST_TEST(a.train == b.train);
  BOOST_TEST(a.train != c.train);
  std::set<std::size_t> all(a.train.begin(), a.train.end());
  all.insert(a.validation.begin(), a.validation.end());
  BOOST_TEST(all.size() == 1000u);
  BOOST_TEST(std::is_sorted(a.validation.begin(), a.validation.end()));
  BOOST_TEST(split_documents(2, 0.99, 0).validation.size() == 1u);  // one on each side
  BOOST_CHECK_THROW(split_documents(1, 0.9, 0), ValueError);
  BOOST_CHECK_THROW(split_documents(10, 1.0, 0), ValueError);
  BOOST_CHECK_THROW(split_documents(10, 0.0, 0), ValueError);
}

BOOST_AUTO_TEST_CASE(char_vocab_and_utf8) {
  CharVocab v({"hello", "w\xc3\xb6rld \xe2\x82\xac"});  // o-umlaut, euro sign
  BOOST_TEST(v.size() == 10u);  // ' ' d e h l o r w U+00F6 U+20AC
  BOOST_TEST(v.code_points().front() == 0x20u);
  BOOST_TEST(v.code_points().back() == 0x20acu);
  auto ids = v.encode("h\xe2\x82\xac" "l");
  BOOST_TEST(ids == std::vector<std::int64_t>({3, 9, 4}));
  BOOST_TEST(v.decode(ids) == "h\xe2\x82\xac" "l");
  try {
    (void)v.encode("hex", "--prompt");
    BOOST_ERROR("no ValueError");
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()) ==
               "CharVocab::encode: --prompt: character U+0078 'x' at position 2 is not in the vocabulary (10 characters "
               "seen in the training text)");
  }
  BOOST_CHECK_THROW(v.decode(std::vector<std::int64_t>{10}), IndexError);
  BOOST_CHECK_THROW(v.decode(std::vector<std::int64_t>{-1}), IndexError);
  BOOST_TEST(CharVocab::from_code_points(v.code_points()).code_points() == v.code_points());
  BOOST_CHECK_THROW(CharVocab::from_code_points({5, 5}), ValueError);
  BOOST_CHECK_THROW(CharVocab::from_code_points({0xd800}), ValueError);
  for (std::uint32_t cp : {0x41u, 0x7ffu, 0x800u, 0xffffu, 0x10000u, 0x10ffffu})
    BOOST_TEST(utf8_decode(utf8_encode(cp)) == std::vector<std::uint32_t>({cp}));
  for (std::uint32_t cp : {0xd800u, 0xdfffu, 0x110000u, 0xffffffffu})  // not scalar values: refused, as decode does
    BOOST_CHECK_THROW(utf8_encode(cp), ValueError);
  const std::pair<std::string, std::string> bad[] = {{"a\x80", "not a leading byte"},
                                                     {"\xc3", "cut short"},
                                                     {"\xc3(", "continuation byte is missing"},
                                                     {"\xc0\xaf", "overlong"},
                                                     {"\xed\xa0\x80", "surrogate"},
                                                     {"\xf4\x90\x80\x80", "past U+10FFFF"}};
  for (const auto& [text, why] : bad) {
    try {
      (void)utf8_decode(text, "t");
      BOOST_ERROR("accepted " << why);
    } catch (const ValueError& e) {
      BOOST_TEST(std::string(e.what()).find(why) != std::string::npos, e.what());
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
