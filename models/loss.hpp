// xgrad/models/loss.hpp — losses, from registered ops (cross_entropy: the fused softmax_cross_entropy).
#pragma once
#include <cstdint>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// Mean over non-ignored positions of -sum_c w_c log_softmax(logits)_c with
// w = (1 - label_smoothing) one_hot(target) + label_smoothing / C
// (torch.nn.functional.cross_entropy). Targets equal to ignore_index contribute nothing;
// all targets ignored: loss 0 (not NaN).
//
// CLASSES ON THE LAST AXIS, UNLIKE PyTorch: logits (..., C) float, targets (...) int64. This is
// the layout every xgrad model produces ((B, T, V) language-model logits, (N, C) classifier
// logits) and needs no transpose. PyTorch's F.cross_entropy reads classes on axis 1
// ((N, C, d1, ...) with targets (N, d1, ...)): (N, C, T) logits with C == T would be misread
// here without an error, so that layout is spelled explicitly:
//   cross_entropy(logits, targets, ClassAxis(1))   // == F.cross_entropy(logits, targets)
// Every error message names the axis that holds the classes.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, std::int64_t ignore_index = -100,
                     double label_smoothing = 0.0);

// The axis of `logits` that holds the classes (negative counts from the end); explicit, so it
// cannot be mistaken for ignore_index.
struct ClassAxis {
  explicit ClassAxis(long a) : axis(a) {}
  long axis;
};
// cross_entropy with the classes on class_axis: logits (d0, ..., C at class_axis, ..., dk),
// targets = logits' shape without class_axis. ClassAxis(1) is PyTorch's layout; ClassAxis(-1)
// is the overload above.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets, ClassAxis class_axis,
                     std::int64_t ignore_index = -100, double label_smoothing = 0.0);

// mean((a - b)^2); a and b of one shape.
Tensor mse_loss(const Tensor& a, const Tensor& b);

}  // namespace xgrad
