// Hostile safetensors files and paths (issue 14): each is refused with an IOError naming the
// file and the problem, quickly, without blocking, without deep recursion and without an
// allocation proportional to the attack; nothing is silently accepted.
#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "helpers.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/checkpoint.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/models/module.hpp"

using namespace xgrad;
using test::TmpDir;

namespace {

std::string st_file(const std::string& header, const std::string& data = "") {
  return test::le64(header.size()) + header + data;
}

// load_safetensors(path) must throw IOError whose message holds every part.
void expect_refused(const std::string& path, const std::vector<std::string>& parts,
                    const SafetensorsLimits& limits = {}) {
  try {
    load_safetensors(path, limits);
    BOOST_ERROR("accepted: " << path);
  } catch (const IOError& e) {
    const std::string m = e.what();
    BOOST_TEST(m.find("load_safetensors") != std::string::npos, m);
    for (const auto& p : parts) BOOST_TEST(m.find(p) != std::string::npos, "'" << p << "' not in: " << m);
  }
}

std::string nested(const std::string& open, const std::string& close, std::size_t depth, const std::string& inner) {
  std::string s;
  s.reserve(depth * (open.size() + close.size()) + inner.size());
  for (std::size_t i = 0; i < depth; ++i) s += open;
  s += inner;
  for (std::size_t i = 0; i < depth; ++i) s += close;
  return s;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(hostile_files)

// ~80,000 levels in every field (the crash was a stack overflow in the message's dump()).
BOOST_AUTO_TEST_CASE(deep_nesting_in_every_field_is_refused) {
  TmpDir dir;
  const std::size_t d = 80000;
  const std::string fields[] = {
      R"({"t":{"dtype":"F32","shape":)" + nested("[", "]", d, "1") + R"(,"data_offsets":[0,4]}})",
      R"({"t":{"dtype":)" + nested("[", "]", d, R"("F32")") + R"(,"shape":[1],"data_offsets":[0,4]}})",
      R"({"t":{"dtype":"F32","shape":[1],"data_offsets":)" + nested("[", "]", d, "0") + "}}",
      R"({"__metadata__":)" + nested(R"({"a":)", "}", d, R"("x")") + "}",
      nested("[", "]", d, ""),
  };
  int i = 0;
  for (const auto& header : fields) {
    const std::string path = dir / ("deep" + std::to_string(i++) + ".safetensors");
    test::write_bytes(path, st_file(header, std::string(4, '\0')));
    expect_refused(path, {path, "nests deeper than 3 levels"});
  }
}

// A header of brackets over the cap is refused before it is read; one under the cap stops
// at the fourth level (no memory proportional to its size).
BOOST_AUTO_TEST_CASE(header_size_is_capped_and_the_cap_can_be_raised) {
  TmpDir dir;
  const std::string big = dir / "big.safetensors";
  test::write_bytes(big, st_file(std::string(50u << 20, '[')));
  expect_refused(big, {"header length 52428800 exceeds the limit of 16777216 bytes", "max_header_bytes"});
  const std::string brackets = dir / "brackets.safetensors";
  test::write_bytes(brackets, st_file(std::string(15u << 20, '[')));
  expect_refused(brackets, {"nests deeper than 3 levels"});

  // A legitimate 17 MiB header (one long metadata string): refused by default, read with a
  // raised limit.
  const std::string meta = dir / "meta.safetensors";
  std::string header = R"({"__metadata__":{"note":")" + std::string(17u << 20, 'x') + R"("}})";
  header.append((8 - header.size() % 8) % 8, ' ');
  test::write_bytes(meta, st_file(header));
  expect_refused(meta, {"exceeds the limit"});
  SafetensorsLimits raised;
  raised.max_header_bytes = 32u << 20;
  SafetensorsFile f = load_safetensors(meta, raised);
  BOOST_TEST(f.metadata.at("note").size() == std::size_t(17u << 20));
  BOOST_TEST(f.tensors.empty());
}

BOOST_AUTO_TEST_CASE(long_arrays_are_refused_while_parsing) {
  TmpDir dir;
  std::string shape = "[1";
  for (int i = 0; i < 1000000; ++i) shape += ",1";
  shape += "]";
  const std::string path = dir / "rank.safetensors";
  test::write_bytes(path, st_file(R"({"t":{"dtype":"F32","shape":)" + shape + R"(,"data_offsets":[0,4]}})",
                                  std::string(4, '\0')));
  expect_refused(path, {"'t'", "more than 64 elements"});
}

BOOST_AUTO_TEST_CASE(repeated_keys_anywhere_are_refused) {
  TmpDir dir;
  const std::string data(4, '\0');
  const std::pair<std::string, std::string> cases[] = {
      {R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       "header names 't' more than once"},
      {R"({"t":{"dtype":"F64","dtype":"F32","shape":[1],"data_offsets":[0,4]}})", "'t' names the field 'dtype' more than once"},
      {R"({"t":{"dtype":"F32","shape":[2],"shape":[1],"data_offsets":[0,4]}})", "'t' names the field 'shape' more than once"},
      {R"({"__metadata__":{"a":"1","a":"2"},"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})",
       "'__metadata__' names the field 'a' more than once"},
  };
  int i = 0;
  for (const auto& [header, message] : cases) {
    const std::string path = dir / ("dup" + std::to_string(i++) + ".safetensors");
    test::write_bytes(path, st_file(header, data));
    expect_refused(path, {message});
  }
}

BOOST_AUTO_TEST_CASE(a_nul_byte_in_the_header_is_refused) {
  TmpDir dir;
  const std::string path = dir / "nul.safetensors";
  std::string header = R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  const std::size_t at = header.size();
  header += std::string("\0garbage", 8);
  test::write_bytes(path, st_file(header, std::string(4, '\0')));
  expect_refused(path, {"NUL byte at offset " + std::to_string(at)});
}

// A FIFO with no writer: refused at once (open() used to block forever); also a directory.
BOOST_AUTO_TEST_CASE(fifo_and_directory_are_refused_without_blocking) {
  TmpDir dir;
  const std::string fifo = dir / "fifo.safetensors";
  BOOST_TEST_REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  expect_refused(fifo, {"not a regular file (a FIFO)"});
  Rng rng(0);
  Linear model(2, 2, true, rng);
  try {
    load_checkpoint(fifo, model);
    BOOST_ERROR("load_checkpoint accepted a FIFO");
  } catch (const IOError& e) {
    BOOST_TEST(std::string(e.what()).find("a FIFO") != std::string::npos, e.what());
  }
  expect_refused(dir.path.string(), {"not a regular file (a directory)"});
}

// "a.safetensors\0b" would open "a.safetensors": refused for reading and writing.
BOOST_AUTO_TEST_CASE(a_path_with_a_nul_byte_is_refused) {
  TmpDir dir;
  const std::string real = dir / "a.safetensors";
  save_safetensors(real, {{"x", zeros({2})}});
  const std::string tricky = real + std::string("\0.other", 7);
  expect_refused(tricky, {"the path contains a NUL byte", "a.safetensors\\0.other"});
  BOOST_CHECK_EXCEPTION(save_safetensors(tricky, {{"x", ones({2})}}), ValueError, [&](const ValueError& e) {
    return std::string(e.what()).find("save_safetensors") != std::string::npos &&
           std::string(e.what()).find("NUL byte") != std::string::npos;
  });
  BOOST_TEST(load_safetensors(real).tensors[0].second.to_vector() == std::vector<double>({0, 0}));  // unchanged
}

BOOST_AUTO_TEST_SUITE_END()
