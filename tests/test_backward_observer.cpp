// The engine's BackwardObserver hook (framework/autograd.hpp), which data parallelism uses to
// start reducing a gradient as soon as it is final: when it is called, what it sees, order,
// grad() not reporting, exceptions, registration.
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/tensor.hpp"
#include "xgrad/ops/elementwise.hpp"
#include "xgrad/ops/reduce.hpp"

using namespace xgrad;
using test::allclose;
using test::leaf;

namespace {

// Records every callback; for each leaf, a copy of its .grad at the moment it was reported.
struct Recorder : BackwardObserver {
  std::vector<std::string> events;
  std::vector<std::pair<const TensorImpl*, std::vector<double>>> seen;
  const TensorImpl* throw_at = nullptr;
  void backward_started() override { events.push_back("started"); }
  void leaf_grad_ready(const Tensor& leaf) override {
    events.push_back("leaf");
    seen.emplace_back(leaf.impl(), leaf.grad().to_vector());
    if (leaf.impl() == throw_at) throw std::runtime_error("observer failed");
  }
  void backward_finished() override { events.push_back("finished"); }
};

// Registers a Recorder for the scope of a test.
struct Observed {
  std::shared_ptr<Recorder> r = std::make_shared<Recorder>();
  Observed() { add_backward_observer(r); }
  ~Observed() { remove_backward_observer(r.get()); }
};

}  // namespace

BOOST_AUTO_TEST_SUITE(backward_observer)

BOOST_AUTO_TEST_CASE(each_leaf_is_reported_once_with_its_final_gradient) {
  Observed o;
  // y = sum(a * b) + sum(a * a): a is reached twice, its .grad must already hold both parts.
  Tensor a = leaf({1, 2}, {2}), b = leaf({3, 5}, {2});
  Tensor c = tensor({7, 7}, {2}, DType::Float64);  // no grad: never reported
  Tensor y = add(sum(mul(mul(a, b), c)), sum(mul(a, a)));
  y.backward();
  BOOST_TEST(o.r->events == (std::vector<std::string>{"started", "leaf", "leaf", "finished"}));
  BOOST_TEST_REQUIRE(o.r->seen.size() == 2u);
  for (const auto& [impl, g] : o.r->seen) {
    const Tensor& t = impl == a.impl() ? a : b;
    BOOST_TEST(g == t.grad().to_vector());  // what the callback saw is the final .grad
  }
  BOOST_TEST(allclose(a.grad(), {3 * 7 + 2, 5 * 7 + 4}));
}

// leaf_grad_contribution reports, right before leaf_grad_ready, what this backward added:
// the whole .grad when there was none, else only the new part (.grad = before + contribution).
BOOST_AUTO_TEST_CASE(the_contribution_is_what_this_backward_added) {
  struct Contributions : BackwardObserver {
    std::vector<std::string> events;
    std::vector<std::vector<double>> added;
    void leaf_grad_contribution(const Tensor&, const Tensor& g) override {
      events.push_back("contribution");
      added.push_back(g.to_vector());
    }
    void leaf_grad_ready(const Tensor&) override { events.push_back("leaf"); }
  };
  auto c = std::make_shared<Contributions>();
  add_backward_observer(c);
  Tensor a = leaf({1, 2}, {2});
  sum(mul(a, a)).backward();  // 2a
  sum(mul_scalar(a, 3)).backward();  // 3, onto the 2a already there
  remove_backward_observer(c.get());
  BOOST_TEST(c->events == (std::vector<std::string>{"contribution", "leaf", "contribution", "leaf"}));
  BOOST_TEST_REQUIRE(c->added.size() == 2u);
  BOOST_TEST(c->added[0] == (std::vector<double>{2, 4}));
  BOOST_TEST(c->added[1] == (std::vector<double>{3, 3}));
  BOOST_TEST(allclose(a.grad(), {5, 7}, 0, 0));
}

BOOST_AUTO_TEST_CASE(order_is_the_graph_order_whatever_the_run) {
  // A chain p3 -> p2 -> p1 -> loss: the leaf nearest the loss is final first; the order is the
  // same on every run (Kahn's order from the outputs, no timing involved).
  Tensor p1 = leaf({1}, {1}), p2 = leaf({2}, {1}), p3 = leaf({3}, {1});
  std::vector<const TensorImpl*> first;
  for (int run = 0; run < 3; ++run) {
    Observed o;
    Tensor h = mul(p3, p3);
    h = mul(add(h, p2), p2);
    Tensor loss = sum(mul(add(h, p1), p1));
    loss.backward();
    std::vector<const TensorImpl*> order;
    for (const auto& s : o.r->seen) order.push_back(s.first);
    BOOST_TEST(order == (std::vector<const TensorImpl*>{p1.impl(), p2.impl(), p3.impl()}));
    if (run == 0) first = order;
    BOOST_TEST(order == first);
    p1.zero_grad(), p2.zero_grad(), p3.zero_grad();
  }
}

BOOST_AUTO_TEST_CASE(accumulation_across_backwards_is_reported_each_time) {
  Observed o;
  Tensor a = leaf({1, 2}, {2});
  sum(mul(a, a)).backward();
  sum(mul(a, a)).backward();
  BOOST_TEST_REQUIRE(o.r->seen.size() == 2u);
  BOOST_TEST(o.r->seen[0].second == (std::vector<double>{2, 4}));
  BOOST_TEST(o.r->seen[1].second == (std::vector<double>{4, 8}));  // accumulated
}

BOOST_AUTO_TEST_CASE(grad_does_not_report_and_no_leaf_still_finishes) {
  Observed o;
  Tensor a = leaf({1, 2}, {2});
  (void)grad({sum(mul(a, a))}, {a});
  BOOST_TEST(o.r->events.empty());
  // A backward that reaches no leaf with a gradient: started and finished only.
  Tensor x = leaf({1}, {1});
  Tensor y = mul_scalar(x, 2.0);
  y.backward(ones({1}, DType::Float64));
  BOOST_TEST(o.r->events.size() == 3u);  // started, leaf (x), finished
}

BOOST_AUTO_TEST_CASE(an_exception_propagates_and_skips_finished) {
  Observed o;
  Tensor a = leaf({1}, {1}), b = leaf({2}, {1});
  o.r->throw_at = a.impl();
  Tensor y = sum(mul(mul(a, b), b));
  BOOST_CHECK_THROW(y.backward(), std::runtime_error);
  BOOST_TEST(o.r->events.back() == "leaf");
  BOOST_TEST(std::count(o.r->events.begin(), o.r->events.end(), std::string("finished")) == 0);
  // The next backward starts afresh.
  o.r->throw_at = nullptr;
  sum(mul(a, b)).backward();
  BOOST_TEST(o.r->events.back() == "finished");
}

BOOST_AUTO_TEST_CASE(registration) {
  auto r = std::make_shared<Recorder>();
  add_backward_observer(r);
  add_backward_observer(r);  // twice: once
  Tensor a = leaf({1}, {1});
  sum(mul(a, a)).backward();
  BOOST_TEST(r->seen.size() == 1u);
  remove_backward_observer(r.get());
  remove_backward_observer(r.get());  // not registered: nothing
  sum(mul(a, a)).backward();
  BOOST_TEST(r->seen.size() == 1u);
  BOOST_CHECK_THROW(add_backward_observer(nullptr), ValueError);
}

BOOST_AUTO_TEST_SUITE_END()
