// Module base.
#include <cstring>
#include <map>
#include <set>

#include "xgrad/framework/array.hpp"
#include "xgrad/framework/autograd.hpp"
#include "xgrad/models/module.hpp"

namespace xgrad {

namespace {
void check_new_name(const std::string& name, const std::vector<std::pair<std::string, Tensor*>>& params,
                    const std::vector<std::pair<std::string, Module*>>& children) {
  if (name.empty()) throw_error<ValueError>("Module", "a parameter or submodule name must be non-empty");
  for (const auto& p : params)
    if (p.first == name) throw_error<ValueError>("Module", "name '", name, "' is already a parameter of this module");
  for (const auto& c : children)
    if (c.first == name) throw_error<ValueError>("Module", "name '", name, "' is already a submodule of this module");
}
}  // namespace

void Module::register_parameter(const std::string& name, Tensor* slot) {
  check_new_name(name, params_, children_);
  if (!slot->defined() || !is_float(slot->dtype()))
    throw_error<ValueError>("Module", "parameter '", name, "' must be a defined float tensor, got ",
                            slot->defined() ? dtype_name(slot->dtype()) : "an undefined tensor");
  slot->set_requires_grad(true);
  params_.emplace_back(name, slot);
}

void Module::register_module(const std::string& name, Module* child) {
  check_new_name(name, params_, children_);
  if (!child) throw_error<ValueError>("Module", "submodule '", name, "' is null");
  children_.emplace_back(name, child);
}

void Module::collect(const std::string& prefix,
                     std::vector<std::pair<std::string, Tensor*>>& out) const {
  for (const auto& [name, slot] : params_) out.emplace_back(prefix + name, slot);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", out);
}

std::vector<std::pair<std::string, Tensor*>> Module::parameter_slots() {
  std::vector<std::pair<std::string, Tensor*>> out;
  collect("", out);
  return out;
}

NamedTensors Module::named_parameters(bool recurse) const {
  std::vector<std::pair<std::string, Tensor*>> slots;
  if (recurse)
    collect("", slots);
  else
    slots = params_;
  NamedTensors out;
  for (auto& [name, slot] : slots) out.emplace_back(name, *slot);
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out{{"", this}};
  for (const auto& [name, child] : children_)
    for (const auto& [sub, m] : child->named_modules())
      out.emplace_back(sub.empty() ? name : name + "." + sub, m);
  return out;
}

std::size_t Module::parameter_count() const {
  std::size_t n = 0;
  for (const auto& [name, t] : named_parameters()) n += t.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::zero_grad() {
  for (auto& t : parameters()) t.zero_grad();
}

void Module::to(DType dtype) {
  if (!is_float(dtype))
    throw_error<DTypeError>("Module::to", "argument 'dtype' must be float32 or float64, got ", dtype_name(dtype));
  // In place, as torch's Module.to: every handle to a parameter (an optimizer's, a user's)
  // sees the converted value, so an optimizer built before keeps training the model. The old
  // storage stays with whatever saved it (a recorded graph); .grad is dropped (wrong dtype).
  std::vector<Tensor> converted;
  {
    NoGradGuard no_grad;
    for (auto& [name, slot] : parameter_slots())
      converted.push_back(slot->dtype() == dtype ? Tensor() : slot->detach().to(dtype).clone());
  }
  std::size_t i = 0;
  for (auto& [name, slot] : parameter_slots()) {
    const Tensor& c = converted[i++];
    if (!c.defined()) continue;
    slot->zero_grad();
    // The new storage continues the old version count, one write later: a graph recorded
    // before the conversion refuses to backward through it (version counter) instead of
    // mixing dtypes.
    c.impl()->value->version = slot->impl()->value->version + 1;
    slot->impl()->value = c.impl()->value;
    slot->impl()->dtype = dtype;
  }
}

DType Module::dtype() const {
  auto ps = named_parameters();
  return ps.empty() ? DType::Float32 : ps.front().second.dtype();
}

Module::LoadResult Module::load_parameters(const NamedTensors& src, bool strict) {
  const std::string op = "load_parameters";
  auto quoted = [](const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "'" : ", '") + n + "'";
    return out;
  };
  auto slots = parameter_slots();
  std::map<std::string, Tensor*> by_name;
  for (auto& [name, slot] : slots) by_name[name] = slot;
  std::set<std::string> seen;
  std::map<std::string, const Tensor*> given;
  LoadResult result;
  for (auto& [name, t] : src) {
    if (!seen.insert(name).second)
      throw_error<ValueError>(op, "parameter '", name, "' appears more than once in the source");
    if (by_name.count(name))
      given[name] = &t;
    else
      result.unexpected_keys.push_back(name);
  }
  for (auto& [name, slot] : slots)
    if (!given.count(name)) result.missing_keys.push_back(name);
  if (strict && (!result.missing_keys.empty() || !result.unexpected_keys.empty()))
    throw_error<ValueError>(op, "parameter names do not match the model:",
                            result.missing_keys.empty() ? "" : " missing " + quoted(result.missing_keys) + ";",
                            result.unexpected_keys.empty() ? "" : " unexpected " + quoted(result.unexpected_keys) + ";",
                            " nothing was loaded (strict = false loads the matching names)");
  for (auto& [name, slot] : slots) {
    auto it = given.find(name);
    if (it == given.end()) continue;
    const Tensor& t = *it->second;
    if (!t.defined())
      throw_error<DTypeError>(op, "parameter '", name,
                              "' must be a float32 or float64 tensor, got an undefined tensor; nothing was loaded");
    if (!is_float(t.dtype()))
      throw_error<DTypeError>(op, "parameter '", name, "' must be a float32 or float64 tensor, got ",
                              dtype_name(t.dtype()), " of shape ", t.shape(), "; nothing was loaded");
    if (t.shape() != slot->shape())
      throw_error<ShapeError>(op, "parameter '", name, "' has shape ", t.shape(), " but the model expects ",
                              slot->shape(), "; nothing was loaded");
  }
  NoGradGuard no_grad;
  for (auto& [name, t] : given) {
    Tensor* slot = by_name.at(name);
    Tensor v = t->detach().to(slot->dtype());
    std::memcpy(slot->mutable_raw_data(), v.raw_data(), v.nbytes());  // bumps the version
  }
  return result;
}

}  // namespace xgrad
