// Multi-head attention: projections, the attention op (ops/attention.hpp), out_proj.
//   q = query W_q^T + b_q (B,T,E);  k, v likewise (B,S,E)     (self-attention: one GEMM, packed)
//   [add_bias_kv]   k = [k; bias_k], v = [v; bias_v]           (B,S+1,E)
//   [add_zero_attn] k = [k; 0], v = [v; 0]                     (B,S'+1,E)
//   per head: p = softmax(q_h k_h^T / sqrt(D) [+ float mask], bool masks)  (B,H,T,S')
//   out = out_proj(concat_h(p v_h)) (B,T,E)
// Unbatched input runs as B = 1 and drops that axis from the results; batch_first(false)
// input (T, B, E) runs transposed to (B, T, E) and the output is transposed back.
#include <cmath>

#include "xgrad/framework/array.hpp"  // first: the xtensor allocator (uninitialised buffers below)
#include "xgrad/framework/autograd.hpp"
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

// m (..., S) bool -> (..., S + n) with n columns of `fill` appended (false = not masked).
Tensor pad_bool_keys(const Tensor& m, std::size_t n, bool fill = false) {
  const Shape& s = m.shape();
  const std::size_t S = s.back(), rows = S ? m.numel() / S : 0;
  const std::vector<double> v = m.to_vector();
  std::vector<bool> out;
  out.reserve(rows * (S + n));
  for (std::size_t r = 0; r < rows; ++r) {
    for (std::size_t j = 0; j < S; ++j) out.push_back(v[r * S + j] != 0);
    out.insert(out.end(), n, fill);
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

// The caller's layout -> batch-first (B, L, F): unbatched (L, F) as B = 1, sequence-first
// (L, B, F) transposed (one copy); and back for an output (B, T, E).
Tensor to_batch_first(const Tensor& t, bool unbatched, bool batch_first) {
  return unbatched ? reshape(t, {1, t.shape()[0], t.shape()[1]}) : batch_first ? t : transpose(t, 0, 1);
}
Tensor from_batch_first(const Tensor& out, bool unbatched, bool batch_first) {
  return unbatched ? reshape(out, {out.shape()[1], out.shape()[2]}) : batch_first ? out : transpose(out, 0, 1);
}

// add_bias_kv: k = [k; bias_k], v = [v; bias_v]; add_zero_attn: then a zero key and value.
void append_extra_keys(Tensor& k, Tensor& v, const Tensor& bias_k, const Tensor& bias_v, bool zero_attn) {
  const std::size_t B = k.shape()[0], E = k.shape()[2];
  const DType dt = k.dtype();
  if (bias_k.defined()) {  // (1, 1, E) broadcast to (B, 1, E), appended along the keys
    const Tensor z = zeros({B, 1, E}, dt);
    k = concat({k, add(z, bias_k)}, 1);
    v = concat({v, add(z, bias_v)}, 1);
  }
  if (zero_attn) {
    const Tensor z = zeros({B, 1, E}, dt);
    k = concat({k, z}, 1);
    v = concat({v, z}, 1);
  }
}

// DTypeError unless input `arg` has the parameters' dtype dt.
void check_param_dtype(const char* op, const char* arg, const Tensor& t, DType dt) {
  if (t.dtype() != dt)
    throw_error<DTypeError>(op, "argument '", arg, "' ", t.shape(), " is ", dtype_name(t.dtype()),
                            " but the parameters are ", dtype_name(dt), " (convert the input, or the module with to())");
}

// One input of the incremental entry points in the module's layout: float of the parameters'
// dtype dt, (B, L, F) / (L, B, F) / unbatched (L, F). Returns {B, L} (B = 1 unbatched).
std::pair<std::size_t, std::size_t> check_sequence(const char* op, const char* arg, const Tensor& t, bool unbatched,
                                                   bool batch_first, std::size_t F, DType dt) {
  check_float(op, arg, t);
  const char* layout = unbatched ? "(L, " : batch_first ? "(B, L, " : "(L, B, ";
  if (t.dim() != (unbatched ? 2u : 3u) || t.shape().back() != F)
    throw_error<ShapeError>(op, "argument '", arg, "' ", t.shape(), " must be ", layout, F, ")",
                            unbatched ? " (unbatched)" : batch_first ? "" : " (batch_first(false))");
  check_param_dtype(op, arg, t, dt);
  if (unbatched) return {1, t.shape()[0]};
  return batch_first ? std::pair{t.shape()[0], t.shape()[1]} : std::pair{t.shape()[1], t.shape()[0]};
}

// Copies `count` rows of `row_bytes` bytes each.
void copy_rows(const Tensor& src, std::size_t src_row, const Tensor& dst, std::size_t dst_row, std::size_t count,
               std::size_t row_bytes) {
  if (count == 0 || row_bytes == 0) return;
  const auto* from = static_cast<const unsigned char*>(src.raw_data()) + src_row * row_bytes;
  auto* to = static_cast<unsigned char*>(dst.mutable_raw_data()) + dst_row * row_bytes;
  std::copy_n(from, count * row_bytes, to);
}

}  // namespace

Tensor select_rows(const char* op, const Tensor& x, const std::vector<std::size_t>& rows) {
  if (!x.defined()) throw_error<ValueError>(op, "argument 'x' is an undefined tensor");
  if (x.dim() == 0) throw_error<ShapeError>(op, "argument 'x' is a scalar; rows are selected along axis 0");
  const std::size_t n = x.shape()[0];
  for (std::size_t i = 0; i < rows.size(); ++i)
    if (rows[i] >= n)
      throw_error<IndexError>(op, "row ", rows[i], " (entry ", i, " of 'rows') is out of range for ", n,
                              " rows of argument 'x' ", x.shape());
  Shape s = x.shape();
  s[0] = rows.size();
  Tensor out = empty_tensor(x.dtype(), s, op);
  const std::size_t row_bytes = n ? x.nbytes() / n : 0;
  for (std::size_t i = 0; i < rows.size(); ++i) copy_rows(x, rows[i], out, i, 1, row_bytes);
  return out;
}

// --- KVCache ---------------------------------------------------------------------------------

KVCache::KVCache(Count max_len) : max_len_(check_count("KVCache", "max_len", max_len)) {}

Tensor KVCache::keys() const { return k_.defined() ? narrow(k_, 1, 0, length_) : Tensor(); }
Tensor KVCache::values() const { return v_.defined() ? narrow(v_, 1, 0, length_) : Tensor(); }

void KVCache::clear() {
  length_ = 0;
  k_ = Tensor();
  v_ = Tensor();
}

// New (B, n, E) zero buffers holding the cached positions.
void KVCache::reserve(std::size_t n, std::size_t B, std::size_t E, DType dtype) {
  const char* op = "KVCache::reserve";
  if (n > max_len_)
    throw_error<ValueError>(op, "cannot hold ", n, " positions: the cache's max_len is ", max_len_);
  if (!is_float(dtype)) throw_error<DTypeError>(op, "the dtype must be float32 or float64, got ", dtype_name(dtype));
  if (k_.defined() && dtype != k_.dtype())
    throw_error<DTypeError>(op, "the cache holds ", dtype_name(k_.dtype()), ", not ", dtype_name(dtype),
                            " (clear() it first)");
  if (k_.defined() && (B != batch() || E != k_.shape()[2]))
    throw_error<ShapeError>(op, "the cache holds (B, E) = (", batch(), ", ", k_.shape()[2], "), not (", B, ", ", E,
                            ") (clear() it first)");
  if (n <= allocated()) return;
  Tensor k = empty_tensor(dtype, {B, n, E}, op), v = empty_tensor(dtype, {B, n, E}, op);
  const std::size_t row = E * itemsize(dtype), old = allocated();
  for (Tensor* t : {&k, &v}) {  // positions >= length are zero: masked keys must stay finite
    auto* p = static_cast<unsigned char*>(t->mutable_raw_data());
    for (std::size_t b = 0; b < B; ++b) std::fill_n(p + (b * n + length_) * row, (n - length_) * row, 0);
  }
  for (std::size_t b = 0; b < B && length_ > 0; ++b) {
    copy_rows(k_, b * old, k, b * n, length_, row);
    copy_rows(v_, b * old, v, b * n, length_, row);
  }
  k_ = k;
  v_ = v;
}

void KVCache::append(const Tensor& k, const Tensor& v) {
  const char* op = "KVCache::append";
  check_float(op, "k", k);
  check_same_float(op, "k", k, "v", v);
  check_rank(op, "k", k, 3, "(B, t, E)");
  check_same_shape(op, "k", k, "v", v);
  const std::size_t B = k.shape()[0], t = k.shape()[1], E = k.shape()[2];
  if (k_.defined()) {
    if (B != batch() || E != k_.shape()[2])
      throw_error<ShapeError>(op, "argument 'k' ", k.shape(), " does not fit the cache's (B, E) = (", batch(), ", ",
                              k_.shape()[2], ")");
    if (k.dtype() != k_.dtype())
      throw_error<DTypeError>(op, "argument 'k' is ", dtype_name(k.dtype()), " but the cache holds ",
                              dtype_name(k_.dtype()));
  }
  if (t > max_len_ - length_)
    throw_error<ValueError>(op, "the cache holds ", length_, " positions; ", t, " more would exceed its max_len ",
                            max_len_);
  if (length_ + t > allocated())
    reserve(std::min(max_len_, std::max({length_ + t, 2 * allocated(), std::size_t(16)})), B, E, k.dtype());
  const std::size_t row = E * itemsize(k.dtype()), A = allocated();
  for (std::size_t b = 0; b < B; ++b) {
    copy_rows(k, b * t, k_, b * A + length_, t, row);
    copy_rows(v, b * t, v_, b * A + length_, t, row);
  }
  length_ += t;
}

void KVCache::select_rows(const std::vector<std::size_t>& rows) {
  if (!k_.defined()) return;  // nothing stored yet: the next append sets the batch
  k_ = xgrad::select_rows("KVCache::select_rows", k_, rows);
  v_ = xgrad::select_rows("KVCache::select_rows", v_, rows);
}

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
    check_param_dtype(op, arg, *t, dt);
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
  const Tensor q_in = to_batch_first(query, unbatched, bf);
  const Tensor k_in = self ? q_in : to_batch_first(key, unbatched, bf);
  const Tensor v_in = self ? q_in : to_batch_first(value, unbatched, bf);
  const std::size_t extra_keys = std::size_t(bias_k.defined()) + std::size_t(options.add_zero_attn());

  // The fused op needs neither the weights nor dropout on them; otherwise the composed
  // reference runs (same function, one more copy per head and the weights kept).
  const bool fused = !opt.need_weights && !(attn_drop.training() && attn_drop.p > 0);
  if (fused && self && in_proj_weight.defined() && extra_keys == 0) {  // one (B*T, E) x (E, 3E) GEMM
    Tensor qkv = linear(q_in, in_proj_weight, in_proj_bias);
    return {from_batch_first(out_proj.forward(attention_packed(qkv, H, masks)), unbatched, bf), Tensor()};
  }
  // Separate projections on row blocks of the packed weight (slicing the small weight is
  // cheaper than slicing the (B, L, 3E) activations and their gradients).
  Tensor q = project(0, q_in), k = project(1, k_in), v = project(2, v_in);
  append_extra_keys(k, v, bias_k, bias_v, options.add_zero_attn());
  if (extra_keys) masks = pad_keys(masks, extra_keys, T, S);
  return attend(q, k, v, masks, opt, unbatched, S + extra_keys);
}

UnpaddedRows UnpaddedRows::of(const Tensor& m) {
  const char* op = "UnpaddedRows";
  if (!m.defined() || m.dtype() != DType::Bool)
    throw_error<DTypeError>(op, "argument 'key_padding_mask' must be bool (B, T), got ",
                            m.defined() ? dtype_name(m.dtype()) : "an undefined tensor");
  check_rank(op, "key_padding_mask", m, 2, "(B, T)");
  UnpaddedRows r;
  r.key_padding_mask = m.clone();  // index and mask stay one pair if the caller's mask changes
  r.batch = m.shape()[0], r.length = m.shape()[1];
  const bool* pad = m.data<bool>();
  std::vector<std::int64_t> index;
  index.reserve(m.numel());
  for (std::size_t i = 0, count = m.numel(); i < count; ++i)
    if (!pad[i]) index.push_back(std::int64_t(i));
  const std::size_t n = index.size();
  r.index = index_tensor(std::move(index), {n});
  bool trailing = true;
  for (std::size_t b = 0; b < r.batch && trailing; ++b) {
    std::size_t len = 0;
    while (len < r.length && !pad[b * r.length + len]) ++len;
    for (std::size_t t = len; t < r.length; ++t) trailing = trailing && pad[b * r.length + t];
    r.lengths.push_back(len);
  }
  if (!trailing) r.lengths.clear();
  return r;
}

Tensor UnpaddedRows::pack_rows(const Tensor& x) const {
  const char* op = "UnpaddedRows::pack_rows";
  if (!x.defined() || x.dim() != 3 || x.shape()[0] != batch || x.shape()[1] != length)
    throw_error<ShapeError>(op, "argument 'x' must be (", batch, ", ", length, ", F) for the key padding mask ",
                            key_padding_mask.shape(), ", got ", x.defined() ? shape_str(x.shape()) : "undefined");
  return xgrad::pack_rows(x, index);
}

Tensor UnpaddedRows::unpack_rows(const Tensor& y) const {
  const char* op = "UnpaddedRows::unpack_rows";
  if (!y.defined() || y.dim() != 2 || y.shape()[0] != rows())
    throw_error<ShapeError>(op, "argument 'y' must be (", rows(), ", F) (the unpadded positions of the mask ",
                            key_padding_mask.shape(), "), got ", y.defined() ? shape_str(y.shape()) : "undefined");
  return xgrad::unpack_rows(y, index, {batch, length});
}

AttentionOutput MultiHeadAttention::forward_unpadded(const Tensor& x, const UnpaddedRows& rows,
                                                     const AttentionOptions& opt) {
  const char* op = "MultiHeadAttention::forward_unpadded";
  const std::size_t E = embed_dim, B = rows.batch, T = rows.length;
  if (opt.key_padding_mask.defined())
    throw_error<ValueError>(op, "options.key_padding_mask must be undefined: the keys are masked by the rows' mask ",
                            rows.key_padding_mask.shape());
  check_float(op, "x", x);
  if (x.dim() != 2 || x.shape()[0] != rows.rows() || x.shape()[1] != E)
    throw_error<ShapeError>(op, "argument 'x' must be (", rows.rows(), ", ", E, ") (the unpadded rows of ",
                            rows.key_padding_mask.shape(), "), got ", x.shape());
  const DType dt = out_proj.weight.dtype();
  check_param_dtype(op, "x", x, dt);
  AttentionOptions with_mask = opt;
  with_mask.key_padding_mask = rows.key_padding_mask;
  const bool fused = !opt.need_weights && !(attn_drop.training() && attn_drop.p > 0) && in_proj_weight.defined() &&
                     !bias_k.defined() && !options.add_zero_attn();
  if (!fused) {  // forward on the unpacked batch, in the module's layout
    const bool bf = options.batch_first();
    AttentionOutput a = forward(from_batch_first(rows.unpack_rows(x), false, bf), with_mask);
    return {rows.pack_rows(to_batch_first(a.output, false, bf)), a.weights};
  }
  AttentionMasks masks = attention_masks(op, opt.attn_mask, rows.key_padding_mask, opt.is_causal,
                                         {B, num_heads, T, T}, dt);
  if (!rows.lengths.empty()) {  // right padding: x (N, E) -> qkv (N, 3E) -> attention (N, E), in place
    masks.key_padding_mask = Tensor();
    const Tensor qkv = linear(x, in_proj_weight, in_proj_bias);
    return {out_proj.forward(attention_packed_rows(qkv, rows.lengths, T, num_heads, masks)), Tensor()};
  }
  masks.skip_padded_queries = true;  // pack_rows drops the padding rows of the output
  // x (N, E) -> qkv (N, 3E) -> zero padding rows (B, T, 3E) -> attention (B, T, E) -> (N, E)
  const Tensor qkv = rows.unpack_rows(linear(x, in_proj_weight, in_proj_bias));
  return {out_proj.forward(rows.pack_rows(attention_packed(qkv, num_heads, masks))), Tensor()};
}

Tensor MultiHeadAttention::project(std::size_t which, const Tensor& x) const {
  const std::size_t E = embed_dim;
  const Tensor b = in_proj_bias.defined() ? narrow(in_proj_bias, 0, which * E, E) : Tensor();
  if (in_proj_weight.defined()) return linear(x, narrow(in_proj_weight, 0, which * E, E), b);
  return linear(x, which == 0 ? q_proj_weight : which == 1 ? k_proj_weight : v_proj_weight, b);
}

// q (B, T, E), k / v (B, S', E) projected; the weights (when asked for) cut to their first
// weight_keys keys (forward_cached: the positions, not the unused storage).
AttentionOutput MultiHeadAttention::attend(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const AttentionMasks& masks, const AttentionOptions& opt, bool unbatched,
                                           std::size_t weight_keys) {
  const bool bf = options.batch_first();
  const bool fused = !opt.need_weights && !(attn_drop.training() && attn_drop.p > 0);
  if (fused) return {from_batch_first(out_proj.forward(attention(q, k, v, num_heads, masks)), unbatched, bf), Tensor()};
  AttentionResult r = attention_reference(q, k, v, num_heads, masks, 0, [&](const Tensor& p) { return attn_drop.forward(p); });
  AttentionOutput result{from_batch_first(out_proj.forward(r.out), unbatched, bf), Tensor()};
  if (opt.need_weights) {
    Tensor w = weight_keys < r.weights.shape()[3] ? narrow(r.weights, 3, 0, weight_keys) : r.weights;
    w = opt.average_attn_weights ? mean(w, {1}) : w;  // (B, T, S') or (B, H, T, S')
    result.weights = unbatched ? squeeze(w, 0) : w;
  }
  return result;
}

ProjectedKeyValues MultiHeadAttention::project_key_value(const Tensor& key, const Tensor& value) const {
  const char* op = "MultiHeadAttention::project_key_value";
  check_float(op, "key", key);
  check_float(op, "value", value);
  const bool unbatched = key.dim() == 2 && value.dim() == 2, bf = options.batch_first();
  const DType dt = out_proj.weight.dtype();
  const auto [B, S] = check_sequence(op, "key", key, unbatched, bf, kdim, dt);
  const auto bs_value = check_sequence(op, "value", value, unbatched, bf, vdim, dt);
  if (bs_value.first != B || bs_value.second != S)
    throw_error<ShapeError>(op, "arguments 'key' ", key.shape(), " and 'value' ", value.shape(),
                            " must have the same batch and sequence sizes");
  ProjectedKeyValues kv;
  kv.k = project(1, to_batch_first(key, unbatched, bf));
  kv.v = project(2, to_batch_first(value, unbatched, bf));
  append_extra_keys(kv.k, kv.v, bias_k, bias_v, options.add_zero_attn());
  kv.extra_keys = std::size_t(bias_k.defined()) + std::size_t(options.add_zero_attn());
  kv.unbatched = unbatched;
  return kv;
}

AttentionOutput MultiHeadAttention::forward_projected(const Tensor& query, const ProjectedKeyValues& kv,
                                                      const AttentionOptions& opt) {
  const char* op = "MultiHeadAttention::forward_projected";
  if (!kv.k.defined() || !kv.v.defined())
    throw_error<ValueError>(op, "argument 'kv' holds no keys (make it with project_key_value)");
  const std::size_t E = embed_dim, H = num_heads, extra = std::size_t(bias_k.defined()) + std::size_t(options.add_zero_attn());
  const DType dt = out_proj.weight.dtype();
  const auto [B, T] = check_sequence(op, "query", query, kv.unbatched, options.batch_first(), E, dt);
  if (kv.k.dim() != 3 || kv.k.shape()[0] != B || kv.k.shape()[2] != E || kv.k.shape()[1] < extra ||
      kv.extra_keys != extra || kv.v.shape() != kv.k.shape() || kv.k.dtype() != dt || kv.v.dtype() != dt)
    throw_error<ShapeError>(op, "argument 'kv' (k ", kv.k.shape(), ", v ", kv.v.shape(), ", ", kv.extra_keys,
                            " extra keys) is not the projection of a batch of ", B, " for this module (k and v (", B,
                            ", S + ", extra, ", ", E, ") ", dtype_name(dt), ", from project_key_value)");
  const std::size_t S = kv.keys();
  AttentionMasks masks = attention_masks(op, opt.attn_mask, opt.key_padding_mask, opt.is_causal, {B, H, T, S}, dt,
                                         kv.unbatched);
  const Tensor q = project(0, to_batch_first(query, kv.unbatched, options.batch_first()));
  if (extra) masks = pad_keys(masks, extra, T, S);
  return attend(q, kv.k, kv.v, masks, opt, kv.unbatched, S + extra);
}

void MultiHeadAttention::check_cache(const char* op, const KVCache& cache) const {
  const Tensor& k = cache.key_storage();
  if (!k.defined()) return;
  const DType dt = out_proj.weight.dtype();
  if (k.dtype() != dt)
    throw_error<DTypeError>(op, "the cache holds ", dtype_name(k.dtype()), " keys, not this module's ", dtype_name(dt));
  if (k.shape()[2] != embed_dim)
    throw_error<ShapeError>(op, "the cache holds keys of width ", k.shape()[2], ", not this module's embed_dim ",
                            embed_dim);
}

AttentionOutput MultiHeadAttention::forward_cached(const Tensor& x, KVCache& cache, const AttentionOptions& opt) {
  const char* op = "MultiHeadAttention::forward_cached";
  if (bias_k.defined() || options.add_zero_attn())
    throw_error<ValueError>(op, "add_bias_kv and add_zero_attn are not supported with a KV cache (their extra keys "
                            "belong to no position)");
  if (opt.attn_mask.defined())
    throw_error<ValueError>(op, "attn_mask ", opt.attn_mask.shape(),
                            " is not supported with a KV cache; use is_causal and key_padding_mask");
  check_float(op, "x", x);
  const bool unbatched = x.dim() == 2, bf = options.batch_first();
  const DType dt = out_proj.weight.dtype();
  const auto [B, t] = check_sequence(op, "x", x, unbatched, bf, embed_dim, dt);
  if (t == 0) throw_error<ShapeError>(op, "argument 'x' ", x.shape(), " holds no position");
  const std::size_t L = cache.length(), S = L + t;
  if (t > cache.max_len() - L)
    throw_error<ValueError>(op, "the cache holds ", L, " positions and x adds ", t, ": ", S,
                            " would exceed the cache's max_len ", cache.max_len());
  if (cache.batch() != 0 && cache.batch() != B)
    throw_error<ShapeError>(op, "argument 'x' ", x.shape(), " has a batch of ", B, " but the cache holds ",
                            cache.batch(), " rows");
  check_cache(op, cache);
  const AttentionMasks given =
      attention_masks(op, Tensor(), opt.key_padding_mask, false, {B, num_heads, t, S}, dt, unbatched);
  if (given.float_mask.defined())
    throw_error<DTypeError>(op, "a float key_padding_mask is not supported with a KV cache; use a bool one (true = "
                            "padding)");

  NoGradGuard no_grad;
  const Tensor x_in = to_batch_first(x, unbatched, bf);
  const Tensor q = project(0, x_in);
  cache.append(project(1, x_in), project(2, x_in));
  const std::size_t A = cache.allocated();
  AttentionMasks masks;
  if (opt.is_causal || S < A) {  // query i (position L + i) sees positions j <= L + i (causal), j < S (stored)
    std::vector<bool> m(t * A);
    for (std::size_t i = 0; i < t; ++i)
      for (std::size_t j = 0; j < A; ++j) m[i * A + j] = j >= S || (opt.is_causal && j > L + i);
    masks.mask = bool_tensor(m, {t, A});
  }
  if (given.key_padding_mask.defined())
    masks.key_padding_mask = S < A ? pad_bool_keys(given.key_padding_mask, A - S, true) : given.key_padding_mask;
  return attend(q, cache.key_storage(), cache.value_storage(), masks, opt, unbatched, S);
}

}  // namespace xgrad
