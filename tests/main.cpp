// Boost.Test entry point; every test_*.cpp adds suites. Ops run on one thread (tests of
// threading set 2 themselves and restore 1).
#define BOOST_TEST_MODULE xgrad
#include <boost/test/unit_test.hpp>

#include "xgrad/framework/runtime.hpp"

struct OneBlasThread {
  OneBlasThread() { xgrad::set_num_threads(1); }
};
BOOST_TEST_GLOBAL_FIXTURE(OneBlasThread);
