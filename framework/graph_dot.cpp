// The recorded graph as Graphviz DOT (graph_dot.hpp).
#include "xgrad/framework/graph_dot.hpp"

#include <unordered_map>

#include "xgrad/framework/functional_detail.hpp"

namespace xgrad {

namespace {

// A DOT double-quoted string: backslashes and quotes escaped, newlines as \n, other control
// bytes (a NUL ends Graphviz's string) as the text \xHH. Graphviz rejects a string token over
// 16384 bytes, so a longer one is split into "..." + "..." pieces (DOT joins them), never
// inside an escape or a UTF-8 character.
std::string quoted(const std::string& s) {
  constexpr std::size_t kPiece = 4096;
  std::string q = "\"";
  std::size_t piece = 0;  // bytes in the current piece
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    std::string e(1, c);
    if (c == '"' || c == '\\') e = std::string("\\") + c;
    else if (c == '\n') e = "\\n";
    else if (b < 0x20 || b == 0x7f) {
      const char* hex = "0123456789abcdef";
      e = std::string("\\\\x") + hex[b >> 4] + hex[b & 15];
    }
    if (piece + e.size() > kPiece && ((b & 0xc0) != 0x80 || piece >= 2 * kPiece)) q += "\" + \"", piece = 0;
    q += e;
    piece += e.size();
  }
  return q + "\"";
}

std::string shape_and_dtype(const Tensor& t) { return shape_str(t.shape()) + " " + dtype_name(t.dtype()); }

}  // namespace

DotGraph graph_to_dot(const std::vector<Tensor>& roots, const NamedTensors& names, const DotOptions& options) {
  const char* op = "graph_to_dot";
  if (roots.empty()) throw_error<ValueError>(op, "no tensors given");
  for (std::size_t i = 0; i < roots.size(); ++i)
    if (!roots[i].defined()) throw_error<ValueError>(op, "tensor ", i, " is undefined");
  std::unordered_map<const TensorImpl*, std::string> name_of;
  for (const auto& [name, t] : names)
    if (t.defined()) name_of.emplace(t.impl(), name);

  DotGraph g;
  std::string nodes, edges;
  std::unordered_map<functional_detail::Key, std::string> id_of;
  std::vector<Tensor> order;  // tensors in the order their ids were given (a walk from the roots)
  auto id = [&](const Tensor& t) -> std::string {
    const auto key = functional_detail::key_of(t);
    auto it = id_of.find(key);
    if (it != id_of.end()) return it->second;
    const std::string fresh = (t.grad_fn() ? "op" : t.requires_grad() ? "leaf" : "const") + std::to_string(id_of.size());
    id_of.emplace(key, fresh);
    order.push_back(t);
    return fresh;
  };
  for (const auto& r : roots) id(r);
  std::unordered_map<functional_detail::Key, bool> is_root;
  for (const auto& r : roots) is_root[functional_detail::key_of(r)] = true;

  for (std::size_t next = 0; next < order.size(); ++next) {
    const Tensor t = order[next];
    const std::string me = id_of.at(functional_detail::key_of(t));
    const bool root = is_root.count(functional_detail::key_of(t)) > 0;
    auto named = name_of.find(t.impl());
    std::string label, attrs;
    if (const auto& node = t.grad_fn()) {
      ++g.ops;
      label = node->name() + (node->is_fused() ? " (fused)" : "") + "\n" + shape_and_dtype(t);
      if (node->released()) label += "\n(saved values freed)";
      attrs = std::string("shape=box, style=\"rounded,filled\", fillcolor=") + (root ? "\"#c8e6c9\"" : "\"#eeeeee\"") +
              (node->is_fused() ? ", peripheries=2" : "");
      const auto& inputs = node->inputs();
      for (std::size_t k = 0; k < inputs.size(); ++k) {
        const Tensor& in = inputs[k];
        if (!in.defined() || (!in.requires_grad() && !options.show_constants)) continue;
        edges += "  " + id(in) + " -> " + me + (inputs.size() > 1 ? " [label=" + quoted(std::to_string(k)) + "]" : "") + ";\n";
        ++g.edges;
      }
    } else if (t.requires_grad()) {
      ++g.leaves;
      label = (named != name_of.end() ? named->second : std::string("leaf")) + "\n" + shape_and_dtype(t);
      attrs = std::string("shape=box, style=filled, fillcolor=") + (root ? "\"#c8e6c9\"" : "\"#bbdefb\"");
    } else {
      if (!options.show_constants) continue;  // only a root reaches here then
      ++g.constants;
      label = (named != name_of.end() ? named->second : std::string("const")) + "\n" + shape_and_dtype(t);
      attrs = "shape=ellipse, style=filled, fillcolor=\"#f5f5f5\", fontcolor=\"#616161\", color=\"#9e9e9e\"";
    }
    if (t.grad_fn() && named != name_of.end()) label = named->second + " = " + label;
    nodes += "  " + me + " [label=" + quoted(label) + ", " + attrs + "];\n";
  }
  g.text = "digraph xgrad {\n";
  g.text += std::string("  rankdir=") + (options.left_to_right ? "LR" : "TB") + ";\n";
  g.text += "  graph [fontname=\"Helvetica\"];\n  node [fontname=\"Helvetica\", fontsize=10];\n  edge [fontname=\"Helvetica\", fontsize=8, color=\"#607d8b\"];\n";
  if (!options.title.empty()) g.text += "  label=" + quoted(options.title) + ";\n  labelloc=t;\n";
  g.text += nodes + edges + "}\n";
  return g;
}

}  // namespace xgrad
