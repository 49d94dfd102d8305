// The fused attention op against an independent loop implementation (forward) and against
// attention_reference, its composition from registered ops (forward and backward, with a
// random upstream gradient), over masks, causal row blocks, packed qkv and threads.
// Gradchecks and gradgradchecks of the op itself run in the registry suite.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/attention.hpp"
#include "xgrad/ops/shape.hpp"

using namespace xgrad;
using xgrad::test::allclose;

namespace {

struct Case {
  std::size_t B, T, S, H, D, Dv;
};

// out[b, t, h*Dv + c] by plain loops in double, mask(b, h, t, s) true = masked.
template <class Masked, class Add>
std::vector<double> naive_attention(const Case& c, const std::vector<double>& q, const std::vector<double>& k,
                                    const std::vector<double>& v, double scale, Masked masked, Add added) {
  const std::size_t E = c.H * c.D, Ev = c.H * c.Dv;
  std::vector<double> out(c.B * c.T * Ev, 0.0);
  for (std::size_t b = 0; b < c.B; ++b)
    for (std::size_t h = 0; h < c.H; ++h)
      for (std::size_t t = 0; t < c.T; ++t) {
        std::vector<double> w(c.S, 0.0);
        double mx = -INFINITY;
        for (std::size_t s = 0; s < c.S; ++s) {
          if (masked(b, h, t, s)) continue;
          double dot = 0;
          for (std::size_t i = 0; i < c.D; ++i) dot += q[(b * c.T + t) * E + h * c.D + i] * k[(b * c.S + s) * E + h * c.D + i];
          w[s] = dot * scale + added(b, h, t, s);
          mx = std::max(mx, w[s]);
        }
        if (mx == -INFINITY) continue;  // nothing visible: zeros
        double total = 0;
        for (std::size_t s = 0; s < c.S; ++s) total += w[s] = masked(b, h, t, s) ? 0.0 : std::exp(w[s] - mx);
        for (std::size_t s = 0; s < c.S; ++s)
          for (std::size_t j = 0; j < c.Dv; ++j)
            out[(b * c.T + t) * Ev + h * c.Dv + j] += w[s] / total * v[(b * c.S + s) * Ev + h * c.Dv + j];
      }
  return out;
}

struct Inputs {
  Tensor q, k, v, g;
};
Inputs random_inputs(const Case& c, Rng& rng, DType dt = DType::Float64) {
  auto leaf = [&](const Shape& s) {
    Tensor t = randn(s, rng, dt);
    t.set_requires_grad(true);
    return t;
  };
  return {leaf({c.B, c.T, c.H * c.D}), leaf({c.B, c.S, c.H * c.D}), leaf({c.B, c.S, c.H * c.Dv}),
          randn({c.B, c.T, c.H * c.Dv}, rng, dt)};
}

// Fused output and input gradients (random upstream g) vs attention_reference's.
void check_against_reference(const Case& c, const AttentionMasks& m, Rng& rng, double tol = 1e-12) {
  Inputs in = random_inputs(c, rng);
  Tensor fused = attention(in.q, in.k, in.v, c.H, m);
  Tensor ref = attention_reference(in.q, in.k, in.v, c.H, m).out;
  BOOST_TEST(allclose(fused, ref, tol, tol));
  auto gf = grad({fused}, {in.q, in.k, in.v}, {in.g});
  auto gr = grad({ref}, {in.q, in.k, in.v}, {in.g});
  for (std::size_t i = 0; i < 3; ++i) {
    BOOST_TEST_CONTEXT("gradient " << "qkv"[i]) BOOST_TEST(allclose(gf[i], gr[i], tol, tol));
    for (double x : gf[i].to_vector()) BOOST_TEST_REQUIRE(std::isfinite(x));
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_op)

BOOST_AUTO_TEST_CASE(forward_matches_plain_loops_with_every_mask_kind) {
  Rng rng(11);
  const Case c{2, 5, 6, 2, 3, 4};
  Inputs in = random_inputs(c, rng);
  AttentionMasks m;
  m.mask = bool_tensor({false, false, false, false, true, false,  //
                        true, true, true, true, true, true,        // query 1: fully masked
                        false, false, false, false, false, false,  //
                        false, true, false, true, false, true,     //
                        false, false, false, false, false, false},
                       {5, 6});
  m.key_padding_mask = bool_tensor({false, false, false, false, false, false,  //
                                    false, false, false, false, true, true},
                                   {2, 6});
  m.float_mask = randn({2, 1, 5, 6}, rng, DType::Float64);
  m.is_causal = true;
  const auto mv = m.mask.to_vector(), pv = m.key_padding_mask.to_vector(), fv = m.float_mask.to_vector();
  auto masked = [&](std::size_t b, std::size_t, std::size_t t, std::size_t s) {
    return mv[t * 6 + s] != 0 || pv[b * 6 + s] != 0 || s > t;
  };
  auto added = [&](std::size_t b, std::size_t, std::size_t t, std::size_t s) { return fv[(b * 5 + t) * 6 + s]; };
  const double scale = 1 / std::sqrt(3.0);
  const auto expected = naive_attention(c, in.q.to_vector(), in.k.to_vector(), in.v.to_vector(), scale, masked, added);
  BOOST_TEST(allclose(attention(in.q, in.k, in.v, c.H, m), expected, 1e-13, 1e-14));
  // Query 1 sees nothing: its output is exactly zero.
  const auto out = attention(in.q, in.k, in.v, c.H, m).to_vector();
  for (std::size_t j = 0; j < c.H * c.Dv; ++j) BOOST_TEST(out[(0 * c.T + 1) * c.H * c.Dv + j] == 0.0);
}

// float32 runs its own vectorised softmax (AVX2 / AVX-512 clones): rows longer than a vector,
// groups of 16 rows, every mask kind, a fully masked row and a fully padded batch entry.
BOOST_AUTO_TEST_CASE(float32_matches_plain_loops_with_every_mask_kind) {
  Rng rng(18);
  const Case c{2, 37, 40, 2, 8, 8};
  std::vector<bool> bits(c.T * c.S), pad(c.B * c.S);
  for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = (i * 13 + 5) % 7 == 0 || i / c.S == 20;  // row 20: all masked
  for (std::size_t s = 0; s < c.S; ++s) pad[s] = s % 5 == 4, pad[c.S + s] = true;                 // batch 1: all padding
  for (bool causal : {false, true}) {
    Inputs in = random_inputs(c, rng, DType::Float32);
    AttentionMasks m;
    m.mask = bool_tensor(bits, {c.T, c.S});
    m.key_padding_mask = bool_tensor(pad, {c.B, c.S});
    m.float_mask = randn({c.B, 1, c.T, c.S}, rng, DType::Float32);
    m.is_causal = causal;
    const auto fv = m.float_mask.to_vector();
    auto masked = [&](std::size_t b, std::size_t, std::size_t t, std::size_t s) {
      return bits[t * c.S + s] || pad[b * c.S + s] || (causal && s > t);
    };
    auto added = [&](std::size_t b, std::size_t, std::size_t t, std::size_t s) { return fv[(b * c.T + t) * c.S + s]; };
    const auto expected = naive_attention(c, in.q.to_vector(), in.k.to_vector(), in.v.to_vector(),
                                          1 / std::sqrt(double(c.D)), masked, added);
    Tensor out = attention(in.q, in.k, in.v, c.H, m);
    BOOST_TEST_CONTEXT("causal " << causal) {
      BOOST_TEST(out.dtype() == DType::Float32);
      BOOST_TEST(allclose(out, expected, 2e-5, 2e-6));
      const auto ov = out.to_vector();
      for (std::size_t b = 0; b < c.B; ++b)  // row 20 and every row of batch 1 see nothing
        for (std::size_t t = 0; t < c.T; ++t)
          if (t == 20 || b == 1)
            for (std::size_t j = 0; j < c.H * c.Dv; ++j) BOOST_TEST_REQUIRE(ov[(b * c.T + t) * c.H * c.Dv + j] == 0.0);
    }
  }
}

BOOST_AUTO_TEST_CASE(custom_scale_matches_plain_loops) {
  Rng rng(12);
  const Case c{1, 3, 4, 3, 2, 2};
  Inputs in = random_inputs(c, rng);
  auto none = [](std::size_t, std::size_t, std::size_t, std::size_t) { return false; };
  auto zero = [](std::size_t, std::size_t, std::size_t, std::size_t) { return 0.0; };
  const auto expected = naive_attention(c, in.q.to_vector(), in.k.to_vector(), in.v.to_vector(), 2.5, none, zero);
  BOOST_TEST(allclose(attention(in.q, in.k, in.v, c.H, {}, 2.5), expected, 1e-13, 1e-14));
}

BOOST_AUTO_TEST_CASE(fused_matches_reference_forward_and_backward) {
  Rng rng(13);
  AttentionMasks none;
  check_against_reference({2, 4, 4, 2, 3, 3}, none, rng);
  check_against_reference({1, 3, 7, 1, 5, 2}, none, rng);  // cross attention, Dv != D
  AttentionMasks causal;
  causal.is_causal = true;
  check_against_reference({2, 6, 6, 3, 2, 2}, causal, rng);
  // Longer than one causal row block (64 rows): the future-key skipping path.
  check_against_reference({1, 150, 150, 2, 4, 4}, causal, rng);
  check_against_reference({1, 130, 70, 1, 3, 2}, causal, rng);  // more queries than keys
  check_against_reference({1, 70, 130, 1, 3, 2}, causal, rng);  // more keys than queries
  AttentionMasks padded;
  padded.key_padding_mask = bool_tensor({false, true, false, true, true, true, true, true}, {2, 4});  // batch 1 all padding
  padded.is_causal = true;
  check_against_reference({2, 4, 4, 2, 2, 2}, padded, rng);
  // Trailing key padding over several row blocks: keys after a batch's last unpadded key are
  // not computed (batch 0 from key 70, batch 1 from key 30, with an inner padded key 5),
  // with and without the causal skip.
  std::vector<bool> tail(2 * 100);
  for (std::size_t s = 0; s < 100; ++s) tail[s] = s >= 70, tail[100 + s] = s >= 30 || s == 5;
  for (bool causal : {false, true}) {
    AttentionMasks trailing;
    trailing.key_padding_mask = bool_tensor(tail, {2, 100});
    trailing.is_causal = causal;
    check_against_reference({2, 100, 100, 2, 3, 3}, trailing, rng);
    check_against_reference({2, 130, 100, 1, 2, 3}, trailing, rng);  // more queries than keys
  }
  AttentionMasks per_head;  // (B, H, T, S) mask
  std::vector<bool> bits(2 * 2 * 3 * 5);
  for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = (i * 7 + 3) % 4 == 0;
  per_head.mask = bool_tensor(bits, {2, 2, 3, 5});
  check_against_reference({2, 3, 5, 2, 2, 3}, per_head, rng);
  AttentionMasks additive;
  additive.float_mask = randn({3, 5}, rng, DType::Float64);  // constant: fused path
  check_against_reference({2, 3, 5, 2, 2, 3}, additive, rng);
}

// skip_padded_queries: a padding query sees nothing (output row 0, no gradient through it),
// the queries after a batch's last unpadded position are not computed. Against plain loops,
// against the reference (forward and backward), second order, and the argument checks.
BOOST_AUTO_TEST_CASE(skip_padded_queries_zeroes_padding_queries) {
  Rng rng(19);
  // batch 0: padding at 2 (inside) and from 70; batch 1: all padding; batch 2: none.
  const std::size_t B = 3, T = 100;
  std::vector<bool> pad(B * T);
  for (std::size_t t = 0; t < T; ++t) pad[t] = t == 2 || t >= 70, pad[T + t] = true, pad[2 * T + t] = false;
  for (bool causal : {false, true}) {
    BOOST_TEST_CONTEXT("causal " << causal) {
      AttentionMasks m;
      m.key_padding_mask = bool_tensor(pad, {B, T});
      m.is_causal = causal;
      m.skip_padded_queries = true;
      const Case c{B, T, T, 2, 3, 4};
      Inputs in = random_inputs(c, rng);
      auto masked = [&](std::size_t b, std::size_t, std::size_t t, std::size_t s) {
        return pad[b * T + s] || pad[b * T + t] || (causal && s > t);
      };
      auto zero = [](std::size_t, std::size_t, std::size_t, std::size_t) { return 0.0; };
      const Tensor out = attention(in.q, in.k, in.v, c.H, m);
      BOOST_TEST(allclose(out, naive_attention(c, in.q.to_vector(), in.k.to_vector(), in.v.to_vector(),
                                               1 / std::sqrt(3.0), masked, zero), 1e-13, 1e-14));
      const auto ov = out.to_vector();
      const auto g = grad({out}, {in.q, in.k, in.v}, {in.g});
      const auto gq = g[0].to_vector(), gk = g[1].to_vector(), gv = g[2].to_vector();
      for (std::size_t b = 0; b < B; ++b)
        for (std::size_t t = 0; t < T; ++t)
          if (pad[b * T + t]) {
            for (std::size_t j = 0; j < c.H * c.Dv; ++j) BOOST_TEST_REQUIRE(ov[(b * T + t) * c.H * c.Dv + j] == 0.0);
            for (std::size_t j = 0; j < c.H * c.D; ++j) {
              BOOST_TEST_REQUIRE(gq[(b * T + t) * c.H * c.D + j] == 0.0);
              BOOST_TEST_REQUIRE(gk[(b * T + t) * c.H * c.D + j] == 0.0);
            }
          }
      check_against_reference(c, m, rng);
      check_against_reference({B, T, T, 1, 2, 2}, m, rng);
      AttentionMasks small = m;  // second order through the composed backward
      small.key_padding_mask = bool_tensor({false, true, false, true, true, true, false, false}, {2, 4});
      Inputs s = random_inputs({2, 4, 4, 2, 2, 2}, rng);
      auto r = gradgradcheck([&](const auto& x) { return attention(x[0], x[1], x[2], 2, small); }, {s.q, s.k, s.v},
                             {"attention skip_padded_queries"});
      BOOST_TEST(r.ok, r.message);
    }
  }
  AttentionMasks no_mask;
  no_mask.skip_padded_queries = true;
  Inputs in = random_inputs({1, 3, 3, 1, 2, 2}, rng);
  BOOST_CHECK_THROW(attention(in.q, in.k, in.v, 1, no_mask), ValueError);
  Inputs cross = random_inputs({1, 3, 4, 1, 2, 2}, rng);
  AttentionMasks cm;
  cm.key_padding_mask = bool_tensor({false, false, true, true}, {1, 4});
  cm.skip_padded_queries = true;
  try {
    attention(cross.q, cross.k, cross.v, 1, cm);
    BOOST_ERROR("no ValueError");
  } catch (const ValueError& e) {
    BOOST_TEST(std::string(e.what()).find("3 queries, 4 keys") != std::string::npos, e.what());
  }
}

BOOST_AUTO_TEST_CASE(packed_qkv_equals_three_separate_inputs) {
  Rng rng(14);
  const std::size_t B = 2, T = 70, E = 8, H = 2;  // T > 64: several causal row blocks
  Tensor qkv = randn({B, T, 3 * E}, rng, DType::Float64);
  qkv.set_requires_grad(true);
  Tensor g = randn({B, T, E}, rng, DType::Float64);
  AttentionMasks m;
  m.is_causal = true;
  m.key_padding_mask = zeros({B, T}, DType::Bool);
  Tensor packed = attention_packed(qkv, H, m);
  Tensor dqkv = grad({packed}, {qkv}, {g})[0];
  Tensor q = narrow(qkv, 2, 0, E), k = narrow(qkv, 2, E, E), v = narrow(qkv, 2, 2 * E, E);
  Tensor separate = attention(q, k, v, H, m);
  BOOST_TEST(allclose(packed, separate, 1e-14, 1e-14));
  Tensor dsep = grad({separate}, {qkv}, {g})[0];
  BOOST_TEST(allclose(dqkv, dsep, 1e-12, 1e-13));
}

BOOST_AUTO_TEST_CASE(two_threads_give_the_same_bits) {
  Rng rng(15);
  const Case c{2, 80, 80, 4, 8, 8};
  Inputs in = random_inputs(c, rng, DType::Float32);
  AttentionMasks m;
  m.is_causal = true;
  auto run = [&] {
    Tensor out = attention(in.q, in.k, in.v, c.H, m);
    auto grads = grad({out}, {in.q, in.k, in.v}, {in.g});
    std::vector<double> all = out.to_vector();
    for (auto& t : grads) {
      auto v = t.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const auto one = run();
  std::vector<double> two;
  test::with_threads(2, [&] { two = run(); });
  BOOST_TEST(one == two);
  BOOST_TEST(num_threads() == 1);
}

// The AVX2 and AVX-512 paths both fuse every multiply-add and run the same row kernels'
// operations in the same order (the AVX-512 path's own kernels for rows of <= 16 keys
// included), so float32 attention gives the same bits on both: output and the three input
// gradients, for short rows (1, 5, 16 keys, groups of 16 query rows and a partial one), longer
// ones (17, 40), every mask kind, rows with nothing visible and padding queries skipped.
BOOST_AUTO_TEST_CASE(float32_attention_is_the_same_bits_on_the_avx2_and_avx512_paths) {
  if (!test::has_avx512_path()) {
    BOOST_TEST_MESSAGE("attention: this CPU has no AVX-512 path to compare with avx2");
    return;
  }
  Rng rng(23);
  const Case cases[] = {{2, 16, 16, 2, 8, 8}, {2, 20, 5, 2, 4, 4}, {1, 3, 1, 1, 4, 4},
                        {2, 16, 17, 2, 8, 8}, {2, 19, 40, 2, 8, 4}, {3, 16, 16, 4, 16, 16}};
  std::size_t compared = 0;
  for (const Case& c : cases)
    for (int kind = 0; kind < 7; ++kind) {
      AttentionMasks m;
      std::vector<bool> pad(c.B * c.S, false);
      for (std::size_t s = c.S / 2 + 1; s < c.S; ++s) pad[s] = true;  // batch 0: a padded tail
      for (std::size_t s = 0; s < c.S; ++s) pad[(c.B - 1) * c.S + s] = c.B > 2;  // the last of 3: all padding
      std::vector<bool> bm(c.T * c.S);
      for (std::size_t i = 0; i < bm.size(); ++i) bm[i] = (i * 7) % 5 == 0 || i / c.S == 2;  // row 2: all masked
      if (kind == 1) m.key_padding_mask = bool_tensor(pad, {c.B, c.S});
      if (kind == 2) m.is_causal = true;
      if (kind == 3) m.mask = bool_tensor(bm, {c.T, c.S});
      if (kind == 4) m.float_mask = randn({c.T, c.S}, rng, DType::Float32);
      if (kind == 5) m.key_padding_mask = bool_tensor(pad, {c.B, c.S}), m.is_causal = true;
      if (kind == 6) {
        if (c.T != c.S) continue;
        m.key_padding_mask = bool_tensor(pad, {c.B, c.S}), m.skip_padded_queries = true;
      }
      Inputs in = random_inputs(c, rng, DType::Float32);
      const std::size_t differ = test::float_bits_differ_avx2_avx512([&] {
        Tensor out = attention(in.q, in.k, in.v, c.H, m);
        auto grads = grad({out}, {in.q, in.k, in.v}, {in.g});
        std::vector<float> all(out.data<float>(), out.data<float>() + out.numel());
        for (auto& t : grads) all.insert(all.end(), t.data<float>(), t.data<float>() + t.numel());
        return all;
      });
      BOOST_TEST_CONTEXT("B " << c.B << " T " << c.T << " S " << c.S << " H " << c.H << " mask kind " << kind)
      BOOST_TEST(differ == 0u);
      ++compared;
    }
  BOOST_TEST(compared == 38u);
}

// Rows of at most 16 keys run their own kernels on the AVX-512 and AVX2 paths (one register a
// row, or two; ops/attention.cpp) and the head products their own (tiny_gemm), rows and products of
// more the generic ones. Both give the same bits, on every CPU path: c keys against the same c
// keys followed by 17 - c masked ones (a bool mask, or -inf in an additive one; then the rows
// have 17 keys and take the generic kernels, and the masked keys add exact zeros). Output and
// the input gradients (dk, dv: their first c key rows), without a mask and with an additive one.
// (A reference that holds whatever path runs which kernels: with the AVX-512 short rows'
// sums reversed, 16 of its 73 assertions fail, the avx512 ones.)
BOOST_AUTO_TEST_CASE(float32_short_rows_are_the_same_bits_as_the_generic_kernels) {
  const CpuPath before = cpu_path();
  Rng rng(29);
  constexpr std::size_t B = 2, T = 20, H = 2, D = 8, L = 17;  // T: a group of 16 query rows and a partial one
  std::size_t compared = 0;
  for (CpuPath path : supported_cpu_paths())
    for (std::size_t c : {1, 5, 16})
      for (bool additive : {false, true}) {
        set_cpu_path(path);
        const Case cs{B, T, c, H, D, D};
        Inputs in = random_inputs(cs, rng, DType::Float32);
        Tensor k_tail = randn({B, L - c, H * D}, rng, DType::Float32), v_tail = randn({B, L - c, H * D}, rng, DType::Float32);
        Tensor k_long = concat({in.k.detach(), k_tail}, 1), v_long = concat({in.v.detach(), v_tail}, 1);
        k_long.set_requires_grad(true), v_long.set_requires_grad(true);
        AttentionMasks short_mask, long_mask;
        std::vector<bool> hide(T * L);
        for (std::size_t i = 0; i < T * L; ++i) hide[i] = i % L >= c;
        if (additive) {
          Tensor add = randn({T, c}, rng, DType::Float32);
          const std::vector<double> narrow_add = add.to_vector();
          std::vector<double> wide(T * L, -std::numeric_limits<double>::infinity());
          for (std::size_t t = 0; t < T; ++t)
            for (std::size_t j = 0; j < c; ++j) wide[t * L + j] = narrow_add[t * c + j];
          short_mask.float_mask = add;
          long_mask.float_mask = tensor(wide, {T, L}, DType::Float32);
        } else {
          long_mask.mask = bool_tensor(hide, {T, L});
        }
        Tensor out_s = attention(in.q, in.k, in.v, H, short_mask);
        Tensor out_l = attention(in.q, k_long, v_long, H, long_mask);
        auto gs = grad({out_s}, {in.q, in.k, in.v}, {in.g});
        auto gl = grad({out_l}, {in.q, k_long, v_long}, {in.g});
        const auto bits = [](const Tensor& t) {  // float32 values widen exactly: their bits, signed zeros included
          std::vector<std::uint32_t> b;
          for (double x : t.to_vector()) {
            const float f = float(x);
            std::uint32_t u;
            std::memcpy(&u, &f, sizeof u);
            b.push_back(u);
          }
          return b;
        };
        BOOST_TEST_CONTEXT(cpu_path_name(path) << " keys " << c << (additive ? " additive mask" : " no mask")) {
          BOOST_TEST((bits(out_s) == bits(out_l)));
          BOOST_TEST((bits(gs[0]) == bits(gl[0])));
          BOOST_TEST((bits(gs[1]) == bits(narrow(gl[1], 1, 0, c))));
          BOOST_TEST((bits(gs[2]) == bits(narrow(gl[2], 1, 0, c))));
        }
        ++compared;
      }
  set_cpu_path(before);
  BOOST_TEST(compared == 6 * supported_cpu_paths().size());
}

BOOST_AUTO_TEST_CASE(fully_masked_rows_give_zero_output_and_zero_finite_gradients) {
  Rng rng(16);
  const Case c{1, 3, 3, 1, 2, 2};
  Inputs in = random_inputs(c, rng, DType::Float32);
  AttentionMasks m;
  m.key_padding_mask = bool_tensor({true, true, true}, {1, 3});  // every key is padding
  Tensor out = attention(in.q, in.k, in.v, 1, m);
  for (double x : out.to_vector()) BOOST_TEST(x == 0.0);
  for (const Tensor& gi : grad({out}, {in.q, in.k, in.v}, {in.g}))
    for (double x : gi.to_vector()) BOOST_TEST(x == 0.0);
}

BOOST_AUTO_TEST_CASE(empty_sizes) {
  Rng rng(17);
  for (const Case& c : {Case{0, 3, 3, 2, 2, 2}, Case{2, 0, 3, 2, 2, 2}, Case{2, 3, 0, 2, 2, 2}, Case{1, 2, 2, 2, 0, 1}}) {
    Inputs in = random_inputs(c, rng);
    AttentionMasks m;
    m.is_causal = true;
    Tensor out = attention(in.q, in.k, in.v, c.H, m);
    BOOST_TEST(out.shape() == (Shape{c.B, c.T, c.H * c.Dv}));
    Tensor ref = attention_reference(in.q, in.k, in.v, c.H, m).out;
    BOOST_TEST(allclose(out, ref, 1e-14, 1e-14));
    auto gf = grad({out}, {in.q, in.k, in.v}, {in.g});
    auto gr = grad({ref}, {in.q, in.k, in.v}, {in.g});
    for (std::size_t i = 0; i < 3; ++i) BOOST_TEST(allclose(gf[i], gr[i], 1e-14, 1e-14));
  }
}

BOOST_AUTO_TEST_CASE(bad_arguments_name_the_op_argument_and_shapes) {
  Rng rng(18);
  Tensor q = randn({2, 3, 4}, rng), k = randn({2, 5, 4}, rng), v = randn({2, 5, 6}, rng);
  auto expect = [](auto fn, const char* kind, std::vector<std::string> parts) {
    try {
      fn();
      BOOST_ERROR("no exception; expected " << kind);
    } catch (const Error& e) {
      BOOST_TEST(std::string(xgrad::test::error_kind(e)) == kind);
      for (const auto& p : parts) BOOST_TEST_CONTEXT(e.what()) BOOST_TEST(std::string(e.what()).find(p) != std::string::npos);
    }
  };
  expect([&] { attention(q, randn({2, 5, 3}, rng), v, 2); }, "ShapeError", {"attention", "(2, 5, 3)"});
  expect([&] { attention(q, k, randn({2, 4, 6}, rng), 2); }, "ShapeError", {"attention", "v (2, 4, 6)"});
  expect([&] { attention(q, k, v, 3); }, "ShapeError", {"num_heads 3", "q (2, 3, 4)"});
  expect([&] { attention(q, k, v, 0); }, "ShapeError", {"num_heads 0"});
  expect([&] { attention(reshape(q, {6, 4}), k, v, 2); }, "ShapeError", {"q (6, 4)"});
  expect([&] { attention(q.to(DType::Float64), k, v, 2); }, "DTypeError", {"attention", "'k'"});
  AttentionMasks m;
  m.mask = zeros({3, 4}, DType::Bool);
  expect([&] { attention(q, k, v, 2, m); }, "ShapeError", {"'mask' (3, 4)", "(2, 2, 3, 5)"});
  m.mask = zeros({3, 5});
  expect([&] { attention(q, k, v, 2, m); }, "DTypeError", {"'mask'", "float32"});
  m = {};
  m.key_padding_mask = zeros({2, 3}, DType::Bool);
  expect([&] { attention(q, k, v, 2, m); }, "ShapeError", {"'key_padding_mask' (2, 3)", "(2, 5)"});
  m = {};
  m.float_mask = zeros({3, 5}, DType::Float64);
  expect([&] { attention(q, k, v, 2, m); }, "DTypeError", {"'float_mask'", "float64"});
  m.float_mask = zeros({2, 3, 3, 5});
  expect([&] { attention(q, k, v, 2, m); }, "ShapeError", {"'float_mask' (2, 3, 3, 5)"});
  expect([&] { attention(q, k, v, 2, {}, std::nan("")); }, "ValueError", {"'scale'"});
  expect([&] { attention_packed(randn({2, 3, 10}, rng), 2); }, "ShapeError", {"attention_packed", "'qkv' (2, 3, 10)"});
  expect([&] { attention_packed(zeros({2, 3, 12}, DType::Int64), 2); }, "DTypeError", {"attention_packed", "'qkv'"});
}

BOOST_AUTO_TEST_SUITE_END()
