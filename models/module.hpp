// xgrad/models/module.hpp — the Module base: named parameters, submodules, modes.
//
// A module registers pointers to its own Tensor members and child modules, so modules are
// neither copyable nor movable: hold them as members or through std::unique_ptr.
// Parameter names are hierarchical, joined with '.', as in PyTorch's state_dict:
// "blocks.0.attn.in_proj_weight".
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

  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  std::vector<std::pair<std::string, const Module*>> named_modules() const;  // includes "" = this
  std::size_t parameter_count() const;  // number of scalar parameters

  void train(bool on = true);           // recursive
  void eval() { train(false); }
  bool training() const { return training_; }
  void zero_grad();                     // drops every parameter's .grad

  // Converts every parameter to dtype (float32 / float64), keeping values; each becomes a
  // new leaf that requires grad. Optimizers built before must be rebuilt.
  void to(DType dtype);
  DType dtype() const;                  // of the first parameter (Float32 when none)

  // Copies values from `src` (names and shapes must match exactly; dtypes are converted).
  // Validates everything first: on error nothing changes.
  void load_parameters(const NamedTensors& src);

  // The parameter slots themselves, writable (optimizers, checkpoints, conversions).
  std::vector<std::pair<std::string, Tensor*>> parameter_slots();

 protected:
  void register_parameter(const std::string& name, Tensor* slot);
  void register_module(const std::string& name, Module* child);

 private:
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Tensor*>>& out) const;
  std::vector<std::pair<std::string, Tensor*>> params_;
  std::vector<std::pair<std::string, Module*>> children_;
  bool training_ = true;
};

}  // namespace xgrad
