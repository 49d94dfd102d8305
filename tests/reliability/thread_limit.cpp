// When the system refuses a worker thread (here: an address-space limit leaves no room for
// thread stacks), ops run on the threads there are and give the same bits (framework/runtime.hpp);
// the refusal used to escape from the op as std::system_error. Also: set_num_threads's bound.
// Not run under sanitizers (their shadow memory needs the address space). Exit 0 = pass.
#include <sys/resource.h>

#include <cstring>
#include <fstream>
#include <iostream>
#include <string>

#include <xgrad/xgrad.hpp>

#include "../sanitized.hpp"

namespace {

long status_field(const char* name) {  // from /proc/self/status: VmSize in kB, Threads
  std::ifstream f("/proc/self/status");
  for (std::string line; std::getline(f, line);)
    if (line.rfind(name, 0) == 0) return std::stol(line.substr(std::strlen(name)));
  return -1;
}

}  // namespace

int main() {
#if defined(XGRAD_TEST_SANITIZED)
  std::cout << "skip  a sanitizer build needs the address space this test limits\n";
  return 0;
#else
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    std::cout << (ok ? "ok    " : "FAIL  ") << what << "\n";
    failures += !ok;
  };
  using namespace xgrad;
  Rng rng(5);
  const Tensor a = randn({std::size_t(1) << 22}, rng), b = randn({std::size_t(1) << 22}, rng);
  set_num_threads(1);
  const std::vector<double> ref = add(a, b).to_vector();

  // Room for add's 16 MiB output and a few 8 MiB thread stacks, not for 1023 workers.
  rlimit old{};
  getrlimit(RLIMIT_AS, &old);
  rlimit tight = old;
  tight.rlim_cur = rlim_t(status_field("VmSize:")) * 1024 + (rlim_t(48) << 20);
  set_num_threads(kMaxThreads);
  bool threw = false;
  std::string what;
  Tensor c;
  setrlimit(RLIMIT_AS, &tight);
  try {
    c = add(a, b);
  } catch (const std::exception& e) {
    threw = true;
    what = e.what();
  }
  setrlimit(RLIMIT_AS, &old);
  const long threads = status_field("Threads:");
  check(!threw, "add with 1024 threads asked and the system refusing most runs" + (threw ? ": " + what : ""));
  check(threads > 1 && threads < kMaxThreads, "the pool stopped growing at the refusal (" + std::to_string(threads) +
                                                  " threads in the process)");
  check(c.defined() && c.to_vector() == ref, "same bits as one thread");
  check(add(a, b).to_vector() == ref, "the next op runs too, on the workers there are");

  try {
    set_num_threads(kMaxThreads + 1);
    check(false, "set_num_threads(1025) refused");
  } catch (const ValueError& e) {
    check(std::string(e.what()).find("[1, 1024]") != std::string::npos, "set_num_threads(1025) refused: " +
                                                                          std::string(e.what()));
  }
  check(num_threads() == kMaxThreads, "the thread count is unchanged by the refused call");
  return failures == 0 ? 0 : 1;
#endif
}
