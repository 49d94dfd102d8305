// xgrad/models/layers.hpp — basic layers, each initialised as its PyTorch counterpart.
//
// Every layer is built from registered ops only, so it is differentiable twice with no
// backward of its own. Constructors take an Rng for deterministic initialisation. Every
// layer here is a UnaryModule (models/module.hpp): layer(x) is layer.forward(x), and a
// Sequential (models/containers.hpp) chains them.
#pragma once
#include <climits>
#include <type_traits>

#include "xgrad/models/module.hpp"
#include "xgrad/ops/norm.hpp"   // layer_norm, the functional form of LayerNorm
#include "xgrad/ops/unary.hpp"  // relu, gelu, tanh, sigmoid: the activation modules

namespace xgrad {

// A size argument (dims, heads, hidden widths, lengths): constructible from integral non-bool
// types only, so a double or a bool passed where a size belongs does not compile
// (TransformerBlockOptions(64, 4, 0.1), MultiHeadAttentionOptions(64, 4.5)). Negative values
// are kept and rejected by check_count with the module's and the argument's name.
class Count {
 public:
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  constexpr Count(T v) {  // implicit: Linear(4, 8, true, rng)
    if constexpr (std::is_signed_v<T>) {
      negative_ = v < 0;
      magnitude_ = negative_ ? 0 - static_cast<unsigned long long>(v) : static_cast<unsigned long long>(v);
    } else {
      magnitude_ = static_cast<unsigned long long>(v);
    }
  }
  constexpr bool negative() const { return negative_; }
  constexpr unsigned long long magnitude() const { return magnitude_; }  // |value|, exactly
  constexpr std::size_t size() const { return negative_ ? 0 : static_cast<std::size_t>(magnitude_); }

 private:
  bool negative_ = false;
  unsigned long long magnitude_ = 0;
};

// ValueError "<module>: argument '<arg>' must be >= <min>, got <n>" unless n >= min; returns n.
std::size_t check_count(const char* module, const char* arg, Count n, std::size_t min = 1);
// ValueError naming module and arg unless 0 <= p < 1 (a dropout probability).
double check_dropout(const char* module, const char* arg, double p);
// Before a module allocates the float parameter `param` of `shape` (sizes the user chose):
// check_tensor_size with "module: parameter 'param' (what the dims are)" as the op, so an
// absurd size fails naming the module, the parameter and the shape (ValueError over 2^40
// elements, MemoryError over max_tensor_bytes()).
void check_parameter_size(const char* module, const char* param, const char* dims, const Shape& shape);

// Enables a deleted overload for every non-bool B, so a flag is taken from a bool only
// (Linear(4, 8, 0.5, rng) picks the deleted overload instead of converting 0.5 to true).
template <class B>
using EnableIfNotBool = std::enable_if_t<!std::is_same_v<std::decay_t<B>, bool>, int>;

// y = x W^T + b. W (out, in) and b (out) ~ U(-1/sqrt(in), 1/sqrt(in)) (nn.Linear).
class Linear : public UnaryModule {
 public:
  // in_features, out_features >= 1 (ValueError).
  Linear(Count in_features, Count out_features, bool bias, Rng& rng);
  template <class B, EnableIfNotBool<B> = 0>
  Linear(Count, Count, B, Rng&) = delete;  // bias only from a bool
  Tensor forward(const Tensor& x) const override;
  Tensor weight, bias;  // bias undefined when bias = false
};

// Embedding's settings by name: EmbeddingOptions(num_embeddings, dim).padding_idx(0).
class EmbeddingOptions {
 public:
  EmbeddingOptions(Count num_embeddings, Count dim)
      : num_(check_count("Embedding", "num_embeddings", num_embeddings)), dim_(check_count("Embedding", "dim", dim)) {}
  // nn.Embedding(num, dim, padding_idx=k): row k starts at zero and never receives a gradient.
  // k in [-num, num); negative counts from the end (stored as num + k, as PyTorch).
  EmbeddingOptions& padding_idx(long long k);
  std::size_t num_embeddings() const { return num_; }
  std::size_t dim() const { return dim_; }
  bool has_padding_idx() const { return has_padding_; }
  std::size_t padding_idx() const { return padding_; }

 private:
  std::size_t num_, dim_;
  bool has_padding_ = false;
  std::size_t padding_ = 0;
};

// y = W[idx]. W (num, dim) ~ N(0, 1) (nn.Embedding); with padding_idx k, W[k] = 0 at
// construction and the gradient of W[k] is always zero (its value is still looked up).
// Out-of-range indices: IndexError. num_embeddings, dim >= 1 (ValueError).
class Embedding : public UnaryModule {
 public:
  Embedding(Count num_embeddings, Count dim, Rng& rng);
  Embedding(const EmbeddingOptions& options, Rng& rng);
  Tensor forward(const Tensor& indices) const override;  // int64 (...) -> (..., dim)
  Tensor weight;
  bool has_padding_idx = false;
  std::size_t padding_idx = 0;
};

// LayerNorm's settings by name: LayerNormOptions(dim).eps(1e-6).bias(false).
// dim >= 1 and eps > 0 (finite) are checked here (ValueError naming LayerNorm).
class LayerNormOptions {
 public:
  explicit LayerNormOptions(Count dim) : dim_(check_count("LayerNorm", "dim", dim)) {}
  LayerNormOptions& eps(double e);
  LayerNormOptions& bias(bool b) { bias_ = b; return *this; }  // false: weight only (nn.LayerNorm(bias=False))
  // false: no weight and no bias parameter, y = (x - mean) / sqrt(var + eps)
  // (nn.LayerNorm(dim, elementwise_affine=False)).
  LayerNormOptions& elementwise_affine(bool a) { affine_ = a; return *this; }
  std::size_t dim() const { return dim_; }
  double eps() const { return eps_; }
  bool bias() const { return bias_; }
  bool elementwise_affine() const { return affine_; }

 private:
  std::size_t dim_;
  double eps_ = 1e-5;
  bool bias_ = true, affine_ = true;
};

// y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim (biased variance),
// weight = 1, bias = 0 (nn.LayerNorm); without bias: y = (x - mean) / sqrt(var + eps) * weight
// and no "bias" parameter (torch 2.1's nn.LayerNorm(dim, bias=False)); without elementwise
// affine: y = (x - mean) / sqrt(var + eps), no parameters.
class LayerNorm : public UnaryModule {
 public:
  explicit LayerNorm(Count dim, double eps = 1e-5);
  explicit LayerNorm(const LayerNormOptions& options);
  Tensor forward(const Tensor& x) const override;
  Tensor weight, bias;  // bias undefined when options.bias(false); both when !elementwise_affine
  double eps;
};

// In training mode zeroes each element with probability p and scales the rest by
// 1 / (1 - p); identity in eval mode or when p = 0. Seeded, so runs repeat exactly (the
// mask comes from Rng::bernoulli: the same with every standard library). forward is const
// like every UnaryModule's; the mask generator is mutable (a forward in training mode
// advances it), so one Dropout must not run forward in two threads at once.
class Dropout : public UnaryModule {
 public:
  Dropout(double p, std::uint64_t seed);  // ValueError unless 0 <= p < 1
  template <class S, std::enable_if_t<!std::is_integral_v<S> || std::is_same_v<S, bool>, int> = 0>
  Dropout(double, S) = delete;  // a seed only from an integer: Dropout(0.1, true) does not compile
  Tensor forward(const Tensor& x) const override;
  double p;
 private:
  mutable Rng rng_;
};

// FeedForward's settings by name: FeedForwardOptions(dim, hidden).dropout(0.1).bias(false).
// dim, hidden >= 1 and 0 <= dropout < 1 are checked here (ValueError naming FeedForward).
class FeedForwardOptions {
 public:
  FeedForwardOptions(Count dim, Count hidden)
      : dim_(check_count("FeedForward", "dim", dim)), hidden_(check_count("FeedForward", "hidden", hidden)) {}
  FeedForwardOptions& dropout(double p) { dropout_ = check_dropout("FeedForward", "dropout", p); return *this; }
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
class FeedForward : public UnaryModule {
 public:
  FeedForward(const FeedForwardOptions& options, Rng& rng);
  Tensor forward(const Tensor& x) const override;
  Linear fc1, fc2;
  Dropout drop;
  bool gelu_approximate_tanh;
};

// Adds a learned position embedding (max_len, dim) ~ N(0, 1) to x (B, T, dim).
class LearnedPositionalEncoding : public UnaryModule {
 public:
  LearnedPositionalEncoding(Count max_len, Count dim, Rng& rng);  // both >= 1
  Tensor forward(const Tensor& x) const override { return forward(x, 0); }
  // Positions [offset, offset + T) (incremental decoding); ShapeError when offset + T > max_len.
  Tensor forward(const Tensor& x, std::size_t offset) const;
  Tensor weight;
};

// Adds the fixed sinusoidal table of "Attention is all you need" to x (B, T, dim):
// pe[t, 2i] = sin(t / 10000^(2i/dim)), pe[t, 2i+1] = cos(t / 10000^(2i/dim)). No parameters.
class SinusoidalPositionalEncoding : public UnaryModule {
 public:
  SinusoidalPositionalEncoding(Count max_len, Count dim);  // both >= 1
  Tensor forward(const Tensor& x) const override { return forward(x, 0); }
  // Positions [offset, offset + T) (incremental decoding); ShapeError when offset + T > max_len.
  Tensor forward(const Tensor& x, std::size_t offset) const;
  Tensor table() const { return table_; }
 private:
  Tensor table_;  // (max_len, dim), float64; converted to x's dtype on use
};

// Activations as modules (no parameters), for Sequential: torch.nn.ReLU, GELU, Tanh, Sigmoid.
class ReLU : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) const override { return relu(x); }
};
// GELU() is exact (x Phi(x)), GELU(GeluApproximation::Tanh) is nn.GELU(approximate='tanh').
class GELU : public UnaryModule {
 public:
  explicit GELU(GeluApproximation approximate = GeluApproximation::None) : approximate(approximate) {}
  Tensor forward(const Tensor& x) const override { return gelu(x, approximate); }
  GeluApproximation approximate;
};
class Tanh : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) const override { return tanh(x); }
};
class Sigmoid : public UnaryModule {
 public:
  Tensor forward(const Tensor& x) const override { return sigmoid(x); }
};

// Functional forms.
Tensor dropout(const Tensor& x, double p, bool training, Rng& rng);

}  // namespace xgrad
