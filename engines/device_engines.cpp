#include "engines/device_engines.h"

#include "runtime/autocast.h"
#include "runtime/device.h"
#include "runtime/error.h"

namespace ember::engines {

DeviceEngine::DeviceEngine(Device device) : device_(device) {
  check_device_available(device);
  // The engine's GPU becomes the current one, as torch.cuda.set_device(local_rank) in Catalyst's
  // and Accelerate's engines: under mpirun, rank k of a node works on cuda:k, and the kernels of
  // its ops must launch there rather than on cuda:0.
  if (device.is_cuda()) cuda::set_device(device.index);
}

namespace {

DType checked_precision(DType dtype, const char* engine) {
  EMBER_CHECK(dtype == DType::f16 || dtype == DType::bf16, engine,
              ": mixed precision needs f16 or bf16, got ", dtype);
  return dtype;
}

optim::GradScalerOptions scaler_for(DType dtype, optim::GradScalerOptions options) {
  options.enabled = options.enabled && dtype == DType::f16;
  return options;
}

}  // namespace

AMPEngine::AMPEngine(Device device, DType dtype, const optim::GradScalerOptions& scaler_options)
    : DeviceEngine(device),
      dtype_(checked_precision(dtype, "AMPEngine")),
      scaler_(scaler_for(dtype, scaler_options)) {}

std::string AMPEngine::precision_name(const char* kind) const {
  return std::string(kind) + (dtype_ == DType::f16 ? "-fp16 " : "-bf16 ") + device().str();
}

std::string AMPEngine::name() const {
  return precision_name("amp");
}

void AMPEngine::backward_loss(const Tensor& loss, nn::Module&, optim::Optimizer&) {
  scaler_.scale(loss).backward();
}

void AMPEngine::unscale_gradients(optim::Optimizer& optimizer) {
  if (!scaler_.is_enabled() || unscaled_) return;
  scaler_.unscale_(optimizer);
  unscaled_ = true;
}

bool AMPEngine::optimizer_step(nn::Module&, optim::Optimizer& optimizer) {
  const bool stepped = scaler_.step(optimizer);
  scaler_.update();
  unscaled_ = false;
  return stepped;
}

Scope AMPEngine::autocast() {
  // AutocastGuard is thread-local and immovable: held on the heap, released when the Scope closes.
  auto guard = std::make_shared<AutocastGuard>(dtype_);
  return Scope([guard]() mutable { guard.reset(); });
}

Checkpoint AMPEngine::pack_checkpoint(const nn::Module* model, const optim::Optimizer* optimizer,
                                      const optim::LRScheduler* scheduler,
                                      const Metadata& extra) const {
  Checkpoint checkpoint = DeviceEngine::pack_checkpoint(model, optimizer, scheduler, extra);
  for (const auto& [key, value] : scaler_.state_dict())
    checkpoint.metadata[key] = value;
  checkpoint.metadata["amp.dtype"] = dtype_name(dtype_);
  return checkpoint;
}

void AMPEngine::unpack_checkpoint(const Checkpoint& checkpoint, nn::Module* model,
                                  optim::Optimizer* optimizer, optim::LRScheduler* scheduler) {
  DeviceEngine::unpack_checkpoint(checkpoint, model, optimizer, scheduler);
  // A checkpoint from an f32 or bf16 run has no scaler state: the scaler starts fresh.
  if (scaler_.is_enabled() && checkpoint.metadata.count("scaler.scale"))
    scaler_.load_state_dict(checkpoint.metadata);
  unscaled_ = false;
}

O2Engine::O2Engine(Device device, DType dtype, const optim::GradScalerOptions& scaler_options)
    : AMPEngine(device, checked_precision(dtype, "O2Engine"), scaler_options) {}

Tensor O2Engine::sync_device(const Tensor& tensor) const {
  const Tensor placed = tensor.to(device(), /*non_blocking=*/tensor.is_pinned());
  if (is_floating(tensor.dtype()) && tensor.dtype() != DType::f64) return placed.to(precision());
  return placed;
}

void O2Engine::sync_device(nn::Module& module) const {
  module.to(device(), precision());
}

}  // namespace ember::engines
