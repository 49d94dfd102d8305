// The first numbers xgrad::Rng gives for seed 42, recorded once (g++ 12 + libstdc++,
// glibc 2.36 libm) and checked by tests/test_rng.cpp (libstdc++) and by
// tests/rng_libcxx/main.cpp (clang++ -stdlib=libc++). They pin the algorithms documented
// at xgrad::Rng: any standard library and compiler must give exactly these, so a change
// here means seeded initialisation, dropout and the examples' data changed for every user.
// The normal() values also depend on std::log / std::cos, i.e. on the C library's libm.
#pragma once
#include <cstdint>

namespace xgrad::rng_expected {

constexpr std::uint64_t kSeed = 42;

// Rng(42)(): std::mt19937_64's raw output, fixed by the standard.
constexpr std::uint64_t kRaw[] = {13930160852258120406ull, 11788048577503494824ull,
                                  13874630024467741450ull, 2513787319205155662ull};
// Default-constructed (seed 5489): the standard's [rand.predef] check, the 10000th output.
constexpr std::uint64_t kDefault10000th = 9981545732273789042ull;

// Rng(42).uniform(), four calls: (raw >> 11) * 2^-53.
constexpr double kUniform[] = {0.75515553295453897, 0.63903139385469743, 0.7521452007480266,
                               0.13627268363243705};
// Rng(42).uniform(-2.0, 3.0), four calls.
constexpr double kUniformRange[] = {1.7757776647726948, 1.1951569692734871, 1.7607260037401331,
                                    -1.3186365818378147};
// Rng(42).normal(), four calls (Box–Muller, two outputs each).
constexpr double kNormal[] = {-1.0771745442782885, 1.0945198485006107, 1.7947316657951717,
                              -0.91212515564414098};
// Rng(42).uniform_int(-3, 1000), six calls.
constexpr std::int64_t kUniformInt[] = {31, 505, 671, 583, 258, 653};
// Rng(42).uniform_int(INT64_MIN, 2^62 - 1), six calls: n = 3 * 2^62, so raw outputs below
// 2^62 are rejected (the 4th and 6th raw outputs here): pins the rejection step.
constexpr std::int64_t kUniformIntWide[] = {-9128269239878819114ll, 2564676540648719016ll,
                                            -9183800067669198070ll, -6396058638708500139ll,
                                            1375579315383837728ll, -2344808076752209664ll};
// Rng(42).shuffle of {0, 1, ..., 9}.
constexpr int kShuffled[] = {1, 7, 9, 0, 3, 8, 4, 2, 5, 6};
// Rng(42).bernoulli(0.5), sixteen calls.
constexpr bool kBernoulli[] = {0, 0, 0, 1, 0, 1, 0, 1, 1, 1, 1, 0, 0, 0, 0, 0};

}  // namespace xgrad::rng_expected
