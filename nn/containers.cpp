#include "nn/containers.h"

#include "nn/layers.h"
#include "runtime/ops.h"

namespace ember::nn {
namespace {

// Children of the lists are named by their index: "3" -> 3.
size_t child_index(const Module& list, const std::string& name, size_t size) {
  size_t index = 0;
  bool ok = !name.empty() && name.size() < 10;
  for (char c : name) {
    ok = ok && c >= '0' && c <= '9';
    index = index * 10 + static_cast<size_t>(c - '0');
  }
  EMBER_CHECK(ok && index < size, list.type_name(), ": no child is registered as '", name,
              "' (its ", size, " children are named by their index from 0)");
  return index;
}

}  // namespace

Sequential::Sequential(std::initializer_list<ModulePtr> modules) {
  for (const ModulePtr& m : modules)
    push_back(m);
}

void Sequential::push_back(ModulePtr module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

Tensor Sequential::forward(const Tensor& x) {
  Tensor out = x;
  for (size_t i = 0; i < modules_.size(); ++i) {
    if (i + 1 < modules_.size() && fusable_with_relu(*modules_[i], *modules_[i + 1])) {
      out = static_cast<BatchNorm&>(*modules_[i]).forward_relu(out);
      ++i;  // the ReLU ran inside
      continue;
    }
    out = modules_[i]->forward(out);
  }
  return out;
}

void Sequential::replace_child(const std::string& name, ModulePtr module) {
  const size_t index = child_index(*this, name, modules_.size());
  set_child(name, module);
  modules_[index] = std::move(module);
}

const ModulePtr& Sequential::operator[](size_t index) const {
  EMBER_CHECK(index < modules_.size(), "Sequential: index ", index, " is out of range for ",
              modules_.size(), " modules");
  return modules_[index];
}

std::shared_ptr<Module> Sequential::make_clone() const {
  auto copy = make<Sequential>();
  for (const ModulePtr& m : modules_)
    copy->push_back(make_clone_of(*m));
  return copy;
}

ModuleList::ModuleList(std::initializer_list<ModulePtr> modules) {
  for (const ModulePtr& m : modules)
    push_back(m);
}

void ModuleList::push_back(ModulePtr module) {
  register_module(std::to_string(modules_.size()), module);
  modules_.push_back(std::move(module));
}

void ModuleList::replace_child(const std::string& name, ModulePtr module) {
  const size_t index = child_index(*this, name, modules_.size());
  set_child(name, module);
  modules_[index] = std::move(module);
}

const ModulePtr& ModuleList::operator[](size_t index) const {
  EMBER_CHECK(index < modules_.size(), "ModuleList: index ", index, " is out of range for ",
              modules_.size(), " modules");
  return modules_[index];
}

std::shared_ptr<Module> ModuleList::make_clone() const {
  auto copy = make<ModuleList>();
  for (const ModulePtr& m : modules_)
    copy->push_back(make_clone_of(*m));
  return copy;
}

ResidualBlock::ResidualBlock(ModulePtr inner) : module(std::move(inner)) {
  register_module("block", module);  // Catalyst names it `block`
}

void ResidualBlock::replace_child(const std::string& name, ModulePtr replacement) {
  set_child(name, replacement);
  module = std::move(replacement);
}

Tensor ResidualBlock::forward(const Tensor& x) {
  EMBER_CHECK(module != nullptr, "ResidualBlock: its module was set to null");
  return x + module->forward(x);
}

std::shared_ptr<Module> ResidualBlock::make_clone() const {
  EMBER_CHECK(module != nullptr, "ResidualBlock: cannot clone: its module was set to null");
  return make<ResidualBlock>(make_clone_of(*module));
}

}  // namespace ember::nn
