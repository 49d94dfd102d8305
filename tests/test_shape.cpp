// Shape (framework/shape.hpp): a std::vector<std::size_t> look-alike that keeps up to
// Shape::kInline dims in itself. Checked against std::vector as the reference model: the
// same random sequence of operations on both, compared after every step, across the
// inline/heap boundary; copies and moves in both storage states; conversions and comparisons
// with std::vector; and tensors of every rank 0..10 built, reshaped and compared.
#include <boost/test/unit_test.hpp>

#include <cstdint>
#include <iterator>
#include <limits>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>
#include <vector>

#include "helpers.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"

using namespace xgrad;
using Vec = std::vector<std::size_t>;

namespace {
// Whether s keeps its dims inside its own bytes (no heap block).
bool is_inline(const Shape& s) {
  const auto* p = reinterpret_cast<const char*>(s.data());
  const auto* o = reinterpret_cast<const char*>(&s);
  return p >= o && p < o + sizeof(Shape);
}
bool same(const Shape& s, const Vec& v) {
  if (s.size() != v.size() || s.empty() != v.empty()) return false;
  for (std::size_t i = 0; i < v.size(); ++i)
    if (s[i] != v[i] || s.at(i) != v.at(i)) return false;
  return Vec(s.begin(), s.end()) == v && Vec(s.rbegin(), s.rend()) == Vec(v.rbegin(), v.rend()) &&
         s.capacity() >= s.size();
}
}  // namespace

BOOST_AUTO_TEST_SUITE(shape)

BOOST_AUTO_TEST_CASE(constructors_match_std_vector) {
  BOOST_TEST(same(Shape(), Vec()));
  BOOST_TEST(same(Shape{}, Vec{}));
  BOOST_TEST(same(Shape{2, 3, 4}, Vec{2, 3, 4}));
  BOOST_TEST(same(Shape(3), Vec(3)));
  BOOST_TEST(same(Shape(9, 2), Vec(9, 2)));  // an (n, value) pair of ints, not an iterator range
  const Vec v{1, 2, 3, 4, 5, 6, 7, 8};
  BOOST_TEST(same(Shape(v.begin() + 2, v.end()), Vec(v.begin() + 2, v.end())));
  BOOST_TEST(same(Shape(v), v));
  const Shape from_vector = v;  // implicit, as a std::vector<std::size_t> argument converts
  BOOST_TEST(same(from_vector, v));
  const Vec back = from_vector;  // and back
  BOOST_TEST(back == v);
  for (std::size_t n = 0; n <= 10; ++n) {
    const Shape s(n, 7);
    BOOST_TEST(is_inline(s) == (n <= Shape::kInline));
    BOOST_TEST(s.capacity() == std::max(n, Shape::kInline));
  }
}

BOOST_AUTO_TEST_CASE(copies_and_moves_in_both_storage_states) {
  for (std::size_t n : {std::size_t(0), std::size_t(1), Shape::kInline, Shape::kInline + 1, std::size_t(12)}) {
    Vec ref(n);
    for (std::size_t i = 0; i < n; ++i) ref[i] = 10 * i + 1;
    const Shape a(ref);
    Shape copy(a);
    BOOST_TEST(same(copy, ref));
    BOOST_TEST(copy.data() != a.data());
    Shape moved(std::move(copy));
    BOOST_TEST(same(moved, ref));
    BOOST_TEST(copy.empty());  // NOLINT(bugprone-use-after-move): moved-from is empty and usable
    copy.push_back(5);
    BOOST_TEST(same(copy, Vec{5}));
    for (std::size_t m : {std::size_t(0), std::size_t(3), std::size_t(9)}) {
      Shape target(m, 4);
      target = a;
      BOOST_TEST(same(target, ref));
      Shape target2(m, 4);
      target2 = Shape(a);
      BOOST_TEST(same(target2, ref));
      Shape x(m, 4), y(a);
      swap(x, y);
      BOOST_TEST(same(x, ref));
      BOOST_TEST(same(y, Vec(m, 4)));
    }
    Shape self(a);
    const Shape& alias = self;
    self = alias;
    BOOST_TEST(same(self, ref));
    Shape& same_object = self;
    self = std::move(same_object);  // a self-move leaves it unchanged
    BOOST_TEST(same(self, ref));
  }
}

BOOST_AUTO_TEST_CASE(random_operations_match_std_vector) {
  std::mt19937_64 rng(2026);
  auto pick = [&](std::size_t n) { return std::size_t(rng() % n); };
  for (int round = 0; round < 200; ++round) {
    Shape s;
    Vec v;
    for (int step = 0; step < 60; ++step) {
      const std::size_t d = pick(100);
      switch (pick(13)) {
        case 0: s.push_back(d), v.push_back(d); break;
        case 1: if (!v.empty()) s.pop_back(), v.pop_back(); break;
        case 2: { const std::size_t n = pick(10); s.resize(n), v.resize(n); } break;
        case 3: { const std::size_t n = pick(10); s.resize(n, d), v.resize(n, d); } break;
        case 4: { const std::size_t i = pick(v.size() + 1);
                  BOOST_TEST(*s.insert(s.begin() + i, d) == *v.insert(v.begin() + i, d)); } break;
        case 5: { const std::size_t i = pick(v.size() + 1), n = pick(4);
                  s.insert(s.begin() + i, n, d), v.insert(v.begin() + i, n, d); } break;
        case 6: { const std::size_t i = pick(v.size() + 1); const Vec src{d, d + 1, d + 2};
                  s.insert(s.begin() + i, src.begin(), src.end()), v.insert(v.begin() + i, src.begin(), src.end()); } break;
        case 7: { const std::size_t i = pick(v.size() + 1);  // a range of itself
                  const Vec before = v;
                  s.insert(s.begin() + i, s.begin(), s.end()), v.insert(v.begin() + i, before.begin(), before.end()); } break;
        case 8: if (!v.empty()) { const std::size_t i = pick(v.size());
                  s.erase(s.begin() + i), v.erase(v.begin() + i); } break;
        case 9: { const std::size_t i = pick(v.size() + 1), j = i + pick(v.size() - i + 1);
                  s.erase(s.begin() + i, s.begin() + j), v.erase(v.begin() + i, v.begin() + j); } break;
        case 10: { const std::size_t n = pick(9); s.assign(n, d), v.assign(n, d); } break;
        case 11: if (!v.empty()) { const std::size_t i = pick(v.size());  // a tail of itself
                  s.assign(s.begin() + i, s.end()), v.assign(v.begin() + i, v.end()); } break;
        case 12: { Shape c = s; s = std::move(c); } break;
      }
      BOOST_REQUIRE(same(s, v));
      BOOST_REQUIRE((s == v) && (v == s) && !(s != v) && s == Shape(v));
    }
  }
}

// The members std::vector code reaches for beyond the random sequence above.
BOOST_AUTO_TEST_CASE(other_members_match_std_vector) {
  enum { kRows = 2, kCols = 3 };
  BOOST_TEST(same(Shape(kRows, kCols), Vec(kRows, kCols)));  // (n, value), not an iterator range
  std::istringstream in("4 5 6 7 8 9 10 11");
  Shape from_stream;
  from_stream.assign(std::istream_iterator<std::size_t>(in), std::istream_iterator<std::size_t>());
  BOOST_TEST(same(from_stream, Vec{4, 5, 6, 7, 8, 9, 10, 11}));  // input iterators, past kInline
  Shape s{1, 2};
  s.reserve(20);
  BOOST_TEST(s.capacity() == 20u);
  BOOST_TEST(same(s, Vec{1, 2}));
  s.shrink_to_fit();
  BOOST_TEST(is_inline(s));
  BOOST_TEST(same(s, Vec{1, 2}));
  s.assign({7, 8, 9});
  BOOST_TEST(same(s, Vec{7, 8, 9}));
  s = {3, 4};
  BOOST_TEST(same(s, Vec{3, 4}));
  s.insert(s.begin() + 1, {5, 6});
  BOOST_TEST(same(s, Vec{3, 5, 6, 4}));
  BOOST_TEST(*s.emplace(s.begin(), 9) == 9u);
  BOOST_TEST(s.emplace_back() == 0u);
  BOOST_TEST(same(s, Vec{9, 3, 5, 6, 4, 0}));
  s.insert(s.end(), 0, 1);
  s.erase(s.begin(), s.begin());
  BOOST_TEST(same(s, Vec{9, 3, 5, 6, 4, 0}));
  volatile std::size_t huge = std::numeric_limits<std::size_t>::max();  // opaque: GCC would warn on the fill
  BOOST_CHECK_THROW(s.insert(s.begin(), std::size_t(huge), 0), std::length_error);
  BOOST_TEST(same(s, Vec{9, 3, 5, 6, 4, 0}));  // unchanged
  BOOST_CHECK_THROW(s.resize(std::size_t(Shape::max_size()) + 1), std::length_error);
  BOOST_TEST(same(s, Vec{9, 3, 5, 6, 4, 0}));
}

BOOST_AUTO_TEST_CASE(comparisons_and_errors) {
  BOOST_TEST((Shape{2, 3} == Shape{2, 3}));
  BOOST_TEST((Shape{2, 3} != Shape{2, 3, 1}));
  BOOST_TEST((Shape{2, 3} < Shape{2, 4}));
  BOOST_TEST((Shape{2} < Shape{2, 0}));
  BOOST_TEST((Shape{3} > Shape{2, 9}));
  BOOST_TEST((Shape{2, 3} <= Shape{2, 3}));
  BOOST_TEST((Shape{2, 3} >= Shape{2, 3}));
  BOOST_TEST((Shape{2, 3} == Vec{2, 3}));
  BOOST_TEST((Vec{2, 3} != Shape{3, 2}));
  BOOST_TEST((Shape{} == Vec{}));
  const Shape s{4, 5};
  BOOST_CHECK_THROW(s.at(2), std::out_of_range);
  BOOST_TEST(s.front() == 4u);
  BOOST_TEST(s.back() == 5u);
  BOOST_TEST(shape_str(Shape(8, 1)) == "(1, 1, 1, 1, 1, 1, 1, 1)");
  BOOST_TEST(shape_str(Shape{}) == "()");
}

// Tensors of every rank, inline and on the heap: shape kept, values right, reshapes between
// ranks on either side of kInline, and errors naming the shape.
BOOST_AUTO_TEST_CASE(tensors_of_every_rank) {
  for (std::size_t rank = 0; rank <= 10; ++rank) {
    const Shape shape(rank, 2);
    Tensor a = full(shape, 1.5, DType::Float64);
    BOOST_TEST(a.shape() == shape);
    BOOST_TEST(a.numel() == std::size_t(1) << rank);
    BOOST_TEST(a.to_vector() == std::vector<double>(std::size_t(1) << rank, 1.5), boost::test_tools::per_element());
    Tensor flat = reshape(a, Shape{a.numel()});
    BOOST_TEST(flat.shape() == (Shape{std::size_t(1) << rank}));
    Tensor back = reshape(flat, shape);
    BOOST_TEST(back.shape() == shape);
    Tensor c = a.detach();
    BOOST_TEST(c.shape() == shape);
    BOOST_TEST(sum(a).to_vector() == std::vector<double>{1.5 * double(std::size_t(1) << rank)});
  }
  Tensor big = zeros(Shape(9, 1));
  BOOST_CHECK_EXCEPTION(reshape(big, Shape{2}), ShapeError, [](const ShapeError& e) {
    return std::string(e.what()).find("(1, 1, 1, 1, 1, 1, 1, 1, 1)") != std::string::npos;
  });
}

BOOST_AUTO_TEST_SUITE_END()
