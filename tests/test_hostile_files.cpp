// Hostile safetensors files and paths (issue 14): each is refused with an IOError naming the
// file and the problem, quickly, without blocking, without deep recursion and without an
// allocation proportional to the attack; nothing is silently accepted.
#include <sys/stat.h>
#include <sys/types.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <string>

#include "helpers.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/checkpoint.hpp"
#include "xgrad/models/layers.hpp"
#include "xgrad/models/module.hpp"
#include "xgrad/models/optim.hpp"

using namespace xgrad;
using test::TmpDir;
using test::st_file;

namespace {

Tensor int_scalar(std::int64_t v) { return index_tensor({v}, {}); }

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

// Optimizer state a real run cannot produce (a crafted checkpoint): refused by load_state_dict
// and load_checkpoint, nothing changes. Before, step = INT64_MAX passed and the next Adam step
// overflowed and wrote NaN into every parameter.
BOOST_AUTO_TEST_CASE(crafted_optimizer_state_is_refused) {
  Rng rng(0);
  Linear model(2, 2, true, rng);
  AdamW opt(model.named_parameters(), 0.1);
  for (auto& p : model.parameters()) p.set_grad(ones(p.shape()));
  opt.step();
  opt.step();
  const NamedTensors good = opt.state_dict();
  auto with = [&](const std::string& name, const Tensor& t) { return test::replaced(good, name, t); };
  struct Case {
    std::string what;
    NamedTensors state;
    std::string message;
  };
  const Tensor w = model.weight;
  std::vector<Case> cases = {
      {"global step INT64_MAX", with("step", int_scalar(INT64_MAX)), "entry 'step' must be in [0, 2^53]"},
      {"per-parameter step INT64_MAX", with("step.weight", int_scalar(INT64_MAX)), "entry 'step.weight' must be in [0, 2^53]"},
      {"per-parameter step above the global one", with("step.weight", int_scalar(3)),
       "entry 'step.weight' is 3 but a parameter with state has been updated at least once and at most 'step' = 2 times"},
      {"per-parameter step 0 with state", with("step.weight", int_scalar(0)), "entry 'step.weight' is 0"},
      {"NaN in exp_avg", with("exp_avg.weight", full(w.shape(), std::nan(""), w.dtype())), "non-finite value nan"},
      {"inf in exp_avg_sq", with("exp_avg_sq.bias", full({2}, INFINITY, w.dtype())), "non-finite value inf"},
      {"negative exp_avg_sq", with("exp_avg_sq.weight", full(w.shape(), -1.0, w.dtype())),
       "entry 'exp_avg_sq.weight' (2, 2) has the negative value -1"},
  };
  TmpDir dir;
  for (const auto& c : cases) {
    BOOST_TEST_CONTEXT(c.what) {
      const NamedTensors before = opt.state_dict();
      try {
        opt.load_state_dict(c.state);
        BOOST_ERROR("accepted");
      } catch (const ValueError& e) {
        BOOST_TEST(std::string(e.what()).find(c.message) != std::string::npos, e.what());
      }
      BOOST_TEST(opt.state_dict().size() == before.size());
      for (std::size_t i = 0; i < before.size(); ++i) BOOST_TEST(test::same_bits(opt.state_dict()[i].second, before[i].second));
      // The same state in a checkpoint: load_checkpoint refuses it and changes nothing.
      NamedTensors all = model.named_parameters();
      for (const auto& [n, t] : c.state) all.emplace_back("optimizer." + n, t);
      const std::string path = dir / "crafted.safetensors";
      save_safetensors(path, all);
      const auto w_before = model.weight.to_vector();
      BOOST_CHECK_THROW(load_checkpoint(path, model, &opt), IOError);
      BOOST_TEST(model.weight.to_vector() == w_before);
    }
  }
  opt.load_state_dict(good);  // a real state still loads
  opt.step();
  for (double v : model.weight.to_vector()) BOOST_TEST(std::isfinite(v));
}

BOOST_AUTO_TEST_SUITE_END()
