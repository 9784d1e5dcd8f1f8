// Loss modules: `loss(input, target)` returns the reduced loss, as torch.nn's losses.
#pragma once

#include <utility>

#include "nn/module.h"
#include "runtime/ops.h"

namespace ember::nn {

// A class weight (options.weight) is registered as the buffer "weight", as in PyTorch: it moves
// with to(device) and is part of the state_dict.
class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {}) : options(std::move(options)) {
    if (this->options.weight.defined())
      this->options.weight = register_buffer("weight", this->options.weight);
  }
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return cross_entropy(logits, target, options);
  }
  std::string type_name() const override { return "CrossEntropyLoss"; }
  CrossEntropyOptions options;

 protected:
  std::shared_ptr<Module> make_clone() const override {
    CrossEntropyOptions copy = options;  // a weight of its own, not the original's
    if (copy.weight.defined()) copy.weight = copy.weight.clone();
    return make<CrossEntropyLoss>(copy);
  }
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(int64_t ignore_index = -100, Reduction reduction = Reduction::mean,
                   const Tensor& class_weight = Tensor())
      : ignore_index(ignore_index), reduction(reduction) {
    if (class_weight.defined()) weight = register_buffer("weight", class_weight);
  }
  Tensor operator()(const Tensor& log_probs, const Tensor& target) const {
    return nll_loss(log_probs, target, ignore_index, reduction, weight);
  }
  std::string type_name() const override { return "NLLLoss"; }
  int64_t ignore_index;
  Reduction reduction;
  Tensor weight;  // (C), optional: the buffer "weight"

 protected:
  std::shared_ptr<Module> make_clone() const override {
    return make<NLLLoss>(ignore_index, reduction, weight.defined() ? weight.clone() : Tensor());
  }
};

class MSELoss : public Module {
 public:
  explicit MSELoss(Reduction reduction = Reduction::mean) : reduction(reduction) {}
  Tensor operator()(const Tensor& input, const Tensor& target) const {
    return mse_loss(input, target, reduction);
  }
  std::string type_name() const override { return "MSELoss"; }
  Reduction reduction;

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<MSELoss>(reduction); }
};

// weight and pos_weight (optional, e.g. pos_weight (C) for logits (N, C)) are the buffers
// "weight" and "pos_weight", as in PyTorch.
class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(Reduction reduction = Reduction::mean,
                             const Tensor& element_weight = Tensor(),
                             const Tensor& positive_weight = Tensor())
      : reduction(reduction) {
    if (element_weight.defined()) weight = register_buffer("weight", element_weight);
    if (positive_weight.defined()) pos_weight = register_buffer("pos_weight", positive_weight);
  }
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return binary_cross_entropy_with_logits(logits, target, reduction, weight, pos_weight);
  }
  std::string type_name() const override { return "BCEWithLogitsLoss"; }
  Reduction reduction;
  Tensor weight;      // optional: the buffer "weight"
  Tensor pos_weight;  // optional: the buffer "pos_weight"

 protected:
  std::shared_ptr<Module> make_clone() const override {
    return make<BCEWithLogitsLoss>(reduction, weight.defined() ? weight.clone() : Tensor(),
                                   pos_weight.defined() ? pos_weight.clone() : Tensor());
  }
};

}  // namespace ember::nn
