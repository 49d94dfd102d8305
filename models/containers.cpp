// Sequential, ModuleList, Functional.
#include <cxxabi.h>

#include <cstdlib>

#include "xgrad/models/containers.hpp"

namespace xgrad {
namespace containers_detail {

std::string type_name(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string out = status == 0 && demangled ? demangled : type.name();
  std::free(demangled);
  if (out.compare(0, 7, "xgrad::") == 0) out = out.substr(7);
  return out;
}

void check_child_name(const char* container, const std::string& name, const std::vector<std::string>& names) {
  if (name.empty()) throw_error<ValueError>(container, "a module name must be non-empty");
  if (name.find('.') != std::string::npos)
    throw_error<ValueError>(container, "module name '", name, "' must not contain '.' (it separates parameter names)");
  for (const auto& n : names)
    if (n == name) throw_error<ValueError>(container, "module name '", name, "' is already taken");
}

void throw_index(const char* container, std::size_t i, std::size_t size) {
  throw_error<IndexError>(container, "index ", i, " is out of range for ", size, size == 1 ? " module" : " modules");
}

void throw_type(const char* container, std::size_t i, const std::string& name, const Module& m,
                const std::type_info& wanted) {
  throw_error<ValueError>(container, "module ", i, " ('", name, "') is a ", type_name(typeid(m)), ", not a ",
                          type_name(wanted));
}

}  // namespace containers_detail

Tensor Functional::forward(const Tensor& x) const {
  if (!fn_) throw_error<ValueError>("Functional", "the function is empty");
  return fn_(x);
}

void Sequential::add(const std::string& name, std::unique_ptr<Module> module,
                     std::function<Tensor(const Tensor&)> call) {
  containers_detail::check_child_name("Sequential", name, names_);
  // Room first, so that nothing below throws once the child is registered.
  names_.reserve(names_.size() + 1);
  modules_.reserve(modules_.size() + 1);
  calls_.reserve(calls_.size() + 1);
  std::string owned_name = name;
  register_module(owned_name, module.get());
  names_.push_back(std::move(owned_name));
  modules_.push_back(std::move(module));
  calls_.push_back(std::move(call));
}

Tensor Sequential::forward(const Tensor& x) const {
  Tensor h = x;
  for (const auto& call : calls_) h = call(h);
  return h;
}

Module& Sequential::operator[](std::size_t i) const {
  if (i >= modules_.size()) containers_detail::throw_index("Sequential", i, modules_.size());
  return *modules_[i];
}

const std::string& Sequential::name(std::size_t i) const {
  if (i >= names_.size()) containers_detail::throw_index("Sequential", i, names_.size());
  return names_[i];
}

void ModuleList::add(std::unique_ptr<Module> module) {
  modules_.reserve(modules_.size() + 1);  // nothing below throws once the child is registered
  register_module(std::to_string(modules_.size()), module.get());
  modules_.push_back(std::move(module));
}

Module& ModuleList::operator[](std::size_t i) const {
  if (i >= modules_.size()) containers_detail::throw_index("ModuleList", i, modules_.size());
  return *modules_[i];
}

}  // namespace xgrad
