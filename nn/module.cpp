#include "nn/module.h"

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <typeinfo>

#include "runtime/ops.h"
#include "runtime/random.h"

namespace ember::nn {

Tensor Module::forward(const Tensor&) {
  EMBER_FAIL(type_name(), ": this module does not take a single input; call its own method");
}

void Module::check_new_name(const std::string& name) const {
  EMBER_CHECK(!name.empty() && name.find('.') == std::string::npos, type_name(),
              ": a registered name must be non-empty and contain no '.', got '", name, "'");
  auto taken = [&](const auto& list) {
    return std::any_of(list.begin(), list.end(), [&](const auto& e) { return e.first == name; });
  };
  EMBER_CHECK(!taken(parameters_) && !taken(buffers_) && !taken(children_), type_name(),
              ": the name '", name, "' is already registered");
}

Tensor Module::register_parameter(const std::string& name, Tensor tensor, bool requires_grad) {
  check_new_name(name);
  EMBER_CHECK(tensor.defined(), type_name(), ": parameter '", name, "' is undefined");
  EMBER_CHECK(tensor.is_leaf(), type_name(), ": parameter '", name,
              "' must be a leaf tensor (detach it first)");
  if (requires_grad) tensor.requires_grad_(true);
  parameters_.emplace_back(name, tensor);
  return tensor;
}

Tensor Module::register_buffer(const std::string& name, Tensor tensor) {
  check_new_name(name);
  EMBER_CHECK(tensor.defined(), type_name(), ": buffer '", name, "' is undefined");
  buffers_.emplace_back(name, tensor);
  return tensor;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> module) {
  check_new_name(name);
  EMBER_CHECK(module != nullptr, type_name(), ": child module '", name, "' is empty");
  EMBER_CHECK(!module->contains(this), type_name(), ": child '", name,
              "' is this module or holds it: a module tree cannot have a cycle");
  children_.emplace_back(name, std::move(module));
}

bool Module::contains(const Module* module) const {
  if (module == this) return true;
  for (const auto& [name, child] : children_) {
    if (child->contains(module)) return true;
  }
  return false;
}

void Module::set_child(const std::string& name, std::shared_ptr<Module> module) {
  EMBER_CHECK(module != nullptr, type_name(), ": the module replacing child '", name, "' is empty");
  EMBER_CHECK(!module->contains(this), type_name(), ": the module replacing child '", name,
              "' is this module or holds it: a module tree cannot have a cycle");
  for (auto& [child_name, child] : children_) {
    if (child_name == name) {
      child = std::move(module);
      return;
    }
  }
  EMBER_FAIL(type_name(), ": no child is registered as '", name, "'");
}

void Module::replace_child(const std::string& name, std::shared_ptr<Module>) {
  EMBER_FAIL(type_name(), ": cannot replace its child '", name,
             "': this module type keeps its own handles to its children (override "
             "replace_child() to update them, or build it with a Sequential)");
}

void Module::collect(const std::string& prefix, bool recurse, bool want_parameters,
                     NamedTensors& out) const {
  for (const auto& [name, tensor] : want_parameters ? parameters_ : buffers_)
    out.emplace_back(prefix + name, tensor);
  if (!recurse) return;
  for (const auto& [name, child] : children_)
    child->collect(prefix + name + ".", true, want_parameters, out);
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  collect("", recurse, true, out);
  // A module shared by two parents (weight tying) is listed once, under its first name.
  std::set<const TensorImpl*> seen;
  NamedTensors unique;
  for (auto& entry : out) {
    if (seen.insert(entry.second.impl()).second) unique.push_back(std::move(entry));
  }
  return unique;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_parameters(recurse))
    out.push_back(tensor);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  collect("", recurse, false, out);
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, tensor] : named_buffers(recurse))
    out.push_back(tensor);
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out = {{"", this}};
  for (auto& [name, child] : children_) {
    for (auto& [sub_name, module] : child->named_modules())
      out.emplace_back(sub_name.empty() ? name : name + "." + sub_name, module);
  }
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters())
    n += p.numel();
  return n;
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_)
    child->train(on);
}

void Module::convert(std::optional<Device> device, std::optional<DType> dtype) {
  NoGradGuard no_grad;
  auto convert_one = [&](const Tensor& t) {
    Tensor moved = device ? t.to(*device) : t;
    // Only floating tensors change dtype: counters and indices keep theirs.
    if (dtype && is_floating(t.dtype())) moved = moved.to(*dtype);
    if (moved.is_same(t)) return;
    const Tensor grad = t.grad();
    t.set_data(moved);
    if (grad.defined()) t.set_grad(grad.to(t.device()).to(t.dtype()));
  };
  for (auto& [name, p] : parameters_)
    convert_one(p);
  for (auto& [name, b] : buffers_)
    convert_one(b);
  for (auto& [name, child] : children_)
    child->convert(device, dtype);
}

void Module::to(const Device& device, std::optional<DType> dtype) {
  convert(device, dtype);
}

void Module::to(DType dtype) {
  convert(std::nullopt, dtype);
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      g.zero_();
    }
  }
}

void Module::apply(const std::function<void(Module&)>& fn) {
  for (auto& [name, child] : children_)
    child->apply(fn);
  fn(*this);
}

NamedTensors Module::state_dict() const {
  NamedTensors out;
  collect("", true, true, out);
  collect("", true, false, out);
  return out;
}

namespace {

// A wrapper (DistributedDataParallel, DataParallel) holds the model as its child "module", so
// its keys read "module.<key>". When no key matches as given, the prefix is removed from the
// state's keys, or added to them, whichever makes them this module's: a wrapped model's state
// dict loads into the unwrapped model and back, without the renaming PyTorch asks for.
std::map<std::string, const Tensor*> keys_as_this_module_names_them(
    const NamedTensors& state, const std::set<std::string>& own) {
  const std::string prefix = "module.";
  std::map<std::string, const Tensor*> given;
  bool any_match = false;
  bool all_prefixed = !state.empty();
  for (const auto& [name, tensor] : state) {
    given[name] = &tensor;
    any_match = any_match || own.count(name) > 0;
    all_prefixed = all_prefixed && name.rfind(prefix, 0) == 0;
  }
  if (any_match || state.empty()) return given;
  std::map<std::string, const Tensor*> renamed;
  if (all_prefixed) {
    for (const auto& [name, tensor] : state)
      renamed[name.substr(prefix.size())] = &tensor;
  } else {
    for (const auto& [name, tensor] : state)
      renamed.insert_or_assign(prefix + name, &tensor);
  }
  for (const auto& [name, tensor] : renamed) {
    if (own.count(name)) return renamed;
  }
  return given;
}

}  // namespace

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  NoGradGuard no_grad;
  const NamedTensors targets = state_dict();
  std::set<std::string> own;
  for (const auto& [name, target] : targets)
    own.insert(name);
  const std::map<std::string, const Tensor*> given = keys_as_this_module_names_them(state, own);

  // Everything is checked before anything is copied: a bad state dict changes nothing.
  std::vector<std::string> missing;
  std::vector<std::pair<Tensor, const Tensor*>> copies;  // (destination, source)
  std::set<std::string> used;
  for (const auto& [name, target] : targets) {
    auto it = given.find(name);
    if (it == given.end()) {
      missing.push_back(name);
      continue;
    }
    used.insert(name);
    const Tensor& source = *it->second;
    EMBER_CHECK(source.sizes() == target.sizes(), type_name(), ".load_state_dict: '", name,
                "' has shape ", shape_str(source.sizes()), " in the state dict but ",
                shape_str(target.sizes()), " in the model");
    copies.emplace_back(target, &source);
  }
  std::vector<std::string> unexpected;
  for (const auto& [name, tensor] : given) {
    if (!used.count(name)) unexpected.push_back(name);
  }
  if (strict && (!missing.empty() || !unexpected.empty())) {
    auto join = [](const std::vector<std::string>& names) {
      std::ostringstream out;
      for (size_t i = 0; i < names.size(); ++i)
        out << (i ? ", " : "") << names[i];
      return names.empty() ? std::string("none") : out.str();
    };
    EMBER_FAIL(type_name(), ".load_state_dict: missing keys: ", join(missing),
               "; unexpected keys: ", join(unexpected),
               " (pass strict = false to load the keys that match)");
  }
  for (auto& [destination, source] : copies)
    destination.copy_(*source);
}

void Module::str_into(std::string& out, int indent) const {
  out += type_name() + "(" + extra_repr();
  if (children_.empty()) {
    out += ")";
    return;
  }
  out += "\n";
  for (const auto& [name, child] : children_) {
    out += std::string(static_cast<size_t>(indent + 2), ' ') + "(" + name + "): ";
    child->str_into(out, indent + 2);
    out += "\n";
  }
  out += std::string(static_cast<size_t>(indent), ' ') + ")";
}

std::string Module::str() const {
  std::string out;
  str_into(out, 0);
  return out;
}

std::shared_ptr<Module> Module::make_clone() const {
  EMBER_FAIL(type_name(),
             ": clone() is not supported by this module type (it has no make_clone(), "
             "which re-creates the module from its options)");
}

void Module::copy_state_into(Module& copy) const {
  auto copy_tensors = [&](const NamedTensors& from, NamedTensors& to, const char* what) {
    EMBER_CHECK(from.size() == to.size(), type_name(), ".clone: the copy has ", to.size(), " ",
                what, "s but the original has ", from.size(),
                " (make_clone() must re-create the same "
                "configuration)");
    for (size_t i = 0; i < from.size(); ++i) {
      EMBER_CHECK(from[i].first == to[i].first, type_name(), ".clone: ", what, " '", from[i].first,
                  "' is named '", to[i].first, "' in the copy");
      const Tensor& source = from[i].second;
      const Tensor& target = to[i].second;
      if (target.requires_grad() != source.requires_grad()) {
        Tensor handle = target;
        handle.requires_grad_(source.requires_grad());
      }
      // set_data, not copy_: the copy takes the original's shape, dtype and device as they are
      // now (after any to()), and the handles the copy's members hold follow.
      target.set_data(source.detach().clone());
    }
  };
  copy_tensors(parameters_, copy.parameters_, "parameter");
  copy_tensors(buffers_, copy.buffers_, "buffer");
  copy.training_ = training_;
  EMBER_CHECK(children_.size() == copy.children_.size(), type_name(), ".clone: the copy has ",
              copy.children_.size(), " children but the original has ", children_.size());
  for (size_t i = 0; i < children_.size(); ++i) {
    EMBER_CHECK(children_[i].first == copy.children_[i].first, type_name(), ".clone: child '",
                children_[i].first, "' is named '", copy.children_[i].first, "' in the copy");
    children_[i].second->copy_state_into(*copy.children_[i].second);
  }
}

namespace {

// Re-created modules initialise their parameters from the default generator; putting it back
// makes clone() free of side effects (a training run draws the same numbers with or without it).
class PreserveDefaultGenerator {
 public:
  PreserveDefaultGenerator() : saved_(default_generator().state()) {}
  ~PreserveDefaultGenerator() { default_generator().set_state(saved_); }
  PreserveDefaultGenerator(const PreserveDefaultGenerator&) = delete;
  PreserveDefaultGenerator& operator=(const PreserveDefaultGenerator&) = delete;

 private:
  GeneratorState saved_;
};

}  // namespace

std::shared_ptr<Module> Module::clone() const {
  std::shared_ptr<Module> copy;
  {
    PreserveDefaultGenerator preserve;
    copy = make_clone();
  }
  EMBER_CHECK(copy != nullptr, type_name(), ".clone: make_clone() returned nothing");
  const Module& made = *copy;
  EMBER_CHECK(typeid(made) == typeid(*this), type_name(), ".clone: make_clone() returned a ",
              made.type_name(), ": a module type derived from another must override make_clone()");
  NoGradGuard no_grad;
  copy_state_into(*copy);
  return copy;
}

}  // namespace ember::nn
