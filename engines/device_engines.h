// The single-process engines: one device, in f32, with autocast (AMP), or with the model itself in
// f16/bf16 and f32 master weights in the optimizer (O2, what Catalyst's APEX engines do with NVIDIA
// apex, here implemented by ember). The data-parallel engines derive from these.
#pragma once

#include "engines/engine.h"
#include "optim/grad_scaler.h"

namespace ember::engines {

// f32 training on one device (cpu or cuda:N).
class DeviceEngine : public IEngine {
 public:
  // An unavailable device (cuda without a GPU or without a CUDA build) is an error saying so.
  explicit DeviceEngine(Device device = Device::cpu());
  std::string name() const override { return device_.str(); }
  Device device() const override { return device_; }

 private:
  Device device_;
};

// Automatic mixed precision: the forward pass and the loss under autocast(dtype); with f16 a
// GradScaler (PyTorch's defaults) scales the loss and skips steps whose gradients overflow. bf16
// has f32's range and needs no scaler.
class AMPEngine : public DeviceEngine {
 public:
  // `dtype`: f16 or bf16.
  explicit AMPEngine(Device device = Device::cpu(), DType dtype = DType::f16,
                     const optim::GradScalerOptions& scaler_options = {});
  std::string name() const override;
  DType precision() const { return dtype_; }
  optim::GradScaler& scaler() { return scaler_; }
  const optim::GradScaler& scaler() const { return scaler_; }

  void backward_loss(const Tensor& loss, nn::Module& model, optim::Optimizer& optimizer) override;
  void unscale_gradients(optim::Optimizer& optimizer) override;
  bool optimizer_step(nn::Module& model, optim::Optimizer& optimizer) override;
  Scope autocast() override;

  // Adds the scaler's state ("scaler.*") and "amp.dtype".
  Checkpoint pack_checkpoint(const nn::Module* model, const optim::Optimizer* optimizer,
                             const optim::LRScheduler* scheduler,
                             const Metadata& extra = {}) const override;
  void unpack_checkpoint(const Checkpoint& checkpoint, nn::Module* model,
                         optim::Optimizer* optimizer, optim::LRScheduler* scheduler) override;

 protected:
  // Engine names: "amp-fp16", "o2-bf16", ... plus the device.
  std::string precision_name(const char* kind) const;

 private:
  DType dtype_;
  optim::GradScaler scaler_;
  bool unscaled_ = false;  // unscale_gradients already ran for the coming step
};

// "O2": the model's floating parameters and buffers converted to f16/bf16, f32 (and f16/bf16)
// inputs cast to the same dtype, and the optimizer (built after the conversion by init_components)
// keeping an f32 master copy of every parameter. The forward pass still runs under autocast so that
// losses, softmax and reductions are computed in f32; with f16 a GradScaler guards the steps. f64
// inputs stay f64, as autocast leaves f64 alone (apex's O2 casts them too): a caller who made f64
// on purpose keeps it.
class O2Engine : public AMPEngine {
 public:
  explicit O2Engine(Device device = Device::cpu(), DType dtype = DType::bf16,
                    const optim::GradScalerOptions& scaler_options = {});
  std::string name() const override { return precision_name("o2"); }
  Tensor sync_device(const Tensor& tensor) const override;
  void sync_device(nn::Module& module) const override;
};

}  // namespace ember::engines
