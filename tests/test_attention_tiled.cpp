// The fused attention op's memory-linear path (ops/attention.cpp): the forward keeps only its
// output and (B, H, T, 2) row statistics, the backward recomputes each 64-row block's
// probabilities. Checked against attention_reference (the composition of registered ops,
// which materialises P) over sequence lengths around and across the row block, every mask
// kind, fully masked rows inside later blocks, the fast backward against the differentiable
// one, float32, and a size limit under which no (B, H, T, S) tensor fits.
#include <cmath>
#include <limits>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/attention.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"

using namespace xgrad;
using xgrad::test::allclose;

namespace {

struct Case {
  std::size_t B, T, S, H, D, Dv;
};

struct Inputs {
  Tensor q, k, v, g;
};
Inputs random_inputs(const Case& c, Rng& rng, DType dt) {
  auto leaf = [&](const Shape& s) {
    Tensor t = randn(s, rng, dt);
    t.set_requires_grad(true);
    return t;
  };
  return {leaf({c.B, c.T, c.H * c.D}), leaf({c.B, c.S, c.H * c.D}), leaf({c.B, c.S, c.H * c.Dv}),
          randn({c.B, c.T, c.H * c.Dv}, rng, dt)};
}

// Bool tensor of `shape` with bit i = pick(i).
template <class Pick> Tensor bits(const Shape& shape, Pick pick) {
  std::size_t n = 1;
  for (auto s : shape) n *= s;
  std::vector<bool> b(n);
  for (std::size_t i = 0; i < n; ++i) b[i] = pick(i);
  return bool_tensor(b, shape);
}

// Every mask kind for scores (B, H, T, S), each alone and some combined.
std::vector<std::pair<std::string, AttentionMasks>> every_mask_kind(const Case& c, Rng& rng, DType dt) {
  std::vector<std::pair<std::string, AttentionMasks>> out;
  auto add = [&](const std::string& name, auto fill) {
    AttentionMasks m;
    fill(m);
    out.emplace_back(name, m);
  };
  add("none", [](AttentionMasks&) {});
  add("is_causal", [](AttentionMasks& m) { m.is_causal = true; });
  add("bool (T, S)", [&](AttentionMasks& m) { m.mask = bits({c.T, c.S}, [](std::size_t i) { return i % 5 == 1; }); });
  add("key padding + is_causal", [&](AttentionMasks& m) {
    m.key_padding_mask = bits({c.B, c.S}, [&](std::size_t i) { return i % c.S >= c.S - 3; });
    m.is_causal = true;
  });
  add("additive float (T, S) with -inf", [&](AttentionMasks& m) {
    Tensor f = randn({c.T, c.S}, rng, dt);
    std::vector<double> v = f.to_vector();
    for (std::size_t i = 0; i < v.size(); i += 7) v[i] = -std::numeric_limits<double>::infinity();
    m.float_mask = tensor(v, {c.T, c.S}, dt);
  });
  add("4-D (B, 1, T, S) bool", [&](AttentionMasks& m) {
    m.mask = bits({c.B, 1, c.T, c.S}, [](std::size_t i) { return (i * 7 + 3) % 6 == 0; });
  });
  add("4-D (1, H, 1, S) bool + is_causal", [&](AttentionMasks& m) {
    m.mask = bits({1, c.H, 1, c.S}, [&](std::size_t i) { return i % c.S == 2 + i / c.S; });
    m.is_causal = true;
  });
  add("(B*H, T, S) bool", [&](AttentionMasks& m) {
    m.mask = bits({c.B * c.H, c.T, c.S}, [](std::size_t i) { return (i * 13 + 1) % 9 < 2; });
  });
  if (c.T == c.S && c.T > 3)  // self-attention: padding queries skipped, inner and trailing padding
    add("key padding, padding queries skipped", [&](AttentionMasks& m) {
      m.key_padding_mask = bits({c.B, c.S}, [&](std::size_t i) { return i % c.S == 1 || i % c.S >= c.S - 2 - i / c.S; });
      m.skip_padded_queries = true;
    });
  // Rows 0, 70 and T-1 of every head see no key (inside the first, second and last row blocks).
  add("fully masked rows", [&](AttentionMasks& m) {
    m.mask = bits({c.T, c.S}, [&](std::size_t i) {
      const std::size_t row = i / c.S;
      return row == 0 || row == 70 || row == c.T - 1 || i % 11 == 4;
    });
  });
  return out;
}

// out and the gradients of q, k, v for upstream g; with `limit` > 0 under
// set_max_tensor_bytes(limit).
std::vector<Tensor> run_fused(const Case& c, const AttentionMasks& m, const Inputs& in, std::size_t limit = 0) {
  const std::size_t before = max_tensor_bytes();
  if (limit) set_max_tensor_bytes(limit);
  try {
    Tensor out = attention(in.q, in.k, in.v, c.H, m);
    auto g = grad({out}, {in.q, in.k, in.v}, {in.g});
    set_max_tensor_bytes(before);
    return {out, g[0], g[1], g[2]};
  } catch (...) {
    set_max_tensor_bytes(before);
    throw;
  }
}

std::vector<double> values(const std::vector<Tensor>& ts) {
  std::vector<double> all;
  for (const Tensor& t : ts) {
    const auto v = t.to_vector();
    all.insert(all.end(), v.begin(), v.end());
  }
  return all;
}

// Fused output and input gradients (random upstream) against attention_reference's, on both
// backward paths: probabilities kept by the forward (small P), and recomputed from the row
// statistics (forced by a size limit that the linear tensors and the bool mask fit and the
// kept probabilities, panel_stride(c) >= 32 elements per computed row of c >= 1 keys, do not in
// these cases) — those two must agree bit for bit.
void check_case(const Case& c, const std::string& name, const AttentionMasks& m, const Inputs& in, double tol) {
  BOOST_TEST_CONTEXT("B" << c.B << " T" << c.T << " S" << c.S << " H" << c.H << " D" << c.D << " Dv" << c.Dv
                         << ", " << name) {
    Tensor ref = attention_reference(in.q, in.k, in.v, c.H, m).out;
    auto gr = grad({ref}, {in.q, in.k, in.v}, {in.g});
    const auto kept = run_fused(c, m, in);
    BOOST_TEST(allclose(kept[0], ref, tol, tol));
    for (std::size_t i = 0; i < 3; ++i) {
      BOOST_TEST_CONTEXT("gradient " << "qkv"[i]) {
        BOOST_TEST(allclose(kept[i + 1], gr[i], tol, tol));
        bool finite = true;
        for (double x : kept[i + 1].to_vector()) finite = finite && std::isfinite(x);
        BOOST_TEST(finite);
      }
    }
    const std::size_t probs = c.B * c.H * c.T * c.S * itemsize(in.q.dtype());
    const std::size_t largest = std::max({in.q.nbytes(), in.k.nbytes(), in.v.nbytes(), in.g.nbytes(),
                                          c.B * c.H * c.T * 2 * itemsize(in.q.dtype()),
                                          m.mask.defined() ? m.mask.nbytes() : 0});  // a (B*H, T, S) mask is reshaped to 4-D
    if (largest < probs) {  // room for a limit between every linear tensor and P
      const auto recomputed = run_fused(c, m, in, largest);
      BOOST_TEST((values(recomputed) == values(kept)), "recomputed probabilities give other bits than kept ones");
      // a limit at the (B, H, T, S) size, which the kept row blocks (rows padded for the
      // kernels, the causal future left out) may or may not fit: never a MemoryError
      const auto at_limit = run_fused(c, m, in, probs);
      BOOST_TEST((values(at_limit) == values(kept)), "probabilities at the size limit give other bits than kept ones");
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_tiled)

BOOST_AUTO_TEST_CASE(float64_equals_the_reference_at_every_length_and_mask_kind) {
  Rng rng(31);
  // Lengths below, at and across the 64-row block, not multiples of it; cross attention both ways.
  for (const Case& c : {Case{2, 1, 1, 2, 2, 3}, Case{1, 63, 63, 2, 3, 2}, Case{2, 64, 64, 1, 4, 4},
                        Case{1, 65, 65, 2, 2, 3}, Case{1, 150, 150, 1, 3, 3}, Case{1, 130, 71, 2, 2, 2},
                        Case{1, 71, 130, 1, 2, 3}}) {
    const Inputs in = random_inputs(c, rng, DType::Float64);
    for (const auto& [name, m] : every_mask_kind(c, rng, DType::Float64)) {
      if (name == "fully masked rows" && c.T < 71) continue;  // needs rows 0, 70, T-1
      check_case(c, name, m, in, 1e-12);
    }
  }
}

BOOST_AUTO_TEST_CASE(float32_equals_the_reference_to_float32_rounding) {
  Rng rng(32);
  for (const Case& c : {Case{1, 200, 200, 2, 16, 16}, Case{2, 97, 97, 2, 8, 8}}) {
    const Inputs in = random_inputs(c, rng, DType::Float32);
    for (const auto& [name, m] : every_mask_kind(c, rng, DType::Float32)) check_case(c, name, m, in, 2e-5);
  }
}

BOOST_AUTO_TEST_CASE(fully_masked_rows_in_later_blocks_give_zeros) {
  Rng rng(33);
  const Case c{2, 140, 140, 2, 4, 4};
  const Inputs in = random_inputs(c, rng, DType::Float32);
  AttentionMasks m;
  m.is_causal = true;
  // Batch 1: every key padding (all its rows fully masked); batch 0: only the rows >= 100 see
  // nothing through a (T, S) mask.
  m.key_padding_mask = bits({c.B, c.S}, [&](std::size_t i) { return i >= c.S; });
  m.mask = bits({c.T, c.S}, [&](std::size_t i) { return i / c.S >= 100; });
  Tensor out = attention(in.q, in.k, in.v, c.H, m);
  const auto o = out.to_vector();
  const std::size_t E = c.H * c.Dv;
  bool zeros = true;
  for (std::size_t b = 0; b < c.B; ++b)
    for (std::size_t t = 0; t < c.T; ++t)
      for (std::size_t j = 0; j < E; ++j)
        if (b == 1 || t >= 100) zeros = zeros && o[(b * c.T + t) * E + j] == 0.0;
  BOOST_TEST(zeros);
  auto g = grad({out}, {in.q, in.k, in.v}, {in.g});
  const auto dq = g[0].to_vector();
  bool finite = true, dq_zero = true;
  for (const Tensor& gi : g)
    for (double x : gi.to_vector()) finite = finite && std::isfinite(x);
  for (std::size_t b = 0; b < c.B; ++b)
    for (std::size_t t = 0; t < c.T; ++t)
      for (std::size_t j = 0; j < c.H * c.D; ++j)
        if (b == 1 || t >= 100) dq_zero = dq_zero && dq[(b * c.T + t) * c.H * c.D + j] == 0.0;
  BOOST_TEST(finite);
  BOOST_TEST(dq_zero);
}

BOOST_AUTO_TEST_CASE(fast_backward_equals_the_differentiable_one_across_row_blocks) {
  Rng rng(34);
  const Case c{1, 130, 130, 2, 2, 2};
  const Inputs in = random_inputs(c, rng, DType::Float64);
  for (const auto& [name, m] : every_mask_kind(c, rng, DType::Float64)) {
    const AttentionMasks masks = m;
    const auto f = [masks, c](const std::vector<Tensor>& x) { return attention(x[0], x[1], x[2], c.H, masks); };
    GradcheckOptions opt;
    opt.name = "attention T130, " + name;
    const GradcheckResult r = check_fused_backward(f, {in.q, in.k, in.v}, opt);
    BOOST_TEST(r.ok, r.message);
  }
}

BOOST_AUTO_TEST_CASE(second_order_across_row_blocks) {
  Rng rng(35);
  // T 66: two row blocks; one head of width 1 keeps the float64 gradgradcheck cheap.
  const Case c{1, 66, 66, 1, 1, 1};
  const Inputs in = random_inputs(c, rng, DType::Float64);
  AttentionMasks m;
  m.is_causal = true;
  m.key_padding_mask = bits({1, c.S}, [](std::size_t i) { return i == 3; });
  const auto f = [m](const std::vector<Tensor>& x) { return attention(x[0], x[1], x[2], 1, m); };
  GradcheckOptions opt;
  opt.name = "attention T66 causal + padding";
  const GradcheckResult r1 = gradcheck(f, {in.q, in.k, in.v}, opt);
  BOOST_TEST(r1.ok, r1.message);
  const GradcheckResult r2 = gradgradcheck(f, {in.q, in.k, in.v}, opt);
  BOOST_TEST(r2.ok, r2.message);
}

// With the size limit below one (B, H, T, S) float32 tensor (and above every linear one), the
// fused op still runs forward and backward: nothing quadratic is allocated as a tensor (the
// reference, which materialises P, is refused). The row-block scratch is (64, S).
BOOST_AUTO_TEST_CASE(no_quadratic_tensor_is_allocated) {
  Rng rng(36);
  const Case c{1, 1024, 1024, 4, 8, 8};  // P would be 4 * 1024 * 1024 * 4 B = 16 MiB
  const Inputs in = random_inputs(c, rng, DType::Float32);
  AttentionMasks m;
  m.is_causal = true;
  const std::size_t before = max_tensor_bytes();
  set_max_tensor_bytes(std::size_t(1) << 20);  // 1 MiB: q, k, v, out (128 KiB each) fit
  try {
    Tensor out = attention(in.q, in.k, in.v, c.H, m);
    auto g = grad({out}, {in.q, in.k, in.v}, {in.g});
    BOOST_TEST(g[0].shape() == in.q.shape());
    BOOST_CHECK_THROW(attention_reference(in.q, in.k, in.v, c.H, m), MemoryError);
  } catch (...) {
    set_max_tensor_bytes(before);
    throw;
  }
  set_max_tensor_bytes(before);
}

// Masks that are causal in content take the is_causal path: the same bits as is_causal.
BOOST_AUTO_TEST_CASE(causal_masks_take_the_is_causal_path) {
  Rng rng(37);
  const Case c{2, 150, 150, 2, 8, 8};
  const Inputs in = random_inputs(c, rng, DType::Float32);
  auto run = [&](const AttentionMasks& m) {
    Tensor out = attention(in.q, in.k, in.v, c.H, m);
    auto g = grad({out}, {in.q, in.k, in.v}, {in.g});
    std::vector<double> all = out.to_vector();
    for (const Tensor& t : g) {
      const auto v = t.to_vector();
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  AttentionMasks causal;
  causal.is_causal = true;
  const auto expected = run(causal);
  const double ninf = -std::numeric_limits<double>::infinity();
  std::vector<double> additive(c.T * c.S);
  for (std::size_t i = 0; i < c.T; ++i)
    for (std::size_t j = 0; j < c.S; ++j) additive[i * c.S + j] = j > i ? ninf : 0.0;
  std::vector<std::pair<std::string, AttentionMasks>> cases;
  auto add = [&](const std::string& name, auto fill) {
    AttentionMasks m;
    fill(m);
    cases.emplace_back(name, m);
  };
  add("bool (T, S)", [&](AttentionMasks& m) { m.mask = causal_mask(c.T, c.S); });
  add("bool (1, 1, T, S)", [&](AttentionMasks& m) { m.mask = reshape(causal_mask(c.T, c.S), {1, 1, c.T, c.S}); });
  add("bool (B*H, T, S)", [&](AttentionMasks& m) {
    m.mask = bits({c.B * c.H, c.T, c.S}, [&](std::size_t i) { return i % c.S > i / c.S % c.T; });
  });
  add("additive 0 / -inf (T, S)", [&](AttentionMasks& m) { m.float_mask = tensor(additive, {c.T, c.S}); });
  add("bool causal and is_causal", [&](AttentionMasks& m) { m.mask = causal_mask(c.T, c.S), m.is_causal = true; });
  for (const auto& [name, m] : cases) BOOST_TEST_CONTEXT(name) BOOST_TEST(run(m) == expected);
  // A mask that masks nothing is no mask.
  AttentionMasks none, all_false;
  all_false.mask = zeros({c.T, c.S}, DType::Bool);
  BOOST_TEST(run(all_false) == run(none));
}

// Masks that are causal plus more, nearly causal, or changed in place after a first call,
// give what attention_reference gives for them.
BOOST_AUTO_TEST_CASE(nearly_causal_and_modified_masks_are_not_mistaken) {
  Rng rng(38);
  const Case c{1, 100, 100, 2, 3, 3};
  const Inputs in = random_inputs(c, rng, DType::Float64);
  AttentionMasks plus;  // the future and every 9th key of the past
  plus.mask = bits({c.T, c.S}, [&](std::size_t i) { return i % c.S > i / c.S || i % c.S % 9 == 4; });
  check_case(c, "causal plus more", plus, in, 1e-12);
  AttentionMasks near;  // causal but for one visible future key
  near.mask = bits({c.T, c.S}, [&](std::size_t i) { return i % c.S > i / c.S && i != 5 * c.S + 80; });
  check_case(c, "causal but one key", near, in, 1e-12);
  AttentionMasks one_row;  // (1, 1, 1, S): one row for every query, never causal for T > 1
  one_row.mask = bits({1, 1, 1, c.S}, [](std::size_t i) { return i > 0; });
  check_case(c, "(1, 1, 1, S) mask", one_row, in, 1e-12);
  // attention_reference simplifies masks too: also against a composition that never does.
  for (const AttentionMasks* m : {&plus, &near, &one_row}) {
    const Tensor scores = mul_scalar(matmul(split_heads(in.q, c.H), split_heads(in.k, c.H), false, true),
                                     1.0 / std::sqrt(double(c.D)));
    const Tensor direct = merge_heads(matmul(masked_softmax(scores, m->mask, -1), split_heads(in.v, c.H)));
    BOOST_TEST(allclose(attention(in.q, in.k, in.v, c.H, *m), direct, 1e-12, 1e-12));
  }
  AttentionMasks changed;
  changed.mask = causal_mask(c.T, c.S);
  check_case(c, "causal before the write", changed, in, 1e-12);
  changed.mask.mutable_data<bool>()[3 * c.S + 50] = false;  // query 3 may now see key 50
  check_case(c, "after an in-place write", changed, in, 1e-12);
  Tensor a = attention(in.q, in.k, in.v, c.H, changed), r = attention_reference(in.q, in.k, in.v, c.H, changed).out;
  AttentionMasks causal;
  causal.is_causal = true;
  BOOST_TEST(!allclose(a, attention(in.q, in.k, in.v, c.H, causal), 1e-6, 1e-6));  // the write is seen
}

BOOST_AUTO_TEST_SUITE_END()
