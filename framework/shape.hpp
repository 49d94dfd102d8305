// xgrad/framework/shape.hpp — Shape, a tensor's dimensions.
//
// A vector of std::size_t with std::vector's interface (the subset below) that keeps up to
// Shape::kInline dimensions in itself, so that making, copying and freeing the shape of a
// tensor of rank <= 6 allocates nothing. Every tensor holds one, and most ops build one for
// their output: as a std::vector that was a heap block made and freed per tensor (~150
// instructions of an op's ~1,000-instruction fixed cost; benchmarks/bench_matmul.cpp,
// BM_make_output_tensor). Larger ranks spill to the heap, as std::vector does.
//
// It converts both ways with std::vector<std::size_t> (implicitly), and compares equal to one
// with the same dims, so code written against a std::vector shape keeps working. Iterators
// are plain pointers; like std::vector's, they are invalidated by any change of size. One
// difference: as an xgrad type, a Shape argument makes an unqualified call also look in
// namespace xgrad (argument-dependent lookup), so a helper of one's own with the name and
// parameters of an xgrad function (a local `randn(const Shape&, Rng&)`) needs qualifying; and
// `cond ? shape : vec` needs one side converted, as each converts to the other.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <stdexcept>
#include <type_traits>
#include <vector>

namespace xgrad {

namespace shape_detail {
template <class It, class = void> struct is_input_iterator : std::false_type {};
template <class It>
struct is_input_iterator<It, std::void_t<typename std::iterator_traits<It>::iterator_category>>
    : std::is_convertible<typename std::iterator_traits<It>::iterator_category, std::input_iterator_tag> {};
}  // namespace shape_detail

class Shape {
  template <class It> using if_iterator = std::enable_if_t<shape_detail::is_input_iterator<It>::value, int>;

 public:
  using value_type = std::size_t;
  using size_type = std::size_t;
  using difference_type = std::ptrdiff_t;
  using reference = std::size_t&;
  using const_reference = const std::size_t&;
  using pointer = std::size_t*;
  using const_pointer = const std::size_t*;
  using iterator = std::size_t*;
  using const_iterator = const std::size_t*;
  using reverse_iterator = std::reverse_iterator<iterator>;
  using const_reverse_iterator = std::reverse_iterator<const_iterator>;
  static constexpr size_type kInline = 6;  // dims kept without a heap block

  Shape() noexcept : data_(inline_) {}
  Shape(std::initializer_list<std::size_t> dims) : Shape() { assign(dims.begin(), dims.end()); }
  explicit Shape(size_type n) : Shape() { assign(n, 0); }
  Shape(size_type n, std::size_t value) : Shape() { assign(n, value); }
  template <class It, if_iterator<It> = 0> Shape(It first, It last) : Shape() { assign(first, last); }
  Shape(const std::vector<std::size_t>& dims) : Shape() { assign(dims.begin(), dims.end()); }
  Shape(const Shape& other) : Shape() { copy_from(other); }
  Shape(Shape&& other) noexcept : Shape() { take(other); }
  ~Shape() { release(); }

  Shape& operator=(const Shape& other) {
    if (this != &other) copy_from(other);
    return *this;
  }
  Shape& operator=(Shape&& other) noexcept {
    if (this != &other) {
      release();
      data_ = inline_, size_ = 0, capacity_ = kInline;
      take(other);
    }
    return *this;
  }
  Shape& operator=(std::initializer_list<std::size_t> dims) {
    assign(dims.begin(), dims.end());
    return *this;
  }
  operator std::vector<std::size_t>() const { return std::vector<std::size_t>(begin(), end()); }

  void assign(size_type n, std::size_t value) {
    reserve_discarding(n);
    std::fill_n(data_, n, value);
    size_ = std::uint32_t(n);
  }
  template <class It, if_iterator<It> = 0> void assign(It first, It last) {
    if constexpr (std::is_base_of_v<std::forward_iterator_tag, typename std::iterator_traits<It>::iterator_category>) {
      const auto n = size_type(std::distance(first, last));
      if (n > max_size()) too_long();
      reserve_discarding(n);
      if constexpr (std::is_pointer_v<It>) {
        if (n) std::memmove(data_, &*first, n * sizeof(std::size_t));  // may be a range of itself
      } else {
        std::copy(first, last, data_);
      }
      size_ = std::uint32_t(n);
    } else {
      clear();
      for (; first != last; ++first) push_back(*first);
    }
  }
  void assign(std::initializer_list<std::size_t> dims) { assign(dims.begin(), dims.end()); }

  size_type size() const noexcept { return size_; }
  bool empty() const noexcept { return size_ == 0; }
  size_type capacity() const noexcept { return capacity_; }
  static constexpr size_type max_size() noexcept { return UINT32_MAX; }
  std::size_t* data() noexcept { return data_; }
  const std::size_t* data() const noexcept { return data_; }
  iterator begin() noexcept { return data_; }
  iterator end() noexcept { return data_ + size_; }
  const_iterator begin() const noexcept { return data_; }
  const_iterator end() const noexcept { return data_ + size_; }
  const_iterator cbegin() const noexcept { return data_; }
  const_iterator cend() const noexcept { return data_ + size_; }
  reverse_iterator rbegin() noexcept { return reverse_iterator(end()); }
  reverse_iterator rend() noexcept { return reverse_iterator(begin()); }
  const_reverse_iterator rbegin() const noexcept { return const_reverse_iterator(end()); }
  const_reverse_iterator rend() const noexcept { return const_reverse_iterator(begin()); }
  std::size_t& operator[](size_type i) noexcept { return data_[i]; }
  const std::size_t& operator[](size_type i) const noexcept { return data_[i]; }
  std::size_t& at(size_type i) { return data_[checked(i)]; }
  const std::size_t& at(size_type i) const { return data_[checked(i)]; }
  std::size_t& front() noexcept { return data_[0]; }
  const std::size_t& front() const noexcept { return data_[0]; }
  std::size_t& back() noexcept { return data_[size_ - 1]; }
  const std::size_t& back() const noexcept { return data_[size_ - 1]; }

  void reserve(size_type n) {
    if (n > capacity_) {
      Shape t;
      t.reserve_discarding(n);
      t.assign(begin(), end());
      *this = std::move(t);
    }
  }
  void clear() noexcept { size_ = 0; }
  void push_back(std::size_t d) {
    if (size_ == capacity_) grow(size_type(size_) + 1, true);
    data_[size_++] = d;
  }
  std::size_t& emplace_back(std::size_t d = 0) {
    push_back(d);
    return back();
  }
  iterator emplace(const_iterator pos, std::size_t d = 0) { return insert(pos, d); }
  void shrink_to_fit() {
    if (on_heap() && capacity_ > size_) {
      Shape t(begin(), end());
      *this = std::move(t);
    }
  }
  void pop_back() noexcept { --size_; }
  void resize(size_type n, std::size_t value = 0) {
    if (n > capacity_) grow(n, true);
    if (n > size_) std::fill(data_ + size_, data_ + n, value);
    size_ = std::uint32_t(n);
  }
  iterator insert(const_iterator pos, std::size_t d) { return insert(pos, size_type(1), d); }
  iterator insert(const_iterator pos, size_type n, std::size_t d) {
    const size_type i = make_gap(pos, n);
    std::fill_n(data_ + i, n, d);
    return data_ + i;
  }
  template <class It, if_iterator<It> = 0> iterator insert(const_iterator pos, It first, It last) {
    const Shape dims(first, last);  // may alias *this
    const size_type i = make_gap(pos, dims.size());
    std::copy(dims.begin(), dims.end(), data_ + i);
    return data_ + i;
  }
  iterator insert(const_iterator pos, std::initializer_list<std::size_t> dims) {
    return insert(pos, dims.begin(), dims.end());
  }
  iterator erase(const_iterator pos) { return erase(pos, pos + 1); }
  iterator erase(const_iterator first, const_iterator last) {
    iterator f = data_ + (first - data_), l = data_ + (last - data_);
    if (f != l) {
      std::memmove(f, l, size_type(end() - l) * sizeof(std::size_t));
      size_ -= std::uint32_t(l - f);
    }
    return f;
  }
  void swap(Shape& other) noexcept {
    Shape t(std::move(other));
    other = std::move(*this);
    *this = std::move(t);
  }

  friend bool operator==(const Shape& a, const Shape& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator!=(const Shape& a, const Shape& b) noexcept { return !(a == b); }
  friend bool operator<(const Shape& a, const Shape& b) noexcept {
    return std::lexicographical_compare(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator>(const Shape& a, const Shape& b) noexcept { return b < a; }
  friend bool operator<=(const Shape& a, const Shape& b) noexcept { return !(b < a); }
  friend bool operator>=(const Shape& a, const Shape& b) noexcept { return !(a < b); }
  friend bool operator==(const Shape& a, const std::vector<std::size_t>& b) noexcept {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator==(const std::vector<std::size_t>& a, const Shape& b) noexcept { return b == a; }
  friend bool operator!=(const Shape& a, const std::vector<std::size_t>& b) noexcept { return !(a == b); }
  friend bool operator!=(const std::vector<std::size_t>& a, const Shape& b) noexcept { return !(b == a); }
  friend void swap(Shape& a, Shape& b) noexcept { a.swap(b); }

 private:
  [[noreturn]] static void too_long() { throw std::length_error("Shape: more than 2^32 - 1 dims"); }
  size_type checked(size_type i) const {
    if (i >= size_) throw std::out_of_range("Shape::at: index out of range");
    return i;
  }
  bool on_heap() const noexcept { return data_ != inline_; }
  void release() noexcept {
    if (on_heap()) delete[] data_;
  }
  // Copies other's dims (other is not this shape). Both inline-sized and this one inline (every
  // tensor of rank <= kInline): a fixed-size copy of kInline dims, no call; other's block always
  // holds that many (a heap block has more than kInline). Otherwise assign.
  void copy_from(const Shape& other) {
    if (other.size_ <= kInline && !on_heap()) {
      std::memcpy(inline_, other.data_, sizeof inline_);
      size_ = other.size_;
    } else {
      assign(other.begin(), other.end());
    }
  }
  // Moves other's dims into this empty, inline shape; other is left empty.
  void take(Shape& other) noexcept {
    if (other.on_heap()) {
      data_ = other.data_, capacity_ = other.capacity_;
      other.data_ = other.inline_, other.capacity_ = kInline;
    } else {
      std::copy(other.inline_, other.inline_ + other.size_, inline_);
    }
    size_ = other.size_;
    other.size_ = 0;
  }
  // Room for n dims (at least doubling the capacity when growing, exactly n when `keep` is
  // false: then the current dims are not copied over, as for assign).
  void grow(size_type n, bool keep) {
    if (n > max_size()) too_long();
    const size_type cap = keep ? std::max<size_type>(n, std::min<size_type>(2 * size_type(capacity_), max_size())) : n;
    auto* p = new std::size_t[cap];
    if (keep) std::copy(data_, data_ + size_, p);
    release();
    data_ = p, capacity_ = std::uint32_t(cap);
  }
  void reserve_discarding(size_type n) {
    if (n > capacity_) grow(n, false);
  }
  // Opens n slots at pos; returns pos's index. length_error past max_size(), as std::vector.
  size_type make_gap(const_iterator pos, size_type n) {
    const size_type i = size_type(pos - data_);
    if (n > max_size() - size_) too_long();
    if (n == 0) return i;
    if (size_ + n > capacity_) grow(size_ + n, true);
    std::memmove(data_ + i + n, data_ + i, (size_ - i) * sizeof(std::size_t));
    size_ += std::uint32_t(n);
    return i;
  }

  std::size_t* data_;
  std::uint32_t size_ = 0, capacity_ = kInline;
  std::size_t inline_[kInline];
};

}  // namespace xgrad
