// xgrad/framework/curvature.hpp — the Hessian's spectrum and trace, the gradient-noise scale.
//
//   HessianOperator H(f, x)         v -> H v for a scalar f at x: the forward and the first
//                                   backward (with create_graph) run once, each product is one
//                                   backward of <grad f, v> on the retained graph
//   lanczos(H, x, {k})              top-k eigenvalues (and vectors) of a symmetric operator:
//                                   Lanczos with full reorthogonalisation, restarted on an
//                                   invariant subspace; stops when every wanted Ritz pair's
//                                   residual ||A y - theta y|| <= tol * max|theta|
//   hutchinson_trace(H, x, {n})     tr(H) ~ mean of v^T H v over n Rademacher probes v
//                                   (+-1 entries from a seeded Rng), with its standard error
//   gradient_noise_scale(g)         B_simple = tr(Sigma) / |G|^2 (McCandlish et al. 2018,
//                                   "An Empirical Model of Large-Batch Training") from
//                                   per-sample gradients (per_sample_gradients)
//
// Operators act on lists of tensors shaped like `like` (the inputs, e.g. a model's
// parameters); vectors are handled as one flat float64 vector internally.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "xgrad/framework/functional.hpp"

namespace xgrad {

// A symmetric linear operator on lists of tensors (one per input, each of its shape and dtype).
using LinearOperator = std::function<Tensors(const Tensors&)>;

class HessianOperator {
 public:
  // f returns one element (ValueError otherwise); inputs as for hessian() (functional.hpp).
  // Keeps f's graph and its gradient's graph alive as long as the operator lives.
  HessianOperator(const TensorFn& f, const Tensors& inputs, const FunctionalOptions& options = {});
  // H v (as v^T H: the Hessian of a twice-differentiable f is symmetric). v like the inputs.
  Tensors operator()(const Tensors& v) const;
  const Tensor& value() const { return value_; }        // f(inputs), detached
  const Tensors& gradient() const { return detached_; }  // grad f(inputs), detached
  const Tensors& inputs() const { return xs_; }         // shapes and dtypes of the vectors
  std::size_t products() const { return *products_; }   // H v computed so far (all copies)

 private:
  Tensors xs_, gradient_, detached_;
  Tensor value_;
  std::shared_ptr<std::size_t> products_;
};

enum class SpectrumEnd { Largest, LargestMagnitude };

struct LanczosOptions {
  std::size_t k = 1;                // eigenvalues wanted
  std::size_t max_iterations = 30;  // Krylov dimension m >= k (capped at the operator's size)
  double tol = 1e-6;                // relative residual at which a Ritz pair counts as converged
  std::uint64_t seed = 0;           // the start vector, N(0, 1) from Rng(seed)
  SpectrumEnd which = SpectrumEnd::Largest;  // algebraic (the sharpness), or by |lambda|
  bool eigenvectors = false;        // also return the Ritz vectors
};

struct LanczosResult {
  std::vector<double> eigenvalues;    // k, descending (by |lambda| for LargestMagnitude)
  std::vector<double> residuals;      // ||A y - theta y|| of each, y of unit norm
  std::vector<Tensors> eigenvectors;  // with options.eigenvectors: unit vectors, like `like`
  std::vector<double> ritz_values;    // every Ritz value of the last step, descending
  std::size_t iterations = 0;         // operator applications
  bool converged = false;             // every wanted residual <= tol * max |ritz value|
};

// Memory: the Krylov basis, m vectors of as many doubles as `like` has elements, is checked
// against max_tensor_bytes() before the first product (MemoryError). ValueError: op empty
// ("lanczos: no function given"), k == 0,
// k > max_iterations, k larger than the operator's size, tol not in (0, 1), the operator
// returning NaN or inf, or vectors not shaped like `like`.
LanczosResult lanczos(const LinearOperator& op, const Tensors& like, const LanczosOptions& options = {});

struct HutchinsonOptions {
  std::size_t samples = 32;  // probes, >= 1
  std::uint64_t seed = 0;    // Rademacher entries from Rng(seed)
};

struct TraceEstimate {
  double trace = 0;      // mean of v^T A v
  double std_error = 0;  // sample standard deviation / sqrt(samples); inf for one sample
  std::size_t samples = 0;
  std::vector<double> values;  // v^T A v per probe
};

// E[v^T A v] = tr(A) for v with independent +-1 entries; Var = 2 sum_{i != j} A_ij^2.
// ValueError: op empty ("hutchinson_trace: no function given"), samples == 0, `like` empty,
// the operator returning NaN or inf or another count of tensors; ShapeError / DTypeError: a
// result not shaped like its tensor of `like`.
TraceEstimate hutchinson_trace(const LinearOperator& op, const Tensors& like, const HutchinsonOptions& options = {});

struct NoiseScale {
  std::size_t batch = 0;         // B, the number of per-sample gradients
  double trace_sigma = 0;        // tr(Sigma) = sum_i |g_i - mean g|^2 / (B - 1) (unbiased)
  double mean_grad_sq_norm = 0;  // |mean g|^2, whose expectation is |G|^2 + tr(Sigma) / B
  double grad_sq_norm = 0;       // |G|^2 ~ |mean g|^2 - tr(Sigma) / B (unbiased; may be <= 0)
  double b_simple = 0;           // tr(Sigma) / |G|^2; inf when the |G|^2 estimate is <= 0 (noise dominates)
};

// per_sample: for each parameter, a (B, ...) tensor of per-example gradients of one B, B >= 2
// (ShapeError / ValueError otherwise), e.g. per_sample_gradients(...).grads.
NoiseScale gradient_noise_scale(const NamedTensors& per_sample);

}  // namespace xgrad
