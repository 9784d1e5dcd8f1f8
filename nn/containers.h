// Containers: Sequential (nests freely), ModuleList, and ResidualBlock (x + f(x)).
#pragma once

#include <initializer_list>

#include "nn/module.h"

namespace ember::nn {

// Children named "0", "1", ...; forward feeds each one's output to the next. A batch norm
// followed by a ReLU runs as one batch_norm_relu (nn::fusable_with_relu; the same values).
//   auto block = nn::make<nn::Sequential>({nn::make<nn::Linear>(4, 8), nn::make<nn::ReLU>(),
//                                          nn::make<nn::Sequential>({...})});
class Sequential : public Module {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<ModulePtr> modules);
  void push_back(ModulePtr module);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Sequential"; }
  void replace_child(const std::string& name, ModulePtr module) override;
  size_t size() const { return modules_.size(); }
  const ModulePtr& operator[](size_t index) const;

 protected:
  std::shared_ptr<Module> make_clone() const override;

 private:
  std::vector<ModulePtr> modules_;
};

// A list of modules registered as "0", "1", ... with no forward of its own.
class ModuleList : public Module {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<ModulePtr> modules);
  void push_back(ModulePtr module);
  std::string type_name() const override { return "ModuleList"; }
  void replace_child(const std::string& name, ModulePtr module) override;
  size_t size() const { return modules_.size(); }
  const ModulePtr& operator[](size_t index) const;
  std::vector<ModulePtr>::const_iterator begin() const { return modules_.begin(); }
  std::vector<ModulePtr>::const_iterator end() const { return modules_.end(); }

 protected:
  std::shared_ptr<Module> make_clone() const override;

 private:
  std::vector<ModulePtr> modules_;
};

// x + module(x), as Catalyst's ResidualBlock.
class ResidualBlock : public Module {
 public:
  explicit ResidualBlock(ModulePtr module);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "ResidualBlock"; }
  void replace_child(const std::string& name, ModulePtr module) override;
  ModulePtr module;

 protected:
  std::shared_ptr<Module> make_clone() const override;
};

}  // namespace ember::nn
