// Adam and AdamW (torch.optim.Adam / AdamW), with PyTorch's bias correction:
//
//   g = grad (-grad when maximize);  Adam: g += weight_decay * p;  AdamW: p *= 1 - lr *
//   weight_decay m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g v_max = max(v_max,
//   v) when amsgrad (and used in place of v) p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 -
//   beta2^t) + eps)
#pragma once

#include "optim/optimizer.h"

namespace ember::optim {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
  bool fused = true;  // false: the reference path written with ember ops

  // A group of `params` with these hyper-parameters (change fields to give it its own).
  ParamGroup group(std::vector<Tensor> params) const;
};

// AdamW's options differ from Adam's only in the default weight decay (PyTorch's 1e-2).
struct AdamWOptions : AdamOptions {
  AdamWOptions() { weight_decay = 1e-2; }
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, const AdamOptions& options = {});
  Adam(const NamedParameters& params, const AdamOptions& options = {});
  // Groups carry their own hyper-parameters; only options.fused is read from `options`.
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options = {});

  std::string name() const override { return decoupled_ ? "AdamW" : "Adam"; }

 protected:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled);

  void check_hyper_parameters(const ParamGroup& group) const override;
  void update_fused(const ParamGroup& group, Tensor& master, const Tensor& grad, Tensor& model,
                    ParamState& state) override;
  void update_fused_cuda(const ParamGroup& group, std::vector<FusedParam>& params) override;
  void update_reference(const ParamGroup& group, Tensor& master, const Tensor& grad,
                        ParamState& state) override;
  std::vector<std::string> hyper_parameter_names() const override;
  std::vector<std::string> stepped_state_names(const ParamGroup& group) const override;

 private:
  bool decoupled_;
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});
  AdamW(const NamedParameters& params, const AdamWOptions& options = {});
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});
};

}  // namespace ember::optim
