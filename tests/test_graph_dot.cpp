// DOT export of recorded graphs (framework/graph_dot.hpp): the node count is the recorded
// graph's, labels carry op names, shapes, dtypes and parameter names, the text parses with
// Graphviz's `dot -Tsvg` when it is installed (Debian: graphviz; skipped with a message
// otherwise).
#include <boost/test/unit_test.hpp>

#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unordered_set>

#include "helpers.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/framework/graph_dot.hpp"
#include "xgrad/models/attention.hpp"
#include "xgrad/ops/ops.hpp"

using namespace xgrad;

namespace {

// Recorded nodes, leaves that require grad and other inputs behind `root`, counted by a walk
// of our own (handles that share a node count once).
struct Counts {
  std::size_t ops = 0, leaves = 0, constants = 0;
};
Counts count_graph(const Tensor& root) {
  Counts c;
  std::unordered_set<const void*> seen;
  std::vector<Tensor> stack{root};
  while (!stack.empty()) {
    Tensor t = stack.back();
    stack.pop_back();
    const void* key = t.grad_fn() ? static_cast<const void*>(t.grad_fn().get()) : static_cast<const void*>(t.impl());
    if (!seen.insert(key).second) continue;
    if (!t.grad_fn()) {
      (t.requires_grad() ? c.leaves : c.constants) += 1;
      continue;
    }
    ++c.ops;
    for (const auto& in : t.grad_fn()->inputs())
      if (in.defined()) stack.push_back(in);
  }
  return c;
}

std::size_t occurrences(const std::string& text, const std::string& what) {
  std::size_t n = 0;
  for (std::size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

bool have_dot() { return std::system("command -v dot > /dev/null 2>&1") == 0; }

// Runs `dot -Tsvg` on the text; returns its exit status (0: parsed and rendered).
int render_svg(const std::string& dot, const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / ("xgrad_dot_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto in = dir / (name + ".dot"), out = dir / (name + ".svg");
  std::ofstream(in) << dot;
  const int status = std::system(("dot -Tsvg '" + in.string() + "' -o '" + out.string() + "' 2>&1").c_str());
  const bool svg = std::filesystem::exists(out) && std::filesystem::file_size(out) > 100;
  std::filesystem::remove_all(dir);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 && svg ? 0 : 1;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(graph_dot)

BOOST_AUTO_TEST_CASE(mha_forward_and_its_create_graph_backward) {
  Rng rng(1);
  MultiHeadAttention mha(MultiHeadAttentionOptions(8, 2), rng);
  const Tensor x = randn({2, 3, 8}, rng);
  AttentionOptions opt;
  opt.is_causal = true;
  opt.need_weights = true;  // the composed attention: softmax, matmuls, masks as ops
  const Tensor out = mha.forward(x, opt).output;
  const Tensor loss = mean(mul(out, out));
  NamedTensors names = mha.named_parameters();
  names.emplace_back("loss", loss);
  const DotGraph fwd = graph_to_dot({loss}, names);
  const Counts c = count_graph(loss);
  BOOST_TEST(fwd.ops == c.ops);
  BOOST_TEST(fwd.leaves == c.leaves);
  BOOST_TEST(fwd.constants == c.constants);
  BOOST_TEST(c.leaves == 4u);  // in_proj_weight, in_proj_bias, out_proj.weight, out_proj.bias
  BOOST_TEST(occurrences(fwd.text, "shape=box, style=\"rounded,filled\"") == c.ops);
  for (const char* label : {"in_proj_weight\\n(24, 8) float32", "in_proj_bias\\n(24) float32", "out_proj.weight\\n(8, 8) float32",
                            "out_proj.bias\\n(8) float32", "\"loss = mul_scalar\\n() float32\"", "linear\\n(2, 3, 8) float32",
                            "narrow\\n(8, 8) float32", "masked_softmax\\n(2, 2, 3, 3) float32", "const\\n(2, 3, 8) float32"})
    BOOST_TEST(fwd.text.find(label) != std::string::npos, "label " << label << " missing in\n" << fwd.text);
  // Every edge ("  a -> b ...;") names two declared nodes.
  std::size_t edges = 0;
  std::istringstream lines(fwd.text);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t arrow = line.find(" -> ");
    if (arrow == std::string::npos) continue;
    ++edges;
    const std::string from = line.substr(2, arrow - 2), to = line.substr(arrow + 4, line.find_first_of(" ;", arrow + 4) - arrow - 4);
    BOOST_TEST(fwd.text.find("  " + from + " [label=") != std::string::npos, line);
    BOOST_TEST(fwd.text.find("  " + to + " [label=") != std::string::npos, line);
  }
  BOOST_TEST(edges == fwd.edges);
  BOOST_TEST(edges >= c.ops);

  // The backward recorded with create_graph is a graph of its own, drawn from the gradient.
  const std::vector<Tensor> g = grad({loss}, {mha.in_proj_weight}, {}, GradOptions{true, true, false});
  const DotGraph bwd = graph_to_dot({g[0]}, mha.named_parameters());
  const Counts cb = count_graph(g[0]);
  BOOST_TEST(bwd.ops == cb.ops);
  BOOST_TEST(bwd.ops > fwd.ops);
  BOOST_TEST(bwd.leaves == cb.leaves);
  BOOST_TEST(bwd.text.find("in_proj_weight\\n(24, 8) float32") != std::string::npos);
  BOOST_TEST_MESSAGE("MHA forward: " << fwd.ops << " ops, backward with create_graph: " << bwd.ops << " ops");

  // The fused forward (need_weights = false) marks the fused op.
  const Tensor fused = mha.forward(x).output;
  const std::string f = to_dot(fused);
  BOOST_TEST(f.find("attention_packed (fused)\\n(2, 3, 8) float32") != std::string::npos, f);
  BOOST_TEST(f.find("peripheries=2") != std::string::npos);

  if (!have_dot()) {
    BOOST_TEST_MESSAGE("graphviz's dot is not installed: DOT text not rendered (Debian: apt-get install graphviz)");
    return;
  }
  BOOST_TEST(render_svg(fwd.text, "forward") == 0);
  BOOST_TEST(render_svg(bwd.text, "backward") == 0);
}

BOOST_AUTO_TEST_CASE(options_names_escapes_and_freed_graphs) {
  Tensor w = test::f64({1, 2, 3}, {3});
  w.set_requires_grad();
  const Tensor y = sum(mul(exp(w), test::f64({1, 1, 1}, {3})));
  // A name with quotes, a backslash and a newline stays one valid DOT string.
  const std::string tricky = "a \"quoted\" \\ name\nline two";
  const std::string text = to_dot(y, {{tricky, w}});
  BOOST_TEST(text.find("a \\\"quoted\\\" \\\\ name\\nline two\\n(3) float64") != std::string::npos, text);
  DotOptions o;
  o.show_constants = false;
  o.title = "my \"graph\"";
  o.left_to_right = true;
  const DotGraph g = graph_to_dot({y}, {}, o);
  BOOST_TEST(g.constants == 0u);
  BOOST_TEST(g.ops == count_graph(y).ops);
  BOOST_TEST(g.ops == 3u);  // exp, mul, sum
  BOOST_TEST(g.leaves == 1u);
  BOOST_TEST(g.text.find("const") == std::string::npos);
  BOOST_TEST(g.text.find("rankdir=LR") != std::string::npos);
  BOOST_TEST(g.text.find("label=\"my \\\"graph\\\"\"") != std::string::npos);
  BOOST_TEST(g.text.find("leaf\\n(3) float64") != std::string::npos);
  // Several roots share their common part.
  const Tensor z = exp(w), a = sum(z), b = mean(z);
  const DotGraph both = graph_to_dot({a, b});
  BOOST_TEST(both.ops == count_graph(a).ops + count_graph(b).ops - 1);  // exp once
  BOOST_TEST(occurrences(both.text, "fillcolor=\"#c8e6c9\"") == 2u);  // two roots
  // After a backward without retain_graph the ops say their saved values were freed.
  y.backward();
  const std::string freed = to_dot(y);
  BOOST_TEST(occurrences(freed, "(saved values freed)") == 1u);  // the root; its inputs were released with it
  // A leaf alone; errors.
  BOOST_TEST(graph_to_dot({w}).leaves == 1u);
  BOOST_CHECK_THROW(graph_to_dot({}), ValueError);
  BOOST_CHECK_THROW(graph_to_dot({Tensor()}), ValueError);
  if (have_dot()) {
    BOOST_TEST(render_svg(text, "tricky") == 0);
    BOOST_TEST(render_svg(g.text, "options") == 0);
    BOOST_TEST(render_svg(freed, "freed") == 0);
  }
}

BOOST_AUTO_TEST_CASE(control_bytes_and_long_labels_stay_valid_dot) {
  Tensor w = test::f64({1, 2, 3}, {3});
  w.set_requires_grad();
  const Tensor y = sum(exp(w));
  // A NUL (which ends Graphviz's string) and other control bytes become the text \xHH.
  const std::string nul = to_dot(y, {{std::string("a\0b\x01" "c\x7f", 6), w}});
  BOOST_TEST(nul.find('\0') == std::string::npos);
  BOOST_TEST(nul.find("\"a\\\\x00b\\\\x01c\\\\x7f\\n(3) float64\"") != std::string::npos, nul);
  // A label over Graphviz's 16384-byte string limit is split into "..." + "..." pieces.
  const std::string name(20000, 'n');
  const std::string text = to_dot(y, {{name, w}});
  const std::size_t start = text.find("\"nnnn");
  BOOST_TEST_REQUIRE(start != std::string::npos);
  std::string joined;
  std::size_t longest = 0, pieces = 0;
  for (std::size_t at = start;;) {  // "piece" + "piece" + ... "piece"
    const std::size_t end = text.find('"', at + 1);
    joined += text.substr(at + 1, end - at - 1);
    longest = std::max(longest, end - at - 1);
    ++pieces;
    if (text.compare(end + 1, 4, " + \"") != 0) break;
    at = end + 4;
  }
  BOOST_TEST(pieces >= 5u);
  BOOST_TEST(longest <= 16384u);
  BOOST_TEST(joined == name + "\\n(3) float64");
  if (have_dot()) {
    BOOST_TEST(render_svg(nul, "nul") == 0);
    BOOST_TEST(render_svg(text, "long") == 0);
  }
}

BOOST_AUTO_TEST_CASE(a_root_that_requires_no_grad_is_a_constant) {
  // Counted (and drawn) only with show_constants, as the other constants.
  const Tensor c = zeros({2}, DType::Float64);
  const DotGraph shown = graph_to_dot({c});
  BOOST_TEST(shown.constants == 1u);
  BOOST_TEST(shown.text.find("const0 [label=\"const\\n(2) float64\"") != std::string::npos, shown.text);
  DotOptions o;
  o.show_constants = false;
  const DotGraph hidden = graph_to_dot({c}, {}, o);
  BOOST_TEST(hidden.constants == 0u);
  BOOST_TEST(hidden.text.find("const") == std::string::npos, hidden.text);
  if (have_dot()) BOOST_TEST(render_svg(hidden.text, "hidden_root") == 0);
}

BOOST_AUTO_TEST_SUITE_END()
