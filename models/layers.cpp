// Basic layers.
#include <algorithm>
#include <cmath>
#include <string>

#include "xgrad/models/layers.hpp"
#include "xgrad/ops/ops.hpp"

namespace xgrad {

std::size_t check_count(const char* module, const char* arg, Count n, std::size_t min) {
  if (n.negative() || n.size() < min)
    throw_error<ValueError>(module, "argument '", arg, "' must be >= ", min, ", got ", n.negative() ? "-" : "",
                            n.magnitude());
  return n.size();
}

double check_dropout(const char* module, const char* arg, double p) {
  if (!(p >= 0 && p < 1)) throw_error<ValueError>(module, "argument '", arg, "' must be in [0, 1), got ", p);
  return p;
}

void check_parameter_size(const char* module, const char* param, const char* dims, const Shape& shape) {
  const std::string op = std::string(module) + ": parameter '" + param + "' " + dims;
  check_tensor_size(op.c_str(), shape, DType::Float32);
}

Linear::Linear(Count in_features, Count out_features, bool has_bias, Rng& rng) {
  const std::size_t in = check_count("Linear", "in_features", in_features);
  const std::size_t out = check_count("Linear", "out_features", out_features);
  check_parameter_size("Linear", "weight", "(out_features, in_features)", {out, in});
  const double bound = 1.0 / std::sqrt(double(in));
  weight = uniform({out, in}, -bound, bound, rng);
  register_parameter("weight", &weight);
  if (has_bias) {
    bias = uniform({out}, -bound, bound, rng);
    register_parameter("bias", &bias);
  }
}
Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

EmbeddingOptions& EmbeddingOptions::padding_idx(long long k) {
  const long long n = static_cast<long long>(num_);
  if (k < -n || k >= n)
    throw_error<ValueError>("Embedding", "argument 'padding_idx' ", k, " must be in [-", num_, ", ", num_,
                            ") for num_embeddings ", num_);
  padding_ = static_cast<std::size_t>(k < 0 ? k + n : k);
  has_padding_ = true;
  return *this;
}

Embedding::Embedding(Count num, Count dim, Rng& rng) : Embedding(EmbeddingOptions(num, dim), rng) {}

Embedding::Embedding(const EmbeddingOptions& o, Rng& rng)
    : has_padding_idx(o.has_padding_idx()), padding_idx(o.padding_idx()) {
  const std::size_t num = o.num_embeddings(), dim = o.dim();
  check_parameter_size("Embedding", "weight", "(num_embeddings, dim)", {num, dim});
  weight = randn({num, dim}, rng);
  if (has_padding_idx) std::fill_n(weight.mutable_data<float>() + padding_idx * dim, dim, 0.0f);
  register_parameter("weight", &weight);
}

// With padding_idx k: the lookup reads where(row == k, W.detach(), W), equal to W in value
// but with no path from row k to the output, so dL/dW[k] = 0 (also at second order).
Tensor Embedding::forward(const Tensor& indices) const {
  if (!has_padding_idx) return embedding(weight, indices);
  const std::size_t num = weight.shape()[0];
  std::vector<bool> pad(num, false);
  pad[padding_idx] = true;
  return embedding(where(bool_tensor(pad, {num, 1}), weight.detach(), weight), indices);
}

LayerNormOptions& LayerNormOptions::eps(double e) {
  if (!(e > 0) || !std::isfinite(e))
    throw_error<ValueError>("LayerNorm", "argument 'eps' must be finite and > 0, got ", e);
  eps_ = e;
  return *this;
}

LayerNorm::LayerNorm(Count dim, double eps_) : LayerNorm(LayerNormOptions(dim).eps(eps_)) {}

LayerNorm::LayerNorm(const LayerNormOptions& o) : eps(o.eps()) {
  if (!o.elementwise_affine()) return;
  check_parameter_size("LayerNorm", "weight", "(dim)", {o.dim()});
  weight = ones({o.dim()});
  register_parameter("weight", &weight);
  if (o.bias()) {
    bias = zeros({o.dim()});
    register_parameter("bias", &bias);
  }
}
Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }

Tensor dropout(const Tensor& x, double p, bool training, Rng& rng) {
  check_dropout("dropout", "p", p);
  if (!training || p == 0) return x;
  check_float("dropout", "x", x);
  std::vector<double> m(x.numel());
  for (auto& v : m) v = rng.bernoulli(1 - p) ? 1.0 / (1 - p) : 0.0;
  return mul(x, tensor(m, x.shape(), x.dtype()));
}

Dropout::Dropout(double p_, std::uint64_t seed) : p(check_dropout("Dropout", "p", p_)), rng_(seed) {}
Tensor Dropout::forward(const Tensor& x) const { return dropout(x, p, training(), rng_); }

FeedForward::FeedForward(const FeedForwardOptions& o, Rng& rng)
    : fc1(o.dim(), o.hidden(), o.bias(), rng),
      fc2(o.hidden(), o.dim(), o.bias(), rng),
      drop(o.dropout(), rng()),
      gelu_approximate_tanh(o.gelu_approximate_tanh()) {
  register_module("fc1", &fc1);
  register_module("fc2", &fc2);
  register_module("drop", &drop);
}
Tensor FeedForward::forward(const Tensor& x) const {
  const Tensor h = fc1.forward(x);
  return drop.forward(fc2.forward(gelu(h, gelu_approximate_tanh ? GeluApproximation::Tanh : GeluApproximation::None)));
}

// x (B, T, dim) float with offset + T <= max_len, for a table (max_len, dim).
static void check_positions(const char* op, const Tensor& x, const Shape& table, std::size_t offset) {
  check_float(op, "x", x);
  if (x.dim() != 3 || x.shape()[2] != table[1] || x.shape()[1] > table[0] || offset > table[0] - x.shape()[1])
    throw_error<ShapeError>(op, "argument 'x' ", x.shape(), " must be (B, T, ", table[1], ") with ",
                            offset ? "offset + T <= " : "T <= ", table[0], offset ? " (offset " : "",
                            offset ? std::to_string(offset) + ")" : "");
}

LearnedPositionalEncoding::LearnedPositionalEncoding(Count max_len_, Count dim_, Rng& rng) {
  const std::size_t max_len = check_count("LearnedPositionalEncoding", "max_len", max_len_);
  const std::size_t dim = check_count("LearnedPositionalEncoding", "dim", dim_);
  check_parameter_size("LearnedPositionalEncoding", "weight", "(max_len, dim)", {max_len, dim});
  weight = randn({max_len, dim}, rng);
  register_parameter("weight", &weight);
}
Tensor LearnedPositionalEncoding::forward(const Tensor& x, std::size_t offset) const {
  check_positions("LearnedPositionalEncoding", x, weight.shape(), offset);
  return add(x, narrow(weight, 0, offset, x.shape()[1]));
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(Count max_len_, Count dim_) {
  const std::size_t max_len = check_count("SinusoidalPositionalEncoding", "max_len", max_len_);
  const std::size_t dim = check_count("SinusoidalPositionalEncoding", "dim", dim_);
  check_parameter_size("SinusoidalPositionalEncoding", "table", "(max_len, dim)", {max_len, dim});
  std::vector<double> pe(max_len * dim);
  for (std::size_t t = 0; t < max_len; ++t)
    for (std::size_t i = 0; i < dim; ++i) {
      const double freq = std::pow(10000.0, -double(i - i % 2) / double(dim));
      pe[t * dim + i] = i % 2 == 0 ? std::sin(double(t) * freq) : std::cos(double(t) * freq);
    }
  table_ = tensor(pe, {max_len, dim}, DType::Float64);
}
Tensor SinusoidalPositionalEncoding::forward(const Tensor& x, std::size_t offset) const {
  check_positions("SinusoidalPositionalEncoding", x, table_.shape(), offset);
  return add(x, narrow(table_, 0, offset, x.shape()[1]).to(x.dtype()));
}

}  // namespace xgrad
