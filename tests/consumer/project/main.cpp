// Consumer of the installed xgrad package: builds a small graph, runs backward and checks
// the gradients against their closed forms. Prints "consumer ok" and exits 0 on success.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <iostream>
#include <string>
#include <vector>

#include <xgrad/xgrad.hpp>

namespace {

int failures = 0;

// Compares got against want elementwise (relative + absolute tolerance).
void check(const std::string& what, const std::vector<double>& got,
           const std::vector<double>& want, double tol = 1e-10) {
  if (got.size() != want.size()) {
    std::cerr << what << ": size " << got.size() << " != " << want.size() << "\n";
    ++failures;
    return;
  }
  double scale = 0;
  for (double w : want) scale = std::max(scale, std::abs(w));
  if (scale == 0) {
    std::cerr << what << ": expected gradient is all zero, the check would be vacuous\n";
    ++failures;
    return;
  }
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::abs(got[i] - want[i]) <= tol * (1 + std::abs(want[i])))) {
      std::cerr << what << "[" << i << "]: got " << got[i] << ", want " << want[i] << "\n";
      ++failures;
      return;
    }
  }
}

}  // namespace

int main() {
  using namespace xgrad;
  try {
    set_num_threads(1);
    const DType f64 = DType::Float64;

    // loss = sum(C * (A B)) + sum(linear(A, W, b)^2)
    //   A: (2,3)  B: (3,2)  C: (2,2)  W: (4,3)  b: (4)
    const std::size_t n = 2, k = 3, m = 2, o = 4;
    const std::vector<double> av{0.5, -1.0, 2.0, 1.5, 0.25, -0.75};
    const std::vector<double> bv{1.0, -2.0, 0.5, 0.3, -1.2, 0.8};
    const std::vector<double> cv{0.7, -0.4, 1.1, 0.2};
    const std::vector<double> wv{0.1, 0.2, -0.3, -0.5, 0.4, 0.6,
                                 0.9, -0.8, 0.7, 0.05, -0.15, 0.25};
    const std::vector<double> biasv{0.3, -0.2, 0.1, 0.0};
    Tensor A = tensor(av, {n, k}, f64).set_requires_grad();
    Tensor B = tensor(bv, {k, m}, f64).set_requires_grad();
    Tensor C = tensor(cv, {n, m}, f64);
    Tensor W = tensor(wv, {o, k}, f64).set_requires_grad();
    Tensor bias = tensor(biasv, {o}, f64).set_requires_grad();

    Tensor y = linear(A, W, bias);                 // (2,4)
    Tensor loss = sum(mul(C, matmul(A, B))) + sum(mul(y, y));
    loss.backward();

    // Closed forms: with Y = A W^T + b,
    //   dA = C B^T + 2 Y W,   dB = A^T C,   dW = 2 Y^T A,   db = 2 sum_rows(Y)
    std::vector<double> Y(n * o);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < o; ++j) {
        double s = biasv[j];
        for (std::size_t p = 0; p < k; ++p) s += av[i * k + p] * wv[j * k + p];
        Y[i * o + j] = s;
      }
    std::vector<double> dA(n * k, 0.0), dB(k * m, 0.0), dW(o * k, 0.0), db(o, 0.0);
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t p = 0; p < k; ++p) {
        for (std::size_t j = 0; j < m; ++j) dA[i * k + p] += cv[i * m + j] * bv[p * m + j];
        for (std::size_t j = 0; j < o; ++j) dA[i * k + p] += 2 * Y[i * o + j] * wv[j * k + p];
      }
    for (std::size_t p = 0; p < k; ++p)
      for (std::size_t j = 0; j < m; ++j)
        for (std::size_t i = 0; i < n; ++i) dB[p * m + j] += av[i * k + p] * cv[i * m + j];
    for (std::size_t j = 0; j < o; ++j)
      for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t p = 0; p < k; ++p) dW[j * k + p] += 2 * Y[i * o + j] * av[i * k + p];
        db[j] += 2 * Y[i * o + j];
      }
    double want_loss = 0;
    for (std::size_t i = 0; i < n; ++i)
      for (std::size_t j = 0; j < m; ++j) {
        double s = 0;
        for (std::size_t p = 0; p < k; ++p) s += av[i * k + p] * bv[p * m + j];
        want_loss += cv[i * m + j] * s;
      }
    for (double v : Y) want_loss += v * v;

    check("loss", {loss.item()}, {want_loss});
    check("dA", A.grad().to_vector(), dA);
    check("dB", B.grad().to_vector(), dB);
    check("dW", W.grad().to_vector(), dW);
    check("dbias", bias.grad().to_vector(), db);

    // float32 path through the same installed library (single BLAS call, looser tolerance).
    Tensor x32 = tensor({1.0, 2.0, 3.0, 4.0}, {2, 2}).set_requires_grad();
    Tensor s32 = sum(matmul(x32, x32));
    s32.backward();
    // d sum(X X) / dX[a][b] = (row sums of X)[b] + (column sums of X)[a]
    check("float32 d sum(XX)/dX", x32.grad().to_vector(), {7.0, 11.0, 9.0, 13.0}, 1e-5);
  } catch (const std::exception& e) {
    std::cerr << "consumer: exception: " << e.what() << "\n";
    return 2;
  }
  if (failures != 0) {
    std::cerr << "consumer FAILED (" << failures << " checks)\n";
    return 1;
  }
  std::cout << "consumer ok\n";
  return 0;
}
