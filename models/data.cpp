// Batch sampler and collate.
#include <algorithm>
#include <limits>
#include <numeric>

#include "xgrad/framework/array.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/models/data.hpp"

namespace xgrad {
namespace {

std::uint64_t splitmix64(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

BatchSamplerOptions& BatchSamplerOptions::shard(Count rank, Count world_size) {
  const std::size_t w = check_count("BatchSampler", "world_size", world_size);
  const std::size_t r = check_count("BatchSampler", "rank", rank, 0);
  if (r >= w) throw_error<ValueError>("BatchSampler", "argument 'rank' ", r, " must be < world_size ", w);
  rank_ = r;
  world_size_ = w;
  return *this;
}

BatchSampler::BatchSampler(Count num_examples, const BatchSamplerOptions& o)
    : n_(check_count("BatchSampler", "num_examples", num_examples)), options_(o) {
  const char* op = "BatchSampler";
  const std::size_t B = o.batch_size(), W = o.world_size(), tail = n_ % B;
  if (o.drop_last() && n_ < B)
    throw_error<ValueError>(op, "drop_last with batch_size ", B, " > num_examples ", n_, " leaves no batch");
  if (W > B)
    throw_error<ValueError>(op, "world_size ", W, " > batch_size ", B,
                            ": some rank would get no example of a batch (the batch is split among the ranks)");
  if (!o.drop_last() && tail != 0 && tail < W)
    throw_error<ValueError>(op, "the last batch of every epoch has num_examples % batch_size = ", n_, " % ", B, " = ",
                            tail, " examples, fewer than world_size ", W,
                            ": some rank would get none; use drop_last(true) or another batch size");
  batches_ = o.drop_last() ? n_ / B : (n_ + B - 1) / B;
  if (n_ > (std::size_t(1) << 40)) throw_error<ValueError>(op, "num_examples ", n_, " is more than 2^40");
  if (n_ > max_tensor_bytes() / sizeof(std::size_t))  // epoch_order's indices, before any is made
    throw_error<MemoryError>(op, "num_examples ", n_, ": an epoch's order (", n_, " indices of ", sizeof(std::size_t),
                             " bytes) takes more than max_tensor_bytes() = ", max_tensor_bytes(),
                             " (raise it with set_max_tensor_bytes or XGRAD_MAX_TENSOR_BYTES)");
}

std::uint64_t BatchSampler::epoch_seed(std::uint64_t seed, std::uint64_t epoch) {
  return splitmix64(splitmix64(seed) ^ epoch);
}

std::vector<std::size_t> BatchSampler::epoch_order(std::uint64_t epoch) const {
  std::vector<std::size_t> out(n_);
  std::iota(out.begin(), out.end(), std::size_t(0));
  if (options_.shuffle()) {
    Rng rng(epoch_seed(options_.seed(), epoch));
    rng.shuffle(out.begin(), out.end());
  }
  return out;
}

const std::vector<std::size_t>& BatchSampler::order(std::uint64_t epoch) {
  if (!cached_ || cached_epoch_ != epoch) {
    cached_order_ = epoch_order(epoch);
    cached_epoch_ = epoch;
    cached_ = true;
  }
  return cached_order_;
}

void BatchSampler::check_index(const char* op, std::uint64_t epoch, std::uint64_t index) const {
  if (index >= batches_)
    throw_error<IndexError>(op, "batch index ", index, " is out of range: an epoch has ", batches_,
                            batches_ == 1 ? " batch" : " batches");
  if (epoch > (std::numeric_limits<std::uint64_t>::max() - index) / batches_)
    throw_error<ValueError>(op, "epoch ", epoch, " batch ", index, ": the step number does not fit in 64 bits");
}

std::vector<std::size_t> BatchSampler::global_batch(std::uint64_t epoch, std::uint64_t index) {
  check_index("BatchSampler::global_batch", epoch, index);
  const auto& ord = order(epoch);
  const std::size_t B = options_.batch_size();
  const std::size_t begin = std::size_t(index) * B, end = std::min(begin + B, n_);
  return std::vector<std::size_t>(ord.begin() + std::ptrdiff_t(begin), ord.begin() + std::ptrdiff_t(end));
}

SampledBatch BatchSampler::batch(std::uint64_t epoch, std::uint64_t index) {
  check_index("BatchSampler::batch", epoch, index);
  const auto& ord = order(epoch);
  const std::size_t B = options_.batch_size(), W = options_.world_size(), r = options_.rank();
  const std::size_t begin = std::size_t(index) * B, n = std::min(begin + B, n_) - begin;
  const std::size_t q = n / W, m = n % W;
  SampledBatch out;
  out.epoch = epoch;
  out.index = index;
  out.step = epoch * batches_ + index;
  out.global_size = n;
  out.offset = r * q + std::min(r, m);
  const std::size_t count = q + (r < m ? 1 : 0);
  const auto first = ord.begin() + std::ptrdiff_t(begin + out.offset);
  out.indices.assign(first, first + std::ptrdiff_t(count));
  return out;
}

SampledBatch BatchSampler::batch_at(std::uint64_t step) { return batch(step / batches_, step % batches_); }

SampledBatch BatchSampler::next() {
  SampledBatch b = batch_at(position_);
  ++position_;
  return b;
}

void BatchSampler::seek(std::uint64_t epoch, std::uint64_t index) {
  check_index("BatchSampler::seek", epoch, index);
  position_ = epoch * batches_ + index;
}

namespace {
template <class T>
Tensor gather_rows(const Tensor& data, const std::vector<std::size_t>& indices, const Shape& shape, std::size_t row) {
  Tensor out = empty_tensor<T>(shape, "collate");
  const T* src = data.data<T>();
  T* dst = fresh_data<T>(out);
  for (std::size_t i = 0; i < indices.size(); ++i) std::copy_n(src + indices[i] * row, row, dst + i * row);
  return out;
}
}  // namespace

Tensor collate(const Tensor& data, const std::vector<std::size_t>& indices) {
  const char* op = "collate";
  if (!data.defined()) throw_error<ValueError>(op, "argument 'data' is an undefined tensor");
  if (data.dim() == 0) throw_error<ShapeError>(op, "argument 'data' () must have a first axis of examples (N, ...)");
  const std::size_t N = data.shape()[0];
  for (std::size_t i = 0; i < indices.size(); ++i)
    if (indices[i] >= N)
      throw_error<IndexError>(op, "index ", indices[i], " at position ", i, " of argument 'indices' is out of range for ",
                              N, " rows of argument 'data' ", data.shape());
  Shape shape = data.shape();
  shape[0] = indices.size();
  const std::size_t row = N == 0 ? 0 : data.numel() / N;
  switch (data.dtype()) {
    case DType::Float32: return gather_rows<float>(data, indices, shape, row);
    case DType::Float64: return gather_rows<double>(data, indices, shape, row);
    case DType::Int64: return gather_rows<std::int64_t>(data, indices, shape, row);
    case DType::Bool: return gather_rows<bool>(data, indices, shape, row);
  }
  throw_error<DTypeError>(op, "argument 'data' has an unknown dtype");
}

}  // namespace xgrad
