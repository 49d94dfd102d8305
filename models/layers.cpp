// Basic layers.
#include <cmath>

#include "xgrad/models/layers.hpp"
#include "xgrad/ops/ops.hpp"

namespace xgrad {

Linear::Linear(std::size_t in, std::size_t out, bool has_bias, Rng& rng) {
  const double bound = 1.0 / std::sqrt(double(std::max<std::size_t>(in, 1)));
  weight = uniform({out, in}, -bound, bound, rng);
  register_parameter("weight", &weight);
  if (has_bias) {
    bias = uniform({out}, -bound, bound, rng);
    register_parameter("bias", &bias);
  }
}
Tensor Linear::forward(const Tensor& x) const { return linear(x, weight, bias); }

Embedding::Embedding(std::size_t num, std::size_t dim, Rng& rng) {
  weight = randn({num, dim}, rng);
  register_parameter("weight", &weight);
}
Tensor Embedding::forward(const Tensor& indices) const { return embedding(weight, indices); }

LayerNorm::LayerNorm(std::size_t dim, double eps_) : LayerNorm(LayerNormOptions(dim).eps(eps_)) {}

LayerNorm::LayerNorm(const LayerNormOptions& o) : eps(o.eps()) {
  weight = ones({o.dim()});
  register_parameter("weight", &weight);
  if (o.bias()) {
    bias = zeros({o.dim()});
    register_parameter("bias", &bias);
  }
}
Tensor LayerNorm::forward(const Tensor& x) const { return layer_norm(x, weight, bias, eps); }

Tensor dropout(const Tensor& x, double p, bool training, Rng& rng) {
  if (!(p >= 0 && p < 1)) throw_error<ValueError>("dropout", "argument 'p' must be in [0, 1), got ", p);
  if (!training || p == 0) return x;
  check_float("dropout", "x", x);
  std::vector<double> m(x.numel());
  for (auto& v : m) v = rng.bernoulli(1 - p) ? 1.0 / (1 - p) : 0.0;
  return mul(x, tensor(m, x.shape(), x.dtype()));
}

Dropout::Dropout(double p_, std::uint64_t seed) : p(p_), rng_(seed) {
  if (!(p >= 0 && p < 1)) throw_error<ValueError>("Dropout", "argument 'p' must be in [0, 1), got ", p);
}
Tensor Dropout::forward(const Tensor& x) { return dropout(x, p, training(), rng_); }

FeedForward::FeedForward(const FeedForwardOptions& o, Rng& rng)
    : fc1(o.dim(), o.hidden(), o.bias(), rng),
      fc2(o.hidden(), o.dim(), o.bias(), rng),
      drop(o.dropout(), rng()),
      gelu_approximate_tanh(o.gelu_approximate_tanh()) {
  register_module("fc1", &fc1);
  register_module("fc2", &fc2);
  register_module("drop", &drop);
}
Tensor FeedForward::forward(const Tensor& x) {
  const Tensor h = fc1.forward(x);
  return drop.forward(fc2.forward(gelu(h, gelu_approximate_tanh ? GeluApproximation::Tanh : GeluApproximation::None)));
}

static void check_positions(const char* op, const Tensor& x, const Shape& table) {
  check_float(op, "x", x);
  if (x.dim() != 3 || x.shape()[2] != table[1] || x.shape()[1] > table[0])
    throw_error<ShapeError>(op, "argument 'x' ", x.shape(), " must be (B, T, ", table[1], ") with T <= ", table[0]);
}

LearnedPositionalEncoding::LearnedPositionalEncoding(std::size_t max_len, std::size_t dim, Rng& rng) {
  weight = randn({max_len, dim}, rng);
  register_parameter("weight", &weight);
}
Tensor LearnedPositionalEncoding::forward(const Tensor& x) const {
  check_positions("LearnedPositionalEncoding", x, weight.shape());
  return add(x, narrow(weight, 0, 0, x.shape()[1]));
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(std::size_t max_len, std::size_t dim) {
  std::vector<double> pe(max_len * dim);
  for (std::size_t t = 0; t < max_len; ++t)
    for (std::size_t i = 0; i < dim; ++i) {
      const double freq = std::pow(10000.0, -double(i - i % 2) / double(dim));
      pe[t * dim + i] = i % 2 == 0 ? std::sin(double(t) * freq) : std::cos(double(t) * freq);
    }
  table_ = tensor(pe, {max_len, dim}, DType::Float64);
}
Tensor SinusoidalPositionalEncoding::forward(const Tensor& x) const {
  check_positions("SinusoidalPositionalEncoding", x, table_.shape());
  return add(x, narrow(table_, 0, 0, x.shape()[1]).to(x.dtype()));
}

}  // namespace xgrad
