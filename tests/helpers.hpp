// Test helpers: allclose with the worst index, and tensors from literals.
#pragma once
#include <boost/test/unit_test.hpp>
#include <stdlib.h>  // mkdtemp

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>
#include <sstream>

// Only what the helpers themselves use: each test file includes the headers of what it tests,
// so touching one op's header rebuilds only the tests that use it.
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/parallel.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/module.hpp"

namespace xgrad::test {

// Passes when |a - b| <= atol + rtol * |b| everywhere (and shapes match); otherwise the
// message names the worst index and both values.
inline boost::test_tools::predicate_result allclose(const Tensor& a, const std::vector<double>& b,
                                                    double rtol = 1e-6, double atol = 1e-9) {
  auto va = a.to_vector();
  if (va.size() != b.size()) {
    boost::test_tools::predicate_result r(false);
    r.message() << "sizes differ: " << va.size() << " vs " << b.size();
    return r;
  }
  double worst = 0;
  std::size_t at = 0;
  bool bad = false;
  for (std::size_t i = 0; i < va.size(); ++i) {
    double err = std::abs(va[i] - b[i]);
    bool ok = err <= atol + rtol * std::abs(b[i]) || (std::isinf(va[i]) && va[i] == b[i]);
    if (!ok && (!bad || err > worst || std::isnan(err))) {
      worst = err;
      at = i;
      bad = true;
    }
  }
  boost::test_tools::predicate_result r(!bad);
  if (bad) r.message() << "worst at flat index " << at << ": " << va[at] << " vs expected " << b[at];
  return r;
}

inline boost::test_tools::predicate_result allclose(const Tensor& a, const Tensor& b,
                                                    double rtol = 1e-6, double atol = 1e-9) {
  if (a.shape() != b.shape()) {
    boost::test_tools::predicate_result r(false);
    r.message() << "shapes differ: " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
    return r;
  }
  return allclose(a, b.to_vector(), rtol, atol);
}

// Float tolerance of a result against another computation of it (a cached decoding step against
// the uncached forward): float sums of the same terms in another order (GEMMs of other shapes),
// so the error is a few ulps of b's largest entry: 1e-5 (float32) or 1e-12 relative and absolute.
inline boost::test_tools::predicate_result close_to(const Tensor& a, const Tensor& b) {
  double scale = 0;
  for (double v : b.to_vector()) scale = std::max(scale, std::abs(v));
  const double eps = b.dtype() == DType::Float32 ? 1e-5 : 1e-12;
  return allclose(a, b, eps, eps * scale);
}

inline Tensor f64(const std::vector<double>& v, const Shape& s) { return tensor(v, s, DType::Float64); }
inline Tensor f32(const std::vector<double>& v, const Shape& s) { return tensor(v, s, DType::Float32); }

// Deterministic pseudo-random values in [lo, hi).
inline std::vector<double> vals(std::size_t n, unsigned seed, double lo = -2.0, double hi = 2.0) {
  Rng rng(seed);
  std::vector<double> v(n);
  for (auto& x : v) x = rng.uniform(lo, hi);
  return v;
}
// The values as float32 would store them.
inline std::vector<double> round32(const std::vector<double>& v) {
  std::vector<double> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = double(float(v[i]));
  return r;
}
// Float32 matmul against a float64 reference, with the tolerance derived from the arithmetic
// instead of tuned: for inputs that are exact in float32, each element of C = A B computed in
// float32 (any summation order, FMA or not) satisfies |c - c_exact| <= gamma_K * sum_k |a_ik b_kj|
// with gamma_K = K u / (1 - K u), u = 2^-24 (Higham, Accuracy and Stability, 3.1), plus one
// rounding of the result (u |c_exact|). Inputs are (n, k) and (k, m) row-major float64 values
// already rounded to float32; y is the float32 result.
inline boost::test_tools::predicate_result gemm_f32_within_bound(const Tensor& y, const std::vector<double>& A,
                                                                 const std::vector<double>& B, std::size_t n,
                                                                 std::size_t k, std::size_t m) {
  const double u = std::ldexp(1.0, -24), gamma = double(k) * u / (1 - double(k) * u);
  const auto v = y.to_vector();
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) {
      double exact = 0, abs_sum = 0;
      for (std::size_t q = 0; q < k; ++q) {
        exact += A[i * k + q] * B[q * m + j];
        abs_sum += std::abs(A[i * k + q] * B[q * m + j]);
      }
      const double bound = gamma * abs_sum + u * std::abs(exact), err = std::abs(v[i * m + j] - exact);
      if (!(err <= bound)) {
        boost::test_tools::predicate_result r(false);
        r.message() << "element (" << i << ", " << j << "): " << v[i * m + j] << " vs " << exact << ", error "
                    << err << " > bound " << bound << " (K " << k << ")";
        return r;
      }
    }
  return true;
}
// Whether this CPU runs xgrad's avx512 path (and so its avx2 path too).
inline bool has_avx512_path() {
  const auto paths = supported_cpu_paths();
  return std::find(paths.begin(), paths.end(), CpuPath::Avx512) != paths.end();
}
// Runs f, which returns float32 results, on the avx2 path and then on the avx512 path (call
// only where has_avx512_path()), the path in use restored after (also when f throws); returns
// how many of the results differ in any bit between the two.
template <class F> std::size_t float_bits_differ_avx2_avx512(F&& f) {
  const CpuPath before = cpu_path();
  std::vector<float> runs[2];
  try {
    set_cpu_path(CpuPath::Avx2);
    runs[0] = f();
    set_cpu_path(CpuPath::Avx512);
    runs[1] = f();
  } catch (...) {
    set_cpu_path(before);
    throw;
  }
  set_cpu_path(before);
  if (runs[0].size() != runs[1].size()) return std::max(runs[0].size(), runs[1].size());
  std::size_t differ = 0;
  for (std::size_t i = 0; i < runs[0].size(); ++i) differ += std::memcmp(&runs[0][i], &runs[1][i], sizeof(float)) != 0;
  return differ;
}

// While it lives, every parallel_for splits its work however small
// (detail::set_min_parallel_work), so that the suite's small inputs take the multi-threaded
// paths that larger ones take in use; the bound before is restored after.
struct SplitAllWork {
  std::size_t before = detail::min_parallel_work();
  SplitAllWork() { detail::set_min_parallel_work(1); }
  ~SplitAllWork() { detail::set_min_parallel_work(before); }
  SplitAllWork(const SplitAllWork&) = delete;
  SplitAllWork& operator=(const SplitAllWork&) = delete;
};

// Runs f with n op threads, every parallel_for split (SplitAllWork), then back to the suite's 1
// thread (also when f throws).
template <class F> void with_threads(int n, F&& f) {
  SplitAllWork split;
  set_num_threads(n);
  try {
    f();
  } catch (...) {
    set_num_threads(1);
    throw;
  }
  set_num_threads(1);
}
inline Tensor leaf(const std::vector<double>& v, const Shape& s) {
  Tensor t = f64(v, s);
  t.set_requires_grad(true);
  return t;
}

// The documented exception class of e, for failure messages.
inline const char* error_kind(const std::exception& e) {
  if (dynamic_cast<const ShapeError*>(&e)) return "ShapeError";
  if (dynamic_cast<const DTypeError*>(&e)) return "DTypeError";
  if (dynamic_cast<const IndexError*>(&e)) return "IndexError";
  if (dynamic_cast<const ValueError*>(&e)) return "ValueError";
  if (dynamic_cast<const GraphError*>(&e)) return "GraphError";
  if (dynamic_cast<const IOError*>(&e)) return "IOError";
  if (dynamic_cast<const AnomalyError*>(&e)) return "AnomalyError";
  if (dynamic_cast<const MemoryError*>(&e)) return "MemoryError";
  if (dynamic_cast<const Error*>(&e)) return "xgrad::Error";
  return "a non-xgrad std::exception";
}

// Files as byte strings (checkpoint tests write broken files by hand).
inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}
// A safetensors file from a header text and data bytes.
inline std::string st_file(const std::string& header, const std::string& data = "");
inline std::string le64(std::uint64_t n) {  // 8 little-endian bytes (safetensors header length)
  std::string s(8, '\0');
  for (std::size_t i = 0; i < 8; ++i) s[i] = char((n >> (8 * i)) & 0xff);
  return s;
}
inline std::string st_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

// `ts` with the tensor named `name` replaced by t / left out.
inline NamedTensors replaced(const NamedTensors& ts, const std::string& name, const Tensor& t) {
  NamedTensors s = ts;
  for (auto& [n, v] : s)
    if (n == name) v = t;
  return s;
}
inline NamedTensors removed(const NamedTensors& ts, const std::string& name) {
  NamedTensors s;
  for (const auto& [n, v] : ts)
    if (n != name) s.emplace_back(n, v);
  return s;
}

inline bool all_finite(const Tensor& t) {
  for (double x : t.to_vector())
    if (!std::isfinite(x)) return false;
  return true;
}

// f(inputs..., params...) with the module's parameters replaced by the given tensors, so
// gradcheck differentiates with respect to every parameter too.
inline TensorFn with_params(Module& m, std::size_t n_inputs, std::function<Tensor(const std::vector<Tensor>&)> f) {
  return [&m, n_inputs, f](const std::vector<Tensor>& in) {
    auto slots = m.parameter_slots();
    for (std::size_t i = 0; i < slots.size(); ++i) *slots[i].second = in[n_inputs + i];
    return f(std::vector<Tensor>(in.begin(), in.begin() + long(n_inputs)));
  };
}
inline std::vector<Tensor> inputs_and_params(std::vector<Tensor> inputs, Module& m) {
  for (auto& [name, t] : m.named_parameters()) inputs.push_back(t);
  return inputs;
}
// Gradcheck options for models: the random-upstream VJP check only (full Jacobians are large).
inline GradcheckOptions model_check_options(const std::string& name) {
  GradcheckOptions o;
  o.name = name;
  o.full_jacobian_max = 0;
  return o;
}

// Bit-identical: same dtype, shape and bytes.
inline boost::test_tools::predicate_result same_bits(const Tensor& a, const Tensor& b) {
  boost::test_tools::predicate_result r(true);
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) {
    r = false;
    r.message() << dtype_name(a.dtype()) << " " << shape_str(a.shape()) << " vs "
                << dtype_name(b.dtype()) << " " << shape_str(b.shape());
  } else if (a.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) != 0) {
    r = false;
    r.message() << "values differ: " << a << " vs " << b;
  }
  return r;
}

// A fresh directory under the system temp dir, removed at the end of the test.
struct TmpDir {
  std::filesystem::path path;
  TmpDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "xgrad_test_XXXXXX").string();
    char* p = ::mkdtemp(tmpl.data());
    BOOST_REQUIRE(p != nullptr);
    path = p;
  }
  ~TmpDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  TmpDir(const TmpDir&) = delete;
  TmpDir& operator=(const TmpDir&) = delete;
  std::string operator/(const std::string& name) const { return (path / name).string(); }
  std::vector<std::string> entries() const {  // file names, sorted
    std::vector<std::string> out;
    for (auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// fn() must throw the documented exception class `kind` ("ValueError", ... as error_kind
// names them) with every one of `parts` in its message.
template <class F>
void expect_throws(F&& fn, const char* kind, const std::vector<std::string>& parts) {
  try {
    fn();
    BOOST_ERROR("no exception; expected " << kind);
  } catch (const std::exception& e) {
    BOOST_TEST(std::string(error_kind(e)) == kind, error_kind(e) << ": " << e.what());
    for (const auto& p : parts)
      BOOST_TEST(std::string(e.what()).find(p) != std::string::npos, "'" << p << "' not in: " << e.what());
  }
}

// detail::lane_sum's 16 lanes added as it adds them: pairwise in halves (lane l += lane l + 8
// for l < 8, then + 4, + 2, and lanes 0 + 1). Overwrites `lane`.
template <class T> T add_lanes_in_halves(T* lane) {
  for (int l = 0; l < 8; ++l) lane[l] += lane[l + 8];
  for (int l = 0; l < 4; ++l) lane[l] += lane[l + 4];
  for (int l = 0; l < 2; ++l) lane[l] += lane[l + 2];
  return lane[0] + lane[1];
}

}  // namespace xgrad::test
