#include "optim/grad_scaler.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "kernels/cpu/amp.h"
#include "runtime/io/metadata_numbers.h"
#include "runtime/ops.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/amp.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember::optim {

namespace {

const std::string& entry(const Metadata& state, const std::string& key) {
  const auto it = state.find(key);
  EMBER_CHECK(it != state.end(), "GradScaler.load_state_dict: no '", key, "' entry");
  return it->second;
}

double read_number(const Metadata& state, const std::string& key) {
  return parse_real(entry(state, key), "GradScaler.load_state_dict: '" + key + "'");
}

int64_t read_integer(const Metadata& state, const std::string& key, int64_t min) {
  return parse_integer(entry(state, key), "GradScaler.load_state_dict: '" + key + "'", min);
}

// Unscales one gradient in place; returns whether it held Inf or NaN.
bool unscale_grad(Tensor& grad, float inv_scale) {
  Tensor dense = grad.contiguous();
  bool found_inf = false;
  switch (dense.dtype()) {
    case DType::f32:
      found_inf =
          kernels::cpu::amp_unscale_and_check(dense.data<float>(), dense.numel(), inv_scale);
      break;
    case DType::f16:
      found_inf = kernels::cpu::amp_unscale_and_check(dense.data<Half>(), dense.numel(), inv_scale);
      break;
    case DType::bf16:
      found_inf =
          kernels::cpu::amp_unscale_and_check(dense.data<BFloat16>(), dense.numel(), inv_scale);
      break;
    default:
      EMBER_FAIL("GradScaler.unscale_: expected f32, f16 or bf16 gradients, got ", describe(grad));
  }
  if (!dense.is_same(grad)) grad.copy_(dense);
  grad.bump_version();
  return found_inf;
}

}  // namespace

GradScaler::GradScaler(const GradScalerOptions& options)
    : options_(options), scale_(static_cast<float>(options.init_scale)) {
  EMBER_CHECK(options.init_scale > 0.0, "GradScaler: init_scale must be positive, got ",
              options.init_scale);
  EMBER_CHECK(options.growth_factor > 1.0, "GradScaler: growth_factor must be > 1, got ",
              options.growth_factor);
  EMBER_CHECK(options.backoff_factor > 0.0 && options.backoff_factor < 1.0,
              "GradScaler: backoff_factor must be in (0, 1), got ", options.backoff_factor);
  EMBER_CHECK(options.growth_interval > 0, "GradScaler: growth_interval must be positive, got ",
              options.growth_interval);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  if (device_scale_.defined() && loss.device() == device_scale_.device())
    return mul(loss, device_scale_);
  return mul(loss, scalar_tensor(get_scale(), TensorOptions(DType::f32, loss.device())));
}

void GradScaler::unscale_(Optimizer& optimizer) {
  if (!options_.enabled) return;
  OptimizerRecord& record = per_optimizer_[&optimizer];
  EMBER_CHECK(record.stage != Stage::unscaled,
              "GradScaler.unscale_: unscale_() has already been called on this optimizer since "
              "the last update()");
  EMBER_CHECK(record.stage != Stage::stepped,
              "GradScaler.unscale_: unscale_() is being called after step(); call update() first");
  NoGradGuard no_grad;
  std::vector<Tensor> cpu_grads, cuda_grads;
  for (ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& param : group.params) {
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      (grad.is_cuda() ? cuda_grads : cpu_grads).push_back(grad);
    }
  }
  record.found_inf = false;
  record.device_found_inf = Tensor();
  if (!cuda_grads.empty()) unscale_cuda(cuda_grads, record);
  if (!cpu_grads.empty()) {
    // PyTorch: the reciprocal in double, then rounded to f32.
    const float inv_scale = static_cast<float>(1.0 / get_scale());
    bool found_inf = false;
    for (Tensor& grad : cpu_grads)
      found_inf = unscale_grad(grad, inv_scale) || found_inf;
    record.found_inf = found_inf;
  }
  record.stage = Stage::unscaled;
}

void GradScaler::use_device(const Device& device) {
  if (device_scale_.defined()) {
    EMBER_CHECK(device_scale_.device() == device, "GradScaler: the scale lives on ",
                device_scale_.device().str(), " but a gradient is on ", device.str(),
                "; one GradScaler serves the gradients of one CUDA device");
    return;
  }
  device_scale_ = scalar_tensor(static_cast<double>(scale_), TensorOptions(DType::f32, device));
  device_growth_tracker_ = scalar_tensor(growth_tracker_, TensorOptions(DType::i64, device));
}

void GradScaler::unscale_cuda(std::vector<Tensor>& grads, OptimizerRecord& record) {
#if EMBER_WITH_CUDA
  const Device device = grads[0].device();
  use_device(device);
  record.device_found_inf = zeros({}, TensorOptions(DType::f32, device));
  // The kernel needs dense gradients: a strided one is unscaled in a dense copy, copied back.
  std::vector<std::pair<Tensor, Tensor>> copied_back;  // (grad, dense)
  std::vector<kernels::cuda::GradTensor> by_dtype[3];  // f32, f16, bf16
  for (Tensor& grad : grads) {
    EMBER_CHECK(grad.device() == device, "GradScaler.unscale_: gradients on ", device.str(),
                " and ", describe(grad), "; one GradScaler serves one CUDA device");
    Tensor dense = grad.contiguous();
    if (!dense.is_same(grad)) copied_back.emplace_back(grad, dense);
    const kernels::cuda::GradTensor entry{dense.data_ptr(), dense.numel()};
    switch (dense.dtype()) {
      case DType::f32:
        by_dtype[0].push_back(entry);
        break;
      case DType::f16:
        by_dtype[1].push_back(entry);
        break;
      case DType::bf16:
        by_dtype[2].push_back(entry);
        break;
      default:
        EMBER_FAIL("GradScaler.unscale_: expected f32, f16 or bf16 gradients, got ",
                   describe(grad));
    }
  }
  float* found_inf = record.device_found_inf.data<float>();
  const float* scale = device_scale_.data<float>();
  const cuda::StreamOnDevice stream(device.index);
  if (!by_dtype[0].empty())
    kernels::cuda::amp_unscale_and_check<float>(by_dtype[0], found_inf, scale, stream);
  if (!by_dtype[1].empty())
    kernels::cuda::amp_unscale_and_check<Half>(by_dtype[1], found_inf, scale, stream);
  if (!by_dtype[2].empty())
    kernels::cuda::amp_unscale_and_check<BFloat16>(by_dtype[2], found_inf, scale, stream);
  for (auto& [grad, dense] : copied_back)
    grad.copy_(dense);
  for (Tensor& grad : grads)
    grad.bump_version();
#else
  (void)record;
  EMBER_FAIL("GradScaler.unscale_: this build of ember has no CUDA support, but got ",
             describe(grads.at(0)));
#endif
}

bool GradScaler::step(Optimizer& optimizer) {
  if (!options_.enabled) {
    optimizer.step();
    return true;
  }
  OptimizerRecord& record = per_optimizer_[&optimizer];
  EMBER_CHECK(record.stage != Stage::stepped,
              "GradScaler.step: step() has already been called since the last update()");
  if (record.stage == Stage::ready) unscale_(optimizer);
  // The one host synchronisation of a CUDA step: whether it runs.
  const bool run = !record.found_inf && !(record.device_found_inf.defined() &&
                                          record.device_found_inf.item<float>() != 0.0f);
  if (run) optimizer.step();
  record.stage = Stage::stepped;
  return run;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled) return;
  if (new_scale) {
    EMBER_CHECK(*new_scale > 0.0, "GradScaler.update: new_scale must be positive, got ",
                *new_scale);
    scale_ = static_cast<float>(*new_scale);
    if (device_scale_.defined()) {
      NoGradGuard no_grad;
      device_scale_.fill_(static_cast<double>(scale_));
    }
  } else {
    EMBER_CHECK(!per_optimizer_.empty(),
                "GradScaler.update: no inf checks were recorded prior to update(); call "
                "step(optimizer) or unscale_(optimizer) first");
    bool found_inf = false;
    Tensor device_found_inf;  // the sum of the optimizers' device flags
    for (const auto& [optimizer, record] : per_optimizer_) {
      found_inf = found_inf || record.found_inf;
      if (!record.device_found_inf.defined()) continue;
      NoGradGuard no_grad;
      device_found_inf = device_found_inf.defined() ? add(device_found_inf, record.device_found_inf)
                                                    : record.device_found_inf;
    }
    if (device_scale_.defined()) {
      update_on_device(found_inf, device_found_inf);
    } else {
      // torch._amp_update_scale_, in f32 like PyTorch's scale tensor.
      if (found_inf) {
        scale_ = scale_ * static_cast<float>(options_.backoff_factor);
        growth_tracker_ = 0;
      } else {
        const int64_t successful = growth_tracker_ + 1;
        if (successful == options_.growth_interval) {
          const float grown = scale_ * static_cast<float>(options_.growth_factor);
          if (std::isfinite(grown)) scale_ = grown;
          growth_tracker_ = 0;
        } else {
          growth_tracker_ = successful;
        }
      }
    }
  }
  per_optimizer_.clear();
}

void GradScaler::update_on_device(bool host_found_inf, const Tensor& device_found_inf) {
#if EMBER_WITH_CUDA
  kernels::cuda::amp_update_scale(
      device_scale_.data<float>(), device_growth_tracker_.data<int64_t>(),
      device_found_inf.defined() ? device_found_inf.data<float>() : nullptr, host_found_inf,
      static_cast<float>(options_.growth_factor), static_cast<float>(options_.backoff_factor),
      options_.growth_interval, cuda::StreamOnDevice(device_scale_.device().index));
#else
  (void)host_found_inf;
  (void)device_found_inf;
  EMBER_FAIL("GradScaler.update: this build of ember has no CUDA support");
#endif
}

double GradScaler::get_scale() const {
  if (!options_.enabled) return 1.0;
  if (device_scale_.defined()) return static_cast<double>(device_scale_.item<float>());
  return static_cast<double>(scale_);
}

int64_t GradScaler::growth_tracker() const {
  if (device_growth_tracker_.defined()) return device_growth_tracker_.item<int64_t>();
  return growth_tracker_;
}

Metadata GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scaler.scale", format_exact(get_scale())},
          {"scaler.growth_factor", format_exact(options_.growth_factor)},
          {"scaler.backoff_factor", format_exact(options_.backoff_factor)},
          {"scaler.growth_interval", std::to_string(options_.growth_interval)},
          {"scaler.growth_tracker", std::to_string(growth_tracker())}};
}

void GradScaler::load_state_dict(const Metadata& state) {
  // As PyTorch: a disabled scaler loads nothing, so a script that turns loss scaling off with
  // `enabled` still loads the checkpoints of its scaled runs.
  if (!options_.enabled) return;
  EMBER_CHECK(state.count("scaler.scale") == 1,
              "GradScaler.load_state_dict: the state dict has no 'scaler.scale' (is it empty, "
              "saved from a disabled GradScaler?)");
  const double scale = read_number(state, "scaler.scale");
  const double growth_factor = read_number(state, "scaler.growth_factor");
  const double backoff_factor = read_number(state, "scaler.backoff_factor");
  const int64_t growth_interval = read_integer(state, "scaler.growth_interval", 1);
  const int64_t growth_tracker = read_integer(state, "scaler.growth_tracker", 0);
  // The constructor's rules, and a scale that stays finite in f32 (an infinite one would make
  // every gradient infinite and never back off).
  EMBER_CHECK(
      std::isfinite(static_cast<float>(scale)) && scale > 0.0 && growth_factor > 1.0 &&
          std::isfinite(growth_factor) && backoff_factor > 0.0 && backoff_factor < 1.0,
      "GradScaler.load_state_dict: out-of-range values (scale ", scale, ", growth_factor ",
      growth_factor, ", backoff_factor ", backoff_factor,
      "; expected a finite positive scale, growth_factor > 1 and backoff_factor in (0, 1))");
  scale_ = static_cast<float>(scale);
  options_.growth_factor = growth_factor;
  options_.backoff_factor = backoff_factor;
  options_.growth_interval = growth_interval;
  growth_tracker_ = growth_tracker;
  if (device_scale_.defined()) {
    NoGradGuard no_grad;
    device_scale_.fill_(static_cast<double>(scale_));
    device_growth_tracker_.fill_(growth_tracker_);
  }
}

}  // namespace ember::optim
