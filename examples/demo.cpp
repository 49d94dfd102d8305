// demo: build a small graph, run backward, print gradients.
#include <CLI/CLI.hpp>

#include <iostream>

#include "xgrad/xgrad.hpp"

int main(int argc, char** argv) {
  using namespace xgrad;
  CLI::App app{"demo: a small attention graph (linear, matmul, causal masked softmax), its loss and "
               "gradients, printed; takes no options"};
  CLI11_PARSE(app, argc, argv);
  Rng rng(0);
  Tensor x = randn({2, 3, 4}, rng);                       // (B, T, E)
  Tensor w = randn({4, 4}, rng).set_requires_grad();      // (out, in)
  Tensor b = zeros({4}).set_requires_grad();
  Tensor scores = matmul(linear(x, w, b), x, false, true);  // (B, T, T)
  Tensor p = masked_softmax(scores, causal_mask(3));      // causal attention weights
  Tensor loss = mean(mul(p, p));
  loss.backward();
  std::cout << "loss = " << loss.item() << "\n";
  std::cout << "attention weights[0] = " << narrow(p, 0, 0, 1) << "\n";
  std::cout << "d loss / d w = " << w.grad() << "\n";
  std::cout << "d loss / d b = " << b.grad() << "\n";
}
