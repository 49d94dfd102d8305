// xgrad/ops/ops.hpp — every op family.
#pragma once
#include "xgrad/ops/attention.hpp"
#include "xgrad/ops/compare.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/index.hpp"
#include "xgrad/ops/mask.hpp"
#include "xgrad/ops/matmul.hpp"
#include "xgrad/ops/norm.hpp"
#include "xgrad/ops/random.hpp"
#include "xgrad/ops/reduce.hpp"
#include "xgrad/ops/shape.hpp"
#include "xgrad/ops/softmax.hpp"
#include "xgrad/ops/unary.hpp"
