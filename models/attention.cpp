// Multi-head attention: projections, the attention op (ops/attention.hpp), out_proj.
//   q = query W_q^T + b_q (B,T,E);  k, v likewise (B,S,E)     (self-attention: one GEMM, packed)
//   [add_bias_kv]   k = [k; bias_k], v = [v; bias_v]           (B,S+1,E)
//   [add_zero_attn] k = [k; 0], v = [v; 0]                     (B,S'+1,E)
//   per head: p = softmax(q_h k_h^T / sqrt(D) [+ float mask], bool masks)  (B,H,T,S')
//   out = out_proj(concat_h(p v_h)) (B,T,E)
// Unbatched input runs as B = 1 and drops that axis from the results; batch_first(false)
// input (T, B, E) runs transposed to (B, T, E) and the output is transposed back.
#include <cmath>

#include "xgrad/models/attention.hpp"
#include "xgrad/ops/ops.hpp"

namespace xgrad {
namespace {

double xavier_bound(std::size_t fan_in, std::size_t fan_out) {
  return std::sqrt(6.0 / double(fan_in + fan_out));
}

std::string shapes_of(const Tensor& q, const Tensor& k, const Tensor& v) {
  return "query " + shape_str(q.shape()) + ", key " + shape_str(k.shape()) + ", value " +
         shape_str(v.shape());
}

// m (..., S) bool -> (..., S + n) with n not-masked (false) columns appended.
Tensor pad_bool_keys(const Tensor& m, std::size_t n) {
  const Shape& s = m.shape();
  const std::size_t S = s.back(), rows = S ? m.numel() / S : 0;
  const std::vector<double> v = m.to_vector();
  std::vector<bool> out;
  out.reserve(rows * (S + n));
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < S; ++j) out.push_back(v[r * S + j] != 0);
    out.insert(out.end(), n, false);
  }
  Shape padded = s;
  padded.back() += n;
  return bool_tensor(out, padded);
}

// The masks for n keys appended after the S keys (add_bias_kv / add_zero_attn): every added
// key is visible to every query, so is_causal becomes an explicit (T, S) mask first.
AttentionMasks pad_keys(AttentionMasks m, std::size_t n, std::size_t T, std::size_t S) {
  if (m.is_causal) {
    const Tensor causal = causal_mask(T, S);
    m.mask = m.mask.defined() ? logical_or(m.mask, causal) : causal;
    m.is_causal = false;
  }
  if (m.mask.defined()) m.mask = pad_bool_keys(m.mask, n);
  if (m.key_padding_mask.defined()) m.key_padding_mask = pad_bool_keys(m.key_padding_mask, n);
  if (m.float_mask.defined()) {
    Shape zs = m.float_mask.shape();
    zs.back() = n;
    m.float_mask = concat({m.float_mask, zeros(zs, m.float_mask.dtype())}, -1);
  }
  return m;
}

}  // namespace

// Every parameter's size, checked before out_proj (a member) allocates anything, so an
// absurd embed_dim / kdim / vdim fails naming MultiHeadAttention and the parameter.
static const MultiHeadAttentionOptions& checked_sizes(const MultiHeadAttentionOptions& o) {
  const std::size_t E = o.embed_dim();
  check_parameter_size("MultiHeadAttention", "out_proj.weight", "(embed_dim, embed_dim)", {E, E});
  if (o.kdim() == E && o.vdim() == E) {
    check_parameter_size("MultiHeadAttention", "in_proj_weight", "(3 * embed_dim, embed_dim)", {3 * E, E});
  } else {
    check_parameter_size("MultiHeadAttention", "k_proj_weight", "(embed_dim, kdim)", {E, o.kdim()});
    check_parameter_size("MultiHeadAttention", "v_proj_weight", "(embed_dim, vdim)", {E, o.vdim()});
  }
  return o;
}

MultiHeadAttention::MultiHeadAttention(const MultiHeadAttentionOptions& o, Rng& rng)
    : options(checked_sizes(o)),
      embed_dim(o.embed_dim()),
      num_heads(o.num_heads()),
      head_dim(o.embed_dim() / o.num_heads()),
      kdim(o.kdim()),
      vdim(o.vdim()),
      out_proj(o.embed_dim(), o.embed_dim(), o.bias(), rng),
      attn_drop(o.dropout(), rng()) {
  const std::size_t E = embed_dim, H = num_heads;
  if (E % H != 0)
    throw_error<ValueError>("MultiHeadAttention", "embed_dim ", E, " must be divisible by num_heads ", H);
  if (kdim == E && vdim == E) {
    const double b = xavier_bound(E, 3 * E);
    in_proj_weight = uniform({3 * E, E}, -b, b, rng);
    register_parameter("in_proj_weight", &in_proj_weight);
  } else {
    q_proj_weight = uniform({E, E}, -xavier_bound(E, E), xavier_bound(E, E), rng);
    k_proj_weight = uniform({E, kdim}, -xavier_bound(kdim, E), xavier_bound(kdim, E), rng);
    v_proj_weight = uniform({E, vdim}, -xavier_bound(vdim, E), xavier_bound(vdim, E), rng);
    register_parameter("q_proj_weight", &q_proj_weight);
    register_parameter("k_proj_weight", &k_proj_weight);
    register_parameter("v_proj_weight", &v_proj_weight);
  }
  if (o.bias()) {
    in_proj_bias = zeros({3 * E});
    register_parameter("in_proj_bias", &in_proj_bias);
    out_proj.bias = zeros({E});
    out_proj.bias.set_requires_grad(true);
  }
  if (o.add_bias_kv()) {  // xavier_normal_ on (1, 1, E): fan_in = fan_out = E, std = sqrt(2 / 2E)
    const double sd = std::sqrt(1.0 / double(std::max<std::size_t>(E, 1)));
    for (Tensor* t : {&bias_k, &bias_v}) {
      std::vector<double> v(E);
      for (auto& x : v) x = sd * rng.normal();
      *t = tensor(v, {1, 1, E});
    }
    register_parameter("bias_k", &bias_k);
    register_parameter("bias_v", &bias_v);
  }
  register_module("out_proj", &out_proj);
  register_module("attn_drop", &attn_drop);
}

AttentionOutput MultiHeadAttention::forward(const Tensor& query, const Tensor& key,
                                            const Tensor& value, const AttentionOptions& opt) {
  const char* op = "MultiHeadAttention";
  check_float(op, "query", query);
  check_float(op, "key", key);
  check_float(op, "value", value);
  const bool unbatched = query.dim() == 2, bf = options.batch_first();
  const char* layout = bf ? "batch-first (B, L, features)" : "sequence-first (L, B, features) (batch_first(false))";
  if (!(query.dim() == 3 && key.dim() == 3 && value.dim() == 3) &&
      !(unbatched && key.dim() == 2 && value.dim() == 2))
    throw_error<ShapeError>(op, "arguments must be all ", layout, " or all unbatched (L, features); got ",
                            shapes_of(query, key, value));
  const DType dt = out_proj.weight.dtype();
  for (auto [arg, t] : {std::pair<const char*, const Tensor*>{"query", &query}, {"key", &key}, {"value", &value}})
    if (t->dtype() != dt)
      throw_error<DTypeError>(op, "argument '", arg, "' ", t->shape(), " is ", dtype_name(t->dtype()),
                              " but the parameters are ", dtype_name(dt),
                              " (convert the input, or the module with to())");
  // Axes in the caller's layout: batch axis bx, sequence axis ax, features at 2 (1 unbatched).
  const std::size_t ax = unbatched ? 0 : bf ? 1 : 0, bx = bf ? 0 : 1, fx = unbatched ? 1 : 2;
  const std::size_t B = unbatched ? 1 : query.shape()[bx], T = query.shape()[ax], S = key.shape()[ax];
  const std::size_t E = embed_dim, H = num_heads;
  const bool shapes_ok = query.shape()[fx] == E && key.shape()[fx] == kdim &&
                         value.shape()[fx] == vdim && value.shape()[ax] == S &&
                         (unbatched || (key.shape()[bx] == B && value.shape()[bx] == B));
  if (!shapes_ok) {
    const char* tq = unbatched ? "(T, " : bf ? "(B, T, " : "(T, B, ";
    const char* ts = unbatched ? "(S, " : bf ? "(B, S, " : "(S, B, ";
    throw_error<ShapeError>(op, "arguments must be query ", tq, E, "), key ", ts, kdim, "), value ", ts, vdim,
                            ")", bf || unbatched ? "" : " (batch_first(false))", "; got ",
                            shapes_of(query, key, value));
  }
  AttentionMasks masks =
      attention_masks(op, opt.attn_mask, opt.key_padding_mask, opt.is_causal, {B, H, T, S}, dt, unbatched);

  // Everything is validated: from here on nothing throws for the caller's arguments.
  // Everything below runs batch-first (B, L, features): unbatched inputs as B = 1,
  // sequence-first inputs transposed (one copy each; self-attention transposes once).
  const bool self = query.impl() == key.impl() && key.impl() == value.impl();
  auto to_bf = [&](const Tensor& t, std::size_t L, std::size_t F) {
    return unbatched ? reshape(t, {1, L, F}) : bf ? t : transpose(t, 0, 1);
  };
  const Tensor q_in = to_bf(query, T, E);
  const Tensor k_in = self ? q_in : to_bf(key, S, kdim);
  const Tensor v_in = self ? q_in : to_bf(value, S, vdim);
  auto finish = [&](const Tensor& out) {  // out (B, T, E)
    return unbatched ? reshape(out, {T, E}) : bf ? out : transpose(out, 0, 1);
  };
  const std::size_t extra_keys = std::size_t(bias_k.defined()) + std::size_t(options.add_zero_attn());

  // The fused op needs neither the weights nor dropout on them; otherwise the composed
  // reference runs (same function, one more copy per head and the weights kept).
  const bool fused = !opt.need_weights && !(attn_drop.training() && attn_drop.p > 0);
  if (fused && self && in_proj_weight.defined() && extra_keys == 0) {  // one (B*T, E) x (E, 3E) GEMM
    Tensor qkv = linear(q_in, in_proj_weight, in_proj_bias);
    return {finish(out_proj.forward(attention_packed(qkv, H, masks))), Tensor()};
  }
  // Separate projections on row blocks of the packed weight (slicing the small weight is
  // cheaper than slicing the (B, L, 3E) activations and their gradients).
  Tensor q, k, v;
  auto bias_part = [&](std::size_t i) {
    return in_proj_bias.defined() ? narrow(in_proj_bias, 0, i * E, E) : Tensor();
  };
  if (in_proj_weight.defined()) {
    q = linear(q_in, narrow(in_proj_weight, 0, 0, E), bias_part(0));
    k = linear(k_in, narrow(in_proj_weight, 0, E, E), bias_part(1));
    v = linear(v_in, narrow(in_proj_weight, 0, 2 * E, E), bias_part(2));
  } else {
    q = linear(q_in, q_proj_weight, bias_part(0));
    k = linear(k_in, k_proj_weight, bias_part(1));
    v = linear(v_in, v_proj_weight, bias_part(2));
  }
  if (bias_k.defined()) {  // (1, 1, E) broadcast to (B, 1, E), appended along the keys
    const Tensor z = zeros({B, 1, E}, dt);
    k = concat({k, add(z, bias_k)}, 1);
    v = concat({v, add(z, bias_v)}, 1);
  }
  if (options.add_zero_attn()) {
    const Tensor z = zeros({B, 1, E}, dt);
    k = concat({k, z}, 1);
    v = concat({v, z}, 1);
  }
  if (extra_keys) masks = pad_keys(masks, extra_keys, T, S);
  if (fused) return {finish(out_proj.forward(attention(q, k, v, H, masks))), Tensor()};
  AttentionResult r = attention_reference(q, k, v, H, masks, 0, [&](const Tensor& p) { return attn_drop.forward(p); });
  AttentionOutput result{finish(out_proj.forward(r.out)), Tensor()};
  if (opt.need_weights) {
    Tensor w = opt.average_attn_weights ? mean(r.weights, {1}) : r.weights;  // (B, T, S') or (B, H, T, S')
    result.weights = unbatched ? squeeze(w, 0) : w;
  }
  return result;
}

}  // namespace xgrad
