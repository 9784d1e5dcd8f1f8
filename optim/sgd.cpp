#include "optim/sgd.h"

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

kernels::cpu::SgdHyper sgd_hyper(const ParamGroup& group, bool first_step) {
  kernels::cpu::SgdHyper hyper;
  hyper.lr = group.lr;
  hyper.momentum = group.momentum;
  hyper.dampening = group.dampening;
  hyper.weight_decay = group.weight_decay;
  hyper.nesterov = group.nesterov;
  hyper.maximize = group.maximize;
  hyper.first_step = first_step;
  return hyper;
}

}  // namespace

ParamGroup SGDOptions::group(std::vector<Tensor> params) const {
  ParamGroup g;
  g.params = std::move(params);
  g.lr = lr;
  g.momentum = momentum;
  g.dampening = dampening;
  g.weight_decay = weight_decay;
  g.nesterov = nesterov;
  g.maximize = maximize;
  return g;
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{options.group(std::move(params))}, options) {}

SGD::SGD(const NamedParameters& params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{[&] {
            ParamGroup g = named_group(params);
            ParamGroup with_options = options.group(std::move(g.params));
            with_options.names = std::move(g.names);
            return with_options;
          }()},
          options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options)
    : Optimizer(std::move(groups), options.fused) {
  initialize();
}

void SGD::check_hyper_parameters(const ParamGroup& group) const {
  EMBER_CHECK(group.lr >= 0.0, "SGD: invalid learning rate ", group.lr, " (expected lr >= 0)");
  EMBER_CHECK(group.momentum >= 0.0, "SGD: invalid momentum ", group.momentum,
              " (expected momentum >= 0)");
  EMBER_CHECK(group.weight_decay >= 0.0, "SGD: invalid weight_decay ", group.weight_decay,
              " (expected weight_decay >= 0)");
  EMBER_CHECK(!group.nesterov || (group.momentum > 0.0 && group.dampening == 0.0),
              "SGD: Nesterov momentum requires a momentum > 0 and zero dampening (got momentum ",
              group.momentum, ", dampening ", group.dampening, ")");
}

std::vector<std::string> SGD::hyper_parameter_names() const {
  return {"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"};
}

std::vector<std::string> SGD::stepped_state_names(const ParamGroup& group) const {
  if (group.momentum != 0.0) return {"momentum_buffer"};
  return {};
}

void SGD::update_fused(const ParamGroup& group, Tensor& master, const Tensor& grad, Tensor& model,
                       ParamState& state) {
  float* buffer = nullptr;
  bool first_step = false;
  if (group.momentum != 0.0) {
    auto it = state.tensors.find("momentum_buffer");
    if (it == state.tensors.end()) {
      it = state.tensors.emplace("momentum_buffer", empty(master.sizes(), DType::f32)).first;
      first_step = true;
    }
    buffer = it->second.data<float>();
  }
  const kernels::cpu::SgdHyper hyper = sgd_hyper(group, first_step);
  dispatch_fused(grad, model, "SGD.step",
                 [&]<typename Grad, typename Model>(const Grad* g, Model* m) {
                   kernels::cpu::sgd_step<Grad, Model>(master.data<float>(), g, buffer, m,
                                                       master.numel(), hyper);
                 });
}

void SGD::update_fused_cuda(const ParamGroup& group, std::vector<FusedParam>& params) {
#if EMBER_WITH_CUDA
  // One launch sequence per (device, gradient dtype, first step or not): the kernel's constants
  // are shared by every parameter of a launch.
  using Batch = std::vector<kernels::cuda::OptimizerTensors>;
  std::map<std::tuple<int, DType, bool>, Batch> batches;
  for (FusedParam& p : params) {
    float* buffer = nullptr;
    bool first_step = false;
    if (group.momentum != 0.0) {
      auto it = p.state->tensors.find("momentum_buffer");
      if (it == p.state->tensors.end()) {
        it = p.state->tensors
                 .emplace("momentum_buffer",
                          empty(p.master.sizes(), TensorOptions(DType::f32, p.master.device())))
                 .first;
        first_step = true;
      }
      buffer = it->second.data<float>();
    }
    kernels::cuda::OptimizerTensors t;
    t.master = p.master.data<float>();
    t.grad = p.grad.data_ptr();
    t.model = p.model.defined() ? p.model.data_ptr() : nullptr;
    t.states[0] = buffer;
    t.size = p.master.numel();
    batches[{p.master.device().index, p.grad.dtype(), first_step}].push_back(t);
  }
  for (const auto& [key, batch_in] : batches) {
    const auto& [device_index, grad_dtype, first_step] = key;
    const Batch& batch = batch_in;  // a plain reference: lambdas may not capture bindings
    const kernels::cpu::SgdHyper hyper = sgd_hyper(group, first_step);
    const cuda::StreamOnDevice stream(device_index);
    dispatch_fused_cuda(grad_dtype, "SGD.step", [&]<typename Grad, typename Model>() {
      kernels::cuda::sgd_step<Grad, Model>(batch, hyper, stream);
    });
  }
#else
  (void)group;
  EMBER_FAIL("SGD.step: this build of ember has no CUDA support, but got ",
             describe(params.at(0).master));
#endif
}

void SGD::update_reference(const ParamGroup& group, Tensor& master, const Tensor& grad,
                           ParamState& state) {
  // Numbers are passed as doubles: an f32 op rounds them to f32 exactly as the kernel's
  // sgd_scalars does, and an f64 master keeps them whole.
  Tensor d = group.maximize ? neg(grad) : grad;
  if (group.weight_decay != 0.0) d = add(d, master, group.weight_decay);
  if (group.momentum != 0.0) {
    auto it = state.tensors.find("momentum_buffer");
    if (it == state.tensors.end()) {
      it = state.tensors.emplace("momentum_buffer", clone(d)).first;
    } else {
      it->second.mul_(group.momentum).add_(d, 1.0 - group.dampening);
    }
    const Tensor& buffer = it->second;
    d = group.nesterov ? add(d, buffer, group.momentum) : buffer;
  }
  master.add_(d, -group.lr);
}

}  // namespace ember::optim
