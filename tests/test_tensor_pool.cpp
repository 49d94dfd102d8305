// The per-thread caches behind every tensor (framework/array.hpp, framework/tensor.cpp):
// small blocks (TensorImpl and Storage blocks, data buffers under 512 B), 64-byte-aligned
// buffers up to 64 KiB. Reuse, size classes, count bounds, blocks
// freed on another thread, and that tensors made from reused blocks behave as new ones. In
// sanitizer builds the caches are off: every check then reads "nothing cached".
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "expect_error.hpp"
#include "helpers.hpp"
#include "xgrad/framework/array.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/unary.hpp"

using namespace xgrad;

namespace {
const bool kOn = detail::block_cache_enabled();
// Blocks of `bytes` made and freed on this thread until its cache of that class is empty.
void drain(std::size_t bytes) {
  std::vector<void*> held;
  while (detail::cached_blocks(bytes) > 0) held.push_back(detail::small_allocate(bytes));
  for (void* p : held) std::free(p);  // small blocks are malloc'd as they are
}
}  // namespace

BOOST_AUTO_TEST_SUITE(tensor_pool)

// A freed small block is the next one of its 32-byte class made on the same thread; the
// block is as large as its class (written whole), and malloc-aligned.
BOOST_AUTO_TEST_CASE(small_blocks_are_reused_within_their_size_class) {
  for (std::size_t bytes : {1u, 32u, 33u, 100u, 272u, 511u, 512u}) {
    drain(bytes);
    void* p = detail::small_allocate(bytes);
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(p) % alignof(std::max_align_t) == 0u);
    std::memset(p, 0xab, kOn ? (bytes + 31) / 32 * 32 : bytes);  // a cached block has its class's size
    detail::small_deallocate(p, bytes);
    BOOST_TEST(detail::cached_blocks(bytes) == (kOn ? 1u : 0u));
    const std::size_t same_class = (bytes + 31) / 32 * 32;  // the class's largest size
    void* q = detail::small_allocate(same_class);
    if (kOn) BOOST_TEST(q == p, "bytes = " << bytes);
    BOOST_TEST(detail::cached_blocks(bytes) == 0u);
    detail::small_deallocate(q, same_class);
  }
  // Past 512 bytes: plain malloc, never cached (cached_blocks(4096) counts the aligned cache).
  const std::size_t aligned_before = detail::cached_blocks(4096);
  void* big = detail::small_allocate(4096);
  std::memset(big, 1, 4096);
  detail::small_deallocate(big, 4096);
  BOOST_TEST(detail::cached_blocks(4096) == aligned_before);
}

// Each class holds at most 64 small and 16 aligned blocks per thread; the rest go back to
// malloc. Every cached block is handed out again, and aligned ones stay 64-byte aligned.
BOOST_AUTO_TEST_CASE(caches_hold_a_bounded_count_of_blocks_per_class) {
  drain(64);
  std::vector<void*> small(200);
  for (auto& p : small) p = detail::small_allocate(64);
  for (void* p : small) detail::small_deallocate(p, 64);
  BOOST_TEST(detail::cached_blocks(64) == (kOn ? 64u : 0u));
  for (std::size_t i = 0; i < 64; ++i) small[i] = detail::small_allocate(64);
  BOOST_TEST(detail::cached_blocks(64) == 0u);
  for (std::size_t i = 0; i < 64; ++i) detail::small_deallocate(small[i], 64);

  AlignedAllocator<float> alloc;  // 4 KiB buffers: the aligned cache's 4 KiB class
  std::vector<float*> aligned(40);
  for (auto& p : aligned) p = alloc.allocate(1000);
  for (float* p : aligned) {
    BOOST_TEST(reinterpret_cast<std::uintptr_t>(p) % 64 == 0u);
    std::fill(p, p + (kOn ? 1024 : 1000), 2.0f);  // a cached block is rounded up to its class: 1024 floats
  }
  for (float* p : aligned) alloc.deallocate(p, 1000);
  BOOST_TEST(detail::cached_blocks(4000) == (kOn ? 16u : 0u));
  for (auto& p : aligned) p = alloc.allocate(1024);  // same class, from the cache first
  BOOST_TEST(detail::cached_blocks(4000) == 0u);
  for (float* p : aligned) alloc.deallocate(p, 1024);
}

// A block freed on another thread joins that thread's cache (not the maker's), and the
// freeing thread's cache is emptied when it ends.
BOOST_AUTO_TEST_CASE(blocks_freed_on_another_thread_join_its_cache) {
  drain(200);
  std::vector<void*> made(10);
  for (auto& p : made) {
    p = detail::small_allocate(200);
    std::memset(p, 3, 200);
  }
  std::size_t cached_there = 0, reused_there = 0;
  std::thread other([&] {
    for (void* p : made) detail::small_deallocate(p, 200);
    cached_there = detail::cached_blocks(200);
    for (std::size_t i = 0; i < 10; ++i) {
      void* q = detail::small_allocate(200);
      reused_there += std::find(made.begin(), made.end(), q) != made.end();
      detail::small_deallocate(q, 200);
    }
  });
  other.join();
  BOOST_TEST(cached_there == (kOn ? 10u : 0u));
  BOOST_TEST(reused_there == (kOn ? 10u : 0u));
  BOOST_TEST(detail::cached_blocks(200) == 0u);  // this thread's cache did not get them
}

// Tensors from reused blocks: the same data buffer, a fresh version counter, the right
// shape (of any rank: inline up to Shape::kInline dims, on the heap past it), and detach() and
// saved outputs still share one Storage.
BOOST_AUTO_TEST_CASE(tensors_made_from_reused_blocks_are_new_tensors) {
  const void* first = nullptr;
  {
    Tensor t = empty_tensor<float>({4, 4});
    first = t.raw_data();
    t.bump_version();
  }
  Tensor t = empty_tensor<float>({4, 4});
  if (kOn) BOOST_TEST(t.raw_data() == first);
  BOOST_TEST(t.version() == 0u);
  BOOST_TEST(t.shape() == (Shape{4, 4}), boost::test_tools::per_element());

  for (std::size_t rank = 0; rank <= 10; ++rank) {
    const Shape shape(rank, 2);
    for (int round = 0; round < 3; ++round) {
      Tensor a = full(shape, 1.5, DType::Float64);
      BOOST_TEST(a.shape() == shape, boost::test_tools::per_element());
      BOOST_TEST(a.to_vector() == std::vector<double>(std::size_t(1) << rank, 1.5), boost::test_tools::per_element());
    }
  }

  Tensor x = test::leaf({1.0, 2.0, 3.0}, {3});
  Tensor y = xgrad::exp(x);
  Tensor d = y.detach();
  BOOST_TEST(d.raw_data() == y.raw_data());
  Tensor z = xgrad::exp(x);
  sum(z).backward();  // exp saved its output: the gradient is that Storage's values
  BOOST_TEST(x.grad().to_vector() == z.to_vector(), boost::test_tools::per_element());
  d.bump_version();  // one version counter for y, d and exp's saved output
  BOOST_TEST(y.version() == d.version());
  BOOST_CHECK_THROW(sum(y).backward(), GraphError);
}

// Several threads making and freeing tensors and passing them to each other (a block made on
// one thread and freed on another): values stay each tensor's own (the TSan target runs it).
BOOST_AUTO_TEST_CASE(threads_trading_tensors_keep_their_values) {
  constexpr int kThreads = 4, kRounds = 200;
  std::vector<std::vector<Tensor>> handed(kThreads);
  std::vector<std::size_t> wrong(kThreads, 0);
  std::vector<std::thread> threads;
  for (int id = 0; id < kThreads; ++id)
    threads.emplace_back([&, id] {
      for (int r = 0; r < kRounds; ++r) {
        const double v = id * 1000 + r;
        Tensor t = full({std::size_t(1 + r % 7), 3}, v, DType::Float32);
        handed[id].push_back(t);
        const auto values = t.to_vector();
        wrong[id] += std::count_if(values.begin(), values.end(), [&](double x) { return x != v; });
      }
    });
  for (auto& t : threads) t.join();
  threads.clear();
  for (int id = 0; id < kThreads; ++id)  // thread id frees the tensors thread id + 1 made
    threads.emplace_back([&, id] {
      auto mine = std::move(handed[(id + 1) % kThreads]);
      for (int r = 0; r < kRounds; ++r) {
        const auto values = mine[std::size_t(r)].to_vector();
        const double v = ((id + 1) % kThreads) * 1000 + r;
        wrong[id] += std::count_if(values.begin(), values.end(), [&](double x) { return x != v; });
      }
      mine.clear();
      Tensor t = zeros({5, 3});  // from this thread's cache of blocks it just freed
      wrong[id] += t.to_vector() != std::vector<double>(15, 0.0);
    });
  for (auto& t : threads) t.join();
  BOOST_TEST(wrong == std::vector<std::size_t>(kThreads, 0), boost::test_tools::per_element());
}

// empty_tensor<T> makes its container in place in the tensor's storage: a new leaf of the
// shape and dtype asked for, version 0, row-major strides, every element writable; rank 0 has
// one element. Sizes are checked first, with the op's name (the fast path of
// check_tensor_size and its slow path give the same answers).
BOOST_AUTO_TEST_CASE(empty_tensor_makes_its_container_in_place) {
  const std::vector<Shape> shapes{{}, {0}, {3, 0, 2}, {5}, {2, 3, 4}, {64, 64}, {1, 1, 1, 1, 7}};
  for (const Shape& s : shapes) {
    Tensor t = empty_tensor<double>(s, "probe");
    BOOST_TEST(t.shape() == s);
    BOOST_TEST(t.dtype() == DType::Float64);
    BOOST_TEST(t.version() == 0u);
    BOOST_TEST(t.is_leaf());
    BOOST_TEST(!t.requires_grad());
    const auto& a = value<double>(t);
    BOOST_TEST(std::vector<std::size_t>(a.shape().begin(), a.shape().end()) == s);
    std::size_t stride = 1;
    for (std::size_t d = s.size(); d-- > 0;) {  // row-major (xtensor keeps stride 0 for size-1 axes)
      if (s[d] != 1) BOOST_TEST(std::size_t(a.strides()[d]) == stride);
      stride *= s[d];
    }
    BOOST_TEST(a.size() == numel(s));
    double* p = t.mutable_data<double>();
    for (std::size_t i = 0; i < t.numel(); ++i) p[i] = double(i) + 0.5;
    const std::vector<double> v = t.to_vector();
    for (std::size_t i = 0; i < v.size(); ++i) BOOST_TEST(v[i] == double(i) + 0.5);
  }
  for (DType d : {DType::Float32, DType::Float64, DType::Bool, DType::Int64}) {
    Tensor t = empty_tensor(d, {2, 3}, "probe");
    BOOST_TEST(t.dtype() == d);
    BOOST_TEST(t.nbytes() == 6 * itemsize(d));
  }
  test::expect_error<ValueError>([] { empty_tensor<float>({std::size_t(1) << 21, std::size_t(1) << 20}, "probe"); }, {"probe", "(2097152, 1048576)", "2^40"});
  test::expect_error<ValueError>([] { empty_tensor<float>({0, std::size_t(1) << 41}, "probe"); }, {"probe", "2^40"});
  test::expect_error<ValueError>([] { empty_tensor<float>({std::size_t(1) << 63, 4}, "probe"); }, {"probe", "2^40"});
  struct LimitGuard {
    std::size_t saved = max_tensor_bytes();
    ~LimitGuard() { set_max_tensor_bytes(saved); }
  } guard;
  set_max_tensor_bytes(1000);
  BOOST_CHECK_NO_THROW(empty_tensor<float>({250}, "probe"));
  test::expect_error<MemoryError>([] { empty_tensor<float>({251}, "probe"); }, {"probe", "(251)", "1004 bytes"});
  BOOST_CHECK_NO_THROW(empty_tensor<float>({0, 1000000}, "probe"));  // no elements: nothing to limit
}

BOOST_AUTO_TEST_SUITE_END()
