// xgrad/xgrad.hpp — the whole public API (without xtensor; see framework/array.hpp).
#pragma once
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/errors.hpp"
#include "xgrad/framework/gradcheck.hpp"
#include "xgrad/framework/registry.hpp"
#include "xgrad/framework/runtime.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/ops.hpp"
