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

// LayerNorm's settings by name: LayerNormOptions(dim).eps(1e-6).bias(false).
class LayerNormOptions {
 public:
  explicit LayerNormOptions(std::size_t dim) : dim_(dim) {}
  LayerNormOptions& eps(double e) { eps_ = e; return *this; }
  LayerNormOptions& bias(bool b) { bias_ = b; return *this; }  // false: weight only (nn.LayerNorm(bias=False))
  std::size_t dim() const { return dim_; }
  double eps() const { return eps_; }
  bool bias() const { return bias_; }

 private:
  std::size_t dim_;
  double eps_ = 1e-5;
  bool bias_ = true;
};

// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim (biased variance),
// weight = 1, bias = 0 (nn.LayerNorm); without bias: y = (x - mean) / sqrt(var + eps) * weight
// and no "bias" parameter (torch 2.1's nn.LayerNorm(dim, bias=False)).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(std::size_t dim, double eps = 1e-5);
  explicit LayerNorm(const LayerNormOptions& options);
  Tensor forward(const Tensor& x) const;
  Tensor weight, bias;  // bias undefined when options.bias(false)
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

// FeedForward's settings by name: FeedForwardOptions(dim, hidden).dropout(0.1).bias(false).
class FeedForwardOptions {
 public:
  FeedForwardOptions(std::size_t dim, std::size_t hidden) : dim_(dim), hidden_(hidden) {}
  FeedForwardOptions& dropout(double p) { dropout_ = p; return *this; }
  FeedForwardOptions& bias(bool b) { bias_ = b; return *this; }  // fc1.bias, fc2.bias
  // true: GELU's tanh approximation (GPT-2; torch's gelu(approximate='tanh')), else exact (erf)
  FeedForwardOptions& gelu_approximate_tanh(bool b) { gelu_tanh_ = b; return *this; }
  std::size_t dim() const { return dim_; }
  std::size_t hidden() const { return hidden_; }
  double dropout() const { return dropout_; }
  bool bias() const { return bias_; }
  bool gelu_approximate_tanh() const { return gelu_tanh_; }

 private:
  std::size_t dim_, hidden_;
  double dropout_ = 0.0;
  bool bias_ = true, gelu_tanh_ = false;
};

// Linear(dim, hidden) -> GELU -> Linear(hidden, dim) -> Dropout. GELU exact: x Phi(x);
// tanh approximation: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
class FeedForward : public Module {
 public:
  FeedForward(const FeedForwardOptions& options, Rng& rng);
  Tensor forward(const Tensor& x);
  Linear fc1, fc2;
  Dropout drop;
  bool gelu_approximate_tanh;
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
