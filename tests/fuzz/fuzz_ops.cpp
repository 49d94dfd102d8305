// libFuzzer target: every public op on small, fuzzer-chosen shapes, dtypes, axes, masks and
// indices, optionally followed by backward (and a second-order backward) with a random
// upstream gradient.
//
// Contract checked:
//   - only xgrad::Error subclasses may be thrown (anything else aborts);
//   - every result's shape is sane: its element count does not overflow and matches the
//     storage (reshape/narrow/split results are consistent with their input);
//   - every gradient has its input's shape and dtype;
//   - with finite inputs (-inf allowed as a mask) the softmax family never gives NaN, in
//     outputs or gradients; softmax rows sum to 1 (or are all 0 when fully masked);
//     MultiHeadAttention outputs and gradients are NaN-free on moderate inputs with masks;
//     cross_entropy is never NaN for non-NaN logits and valid label_smoothing;
//   - NaN arguments that the docs restrict to a range (dropout p, label_smoothing) are
//     rejected with ValueError.
//
// Input layout: byte 0 picks the op, byte 1 the float dtype, value style, no-grad and
// anomaly modes, bytes 2-3 seed the value generator; the op's own decoding follows (shapes,
// axes, sizes, flags), then the backward mode. Missing bytes read as 0, which always decodes
// to something valid-ish. XGRAD_FUZZ_TRACE=1 prints what an input decodes to.
//
// Replay a reproducer: ./build-fuzz/tests/fuzz/fuzz_ops tests/fuzz/crashes/ops-<name>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "xgrad/xgrad.hpp"

using namespace xgrad;

namespace {

[[noreturn]] void fail(const std::string& what) {
  std::fprintf(stderr, "\nfuzz_ops: BUG: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// Known findings can be silenced while they wait for a fix, so that fuzzing goes on past
// them: XGRAD_FUZZ_IGNORE="tag,tag". Check tags are printed in brackets in the message
// (shape_overflow, nan_argument, cross_entropy_nan, softmax_rows); these tags stop
// generating the inputs behind findings that are sanitizer reports:
//   huge_sizes   no start/length/size/dims near 2^64 (overflow probes)
//   max_keepdim  no max(x, axis, keepdim = true)
//   int64_range  no factory call converting an out-of-range double to int64
//   softmax_empty_axis  no softmax-family input with a zero-size dim
bool ignored(const char* tag) {
  static const std::string list = [] {
    const char* e = std::getenv("XGRAD_FUZZ_IGNORE");
    return "," + std::string(e ? e : "") + ",";
  }();
  return list.find("," + std::string(tag) + ",") != std::string::npos;
}

void fail_unless_ignored(const char* tag, const std::string& what) {
  if (!ignored(tag)) fail("[" + std::string(tag) + "] " + what);
}

// XGRAD_FUZZ_TRACE=1 prints what each input decodes to (for replaying seeds and crashes).
bool tracing() {
  static const bool on = std::getenv("XGRAD_FUZZ_TRACE") != nullptr;
  return on;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

// Values probing overflow in size arithmetic (start + length, products of dims).
constexpr std::size_t kHuge[] = {~std::size_t(0), ~std::size_t(0) - 1, std::size_t(1) << 63,
                                 (std::size_t(1) << 62) + 1, std::size_t(1) << 32};

// How float values are generated.
enum class Values {
  Normal,     // N(0, 1)
  Ties,       // integers in [-2, 2]: ties for max, exact zeros for relu
  Large,      // N(0, 1) * 1000
  Huge,       // mixed with +-1e30 / +-3e38 (float32) / +-1e300 (float64): overflow
  NegInf,     // N(0, 1) with some -inf entries where -inf is allowed (softmax inputs, masks)
  NonFinite,  // N(0, 1) with NaN, +inf and -inf entries: no value checks
};

class Input {
 public:
  Input(const std::uint8_t* data, std::size_t size) : p_(data), n_(size) {}
  std::uint8_t byte() { return i_ < n_ ? p_[i_++] : 0; }
  bool bit() { return byte() & 1; }
  std::size_t pick(std::size_t n) { return n ? byte() % n : 0; }
  std::size_t dim() { return pick(6); }  // 0..5
  // An axis for a tensor of rank r: mostly valid (either sign), sometimes out of range.
  long axis(std::size_t rank) {
    const std::uint8_t b = byte();
    const long r = long(rank), k = long(b >> 3);
    switch (b & 7) {
      case 0: case 1: case 2: case 3: return r ? k % r : 0;
      case 4: case 5: return r ? -1 - k % r : -1;
      case 6: return r + k % 3;
      default: return -r - 1 - k % 3;
    }
  }
  std::vector<long> axes(std::size_t rank) {
    std::vector<long> a(pick(4));
    for (auto& x : a) x = axis(rank);
    return a;
  }
  // A start / length / size: mostly 0..6, sometimes huge.
  std::size_t count() {
    const std::uint8_t b = byte();
    if (b < 240 || ignored("huge_sizes")) return b % 7;
    return kHuge[b % 5];
  }
  Shape shape() {
    Shape s(pick(5));
    for (auto& d : s) d = dim();
    return s;
  }
  // A shape related to s: equal, broadcast-compatible, or a little off.
  Shape derive(const Shape& s) {
    Shape r = s;
    switch (pick(8)) {
      case 0: break;
      case 1: for (auto& d : r) if (bit()) d = 1; break;
      case 2: r.erase(r.begin(), r.begin() + long(pick(r.size() + 1))); break;
      case 3:
        r.erase(r.begin(), r.begin() + long(pick(r.size() + 1)));
        for (auto& d : r) if (bit()) d = 1;
        break;
      case 4: r = shape(); break;
      case 5: r.clear(); break;
      case 6: for (std::size_t k = pick(3); k > 0; --k) r.insert(r.begin(), bit() ? 1 : dim()); break;
      default: if (!r.empty()) r[pick(r.size())] += 1; break;
    }
    return r;
  }
  double scalar() {
    static const double table[] = {0.0, 1.0, -1.0, 0.5, 2.0, -2.5, 3.0, 1e30, -0.0, 1e-30, 7.0, -3.0};
    return table[pick(sizeof(table) / sizeof(table[0]))];
  }

 private:
  const std::uint8_t* p_;
  std::size_t n_, i_ = 0;
};

// Per-input state.
struct Ctx {
  Input in;
  Rng rng;
  DType F = DType::Float32;  // the float dtype most operands use
  Values values = Values::Normal;
  std::vector<Tensor> leaves;             // float leaves that require grad
  std::unique_ptr<Module> keep_alive;     // a module whose parameters are among the leaves

  Ctx(const std::uint8_t* data, std::size_t size) : in(data, size) {}

  bool finite_values() const { return values != Values::NonFinite; }
  bool moderate_values() const {
    return values == Values::Normal || values == Values::Ties || values == Values::Large ||
           values == Values::NegInf;
  }

  Tensor floats(const Shape& shape, DType dt, bool allow_ninf) {
    auto normal = [](Rng& g) { return g.normal(); };
    auto small = [](Rng& g) { return double(g.uniform_int(-2, 2)); };
    auto u100 = [](Rng& g) { return int(g.uniform_int(0, 99)); };
    std::vector<double> v(numel(shape));
    const double huge = dt == DType::Float32 ? 3e38 : 1e300;
    for (auto& x : v) {
      const int r = u100(rng);
      switch (values) {
        case Values::Normal: x = normal(rng); break;
        case Values::Ties: x = small(rng); break;
        case Values::Large: x = normal(rng) * 1000; break;
        case Values::Huge: x = r < 25 ? huge : r < 50 ? -huge : r < 60 ? 1e30 : normal(rng); break;
        case Values::NegInf: x = allow_ninf && r < 30 ? -kInf : normal(rng); break;
        case Values::NonFinite: x = r < 10 ? kNaN : r < 20 ? kInf : r < 30 ? -kInf : normal(rng); break;
      }
    }
    return tensor(v, shape, dt);
  }
  Tensor bools(const Shape& shape, int percent_true = 50) {
    auto u100 = [](Rng& g) { return int(g.uniform_int(0, 99)); };
    std::vector<bool> v(numel(shape));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = u100(rng) < percent_true;
    return bool_tensor(v, shape);
  }
  Tensor indices(const Shape& shape, std::size_t n) {
    auto u100 = [](Rng& g) { return int(g.uniform_int(0, 99)); };
    std::vector<std::int64_t> v(numel(shape));
    for (auto& x : v) {
      const int r = u100(rng);
      if (r < 90) x = n ? rng.uniform_int(0, std::int64_t(n) - 1) : 0;
      else if (r < 94) x = -1;
      else if (r < 97) x = std::int64_t(n);
      else x = r < 98 ? std::numeric_limits<std::int64_t>::min() : std::numeric_limits<std::int64_t>::max();
    }
    return index_tensor(v, shape);
  }
  // An operand: usually of dtype F and requiring grad; one byte decides.
  Tensor operand(const Shape& shape, bool allow_ninf = false) {
    const std::uint8_t b = in.byte();
    DType dt = (b >> 5) == 7 ? DType((b >> 3) & 3) : F;
    if (dt == DType::Bool) return bools(shape);
    if (dt == DType::Int64) return indices(shape, 4);
    Tensor t = floats(shape, dt, allow_ninf);
    if (!(b & 1)) leaf(t);
    return t;
  }
  // A boolean mask of a shape related to `like` (rarely another dtype).
  Tensor mask(const Shape& like) {
    const std::uint8_t b = in.byte();
    Shape s = in.derive(like);
    if (b >= 240) return b & 1 ? floats(s, F, false) : indices(s, 2);
    return bools(s, int(b % 5) * 25);  // 0%, 25%, 50%, 75%, 100% masked
  }
  const Tensor& leaf(const Tensor& t) {
    t.set_requires_grad(true);
    leaves.push_back(t);
    return t;
  }
};

// --- checks ----------------------------------------------------------------------------

bool has_nan(const Tensor& t) {
  if (!t.defined() || !is_float(t.dtype())) return false;
  for (double v : t.to_vector())
    if (std::isnan(v)) return true;
  return false;
}

std::string what(const char* op, const Tensor& t) {
  return std::string(op) + " -> " + dtype_name(t.dtype()) + " " + shape_str(t.shape());
}

// The result's shape must describe its storage.
void check_result(const char* op, const Tensor& t) {
  if (!t.defined()) fail(std::string(op) + " returned an undefined tensor");
  std::size_t n = 1;
  bool empty = false;
  for (auto d : t.shape()) empty = empty || d == 0;
  if (empty) n = 0;  // a zero dim makes any other dims harmless
  else
    for (auto d : t.shape())
      if (__builtin_mul_overflow(n, d, &n)) {
        fail_unless_ignored("shape_overflow", what(op, t) + ": the shape " + shape_str(t.shape()) +
                                                  " has more than 2^64 elements");
        return;
      }
  if (t.numel() != n || t.to_vector().size() != n)
    fail(what(op, t) + ": storage holds " + std::to_string(t.to_vector().size()) +
         " elements, the shape says " + std::to_string(n));
}

// softmax / masked_softmax / log_softmax rows along `axis`: entries in [0, 1] summing to 1,
// or all zero exactly when every entry of the row is masked (mask true or x = -inf).
void check_softmax_rows(const char* op, const Tensor& x, const Tensor& full_mask, const Tensor& y,
                        std::size_t axis, bool log_out) {
  const auto xv = x.to_vector(), yv = y.to_vector();
  std::vector<double> mv = full_mask.defined() ? full_mask.to_vector() : std::vector<double>();
  const Shape s = x.dim() == 0 ? Shape{1} : x.shape();  // a rank-0 x is one row of one element
  if (x.dim() == 0) axis = 0;
  std::size_t outer = 1, n = s[axis], inner = 1;
  for (std::size_t d = 0; d < axis; ++d) outer *= s[d];
  for (std::size_t d = axis + 1; d < s.size(); ++d) inner *= s[d];
  const double tol = (x.dtype() == DType::Float32 ? 1e-4 : 1e-9) * double(n + 1);
  for (std::size_t o = 0; o < outer; ++o)
    for (std::size_t r = 0; r < inner; ++r) {
      double total = 0;
      bool all_masked = true;
      for (std::size_t i = 0; i < n; ++i) {
        const std::size_t k = (o * n + i) * inner + r;
        const bool masked = (!mv.empty() && mv[k] != 0) || xv[k] == -kInf;
        if (!masked) all_masked = false;
        const double p = log_out ? std::exp(yv[k]) : yv[k];
        if (std::isnan(yv[k])) fail(std::string(op) + ": NaN output at flat index " + std::to_string(k));
        if (p < -tol || p > 1 + tol)
          fail(std::string(op) + ": probability " + std::to_string(p) + " at flat index " + std::to_string(k));
        if (masked && p != 0)
          fail(std::string(op) + ": masked entry at flat index " + std::to_string(k) + " has probability " +
               std::to_string(p));
        total += p;
      }
      if (n == 0) continue;
      if (all_masked ? total != 0 : std::fabs(total - 1) > tol)
        fail_unless_ignored("softmax_rows", std::string(op) + ": row (" + std::to_string(o) + ", " + std::to_string(r) + ") of " +
             shape_str(s) + " along axis " + std::to_string(axis) + " sums to " + std::to_string(total) +
             (all_masked ? " but is fully masked" : ""));
    }
}

// --- backward ----------------------------------------------------------------------------

struct NanPolicy {
  bool outputs = false;       // forward outputs must be NaN-free
  bool grads = false;         // first-order gradients must be NaN-free
  bool second = false;        // second-order gradients must be NaN-free
  const char* op = "";
};

void check_grads(const char* stage, const std::vector<Tensor>& leaves, const std::vector<Tensor>& gs,
                 bool nan_check, const char* op) {
  if (gs.size() != leaves.size())
    fail(std::string(stage) + ": grad returned " + std::to_string(gs.size()) + " gradients for " +
         std::to_string(leaves.size()) + " inputs");
  for (std::size_t i = 0; i < gs.size(); ++i) {
    if (!gs[i].defined()) continue;
    if (gs[i].shape() != leaves[i].shape() || gs[i].dtype() != leaves[i].dtype())
      fail(std::string(stage) + " of " + op + ": gradient " + shape_str(gs[i].shape()) + " " +
           dtype_name(gs[i].dtype()) + " for input " + std::to_string(i) + " " +
           shape_str(leaves[i].shape()) + " " + dtype_name(leaves[i].dtype()));
    check_result(stage, gs[i]);
    if (nan_check && has_nan(gs[i]))
      fail(std::string(stage) + " of " + op + ": NaN in the gradient of input " + std::to_string(i) +
           " " + shape_str(leaves[i].shape()));
  }
}

void run_backward(Ctx& c, const std::vector<Tensor>& outs, const NanPolicy& nan) {
  const std::size_t mode = c.in.pick(4);  // 0 grad, 1 grad + second order, 2 backward(), 3 none
  if (tracing()) std::fprintf(stderr, "fuzz_ops: backward mode %zu\n", mode);
  if (mode == 3 || c.leaves.empty() || !is_grad_enabled()) return;
  std::vector<Tensor> ys, gs;
  for (const auto& y : outs)
    if (y.defined() && y.requires_grad() && is_float(y.dtype())) {
      ys.push_back(y);
      gs.push_back(randn(y.shape(), c.rng, y.dtype()));
    }
  if (ys.empty()) return;
  if (mode == 2) {
    ys[0].backward(gs[0]);
    std::vector<Tensor> acc;
    for (const auto& l : c.leaves) acc.push_back(l.grad());
    check_grads("backward", c.leaves, acc, nan.grads, nan.op);
    try {  // the graph was freed: a second backward must be a GraphError (or a no-op for leaves)
      ys[0].backward(gs[0]);
    } catch (const GraphError&) {
    }
    return;
  }
  GradOptions opt;
  opt.allow_unused = true;
  opt.create_graph = mode == 1;
  std::vector<Tensor> first = grad(ys, c.leaves, gs, opt);
  check_grads("grad", c.leaves, first, nan.grads, nan.op);
  if (mode != 1) return;
  Tensor total;
  for (const auto& g : first)
    if (g.defined() && g.requires_grad()) {
      Tensor term = sum(mul(g, randn(g.shape(), c.rng, g.dtype())));
      total = total.defined() ? add(total, term.to(total.dtype())) : term;
    }
  if (!total.defined()) return;
  GradOptions opt2;
  opt2.allow_unused = true;
  check_grads("second-order grad", c.leaves, grad({total}, c.leaves, {}, opt2), nan.second, nan.op);
}

// --- the ops -----------------------------------------------------------------------------

enum Op {
  kBinary, kUnary, kSumMean, kMax, kSumTo, kBroadcastTo, kReshape, kSqueeze, kPermute, kNarrow,
  kConcat, kSplit, kMatmul, kLinear, kSumOuter, kSoftmax, kMaskedFill, kWhere, kEmbedding,
  kCrossEntropy, kAttention, kLayerNorm, kMseDropout, kMaskLogic, kCast, kFactory, kHeads, kFused,
  kOpCount
};

void run(Ctx& c) {
  Input& in = c.in;
  const Op op = Op(in.pick(kOpCount));
  {
    const std::uint8_t b = in.byte();
    c.F = b & 1 ? DType::Float64 : DType::Float32;
    const int v = (b >> 1) % 16;  // mostly Normal
    c.values = v < 8 ? Values::Normal : v < 10 ? Values::Ties : v < 11 ? Values::Large
             : v < 12 ? Values::Huge : v < 14 ? Values::NegInf : Values::NonFinite;
    if (b >> 5 == 7) set_grad_enabled(false);  // restored by the caller
    if (b >> 5 == 6) set_anomaly_enabled(true);  // AnomalyError is an xgrad::Error: fine
  }
  c.rng.seed(std::uint64_t(in.byte()) | std::uint64_t(in.byte()) << 8);

  std::vector<Tensor> outs;
  NanPolicy nan;
  nan.op = "?";
  auto out = [&](const char* name, const Tensor& t) {
    if (tracing())
      std::fprintf(stderr, "fuzz_ops: op %d %s -> %s %s (float %s, values %d, %zu leaves)\n", int(op), name,
                   t.defined() ? dtype_name(t.dtype()) : "undefined", t.defined() ? shape_str(t.shape()).c_str() : "",
                   dtype_name(c.F), int(c.values), c.leaves.size());
    check_result(name, t);
    outs.push_back(t);
    return t;
  };

  switch (op) {
    case kBinary: {
      Tensor a = c.operand(in.shape());
      Tensor b = c.operand(in.derive(a.shape()));
      if (in.bit()) std::swap(a, b);
      static const char* names[] = {"add", "sub", "mul", "div"};
      const std::size_t k = in.pick(4);
      Tensor y = k == 0 ? a + b : k == 1 ? a - b : k == 2 ? a * b : a / b;
      out(names[k], y);
      break;
    }
    case kUnary: {
      Tensor x = c.operand(in.shape());
      const double s = in.scalar();
      static const double powers[] = {0.0, 1.0, 2.0, 0.5, -1.0, 3.0, -0.5, 2.5};
      const std::size_t k = in.pick(16);
      Tensor y;
      switch (k) {
        case 0: y = neg(x); break;
        case 1: y = add_scalar(x, s); break;
        case 2: y = mul_scalar(x, s); break;
        case 3: y = pow(x, powers[in.pick(8)]); break;
        case 4: y = exp(x); break;
        case 5: y = log(x); break;
        case 6: y = sqrt(x); break;
        case 7: y = rsqrt(x); break;
        case 8: y = tanh(x); break;
        case 9: y = sigmoid(x); break;
        case 10: y = relu(x); break;
        case 11: y = erf(x); break;
        case 12: y = gelu(x); break;
        case 13: y = s - x; break;
        case 14: y = x / s; break;
        default: y = s / x; break;
      }
      out("unary", y);
      if (y.shape() != x.shape()) fail("unary op " + std::to_string(k) + " changed the shape");
      break;
    }
    case kSumMean: {
      Tensor x = c.operand(in.shape());
      const auto axes = in.axes(x.dim());
      const bool keep = in.bit();
      switch (in.pick(4)) {
        case 0: out("sum", sum(x)); break;
        case 1: out("sum(axes)", sum(x, axes, keep)); break;
        case 2: out("mean", mean(x)); break;
        default: out("mean(axes)", mean(x, axes, keep)); break;
      }
      break;
    }
    case kMax: {
      Tensor x = c.operand(in.shape());
      const bool keep = in.bit() && !ignored("max_keepdim");
      if (in.bit()) out("max", max(x, in.axis(x.dim()), keep));
      else out("amax", amax(x, in.axes(x.dim()), keep));
      break;
    }
    case kSumTo: {
      Tensor x = c.operand(in.shape());
      out("sum_to", sum_to(x, in.derive(x.shape())));
      break;
    }
    case kBroadcastTo: {
      Tensor x = c.operand(in.shape());
      Shape target = x.shape();
      for (auto& d : target)
        if (d == 1 && in.bit()) d = in.dim();
      for (std::size_t k = in.pick(3); k > 0; --k) target.insert(target.begin(), in.dim());
      const std::size_t variant = in.pick(16);
      if (variant == 0) target = in.derive(target);
      if (variant == 1 && !ignored("huge_sizes")) {  // (2^64-1)^2 == 1 mod 2^64: same element count
        const std::size_t M = ~std::size_t(0);
        target.insert(target.begin(), {M, M});
      }
      Tensor y = out("broadcast_to", broadcast_to(x, target));
      if (y.shape() != target) fail("broadcast_to returned " + shape_str(y.shape()) + " for " + shape_str(target));
      break;
    }
    case kReshape: {
      Tensor x = in.bit() ? c.operand(in.shape()) : c.mask(in.shape());  // masks reshape too
      const std::size_t N = x.numel();
      Shape target;
      switch (in.pick(5)) {
        case 0: case 1: {  // a factorisation of N
          std::size_t rest = N;
          for (std::size_t k = in.pick(5); k > 1; --k) {
            std::size_t d = 1 + in.pick(6);
            if (rest == 0) d = in.pick(3);
            else while (rest % d) --d;
            target.push_back(d);
            if (d) rest /= d;
          }
          target.push_back(rest);
          break;
        }
        case 2: target = in.shape(); break;
        case 3: {  // element counts that overflow to N
          if (ignored("huge_sizes")) {
            target = {N};
            break;
          }
          const std::size_t M = ~std::size_t(0);
          const std::size_t k = in.pick(3);
          if (k == 1 && N == 0) target = {std::size_t(1) << 32, std::size_t(1) << 32};  // 2^64 == 0
          else if (k == 2 && N % 2 == 0) target = {(std::size_t(1) << 63) + N / 2, 2};   // 2^64 + N
          else target = {M, M, N};                                                     // M^2 == 1
          break;
        }
        default: out("flatten", flatten(x)); target = {N}; break;
      }
      Tensor y = out("reshape", reshape(x, target));
      if (y.numel() != N || y.shape() != target)
        fail("reshape of " + shape_str(x.shape()) + " to " + shape_str(target) + " gave " + shape_str(y.shape()));
      break;
    }
    case kSqueeze: {
      Tensor x = c.operand(in.shape());
      const long ax = in.bit() ? in.axis(x.dim() + 1) : in.axis(x.dim());
      if (in.bit()) out("unsqueeze", unsqueeze(x, ax));
      else out("squeeze", squeeze(x, ax));
      break;
    }
    case kPermute: {
      Tensor x = c.operand(in.shape());
      if (in.bit()) {
        const long a0 = in.axis(x.dim()), a1 = in.axis(x.dim());
        out("transpose", transpose(x, a0, a1));
        break;
      }
      std::vector<std::size_t> perm(x.dim());
      for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = i;
      for (std::size_t i = perm.size(); i > 1; --i) std::swap(perm[i - 1], perm[in.pick(i)]);
      switch (in.pick(8)) {
        case 0: if (!perm.empty()) perm[in.pick(perm.size())] = perm[0]; break;  // maybe a duplicate
        case 1: perm.push_back(in.bit() ? perm.size() : kHuge[in.pick(5)]); break;  // out of range
        case 2: if (!perm.empty()) perm.pop_back(); break;
        default: break;
      }
      Tensor y = out("permute", permute(x, perm));
      for (std::size_t k = 0; k < perm.size(); ++k)
        if (y.shape()[k] != x.shape()[perm[k]]) fail("permute: wrong result shape " + shape_str(y.shape()));
      break;
    }
    case kNarrow: {
      Tensor x = c.operand(in.shape());
      const long axis = in.axis(x.dim());
      const std::size_t start = in.count(), length = in.count();
      if (in.bit()) {
        Tensor y = out("narrow", narrow(x, axis, start, length));
        const std::size_t ax = std::size_t(axis < 0 ? axis + long(x.dim()) : axis), dim = x.shape()[ax];
        if (start > dim || length > dim - start)
          fail("narrow accepted [" + std::to_string(start) + ", " + std::to_string(start) + " + " +
               std::to_string(length) + ") on axis " + std::to_string(axis) + " of " + shape_str(x.shape()));
        if (y.shape()[ax] != length) fail("narrow: wrong result shape " + shape_str(y.shape()));
      } else {
        // The target size stays small (a huge one is a legitimate allocation request).
        const std::size_t ax = x.dim() ? std::size_t((axis % long(x.dim()) + long(x.dim())) % long(x.dim())) : 0;
        const long grow = long(in.pick(4)) - long(in.pick(2));
        const std::size_t size = std::size_t(std::max(0L, long(x.dim() ? x.shape()[ax] : 0) + grow));
        Tensor y = out("unnarrow", unnarrow(x, axis, start, size));
        const std::size_t n = x.shape()[ax];
        if (start > size || n > size - start)
          fail("unnarrow accepted placing " + std::to_string(n) + " at " + std::to_string(start) +
               " in size " + std::to_string(size));
        if (y.shape()[ax] != size) fail("unnarrow: wrong result shape " + shape_str(y.shape()));
      }
      break;
    }
    case kConcat: {
      const Shape base = in.shape();
      const long axis = in.axis(base.size());
      std::vector<Tensor> xs(in.pick(4));
      for (auto& x : xs) {
        Shape s = base;
        if (!s.empty() && axis >= -long(s.size()) && axis < long(s.size()))
          s[std::size_t(axis < 0 ? axis + long(s.size()) : axis)] = in.dim();
        if (in.pick(8) == 0) s = in.derive(s);
        x = c.operand(s);
      }
      Tensor y = out("concat", concat(xs, axis));
      break;
    }
    case kSplit: {
      Tensor x = c.operand(in.shape());
      const long axis = in.axis(x.dim());
      std::vector<Tensor> pieces;
      std::vector<std::size_t> sizes;
      if (in.bit()) {
        const std::size_t n = in.pick(7);
        pieces = chunk(x, n, axis);
        if (pieces.size() != n) fail("chunk returned " + std::to_string(pieces.size()) + " pieces for n = " + std::to_string(n));
      } else {
        sizes.resize(in.pick(5));
        for (auto& s : sizes) s = in.count();
        if (in.bit() && !sizes.empty() && x.dim()) {  // make them add up (mod 2^64)
          const std::size_t ax = std::size_t((axis % long(x.dim()) + long(x.dim())) % long(x.dim()));
          std::size_t others = 0;
          for (std::size_t k = 1; k < sizes.size(); ++k) others += sizes[k];
          sizes[0] = x.shape()[ax] - others;
        }
        pieces = split(x, sizes, axis);
        if (pieces.size() != sizes.size()) fail("split returned the wrong number of pieces");
      }
      const std::size_t ax = std::size_t(axis < 0 ? axis + long(x.dim()) : axis);
      std::size_t total = 0;
      for (std::size_t k = 0; k < pieces.size(); ++k) {
        check_result("split/chunk piece", pieces[k]);
        if (pieces[k].shape()[ax] > x.shape()[ax] || (!sizes.empty() && pieces[k].shape()[ax] != sizes[k]))
          fail("split/chunk: piece " + std::to_string(k) + " " + shape_str(pieces[k].shape()) +
               " of x " + shape_str(x.shape()));
        total += pieces[k].shape()[ax];
      }
      if (!pieces.empty() && total != x.shape()[ax])
        fail("split/chunk: pieces of x " + shape_str(x.shape()) + " add up to " + std::to_string(total));
      outs = pieces;
      break;
    }
    case kMatmul: {
      const std::size_t n = in.dim(), k = in.dim(), m = in.dim();
      const bool ta = in.bit(), tb = in.bit();
      const std::size_t form = in.pick(6);  // 0 2-D, 1 a 1-D, 2 b 1-D, 3 both 1-D, 4-5 batched
      Shape as = ta ? Shape{k, n} : Shape{n, k}, bs = tb ? Shape{m, k} : Shape{k, m};
      if (form == 1 || form == 3) as = {k};
      if (form == 2 || form == 3) bs = {k};
      if (form >= 4) {
        Shape batch = in.shape();
        batch.resize(std::min<std::size_t>(batch.size(), 2));
        Shape ab = batch, bb = in.derive(batch);
        if (in.bit()) std::swap(ab, bb);
        as.insert(as.begin(), ab.begin(), ab.end());
        if (bs.size() == 2) bs.insert(bs.begin(), bb.begin(), bb.end());
      }
      if (in.pick(8) == 0) as = in.derive(as);
      if (in.pick(8) == 0) bs = in.derive(bs);
      Tensor a = c.operand(as), b = c.operand(bs);
      out("matmul", matmul(a, b, ta, tb));
      break;
    }
    case kLinear: {
      const std::size_t fin = in.dim(), fout = in.dim();
      Shape xs = in.shape();
      if (xs.empty() || in.pick(8)) {
        if (xs.empty()) xs.push_back(fin);
        else xs.back() = fin;
      }
      Shape ws{fout, fin};
      if (in.pick(8) == 0) ws = in.derive(ws);
      Tensor x = c.operand(xs), w = c.operand(ws);
      Tensor bias;
      switch (in.pick(4)) {
        case 0: break;
        case 3: bias = c.operand(in.derive(Shape{fout})); break;
        default: bias = c.operand({fout}); break;
      }
      Tensor y = out("linear", linear(x, w, bias));
      if (y.shape().back() != w.shape()[0]) fail("linear: wrong result shape " + shape_str(y.shape()));
      break;
    }
    case kSumOuter: {
      Shape lead = in.shape();
      lead.resize(std::min<std::size_t>(lead.size(), 3));
      Shape as = lead, bs = lead;
      as.push_back(in.dim());
      bs.push_back(in.dim());
      if (in.pick(4) == 0) bs = in.derive(bs);
      Tensor a = c.operand(as), b = c.operand(bs);
      Tensor y = out("sum_outer", sum_outer(a, b));
      if (y.shape() != Shape{a.shape().back(), b.shape().back()})
        fail("sum_outer: wrong result shape " + shape_str(y.shape()));
      break;
    }
    case kSoftmax: {
      Shape xs = in.shape();
      if (ignored("softmax_empty_axis"))
        for (auto& d : xs) d = std::max<std::size_t>(d, 1);
      Tensor x = c.operand(xs, /*allow_ninf=*/true);
      const long axis = in.axis(x.dim());
      const std::size_t which = in.pick(3);
      Tensor mask = which == 2 ? c.mask(x.shape()) : Tensor();
      const char* name = which == 0 ? "softmax" : which == 1 ? "log_softmax" : "masked_softmax";
      nan.op = name;
      Tensor y = which == 0 ? softmax(x, axis) : which == 1 ? log_softmax(x, axis) : masked_softmax(x, mask, axis);
      out(name, y);
      if (y.shape() != x.shape() || y.dtype() != x.dtype()) fail(std::string(name) + " changed shape or dtype");
      const bool finite = c.finite_values() && (!mask.defined() || mask.dtype() == DType::Bool);
      nan.outputs = nan.grads = finite;
      nan.second = finite && c.values != Values::NegInf && c.values != Values::Huge;
      if (finite) {
        const std::size_t ax = std::size_t(axis < 0 ? axis + long(x.dim()) : axis);
        check_softmax_rows(name, x, mask.defined() ? expand_mask("fuzz", mask, x.shape()) : Tensor(), y,
                           ax, which == 1);
      }
      break;
    }
    case kMaskedFill: {
      Tensor x = c.operand(in.shape());
      Tensor m = c.mask(x.shape());
      out("masked_fill", masked_fill(x, m, in.scalar()));
      break;
    }
    case kWhere: {
      Tensor a = c.operand(in.shape());
      Tensor b = c.operand(in.derive(a.shape()));
      Tensor cond = c.mask(in.bit() ? a.shape() : b.shape());
      out("where", where(cond, a, b));
      break;
    }
    case kEmbedding: {
      const std::size_t rows = in.dim(), D = in.dim();
      Shape is = in.shape();
      is.resize(std::min<std::size_t>(is.size(), 3));
      const std::uint8_t b = in.byte();
      Tensor idx = b >= 240 ? (b & 1 ? c.bools(is) : c.floats(is, c.F, false)) : c.indices(is, rows);
      switch (in.pick(3)) {
        case 0: {
          Shape ws{rows, D};
          if (in.pick(8) == 0) ws = in.derive(ws);
          out("embedding", embedding(c.operand(ws), idx));
          break;
        }
        case 1: {
          Shape gs = is;
          gs.push_back(D);
          if (in.pick(8) == 0) gs = in.derive(gs);
          Tensor g = c.operand(gs);
          Tensor y = out("embedding_backward", embedding_backward(g, idx, rows));
          if (y.shape() != Shape{rows, g.shape().back()})
            fail("embedding_backward: wrong result shape " + shape_str(y.shape()));
          break;
        }
        default: {
          static const DType dts[] = {DType::Float32, DType::Float64, DType::Bool, DType::Int64};
          out("one_hot", one_hot(idx, rows, dts[in.pick(4)]));
          break;
        }
      }
      break;
    }
    case kCrossEntropy: {
      Shape ts = in.shape();
      ts.resize(std::min<std::size_t>(ts.size(), 3));
      const std::size_t C = in.dim();
      Shape ls = ts;
      ls.push_back(C);
      if (in.pick(8) == 0) ls = in.derive(ls);
      Tensor logits = c.operand(ls, /*allow_ninf=*/true);
      static const std::int64_t ignores[] = {-100, 0, 1, -1};
      const std::int64_t ignore = ignores[in.pick(4)];
      Tensor targets = c.indices(ts, C);
      if (in.bit()) {  // sprinkle ignore_index
        std::vector<std::int64_t> t(targets.data<std::int64_t>(), targets.data<std::int64_t>() + targets.numel());
        for (auto& x : t)
          if (in.bit()) x = ignore;
        targets = index_tensor(t, ts);
      }
      static const double smoothing[] = {0.0, 0.0, 0.1, 0.5, 1.0, -0.1, 1.5, kNaN};
      const double ls_value = smoothing[in.pick(8)];
      Tensor loss = cross_entropy(logits, targets, ignore, ls_value);
      out("cross_entropy", loss);
      if (std::isnan(ls_value))
        fail_unless_ignored("nan_argument", "cross_entropy accepted label_smoothing = nan (loss " +
                                                std::to_string(loss.item()) + ")");
      // Finite logits: never NaN. Logits with -inf entries (a masked vocabulary) and no label
      // smoothing: torch gives a finite loss when every kept target's logit is finite.
      bool expect_finite = c.finite_values() && c.values != Values::NegInf;
      if (c.values == Values::NegInf && ls_value == 0) {
        const auto lv = logits.to_vector();
        const std::int64_t* tv = targets.data<std::int64_t>();
        const std::size_t classes = logits.shape().back();  // not C: a derived shape may have another
        expect_finite = true;
        for (std::size_t i = 0; i < targets.numel(); ++i)
          if (tv[i] != ignore && !std::isfinite(lv[i * classes + std::size_t(tv[i])])) expect_finite = false;
      }
      if (expect_finite && has_nan(loss))
        fail_unless_ignored("cross_entropy_nan", std::string("cross_entropy: NaN loss for ") + dtype_name(logits.dtype()) + " logits " +
             shape_str(logits.shape()) + " without NaN" +
             (c.values == Values::NegInf ? " (some non-target logits are -inf)" : "") + ", label_smoothing " +
             std::to_string(ls_value) + ", ignore_index " + std::to_string(ignore));
      break;
    }
    case kAttention: {
      const std::size_t E = in.pick(7), H = in.pick(4);
      const std::size_t kdim = in.bit() ? in.dim() : 0, vdim = in.bit() ? in.dim() : 0;
      const bool bias = in.bit();
      static const double drops[] = {0.0, 0.0, 0.0, 0.0, 0.25, 0.9, 1.0, -0.5, kNaN};
      const double p = drops[in.pick(9)];
      Rng init(c.rng());
      auto mha = std::make_unique<MultiHeadAttention>(MultiHeadAttentionOptions(E, H).bias(bias).dropout(p).kdim(kdim).vdim(vdim), init);
      if (std::isnan(p)) fail_unless_ignored("nan_argument", "MultiHeadAttention accepted dropout = nan");
      if (in.bit()) mha->eval();
      if (c.F == DType::Float64) mha->to(DType::Float64);
      for (auto& [name, t] : mha->named_parameters()) c.leaves.push_back(t);
      MultiHeadAttention& m = *mha;
      c.keep_alive = std::move(mha);
      const std::size_t B = in.pick(3), T = in.pick(4);
      const bool self = in.bit();
      const std::size_t S = self ? T : in.pick(4);
      Shape qs{B, T, E}, ks{B, S, m.kdim}, vs{B, S, m.vdim};
      if (in.pick(8) == 0) qs = in.derive(qs);
      if (in.pick(8) == 0) ks = in.derive(ks);
      AttentionOptions opt;
      switch (in.pick(8)) {
        case 0: case 1: break;
        case 2: opt.attn_mask = c.mask({T, S}); break;
        case 3: opt.attn_mask = c.mask({B * H, T, S}); break;
        case 4: {
          Shape s{B, H, T, S};
          for (auto& d : s) if (in.bit()) d = 1;
          s.erase(s.begin(), s.begin() + long(in.pick(3)));
          opt.attn_mask = c.mask(s);
          break;
        }
        case 5: case 6: {  // additive float mask (-inf = masked)
          const Values saved = c.values;
          if (c.values != Values::NonFinite) c.values = Values::NegInf;
          const Shape s = in.bit() ? Shape{T, S} : Shape{1, H, T, S};
          const DType dt = in.pick(8) ? c.F : DType::Float64;
          opt.attn_mask = c.floats(s, dt, true);
          c.values = saved;
          break;
        }
        default: opt.attn_mask = c.indices({T, S}, 2); break;
      }
      switch (in.pick(4)) {
        case 0: case 1: break;
        case 2: opt.key_padding_mask = c.bools({B, S}, int(in.pick(5)) * 25); break;
        default: opt.key_padding_mask = c.mask({B, S}); break;
      }
      opt.is_causal = in.bit();
      opt.need_weights = in.bit();
      opt.average_attn_weights = in.bit();
      AttentionOutput r;
      if (self && qs == Shape{B, T, E}) {
        Tensor x = c.operand(qs);
        r = m.forward(x, opt);
      } else {
        Tensor q = c.operand(qs), k = c.operand(ks), v = c.operand(vs);
        r = m.forward(q, k, v, opt);
      }
      out("MultiHeadAttention", r.output);
      if (r.weights.defined()) out("MultiHeadAttention weights", r.weights);
      // The query may have been reshaped by derive(): (B', T', E) is still valid.
      if (r.output.shape() != Shape{qs[0], qs[1], E})
        fail("MultiHeadAttention: output shape " + shape_str(r.output.shape()) + " for query " + shape_str(qs));
      nan.op = "MultiHeadAttention";
      nan.outputs = nan.grads = c.moderate_values();
      nan.second = false;
      break;
    }
    case kLayerNorm: {
      Tensor x = c.operand(in.shape());
      const std::size_t D = x.dim() ? x.shape().back() : in.dim();
      Tensor w = in.bit() ? c.operand(in.pick(8) ? Shape{D} : in.derive(Shape{D})) : Tensor();
      Tensor b = in.bit() ? c.operand(in.pick(8) ? Shape{D} : in.derive(Shape{D})) : Tensor();
      static const double eps[] = {1e-5, 0.0, 1.0};
      out("layer_norm", layer_norm(x, w, b, eps[in.pick(3)]));
      break;
    }
    case kMseDropout: {
      Tensor a = c.operand(in.shape());
      if (in.bit()) {
        out("mse_loss", mse_loss(a, c.operand(in.pick(4) ? a.shape() : in.derive(a.shape()))));
      } else {
        static const double ps[] = {0.0, 0.5, 0.999, 1.0, -0.1, kNaN};
        const double p = ps[in.pick(6)];
        const bool training = in.byte() != 1;
        Tensor y = out("dropout", dropout(a, p, training, c.rng));
        if (std::isnan(p)) fail_unless_ignored("nan_argument", "dropout accepted p = nan");
      }
      break;
    }
    case kMaskLogic: {
      switch (in.pick(5)) {
        case 0: {
          const std::size_t T = in.dim(), S = in.dim();
          Tensor m = out("causal_mask", causal_mask(T, S, in.bit() ? CausalAlign::BottomRight : CausalAlign::TopLeft));
          if (m.shape() != Shape{T, S} || m.dtype() != DType::Bool) fail("causal_mask: wrong shape or dtype");
          break;
        }
        case 1: { Tensor a = c.mask(in.shape()); out("logical_or", logical_or(a, c.mask(a.shape()))); break; }
        case 2: { Tensor a = c.mask(in.shape()); out("logical_and", logical_and(a, c.mask(a.shape()))); break; }
        case 3: out("logical_not", logical_not(c.mask(in.shape()))); break;
        default: {
          const Shape s = in.shape();
          Tensor y = out("expand_mask", expand_mask("fuzz", c.mask(s), s));
          if (y.shape() != s) fail("expand_mask: wrong result shape " + shape_str(y.shape()));
          break;
        }
      }
      break;
    }
    case kCast: {
      Tensor x = c.operand(in.shape());
      static const DType dts[] = {DType::Float32, DType::Float64, DType::Bool, DType::Int64};
      Tensor y = out("to", x.to(dts[in.pick(4)]));
      if (y.shape() != x.shape()) fail("to: changed the shape");
      if (in.bit()) out("clone", x.clone());
      if (in.bit()) out("detach", x.detach());
      break;
    }
    case kFactory: {
      Shape s = in.shape();
      if (in.pick(8) == 0 && !ignored("huge_sizes")) {  // element counts that overflow
        const std::size_t M = ~std::size_t(0);
        s.insert(s.begin(), {M, M});
      }
      static const DType dts[] = {DType::Float32, DType::Float64, DType::Bool, DType::Int64};
      const DType dt = dts[in.pick(4)];
      const std::size_t n = numel(s);  // what the caller would compute (wraps like the library)
      switch (in.pick(7)) {
        case 0: out("zeros", zeros(s, dt)); break;
        case 1: {
          double v = in.scalar();
          if (dt == DType::Int64 && std::fabs(v) > 1e18 && ignored("int64_range")) v = 7;
          out("full", full(s, v, dt));
          break;
        }
        case 2: out("tensor", tensor(std::vector<double>(n + in.pick(2), 1.0), s, dt)); break;
        case 3: out("bool_tensor", bool_tensor(std::vector<bool>(n, true), s)); break;
        case 4: out("index_tensor", index_tensor(std::vector<std::int64_t>(n, 3), s)); break;
        case 5: out("randn", randn(s, c.rng, dt)); break;
        default: out("arange", arange(in.dim(), dt)); break;
      }
      break;
    }
    case kHeads: {
      if (in.bit()) {
        const std::size_t H = in.count();
        Shape xs{in.dim(), in.dim(), 0};
        xs[2] = H && H < 8 ? H * in.dim() : in.dim();
        if (in.pick(8) == 0) xs = in.derive(xs);
        Tensor x = c.operand(xs);
        Tensor y = out("split_heads", split_heads(x, H));
        if (y.shape() != Shape{xs[0], H, xs[1], xs[2] / H}) fail("split_heads: wrong result shape " + shape_str(y.shape()));
      } else {
        Shape xs{in.dim(), in.dim(), in.dim(), in.dim()};
        if (in.pick(8) == 0) xs = in.derive(xs);
        Tensor x = c.operand(xs);
        Tensor y = out("merge_heads", merge_heads(x));
        if (y.shape() != Shape{xs[0], xs[2], xs[1] * xs[3]}) fail("merge_heads: wrong result shape " + shape_str(y.shape()));
      }
      break;
    }
    case kFused: {
      Tensor x = c.operand(in.shape());
      Tensor g = c.operand(in.pick(8) ? x.shape() : in.derive(x.shape()));
      if (in.bit()) {
        out("gelu_backward", gelu_backward(x, g));
      } else {
        const long axis = in.axis(x.dim());
        out("softmax_backward", softmax_backward(x, g, axis));
      }
      nan.op = "gelu_backward/softmax_backward";
      nan.outputs = c.moderate_values() && c.values != Values::NegInf;
      break;
    }
    case kOpCount: break;
  }

  if (nan.outputs)
    for (const auto& y : outs)
      if (has_nan(y)) fail(std::string(nan.op) + ": NaN in the output " + shape_str(y.shape()) + " from non-NaN inputs");
  run_backward(c, outs, nan);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  set_num_threads(1);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Ctx c(data, size);
  try {
    run(c);
  } catch (const Error& e) {
    // documented failure: fine
    if (tracing()) std::fprintf(stderr, "fuzz_ops: xgrad::Error: %s\n", e.what());
  } catch (const std::exception& e) {
    fail(std::string("a non-xgrad exception escaped: ") + typeid(e).name() + ": " + e.what());
  } catch (...) {
    fail("a non-standard exception escaped");
  }
  set_grad_enabled(true);
  set_anomaly_enabled(false);
  return 0;
}
