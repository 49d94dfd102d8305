// xgrad/ops/index.hpp — integer indexing (embedding lookup and its adjoint).
#pragma once
#include "xgrad/framework/tensor.hpp"

namespace xgrad {

// Rows of weight (N, D) picked by Int64 indices of any shape I -> (I..., D).
// An index outside [0, N) is an IndexError naming its position.
Tensor embedding(const Tensor& weight, const Tensor& indices);
// The adjoint: a zero (num_rows, D) matrix into which each row of g (I..., D) is added at
// its index (torch.index_add / embedding backward).
Tensor embedding_backward(const Tensor& g, const Tensor& indices, std::size_t num_rows);
// (I..., num_classes) float tensor with 1 at each index (non-differentiable).
Tensor one_hot(const Tensor& indices, std::size_t num_classes, DType dtype = DType::Float32);

}  // namespace xgrad
