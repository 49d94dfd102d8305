// xgrad/ops/random.hpp — seeded categorical sampling (Int64 results, never differentiable).
//
// Both functions are deterministic given the Rng: the same seed gives the same draws on every
// machine, compiler and standard library. The algorithm, exactly:
//   - rows are drawn in row-major order, a row's draws one after another;
//   - one Rng::uniform() (53 bits, exact) per draw, u in [0, 1);
//   - the row's weights w_0..w_{C-1} are summed left to right in float64 into the cumulative
//     sums c_k = w_0 + ... + w_k (whatever the input dtype), and the draw is the first k with
//     c_k > u * c_{C-1} (inverse CDF; a binary search over c). A zero weight never satisfies
//     that before its left neighbour does, so a class of weight 0 is never drawn.
// All inputs are validated before the first draw, so a ValueError leaves the Rng untouched.
#pragma once
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// torch.multinomial(weights, num_samples, replacement): weights (C) or (N, C) of non-negative
// float32/float64 weights (they need not sum to 1) -> Int64 (num_samples) or (N, num_samples)
// of class indices in [0, C).
//   replacement = true: every draw from the row's full distribution;
//   replacement = false: a class drawn is removed (its weight set to 0) before the next draw,
//   so a row's samples are distinct; needs num_samples <= the row's count of non-zero weights.
// ValueError naming the row for a negative, NaN or infinite weight, a row whose weights are
// all 0 (or whose sum overflows to inf), too few non-zero weights without replacement, or
// num_samples < 0; ShapeError unless weights has rank 1 or 2. num_samples = 0 gives an empty
// result (PyTorch refuses it). Every row is validated before anything is drawn.
Tensor multinomial(const Tensor& weights, long num_samples, bool replacement, Rng& rng);

// One class per row of logits (..., C) drawn from softmax(logits / temperature) -> Int64 (...):
// the probabilities are computed in float64 as exp((l_k - max_k l) / temperature) (a -inf
// logit has probability 0, so masked_fill(logits, mask, -INFINITY) removes classes), then one
// draw by the algorithm above. temperature must be finite and > 0 (for greedy decoding use
// argmax); ValueError naming the row for a NaN or +inf logit or a row of only -inf.
Tensor sample_categorical(const Tensor& logits, Rng& rng, double temperature = 1.0);

}  // namespace xgrad
