#include "optim/grad_scaler.h"

#include <cmath>
#include <cstdio>
#include <string>

#include "kernels/cpu/amp.h"
#include "runtime/ops.h"

namespace ember::optim {

namespace {

std::string format_double(double value) {
  char buffer[64];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

double read_number(const Metadata& state, const std::string& key) {
  const auto it = state.find(key);
  EMBER_CHECK(it != state.end(), "GradScaler.load_state_dict: no '", key, "' entry");
  try {
    size_t used = 0;
    const double value = std::stod(it->second, &used);
    if (used == it->second.size()) return value;
  } catch (const std::exception&) {
  }
  EMBER_FAIL("GradScaler.load_state_dict: '", key, "' should be a number, got '", it->second, "'");
}

// Unscales one gradient in place; returns whether it held Inf or NaN.
bool unscale_grad(Tensor& grad, float inv_scale) {
  EMBER_CHECK(grad.is_cpu(), "GradScaler.unscale_: not implemented for CUDA tensors yet (",
              describe(grad), ")");
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
  return mul(loss,
             scalar_tensor(static_cast<double>(scale_), TensorOptions(DType::f32, loss.device())));
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
  // PyTorch: the reciprocal in double, then rounded to f32.
  const float inv_scale = static_cast<float>(1.0 / static_cast<double>(scale_));
  bool found_inf = false;
  for (ParamGroup& group : optimizer.param_groups()) {
    for (Tensor& param : group.params) {
      Tensor grad = param.grad();
      if (!grad.defined()) continue;
      found_inf = unscale_grad(grad, inv_scale) || found_inf;
    }
  }
  record.found_inf = found_inf;
  record.stage = Stage::unscaled;
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
  const bool run = !record.found_inf;
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
  } else {
    EMBER_CHECK(!per_optimizer_.empty(),
                "GradScaler.update: no inf checks were recorded prior to update(); call "
                "step(optimizer) or unscale_(optimizer) first");
    bool found_inf = false;
    for (const auto& [optimizer, record] : per_optimizer_)
      found_inf = found_inf || record.found_inf;
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
  per_optimizer_.clear();
}

double GradScaler::get_scale() const {
  return options_.enabled ? static_cast<double>(scale_) : 1.0;
}

Metadata GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scaler.scale", format_double(scale_)},
          {"scaler.growth_factor", format_double(options_.growth_factor)},
          {"scaler.backoff_factor", format_double(options_.backoff_factor)},
          {"scaler.growth_interval", std::to_string(options_.growth_interval)},
          {"scaler.growth_tracker", std::to_string(growth_tracker_)}};
}

void GradScaler::load_state_dict(const Metadata& state) {
  EMBER_CHECK(options_.enabled,
              "GradScaler.load_state_dict: this scaler is disabled; nothing can be loaded into it");
  EMBER_CHECK(state.count("scaler.scale") == 1,
              "GradScaler.load_state_dict: the state dict has no 'scaler.scale' (is it empty, "
              "saved from a disabled GradScaler?)");
  const double scale = read_number(state, "scaler.scale");
  const double growth_factor = read_number(state, "scaler.growth_factor");
  const double backoff_factor = read_number(state, "scaler.backoff_factor");
  const double growth_interval = read_number(state, "scaler.growth_interval");
  const double growth_tracker = read_number(state, "scaler.growth_tracker");
  EMBER_CHECK(scale > 0.0 && growth_interval >= 1.0 && growth_tracker >= 0.0,
              "GradScaler.load_state_dict: out-of-range values (scale ", scale,
              ", growth_interval ", growth_interval, ", growth_tracker ", growth_tracker, ")");
  scale_ = static_cast<float>(scale);
  options_.growth_factor = growth_factor;
  options_.backoff_factor = backoff_factor;
  options_.growth_interval = static_cast<int64_t>(growth_interval);
  growth_tracker_ = static_cast<int64_t>(growth_tracker);
}

}  // namespace ember::optim
