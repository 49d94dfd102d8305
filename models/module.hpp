// xgrad/models/module.hpp — the Module base: named parameters, submodules, modes.
//
// A module registers pointers to its own Tensor members and child modules, so modules are
// neither copyable nor movable: hold them as members or through std::unique_ptr.
// Parameter names are hierarchical, joined with '.', as in PyTorch's state_dict:
// "blocks.0.attn.in_proj_weight".
//
// Calling a module: every module with a forward also has operator() taking the same
// arguments (model(x) is model.forward(x)). UnaryModule below is the interface of the
// modules that map one tensor to one tensor: what Sequential (models/containers.hpp) chains.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "xgrad/framework/tensor.hpp"

namespace xgrad {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // Every parameter of this module and its submodules, in registration order (own
  // parameters first, then each child's); recurse = false: this module's own only (torch's
  // named_parameters(recurse=False)).
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, const Module*>> named_modules() const;  // includes "" = this
  std::size_t parameter_count() const;  // number of scalar parameters

  void train(bool on = true);           // recursive
  void eval() { train(false); }
  bool training() const { return training_; }
  void zero_grad();                     // drops every parameter's .grad

  // Converts every parameter to dtype (float32 / float64) in place, keeping values, as
  // torch's Module.to: every handle to a parameter (an optimizer built before, a user's copy)
  // sees the converted tensor, so optimizers keep working (their state is converted at
  // their next step); .grad is dropped. A graph recorded before keeps the old values.
  void to(DType dtype);
  DType dtype() const;                  // of the first parameter (Float32 when none)

  // What load_parameters skipped (torch's load_state_dict result), in model / src order.
  struct LoadResult {
    std::vector<std::string> missing_keys;     // parameters not in src: left unchanged
    std::vector<std::string> unexpected_keys;  // src names that are no parameter: ignored
  };

  // Copies values from `src` into the parameters of the same name (in place, keeping each
  // parameter's storage and dtype). Names in src must be unique. strict (default): the
  // names must be exactly the model's (ValueError listing every missing and unexpected
  // name); strict = false: missing and unexpected names are returned instead. Every
  // matched value must have the parameter's shape (ShapeError) and a float dtype
  // (DTypeError); float32 and float64 values are converted to the parameter's dtype, the
  // same rule as load_checkpoint and torch's load_state_dict. Validates everything first:
  // on error nothing changes.
  LoadResult load_parameters(const NamedTensors& src, bool strict = true);

  // The parameter slots themselves, writable (optimizers, checkpoints, conversions).
  std::vector<std::pair<std::string, Tensor*>> parameter_slots();

 protected:
  // Names must be non-empty and unique within this module, across parameters and children
  // (ValueError). `slot` / `child` must outlive this module (members, or owned by it).
  void register_parameter(const std::string& name, Tensor* slot);
  void register_module(const std::string& name, Module* child);

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) const;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

// A module computing one tensor from one tensor: Linear, Embedding, LayerNorm, Dropout,
// FeedForward, the activations (ReLU, GELU, ...), Functional and Sequential. forward is
// const, as every one of these computes its output from its parameters and input only;
// Dropout's mask generator is the one exception (a mutable member: a forward in training
// mode advances it). A user module writes `Tensor forward(const Tensor& x) const override`
// and gets operator() from here.
class UnaryModule : public Module {
 public:
  virtual Tensor forward(const Tensor& x) const = 0;
  Tensor operator()(const Tensor& x) const { return forward(x); }
};

}  // namespace xgrad
