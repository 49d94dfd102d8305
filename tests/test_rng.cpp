// xgrad::Rng: pinned first values (the algorithms, so that every standard library gives
// them; tests/rng_libcxx runs the same checks compiled against libc++), statistical
// sanity, uniform_int's edge and error cases, and that randn / uniform / dropout use it.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <numeric>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "helpers.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/layers.hpp"
#include "rng_libcxx/expected.hpp"

using namespace xgrad;
namespace ex = xgrad::rng_expected;

namespace {

constexpr std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();

// Chi-square statistic of observed counts against equal expected counts.
double chi_square(const std::vector<long>& counts) {
  const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
  const double expected = total / double(counts.size());
  double chi2 = 0;
  for (long c : counts) chi2 += (double(c) - expected) * (double(c) - expected) / expected;
  return chi2;
}

// Passes when the message names every fragment.
bool message_has(const std::exception& e, std::initializer_list<const char*> fragments) {
  const std::string m = e.what();
  for (const char* f : fragments)
    if (m.find(f) == std::string::npos) return false;
  return true;
}

// A file's own helper named like an xgrad function must stay callable unqualified with an
// Rng argument (as when Rng was std::mt19937_64): Rng is behind an ADL barrier.
Tensor randn(const Shape& shape, Rng& rng) { return xgrad::randn(shape, rng, DType::Float64); }
Tensor own_randn_call(Rng& rng) { return randn({3}, rng); }

}  // namespace

// Existing code passes Rng to std:: algorithms: it must stay a UniformRandomBitGenerator.
static_assert(std::is_same_v<Rng::result_type, std::uint64_t>);
static_assert(Rng::min() == 0 && Rng::max() == ~std::uint64_t(0));
static_assert(std::is_same_v<decltype(std::declval<Rng&>()()), std::uint64_t>);

BOOST_AUTO_TEST_SUITE(rng)

// The constants in rng_libcxx/expected.hpp pin the algorithms: any standard library and
// compiler must give exactly these (normal() also needs the same libm).
BOOST_AUTO_TEST_CASE(pinned_first_values) {
  {
    Rng r(ex::kSeed);
    for (int i = 0; i < 4; ++i) BOOST_TEST(r() == ex::kRaw[i]);
    Rng d;
    d.engine().discard(9999);
    BOOST_TEST(d() == ex::kDefault10000th);
  }
  {
    Rng r(ex::kSeed);
    for (int i = 0; i < 4; ++i) BOOST_TEST(r.uniform() == ex::kUniform[i]);
  }
  {
    Rng r(ex::kSeed);
    for (int i = 0; i < 4; ++i) BOOST_TEST(r.uniform(-2.0, 3.0) == ex::kUniformRange[i]);
  }
  {
    Rng r(ex::kSeed);
    for (int i = 0; i < 4; ++i) BOOST_TEST(r.normal() == ex::kNormal[i]);
  }
  {
    Rng r(ex::kSeed);
    for (int i = 0; i < 6; ++i) BOOST_TEST(r.uniform_int(-3, 1000) == ex::kUniformInt[i]);
  }
  {
    Rng r(ex::kSeed);
    for (int i = 0; i < 6; ++i) BOOST_TEST(r.uniform_int(kMin, (std::int64_t(1) << 62) - 1) == ex::kUniformIntWide[i]);
  }
  {
    Rng r(ex::kSeed);
    std::vector<int> v(10);
    std::iota(v.begin(), v.end(), 0);
    r.shuffle(v.begin(), v.end());
    BOOST_TEST(v == std::vector<int>(std::begin(ex::kShuffled), std::end(ex::kShuffled)),
               boost::test_tools::per_element());
  }
  {
    Rng r(ex::kSeed);
    for (int i = 0; i < 16; ++i) BOOST_TEST(r.bernoulli(0.5) == ex::kBernoulli[i]);
  }
}

// The documented relations to the raw output: uniform() is the top 53 bits, normal() takes
// exactly two outputs, uniform_int over a power-of-two range takes the low bits of one.
BOOST_AUTO_TEST_CASE(relations_to_the_engine) {
  Rng a(7), b(7);
  for (int i = 0; i < 100; ++i) BOOST_TEST(a.uniform() == double(b() >> 11) / 9007199254740992.0);
  for (int i = 0; i < 100; ++i) {
    a.normal();
    b();
    b();
  }
  BOOST_TEST((a == b));
  for (int i = 0; i < 100; ++i) BOOST_TEST(a.uniform_int(0, 255) == std::int64_t(b() & 255));
  Rng c(1), d(1);
  c.seed(9);
  d.seed(9);
  c.normal();
  BOOST_TEST((c != d));
  d.seed(9);
  c.seed(9);
  BOOST_TEST((c == d));
  BOOST_TEST((Rng() == Rng(Rng::default_seed)));
}

BOOST_AUTO_TEST_CASE(uniform_moments_and_bounds) {
  Rng r(11);
  const int n = 100000;
  double s = 0, s2 = 0;
  double lo_seen = 1, hi_seen = 0;
  for (int i = 0; i < n; ++i) {
    const double u = r.uniform();
    BOOST_REQUIRE(u >= 0.0 && u < 1.0);
    s += u;
    s2 += u * u;
    lo_seen = std::min(lo_seen, u), hi_seen = std::max(hi_seen, u);
  }
  const double mean = s / n, var = s2 / n - mean * mean;
  // Standard errors: sd / sqrt(n) for the mean (sd^2 = 1/12); var(u^2)-based for the variance.
  BOOST_TEST(std::abs(mean - 0.5) < 5 * std::sqrt(1.0 / 12 / n));
  BOOST_TEST(std::abs(var - 1.0 / 12) < 5 * std::sqrt(1.0 / 180 / n));
  BOOST_TEST(lo_seen < 1e-3);
  BOOST_TEST(hi_seen > 1 - 1e-3);

  for (int i = 0; i < 10000; ++i) {
    const double u = r.uniform(-3.5, 2.0);
    BOOST_REQUIRE(u >= -3.5 && u < 2.0);
  }
  BOOST_TEST(r.uniform(4.25, 4.25) == 4.25);
  // A range one ulp wide: always lo, never hi.
  const double lo = 1.0, hi = std::nextafter(1.0, 2.0);
  for (int i = 0; i < 1000; ++i) BOOST_REQUIRE(r.uniform(lo, hi) == lo);
}

BOOST_AUTO_TEST_CASE(uniform_errors) {
  Rng r(1);
  const double inf = std::numeric_limits<double>::infinity(), nan = std::nan("");
  for (auto [lo, hi] : std::vector<std::pair<double, double>>{
           {2.0, 1.0}, {nan, 1.0}, {0.0, nan}, {0.0, inf}, {-inf, 0.0},
           {-std::numeric_limits<double>::max(), std::numeric_limits<double>::max()}}) {
    BOOST_TEST_CONTEXT("lo " << lo << " hi " << hi) {
      BOOST_CHECK_EXCEPTION(r.uniform(lo, hi), ValueError,
                            [](const ValueError& e) { return message_has(e, {"Rng::uniform", "lo", "hi"}); });
    }
  }
}

// Bounds derived from standard errors of n = 100,000 draws (5 standard errors each).
BOOST_AUTO_TEST_CASE(normal_moments) {
  Rng r(123);
  const int n = 100000;
  double s1 = 0, s2 = 0, s3 = 0, s4 = 0;
  long within_1 = 0;
  for (int i = 0; i < n; ++i) {
    const double z = r.normal();
    BOOST_REQUIRE(std::isfinite(z));
    s1 += z, s2 += z * z, s3 += z * z * z, s4 += z * z * z * z;
    within_1 += std::abs(z) < 1.0;
  }
  const double mean = s1 / n, var = s2 / n - mean * mean;
  BOOST_TEST(std::abs(mean) < 5 * std::sqrt(1.0 / n));          // se = 1 / sqrt(n)
  BOOST_TEST(std::abs(var - 1.0) < 5 * std::sqrt(2.0 / n));     // se = sqrt(2 / n)
  BOOST_TEST(std::abs(s3 / n) < 5 * std::sqrt(15.0 / n));       // E z^3 = 0, var z^3 = 15
  BOOST_TEST(std::abs(s4 / n - 3.0) < 5 * std::sqrt(96.0 / n)); // E z^4 = 3, var z^4 = 96
  const double p1 = 0.6826894921370859;                         // P(|z| < 1)
  BOOST_TEST(std::abs(double(within_1) / n - p1) < 5 * std::sqrt(p1 * (1 - p1) / n));
}

// Chi-square bounds at p = 0.001 (critical values of the chi-square distribution).
BOOST_AUTO_TEST_CASE(uniform_int_is_unbiased) {
  Rng r(2024);
  {  // 10 values, 100,000 draws: chi2(9 dof) < 27.88
    std::vector<long> counts(10);
    for (int i = 0; i < 100000; ++i) {
      const std::int64_t v = r.uniform_int(-4, 5);
      BOOST_REQUIRE(v >= -4 && v <= 5);
      ++counts[std::size_t(v + 4)];
    }
    for (long c : counts) BOOST_TEST(c > 0);
    BOOST_TEST(chi_square(counts) < 27.88);
  }
  {  // n = 3 * 2^62 values (INT64_MIN .. 2^62 - 1), in thirds. Reducing the raw output
     // modulo n without rejection would put half of all draws in the first third.
     // 30,000 draws: chi2(2 dof) < 13.82.
    std::vector<long> thirds(3);
    for (int i = 0; i < 30000; ++i) {
      const std::int64_t v = r.uniform_int(kMin, (std::int64_t(1) << 62) - 1);
      BOOST_REQUIRE(v <= (std::int64_t(1) << 62) - 1);
      ++thirds[v < -(std::int64_t(1) << 62) ? 0 : v < 0 ? 1 : 2];
    }
    BOOST_TEST(chi_square(thirds) < 13.82);
  }
  {  // shuffle: the 6 orders of 3 elements, 60,000 shuffles: chi2(5 dof) < 20.52
    std::map<std::array<int, 3>, long> seen;
    for (int i = 0; i < 60000; ++i) {
      std::array<int, 3> a{0, 1, 2};
      r.shuffle(a.begin(), a.end());
      ++seen[a];
    }
    BOOST_TEST(seen.size() == 6u);
    std::vector<long> counts;
    for (const auto& kv : seen) counts.push_back(kv.second);
    BOOST_TEST(chi_square(counts) < 20.52);
  }
}

BOOST_AUTO_TEST_CASE(uniform_int_edges) {
  Rng r(5);
  for (std::int64_t v : {kMin, std::int64_t(-1), std::int64_t(0), std::int64_t(17), kMax})
    BOOST_TEST(r.uniform_int(v, v) == v);
  // Full int64 range: one raw output, its sign bit flipped (lo + x in two's complement).
  Rng a(77), b(77);
  for (int i = 0; i < 1000; ++i) {
    const std::uint64_t x = b() ^ (std::uint64_t(1) << 63);
    BOOST_REQUIRE(a.uniform_int(kMin, kMax) == std::int64_t(x));
  }
  BOOST_TEST((a == b));
  // Two-value ranges at both ends, and spans of 2^63 or more.
  bool saw[2][2] = {};
  for (int i = 0; i < 200; ++i) {
    const std::int64_t hi = r.uniform_int(kMax - 1, kMax), lo = r.uniform_int(kMin, kMin + 1);
    BOOST_REQUIRE((hi == kMax - 1 || hi == kMax));
    BOOST_REQUIRE((lo == kMin || lo == kMin + 1));
    saw[0][hi == kMax] = saw[1][lo == kMin] = true;
  }
  BOOST_TEST((saw[0][0] && saw[0][1] && saw[1][0] && saw[1][1]));
  bool neg = false, pos = false;
  for (int i = 0; i < 200; ++i) {
    const std::int64_t v = r.uniform_int(-1, kMax);
    BOOST_REQUIRE(v >= -1);
    const std::int64_t w = r.uniform_int(kMin, 0);
    BOOST_REQUIRE(w <= 0);
    neg |= w < kMin / 2, pos |= v > kMax / 2;
  }
  BOOST_TEST((neg && pos));
}

BOOST_AUTO_TEST_CASE(uniform_int_errors) {
  Rng r(1);
  BOOST_CHECK_EXCEPTION(r.uniform_int(5, 3), ValueError, [](const ValueError& e) {
    return message_has(e, {"Rng::uniform_int", "5", "3"});
  });
  BOOST_CHECK_EXCEPTION(r.uniform_int(kMax, kMin), ValueError, [](const ValueError& e) {
    return message_has(e, {"Rng::uniform_int", "9223372036854775807", "-9223372036854775808"});
  });
  BOOST_CHECK_EXCEPTION(r.uniform_int(0, -1), ValueError, [](const ValueError& e) {
    return message_has(e, {"uniform_int", "lo (0)", "hi (-1)"});
  });
}

BOOST_AUTO_TEST_CASE(bernoulli_frequency_and_errors) {
  Rng r(99);
  const int n = 100000;
  for (double p : {0.3, 0.5, 0.9}) {
    long hits = 0;
    for (int i = 0; i < n; ++i) hits += r.bernoulli(p);
    BOOST_TEST_CONTEXT("p " << p) {
      BOOST_TEST(std::abs(double(hits) / n - p) < 5 * std::sqrt(p * (1 - p) / n));
    }
  }
  for (int i = 0; i < 1000; ++i) {
    BOOST_REQUIRE(!r.bernoulli(0.0));
    BOOST_REQUIRE(r.bernoulli(1.0));
  }
  for (double p : {-0.1, 1.5, std::nan("")})
    BOOST_CHECK_EXCEPTION(r.bernoulli(p), ValueError,
                          [](const ValueError& e) { return message_has(e, {"Rng::bernoulli", "p"}); });
}

BOOST_AUTO_TEST_CASE(shuffle_edges) {
  Rng r(3), untouched(3);
  std::vector<int> empty, one{42};
  r.shuffle(empty.begin(), empty.end());
  r.shuffle(one.begin(), one.end());
  BOOST_TEST(one == std::vector<int>{42});
  BOOST_TEST((r == untouched));  // n <= 1 draws nothing
  std::vector<std::string> words{"a", "b", "c", "d", "e", "f", "g"};
  auto sorted = words;
  r.shuffle(words.begin(), words.end());
  BOOST_TEST(words != sorted);
  std::sort(words.begin(), words.end());
  BOOST_TEST(words == sorted);
}

// The library's samplers go through Rng: randn = normal(), uniform = uniform(lo, hi),
// dropout's mask = bernoulli(1 - p).
BOOST_AUTO_TEST_CASE(library_uses_rng) {
  Rng a(ex::kSeed), b(ex::kSeed);
  auto z = randn({4}, a, DType::Float64).to_vector();
  for (int i = 0; i < 4; ++i) BOOST_TEST(z[std::size_t(i)] == ex::kNormal[i]);
  auto u = uniform({4}, -2.0, 3.0, b, DType::Float64).to_vector();
  for (int i = 0; i < 4; ++i) BOOST_TEST(u[std::size_t(i)] == ex::kUniformRange[i]);
  auto f = randn({4}, a, DType::Float32).to_vector();
  Rng twin(ex::kSeed);
  for (int i = 0; i < 4; ++i) twin.normal();
  for (int i = 0; i < 4; ++i) BOOST_TEST(f[std::size_t(i)] == double(float(twin.normal())));

  Rng d(5), m(5);
  auto y = dropout(ones({1000}, DType::Float64), 0.25, true, d).to_vector();
  for (double v : y) BOOST_REQUIRE(v == (m.bernoulli(0.75) ? 1.0 / 0.75 : 0.0));
  BOOST_CHECK_THROW(uniform({2}, 1.0, 0.0, a), ValueError);
  Rng o(1);
  BOOST_TEST((own_randn_call(o).dtype() == DType::Float64));
}

BOOST_AUTO_TEST_SUITE_END()
