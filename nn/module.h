// nn::Module: named parameters, buffers and children, as PyTorch's nn.Module.
//
//   class Mlp : public nn::Module {
//    public:
//     Mlp() {
//       fc1 = register_module("fc1", nn::make<nn::Linear>(784, 128));
//       fc2 = register_module("fc2", nn::make<nn::Linear>(128, 10));
//     }
//     Tensor forward(const Tensor& x) override { return (*fc2)(relu((*fc1)(x))); }
//     std::shared_ptr<nn::Linear> fc1, fc2;
//   };
//   auto model = nn::make<Mlp>();          // a handle: copy it, pass it, store it
//   model->named_parameters();             // {"fc1.weight", ...}, {"fc1.bias", ...}, ...
//
// Modules are held by std::shared_ptr: a handle is valid from construction, copying it shares the
// module, and an empty one is plainly empty. state_dict keys are dotted paths of registration
// names, so checkpoints never depend on construction order.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/io/checkpoint.h"
#include "runtime/tensor.h"

namespace ember::nn {

class Module {
 public:
  Module() = default;
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The computation of single-input modules. Modules with other signatures (losses, attention
  // with a mask) add their own methods; calling this on them is an error naming the module.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  // The class name shown in errors and printing ("Linear").
  virtual std::string type_name() const = 0;
  // One line describing the options ("in_features=784, out_features=10, bias=true").
  virtual std::string extra_repr() const { return ""; }

  // ---- registration (call from the constructor) ----
  // Stores `tensor` under `name`; returns it (a handle sharing the registered tensor).
  Tensor register_parameter(const std::string& name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(const std::string& name, Tensor tensor);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // ---- traversal: registration order, children depth-first ----
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const {
    return children_;
  }
  // This module and every descendant, with dotted names ("" for this one).
  std::vector<std::pair<std::string, Module*>> named_modules();
  int64_t num_parameters() const;

  // ---- modes and conversion ----
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  // Moves every parameter and buffer to `device`, and floating ones to `dtype` when given, in
  // place: handles held by the modules (their members) follow.
  void to(const Device& device, std::optional<DType> dtype = std::nullopt);
  void to(DType dtype);
  void zero_grad(bool set_to_none = true);
  // fn(module) for every module, children first, then this one (as PyTorch).
  void apply(const std::function<void(Module&)>& fn);

  // ---- state ----
  // Parameters and buffers by dotted name.
  NamedTensors state_dict() const;
  // Copies values in place (converting dtype and device). strict: missing or unexpected keys are
  // an error listing them; a shape mismatch is always an error naming the key and both shapes.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // Nested, indented, like print(model) in PyTorch.
  std::string str() const;

  // A deep copy: a new module of the same type and configuration, with copies of every parameter
  // and buffer (same names, dtypes, devices, requires_grad) and the same training mode in every
  // submodule; gradients are not copied. The copy shares no storage with this module. Each module
  // type re-creates itself from its stored options (make_clone) and clone() then copies the state,
  // as LibTorch's Cloneable; the default generator is left where it was, although the re-created
  // modules draw their fresh initial values from it. A module shared by two parents is copied
  // twice (tying is not kept). A type without make_clone() says so by name.
  std::shared_ptr<Module> clone() const;

  // Puts `module` in place of the child registered as `name` (same name, same place): how
  // convert_sync_batchnorm swaps layers in a tree. Containers (Sequential, ModuleList,
  // ResidualBlock) support it; other types keep typed handles to their children that would go
  // stale, so they refuse by name unless they override this to update them.
  virtual void replace_child(const std::string& name, std::shared_ptr<Module> module);

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  // For replace_child overrides: swaps the registered child (the caller updates its handles).
  void set_child(const std::string& name, std::shared_ptr<Module> module);
  // For clone(): a new module of this type and configuration, children re-created the same way
  // (make_clone_of(child)), values fresh; clone() copies the state over it afterwards.
  virtual std::shared_ptr<Module> make_clone() const;
  static std::shared_ptr<Module> make_clone_of(const Module& module) { return module.make_clone(); }

 private:
  void check_new_name(const std::string& name) const;
  // Whether `module` is this module or one of its descendants.
  bool contains(const Module* module) const;
  void convert(std::optional<Device> device, std::optional<DType> dtype);
  void collect(const std::string& prefix, bool recurse, bool want_parameters,
               NamedTensors& out) const;
  void str_into(std::string& out, int indent) const;
  void copy_state_into(Module& copy) const;

  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

using ModulePtr = std::shared_ptr<Module>;

// Module::clone() keeping the static type: `std::shared_ptr<Linear> copy = nn::clone(fc);`
template <typename M>
std::shared_ptr<M> clone(const std::shared_ptr<M>& module) {
  EMBER_CHECK(module != nullptr, "nn::clone: the module handle is empty");
  return std::static_pointer_cast<M>(module->clone());
}

// std::make_shared with a shorter name: `auto fc = nn::make<nn::Linear>(784, 10);`
template <typename M, typename... Args>
std::shared_ptr<M> make(Args&&... args) {
  return std::make_shared<M>(std::forward<Args>(args)...);
}

}  // namespace ember::nn
