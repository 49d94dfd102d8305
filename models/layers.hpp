// xgrad/models/layers.hpp — basic layers, each initialised as its PyTorch counterpart.
//
// Every layer is built from registered ops only, so it is differentiable twice with no
// backward of its own. Constructors take an Rng for deterministic initialisation.
#pragma once
#include "xgrad/models/module.hpp"
#include "xgrad/ops/norm.hpp"  // layer_norm, the functional form of LayerNorm

namespace xgrad {

// y = x W^T + b. W (out, in) and b (out) ~ U(-1/sqrt(in), 1/sqrt(in)) (nn.Linear).
class Linear : public Module {
 public:
  Linear(std::size_t in_features, std::size_t out_features, bool bias, Rng& rng);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // bias undefined when bias = false
};

// y = W[idx]. W (num, dim) ~ N(0, 1) (nn.Embedding). Out-of-range indices: IndexError.
class Embedding : public Module {
 public:
  Embedding(std::size_t num_embeddings, std::size_t dim, Rng& rng);
  Tensor forward(const Tensor& indices) const;
  Tensor weight;
};

// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim (biased variance),
// weight = 1, bias = 0 (nn.LayerNorm).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::size_t dim, double eps = 1e-5);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;
  double eps;
};

// In training mode zeroes each element with probability p and scales the rest by
// 1 / (1 - p); identity in eval mode or when p = 0. Seeded, so runs repeat exactly (the
// mask comes from Rng::bernoulli: the same with every standard library).
class Dropout : public Module {
 public:
  Dropout(double p, std::uint64_t seed);
  Tensor forward(const Tensor& x);
  double p;
 private:
  Rng rng_;
};

// Linear(dim, hidden) -> GELU -> Linear(hidden, dim) -> Dropout.
class FeedForward : public Module {
 public:
  FeedForward(std::size_t dim, std::size_t hidden, double dropout, Rng& rng);
  Tensor forward(const Tensor& x);
  Linear fc1, fc2;
  Dropout drop;
};

// Adds a learned position embedding (max_len, dim) ~ N(0, 1) to x (B, T, dim).
class LearnedPositionalEncoding : public Module {
 public:
  LearnedPositionalEncoding(std::size_t max_len, std::size_t dim, Rng& rng);
  Tensor forward(const Tensor& x) const;
  Tensor weight;
};

// Adds the fixed sinusoidal table of "Attention is all you need" to x (B, T, dim):
// pe[t, 2i] = sin(t / 10000^(2i/dim)), pe[t, 2i+1] = cos(t / 10000^(2i/dim)). No parameters.
class SinusoidalPositionalEncoding : public Module {
 public:
  SinusoidalPositionalEncoding(std::size_t max_len, std::size_t dim);
  Tensor forward(const Tensor& x) const;
  Tensor table() const { return table_; }
 private:
  Tensor table_;  // (max_len, dim), float64; converted to x's dtype on use
};

// Functional forms.
Tensor dropout(const Tensor& x, double p, bool training, Rng& rng);

}  // namespace xgrad
