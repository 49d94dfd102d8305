// Boost.Test entry point; every test_*.cpp adds suites. Ops run on one thread (tests of
// threading set other counts themselves and restore 1). The first line says what runs: the
// CPU path (XGRAD_CPU_PATH) and OpenBLAS's kernels (OPENBLAS_CORETYPE), which
// scripts/run-tests.sh varies.
#define BOOST_TEST_MODULE xgrad
#include <boost/test/unit_test.hpp>

#include <iostream>

#include "xgrad/framework/runtime.hpp"

struct OneThreadAndReport {
  OneThreadAndReport() {
    xgrad::set_num_threads(1);
    std::cout << "xgrad_tests on: " << xgrad::runtime_summary() << std::endl;
  }
};
BOOST_TEST_GLOBAL_FIXTURE(OneThreadAndReport);
