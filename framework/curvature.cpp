// Hessian operator, Lanczos, Hutchinson's trace estimate, gradient-noise scale (curvature.hpp).
#include "xgrad/framework/curvature.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "xgrad/framework/functional_detail.hpp"

namespace xgrad {

using namespace functional_detail;

// --- Hessian operator -----------------------------------------------------------------------

HessianOperator::HessianOperator(const TensorFn& f, const Tensors& inputs, const FunctionalOptions& options)
    : products_(std::make_shared<std::size_t>(0)) {
  FunctionalOptions o = options;
  o.create_graph = false;  // fresh leaves: products are never differentiated further
  GradientGraph g = gradient_graph("HessianOperator", f, inputs, nullptr, o);
  xs_ = std::move(g.xs);
  gradient_ = std::move(g.gs);
  value_ = g.y.detach();
  for (std::size_t i = 0; i < xs_.size(); ++i)
    detached_.push_back(gradient_[i].defined() ? gradient_[i].detach() : zeros_like(xs_[i]));
}

Tensors HessianOperator::operator()(const Tensors& v) const {
  check_vectors("HessianOperator", "vector", v, xs_);
  EnableGradGuard grad_on;  // <grad f, v> is recorded even inside NoGradGuard
  ++*products_;
  const Tensor s = inner(gradient_, v, value_.dtype());
  Tensors hv(xs_.size());
  if (s.defined()) hv = grad({s}, xs_, {}, GradOptions{true, false, true});
  return fill_zeros(hv, xs_);
}

// --- Lanczos -----------------------------------------------------------------------------------

namespace {

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}
void axpy(double alpha, const std::vector<double>& x, std::vector<double>& y) {  // y += alpha x
  for (std::size_t i = 0; i < x.size(); ++i) y[i] += alpha * x[i];
}
double norm(const std::vector<double>& a) { return std::sqrt(dot(a, a)); }

// Eigen-decomposition of a small dense symmetric n x n matrix (row-major) by cyclic Jacobi
// rotations: values ascending, vectors[i * n + j] = component i of eigenvector j. Accurate to
// rounding for every eigenvalue; O(n^3) per sweep, a few sweeps (n is the Krylov dimension).
void symmetric_eigen(std::vector<double> A, std::size_t n, std::vector<double>& values, std::vector<double>& vectors) {
  vectors.assign(n * n, 0.0);
  for (std::size_t i = 0; i < n; ++i) vectors[i * n + i] = 1.0;
  for (int sweep = 0; sweep < 100; ++sweep) {
    double off = 0, diag = 0;
    for (std::size_t p = 0; p < n; ++p) {
      diag += A[p * n + p] * A[p * n + p];
      for (std::size_t q = p + 1; q < n; ++q) off += A[p * n + q] * A[p * n + q];
    }
    if (off <= 1e-32 * diag || off == 0) break;
    for (std::size_t p = 0; p < n; ++p)
      for (std::size_t q = p + 1; q < n; ++q) {
        const double apq = A[p * n + q];
        if (apq == 0) continue;
        const double theta = (A[q * n + q] - A[p * n + p]) / (2 * apq);
        const double t = (theta >= 0 ? 1.0 : -1.0) / (std::abs(theta) + std::sqrt(theta * theta + 1));
        const double c = 1 / std::sqrt(t * t + 1), s = t * c;
        for (std::size_t r = 0; r < n; ++r) {  // A <- A J (columns p, q)
          const double arp = A[r * n + p], arq = A[r * n + q];
          A[r * n + p] = c * arp - s * arq;
          A[r * n + q] = s * arp + c * arq;
        }
        for (std::size_t r = 0; r < n; ++r) {  // A <- J^T A (rows p, q)
          const double apr = A[p * n + r], aqr = A[q * n + r];
          A[p * n + r] = c * apr - s * aqr;
          A[q * n + r] = s * apr + c * aqr;
        }
        for (std::size_t r = 0; r < n; ++r) {  // V <- V J
          const double vrp = vectors[r * n + p], vrq = vectors[r * n + q];
          vectors[r * n + p] = c * vrp - s * vrq;
          vectors[r * n + q] = s * vrp + c * vrq;
        }
      }
  }
  std::vector<std::size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return A[a * n + a] < A[b * n + b]; });
  values.resize(n);
  std::vector<double> sorted(n * n);
  for (std::size_t j = 0; j < n; ++j) {
    values[j] = A[order[j] * n + order[j]];
    for (std::size_t i = 0; i < n; ++i) sorted[i * n + j] = vectors[i * n + order[j]];
  }
  vectors = std::move(sorted);
}

std::vector<double> apply_flat(const char* op, const LinearOperator& A, const std::vector<double>& v,
                               const Tensors& like, std::size_t iteration) {
  const Tensors out = A(unflatten_values(v, like));
  if (out.size() != like.size())
    throw_error<ValueError>(op, "the operator returned ", out.size(), " tensors for ", like.size(), " inputs");
  for (std::size_t i = 0; i < out.size(); ++i)
    check_like(op, "the operator's result " + std::to_string(i), out[i], "input " + std::to_string(i), like[i]);
  std::vector<double> w = flatten_values(out);
  for (double x : w)
    if (!std::isfinite(x))
      throw_error<ValueError>(op, "the operator returned NaN or inf at product ", iteration + 1);
  return w;
}

std::size_t total_size(const Tensors& like) {
  std::size_t n = 0;
  for (const auto& t : like) n += t.numel();
  return n;
}

void check_like_list(const char* op, const Tensors& like) {
  if (like.empty()) throw_error<ValueError>(op, "no tensors describe the vectors");
  for (std::size_t i = 0; i < like.size(); ++i)
    if (!like[i].defined() || !is_float(like[i].dtype()))
      throw_error<DTypeError>(op, "tensor ", i, " of `like` must be a float tensor");
}

}  // namespace

LanczosResult lanczos(const LinearOperator& A, const Tensors& like, const LanczosOptions& o) {
  const char* op = "lanczos";
  require_function(op, A);
  check_like_list(op, like);
  const std::size_t n = total_size(like);
  if (o.k == 0) throw_error<ValueError>(op, "k must be >= 1");
  if (o.k > o.max_iterations)
    throw_error<ValueError>(op, "k = ", o.k, " eigenvalues need max_iterations >= k, got ", o.max_iterations);
  if (o.k > n) throw_error<ValueError>(op, "k = ", o.k, " eigenvalues of an operator of size ", n);
  if (!(o.tol > 0 && o.tol < 1)) throw_error<ValueError>(op, "tol must be in (0, 1), got ", o.tol);
  const std::size_t m = std::min(o.max_iterations, n);
  check_result_bytes(op, "Krylov basis", {{Shape{m, n}, DType::Float64}}, 0);

  Rng rng(o.seed);
  auto random_unit = [&](const std::vector<std::vector<double>>& against) {
    for (int attempt = 0; attempt < 8; ++attempt) {
      std::vector<double> q(n);
      for (auto& x : q) x = rng.normal();
      for (int pass = 0; pass < 2; ++pass)
        for (const auto& b : against) axpy(-dot(b, q), b, q);
      const double len = norm(q);
      if (len > 1e-8) {
        for (auto& x : q) x /= len;
        return q;
      }
    }
    return std::vector<double>();
  };

  std::vector<std::vector<double>> Q;  // orthonormal Krylov basis
  std::vector<double> alpha, beta;     // T: diagonal alpha, off-diagonal beta (beta[j] links j, j+1)
  std::vector<double> theta, S;        // Ritz values (ascending) and T's eigenvectors
  std::vector<double> q = random_unit(Q);
  LanczosResult r;
  double last_beta = 0;
  auto order_of = [&](std::size_t count) {  // indices of the wanted Ritz values, best first
    std::vector<std::size_t> idx(theta.size());
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(), [&](std::size_t a, std::size_t b) {
      return o.which == SpectrumEnd::Largest ? theta[a] > theta[b] : std::abs(theta[a]) > std::abs(theta[b]);
    });
    idx.resize(std::min(count, idx.size()));
    return idx;
  };
  // T is block diagonal, one block per restart (the last from row block_start), and each Ritz
  // vector (column of S) lies in one block. The best Ritz value of the last block, in the
  // order of `which`:
  std::size_t block_start = 0;
  auto block_best = [&](std::size_t d) {
    for (std::size_t i : order_of(d))
      for (std::size_t row = block_start; row < d; ++row)
        if (S[row * d + i] != 0) return i;
    return order_of(1)[0];
  };
  auto residual = [&](std::size_t i, std::size_t d) { return last_beta * std::abs(S[(d - 1) * d + i]); };
  // Not on an invariant subspace: every wanted Ritz pair and the last block's best have
  // converged (after a restart the new block may still grow a wanted value).
  auto residuals_done = [&](std::size_t d, double scale) {
    bool done = residual(block_best(d), d) <= o.tol * scale;
    for (std::size_t i : order_of(o.k)) done = done && residual(i, d) <= o.tol * scale;
    return done;
  };
  // On an invariant subspace every Ritz value is exact. A block started from a random vector
  // holds every distinct eigenvalue of the space it explores once (almost surely), so the block
  // after b restarts holds exactly the eigenvalues of multiplicity > b. The top k are known when
  // the space is exhausted or the last block holds no value better than the k-th wanted one
  // (another copy of it would not enter); else restart to find the next copies.
  auto invariant_done = [&](std::size_t d, double scale) {
    if (d == n) return true;
    const double kth = theta[order_of(o.k).back()], best = theta[block_best(d)];
    return o.which == SpectrumEnd::Largest ? best <= kth + o.tol * scale
                                           : std::abs(best) <= std::abs(kth) + o.tol * scale;
  };
  for (std::size_t j = 0; j < m; ++j) {
    Q.push_back(q);
    std::vector<double> w = apply_flat(op, A, q, like, j);
    ++r.iterations;
    const double a = dot(q, w);
    alpha.push_back(a);
    axpy(-a, q, w);
    if (j > 0) axpy(-beta[j - 1], Q[j - 1], w);
    for (int pass = 0; pass < 2; ++pass)  // full reorthogonalisation ("twice is enough")
      for (const auto& b : Q) axpy(-dot(b, w), b, w);
    last_beta = norm(w);
    // Ritz values of T_j and the residual beta_j |s_last| of each Ritz pair.
    const std::size_t d = alpha.size();
    std::vector<double> T(d * d, 0.0);
    for (std::size_t i = 0; i < d; ++i) {
      T[i * d + i] = alpha[i];
      if (i + 1 < d) T[i * d + i + 1] = T[(i + 1) * d + i] = beta[i];
    }
    symmetric_eigen(T, d, theta, S);
    double scale = 0;
    for (double t : theta) scale = std::max(scale, std::abs(t));
    const bool invariant = last_beta <= 1e-10 * std::max(scale, 1e-300);
    r.converged = d >= o.k && (invariant ? invariant_done(d, scale) : residuals_done(d, scale));
    if (r.converged || j + 1 == m) break;
    if (invariant) {  // an invariant subspace: restart orthogonally (T gets a zero coupling)
      q = random_unit(Q);
      if (q.empty()) break;
      beta.push_back(0.0);
      block_start = d;
      last_beta = 0;
    } else {
      beta.push_back(last_beta);
      for (std::size_t i = 0; i < n; ++i) q[i] = w[i] / last_beta;
    }
  }
  const std::size_t d = alpha.size();
  for (std::size_t i : order_of(o.k)) {
    r.eigenvalues.push_back(theta[i]);
    r.residuals.push_back(last_beta * std::abs(S[(d - 1) * d + i]));
    if (o.eigenvectors) {
      std::vector<double> y(n, 0.0);
      for (std::size_t j = 0; j < d; ++j) axpy(S[j * d + i], Q[j], y);
      r.eigenvectors.push_back(unflatten_values(y, like));
    }
  }
  r.ritz_values.assign(theta.rbegin(), theta.rend());
  return r;
}

// --- Hutchinson -------------------------------------------------------------------------------

TraceEstimate hutchinson_trace(const LinearOperator& A, const Tensors& like, const HutchinsonOptions& o) {
  const char* op = "hutchinson_trace";
  require_function(op, A);
  check_like_list(op, like);
  if (o.samples == 0) throw_error<ValueError>(op, "samples must be >= 1");
  const std::size_t n = total_size(like);
  Rng rng(o.seed);
  TraceEstimate est;
  est.samples = o.samples;
  for (std::size_t s = 0; s < o.samples; ++s) {
    std::vector<double> v(n);
    for (auto& x : v) x = rng.bernoulli(0.5) ? 1.0 : -1.0;
    est.values.push_back(dot(v, apply_flat(op, A, v, like, s)));
  }
  const double mean = std::accumulate(est.values.begin(), est.values.end(), 0.0) / double(o.samples);
  double ss = 0;
  for (double x : est.values) ss += (x - mean) * (x - mean);
  est.trace = mean;
  est.std_error = o.samples > 1 ? std::sqrt(ss / double(o.samples - 1) / double(o.samples))
                                : std::numeric_limits<double>::infinity();
  return est;
}

// --- gradient-noise scale ------------------------------------------------------------------------

NoiseScale gradient_noise_scale(const NamedTensors& per_sample) {
  const char* op = "gradient_noise_scale";
  if (per_sample.empty()) throw_error<ValueError>(op, "no per-sample gradients given");
  const std::size_t B = per_sample[0].second.defined() && per_sample[0].second.dim() >= 1 ? per_sample[0].second.shape()[0] : 0;
  for (const auto& [name, g] : per_sample) {
    if (!g.defined() || !is_float(g.dtype())) throw_error<DTypeError>(op, "'", name, "' must be a float tensor");
    if (g.dim() < 1 || g.shape()[0] != B)
      throw_error<ShapeError>(op, "'", name, "' ", describe(g), " must be (B, ...) with the B = ", B,
                              " of '", per_sample[0].first, "'");
  }
  if (B < 2) throw_error<ValueError>(op, "needs per-sample gradients of B >= 2 examples, got B = ", B);
  // sum over parameters of |mean_i g_i|^2 and of sum_i |g_i - mean|^2.
  double mean_sq = 0, deviations = 0;
  for (const auto& [name, g] : per_sample) {
    const std::vector<double> v = g.to_vector();
    const std::size_t d = v.size() / B;
    for (std::size_t j = 0; j < d; ++j) {
      double mean = 0;
      for (std::size_t i = 0; i < B; ++i) mean += v[i * d + j];
      mean /= double(B);
      mean_sq += mean * mean;
      for (std::size_t i = 0; i < B; ++i) deviations += (v[i * d + j] - mean) * (v[i * d + j] - mean);
    }
  }
  NoiseScale ns;
  ns.batch = B;
  ns.trace_sigma = deviations / double(B - 1);
  ns.mean_grad_sq_norm = mean_sq;
  ns.grad_sq_norm = mean_sq - ns.trace_sigma / double(B);
  ns.b_simple = ns.grad_sq_norm > 0 ? ns.trace_sigma / ns.grad_sq_norm : std::numeric_limits<double>::infinity();
  return ns;
}

}  // namespace xgrad
