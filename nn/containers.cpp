#include "nn/containers.h"

#include "runtime/ops.h"

namespace ember::nn {

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
  for (const ModulePtr& m : modules_)
    out = m->forward(out);
  return out;
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

Tensor ResidualBlock::forward(const Tensor& x) {
  return x + module->forward(x);
}

std::shared_ptr<Module> ResidualBlock::make_clone() const {
  return make<ResidualBlock>(make_clone_of(*module));
}

}  // namespace ember::nn
