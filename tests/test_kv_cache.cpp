// Key/value cache for incremental decoding: KVCache, MultiHeadAttention::forward_cached /
// forward_projected, TransformerDecoder::forward_step, decoding sessions and generate().
// The reference is always the uncached computation (the whole sequence at once).
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <numeric>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/models/decoding.hpp"
#include "xgrad/models/transformer.hpp"
#include "xgrad/ops/ops.hpp"

using namespace xgrad;
using namespace xgrad::test;

namespace {

TransformerConfig gpt_config(PositionalKind positional, bool tied, bool bias) {
  TransformerConfig c;
  c.vocab_size = 11, c.max_len = 40, c.embed_dim = 16, c.num_heads = 4, c.ff_hidden = 32, c.num_layers = 2;
  c.positional = positional, c.tied_output = tied, c.bias = bias, c.seed = 3;
  return c;
}

Tensor random_tokens(std::size_t B, std::size_t T, std::size_t V, std::uint64_t seed) {
  Rng rng(seed);
  std::vector<std::int64_t> v(B * T);
  for (auto& x : v) x = rng.uniform_int(0, std::int64_t(V) - 1);
  return index_tensor(v, {B, T});
}

// The logits of tokens (B, T) fed to forward_step in pieces of the given sizes, concatenated.
Tensor stepwise_logits(TransformerDecoder& model, const Tensor& tokens, const std::vector<std::size_t>& pieces) {
  DecoderKVCache cache = model.make_cache();
  std::vector<Tensor> parts;
  std::size_t at = 0;
  for (std::size_t n : pieces) {
    std::vector<std::int64_t> piece;
    const std::size_t B = tokens.shape()[0], T = tokens.shape()[1];
    for (std::size_t b = 0; b < B; ++b)
      for (std::size_t t = at; t < at + n; ++t) piece.push_back(tokens.data<std::int64_t>()[b * T + t]);
    parts.push_back(model.forward_step(index_tensor(piece, {B, n}), cache));
    at += n;
    BOOST_TEST(cache.length() == at);
  }
  return concat(parts, 1);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(kv_cache)

BOOST_AUTO_TEST_CASE(cached_logits_equal_full_sequence_logits) {
  struct Case {
    PositionalKind positional;
    bool tied, bias;
    DType dtype;
  };
  const Case cases[] = {{PositionalKind::Learned, true, true, DType::Float32},
                        {PositionalKind::Sinusoidal, false, false, DType::Float32},
                        {PositionalKind::Learned, false, true, DType::Float64},
                        {PositionalKind::Sinusoidal, true, true, DType::Float64}};
  for (const Case& c : cases) {
    BOOST_TEST_CONTEXT("positional " << int(c.positional) << " tied " << c.tied << " bias " << c.bias << " "
                                     << dtype_name(c.dtype)) {
      TransformerDecoder model(gpt_config(c.positional, c.tied, c.bias));
      model.to(c.dtype);
      model.eval();
      const Tensor tokens = random_tokens(3, 21, 11, 7);
      Tensor full;
      {
        NoGradGuard no_grad;
        full = model.forward(tokens);
      }
      // A prompt, then single tokens, then pieces of several tokens (prefill in the middle).
      for (const auto& pieces : {std::vector<std::size_t>{5, 1, 1, 3, 2, 1, 8}, std::vector<std::size_t>(21, 1),
                                 std::vector<std::size_t>{21}}) {
        const Tensor cached = stepwise_logits(model, tokens, pieces);
        BOOST_TEST(!cached.requires_grad());
        BOOST_TEST(close_to(cached, full));
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(storage_grows_geometrically_and_holds_the_appended_positions) {
  KVCache cache(40);
  BOOST_TEST(cache.allocated() == 0u);
  Rng rng(1);
  std::vector<Tensor> ks, vs;
  const std::size_t pieces[] = {3, 1, 12, 1, 10, 13};  // 3, 4, 16, 17, 27, 40
  const std::size_t allocated[] = {16, 16, 16, 32, 32, 40};
  for (std::size_t i = 0; i < 6; ++i) {
    ks.push_back(randn({2, pieces[i], 4}, rng));
    vs.push_back(randn({2, pieces[i], 4}, rng));
    cache.append(ks.back(), vs.back());
    BOOST_TEST(cache.allocated() == allocated[i]);
  }
  BOOST_TEST(cache.length() == 40u);
  BOOST_TEST(same_bits(cache.keys(), concat(ks, 1)));
  BOOST_TEST(same_bits(cache.values(), concat(vs, 1)));
  // Beyond length() the storage is zero (masked keys must be finite: 0 * garbage could be NaN).
  KVCache small(40);
  small.append(ks[0], vs[0]);
  const auto storage = small.key_storage().to_vector();
  BOOST_TEST(std::all_of(storage.begin() + 3 * 4, storage.begin() + 16 * 4, [](double x) { return x == 0; }));
  // reserve allocates once; later appends keep the buffer.
  KVCache reserved(40);
  reserved.reserve(40, 2, 4, DType::Float32);
  const void* buffer = reserved.key_storage().raw_data();
  for (std::size_t i = 0; i < 6; ++i) reserved.append(ks[i], vs[i]);
  BOOST_TEST(reserved.key_storage().raw_data() == buffer);
  BOOST_TEST(same_bits(reserved.keys(), concat(ks, 1)));
  // select_rows: row i = old row rows[i].
  reserved.select_rows({1, 1, 0});
  BOOST_TEST(reserved.batch() == 3u);
  const Tensor k = reserved.keys();
  BOOST_TEST(same_bits(narrow(k, 0, 0, 1), narrow(concat(ks, 1), 0, 1, 1)));
  BOOST_TEST(same_bits(narrow(k, 0, 2, 1), narrow(concat(ks, 1), 0, 0, 1)));
  reserved.clear();
  BOOST_TEST(reserved.length() == 0u);
  BOOST_TEST(reserved.batch() == 0u);
}

BOOST_AUTO_TEST_CASE(kv_cache_errors) {
  KVCache cache(5);
  Rng rng(2);
  const Tensor k = randn({2, 3, 4}, rng);
  cache.append(k, k);
  expect_throws([&] { cache.append(k, k); }, "ValueError", {"KVCache::append", "holds 3 positions", "max_len 5"});
  BOOST_TEST(cache.length() == 3u);  // unchanged
  expect_throws([&] { cache.append(randn({3, 1, 4}, rng), randn({3, 1, 4}, rng)); }, "ShapeError",
                {"KVCache::append", "(3, 1, 4)", "(B, E) = (2, 4)"});
  expect_throws([&] { cache.append(randn({2, 1, 4}, rng, DType::Float64), randn({2, 1, 4}, rng, DType::Float64)); },
                "DTypeError", {"float64", "float32"});
  expect_throws([&] { cache.append(randn({2, 1, 4}, rng), randn({2, 2, 4}, rng)); }, "ShapeError", {"'k'", "'v'"});
  expect_throws([&] { cache.select_rows({0, 2}); }, "IndexError", {"row 2", "2 rows"});
  expect_throws([&] { cache.reserve(6, 2, 4, DType::Float32); }, "ValueError", {"6 positions", "max_len is 5"});
  const Tensor before = cache.key_storage();
  expect_throws([&] { cache.reserve(5, 2, 4, DType::Float64); }, "DTypeError", {"KVCache::reserve", "float32", "float64"});
  expect_throws([&] { cache.reserve(5, 2, 6, DType::Float32); }, "ShapeError", {"(B, E) = (2, 4)", "(2, 6)"});
  BOOST_TEST(cache.key_storage().raw_data() == before.raw_data());  // nothing reallocated by the failed calls
  expect_throws([] { KVCache bad(0); }, "ValueError", {"KVCache", "'max_len'", "got 0"});
}

BOOST_AUTO_TEST_CASE(forward_cached_matches_causal_self_attention) {
  // batch-first, sequence-first and unbatched layouts; with a key padding mask on some positions.
  for (int layout = 0; layout < 3; ++layout) {
    BOOST_TEST_CONTEXT("layout " << layout) {
      Rng rng(4);
      MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2).batch_first(layout != 1), rng);
      const std::size_t B = 2, T = 9;
      const Tensor x_bf = randn({B, T, 8}, rng, DType::Float64);
      mha.to(DType::Float64);
      auto in_layout = [&](const Tensor& t) {  // (B, L, E) batch-first -> the layout tested
        return layout == 0 ? t : layout == 1 ? transpose(t, 0, 1) : reshape(narrow(t, 0, 0, 1), {t.shape()[1], 8});
      };
      std::vector<bool> pad(B * T, false);
      pad[0 * T + 2] = pad[1 * T + 0] = pad[1 * T + 5] = true;
      const Tensor kpm = layout == 2 ? bool_tensor(std::vector<bool>(pad.begin(), pad.begin() + T), {T})
                                     : bool_tensor(pad, {B, T});
      AttentionOptions full_opt;
      full_opt.is_causal = true;
      full_opt.key_padding_mask = kpm;
      full_opt.need_weights = true;
      full_opt.average_attn_weights = false;
      const AttentionOutput full = mha.forward(in_layout(x_bf), full_opt);
      KVCache cache(T);
      std::size_t at = 0;
      for (std::size_t n : {3, 1, 4, 1}) {
        AttentionOptions o;
        o.is_causal = true;
        o.need_weights = true;
        o.average_attn_weights = false;
        if (layout == 2) {
          std::vector<bool> p(pad.begin(), pad.begin() + long(at + n));
          o.key_padding_mask = bool_tensor(p, {at + n});
        } else {
          std::vector<bool> p;
          for (std::size_t b = 0; b < B; ++b) p.insert(p.end(), pad.begin() + long(b * T), pad.begin() + long(b * T + at + n));
          o.key_padding_mask = bool_tensor(p, {B, at + n});
        }
        const AttentionOutput step = mha.forward_cached(in_layout(narrow(x_bf, 1, at, n)), cache, o);
        const long seq_axis = layout == 1 ? 0 : layout == 2 ? 0 : 1;
        BOOST_TEST(close_to(step.output, narrow(full.output, seq_axis, at, n)));
        // The weights over the positions so far: full's rows [at, at + n), keys [0, at + n).
        const Tensor w = layout == 2 ? narrow(narrow(full.weights, 1, at, n), 2, 0, at + n)
                                     : narrow(narrow(full.weights, 2, at, n), 3, 0, at + n);
        BOOST_TEST(close_to(step.weights, w));
        at += n;
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(forward_projected_matches_cross_attention) {
  // Packed and separate projections, added keys, sequence-first; output and every gradient.
  struct Case {
    std::size_t kdim;
    bool bias_kv, zero_attn, batch_first;
  };
  for (const Case c : {Case{0, false, false, true}, Case{6, false, false, true}, Case{0, true, true, false}}) {
    BOOST_TEST_CONTEXT("kdim " << c.kdim << " bias_kv " << c.bias_kv << " zero_attn " << c.zero_attn) {
      Rng rng(5);
      MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2)
                                 .kdim(c.kdim)
                                 .vdim(c.kdim)
                                 .add_bias_kv(c.bias_kv)
                                 .add_zero_attn(c.zero_attn)
                                 .batch_first(c.batch_first),
                             rng);
      mha.to(DType::Float64);
      const std::size_t F = c.kdim ? c.kdim : 8;
      auto shape = [&](std::size_t L, std::size_t width) {
        return c.batch_first ? Shape{2, L, width} : Shape{L, 2, width};
      };
      Tensor q = randn(shape(3, 8), rng, DType::Float64).set_requires_grad();
      Tensor mem = randn(shape(5, F), rng, DType::Float64).set_requires_grad();
      AttentionOptions o;
      o.key_padding_mask = bool_tensor({false, false, false, true, true, false, false, false, false, true}, {2, 5});
      const Tensor u = randn(shape(3, 8), rng, DType::Float64);
      auto grads = [&](const Tensor& out) {
        std::vector<Tensor> wrt{q, mem};
        for (auto& [n, p] : mha.named_parameters()) wrt.push_back(p);
        GradOptions go;
        go.allow_unused = true;
        return grad({sum(mul(out, u))}, wrt, {}, go);
      };
      const Tensor ref = mha.forward(q, mem, mem, o).output;
      const Tensor got = mha.forward_projected(q, mha.project_key_value(mem, mem), o).output;
      BOOST_TEST(close_to(got, ref));
      const auto g_ref = grads(ref), g_got = grads(got);
      for (std::size_t i = 0; i < g_ref.size(); ++i)
        BOOST_TEST_CONTEXT("gradient " << i) { BOOST_TEST(close_to(g_got[i], g_ref[i])); }
    }
  }
}

BOOST_AUTO_TEST_CASE(forward_cached_errors) {
  Rng rng(6);
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2), rng);
  KVCache cache(4);
  mha.forward_cached(randn({2, 3, 8}, rng), cache);
  expect_throws([&] { mha.forward_cached(randn({2, 2, 8}, rng), cache); }, "ValueError",
                {"forward_cached", "holds 3 positions", "max_len 4"});
  BOOST_TEST(cache.length() == 3u);
  expect_throws([&] { mha.forward_cached(randn({3, 1, 8}, rng), cache); }, "ShapeError", {"batch of 3", "2 rows"});
  expect_throws([&] { mha.forward_cached(randn({2, 1, 7}, rng), cache); }, "ShapeError", {"'x'", "(2, 1, 7)", "(B, L, 8)"});
  expect_throws([&] { mha.forward_cached(randn({2, 0, 8}, rng), cache); }, "ShapeError", {"no position"});
  AttentionOptions with_mask;
  with_mask.attn_mask = causal_mask(1, 4);
  expect_throws([&] { mha.forward_cached(randn({2, 1, 8}, rng), cache, with_mask); }, "ValueError", {"attn_mask"});
  AttentionOptions bad_kpm;
  bad_kpm.key_padding_mask = bool_tensor({false, false, false}, {1, 3});
  expect_throws([&] { mha.forward_cached(randn({2, 1, 8}, rng), cache, bad_kpm); }, "ShapeError",
                {"key_padding_mask", "(1, 3)", "(2, 4)"});
  bad_kpm.key_padding_mask = zeros({2, 4});
  expect_throws([&] { mha.forward_cached(randn({2, 1, 8}, rng), cache, bad_kpm); }, "DTypeError",
                {"float key_padding_mask"});
  BOOST_TEST(cache.length() == 3u);
  MultiHeadAttention with_bias_kv(MultiHeadAttentionOptions(8, 2).add_bias_kv(true), rng);
  KVCache other(4);
  expect_throws([&] { with_bias_kv.forward_cached(randn({2, 1, 8}, rng), other); }, "ValueError", {"add_bias_kv"});
  // Another module's cache: its width is a ShapeError, its dtype a DTypeError.
  MultiHeadAttention wider(MultiHeadAttentionOptions(16, 2), rng);
  KVCache wide(4);
  wider.forward_cached(randn({2, 1, 16}, rng), wide);
  expect_throws([&] { mha.forward_cached(randn({2, 1, 8}, rng), wide); }, "ShapeError",
                {"forward_cached", "width 16", "embed_dim 8"});
  MultiHeadAttention f64(MultiHeadAttentionOptions(8, 2), rng);
  f64.to(DType::Float64);
  expect_throws([&] { f64.forward_cached(randn({2, 1, 8}, rng, DType::Float64), cache); }, "DTypeError",
                {"forward_cached", "float32 keys", "float64"});
  BOOST_TEST(cache.length() == 3u);
  BOOST_TEST(wide.length() == 1u);
  expect_throws([&] { mha.forward_projected(randn({2, 1, 8}, rng), ProjectedKeyValues{}); }, "ValueError",
                {"forward_projected", "project_key_value"});
  const ProjectedKeyValues kv = mha.project_key_value(randn({2, 5, 8}, rng), randn({2, 5, 8}, rng));
  expect_throws([&] { mha.forward_projected(randn({3, 1, 8}, rng), kv); }, "ShapeError", {"batch of 3"});
}

BOOST_AUTO_TEST_CASE(decoder_forward_step_errors) {
  TransformerDecoder model(gpt_config(PositionalKind::Learned, true, true));
  model.eval();
  DecoderKVCache cache = model.make_cache();
  model.forward_step(random_tokens(2, 38, 11, 1), cache);
  expect_throws([&] { model.forward_step(random_tokens(2, 3, 11, 2), cache); }, "ValueError",
                {"TransformerDecoder::forward_step", "holds 38 positions", "41", "max_len 40"});
  BOOST_TEST(cache.length() == 38u);
  expect_throws([&] { model.forward_step(random_tokens(3, 1, 11, 2), cache); }, "ShapeError", {"batch of 3", "2 rows"});
  expect_throws([&] { model.forward_step(index_tensor({0, 11}, {2, 1}), cache); }, "IndexError", {"11"});
  BOOST_TEST(cache.length() == 38u);  // nothing was appended by the failed steps
  expect_throws([&] { model.forward_step(zeros({2, 1}), cache); }, "DTypeError", {"'tokens'", "int64"});
  expect_throws([&] { model.forward_step(index_tensor({1, 2}, {2}), cache); }, "ShapeError", {"'tokens'", "(B, T)"});
  DecoderKVCache wrong(3, 40);
  expect_throws([&] { model.forward_step(random_tokens(2, 1, 11, 2), wrong); }, "ValueError", {"3 layers", "make_cache"});
  // Two more positions fit exactly; the cache is then full.
  model.forward_step(random_tokens(2, 2, 11, 3), cache);
  BOOST_TEST(cache.length() == 40u);
  expect_throws([&] { model.forward_step(random_tokens(2, 1, 11, 2), cache); }, "ValueError", {"max_len 40"});
}

// A step that fails leaves everything as it was, the dropout generator too: a model converted
// to float64 after caching fails on the float32 cache before its embedding dropout draws.
BOOST_AUTO_TEST_CASE(a_failed_step_does_not_advance_dropout) {
  TransformerConfig c = gpt_config(PositionalKind::Learned, true, true);
  c.dropout = 0.5;
  TransformerDecoder failed(c), clean(c);  // same seed: same parameters and dropout stream
  failed.train(), clean.train();
  DecoderKVCache cf = failed.make_cache(), cc = clean.make_cache();
  const Tensor first = random_tokens(2, 3, 11, 1), next = random_tokens(2, 1, 11, 2);
  failed.forward_step(first, cf), clean.forward_step(first, cc);
  failed.to(DType::Float64);
  expect_throws([&] { failed.forward_step(next, cf); }, "DTypeError",
                {"TransformerDecoder::forward_step", "float32 keys", "float64"});
  failed.to(DType::Float32);
  BOOST_TEST(cf.length() == 3u);
  BOOST_TEST(failed.forward_step(next, cf).to_vector() == clean.forward_step(next, cc).to_vector());
}

BOOST_AUTO_TEST_CASE(greedy_generation_is_identical_with_and_without_the_cache) {
  for (PositionalKind positional : {PositionalKind::Learned, PositionalKind::Sinusoidal}) {
    TransformerDecoder model(gpt_config(positional, positional == PositionalKind::Learned, true));
    model.eval();
    const Tensor prompt = random_tokens(3, 4, 11, 9);
    auto cached = decoding_session(model, true), uncached = decoding_session(model, false);
    BOOST_TEST(cached->cached());
    BOOST_TEST(!uncached->cached());
    const Tensor a = generate(*cached, prompt, 30, greedy_next_token);
    const Tensor b = generate(*uncached, prompt, 30, greedy_next_token);
    BOOST_TEST(a.shape() == (Shape{3, 34}));
    BOOST_TEST(same_bits(a, b));
    for (std::size_t i = 0; i < 3; ++i)
      BOOST_TEST(std::equal(prompt.data<std::int64_t>() + 4 * i, prompt.data<std::int64_t>() + 4 * i + 4,
                            a.data<std::int64_t>() + 34 * i));
    // By hand: argmax of the last row of forward() over the growing sequence.
    std::vector<std::vector<std::int64_t>> rows(3);
    for (std::size_t i = 0; i < 3; ++i)
      rows[i].assign(prompt.data<std::int64_t>() + 4 * i, prompt.data<std::int64_t>() + 4 * i + 4);
    NoGradGuard no_grad;
    for (std::size_t k = 0; k < 30; ++k) {
      std::vector<std::int64_t> flat;
      for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
      const std::size_t L = rows[0].size();
      const auto logits = model.forward(index_tensor(flat, {3, L})).to_vector();
      for (std::size_t i = 0; i < 3; ++i) {
        const double* row = logits.data() + (i * L + L - 1) * 11;
        rows[i].push_back(std::max_element(row, row + 11) - row);
      }
    }
    std::vector<std::int64_t> flat;
    for (auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
    BOOST_TEST(same_bits(a, index_tensor(flat, {3, 34})));
  }
}

BOOST_AUTO_TEST_CASE(sampled_generation_is_identical_for_the_same_seed) {
  // Any next-token rule works; a seeded draw from softmax(logits / temperature) gives the same
  // tokens cached and uncached (the probabilities agree to float rounding).
  TransformerDecoder model(gpt_config(PositionalKind::Learned, false, true));
  model.eval();
  auto sampler = [](std::uint64_t seed) {
    auto rng = std::make_shared<Rng>(seed);
    return [rng](const Tensor& logits) {
      const Tensor p = softmax(mul_scalar(logits, 1.0 / 0.8), -1);
      const std::size_t N = p.shape()[0], V = p.shape()[1];
      const auto pv = p.to_vector();
      std::vector<std::int64_t> out(N);
      for (std::size_t i = 0; i < N; ++i) {
        double u = rng->uniform(), c = 0;
        std::size_t j = 0;
        for (; j + 1 < V && (c += pv[i * V + j]) <= u; ++j) {}
        out[i] = std::int64_t(j);
      }
      return index_tensor(out, {N});
    };
  };
  const Tensor prompt = random_tokens(2, 3, 11, 10);
  auto cached = decoding_session(model, true), uncached = decoding_session(model, false);
  BOOST_TEST(same_bits(generate(*cached, prompt, 25, sampler(42)), generate(*uncached, prompt, 25, sampler(42))));
}

BOOST_AUTO_TEST_CASE(sessions_reorder_rows_like_beam_search) {
  TransformerDecoder model(gpt_config(PositionalKind::Sinusoidal, false, true));
  model.eval();
  auto cached = decoding_session(model, true), uncached = decoding_session(model, false);
  const Tensor prompt = random_tokens(3, 5, 11, 11);
  BOOST_TEST(close_to(cached->step(prompt), uncached->step(prompt)));
  for (auto* s : {cached.get(), uncached.get()}) s->select_rows({2, 0, 0, 1});
  BOOST_TEST(cached->batch() == 4u);
  BOOST_TEST(uncached->batch() == 4u);
  const Tensor next = random_tokens(4, 2, 11, 12);
  BOOST_TEST(close_to(cached->step(next), uncached->step(next)));
  expect_throws([&] { cached->select_rows({4}); }, "IndexError", {"row 4"});
  expect_throws([&] { uncached->select_rows({4}); }, "IndexError", {"row 4"});
  expect_throws([&] { uncached->step(random_tokens(4, 34, 11, 1)); }, "ValueError", {"max_len 40"});
  expect_throws([&] { uncached->step(random_tokens(2, 1, 11, 1)); }, "ShapeError", {"2 rows", "decodes 4"});
}

BOOST_AUTO_TEST_CASE(generate_errors) {
  TransformerDecoder model(gpt_config(PositionalKind::Learned, true, true));
  auto s = decoding_session(model);
  expect_throws([&] { generate(*s, random_tokens(1, 10, 11, 1), 31); }, "ValueError",
                {"10 tokens plus 31 new tokens", "max_len 40"});
  expect_throws([&] { generate(*s, random_tokens(1, 0, 11, 1), 3); }, "ShapeError", {"no token"});
  expect_throws([&] { generate(*s, random_tokens(1, 2, 11, 1), 3, [](const Tensor& l) { return l; }); }, "DTypeError",
                {"(N) int64", "float32"});
  s = decoding_session(model);
  expect_throws([&] { generate(*s, random_tokens(2, 2, 11, 1), 3, [](const Tensor&) { return index_tensor({1}, {1}); }); },
                "ShapeError", {"next(logits)", "(1)", "(2)"});
  s = decoding_session(model);
  generate(*s, random_tokens(1, 2, 11, 1), 38);  // exactly max_len
  expect_throws([&] { generate(*s, random_tokens(1, 2, 11, 1), 1); }, "ValueError", {"already holds"});
  expect_throws([] { greedy_next_token(zeros({2, 0})); }, "ShapeError", {"no class"});
  BOOST_TEST(same_bits(greedy_next_token(tensor({1, 3, 3, NAN, 2, 0}, {2, 3})), index_tensor({1, 1}, {2})));
}

BOOST_AUTO_TEST_SUITE_END()
