// The optimizer base: parameter groups, per-parameter state, zero_grad, state dicts, and the
// f32 master weights that let a model train in f16/bf16 ("O2").
//
//   optim::Adam adam(model_params, {.lr = 1e-3});
//   loss.backward();
//   adam.step();
//   adam.zero_grad();
//
// Semantics are PyTorch's (torch.optim). Parameters are leaf tensors with requires_grad; a step
// skips those whose .grad is undefined. Parameters in f16 or bf16 get an f32 master copy at
// construction: the step reads the low-precision gradient as f32, updates the master and writes it
// back into the parameter rounded to nearest even. f32 parameters are updated in place.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/io/checkpoint.h"
#include "runtime/tensor.h"

namespace ember::optim {

using NamedParameters = std::vector<std::pair<std::string, Tensor>>;

// One group of parameters sharing hyper-parameters. Each optimizer reads the fields it uses;
// schedulers write `lr` (and `momentum` / `beta1` when they cycle momentum). A group built by
// hand has these defaults, not the optimizer's: AdamW's default weight decay (1e-2) applies only
// to groups its options make, so give weight_decay in a hand-built AdamW group.
struct ParamGroup {
  std::vector<Tensor> params;
  std::vector<std::string> names;  // empty, or one name per parameter (kept in state dicts)
  double lr = 1e-3;
  double weight_decay = 0.0;
  // SGD
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  // Adam, AdamW
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  bool amsgrad = false;
  // All: ascend the objective instead of descending it.
  bool maximize = false;
  // Set by the first LR scheduler attached to the optimizer (PyTorch's "initial_lr").
  std::optional<double> initial_lr;
};

// One parameter's state: the step count and named tensors ("momentum_buffer", "exp_avg",
// "exp_avg_sq", "max_exp_avg_sq", and "master" for an f16/bf16 parameter). State tensors are f32
// (f64 for f64 parameters), shaped like the parameter.
struct ParamState {
  int64_t step = 0;
  std::map<std::string, Tensor> tensors;
};

// An optimizer's state dict: tensors "state.<group>.<index>.<name>" (the step as an i64 0-d
// tensor), and string metadata "optim.type", "optim.num_groups", "optim.group.<g>.num_params",
// "optim.group.<g>.<hyper-parameter>" (numbers printed with 17 significant digits, so they read
// back exactly) and "optim.group.<g>.param.<i>.name" when parameters are named. The two maps can
// be handed to save_checkpoint as they are.
struct StateDict {
  NamedTensors tensors;
  Metadata metadata;
};

// One parameter of a fused step on CUDA, handed to update_fused_cuda with the others of its
// group: `master` the dense f32 tensor to update, `grad` the dense gradient, `model` the f16/bf16
// parameter (undefined when master is the parameter), `state` its state (step already
// incremented).
struct FusedParam {
  Tensor master;
  Tensor grad;
  Tensor model;
  ParamState* state = nullptr;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // "SGD", "Adam", "AdamW": recorded in state dicts, checked when loading.
  virtual std::string name() const = 0;

  // One update of every parameter that has a gradient (under NoGradGuard).
  void step();
  // Drops the gradients (set_to_none), or zeroes them in place.
  void zero_grad(bool set_to_none = true);

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Adds a group (its hyper-parameters are checked; a parameter may belong to one group only).
  // Every field is the group's own: unlike PyTorch's add_param_group, nothing is filled in from
  // the optimizer's constructor options, so copy them (e.g. param_groups()[0]) to share them.
  // Make LR schedulers after the last group is added: they keep a base rate per group.
  void add_param_group(ParamGroup group);

  // The state of parameter `index` of group `group`.
  ParamState& state(size_t group, size_t index);
  const ParamState& state(size_t group, size_t index) const;
  // The f32 copy the optimizer updates: the master of an f16/bf16 parameter, else the parameter.
  Tensor master_param(size_t group, size_t index) const;

  // Whether steps run the fused kernels (kernels/cpu/optimizers.h, and on CUDA the multi-tensor
  // kernels/cuda/optimizers.h) or the reference path written with ember ops. Both give
  // bit-identical results.
  bool fused() const { return fused_; }

  StateDict state_dict() const;
  // Replaces the state and the groups' hyper-parameters. Everything is checked before anything
  // changes: the optimizer type, the number of groups and of parameters per group, names (when
  // both sides have them), and every state tensor's shape.
  void load_state_dict(const StateDict& state);
  void load_state_dict(const Checkpoint& checkpoint);

 protected:
  Optimizer(std::vector<ParamGroup> groups, bool fused);

  // Throws when a hyper-parameter is out of range; messages start with name().
  virtual void check_hyper_parameters(const ParamGroup& group) const = 0;
  // One parameter's update. `master` is the f32 (or f64) tensor to update in place, `grad` the
  // gradient (any floating dtype, dense), `model` the f16/bf16 parameter to write the rounded
  // master into (undefined when master is the parameter). `state.step` is already incremented.
  virtual void update_fused(const ParamGroup& group, Tensor& master, const Tensor& grad,
                            Tensor& model, ParamState& state) = 0;
  // The fused update of a group's CUDA parameters, in a few multi-tensor launches
  // (kernels/cuda/optimizers.h); the same numbers as update_fused.
  virtual void update_fused_cuda(const ParamGroup& group, std::vector<FusedParam>& params) = 0;
  // The same update written with ember ops, on an f32/f64 gradient; the base writes the master
  // back into a low-precision parameter afterwards.
  virtual void update_reference(const ParamGroup& group, Tensor& master, const Tensor& grad,
                                ParamState& state) = 0;
  // Hyper-parameters this optimizer records in its state dict.
  virtual std::vector<std::string> hyper_parameter_names() const = 0;
  // The state tensors a parameter of `group` holds once it has stepped, besides its step and its
  // master (Adam: exp_avg, exp_avg_sq); load_state_dict refuses a stepped parameter without them.
  virtual std::vector<std::string> stepped_state_names(const ParamGroup& group) const = 0;

  // Called from the subclass constructor, once name() and the checks are available.
  void initialize();

 private:
  void prepare_group(ParamGroup& group);

  std::vector<ParamGroup> groups_;
  std::vector<std::vector<ParamState>> states_;  // [group][index]
  bool fused_;
};

// Builds one group from named parameters (the names are kept in state dicts).
ParamGroup named_group(const NamedParameters& params);

}  // namespace ember::optim
