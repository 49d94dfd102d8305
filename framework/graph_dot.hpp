// xgrad/framework/graph_dot.hpp — the recorded graph of a tensor as Graphviz DOT text.
//
//   std::string dot = to_dot(loss, model.named_parameters());
//   // dot -Tsvg graph.dot -o graph.svg   (Debian: graphviz)
//
// One box per recorded op (Node): its name, its output's shape and dtype; fused ops
// (record_fused) are drawn double-bordered, and an op whose saved values a backward freed says
// so. One node per leaf that requires grad, labelled with its name when `names` holds it
// (module.named_parameters() names parameters: "blocks.0.attn.in_proj_weight"), else "leaf";
// with show_constants, one grey node per input that requires no grad (masks, data, constants;
// a root that requires no grad too: without show_constants it is not drawn).
// Names and labels may hold any bytes: control bytes are shown as the text \xHH (a NUL would
// end Graphviz's string) and a label over 4096 bytes is written as "..." + "..." pieces
// (Graphviz refuses a string token over 16384 bytes).
// Edges run from each input to the op that reads it (data flow), numbered by input position
// for ops with several inputs. The roots are drawn in green; an op whose output `names` holds
// (e.g. {"loss", loss}) is labelled "loss = <op>".
// The graph of a gradient computed with create_graph is an ordinary graph: to_dot(grads[0]).
// Node order and ids are deterministic (a walk from the roots, inputs in order).
#pragma once
#include <string>
#include <vector>

#include "xgrad/framework/autograd.hpp"
#include "xgrad/models/module.hpp"  // NamedTensors

namespace xgrad {

struct DotOptions {
  bool show_constants = true;  // inputs that require no grad
  std::string title;           // a graph label, when not empty
  bool left_to_right = false;  // rankdir=LR instead of top to bottom
};

struct DotGraph {
  std::string text;           // the DOT source
  std::size_t ops = 0;        // recorded nodes drawn (each Node once)
  std::size_t leaves = 0;     // leaves that require grad
  std::size_t constants = 0;  // inputs (and roots) that require no grad (0 unless show_constants)
  std::size_t edges = 0;
};

// ValueError when roots is empty or holds an undefined tensor.
DotGraph graph_to_dot(const std::vector<Tensor>& roots, const NamedTensors& names = {}, const DotOptions& options = {});
inline std::string to_dot(const Tensor& root, const NamedTensors& names = {}, const DotOptions& options = {}) {
  return graph_to_dot({root}, names, options).text;
}

}  // namespace xgrad
