// xgrad/models/containers.hpp — Sequential, ModuleList and Functional (torch.nn.Sequential,
// torch.nn.ModuleList; libtorch's torch::nn::Sequential / ModuleList / Functional).
//
// Both containers own their modules (std::unique_ptr) and register each as a child, so
// named_parameters(), train()/eval(), zero_grad(), to(dtype), load_parameters and
// checkpoints see through them, with PyTorch's state_dict names: the i-th module is named
// "i" ("0.weight", "2.bias"), or the name given to push_back ("fc1.weight"). A PyTorch
// nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)) state_dict loads unchanged into
//   Sequential mlp{std::make_unique<Linear>(4, 8, true, rng), std::make_unique<ReLU>(),
//                  std::make_unique<Linear>(8, 3, true, rng)};
//
// BUILD WITH BRACES when the modules' constructors draw from one Rng: the elements of a
// braced list are evaluated left to right, but the arguments of a call in parentheses in an
// unspecified order (GCC builds the last argument first), so Sequential(make_unique<Linear>(
// .., rng), ...) initialises the layers differently with g++ and clang++. push_back one by
// one is always in order.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "xgrad/models/layers.hpp"

namespace xgrad {

// A function as a module (no parameters): Functional(relu), Functional(gelu) (the exact one),
// Functional([](const Tensor& x) { return gelu(x, GeluApproximation::Tanh); }).
class Functional : public UnaryModule {
 public:
  using Fn = std::function<Tensor(const Tensor&)>;
  explicit Functional(Tensor (*fn)(const Tensor&)) : fn_(fn) {}  // picks the one-argument overload
  explicit Functional(Fn fn) : fn_(std::move(fn)) {}
  Tensor forward(const Tensor& x) const override;  // fn(x); ValueError if fn is empty

 private:
  Fn fn_;
};

namespace containers_detail {
// "Linear" for xgrad::Linear (demangled), for messages.
std::string type_name(const std::type_info& type);
// ValueError unless name is non-empty, has no '.' and is not in `names`.
void check_child_name(const char* container, const std::string& name, const std::vector<std::string>& names);
[[noreturn]] void throw_index(const char* container, std::size_t i, std::size_t size);
[[noreturn]] void throw_type(const char* container, std::size_t i, const std::string& name, const Module& m,
                             const std::type_info& wanted);

// A function-like argument of Sequential: callable as Tensor(const Tensor&), not a module
// (modules are not copyable: pass them as std::unique_ptr).
template <class F>
constexpr bool is_tensor_function_v =
    !std::is_base_of_v<Module, std::decay_t<F>> && std::is_invocable_r_v<Tensor, std::decay_t<F>&, const Tensor&>;
template <class T>
struct is_module_ptr : std::false_type {};
template <class M>
struct is_module_ptr<std::unique_ptr<M>> : std::is_base_of<Module, M> {};
template <class T>
constexpr bool is_sequential_item_v = is_module_ptr<std::decay_t<T>>::value || is_tensor_function_v<T>;

template <class M, class = void>
struct has_unary_forward : std::false_type {};
template <class M>
struct has_unary_forward<M, std::void_t<decltype(std::declval<M&>().forward(std::declval<const Tensor&>()))>>
    : std::is_convertible<decltype(std::declval<M&>().forward(std::declval<const Tensor&>())), Tensor> {};
}  // namespace containers_detail

// Modules applied in order: forward(x) = m_{n-1}(...m_1(m_0(x))) (x itself when empty, as
// torch.nn.Sequential). Holds any module whose forward(const Tensor&) returns a Tensor
// (every UnaryModule, and e.g. a TransformerBlock called with its default options), and plain
// functions Tensor(const Tensor&), wrapped in a Functional.
class Sequential : public UnaryModule {
 public:
  Sequential() = default;
  // Sequential{std::make_unique<Linear>(4, 8, true, rng), relu, std::make_unique<Linear>(8, 3, true, rng)}:
  // each argument a std::unique_ptr to a module or a function; named "0", "1", ...
  template <class... Items,
            std::enable_if_t<(sizeof...(Items) > 0) && (containers_detail::is_sequential_item_v<Items> && ...), int> = 0>
  explicit Sequential(Items&&... items) {
    (push_back(std::forward<Items>(items)), ...);
  }

  // Appends a module (named by its position, or `name`: non-empty, no '.', unique; ValueError)
  // and returns it, typed.
  template <class M>
  M& push_back(std::unique_ptr<M> module) {
    return push_back(std::to_string(size()), std::move(module));
  }
  template <class M>
  M& push_back(const std::string& name, std::unique_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "Sequential: push_back takes a std::unique_ptr to a Module");
    static_assert(containers_detail::has_unary_forward<M>::value,
                  "Sequential: a module needs forward(const Tensor&) returning a Tensor (wrap others in a Functional)");
    if (!module) throw_error<ValueError>("Sequential", "module '", name, "' is null");
    M* raw = module.get();
    add(name, std::move(module), [raw](const Tensor& x) -> Tensor { return raw->forward(x); });
    return *raw;
  }
  // A function Tensor(const Tensor&) (a lambda, relu, gelu's one-argument overload, ...), as a
  // Functional.
  Functional& push_back(Tensor (*fn)(const Tensor&)) { return push_back(std::make_unique<Functional>(fn)); }
  Functional& push_back(const std::string& name, Tensor (*fn)(const Tensor&)) {
    return push_back(name, std::make_unique<Functional>(fn));
  }
  template <class F, std::enable_if_t<containers_detail::is_tensor_function_v<F>, int> = 0>
  Functional& push_back(F&& fn) {
    return push_back(std::make_unique<Functional>(Functional::Fn(std::forward<F>(fn))));
  }
  template <class F, std::enable_if_t<containers_detail::is_tensor_function_v<F>, int> = 0>
  Functional& push_back(const std::string& name, F&& fn) {
    return push_back(name, std::make_unique<Functional>(Functional::Fn(std::forward<F>(fn))));
  }

  Tensor forward(const Tensor& x) const override;

  std::size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  Module& operator[](std::size_t i) const;     // IndexError when i >= size()
  const std::string& name(std::size_t i) const;  // IndexError when i >= size()
  // The i-th module as a T (IndexError out of range; ValueError naming both types when it is
  // not a T): seq.at<Linear>(0).weight.
  template <class T>
  T& at(std::size_t i) const {
    Module& m = (*this)[i];
    if (T* typed = dynamic_cast<T*>(&m)) return *typed;
    containers_detail::throw_type("Sequential", i, names_[i], m, typeid(T));
  }

 private:
  void add(const std::string& name, std::unique_ptr<Module> module, std::function<Tensor(const Tensor&)> call);
  std::vector<std::string> names_;
  std::vector<std::unique_ptr<Module>> modules_;
  std::vector<std::function<Tensor(const Tensor&)>> calls_;
};

// Modules of any kind kept in a list and registered as "0", "1", ... (torch.nn.ModuleList):
// the model calls them itself, e.g. a stack of TransformerBlocks:
//   ModuleList blocks;
//   for (int i = 0; i < 4; ++i) blocks.push_back(std::make_unique<TransformerBlock>(options, rng));
//   for (std::size_t i = 0; i < blocks.size(); ++i) x = blocks.at<TransformerBlock>(i)(x);
// Range-for visits the owning pointers: for (const auto& m : blocks) m->eval();
class ModuleList : public Module {
 public:
  ModuleList() = default;
  template <class... Items, std::enable_if_t<(sizeof...(Items) > 0), int> = 0>
  explicit ModuleList(std::unique_ptr<Items>... modules) {  // build with braces (see above)
    (push_back(std::move(modules)), ...);
  }

  // Appends `module` as child "size()" and returns it, typed. ValueError when null.
  template <class M>
  M& push_back(std::unique_ptr<M> module) {
    static_assert(std::is_base_of_v<Module, M>, "ModuleList: push_back takes a std::unique_ptr to a Module");
    if (!module) throw_error<ValueError>("ModuleList", "module ", size(), " is null");
    M* raw = module.get();
    add(std::move(module));
    return *raw;
  }

  std::size_t size() const { return modules_.size(); }
  bool empty() const { return modules_.empty(); }
  Module& operator[](std::size_t i) const;  // IndexError when i >= size()
  template <class T>
  T& at(std::size_t i) const {  // IndexError / ValueError as Sequential::at
    Module& m = (*this)[i];
    if (T* typed = dynamic_cast<T*>(&m)) return *typed;
    containers_detail::throw_type("ModuleList", i, std::to_string(i), m, typeid(T));
  }
  using const_iterator = std::vector<std::unique_ptr<Module>>::const_iterator;
  const_iterator begin() const { return modules_.begin(); }
  const_iterator end() const { return modules_.end(); }

 private:
  void add(std::unique_ptr<Module> module);
  std::vector<std::unique_ptr<Module>> modules_;
};

}  // namespace xgrad
