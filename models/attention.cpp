// Multi-head attention: projections, the attention op (ops/attention.hpp), out_proj.
//   q = query W_q^T + b_q (B,T,E);  k, v likewise (B,S,E)     (self-attention: one GEMM, packed)
//   per head: p = softmax(q_h k_h^T / sqrt(D) [+ float mask], bool masks)  (B,H,T,S)
//   out = out_proj(concat_h(p v_h)) (B,T,E)
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

}  // namespace

MultiHeadAttention::MultiHeadAttention(std::size_t E, std::size_t H, bool bias, double dropout,
                                       Rng& rng, std::size_t kd, std::size_t vd)
    : embed_dim(E),
      num_heads(H),
      head_dim(H ? E / H : 0),
      kdim(kd ? kd : E),
      vdim(vd ? vd : E),
      out_proj(E, E, bias, rng),
      attn_drop(dropout, rng()) {
  if (H == 0 || E % H != 0)
    throw ValueError("MultiHeadAttention: embed_dim " + std::to_string(E) +
                     " must be divisible by num_heads " + std::to_string(H));
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
  if (bias) {
    in_proj_bias = zeros({3 * E});
    register_parameter("in_proj_bias", &in_proj_bias);
    out_proj.bias = zeros({E});
    out_proj.bias.set_requires_grad(true);
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
  if (query.dim() != 3 || key.dim() != 3 || value.dim() != 3)
    throw ShapeError(std::string(op) + ": inputs must be batch-first (B, L, E); got " +
                     shapes_of(query, key, value));
  const DType dt = out_proj.weight.dtype();
  for (auto [arg, t] : {std::pair<const char*, const Tensor*>{"query", &query}, {"key", &key}, {"value", &value}})
    if (t->dtype() != dt)
      throw DTypeError(std::string(op) + ": argument '" + arg + "' " + shape_str(t->shape()) + " is " +
                       dtype_name(t->dtype()) + " but the parameters are " + dtype_name(dt) +
                       " (convert the input, or the module with to())");
  const std::size_t B = query.shape()[0], T = query.shape()[1], S = key.shape()[1];
  const std::size_t E = embed_dim, H = num_heads;
  if (query.shape()[2] != E || key.shape()[2] != kdim || value.shape()[2] != vdim ||
      key.shape()[0] != B || value.shape()[0] != B || value.shape()[1] != S)
    throw ShapeError(std::string(op) + ": expected query (B, T, " + std::to_string(E) +
                     "), key (B, S, " + std::to_string(kdim) + "), value (B, S, " +
                     std::to_string(vdim) + "); got " + shapes_of(query, key, value));

  // Masks: validated here for MultiHeadAttention's own message, applied inside the op.
  AttentionMasks masks;
  masks.is_causal = opt.is_causal;
  const Shape full{B, H, T, S};
  if (opt.attn_mask.defined()) {
    Tensor m = opt.attn_mask;
    if (m.dim() == 3 && m.shape() == Shape{B * H, T, S}) m = reshape(m, full);  // PyTorch's 3-D form
    const bool fits = m.dim() >= 2 && m.dim() <= 4 && m.shape()[m.dim() - 2] == T &&
                      m.shape()[m.dim() - 1] == S &&
                      [&] {
                        for (std::size_t d = 0; d + 2 < m.dim(); ++d)
                          if (m.shape()[d] != 1 && m.shape()[d] != full[4 - m.dim() + d]) return false;
                        return true;
                      }();
    if (!fits)
      throw ShapeError(std::string(op) + ": argument 'attn_mask' " + shape_str(opt.attn_mask.shape()) +
                       " must be (T, S) = (" + std::to_string(T) + ", " + std::to_string(S) +
                       "), (B*H, T, S) or broadcastable to (B, H, T, S) = " + shape_str(full));
    if (m.dtype() == DType::Bool) {
      masks.mask = m;
    } else if (is_float(m.dtype())) {
      if (m.dtype() != dt)
        throw DTypeError(std::string(op) + ": float 'attn_mask' is " + dtype_name(m.dtype()) +
                         " but the inputs are " + dtype_name(dt));
      masks.float_mask = m;
    } else {
      throw DTypeError(std::string(op) + ": 'attn_mask' must be bool or float, got " +
                       dtype_name(m.dtype()));
    }
  }
  if (opt.key_padding_mask.defined()) {
    const Tensor& m = opt.key_padding_mask;
    if (m.dtype() != DType::Bool)
      throw DTypeError(std::string(op) + ": 'key_padding_mask' must be bool (true = padding), got " +
                       dtype_name(m.dtype()));
    if (m.shape() != Shape{B, S})
      throw ShapeError(std::string(op) + ": argument 'key_padding_mask' " + shape_str(m.shape()) +
                       " must be (B, S) = (" + std::to_string(B) + ", " + std::to_string(S) + ")");
    masks.key_padding_mask = m;
  }

  // The fused op needs neither the weights nor dropout on them; otherwise the composed
  // reference runs (same function, one more copy per head and the weights kept).
  const bool fused = !opt.need_weights && !(attn_drop.training() && attn_drop.p > 0);
  const bool self = query.impl() == key.impl() && key.impl() == value.impl();
  if (fused && self && in_proj_weight.defined()) {  // one (B*T, E) x (E, 3E) GEMM, heads read in place
    Tensor qkv = linear(query, in_proj_weight, in_proj_bias);
    return {out_proj.forward(attention_packed(qkv, H, masks)), Tensor()};
  }
  // Separate projections on row blocks of the packed weight (slicing the small weight is
  // cheaper than slicing the (B, L, 3E) activations and their gradients).
  Tensor q, k, v;
  auto bias_part = [&](std::size_t i) {
    return in_proj_bias.defined() ? narrow(in_proj_bias, 0, i * E, E) : Tensor();
  };
  if (in_proj_weight.defined()) {
    q = linear(query, narrow(in_proj_weight, 0, 0, E), bias_part(0));
    k = linear(key, narrow(in_proj_weight, 0, E, E), bias_part(1));
    v = linear(value, narrow(in_proj_weight, 0, 2 * E, E), bias_part(2));
  } else {
    q = linear(query, q_proj_weight, bias_part(0));
    k = linear(key, k_proj_weight, bias_part(1));
    v = linear(value, v_proj_weight, bias_part(2));
  }
  if (fused) return {out_proj.forward(attention(q, k, v, H, masks)), Tensor()};
  AttentionResult r = attention_reference(q, k, v, H, masks, 0, [&](const Tensor& p) { return attn_drop.forward(p); });
  AttentionOutput result{out_proj.forward(r.out), Tensor()};
  if (opt.need_weights) result.weights = opt.average_attn_weights ? mean(r.weights, {1}) : r.weights;
  return result;
}

}  // namespace xgrad
