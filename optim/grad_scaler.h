// Dynamic loss scaling for f16 training (torch.amp.GradScaler), with PyTorch's defaults:
//
//   optim::GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.unscale_(optimizer);                 // optional: before clipping
//   optim::clip_grad_norm_(params, 1.0);
//   scaler.step(optimizer);                     // skipped when a gradient holds Inf or NaN
//   scaler.update();                            // backoff on Inf/NaN, growth after an interval
//
// unscale_ makes one pass over the optimizer's gradients that multiplies by 1/scale and checks for
// non-finite values in the same loop (kernels/cpu/amp.h). The scale is kept in f32, as PyTorch
// keeps it in an f32 tensor, so backoff and growth round the same way.
//
// On CUDA (from the first unscale_ of CUDA gradients on), the scale, the growth tracker and each
// optimizer's found-Inf flag live on the device, as in PyTorch: unscale_ is one multi-tensor
// kernel per gradient dtype (kernels/cuda/amp.h) and update() one tiny kernel, so the only host
// synchronisation is step() reading the flag to decide whether the step runs (and get_scale(),
// growth_tracker() and state_dict(), which read the device values).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "optim/optimizer.h"
#include "runtime/io/checkpoint.h"

namespace ember::optim {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool enabled = true;
};

class GradScaler {
 public:
  explicit GradScaler(const GradScalerOptions& options = {});

  // loss * scale (loss itself when disabled).
  Tensor scale(const Tensor& loss) const;
  // Divides the optimizer's gradients by the scale and records whether any is Inf or NaN.
  // Calling it twice before update(), or after step(), is an error.
  void unscale_(Optimizer& optimizer);
  // Unscales if not yet done, then runs optimizer.step() unless a gradient was non-finite.
  // Returns whether the step ran.
  bool step(Optimizer& optimizer);
  // Backs the scale off if any optimizer saw Inf/NaN since the last update, else counts a good
  // step and grows the scale after growth_interval of them in a row. `new_scale` sets it instead.
  void update(std::optional<double> new_scale = std::nullopt);

  double get_scale() const;  // 1 when disabled
  int64_t growth_tracker() const;
  bool is_enabled() const { return options_.enabled; }
  const GradScalerOptions& options() const { return options_; }

  // Metadata "scaler.scale", "scaler.growth_factor", "scaler.backoff_factor",
  // "scaler.growth_interval", "scaler.growth_tracker" (empty when disabled, as PyTorch).
  Metadata state_dict() const;
  // A no-op when disabled (PyTorch's); enabled, an empty or partial state is an error.
  void load_state_dict(const Metadata& state);

 private:
  enum class Stage { ready, unscaled, stepped };
  struct OptimizerRecord {
    Stage stage = Stage::ready;
    bool found_inf = false;   // from CPU gradients
    Tensor device_found_inf;  // f32 0-d on the device: 1 when a CUDA gradient was non-finite
  };

  // Moves the scale and the tracker to `device` (the first time CUDA gradients are unscaled).
  void use_device(const Device& device);
  // Unscales the optimizer's CUDA gradients in one multi-tensor pass per dtype.
  void unscale_cuda(std::vector<Tensor>& grads, OptimizerRecord& record);
  // torch._amp_update_scale_ on the device values (kernels/cuda/amp.h).
  void update_on_device(bool host_found_inf, const Tensor& device_found_inf);

  GradScalerOptions options_;
  // The host values, authoritative while device_scale_ is undefined.
  float scale_;
  int64_t growth_tracker_ = 0;
  Tensor device_scale_;           // f32 0-d, once on CUDA
  Tensor device_growth_tracker_;  // i64 0-d, once on CUDA
  std::map<const Optimizer*, OptimizerRecord> per_optimizer_;
};

}  // namespace ember::optim
