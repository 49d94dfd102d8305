// xgrad/models/loss.hpp — losses, as compositions of registered ops.
#pragma once
#include <cstdint>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// Mean over non-ignored positions of -sum_c w_c log_softmax(logits)_c with
// w = (1 - label_smoothing) one_hot(target) + label_smoothing / C
// (torch.nn.functional.cross_entropy). logits (..., C) float; targets (...) int64;
// targets equal to ignore_index contribute nothing. All targets ignored: loss 0 (not NaN).
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100,
                     double label_smoothing = 0.0);

// mean((a - b)^2); a and b of one shape.
Tensor mse_loss(const Tensor& a, const Tensor& b);

}  // namespace xgrad
