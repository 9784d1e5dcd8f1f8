// Loss modules: `loss(input, target)` returns the reduced loss, as torch.nn's losses.
#pragma once

#include "nn/module.h"
#include "runtime/ops.h"

namespace ember::nn {

class CrossEntropyLoss : public Module {
 public:
  explicit CrossEntropyLoss(CrossEntropyOptions options = {}) : options(options) {}
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return cross_entropy(logits, target, options);
  }
  std::string type_name() const override { return "CrossEntropyLoss"; }
  CrossEntropyOptions options;

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<CrossEntropyLoss>(options); }
};

class NLLLoss : public Module {
 public:
  explicit NLLLoss(int64_t ignore_index = -100, Reduction reduction = Reduction::mean)
      : ignore_index(ignore_index), reduction(reduction) {}
  Tensor operator()(const Tensor& log_probs, const Tensor& target) const {
    return nll_loss(log_probs, target, ignore_index, reduction);
  }
  std::string type_name() const override { return "NLLLoss"; }
  int64_t ignore_index;
  Reduction reduction;

 protected:
  std::shared_ptr<Module> make_clone() const override {
    return make<NLLLoss>(ignore_index, reduction);
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

class BCEWithLogitsLoss : public Module {
 public:
  explicit BCEWithLogitsLoss(Reduction reduction = Reduction::mean) : reduction(reduction) {}
  Tensor operator()(const Tensor& logits, const Tensor& target) const {
    return binary_cross_entropy_with_logits(logits, target, reduction);
  }
  std::string type_name() const override { return "BCEWithLogitsLoss"; }
  Reduction reduction;

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<BCEWithLogitsLoss>(reduction); }
};

}  // namespace ember::nn
