// expect_error<E>(fn, parts): fn must throw E (not another exception, not nothing) whose message
// contains every part; returns the message. Shared by the containers, data and optim suites.
#pragma once
#include <boost/test/unit_test.hpp>

#include <exception>
#include <string>
#include <vector>

namespace xgrad::test {

template <class E, class F>
std::string expect_error(F&& fn, const std::vector<std::string>& parts) {
  try {
    fn();
  } catch (const E& e) {
    const std::string msg = e.what();
    for (const auto& p : parts) BOOST_TEST(msg.find(p) != std::string::npos, "'" << p << "' not in: " << msg);
    return msg;
  } catch (const std::exception& e) {
    BOOST_ERROR("wrong exception type: " << e.what());
    return "";
  }
  BOOST_ERROR("no exception; expected one mentioning '" << (parts.empty() ? std::string() : parts.front()) << "'");
  return "";
}

}  // namespace xgrad::test
