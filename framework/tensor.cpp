// Tensor handle, factories and argument checks.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iomanip>
#include <ostream>
#include <sstream>

#include "xgrad/framework/array.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/runtime.hpp"

namespace xgrad {

void detail::append_part(std::string& s, double v) {
  if (std::isnan(v)) {
    s += "nan";
    return;
  }
  std::ostringstream os;
  os.precision(10);
  os << v;
  s += os.str();
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
    case DType::Bool: return "bool";
    case DType::Int64: return "int64";
  }
  return "?";
}

std::size_t itemsize(DType d) {
  switch (d) {
    case DType::Float32: return sizeof(float);
    case DType::Float64: return sizeof(double);
    case DType::Bool: return sizeof(bool);
    case DType::Int64: return sizeof(std::int64_t);
  }
  return 0;
}

// The element count, ValueError for op when it overflows or exceeds 2^40. A zero dimension
// makes the count 0, but the other dimensions still set the strides (the stride of a dim is
// the product of the dims after it), so their product is held to the same 2^40: otherwise a
// shape like (0, 2^63, 1) gives strides that do not fit a ptrdiff_t.
[[noreturn, gnu::cold, gnu::noinline]] static void numel_too_large(const char* op, const Shape& shape) {
  if (std::find(shape.begin(), shape.end(), std::size_t(0)) != shape.end())
    throw_error<ValueError>(op, "shape ", shape, ": the product of its non-zero dimensions exceeds 2^40",
                            " (an empty tensor's strides are held to the element limit too)");
  throw_error<ValueError>(op, "shape ", shape, " has more than 2^40 elements");
}
static std::size_t checked_numel(const char* op, const Shape& shape) {
  constexpr std::size_t kMax = std::size_t(1) << 40;
  std::size_t n = 1;  // product of the non-zero dimensions
  bool empty = false;
  for (auto d : shape) {
    if (d == 0) {
      empty = true;
    } else if (__builtin_mul_overflow(n, d, &n) || n > kMax) {
      numel_too_large(op, shape);
    }
  }
  return empty ? 0 : n;
}

std::size_t numel(const Shape& shape) { return checked_numel("numel", shape); }

std::size_t check_tensor_size(const char* op, const Shape& shape, DType dtype) {
  if (const std::size_t n = detail::fast_tensor_size(shape, itemsize(dtype))) return n;
  return detail::check_tensor_size_slow(op, shape, dtype);
}

std::size_t detail::check_tensor_size_slow(const char* op, const Shape& shape, DType dtype) {
  const std::size_t n = checked_numel(op, shape);
  if (n == 0) return 0;
  const std::size_t bytes = n * itemsize(dtype), limit = max_tensor_bytes();
  if (bytes > limit)
    throw_error<MemoryError>(op, "a ", dtype_name(dtype), " tensor of shape ", shape, " needs ", bytes,
                             " bytes, more than max_tensor_bytes() = ", limit,
                             " (raise it with set_max_tensor_bytes or XGRAD_MAX_TENSOR_BYTES)");
  return n;
}

void detail::allocation_failed(std::size_t n, std::size_t size, bool over_limit) {
  if (over_limit)
    throw_error<MemoryError>("allocate", "a buffer of ", n, " elements of ", size, " bytes is more than max_tensor_bytes() = ",
                             max_tensor_bytes(), " (raise it with set_max_tensor_bytes or XGRAD_MAX_TENSOR_BYTES)");
  throw_error<MemoryError>("allocate", "out of memory allocating ", n, " elements of ", size, " bytes");
}

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kCacheBlocks = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kCacheBlocks = false;
#else
constexpr bool kCacheBlocks = true;
#endif
#else
constexpr bool kCacheBlocks = true;
#endif

constexpr std::size_t kAlign = AlignedAllocator<char>::kAlignment;
constexpr std::size_t kSmallestClass = AlignedAllocator<char>::kAlignFrom;  // 512 B
constexpr std::size_t kClasses = 8;                                          // 512 B .. 64 KiB
constexpr std::size_t kBlocksPerClass = 16;
constexpr std::size_t kSmallStep = 32, kSmallMax = detail::kSmallBlockMax;  // small classes 32 B .. 512 B
constexpr std::size_t kSmallClasses = kSmallMax / kSmallStep;
constexpr std::size_t kSmallBlocksPerClass = 64;

// Size class of a block of `bytes` (>= 512): the k with 512 * 2^(k-1) < bytes <= 512 * 2^k,
// kClasses when larger than the largest class.
std::size_t size_class(std::size_t bytes) {
  if (bytes > (kSmallestClass << (kClasses - 1))) return kClasses;
  if (bytes <= kSmallestClass) return 0;
  // ceil(log2(bytes)) - log2(512): the bit length of bytes - 1, less 9.
  return std::size_t(64 - __builtin_clzll((unsigned long long)(bytes - 1))) - 9;
}
static_assert(kSmallestClass == 512, "size_class assumes 512-byte smallest class");
// Small size class of `bytes` <= 512: the k with 32 k < bytes <= 32 (k + 1) (0 bytes: class 0).
std::size_t small_class(std::size_t bytes) { return bytes ? (bytes - 1) / kSmallStep : 0; }

void* raw_aligned(std::size_t bytes) {
  void* raw = std::malloc(bytes + kAlign);
  if (!raw) detail::allocation_failed(bytes, 1, false);
  auto at = (reinterpret_cast<std::uintptr_t>(raw) + kAlign) & ~std::uintptr_t(kAlign - 1);
  reinterpret_cast<void**>(at)[-1] = raw;
  return reinterpret_cast<void*>(at);
}
void raw_free(void* p) { std::free(reinterpret_cast<void**>(p)[-1]); }
void* raw_small(std::size_t bytes) {
  if (void* p = std::malloc(bytes)) return p;
  detail::allocation_failed(bytes, 1, false);
}

// A stack of up to Bound freed blocks of one size class.
template <std::size_t Bound> struct FreeBlocks {
  void* blocks[Bound];
  std::size_t count = 0;
  void* pop() { return count ? blocks[--count] : nullptr; }
  bool push(void* p) {
    if (count == Bound) return false;
    blocks[count++] = p;
    return true;
  }
  template <class Free> void release(Free free) {
    while (count) free(blocks[--count]);
  }
};

// Freed blocks of each size class, per thread (a block freed on another thread than the one
// that made it joins the freeing thread's cache). Emptied when the thread ends; a block freed after that (static
// destructors) goes back to malloc.
struct BlockCache {
  FreeBlocks<kBlocksPerClass> aligned[kClasses];
  FreeBlocks<kSmallBlocksPerClass> small[kSmallClasses];
  ~BlockCache();
};
thread_local BlockCache t_blocks;
// The hot paths reach the calling thread's cache through these, set by its first cached
// block: an initial-exec TLS read is one instruction, where t_blocks (~10 KB, dynamic TLS in a
// shared library) costs a __tls_get_addr or TLS-descriptor call per access, a third of a
// pooled allocation. 16 bytes of static TLS fit glibc's surplus for a dlopen'ed library.
[[gnu::tls_model("initial-exec")]] thread_local BlockCache* t_cache = nullptr;
[[gnu::tls_model("initial-exec")]] thread_local bool t_cache_ended = false;

BlockCache::~BlockCache() {
  t_cache = nullptr;
  t_cache_ended = true;
  for (auto& c : aligned) c.release(raw_free);
  for (auto& c : small) c.release([](void* p) { std::free(p); });
}

// The calling thread's cache for a freed block: nullptr once the thread has ended. The first
// use out of line, so that the pooled paths stay small enough to inline into empty_tensor
// and the shared_ptr blocks' destructors made in this file.
[[gnu::noinline, gnu::cold]] BlockCache* first_cache_for_push() {
  if (!kCacheBlocks || t_cache_ended) return nullptr;
  return t_cache = &t_blocks;  // constructed, and its destructor registered, by this first use
}
inline BlockCache* cache_for_push() {
  if (BlockCache* c = t_cache) return c;
  return first_cache_for_push();
}

}  // namespace

// The four entry points below are the pooled paths only (a few instructions each, inlined into
// the callers in this file); what calls malloc or free is out of line.
namespace {
[[gnu::noinline, gnu::cold]] void* aligned_allocate_slow(std::size_t bytes) {
  const std::size_t k = kCacheBlocks ? size_class(bytes) : kClasses;
  return raw_aligned(k == kClasses ? bytes : kSmallestClass << k);
}
[[gnu::noinline]] void* small_allocate_slow(std::size_t bytes) {
  if (!kCacheBlocks || bytes > kSmallMax) return raw_small(bytes ? bytes : 1);
  return raw_small((small_class(bytes) + 1) * kSmallStep);
}
}  // namespace

void* detail::aligned_allocate(std::size_t bytes) {
  if (kCacheBlocks)
    if (const std::size_t k = size_class(bytes); k < kClasses)
      if (BlockCache* c = t_cache)
        if (void* p = c->aligned[k].pop()) return p;
  return aligned_allocate_slow(bytes);
}

void detail::aligned_deallocate(void* p, std::size_t bytes) noexcept {
  const std::size_t k = kCacheBlocks ? size_class(bytes) : kClasses;
  if (k < kClasses)
    if (BlockCache* c = cache_for_push(); c && c->aligned[k].push(p)) return;
  raw_free(p);
}

void* detail::small_allocate(std::size_t bytes) {
  if (kCacheBlocks && bytes <= kSmallMax)
    if (BlockCache* c = t_cache)
      if (void* p = c->small[small_class(bytes)].pop()) return p;
  return small_allocate_slow(bytes);
}

void detail::small_deallocate(void* p, std::size_t bytes) noexcept {
  if (kCacheBlocks && bytes <= kSmallMax)
    if (BlockCache* c = cache_for_push(); c && c->small[small_class(bytes)].push(p)) return;
  std::free(p);
}

bool detail::block_cache_enabled() noexcept { return kCacheBlocks; }

std::size_t detail::cached_blocks(std::size_t bytes) noexcept {
  const BlockCache* c = t_cache;
  if (!c) return 0;
  if (bytes <= kSmallMax) return c->small[small_class(bytes)].count;
  const std::size_t k = size_class(bytes);
  return k < kClasses ? c->aligned[k].count : 0;
}

void detail::wrong_element_type(DType requested, DType actual) {
  throw std::logic_error(std::string("xgrad op code read a ") + dtype_name(actual) + " tensor as " + dtype_name(requested));
}

Tensor::Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

template <class T> Tensor empty_tensor(const Shape& shape, const char* op) {
  const std::size_t n = detail::check_new_tensor_size<T>(op, shape);
  auto impl = new_tensor_impl(shape);
  impl->dtype = dtype_of<T>();
  try {
    impl->value = new_storage(n, sizeof(T));
  } catch (const MemoryError& e) {
    detail::out_of_memory(op, dtype_of<T>(), shape, e);
  }
  return Tensor(std::move(impl));
}
template Tensor empty_tensor<float>(const Shape&, const char*);
template Tensor empty_tensor<double>(const Shape&, const char*);
template Tensor empty_tensor<bool>(const Shape&, const char*);
template Tensor empty_tensor<std::int64_t>(const Shape&, const char*);

static TensorImpl& checked(const std::shared_ptr<TensorImpl>& p) {
  if (!p) throw_error<ValueError>("tensor", "operation on an undefined tensor");
  return *p;
}

const Shape& Tensor::shape() const { return checked(impl_).shape; }
std::size_t Tensor::numel() const { return xgrad::numel(shape()); }
DType Tensor::dtype() const { return checked(impl_).dtype; }
const void* Tensor::raw_data() const { return checked(impl_).value->data; }
void* Tensor::mutable_raw_data() const {
  auto& impl = checked(impl_);
  ++impl.value->version;
  return impl.value->data;
}
std::uint64_t Tensor::version() const { return checked(impl_).value->version; }
void Tensor::bump_version() const { ++checked(impl_).value->version; }

std::size_t Tensor::size(int axis) const { return shape()[normalize_axis("size", axis, shape())]; }

bool Tensor::requires_grad() const { return impl_ && impl_->requires_grad; }
bool Tensor::is_leaf() const { return checked(impl_).grad_fn == nullptr; }
const std::shared_ptr<Node>& Tensor::grad_fn() const { return checked(impl_).grad_fn; }

const Tensor& Tensor::set_requires_grad(bool on) const {
  auto& impl = checked(impl_);
  if (impl.grad_fn)
    throw_error<GraphError>("set_requires_grad", "only leaf tensors can change requires_grad; this one is the output of '",
                            impl.grad_fn->name(), "' (use detach())");
  if (on && !is_float(impl.dtype))
    throw_error<DTypeError>("set_requires_grad", "only float tensors can require grad, got ", dtype_name(impl.dtype),
                            " tensor of shape ", impl.shape, " (masks and indices are not differentiable)");
  impl.requires_grad = on;
  return *this;
}

Tensor Tensor::grad() const { return checked(impl_).grad; }
void Tensor::set_grad(const Tensor& g) const {
  auto& impl = checked(impl_);
  if (g.defined() && g.dtype() != impl.dtype)
    throw_error<DTypeError>("set_grad", "gradient ", g.shape(), ' ', dtype_name(g.dtype()), " does not match tensor ",
                            impl.shape, ' ', dtype_name(impl.dtype));
  if (g.defined() && g.shape() != impl.shape)
    throw_error<ShapeError>("set_grad", "gradient ", g.shape(), ' ', dtype_name(g.dtype()), " does not match tensor ",
                            impl.shape, ' ', dtype_name(impl.dtype));
  impl.grad = g;
}
void Tensor::zero_grad() const { checked(impl_).grad = Tensor(); }

void Tensor::backward(const Tensor& grad_output, bool retain_graph, bool create_graph) const {
  xgrad::backward({*this}, grad_output.defined() ? std::vector<Tensor>{grad_output}
                                                 : std::vector<Tensor>{},
                  retain_graph, create_graph);
}

Tensor Tensor::detach() const {
  auto& impl = checked(impl_);
  auto d = new_tensor_impl(impl.shape);
  d->value = impl.value;
  d->dtype = impl.dtype;
  return Tensor(std::move(d));
}

Tensor Tensor::clone() const {
  auto& impl = checked(impl_);
  auto d = new_tensor_impl(impl.shape);
  d->value = new_storage(impl.value->bytes, 1);
  if (impl.value->bytes) std::memcpy(d->value->data, impl.value->data, impl.value->bytes);
  d->dtype = impl.dtype;
  return Tensor(std::move(d));
}

std::vector<double> Tensor::to_vector() const {
  auto& impl = checked(impl_);
  return dispatch_dtype(impl.dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* p = static_cast<const T*>(impl.value->data);
    std::vector<double> v(xgrad::numel(impl.shape));
    std::transform(p, p + v.size(), v.begin(), [](T x) { return double(x); });
    return v;
  });
}

double Tensor::item() const {
  if (numel() != 1)
    throw_error<ShapeError>("item", "expected a one-element tensor, got shape ", shape());
  return to_vector()[0];
}

template <class T> const T* Tensor::data() const {
  if (dtype() != dtype_of<T>())
    throw_error<DTypeError>("data", "requested ", dtype_name(dtype_of<T>()), " from a ", dtype_name(dtype()), " tensor");
  return static_cast<const T*>(impl_->value->data);
}
template <class T> T* Tensor::mutable_data() const {
  if (dtype() != dtype_of<T>())
    throw_error<DTypeError>("mutable_data", "requested ", dtype_name(dtype_of<T>()), " from a ", dtype_name(dtype()),
                            " tensor");
  ++impl_->value->version;
  return static_cast<T*>(impl_->value->data);
}
template const float* Tensor::data<float>() const;
template const double* Tensor::data<double>() const;
template const bool* Tensor::data<bool>() const;
template const std::int64_t* Tensor::data<std::int64_t>() const;
template float* Tensor::mutable_data<float>() const;
template double* Tensor::mutable_data<double>() const;
template bool* Tensor::mutable_data<bool>() const;
template std::int64_t* Tensor::mutable_data<std::int64_t>() const;

std::ostream& operator<<(std::ostream& os, const Tensor& t) {
  if (!t.defined()) return os << "Tensor(undefined)";
  auto v = t.to_vector();
  os << "Tensor(shape=" << shape_str(t.shape()) << ", dtype=" << dtype_name(t.dtype()) << ", [";
  std::size_t shown = std::min<std::size_t>(v.size(), 16);
  for (std::size_t i = 0; i < shown; ++i) os << (i ? ", " : "") << std::setprecision(6) << v[i];
  if (shown < v.size()) os << ", ...";
  os << "]";
  if (t.requires_grad()) os << ", requires_grad";
  if (!t.is_leaf()) os << ", grad_fn=" << t.grad_fn()->name();
  return os << ")";
}

// --- factories ---------------------------------------------------------------------------

template <class T> static Tensor from_values(const char* op, const std::vector<double>& values, const Shape& shape) {
  if constexpr (std::is_same_v<T, std::int64_t>)
    for (std::size_t i = 0; i < values.size(); ++i)
      if (!(values[i] >= -9223372036854775808.0 && values[i] < 9223372036854775808.0))
        throw_error<ValueError>(op, "value ", values[i], " at position ", i, " is not representable as int64");
  Tensor t = empty_tensor<T>(shape, op);
  std::transform(values.begin(), values.end(), fresh_data<T>(t), [](double x) { return T(x); });
  return t;
}

static Tensor from_doubles(const char* op, const std::vector<double>& values, const Shape& shape, DType dtype) {
  switch (dtype) {
    case DType::Float32: return from_values<float>(op, values, shape);
    case DType::Float64: return from_values<double>(op, values, shape);
    case DType::Bool: return from_values<bool>(op, values, shape);
    case DType::Int64: return from_values<std::int64_t>(op, values, shape);
  }
  throw_error<DTypeError>(op, "unknown dtype ", int(dtype));
}

Tensor tensor(const std::vector<double>& values, const Shape& shape, DType dtype) {
  if (values.size() != check_tensor_size("tensor", shape, dtype))
    throw_error<ShapeError>("tensor", values.size(), " values do not fill shape ", shape);
  return from_doubles("tensor", values, shape, dtype);
}

// A tensor of `shape` whose element i is T(gen()) in row-major order; sized and checked
// (by empty_tensor) before anything is allocated (no std::vector<double> of numel elements on
// the way).
template <class Gen> static Tensor generate(const char* op, const Shape& shape, DType dtype, Gen&& gen) {
  auto fill = [&](auto zero) {
    using T = decltype(zero);
    Tensor t = empty_tensor<T>(shape, op);
    T* p = fresh_data<T>(t);
    for (T* end = p + t.numel(); p != end; ++p) {
      const double v = gen();
      if constexpr (std::is_same_v<T, std::int64_t>)
        if (!(v >= -9223372036854775808.0 && v < 9223372036854775808.0))
          throw_error<ValueError>(op, "value ", v, " is not representable as int64");
      *p = T(v);
    }
    return t;
  };
  switch (dtype) {
    case DType::Float32: return fill(float{});
    case DType::Float64: return fill(double{});
    case DType::Bool: return fill(bool{});
    case DType::Int64: return fill(std::int64_t{});
  }
  throw_error<DTypeError>(op, "unknown dtype ", int(dtype));
}

Tensor scalar(double value, DType dtype) { return from_doubles("scalar", {value}, {}, dtype); }

static Tensor full_as(const char* op, const Shape& shape, double value, DType dtype) {
  return generate(op, shape, dtype, [value] { return value; });
}
Tensor full(const Shape& shape, double value, DType dtype) { return full_as("full", shape, value, dtype); }
Tensor zeros(const Shape& shape, DType dtype) { return full_as("zeros", shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return full_as("ones", shape, 1.0, dtype); }

Tensor randn(const Shape& shape, Rng& rng, DType dtype) {
  return generate("randn", shape, dtype, [&rng] { return rng.normal(); });
}

Tensor uniform(const Shape& shape, double low, double high, Rng& rng, DType dtype) {
  if (!(low <= high) || !std::isfinite(high - low))  // checked before allocating (Rng::uniform would throw later)
    (void)rng_detail::Rng().uniform(low, high);
  return generate("uniform", shape, dtype, [&] { return rng.uniform(low, high); });
}

Tensor bool_tensor(const std::vector<bool>& values, const Shape& shape) {
  if (values.size() != check_tensor_size("bool_tensor", shape, DType::Bool))
    throw_error<ShapeError>("bool_tensor", values.size(), " values do not fill shape ", shape);
  Tensor t = empty_tensor<bool>(shape, "bool_tensor");
  std::copy(values.begin(), values.end(), fresh_data<bool>(t));
  return t;
}

Tensor index_tensor(const std::vector<std::int64_t>& values, const Shape& shape) {
  if (values.size() != check_tensor_size("index_tensor", shape, DType::Int64))
    throw_error<ShapeError>("index_tensor", values.size(), " values do not fill shape ", shape);
  Tensor t = empty_tensor<std::int64_t>(shape, "index_tensor");
  std::copy(values.begin(), values.end(), fresh_data<std::int64_t>(t));
  return t;
}

Tensor arange(std::size_t n, DType dtype) {
  double i = 0;
  return generate("arange", {n}, dtype, [&i] { return i++; });
}

Tensor arange(double start, double end, double step, DType dtype) {
  const char* op = "arange";
  if (!std::isfinite(start) || !std::isfinite(end) || !std::isfinite(step))
    throw_error<ValueError>(op, "start ", start, ", end ", end, " and step ", step, " must be finite");
  if (step == 0) throw_error<ValueError>(op, "step must not be 0");
  if ((end > start && step < 0) || (end < start && step > 0))
    throw_error<ValueError>(op, "step ", step, " points away from end: start ", start, ", end ", end);
  if (dtype == DType::Bool) throw_error<DTypeError>(op, "dtype must be float32, float64 or int64, got bool");
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (dtype == DType::Int64)
    for (double v : {start, end, step})
      if (v != std::floor(v) || std::abs(v) > kExact)
        throw_error<ValueError>(op, "an int64 arange needs whole numbers of magnitude <= 2^53, got start ", start,
                                ", end ", end, ", step ", step);
  if (dtype == DType::Int64) {  // exactly: |start|, |end| <= 2^53, so nothing below overflows
    const auto s0 = std::int64_t(start), st = std::int64_t(step), d = std::int64_t(end) - s0;
    const Shape shape{std::size_t((d + st - (st > 0 ? 1 : -1)) / st)};  // ceil(d / st), d / st >= 0
    Tensor t = empty_tensor<std::int64_t>(shape, op);  // checks the size first
    std::int64_t* pt = fresh_data<std::int64_t>(t);
    for (std::size_t i = 0; i < shape[0]; ++i) pt[i] = s0 + std::int64_t(i) * st;  // |i st| < |d|
    return t;
  }
  const double count = std::ceil((end - start) / step);  // >= 0 by the sign check
  if (!(count < 1e18))
    throw_error<ValueError>(op, "start ", start, ", end ", end, ", step ", step, " give ", count,
                            " elements, more than 2^40");
  const Shape shape{std::size_t(count)};
  double i = 0;
  return generate(op, shape, dtype, [&] { return start + (i++) * step; });
}

Tensor randint(std::int64_t low, std::int64_t high, const Shape& shape, Rng& rng) {
  if (low >= high)
    throw_error<ValueError>("randint", "need low < high, got low = ", low, ", high = ", high);
  Tensor t = empty_tensor<std::int64_t>(shape, "randint");  // checks the size first
  std::int64_t* p = fresh_data<std::int64_t>(t);
  for (std::size_t i = 0, n = t.numel(); i < n; ++i) p[i] = rng.uniform_int(low, high - 1);
  return t;
}

// --- checks ------------------------------------------------------------------------------

void check_defined(const char* op, const char* arg, const Tensor& t) {
  if (!t.defined()) throw_error<ValueError>(op, "argument '", arg, "' is undefined");
}

void check_float(const char* op, const char* arg, const Tensor& t) {
  check_defined(op, arg, t);
  if (!is_float(t.dtype()))
    throw_error<DTypeError>(op, "argument '", arg, "' must be float32 or float64, got ", dtype_name(t.dtype()),
                            " of shape ", t.shape());
}

void check_same_float(const char* op, const char* arg_a, const Tensor& a, const char* arg_b,
                      const Tensor& b) {
  check_float(op, arg_a, a);
  check_float(op, arg_b, b);
  check_same_dtype(op, arg_a, a, arg_b, b);
}

void check_same_dtype(const char* op, const char* arg_a, const Tensor& a, const char* arg_b,
                      const Tensor& b) {
  if (a.dtype() != b.dtype())
    throw_error<DTypeError>(op, "mixed dtypes: '", arg_a, "' is ", dtype_name(a.dtype()), ' ', a.shape(), ", '", arg_b,
                            "' is ", dtype_name(b.dtype()), ' ', b.shape(), " (convert with .to())");
}

void check_rank(const char* op, const char* arg, const Tensor& t, std::size_t rank, const char* layout) {
  if (t.dim() == rank) return;
  if (layout) throw_error<ShapeError>(op, "argument '", arg, "' ", t.shape(), " must be ", layout);
  throw_error<ShapeError>(op, "argument '", arg, "' ", t.shape(), " must have rank ", rank);
}

void check_shape(const char* op, const char* arg, const Tensor& t, const Shape& expected, const char* layout) {
  if (t.shape() == expected) return;
  if (layout) throw_error<ShapeError>(op, "argument '", arg, "' ", t.shape(), " must be ", layout, " = ", expected);
  throw_error<ShapeError>(op, "argument '", arg, "' ", t.shape(), " must be ", expected);
}

void check_same_shape(const char* op, const char* arg_a, const Tensor& a, const char* arg_b, const Tensor& b) {
  if (a.shape() != b.shape())
    throw_error<ShapeError>(op, "argument '", arg_a, "' ", a.shape(), " and '", arg_b, "' ", b.shape(),
                            " must have one shape");
}

std::size_t normalize_axis(const char* op, long axis, const Shape& shape) {
  long r = static_cast<long>(shape.size());
  if (axis < -r || axis >= r)
    throw_error<IndexError>(op, "axis ", axis, " is out of range for argument 'x' of shape ", shape, " (rank ", r, ")");
  return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

void check_scalar_axis(const char* op, long axis, const char* arg) {
  if (axis != 0 && axis != -1)
    throw_error<IndexError>(op, "axis ", axis, " is out of range for argument '", arg,
                            "' of shape () (rank 0: axis 0 or -1)");
}

std::size_t normalize_axis(const char* op, long axis, std::size_t rank) {
  long r = static_cast<long>(rank);
  if (axis < -r || axis >= r)
    throw_error<IndexError>(op, "axis ", axis, " is out of range for a tensor of rank ", rank);
  return static_cast<std::size_t>(axis < 0 ? axis + r : axis);
}

}  // namespace xgrad

namespace xgrad {
std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }
}  // namespace xgrad
