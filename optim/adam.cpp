#include "optim/adam.h"

#include <cmath>

#include "kernels/cpu/optimizers.h"
#include "optim/fused_dispatch.h"
#include "runtime/ops.h"

#if EMBER_WITH_CUDA
#include <map>
#include <tuple>

#include "kernels/cuda/optimizers.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember::optim {

namespace {

kernels::cpu::AdamHyper adam_hyper(const ParamGroup& group, int64_t step, bool decoupled) {
  kernels::cpu::AdamHyper hyper;
  hyper.lr = group.lr;
  hyper.beta1 = group.beta1;
  hyper.beta2 = group.beta2;
  hyper.eps = group.eps;
  hyper.weight_decay = group.weight_decay;
  hyper.step = step;
  hyper.decoupled = decoupled;
  hyper.amsgrad = group.amsgrad;
  hyper.maximize = group.maximize;
  return hyper;
}

ParamGroup with_names(ParamGroup group, const NamedParameters& params) {
  for (const auto& [name, param] : params) {
    group.names.push_back(name);
    group.params.push_back(param);
  }
  return group;
}

// exp_avg, exp_avg_sq (and max_exp_avg_sq) start at zero on the first step, as in PyTorch.
Tensor& state_tensor(ParamState& state, const char* key, const Tensor& like) {
  auto it = state.tensors.find(key);
  if (it == state.tensors.end()) it = state.tensors.emplace(key, zeros_like(like)).first;
  return it->second;
}

}  // namespace

ParamGroup AdamOptions::group(std::vector<Tensor> params) const {
  ParamGroup g;
  g.params = std::move(params);
  g.lr = lr;
  g.beta1 = beta1;
  g.beta2 = beta2;
  g.eps = eps;
  g.weight_decay = weight_decay;
  g.amsgrad = amsgrad;
  g.maximize = maximize;
  return g;
}

Adam::Adam(std::vector<Tensor> params, const AdamOptions& options)
    : Adam(std::vector<ParamGroup>{options.group(std::move(params))}, options, false) {}
Adam::Adam(const NamedParameters& params, const AdamOptions& options)
    : Adam(std::vector<ParamGroup>{with_names(options.group({}), params)}, options, false) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options)
    : Adam(std::move(groups), options, false) {}
Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options, bool decoupled)
    : Optimizer(std::move(groups), options.fused), decoupled_(decoupled) {
  initialize();
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : Adam(std::vector<ParamGroup>{options.group(std::move(params))}, options, true) {}
AdamW::AdamW(const NamedParameters& params, const AdamWOptions& options)
    : Adam(std::vector<ParamGroup>{with_names(options.group({}), params)}, options, true) {}
AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Adam(std::move(groups), options, true) {}

void Adam::check_hyper_parameters(const ParamGroup& group) const {
  const std::string op = name();
  EMBER_CHECK(group.lr >= 0.0, op, ": invalid learning rate ", group.lr, " (expected lr >= 0)");
  EMBER_CHECK(group.eps >= 0.0, op, ": invalid epsilon ", group.eps, " (expected eps >= 0)");
  EMBER_CHECK(group.beta1 >= 0.0 && group.beta1 < 1.0, op, ": invalid beta1 ", group.beta1,
              " (expected 0 <= beta1 < 1)");
  EMBER_CHECK(group.beta2 >= 0.0 && group.beta2 < 1.0, op, ": invalid beta2 ", group.beta2,
              " (expected 0 <= beta2 < 1)");
  EMBER_CHECK(group.weight_decay >= 0.0, op, ": invalid weight_decay ", group.weight_decay,
              " (expected weight_decay >= 0)");
}

std::vector<std::string> Adam::hyper_parameter_names() const {
  return {"lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize"};
}

std::vector<std::string> Adam::stepped_state_names(const ParamGroup& group) const {
  if (group.amsgrad) return {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};
  return {"exp_avg", "exp_avg_sq"};
}

void Adam::update_fused(const ParamGroup& group, Tensor& master, const Tensor& grad, Tensor& model,
                        ParamState& state) {
  float* exp_avg = state_tensor(state, "exp_avg", master).data<float>();
  float* exp_avg_sq = state_tensor(state, "exp_avg_sq", master).data<float>();
  float* max_exp_avg_sq =
      group.amsgrad ? state_tensor(state, "max_exp_avg_sq", master).data<float>() : nullptr;
  const kernels::cpu::AdamHyper hyper = adam_hyper(group, state.step, decoupled_);
  dispatch_fused(
      grad, model, "Adam.step", [&]<typename Grad, typename Model>(const Grad* g, Model* m) {
        kernels::cpu::adam_step<Grad, Model>(master.data<float>(), g, exp_avg, exp_avg_sq,
                                             max_exp_avg_sq, m, master.numel(), hyper);
      });
}

void Adam::update_fused_cuda(const ParamGroup& group, std::vector<FusedParam>& params) {
#if EMBER_WITH_CUDA
  // One launch sequence per (device, gradient dtype, step count): the bias corrections are
  // shared by every parameter of a launch.
  using Batch = std::vector<kernels::cuda::OptimizerTensors>;
  std::map<std::tuple<int, DType, int64_t>, Batch> batches;
  for (FusedParam& p : params) {
    kernels::cuda::OptimizerTensors t;
    t.master = p.master.data<float>();
    t.grad = p.grad.data_ptr();
    t.model = p.model.defined() ? p.model.data_ptr() : nullptr;
    t.states[0] = state_tensor(*p.state, "exp_avg", p.master).data<float>();
    t.states[1] = state_tensor(*p.state, "exp_avg_sq", p.master).data<float>();
    t.states[2] =
        group.amsgrad ? state_tensor(*p.state, "max_exp_avg_sq", p.master).data<float>() : nullptr;
    t.size = p.master.numel();
    batches[{p.master.device().index, p.grad.dtype(), p.state->step}].push_back(t);
  }
  for (const auto& [key, batch_in] : batches) {
    const auto& [device_index, grad_dtype, step] = key;
    const Batch& batch = batch_in;  // a plain reference: lambdas may not capture bindings
    const kernels::cpu::AdamHyper hyper = adam_hyper(group, step, decoupled_);
    const cuda::StreamOnDevice stream(device_index);
    dispatch_fused_cuda(grad_dtype, "Adam.step", [&]<typename Grad, typename Model>() {
      kernels::cuda::adam_step<Grad, Model>(batch, hyper, stream);
    });
  }
#else
  (void)group;
  EMBER_FAIL(name(), ".step: this build of ember has no CUDA support, but got ",
             describe(params.at(0).master));
#endif
}

void Adam::update_reference(const ParamGroup& group, Tensor& master, const Tensor& grad,
                            ParamState& state) {
  // Numbers are passed as doubles: an f32 op rounds them to f32 exactly as adam_scalars does for
  // the kernel, and an f64 master keeps them whole.
  const bool is_f32 = master.dtype() == DType::f32;
  Tensor g = group.maximize ? neg(grad) : grad;
  if (decoupled_ && group.weight_decay != 0.0) master.mul_(1.0 - group.lr * group.weight_decay);
  if (!decoupled_ && group.weight_decay != 0.0) g = add(g, master, group.weight_decay);

  Tensor& exp_avg = state_tensor(state, "exp_avg", master);
  Tensor& exp_avg_sq = state_tensor(state, "exp_avg_sq", master);
  // torch.lerp(m, g, w): m + w * (g - m) when |w| < 0.5, else g - (g - m) * (1 - w).
  const double weight = 1.0 - group.beta1;
  const bool from_start =
      is_f32 ? std::abs(static_cast<float>(weight)) < 0.5f : std::abs(weight) < 0.5;
  if (from_start) {
    exp_avg.add_(sub(g, exp_avg), weight);
  } else {
    const double one_minus_weight =
        is_f32 ? static_cast<double>(1.0f - static_cast<float>(weight)) : 1.0 - weight;
    exp_avg.copy_(sub(g, mul(sub(g, exp_avg), one_minus_weight)));
  }
  exp_avg_sq.mul_(group.beta2).add_(mul(mul(g, 1.0 - group.beta2), g));

  Tensor second_moment = exp_avg_sq;
  if (group.amsgrad) {
    Tensor& max_exp_avg_sq = state_tensor(state, "max_exp_avg_sq", master);
    max_exp_avg_sq.copy_(maximum(max_exp_avg_sq, exp_avg_sq));
    second_moment = max_exp_avg_sq;
  }
  const double step = static_cast<double>(state.step);
  const double bias_correction1 = 1.0 - std::pow(group.beta1, step);
  const double bias_correction2 = 1.0 - std::pow(group.beta2, step);
  const double step_size = group.lr / bias_correction1;
  const Tensor denom = add(div(sqrt(second_moment), std::sqrt(bias_correction2)), group.eps);
  master.add_(div(mul(exp_avg, -step_size), denom));
}

}  // namespace ember::optim
