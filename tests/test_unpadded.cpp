// Padded batches run on their real positions only (UnpaddedRows, MultiHeadAttention::
// forward_unpadded, TransformerConfig::skip_padding): the same logits at the real positions,
// zeros at the padding ones, and the same loss and gradients for a loss that ignores the
// padding, against the full batch (float64 to ~1e-12, float32 to float rounding); gradchecks
// in float64 with a random upstream gradient; the fallbacks and every error.
#include <cmath>
#include <limits>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/functional.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/registry.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/loss.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/attention.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

using namespace xgrad;

namespace {

// B = 5 rows of T = 6 with lengths 6, 3, 1, 0 (all padding) and 4: tokens, mask, targets.
struct Batch {
  Tensor tokens, padding, targets;
  std::vector<bool> pad;
};
Batch make_batch(Rng& rng, std::size_t vocab) {
  const std::size_t B = 5, T = 6, lengths[B] = {6, 3, 1, 0, 4};
  std::vector<std::int64_t> tok(B * T, 0), tgt(B * T, -100);
  std::vector<bool> pad(B * T, true);
  for (std::size_t b = 0; b < B; ++b)
    for (std::size_t t = 0; t < lengths[b]; ++t) {
      tok[b * T + t] = rng.uniform_int(0, std::int64_t(vocab) - 1);
      tgt[b * T + t] = rng.uniform_int(0, std::int64_t(vocab) - 1);
      pad[b * T + t] = false;
    }
  return {index_tensor(tok, {B, T}), bool_tensor(pad, {B, T}), index_tensor(tgt, {B, T}), pad};
}

TransformerConfig small_config(bool skip) {
  TransformerConfig c;
  c.vocab_size = 7, c.max_len = 6, c.embed_dim = 8, c.num_heads = 2, c.ff_hidden = 16, c.num_layers = 2;
  c.seed = 3;
  c.skip_padding = skip;
  return c;
}

struct Run {
  Tensor logits, loss;
  std::vector<Tensor> grads;
};
Run run(TransformerEncoder& m, const Batch& b) {
  m.zero_grad();
  Run r;
  r.logits = m.forward(b.tokens, b.padding);
  r.loss = cross_entropy(r.logits, b.targets, -100);
  r.loss.backward();
  for (auto& p : m.parameters()) r.grads.push_back(p.grad());
  return r;
}

// dense and unpadded runs of the same model: real-position logits, zero padding logits,
// loss and every gradient within (atol, rtol).
void expect_same_training(DType dt, double atol, double rtol) {
  Rng rng(21);
  const Batch b = make_batch(rng, 7);
  TransformerEncoder dense(small_config(false)), unpadded(small_config(true));
  dense.to(dt), unpadded.to(dt);
  const Run d = run(dense, b), u = run(unpadded, b);
  BOOST_TEST_REQUIRE((u.logits.shape() == Shape{5, 6, 7}));
  const std::vector<double> dl = d.logits.to_vector(), ul = u.logits.to_vector();
  for (std::size_t i = 0; i < dl.size(); ++i) {
    if (b.pad[i / 7]) {
      BOOST_TEST(ul[i] == 0.0);
    } else {
      BOOST_TEST(std::abs(ul[i] - dl[i]) <= atol + rtol * std::abs(dl[i]), "logit " << i << ": " << ul[i] << " vs " << dl[i]);
    }
  }
  BOOST_TEST(test::allclose(u.loss, d.loss, atol, rtol));
  BOOST_TEST_REQUIRE(u.grads.size() == d.grads.size());
  const auto names = dense.named_parameters();
  for (std::size_t i = 0; i < d.grads.size(); ++i) BOOST_TEST(test::allclose(u.grads[i], d.grads[i], atol, rtol), names[i].first);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(unpadded)

BOOST_AUTO_TEST_CASE(rows_pack_and_unpack) {
  Tensor m = bool_tensor({false, true, true, false, false, true}, {2, 3});
  const UnpaddedRows r = UnpaddedRows::of(m);
  BOOST_TEST(r.rows() == 3u);
  BOOST_TEST(r.batch == 2u);
  BOOST_TEST(r.length == 3u);
  BOOST_TEST((r.index.to_vector() == std::vector<double>{0, 3, 4}));
  Tensor x = tensor({1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3, 2}, DType::Float64);
  Tensor p = r.pack_rows(x);
  BOOST_TEST((p.shape() == Shape{3, 2}));
  BOOST_TEST((p.to_vector() == std::vector<double>{1, 2, 7, 8, 9, 10}));
  Tensor u = r.unpack_rows(p);
  BOOST_TEST((u.shape() == Shape{2, 3, 2}));
  BOOST_TEST((u.to_vector() == std::vector<double>{1, 2, 0, 0, 0, 0, 7, 8, 9, 10, 0, 0}));
  // Everything padding: no rows, and unpacking gives zeros.
  const UnpaddedRows none = UnpaddedRows::of(bool_tensor({true, true}, {1, 2}));
  BOOST_TEST(none.rows() == 0u);
  BOOST_TEST((none.pack_rows(zeros({1, 2, 4})).shape() == Shape{0, 4}));
  BOOST_TEST((none.unpack_rows(zeros({0, 4})).to_vector() == std::vector<double>(8, 0.0)));
}

BOOST_AUTO_TEST_CASE(pack_and_unpack_gradcheck) {
  Rng rng(4);
  const UnpaddedRows r = UnpaddedRows::of(bool_tensor({false, true, false, false, true, false}, {2, 3}));
  Tensor x = sample_randn({2, 3, 3}, rng), y = sample_randn({4, 3}, rng);
  auto pack = gradcheck([&](const auto& in) { return r.pack_rows(in[0]); }, {x}, {"pack_rows"});
  BOOST_TEST(pack.ok, pack.message);
  auto unpack = gradcheck([&](const auto& in) { return r.unpack_rows(in[0]); }, {y}, {"unpack_rows"});
  BOOST_TEST(unpack.ok, unpack.message);
  auto second = gradgradcheck([&](const auto& in) { return mul(r.unpack_rows(in[0]), r.unpack_rows(in[0])); }, {y},
                              {"unpack_rows squared"});
  BOOST_TEST(second.ok, second.message);
}

BOOST_AUTO_TEST_CASE(mha_forward_unpadded_matches_forward_at_the_real_rows) {
  Rng rng(5);
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2), rng);
  mha.to(DType::Float64);
  const Tensor pad = bool_tensor({false, false, false, true, false, true, true, true, false, false, false, false},
                                 {3, 4});  // lengths 3, 1 and 4
  const UnpaddedRows r = UnpaddedRows::of(pad);
  const Tensor x = sample_randn({3, 4, 8}, rng);
  for (int variant = 0; variant < 3; ++variant) {
    AttentionOptions o;  // no other mask; causal; an explicit (T, S) mask
    if (variant == 1) o.is_causal = true;
    if (variant == 2) o.attn_mask = bool_tensor({false, true, false, false, false, false, true, false,
                                                 false, false, false, true, true, false, false, false}, {4, 4});
    AttentionOptions full = o;
    full.key_padding_mask = pad;
    const Tensor want = r.pack_rows(mha.forward(x, full).output);
    const Tensor got = mha.forward_unpadded(r.pack_rows(x), r, o).output;
    BOOST_TEST(test::allclose(got, want, 1e-12, 1e-12), "variant " << variant);
    // Gradcheck in the rows and every parameter, random upstream gradient.
    auto f = test::with_params(mha, 1, [&](const auto& in) { return mha.forward_unpadded(in[0], r, o).output; });
    auto g = gradcheck(f, test::inputs_and_params({sample_randn({r.rows(), 8}, rng)}, mha),
                       test::model_check_options("forward_unpadded " + std::to_string(variant)));
    BOOST_TEST(g.ok, g.message);
  }
  // The fallback (weights asked for) is forward on the unpacked batch (zero padding rows):
  // the same output rows and its weights.
  AttentionOptions w;
  w.need_weights = true;
  AttentionOptions wf = w;
  wf.key_padding_mask = pad;
  const AttentionOutput a = mha.forward_unpadded(r.pack_rows(x), r, w),
                        b = mha.forward(r.unpack_rows(r.pack_rows(x)), wf);
  BOOST_TEST(test::allclose(a.output, r.pack_rows(b.output), 1e-12, 1e-12));
  BOOST_TEST(test::allclose(a.weights, b.weights, 1e-12, 1e-12));
}

BOOST_AUTO_TEST_CASE(encoder_skip_padding_trains_as_the_full_batch_f64) {
  expect_same_training(DType::Float64, 1e-12, 1e-10);
}

BOOST_AUTO_TEST_CASE(encoder_skip_padding_trains_as_the_full_batch_f32) {
  expect_same_training(DType::Float32, 2e-6, 2e-4);
}

BOOST_AUTO_TEST_CASE(encoder_skip_padding_gradcheck_and_thread_counts) {
  Rng rng(8);
  const Batch b = make_batch(rng, 7);
  TransformerEncoder enc(small_config(true));
  enc.to(DType::Float64);
  auto f = test::with_params(enc, 0, [&](const auto&) { return enc.forward(b.tokens, b.padding); });
  auto g = gradcheck(f, test::inputs_and_params({}, enc), test::model_check_options("skip_padding encoder"));
  BOOST_TEST(g.ok, g.message);
  // float32: the same bits with 1 and 2 threads.
  TransformerEncoder e32(small_config(true));
  Run one, two;
  test::with_threads(1, [&] { one = run(e32, b); });
  test::with_threads(2, [&] { two = run(e32, b); });
  BOOST_TEST(test::same_bits(one.logits, two.logits));
  for (std::size_t i = 0; i < one.grads.size(); ++i) BOOST_TEST(test::same_bits(one.grads[i], two.grads[i]));
}

BOOST_AUTO_TEST_CASE(encoder_skip_padding_falls_back_for_other_masks) {
  Rng rng(9);
  const Batch b = make_batch(rng, 7);
  TransformerEncoder dense(small_config(false)), unpadded(small_config(true));
  // No mask, or weights asked for: the full batch, the same numbers.
  BOOST_TEST(test::allclose(unpadded.forward(b.tokens), dense.forward(b.tokens), 0, 0));
  BOOST_TEST(test::allclose(unpadded.forward(b.tokens, b.padding, true), dense.forward(b.tokens, b.padding, true), 0, 0));
  BOOST_TEST(unpadded.body.attention_weights()[0].defined());
  // A mask of the wrong shape is still forward's ShapeError.
  test::expect_throws([&] { unpadded.forward(b.tokens, bool_tensor({false, true}, {1, 2})); }, "ShapeError",
                      {"key_padding_mask", "(1, 2)"});
}

// per_sample_gradients on the unpadded model: every method gives the full batch's rows. The
// packed (N, E) rows have no batch axis, so no parameter is "linear" there (docs: per-sample
// gradients of a skip_padding model cost per-example backwards).
BOOST_AUTO_TEST_CASE(per_sample_gradients_match_the_full_batch) {
  Rng rng(10);
  const Batch b = make_batch(rng, 7);
  TransformerEncoder dense(small_config(false)), unpadded(small_config(true));
  dense.to(DType::Float64), unpadded.to(DType::Float64);
  auto losses_of = [&](TransformerEncoder& m) {
    return [&m, &b] {
      const Tensor logits = m.forward(b.tokens, b.padding);
      std::vector<Tensor> ls;
      for (std::size_t i = 0; i < 5; ++i) {
        const Tensor t = narrow(b.targets, 0, i, 1);
        // the fully padded row 3 has no target: its loss is 0 (not cross_entropy's 0/0)
        ls.push_back(i == 3 ? reshape(sum(mul(narrow(logits, 0, i, 1), zeros({1, 6, 7}, DType::Float64))), {1})
                            : reshape(cross_entropy(narrow(logits, 0, i, 1), t, -100), {1}));
      }
      return concat(ls, 0);
    };
  };
  const PerSampleGradients want = per_sample_gradients(dense, losses_of(dense));
  const PerSampleGradients got = per_sample_gradients(unpadded, losses_of(unpadded));
  PerSampleOptions loop;
  loop.method = PerSampleMethod::Loop;
  const PerSampleGradients got_loop = per_sample_gradients(unpadded, losses_of(unpadded), loop);
  BOOST_TEST_REQUIRE(got.grads.size() == want.grads.size());
  for (std::size_t k = 0; k < want.grads.size(); ++k) {
    BOOST_TEST(test::allclose(got.grads[k].second, want.grads[k].second, 1e-12, 1e-10), want.grads[k].first << " " << got.methods[k]);
    BOOST_TEST(test::allclose(got_loop.grads[k].second, want.grads[k].second, 1e-12, 1e-10), want.grads[k].first);
  }
  BOOST_TEST(test::allclose(got.losses, want.losses, 1e-12, 1e-12));
}

// --- attention_packed_rows: attention on the packed rows of a right-padded batch ----------

// attention_packed over the padded batch (key padding t >= L_b, skip_padded_queries), its
// real rows packed: output and qkv gradient (upstream g) as one list.
std::vector<Tensor> padded_reference(const Tensor& qkv_rows, const std::vector<std::size_t>& lengths, std::size_t T,
                                     std::size_t H, AttentionMasks m, const Tensor& g) {
  std::vector<bool> pad;
  for (std::size_t L : lengths)
    for (std::size_t t = 0; t < T; ++t) pad.push_back(t >= L);
  const UnpaddedRows r = UnpaddedRows::of(bool_tensor(pad, {lengths.size(), T}));
  BOOST_TEST((r.lengths == lengths));
  Tensor x = qkv_rows.detach().clone();
  x.set_requires_grad(true);
  m.key_padding_mask = r.key_padding_mask;
  m.skip_padded_queries = true;
  const Tensor out = r.pack_rows(attention_packed(r.unpack_rows(x), H, m));
  return {out, grad({out}, {x}, {g})[0]};
}

std::vector<Tensor> packed_rows_run(const Tensor& qkv_rows, const std::vector<std::size_t>& lengths, std::size_t T,
                                    std::size_t H, const AttentionMasks& m, const Tensor& g) {
  Tensor x = qkv_rows.detach().clone();
  x.set_requires_grad(true);
  const Tensor out = attention_packed_rows(x, lengths, T, H, m);
  return {out, grad({out}, {x}, {g})[0]};
}

// Every mask kind, float32 and float64, probabilities kept and recomputed (two 64-row blocks:
// T = 70), lengths T, 3, 0 and 66: the same bits as attention_packed on the padded batch (the
// kernels read the same rows in place), and the same bits with 1 and 3 threads.
BOOST_AUTO_TEST_CASE(attention_packed_rows_gives_attention_packed_bits_at_the_real_rows) {
  const std::size_t T = 70, H = 2, D = 3;
  const std::vector<std::size_t> lengths{70, 3, 0, 66};
  std::size_t N = 0;
  for (std::size_t L : lengths) N += L;
  std::vector<bool> bits(T * T);
  for (std::size_t i = 0; i < bits.size(); ++i) bits[i] = (i * 7 + 3) % 5 == 0 || i / T == 4;  // query 4 sees nothing
  std::vector<double> add(lengths.size() * T * T);
  for (std::size_t i = 0; i < add.size(); ++i)
    add[i] = i % 11 == 0 ? -std::numeric_limits<double>::infinity() : 0.25 * double(i % 5) - 0.5;
  for (DType dt : {DType::Float32, DType::Float64}) {
    Rng rng(12);
    const Tensor qkv = randn({N, 3 * H * D}, rng, dt), g = randn({N, H * D}, rng, dt);
    for (int kind = 0; kind < 5; ++kind) {
      AttentionMasks m;  // none; causal; bool (T, T); float (B, 1, T, T); causal + bool
      if (kind == 1 || kind == 4) m.is_causal = true;
      if (kind == 2 || kind == 4) m.mask = bool_tensor(bits, {T, T});
      if (kind == 3) m.float_mask = tensor(add, {lengths.size(), 1, T, T}, dt);
      // probabilities kept, and recomputed under a limit every other tensor here fits (the padded
      // qkv, the float mask) and the kept probabilities (row blocks of T = 70 rows over 64 and
      // 70 keys, rows padded to 80 and 96 elements: 88.8-210.4 KB) do not
      const std::size_t others = std::max(lengths.size() * T * 3 * H * D * itemsize(dt),
                                          m.float_mask.defined() ? m.float_mask.nbytes() : std::size_t(0));
      std::vector<Tensor> kept;
      for (std::size_t limit : {std::size_t(0), others}) {
        const std::size_t before = max_tensor_bytes();
        if (limit) set_max_tensor_bytes(limit);
        const auto want = padded_reference(qkv, lengths, T, H, m, g);
        std::vector<Tensor> one, three;
        test::with_threads(1, [&] { one = packed_rows_run(qkv, lengths, T, H, m, g); });
        test::with_threads(3, [&] { three = packed_rows_run(qkv, lengths, T, H, m, g); });
        set_max_tensor_bytes(before);
        BOOST_TEST_REQUIRE((one[0].shape() == Shape{N, H * D}));
        for (std::size_t i = 0; i < 2; ++i) {
          BOOST_TEST(test::same_bits(one[i], want[i]), dtype_name(dt) << " mask kind " << kind << " limit " << limit << " tensor " << i);
          BOOST_TEST(test::same_bits(three[i], one[i]), dtype_name(dt) << " mask kind " << kind << " 3 threads, tensor " << i);
          if (limit) BOOST_TEST(test::same_bits(one[i], kept[i]), dtype_name(dt) << " mask kind " << kind << " recomputed, tensor " << i);
        }
        if (!limit) kept = one;
      }
    }
  }
}

// forward_unpadded attends on the packed rows for right padding, and over the padded batch
// for a mask with padding between real positions: the same rows as forward either way.
BOOST_AUTO_TEST_CASE(forward_unpadded_with_padding_between_positions_falls_back) {
  const Tensor holes = bool_tensor({false, true, false, false, true, false, true, true}, {2, 4});
  const UnpaddedRows r = UnpaddedRows::of(holes), right = UnpaddedRows::of(bool_tensor({false, false, true, true,
                                                                                         false, false, false, false}, {2, 4}));
  BOOST_TEST(r.lengths.empty());
  BOOST_TEST((right.lengths == std::vector<std::size_t>{2, 4}));
  Rng rng(13);
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2), rng);
  mha.to(DType::Float64);
  const Tensor x = sample_randn({2, 4, 8}, rng);
  AttentionOptions full;
  full.key_padding_mask = holes;
  full.is_causal = true;
  AttentionOptions o;
  o.is_causal = true;
  BOOST_TEST(test::allclose(mha.forward_unpadded(r.pack_rows(x), r, o).output, r.pack_rows(mha.forward(x, full).output),
                            1e-12, 1e-12));
}

BOOST_AUTO_TEST_CASE(attention_packed_rows_errors_name_the_op_and_the_shapes) {
  Rng rng(14);
  const Tensor qkv = randn({4, 12}, rng);
  const std::vector<std::size_t> lengths{3, 0, 1};
  test::expect_throws([&] { attention_packed_rows(randn({1, 4, 12}, rng), lengths, 4, 2); }, "ShapeError",
                      {"attention_packed_rows", "'qkv'", "(1, 4, 12)", "(N, 3 * E)"});
  test::expect_throws([&] { attention_packed_rows(randn({4, 9}, rng), lengths, 4, 2); }, "ShapeError",
                      {"attention_packed_rows", "'qkv'", "(4, 9)", "num_heads 2"});
  test::expect_throws([&] { attention_packed_rows(qkv, {3, 1, 1}, 4, 2); }, "ShapeError",
                      {"attention_packed_rows", "'qkv'", "(4, 12)", "sum to 5"});
  test::expect_throws([&] { attention_packed_rows(qkv, {3, 0, 1}, 2, 2); }, "ValueError",
                      {"attention_packed_rows", "'lengths' [0] = 3", "max_len 2"});
  test::expect_throws([&] { attention_packed_rows(index_tensor({1, 2, 3, 4}, {1, 4}), {1}, 4, 1); }, "DTypeError",
                      {"attention_packed_rows", "qkv"});
  AttentionMasks kpm;
  kpm.key_padding_mask = bool_tensor(std::vector<bool>(12, false), {3, 4});
  test::expect_throws([&] { attention_packed_rows(qkv, lengths, 4, 2, kpm); }, "ValueError",
                      {"attention_packed_rows", "key_padding_mask", "(3, 4)"});
  AttentionMasks skip;
  skip.skip_padded_queries = true;
  test::expect_throws([&] { attention_packed_rows(qkv, lengths, 4, 2, skip); }, "ValueError",
                      {"attention_packed_rows", "skip_padded_queries"});
  AttentionMasks wrong;
  wrong.mask = bool_tensor(std::vector<bool>(12, false), {3, 4});
  test::expect_throws([&] { attention_packed_rows(qkv, lengths, 4, 2, wrong); }, "ShapeError",
                      {"attention_packed_rows", "'mask'", "(3, 4)"});
  // nothing to attend: every length 0, no rows
  BOOST_TEST((attention_packed_rows(zeros({0, 12}), {0, 0}, 3, 2).shape() == Shape{0, 4}));
}

BOOST_AUTO_TEST_CASE(errors_name_the_op_and_the_shapes) {
  test::expect_throws([] { UnpaddedRows::of(zeros({2, 3})); }, "DTypeError", {"UnpaddedRows", "key_padding_mask", "float32"});
  test::expect_throws([] { UnpaddedRows::of(Tensor()); }, "DTypeError", {"UnpaddedRows", "undefined"});
  test::expect_throws([] { UnpaddedRows::of(bool_tensor({false, true}, {2})); }, "ShapeError",
                      {"UnpaddedRows", "key_padding_mask", "(2)"});
  const UnpaddedRows r = UnpaddedRows::of(bool_tensor({false, true, false, false}, {2, 2}));
  test::expect_throws([&] { r.pack_rows(zeros({2, 3, 4})); }, "ShapeError", {"pack_rows", "(2, 2, F)", "(2, 3, 4)"});
  test::expect_throws([&] { r.unpack_rows(zeros({2, 4})); }, "ShapeError", {"unpack_rows", "(3, F)", "(2, 4)"});
  Rng rng(1);
  MultiHeadAttention mha(MultiHeadAttentionOptions(4, 2), rng);
  test::expect_throws([&] { mha.forward_unpadded(zeros({2, 4}), r); }, "ShapeError",
                      {"forward_unpadded", "(3, 4)", "(2, 4)"});
  test::expect_throws([&] { mha.forward_unpadded(zeros({3, 4}, DType::Float64), r); }, "DTypeError",
                      {"forward_unpadded", "float64", "float32"});
  AttentionOptions o;
  o.key_padding_mask = r.key_padding_mask;
  test::expect_throws([&] { mha.forward_unpadded(zeros({3, 4}), r, o); }, "ValueError",
                      {"forward_unpadded", "key_padding_mask"});
}

BOOST_AUTO_TEST_SUITE_END()
