// Stochastic gradient descent with momentum, dampening, Nesterov and weight decay
// (torch.optim.SGD):
//
//   d = grad (-grad when maximize) + weight_decay * p
//   buf = d on the first step, else momentum * buf + (1 - dampening) * d
//   d = d + momentum * buf (nesterov), or buf
//   p = p - lr * d
#pragma once

#include "optim/optimizer.h"

namespace ember::optim {

struct SGDOptions {
  double lr = 1e-3;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
  bool fused = true;  // false: the reference path written with ember ops

  // A group of `params` with these hyper-parameters (change fields to give it its own).
  ParamGroup group(std::vector<Tensor> params) const;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, const SGDOptions& options = {});
  SGD(const NamedParameters& params, const SGDOptions& options = {});
  // Groups carry their own hyper-parameters; only options.fused is read from `options`.
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options = {});

  std::string name() const override { return "SGD"; }

 protected:
  void check_hyper_parameters(const ParamGroup& group) const override;
  void update_fused(const ParamGroup& group, Tensor& master, const Tensor& grad, Tensor& model,
                    ParamState& state) override;
  void update_fused_cuda(const ParamGroup& group, std::vector<FusedParam>& params) override;
  void update_reference(const ParamGroup& group, Tensor& master, const Tensor& grad,
                        ParamState& state) override;
  std::vector<std::string> hyper_parameter_names() const override;
  std::vector<std::string> stepped_state_names(const ParamGroup& group) const override;
};

}  // namespace ember::optim
