// xgrad/distributed/all.hpp — everything of xgrad::distributed (link xgrad::distributed).
#pragma once
#include "xgrad/distributed/checkpoint.hpp"
#include "xgrad/distributed/data_parallel.hpp"
#include "xgrad/distributed/distributed.hpp"
#include "xgrad/distributed/zero.hpp"
