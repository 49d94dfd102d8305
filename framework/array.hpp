// xgrad/framework/array.hpp — the storage behind a Tensor, for op authors: raw pointers to a
// tensor's values (data_of, fresh_data), xtensor views of them (value, fresh_value) and
// make_tensor for an xtensor expression's result.
//
// This is the one header that brings in xtensor. Include it in op implementation files
// (.cpp), not in headers users include everywhere.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <new>
#include <stdexcept>
#include <type_traits>
#include <vector>

// Tensor storage is aligned to 64 bytes (a cache line, one AVX-512 vector) from 512 bytes up,
// so BLAS kernels and vector loops run at the same speed whatever address malloc returns
// (measured: a 64x64 sgemm is up to 14% slower on 16-byte-aligned inputs). xtensor reads
// XTENSOR_DEFAULT_ALLOCATOR once, so this header must come before every xtensor header.
#ifdef XTENSOR_CONFIG_HPP
#error "include xgrad/framework/array.hpp before any xtensor header"
#endif
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/runtime.hpp"

namespace xgrad {
struct TensorImpl;
namespace detail {
// The backstop behind the per-op size checks: a buffer over max_tensor_bytes(), or a failed
// malloc, is a MemoryError (never std::bad_alloc) from every xgrad allocation.
[[noreturn]] void allocation_failed(std::size_t n, std::size_t size, bool over_limit);
// A 64-byte-aligned block of `bytes` >= kAlignFrom = 512 (framework/tensor.cpp):
// malloc(bytes + 64) rounded up to the next 64-byte boundary, malloc's pointer stored just
// below (glibc's memalign fragments the heap: 2% of a 64x64 matmul). Blocks up to 64 KiB
// are rounded up to a power of two, and each thread keeps up to 16 freed blocks of each such
// size for its next allocations: a 16 KiB block is past glibc's per-thread cache, and its
// malloc + free cost ~600 instructions (bins, coalescing) against ~40 from the cache. Not in
// sanitizer builds (XGRAD_SANITIZE, or any ASan build): there every block is malloc'd and
// freed, so AddressSanitizer still sees each use after free.
void* aligned_allocate(std::size_t bytes);
void aligned_deallocate(void* p, std::size_t bytes) noexcept;
// A block of `bytes` (malloc's 16-byte alignment) for the small heap blocks every tensor is
// made of: a TensorImpl's and a Storage's shared_ptr blocks (SmallBlockAllocator) and data
// buffers under 512 bytes (allocate_buffer). Blocks up to kSmallBlockMax bytes are
// malloc'd in 32-byte size classes, and each thread keeps up to 64 freed blocks of each class
// for its next allocations (a block freed on another thread joins that thread's cache), like
// aligned_allocate's cache and off in sanitizer builds too. Larger blocks: plain malloc.
// MemoryError when malloc fails. small_deallocate takes the `bytes` given to small_allocate.
constexpr std::size_t kSmallBlockMax = 512;
void* small_allocate(std::size_t bytes);
void small_deallocate(void* p, std::size_t bytes) noexcept;
// For tests: whether the caches above are on (not in sanitizer builds), and how many freed
// blocks of the size class of `bytes` the calling thread holds.
bool block_cache_enabled() noexcept;
std::size_t cached_blocks(std::size_t bytes) noexcept;
}  // namespace detail

// The allocator of the small fixed-size blocks behind a tensor (detail::small_allocate).
template <class T> struct SmallBlockAllocator {
  static_assert(alignof(T) <= alignof(std::max_align_t), "small blocks are malloc-aligned");
  using value_type = T;
  SmallBlockAllocator() noexcept = default;
  template <class U> SmallBlockAllocator(const SmallBlockAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) {
    if (n > std::size_t(-1) / sizeof(T)) detail::allocation_failed(n, sizeof(T), true);
    return static_cast<T*>(detail::small_allocate(n * sizeof(T)));
  }
  void deallocate(T* p, std::size_t n) noexcept { detail::small_deallocate(p, n * sizeof(T)); }
  template <class U> bool operator==(const SmallBlockAllocator<U>&) const noexcept { return true; }
  template <class U> bool operator!=(const SmallBlockAllocator<U>&) const noexcept { return false; }
};

namespace detail {
constexpr std::size_t kAlignment = 64, kAlignFrom = 512;  // bytes: see the top of this file
// An uninitialised buffer of n items of `item` bytes: none for n = 0 (nullptr), a small block
// under kAlignFrom bytes (small_allocate), else a kAlignment-aligned one (aligned_allocate) of at
// most max_tensor_bytes(). MemoryError otherwise (allocation_failed). A tensor's Storage and
// xtensor containers (AlignedAllocator) both come from here.
inline void* allocate_buffer(std::size_t n, std::size_t item) {
  if (n == 0) return nullptr;
  if (n > (std::size_t(-1) - kAlignment) / item) allocation_failed(n, item, true);
  const std::size_t bytes = n * item;
  if (bytes < kAlignFrom) return small_allocate(bytes);
  if (bytes > max_tensor_bytes()) allocation_failed(n, item, true);
  return aligned_allocate(bytes);
}
// Frees a buffer of allocate_buffer(n, item) with bytes = n * item (nullptr for bytes = 0).
inline void deallocate_buffer(void* p, std::size_t bytes) noexcept {
  if (bytes == 0) return;
  if (bytes < kAlignFrom) small_deallocate(p, bytes);
  else aligned_deallocate(p, bytes);
}
}  // namespace detail

// The allocator of xtensor containers (xt::xarray<T> in op code): detail::allocate_buffer.
template <class T> struct AlignedAllocator {
  using value_type = T;
  static constexpr std::size_t kAlignment = detail::kAlignment, kAlignFrom = detail::kAlignFrom;
  AlignedAllocator() noexcept = default;
  template <class U> AlignedAllocator(const AlignedAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(detail::allocate_buffer(n, sizeof(T))); }
  void deallocate(T* p, std::size_t n) noexcept { detail::deallocate_buffer(p, n * sizeof(T)); }
  template <class U> bool operator==(const AlignedAllocator<U>&) const noexcept { return true; }
  template <class U> bool operator!=(const AlignedAllocator<U>&) const noexcept { return false; }
};
}  // namespace xgrad
#define XTENSOR_DEFAULT_ALLOCATOR(T) xgrad::AlignedAllocator<T>

#include <xtensor/xadapt.hpp>
#include <xtensor/xarray.hpp>
#include <xtensor/xnoalias.hpp>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// A tensor's storage: its row-major values in one buffer (detail::allocate_buffer: none for 0
// elements, 64-byte aligned from 512 bytes up) plus their version counter (PyTorch's
// `_version`). The element type and the shape are the TensorImpl's. Every in-place write path
// bumps the version (Tensor::mutable_data, Tensor::mutable_raw_data, mutable_value below,
// Tensor::bump_version); record() saves the version of each input and of the output, and a
// node's backward throws GraphError if one changed in between. Shared by every handle to the
// same values (detach(), saved outputs), so a write through any of them is seen. Not atomic:
// writing a tensor while another thread runs a backward that reads it is a data race anyway.
// Raw bytes, not an xt::xarray: an xarray's shape, strides and backstrides cost an op's output
// ~250 of its ~700 instructions made and freed (callgrind, BM_make_output_tensor); op code
// views the buffer as an xtensor expression when it wants one (value<T>, below).
struct Storage {
  Storage() noexcept {}
  // An uninitialised buffer of n items of `item` bytes (MemoryError past max_tensor_bytes()).
  Storage(std::size_t n, std::size_t item) : data(detail::allocate_buffer(n, item)), bytes(n * item) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  ~Storage() { detail::deallocate_buffer(data, bytes); }
  void* data = nullptr;
  std::size_t bytes = 0;
  std::uint64_t version = 0;
};

// Made by new_tensor_impl (below): its block, its Storage's block and small data buffers all
// come from the calling thread's caches (detail::small_allocate), and a shape of rank <= 6 is
// kept inside the TensorImpl (Shape::kInline), so making and freeing an op's output calls
// malloc for none of them.
struct TensorImpl {
  // User-provided, so that allocate_shared's value-initialisation runs only the member
  // initialisers: with the implicit constructor it zero-fills the whole object first (a `rep stos`,
  // ~17% of BM_make_output_tensor on a Zen 3).
  TensorImpl() noexcept {}
  std::shared_ptr<Storage> value;  // shared with detach() and with saved outputs
  Shape shape;
  DType dtype = DType::Float32;
  bool requires_grad = false;
  std::shared_ptr<Node> grad_fn;
  Tensor grad;
};

// A TensorImpl and a Storage each in one small block of their own (detail::small_allocate's
// per-thread cache). Separate blocks: a node's saved output keeps only the Storage alive, not
// the TensorImpl that holds the node (a reference cycle).
inline std::shared_ptr<TensorImpl> new_tensor_impl() {
  return std::allocate_shared<TensorImpl>(SmallBlockAllocator<TensorImpl>());
}
// new_tensor_impl with a copy of `shape`: detach, clone, a node's output, empty_tensor.
inline std::shared_ptr<TensorImpl> new_tensor_impl(const Shape& shape) {
  auto impl = new_tensor_impl();
  impl->shape = shape;
  return impl;
}
// A Storage of n uninitialised items of `item` bytes.
inline std::shared_ptr<Storage> new_storage(std::size_t n, std::size_t item) {
  return std::allocate_shared<Storage>(SmallBlockAllocator<Storage>(), n, item);
}

template <class T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::Float32; }
template <> constexpr DType dtype_of<double>() { return DType::Float64; }
template <> constexpr DType dtype_of<bool>() { return DType::Bool; }
template <> constexpr DType dtype_of<std::int64_t>() { return DType::Int64; }

namespace detail {
// std::logic_error "xgrad op code read a float32 tensor as float64": T is not t.dtype()'s type.
[[noreturn]] void wrong_element_type(DType requested, DType actual);
template <class T> void check_element_type(const Tensor& t) {
  if (t.impl()->dtype != dtype_of<T>()) wrong_element_type(dtype_of<T>(), t.impl()->dtype);
}
}  // namespace detail

// --- op code's access to a tensor's values ------------------------------------------------
// T must match t.dtype() (std::logic_error otherwise: a bug in the op, not a user error).
//   data_of<T>(t)        const T*, row-major (nullptr for 0 elements): an input's values
//   fresh_data<T>(t)     T*: a result still being filled (made by empty_tensor, not yet
//                        returned or recorded); no version bump, outputs are made at version 0
//   t.mutable_data<T>()  T*: writing an existing tensor in place (bumps its version)
//   value<T>(t), fresh_value<T>(t), mutable_value<T>(t): the same as xtensor expressions
//                        (ArrayView: an xt::xarray_adaptor over the buffer, shape t.shape()),
//                        for code written with xtensor's functions; building one costs about
//                        as much as a small op's output, so kernels take the pointers instead.
template <class T> const T* data_of(const Tensor& t) {
  detail::check_element_type<T>(t);
  return static_cast<const T*>(t.impl()->value->data);
}
template <class T> T* fresh_data(const Tensor& t) {
  detail::check_element_type<T>(t);
  return static_cast<T*>(t.impl()->value->data);
}

// A row-major xtensor view of n = numel(shape) elements at p (const T for read-only).
template <class T>
using ArrayView = xt::xarray_adaptor<xt::xbuffer_adaptor<T*, xt::no_ownership, std::allocator<std::remove_const_t<T>>>,
                                     xt::layout_type::row_major, xt::svector<std::size_t, 4>>;
template <class T> ArrayView<T> array_view(T* p, const Shape& shape) {
  using Buffer = typename ArrayView<T>::storage_type;
  std::size_t n = 1;
  for (auto d : shape) n *= d;
  return ArrayView<T>(Buffer(p, n), xt::svector<std::size_t, 4>(shape.begin(), shape.end()));
}
template <class T> ArrayView<const T> value(const Tensor& t) { return array_view(data_of<T>(t), t.shape()); }
template <class T> ArrayView<T> fresh_value(const Tensor& t) { return array_view(fresh_data<T>(t), t.shape()); }
template <class T> ArrayView<T> mutable_value(const Tensor& t) {
  T* p = fresh_data<T>(t);  // the element type checked first, then the version bumped
  t.bump_version();
  return array_view(p, t.shape());
}

namespace detail {
// check_tensor_size's fast path, inline in every op's output: numel(shape) when no dimension is
// 0, the product does not overflow, is at most 2^40 and its bytes (item bytes each) are within
// max_tensor_bytes(); otherwise 0, and check_tensor_size's full check decides (it throws, or
// returns 0 for a shape with a zero dimension). Out of line it was ~65 of the ~740 instructions
// of an op's output made and freed (callgrind, BM_make_output_tensor).
inline std::size_t fast_tensor_size(const Shape& shape, std::size_t item) {
  std::size_t n = 1;
  bool overflow = false;
  for (auto d : shape) overflow |= __builtin_mul_overflow(n, d, &n);
  return !overflow && n != 0 && n <= (std::size_t(1) << 40) && n * item <= max_tensor_bytes() ? n : 0;
}
// check_tensor_size past its fast path (framework/tensor.cpp): throws, or returns 0 for a shape
// with a zero dimension.
std::size_t check_tensor_size_slow(const char* op, const Shape& shape, DType dtype);
// check_tensor_size(op, shape, dtype_of<T>()) for a tensor about to be made: its element count.
template <class T> std::size_t check_new_tensor_size(const char* op, const Shape& shape) {
  const std::size_t n = fast_tensor_size(shape, sizeof(T));
  return n ? n : check_tensor_size_slow(op, shape, dtype_of<T>());
}
// The allocator's MemoryError (a genuine out-of-memory under the limit) again, naming op, the
// dtype and the shape of the tensor being made: empty_array and empty_tensor.
[[noreturn]] inline void out_of_memory(const char* op, DType dtype, const Shape& shape, const MemoryError& e) {
  throw_error<MemoryError>(op, "out of memory for a ", dtype_name(dtype), " tensor of shape ", shape, " (",
                           e.what(), ")");
}
}  // namespace detail

// A new, uninitialised xtensor container of the given shape (for scratch arrays in op code),
// checked first by check_tensor_size(op, ...) (ValueError past 2^40 elements, MemoryError past
// max_tensor_bytes()). A genuine out-of-memory under the limit is a MemoryError naming op and
// shape too.
template <class T> xt::xarray<T> empty_array(const Shape& shape, const char* op = "empty") {
  detail::check_new_tensor_size<T>(op, shape);
  try {
    return xt::xarray<T>::from_shape(shape);
  } catch (const MemoryError& e) {
    detail::out_of_memory(op, dtype_of<T>(), shape, e);
  }
}

// A new, uninitialised T tensor of `shape` (T: float, double, bool or std::int64_t), checked as
// by empty_array. Fill it through fresh_data<T>(out) (or fresh_value<T>(out)) before returning or
// recording it. Out of line (framework/tensor.cpp), so that its three blocks' allocations and
// frees run inlined there rather than as calls into the library from every op.
template <class T> Tensor empty_tensor(const Shape& shape, const char* op = "empty");

// empty_tensor<T> for any dtype: every element is the caller's to write.
inline Tensor empty_tensor(DType dtype, const Shape& shape, const char* op = "empty") {
  switch (dtype) {
    case DType::Float32: return empty_tensor<float>(shape, op);
    case DType::Float64: return empty_tensor<double>(shape, op);
    case DType::Bool: return empty_tensor<bool>(shape, op);
    case DType::Int64: return empty_tensor<std::int64_t>(shape, op);
  }
  throw_error<DTypeError>(op, "unknown dtype");
}

// A new leaf tensor holding the values of an xtensor expression (an xt::xarray, or an expression
// such as xt::exp(value<T>(x))), of its shape and element type (float, double, bool or
// int64_t), evaluated straight into the tensor's storage (a container is copied). Size-checked
// as by empty_tensor, under the name op.
template <class E> Tensor make_tensor(const xt::xexpression<E>& expression, const char* op = "make_tensor") {
  const E& e = expression.derived_cast();
  using T = std::decay_t<typename E::value_type>;
  const auto& s = e.shape();
  Tensor y = empty_tensor<T>(Shape(s.begin(), s.end()), op);
  auto v = fresh_value<T>(y);
  xt::noalias(v) = e;
  return y;
}

// Calls f(T{}) with T = float, double, bool or std::int64_t according to dtype (ops that move
// values of any dtype: shape ops, indexing, comparisons).
template <class F> decltype(auto) dispatch_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::Float32: return f(float{});
    case DType::Float64: return f(double{});
    case DType::Bool: return f(bool{});
    case DType::Int64: break;
  }
  return f(std::int64_t{});
}

// Calls f(T{}) with T = float or double according to dtype; DTypeError otherwise.
template <class F> decltype(auto) dispatch_float(const char* op, DType dtype, F&& f) {
  if (dtype == DType::Float32) return f(float{});
  if (dtype == DType::Float64) return f(double{});
  throw_error<DTypeError>(op, "expected a float32 or float64 tensor, got ", dtype_name(dtype));
}

}  // namespace xgrad
