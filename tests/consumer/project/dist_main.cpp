// Consumer of the installed xgrad::distributed target: data-parallel gradients of a tiny model.
// Each rank's loss is sum((r + 1) * w * x); DistributedDataParallel averages the gradients, so
// every rank must hold mean_r((r + 1) * x) = (N + 1) / 2 * x. Prints "consumer distributed ok"
// on rank 0. Runs without mpirun (one rank) and under mpirun.
#include <iostream>

#include <xgrad/distributed/all.hpp>
#include <xgrad/xgrad.hpp>

namespace {
struct Tiny : xgrad::Module {
  xgrad::Tensor w = xgrad::tensor({0.5, -1.0, 2.0}, {3}, xgrad::DType::Float64).set_requires_grad();
  Tiny() { register_parameter("w", &w); }
};
}  // namespace

int main(int argc, char** argv) {
  namespace dist = xgrad::distributed;
  dist::Environment env(argc, argv);
  try {
    Tiny model;
    dist::DistributedDataParallel ddp(model);
    const xgrad::Tensor x = xgrad::tensor({1.0, 2.0, 3.0}, {3}, xgrad::DType::Float64);
    xgrad::sum(xgrad::mul(xgrad::mul_scalar(model.w, dist::rank() + 1.0), x)).backward();
    const double n = dist::world_size();
    const auto g = model.w.grad().to_vector();
    for (std::size_t i = 0; i < 3; ++i)
      if (g[i] != (n + 1) / 2 * double(i + 1)) {
        std::cerr << "rank " << dist::rank() << ": gradient " << i << " is " << g[i] << "\n";
        return 1;
      }
    if (dist::is_root()) std::cout << "consumer distributed ok (" << dist::world_size() << " ranks)\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "consumer distributed: " << e.what() << "\n";
    return 2;
  }
}
