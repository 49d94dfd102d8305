// safetensors files and checkpoints: bit-exact round trips, resumed training equal to an
// uninterrupted run, every malformed-file class rejected with IOError and no change to the
// model, and failed saves leaving the previous file intact.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>

#include "helpers.hpp"
#include "xgrad/framework/array.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/checkpoint.hpp"
#include "xgrad/models/module.hpp"
#include "xgrad/models/optim.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

using namespace xgrad;
using test::same_bits;
using test::TmpDir;
using test::st_file;
namespace fs = std::filesystem;

namespace {


// w (2, 2) and b (2), of one float dtype.
struct Tiny : Module {
  Tensor w, b;
  explicit Tiny(DType dt, double shift = 0)
      : w(tensor({0.5 + shift, -1.0, 2.0, 0.25}, {2, 2}, dt)), b(tensor({0.1, -0.2 + shift}, {2}, dt)) {
    register_parameter("w", &w);
    register_parameter("b", &b);
  }
};

// A nested model: "enc.w" (3, 2) float64 and "head" (2) float32.
struct Enc : Module {
  Tensor w;
  Enc() : w(tensor({1, 2, 3, 4, 5, 6}, {3, 2}, DType::Float64)) { register_parameter("w", &w); }
};
struct Nested : Module {
  Enc enc;
  Tensor head;
  Nested() : head(tensor({7, 8}, {2}, DType::Float32)) {
    register_module("enc", &enc);
    register_parameter("head", &head);
  }
};



boost::test_tools::predicate_result same_named(const NamedTensors& a, const NamedTensors& b) {
  boost::test_tools::predicate_result r(a.size() == b.size());
  if (!r) {
    r.message() << a.size() << " vs " << b.size() << " tensors";
    return r;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    auto s = same_bits(a[i].second, b[i].second);
    if (a[i].first != b[i].first || !s) {
      r = false;
      r.message() << "entry " << i << " '" << a[i].first << "' vs '" << b[i].first << "' "
                  << s.message();
      return r;
    }
  }
  return r;
}

NamedTensors snapshot(const Module& m) {
  NamedTensors out;
  for (auto& [n, t] : m.named_parameters()) out.emplace_back(n, t.clone());
  return out;
}

template <class T> std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Bytes of Tiny(Float32)'s parameters as written in a file: w then b.
const std::string kTinyData = bytes_of<float>({0.5f, -1.0f, 2.0f, 0.25f, 0.1f, -0.2f});
const std::string kW = R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})";
const std::string kB = R"("b":{"dtype":"F32","shape":[2],"data_offsets":[16,24]})";

template <class E> bool message_has(const E& e, const std::vector<std::string>& needles) {
  std::string s = e.what();
  for (auto& n : needles)
    if (s.find(n) == std::string::npos) {
      BOOST_TEST_MESSAGE("missing '" << n << "' in: " << s);
      return false;
    }
  return true;
}

// Trains `m` for `steps` AdamW steps on a fixed regression problem.
void train(Tiny& m, Optimizer& opt, int steps) {
  DType dt = m.w.dtype();
  Tensor x = tensor({1, 2, -1, 0.5, 0, 1}, {3, 2}, dt);
  Tensor y = tensor({1, 0, 0, 1, 0.5, 0.5}, {3, 2}, dt);
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    Tensor d = sub(linear(x, m.w, m.b), y);
    mean(mul(d, d)).backward();
    opt.lr = warmup_cosine_lr(opt.steps(), 0.05, 2, 8, 1e-3);
    opt.step();
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(checkpoint)

BOOST_AUTO_TEST_CASE(safetensors_round_trip_is_bit_exact) {
  TmpDir dir;
  const double inf = std::numeric_limits<double>::infinity();
  NamedTensors ts = {
      {"f32", tensor({1.5, -0.0, inf, std::nan(""), 1e-40, -3.25}, {2, 3}, DType::Float32)},
      {"f64", tensor({0.1, -inf, 5e-324, 1e308}, {4}, DType::Float64)},
      {"mask", bool_tensor({true, false, true}, {3, 1})},
      {"idx", index_tensor({std::numeric_limits<std::int64_t>::min(), -1, 0,
                            std::numeric_limits<std::int64_t>::max()},
                           {2, 2})},
      {"scalar", scalar(2.5, DType::Float64)},
      {"empty_f32", zeros({0, 3}, DType::Float32)},
      {"empty_i64", index_tensor({}, {0})},
      {"nested.name.with.dots", scalar(-7, DType::Int64)},
      {"after_empty", tensor({1, 2}, {1, 2, 1}, DType::Float32)}};
  std::map<std::string, std::string> meta = {{"format", "pt"}, {"note", "caf\xc3\xa9, \"quoted\""}};
  const std::string path = dir / "t.safetensors";
  save_safetensors(path, ts, meta);
  SafetensorsFile f = load_safetensors(path);
  BOOST_TEST(same_named(f.tensors, ts));
  BOOST_TEST((f.metadata == meta));

  // Layout: header length multiple of 8, space padded, offsets contiguous in order.
  std::string bytes = test::read_bytes(path);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= std::uint64_t(static_cast<unsigned char>(bytes[i])) << (8 * i);
  BOOST_TEST(n % 8 == 0u);
  std::string header = bytes.substr(8, n);
  BOOST_TEST(header.front() == '{');
  BOOST_TEST(header.find_last_not_of(' ') == header.find_last_of('}'));
  BOOST_TEST(header.find(R"("f32":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})") !=
             std::string::npos);
  BOOST_TEST(header.find(R"("f64":{"dtype":"F64","shape":[4],"data_offsets":[24,56]})") !=
             std::string::npos);
  BOOST_TEST(header.find(R"("mask":{"dtype":"BOOL","shape":[3,1],"data_offsets":[56,59]})") !=
             std::string::npos);
  BOOST_TEST(header.find(R"("scalar":{"dtype":"F64","shape":[],"data_offsets":[91,99]})") !=
             std::string::npos);
  BOOST_TEST(header.find(R"("empty_f32":{"dtype":"F32","shape":[0,3],"data_offsets":[99,99]})") !=
             std::string::npos);
  std::size_t data_size = 24 + 32 + 3 + 32 + 8 + 0 + 0 + 8 + 8;
  BOOST_TEST(bytes.size() == 8 + n + data_size);
  BOOST_TEST(bytes.substr(8 + n + 56, 3) == std::string("\x01\x00\x01", 3));
  // Nothing but the file is left in the directory.
  BOOST_TEST(dir.entries() == std::vector<std::string>{"t.safetensors"},
             boost::test_tools::per_element());

  // No metadata and no tensors.
  save_safetensors(path, {});
  f = load_safetensors(path);
  BOOST_TEST(f.tensors.empty());
  BOOST_TEST(f.metadata.empty());
}

BOOST_AUTO_TEST_CASE(reads_hand_written_files) {
  TmpDir dir;
  const std::string path = dir / "h.safetensors";
  // Keys out of offset order, whitespace, metadata, extra spaces: tensors come back in
  // data-offset order.
  test::write_bytes(path, st_file(R"( { "b" : {"dtype":"I64","shape":[1],"data_offsets":[16,24]},
      "__metadata__": {"k": "v"}, "a": {"shape": [2], "data_offsets": [0, 16], "dtype": "F64"} }  )",
                            bytes_of<double>({1.25, -2.5}) + bytes_of<std::int64_t>({42})));
  SafetensorsFile f = load_safetensors(path);
  BOOST_REQUIRE(f.tensors.size() == 2u);
  BOOST_TEST(f.tensors[0].first == "a");
  BOOST_TEST(test::allclose(f.tensors[0].second, {1.25, -2.5}, 0, 0));
  BOOST_TEST(f.tensors[1].first == "b");
  BOOST_TEST(f.tensors[1].second.dtype() == DType::Int64);
  BOOST_TEST(f.tensors[1].second.item() == 42);
  BOOST_TEST(f.metadata.at("k") == "v");
}

// F16 / BF16 bits written by hand, with the float32 values derived from the formats:
// F16 = (-1)^s 2^(e-15) (1 + m/2^10), subnormal (-1)^s 2^-14 (m/2^10); BF16 = the top 16
// bits of a float32.
BOOST_AUTO_TEST_CASE(reads_f16_and_bf16_bytes_exactly) {
  TmpDir dir;
  const std::string path = dir / "half.safetensors";
  const std::vector<std::uint16_t> f16 = {0x0001, 0x8001, 0x03ff, 0x0400, 0x3c00, 0x3555, 0x7bff, 0xfbff,
                                          0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7c01, 0xfe00};
  const std::vector<std::uint16_t> bf16 = {0x0001, 0x8001, 0x007f, 0x0080, 0x3f80, 0x3eab, 0x7f7f, 0xff7f,
                                           0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7f81, 0xffc0};
  test::write_bytes(path, st_file(R"({"h":{"dtype":"F16","shape":[3,5],"data_offsets":[0,30]},)"
                                  R"("b":{"dtype":"BF16","shape":[15],"data_offsets":[30,60]},)"
                                  R"("e":{"dtype":"F16","shape":[0,4],"data_offsets":[60,60]}})",
                                  bytes_of(f16) + bytes_of(bf16)));
  const SafetensorsFile file = load_safetensors(path);
  BOOST_REQUIRE(file.tensors.size() == 3u);
  const Tensor& h = file.tensors[0].second;
  const Tensor& b = file.tensors[1].second;
  const Tensor& e = file.tensors[2].second;
  BOOST_TEST(h.dtype() == DType::Float32);
  BOOST_TEST(b.dtype() == DType::Float32);
  BOOST_TEST(e.dtype() == DType::Float32);
  BOOST_TEST((h.shape() == Shape{3, 5}));
  BOOST_TEST((e.shape() == Shape{0, 4}));
  const float inf = std::numeric_limits<float>::infinity();
  // The finite values and infinities, in the order written.
  const std::vector<float> f16_values = {std::ldexp(1.0f, -24), -std::ldexp(1.0f, -24), std::ldexp(1023.0f, -24),
                                         std::ldexp(1.0f, -14), 1.0f, 1365.0f / 4096.0f, 65504.0f, -65504.0f,
                                         0.0f, -0.0f, inf, -inf};
  const std::vector<float> bf16_values = {std::ldexp(1.0f, -133), -std::ldexp(1.0f, -133), std::ldexp(127.0f, -133),
                                          std::ldexp(1.0f, -126), 1.0f, 171.0f / 512.0f, std::ldexp(255.0f, 120),
                                          -std::ldexp(255.0f, 120), 0.0f, -0.0f, inf, -inf};
  auto bits = [](const Tensor& t, std::size_t i) {
    std::uint32_t u;
    std::memcpy(&u, t.data<float>() + i, sizeof u);
    return u;
  };
  for (std::size_t i = 0; i < f16_values.size(); ++i) {
    BOOST_TEST(h.data<float>()[i] == f16_values[i], "F16 element " << i);
    BOOST_TEST(std::signbit(h.data<float>()[i]) == std::signbit(f16_values[i]), "F16 element " << i);
    BOOST_TEST(b.data<float>()[i] == bf16_values[i], "BF16 element " << i);
    BOOST_TEST(std::signbit(b.data<float>()[i]) == std::signbit(bf16_values[i]), "BF16 element " << i);
  }
  // NaNs keep sign and payload; F16's come out quiet (PyTorch's conversion), BF16's unchanged.
  BOOST_TEST(bits(h, 12) == 0x7fc00000u);
  BOOST_TEST(bits(h, 13) == 0x7fc02000u);
  BOOST_TEST(bits(h, 14) == 0xffc00000u);
  BOOST_TEST(bits(b, 12) == 0x7fc00000u);
  BOOST_TEST(bits(b, 13) == 0x7f810000u);
  BOOST_TEST(bits(b, 14) == 0xffc00000u);
  for (std::size_t i = 12; i < 15; ++i) BOOST_TEST((std::isnan(h.data<float>()[i]) && std::isnan(b.data<float>()[i])));
}

// tools/make_fixtures.py: an nn.MultiheadAttention state_dict saved by PyTorch in float16
// ("f16.<name>") and bfloat16 ("bf16.<name>"), tensors of special values ("<tag>.special":
// subnormals, +-0, +-inf, NaNs with payloads, the extremes), and PyTorch's float32 conversion
// of each ("f32.<tag>.<name>"): loading reproduces it bit for bit, and the half-precision
// state_dict loads into MultiHeadAttention as is.
BOOST_AUTO_TEST_CASE(reads_pytorch_half_precision_state_dicts) {
  const SafetensorsFile file =
      load_safetensors(std::string(XGRAD_FIXTURE_DIR) + "/half/state_dict_f16_bf16.safetensors");
  std::map<std::string, Tensor> by_name(file.tensors.begin(), file.tensors.end());
  std::size_t compared = 0;
  for (const char* tag : {"f16.", "bf16."}) {
    NamedTensors state;
    for (const auto& [name, t] : file.tensors) {
      if (name.rfind(tag, 0) != 0) continue;
      BOOST_TEST_CONTEXT(name) {
        BOOST_TEST(t.dtype() == DType::Float32);
        BOOST_TEST_REQUIRE(by_name.count("f32." + name));
        BOOST_TEST(same_bits(t, by_name.at("f32." + name)));
      }
      ++compared;
      if (name != tag + std::string("special")) state.emplace_back(name.substr(std::strlen(tag)), t);
    }
    Rng rng(0);
    MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2), rng);
    mha.load_parameters(state);
    for (const auto& [name, t] : mha.named_parameters())
      BOOST_TEST(same_bits(t, by_name.at(std::string("f32.") + tag + name)), tag << name);
  }
  BOOST_TEST(compared == 10u);
}

BOOST_AUTO_TEST_CASE(save_rejects_bad_arguments_before_touching_the_file) {
  TmpDir dir;
  const std::string path = dir / "a.safetensors";
  save_safetensors(path, {{"x", scalar(1)}});
  const std::string before = test::read_bytes(path);
  BOOST_CHECK_THROW(save_safetensors(path, {{"x", scalar(1)}, {"x", scalar(2)}}), ValueError);
  BOOST_CHECK_THROW(save_safetensors(path, {{"x", Tensor()}}), ValueError);
  BOOST_CHECK_THROW(save_safetensors(path, {{"", scalar(1)}}), ValueError);
  BOOST_CHECK_THROW(save_safetensors(path, {{"__metadata__", scalar(1)}}), ValueError);
  BOOST_CHECK_THROW(save_safetensors(path, {{"bad\xff", scalar(1)}}), ValueError);
  BOOST_CHECK_THROW(save_safetensors(path, {{"x", reshape(scalar(1), Shape(65, 1))}}), ValueError);  // load refuses it
  BOOST_TEST(test::read_bytes(path) == before);
  BOOST_TEST(dir.entries().size() == 1u);
}

BOOST_AUTO_TEST_CASE(checkpoint_round_trip_and_resumed_training_is_bit_exact) {
  for (DType dt : {DType::Float32, DType::Float64})
    BOOST_TEST_CONTEXT(dtype_name(dt)) {
      TmpDir dir;
      const std::string path = dir / "ckpt.safetensors";
      // Uninterrupted: 8 steps.
      Tiny ref(dt);
      AdamW ref_opt(ref.named_parameters(), AdamWOptions(0.05).betas(0.9, 0.99).eps(1e-8).weight_decay(0.01));
      train(ref, ref_opt, 8);
      // Interrupted: 5 steps, save, load into a different model + optimizer, 3 more steps.
      Tiny a(dt);
      AdamW a_opt(a.named_parameters(), AdamWOptions(0.05).betas(0.9, 0.99).eps(1e-8).weight_decay(0.01));
      train(a, a_opt, 5);
      save_checkpoint(path, a, &a_opt, {{"epoch", "5"}});
      Tiny b(dt, 3.0);
      AdamW b_opt(b.named_parameters(), AdamWOptions(0.05).betas(0.9, 0.99).eps(1e-8).weight_decay(0.01));
      train(b, b_opt, 1);  // some unrelated state to overwrite
      load_checkpoint(path, b, &b_opt);
      BOOST_TEST(same_named(b.named_parameters(), a.named_parameters()));
      BOOST_TEST(same_named(b_opt.state_dict(), a_opt.state_dict()));
      BOOST_TEST(b_opt.steps() == 5);
      train(b, b_opt, 3);
      BOOST_TEST(same_named(b.named_parameters(), ref.named_parameters()));
      BOOST_TEST(same_named(b_opt.state_dict(), ref_opt.state_dict()));
      // Loading keeps the parameter tensors themselves (optimizers hold them).
      BOOST_TEST(b.w.requires_grad());
      BOOST_TEST(b_opt.params()[0].second.impl() == b.w.impl());
      // File contents: model names, "optimizer."-prefixed state, metadata.
      SafetensorsFile f = load_safetensors(path);
      std::vector<std::string> names;
      for (auto& [n, t] : f.tensors) names.push_back(n);
      std::vector<std::string> expected = {"w", "b", "optimizer.step",
                                           "optimizer.exp_avg.w", "optimizer.exp_avg_sq.w",
                                           "optimizer.step.w", "optimizer.exp_avg.b",
                                           "optimizer.exp_avg_sq.b", "optimizer.step.b"};
      BOOST_TEST(names == expected, boost::test_tools::per_element());
      BOOST_TEST(f.metadata.at("epoch") == "5");
      // Model-only load ignores the optimizer entries.
      Tiny c(dt, 1.0);
      load_checkpoint(path, c);
      BOOST_TEST(same_named(c.named_parameters(), a.named_parameters()));
    }
}

BOOST_AUTO_TEST_CASE(nested_mixed_dtype_model_round_trip) {
  TmpDir dir;
  const std::string path = dir / "n.safetensors";
  Nested a;
  SGD opt(a.named_parameters(), SGDOptions(0.1).momentum(0.9));
  a.enc.w.set_grad(ones({3, 2}, DType::Float64));
  a.head.set_grad(ones({2}, DType::Float32));
  opt.step();
  save_checkpoint(path, a, &opt);
  Nested b;
  SGD opt_b(b.named_parameters(), SGDOptions(0.1).momentum(0.9));
  load_checkpoint(path, b, &opt_b);
  BOOST_TEST(same_named(b.named_parameters(), a.named_parameters()));
  BOOST_TEST(same_named(opt_b.state_dict(), opt.state_dict()));
  BOOST_TEST(b.named_parameters()[0].first == "head");
  BOOST_TEST(b.named_parameters()[1].first == "enc.w");
}

BOOST_AUTO_TEST_CASE(every_bad_file_throws_io_error_and_changes_nothing) {
  TmpDir dir;
  struct Case {
    std::string name;
    std::string bytes;                  // file contents (unless special)
    std::vector<std::string> needles;   // expected in the message (besides the path)
  };
  auto hdr = [](const std::string& entries) { return "{" + entries + "}"; };
  const std::string good_header = hdr(kW + "," + kB);
  std::string huge_len = test::le64(std::uint64_t(1) << 62) + good_header + kTinyData;
  std::string len_past_end = test::le64(good_header.size() + kTinyData.size() + 1) + good_header + kTinyData;
  std::string bool_file = st_file(
      hdr(kW + "," + kB + R"(,"m":{"dtype":"BOOL","shape":[3],"data_offsets":[24,27]})"),
      kTinyData + std::string("\x01\x02\x00", 3));
  const std::vector<Case> cases = {
      {"empty file", "", {"shorter than the 8-byte header length"}},
      {"truncated header length", std::string("\x10\x00\x00", 3), {"3 bytes"}},
      {"header length larger than file", len_past_end, {"header length"}},
      {"header length 2^62", huge_len, {"header length 4611686018427387904"}},
      {"malformed JSON", st_file(R"({"w":{"dtype":"F32",)", kTinyData), {"not valid JSON"}},
      {"JSON with trailing garbage", st_file(good_header + "x", kTinyData), {"not valid JSON"}},
      {"header not an object", st_file("[1,2,3]", kTinyData), {"not a JSON object"}},
      {"header is a string", st_file(R"("w")", kTinyData), {"not a JSON object"}},
      {"entry not an object", st_file(hdr(kW + R"(,"b":[16,24])"), kTinyData), {"'b'", "not a JSON object"}},
      {"unknown dtype", st_file(hdr(R"("w":{"dtype":"F8_E5M2","shape":[2,2],"data_offsets":[0,16]},)" + kB), kTinyData),
       {"'w'", "unsupported dtype \"F8_E5M2\" (supported: F32, F64, F16, BF16, BOOL, I64)"}},
      {"F16 offsets sized for F32", st_file(hdr(R"("w":{"dtype":"F16","shape":[2,2],"data_offsets":[0,16]},)" + kB), kTinyData),
       {"'w'", "span 16 bytes", "shape (2, 2) of F16 needs 8"}},
      {"BF16 offsets sized for F32", st_file(hdr(kW + R"(,"b":{"dtype":"BF16","shape":[2],"data_offsets":[16,24]})"), kTinyData),
       {"'b'", "span 8 bytes", "shape (2) of BF16 needs 4"}},
      {"dtype not a string", st_file(hdr(R"("w":{"dtype":4,"shape":[2,2],"data_offsets":[0,16]},)" + kB), kTinyData),
       {"'w'", "'dtype'"}},
      {"missing dtype", st_file(hdr(R"("w":{"shape":[2,2],"data_offsets":[0,16]},)" + kB), kTinyData),
       {"'w'", "missing field 'dtype'"}},
      {"negative shape", st_file(hdr(R"("w":{"dtype":"F32","shape":[-2,-2],"data_offsets":[0,16]},)" + kB), kTinyData),
       {"'w'", "shape[0]", "non-negative"}},
      {"non-integer shape", st_file(hdr(R"("w":{"dtype":"F32","shape":[2.0,2],"data_offsets":[0,16]},)" + kB), kTinyData),
       {"'w'", "shape[0]"}},
      {"shape not an array", st_file(hdr(R"("w":{"dtype":"F32","shape":4,"data_offsets":[0,16]},)" + kB), kTinyData),
       {"'w'", "'shape'"}},
      {"huge shape", st_file(hdr(R"("w":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,16]},)" + kB), kTinyData),
       {"'w'", "more than 2^64"}},
      // Found by fuzz_safetensors: an empty tensor whose other dimensions would overflow its strides.
      {"empty shape with huge strides", st_file(hdr(kW + "," + kB + R"(,"e":{"dtype":"F32","shape":[0,9223372036854775808,1],"data_offsets":[24,24]})"), kTinyData),
       {"'e'", "shape (0, 9223372036854775808, 1)", "product of its non-zero dimensions exceeds 2^40"}},
      {"offsets out of range", st_file(hdr(kW + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[1000,1008]})"), kTinyData),
       {"'b'", "[1000, 1008]", "exceed the data section of 24 bytes"}},
      {"offsets begin > end", st_file(hdr(kW + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[24,16]})"), kTinyData),
       {"'b'", "begin > end"}},
      {"offsets with one number", st_file(hdr(kW + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[16]})"), kTinyData),
       {"'b'", "'data_offsets'"}},
      {"negative offset", st_file(hdr(kW + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[-8,24]})"), kTinyData),
       {"'b'", "data_offsets[0]"}},
      {"offsets not matching numel*itemsize", st_file(hdr(R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,12]},)"
                                                          R"("b":{"dtype":"F32","shape":[3],"data_offsets":[12,24]})"),
                                                      kTinyData),
       {"'w'", "span 12 bytes", "needs 16"}},
      {"overlapping offsets", st_file(hdr(kW + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]})"), kTinyData.substr(0, 16)),
       {"'b'", "overlap tensor 'w'"}},
      {"hole in the data", st_file(hdr(R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[8,24]})"), kTinyData),
       {"'w'", "unused"}},
      {"trailing bytes", st_file(good_header, kTinyData + "xxxx"), {"28 bytes but the tensors cover 24"}},
      {"truncated data", st_file(good_header, kTinyData.substr(0, 20)), {"'b'", "exceed the data section of 20 bytes"}},
      {"BOOL byte not 0/1", bool_file, {"'m'", "BOOL byte 2 at flat index 1"}},
      {"duplicate name", st_file(hdr(kW + "," + kB + "," + kB), kTinyData), {"'b' more than once"}},
      {"metadata not an object", st_file(hdr(kW + "," + kB + R"(,"__metadata__":[1])"), kTinyData), {"__metadata__"}},
      {"metadata value not a string", st_file(hdr(kW + "," + kB + R"(,"__metadata__":{"epoch":5})"), kTinyData),
       {"__metadata__ 'epoch'"}},
      // Valid files that do not fit the model.
      {"missing name", st_file(hdr(R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]})"), kTinyData.substr(0, 16)),
       {"missing 'b'"}},
      {"unexpected name", st_file(hdr(kW + "," + kB + R"(,"c":{"dtype":"F32","shape":[],"data_offsets":[24,28]})"), kTinyData + "abcd"),
       {"unexpected 'c'"}},
      {"missing and unexpected names", st_file(hdr(kW + R"(,"bias":{"dtype":"F32","shape":[2],"data_offsets":[16,24]})"), kTinyData),
       {"missing 'b'", "unexpected 'bias'"}},
      {"wrong shape", st_file(hdr(R"("w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)" + kB), kTinyData),
       {"'w' is float32 (4)", "float32 (2, 2)"}},
      {"wrong dtype", st_file(hdr(R"("w":{"dtype":"F32","shape":[2,2],"data_offsets":[0,16]},)"
                                  R"("b":{"dtype":"F64","shape":[1],"data_offsets":[16,24]})"),
                              kTinyData),
       {"'b' is float64 (1)", "float32 (2)"}},
      {"same-size wrong dtype", st_file(hdr(R"("w":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},)" + kB), kTinyData),
       {"'w' is int64 (2)"}},
  };

  Tiny m(DType::Float32, 0.75);
  const NamedTensors before = snapshot(m);
  for (const Case& c : cases)
    BOOST_TEST_CONTEXT(c.name) {
      const std::string path = dir / "bad.safetensors";
      test::write_bytes(path, c.bytes);
      std::vector<std::string> needles = c.needles;
      needles.push_back(path);
      BOOST_CHECK_EXCEPTION(load_checkpoint(path, m), IOError,
                            [&](const IOError& e) { return message_has(e, needles); });
      BOOST_TEST(same_named(m.named_parameters(), before));
    }
  // The good file loads (the cases above differ from it in one thing only).
  const std::string path = dir / "good.safetensors";
  test::write_bytes(path, st_file(good_header, kTinyData));
  load_checkpoint(path, m);
  BOOST_TEST(test::allclose(m.w, {0.5, -1.0, 2.0, 0.25}, 1e-7));
}

BOOST_AUTO_TEST_CASE(unreadable_paths_throw_io_error) {
  TmpDir dir;
  Tiny m(DType::Float32);
  const NamedTensors before = snapshot(m);
  BOOST_CHECK_EXCEPTION(load_checkpoint(dir / "missing.safetensors", m), IOError,
                        [&](const IOError& e) {
                          return message_has(e, {dir / "missing.safetensors", "cannot open"});
                        });
  BOOST_CHECK_EXCEPTION(load_safetensors(dir.path.string()), IOError, [&](const IOError& e) {
    return message_has(e, {"not a regular file"});
  });
  BOOST_TEST(same_named(m.named_parameters(), before));
}

BOOST_AUTO_TEST_CASE(bad_optimizer_state_changes_neither_model_nor_optimizer) {
  TmpDir dir;
  const std::string path = dir / "c.safetensors";
  Tiny src(DType::Float32);
  Adam src_opt(src.named_parameters(), 0.01);
  train(src, src_opt, 2);

  Tiny m(DType::Float32, 1.0);
  Adam opt(m.named_parameters(), 0.01);
  train(m, opt, 3);
  const NamedTensors params = snapshot(m), state = opt.state_dict();
  auto expect_fail = [&](const NamedTensors& file, const std::vector<std::string>& needles) {
    save_safetensors(path, file);
    BOOST_CHECK_EXCEPTION(load_checkpoint(path, m, &opt), IOError,
                          [&](const IOError& e) { return message_has(e, needles); });
    BOOST_TEST(same_named(m.named_parameters(), params));
    BOOST_TEST(same_named(opt.state_dict(), state));
    BOOST_TEST(opt.steps() == 3);
  };
  NamedTensors good = src.named_parameters();
  for (auto& [n, t] : src_opt.state_dict()) good.emplace_back("optimizer." + n, t);
  auto replaced = [&](const std::string& name, const Tensor& t) { return test::replaced(good, name, t); };
  auto removed = [&](const std::string& name) { return test::removed(good, name); };
  expect_fail(src.named_parameters(), {"no optimizer state"});
  expect_fail(replaced("optimizer.exp_avg.w", zeros({4})), {"optimizer state", "exp_avg.w", "(4)"});
  expect_fail(replaced("optimizer.exp_avg_sq.b", index_tensor({0, 0}, {2})), {"exp_avg_sq.b", "int64"});
  expect_fail(removed("optimizer.step"), {"missing entry 'step'"});
  expect_fail(removed("optimizer.exp_avg.b"), {"exp_avg.b"});
  NamedTensors extra = good;
  extra.emplace_back("optimizer.momentum_buffer.w", zeros({2, 2}));
  expect_fail(extra, {"momentum_buffer.w"});
  // A wrong model tensor is reported even when the optimizer state is fine.
  expect_fail(replaced("w", index_tensor({0, 0, 0, 0}, {2, 2})), {"'w' is int64 (2, 2)"});
  // And the good one loads.
  save_safetensors(path, good);
  load_checkpoint(path, m, &opt);
  BOOST_TEST(same_named(m.named_parameters(), src.named_parameters()));
  BOOST_TEST(same_named(opt.state_dict(), src_opt.state_dict()));
}

BOOST_AUTO_TEST_CASE(failed_save_leaves_previous_checkpoint_intact) {
  TmpDir dir;
  const std::string path = dir / "ckpt.safetensors";
  Tiny m(DType::Float32);
  Adam opt(m.named_parameters(), 0.01);
  train(m, opt, 2);
  save_checkpoint(path, m, &opt);
  const std::string before = test::read_bytes(path);
  BOOST_REQUIRE(!before.empty());
  const std::vector<std::string> listing = dir.entries();

  // The target is a directory.
  fs::create_directory(dir.path / "adir");
  BOOST_CHECK_EXCEPTION(save_checkpoint(dir / "adir", m, &opt), IOError, [&](const IOError& e) {
    return message_has(e, {"save_safetensors", dir / "adir", "renaming"});
  });
  BOOST_TEST(fs::is_directory(dir.path / "adir"));
  fs::remove(dir.path / "adir");
  BOOST_TEST(dir.entries() == listing, boost::test_tools::per_element());

  // The parent directory does not exist.
  BOOST_CHECK_EXCEPTION(save_checkpoint(dir / "nope/ckpt.safetensors", m), IOError,
                        [&](const IOError& e) { return message_has(e, {"temporary file"}); });

  // A write fails half-way (file size limit): the previous file is untouched, no temporary
  // file is left behind. No Boost logging while the limit is in force.
  {
    NamedTensors big = {{"w", zeros({200000}, DType::Float32)}};
    struct rlimit old;
    BOOST_REQUIRE(::getrlimit(RLIMIT_FSIZE, &old) == 0);
    auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit lim = old;
    lim.rlim_cur = 65536;
    bool threw_io = false;
    std::string what;
    if (::setrlimit(RLIMIT_FSIZE, &lim) == 0) {
      try {
        save_safetensors(path, big);
      } catch (const IOError& e) {
        threw_io = true;
        what = e.what();
      } catch (...) {
      }
      ::setrlimit(RLIMIT_FSIZE, &old);
    }
    ::signal(SIGXFSZ, old_handler);
    BOOST_TEST(threw_io);
    BOOST_TEST(what.find("File too large") != std::string::npos, what);
    BOOST_TEST(test::read_bytes(path) == before);
    BOOST_TEST(dir.entries() == listing, boost::test_tools::per_element());
  }

  // A read-only directory (root ignores permissions, so only checked as another user).
  if (::geteuid() != 0) {
    fs::permissions(dir.path, fs::perms::owner_read | fs::perms::owner_exec);
    BOOST_CHECK_THROW(save_checkpoint(path, m, &opt), IOError);
    fs::permissions(dir.path, fs::perms::owner_all);
    BOOST_TEST(test::read_bytes(path) == before);
  } else {
    BOOST_TEST_MESSAGE("running as root: read-only directory case skipped");
  }

  // The previous checkpoint still loads.
  Tiny m2(DType::Float32, 2.0);
  Adam opt2(m2.named_parameters(), 0.01);
  load_checkpoint(path, m2, &opt2);
  BOOST_TEST(same_named(m2.named_parameters(), m.named_parameters()));
  BOOST_TEST(same_named(opt2.state_dict(), opt.state_dict()));

  // A successful overwrite replaces it and leaves no temporary file.
  train(m, opt, 1);
  save_checkpoint(path, m, &opt);
  BOOST_TEST(test::read_bytes(path) != before);
  BOOST_TEST(dir.entries() == listing, boost::test_tools::per_element());
}

// The dtype rule of load_checkpoint, Optimizer::load_state_dict and Module::load_parameters:
// float32 and float64 values are converted to the dtype of the parameter they land in.
BOOST_AUTO_TEST_CASE(loads_convert_float32_and_float64_to_the_parameters_dtype) {
  TmpDir dir;
  for (DType saved : {DType::Float32, DType::Float64})
    BOOST_TEST_CONTEXT("saved as " << dtype_name(saved)) {
      const DType other = saved == DType::Float32 ? DType::Float64 : DType::Float32;
      const std::string path = dir / "c.safetensors";
      Tiny src(saved);
      AdamW src_opt(src.named_parameters(), 0.01);
      train(src, src_opt, 3);
      save_checkpoint(path, src, &src_opt);

      // A model (and its optimizer) in the other dtype loads the file, converted.
      Tiny m(DType::Float32, 1.0);
      m.to(other);
      AdamW opt(m.named_parameters(), 0.01);
      load_checkpoint(path, m, &opt);
      const NamedTensors got = m.named_parameters(), want = src.named_parameters();
      for (std::size_t i = 0; i < want.size(); ++i)
        BOOST_TEST(same_bits(got[i].second, want[i].second.to(other)), want[i].first);
      const NamedTensors state = opt.state_dict(), src_state = src_opt.state_dict();
      BOOST_TEST_REQUIRE(state.size() == src_state.size());
      for (std::size_t i = 0; i < state.size(); ++i) {
        BOOST_TEST(state[i].first == src_state[i].first);
        const Tensor& s = src_state[i].second;
        BOOST_TEST(same_bits(state[i].second, is_float(s.dtype()) ? s.to(other) : s), state[i].first);
      }
      BOOST_TEST(opt.steps() == 3);
      // The converted state keeps training in the model's dtype.
      train(m, opt, 1);
      BOOST_TEST(m.w.dtype() == other);
      BOOST_TEST(opt.state_dict()[1].second.dtype() == other);

      // load_parameters follows the same rule, from the file's tensors or a live model.
      Tiny p(other, 2.0);
      const Module::LoadResult r = p.load_parameters(load_safetensors(path).tensors, /*strict=*/false);
      BOOST_TEST(r.missing_keys.empty());
      BOOST_TEST(r.unexpected_keys.size() == src_state.size());  // the "optimizer." entries
      for (std::size_t i = 0; i < want.size(); ++i)
        BOOST_TEST(same_bits(p.named_parameters()[i].second, want[i].second.to(other)), want[i].first);
      Tiny q(other, 3.0);
      q.load_parameters(src.named_parameters());
      for (std::size_t i = 0; i < want.size(); ++i)
        BOOST_TEST(same_bits(q.named_parameters()[i].second, want[i].second.to(other)), want[i].first);
    }
}

BOOST_AUTO_TEST_CASE(loads_refuse_non_float_values) {
  TmpDir dir;
  const std::string path = dir / "c.safetensors";
  Tiny m(DType::Float64, 0.5);
  const NamedTensors before = snapshot(m);
  save_safetensors(path, {{"w", index_tensor({1, 2, 3, 4}, {2, 2})}, {"b", tensor({1, 2}, {2})}});
  BOOST_CHECK_EXCEPTION(load_checkpoint(path, m), IOError, [&](const IOError& e) {
    return message_has(e, {"'w' is int64 (2, 2)", "float64 (2, 2)", "F32 or F64"});
  });
  BOOST_CHECK_EXCEPTION(m.load_parameters(load_safetensors(path).tensors), DTypeError,
                        [&](const DTypeError& e) { return message_has(e, {"'w'", "int64"}); });
  BOOST_TEST(same_named(m.named_parameters(), before));
}

BOOST_AUTO_TEST_CASE(load_parameters_strict_lists_names_non_strict_returns_them) {
  Nested m;  // "enc.w" float64 (3, 2), "head" float32 (2)
  const NamedTensors before = snapshot(m);
  const NamedTensors src = {{"head", tensor({-1, -2}, {2}, DType::Float64)},
                            {"extra", zeros({1})},
                            {"enc.bias", zeros({2})}};
  // strict (default): every missing and unexpected name, nothing loaded.
  BOOST_CHECK_EXCEPTION(m.load_parameters(src), ValueError, [&](const ValueError& e) {
    return message_has(e, {"load_parameters", "missing 'enc.w'", "unexpected 'extra', 'enc.bias'",
                           "nothing was loaded"});
  });
  BOOST_TEST(same_named(m.named_parameters(), before));

  // non-strict: the matching names load (converted), the others are returned.
  const Module::LoadResult r = m.load_parameters(src, /*strict=*/false);
  BOOST_CHECK(r.missing_keys == std::vector<std::string>{"enc.w"});
  BOOST_CHECK(r.unexpected_keys == (std::vector<std::string>{"extra", "enc.bias"}));
  BOOST_TEST(same_bits(m.head, tensor({-1, -2}, {2}, DType::Float32)));
  BOOST_TEST(same_bits(m.enc.w, before[1].second));  // model order: "head", then "enc.w"

  // Matching names are still validated, all or nothing: a bad shape after a good value.
  const NamedTensors loaded = snapshot(m);
  BOOST_CHECK_EXCEPTION(
      m.load_parameters({{"head", tensor({5, 6}, {2})}, {"enc.w", zeros({2, 3})}, {"x", zeros({1})}}, false),
      ShapeError, [&](const ShapeError& e) { return message_has(e, {"'enc.w'", "(2, 3)", "(3, 2)"}); });
  BOOST_CHECK_EXCEPTION(m.load_parameters({{"head", index_tensor({5, 6}, {2})}}, false), DTypeError,
                        [&](const DTypeError& e) { return message_has(e, {"'head'", "int64"}); });
  BOOST_CHECK_EXCEPTION(m.load_parameters({{"head", zeros({2})}, {"head", ones({2})}}, false), ValueError,
                        [&](const ValueError& e) { return message_has(e, {"'head'", "more than once"}); });
  BOOST_TEST(same_named(m.named_parameters(), loaded));

  // Exactly the model's names: nothing missing or unexpected, strict or not.
  const Module::LoadResult all = m.load_parameters(before, false);
  BOOST_TEST(all.missing_keys.empty());
  BOOST_TEST(all.unexpected_keys.empty());
  BOOST_TEST(same_named(m.named_parameters(), before));
}

BOOST_AUTO_TEST_SUITE_END()
