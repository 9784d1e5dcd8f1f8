#include "engines/engine.h"

#include <string>

#include "runtime/error.h"
#include "runtime/io/metadata_numbers.h"
#include "runtime/ops.h"
#include "runtime/random.h"

namespace ember::engines {

Scope& Scope::operator=(Scope&& other) noexcept {
  if (this != &other) {
    close();
    close_ = std::move(other.close_);
    other.close_ = nullptr;
  }
  return *this;
}

void Scope::close() {
  if (close_) {
    auto close = std::move(close_);
    close_ = nullptr;
    close();
  }
}

int IEngine::rank() const {
  const dist::ProcessGroupPtr group = process_group();
  return group ? group->rank() : 0;
}

int IEngine::world_size() const {
  const dist::ProcessGroupPtr group = process_group();
  return group ? group->size() : 1;
}

Tensor IEngine::sync_device(const Tensor& tensor) const {
  // From pinned memory (DataLoaderOptions::pin_memory) the copy to a GPU runs asynchronously on
  // the current stream, ordered before the kernels that use it.
  return tensor.to(device(), /*non_blocking=*/tensor.is_pinned());
}

void IEngine::sync_device(nn::Module& module) const {
  module.to(device());
}

Tensor IEngine::sync_tensor(const Tensor& tensor, SyncMode mode) const {
  const dist::ProcessGroupPtr group = process_group();
  if (!group || group->size() == 1) return tensor;
  // An NCCL group takes only tensors on its GPU: host values (metrics) go through the engine's
  // device and come back.
  if (!tensor.is_cuda() && std::string(group->backend()) == "nccl" && device().is_cuda()) {
    return sync_tensor(tensor.to(device()), mode).to(tensor.device());
  }
  if (mode == SyncMode::all_gather) {
    // input (n, ...) -> (world_size * n, ...); a 0-d tensor gathers into (world_size).
    const Tensor input = tensor.contiguous();
    Tensor output = zeros({group->size() * input.numel()}, {input.dtype(), input.device()});
    group->allgather(output, input.reshape({-1}))->wait();
    Shape shape = input.sizes();
    if (shape.empty()) return output;
    shape[0] *= group->size();
    return output.view(shape);
  }
  EMBER_CHECK(mode == SyncMode::sum || is_floating(tensor.dtype()),
              "sync_tensor: mean needs a floating tensor, got ", tensor.dtype(),
              " (use sum and divide, or convert first)");
  Tensor reduced = tensor.contiguous().clone();
  group->allreduce(reduced, mode == SyncMode::sum ? dist::ReduceOp::sum : dist::ReduceOp::avg)
      ->wait();
  return reduced;
}

void IEngine::barrier() const {
  const dist::ProcessGroupPtr group = process_group();
  if (group && group->size() > 1) group->barrier()->wait();
}

Components IEngine::init_components(const ModelFn& model_fn, const CriterionFn& criterion_fn,
                                    const OptimizerFn& optimizer_fn,
                                    const SchedulerFn& scheduler_fn) {
  EMBER_CHECK(model_fn != nullptr, "init_components: a model_fn is required");
  Components parts;
  parts.model = model_fn();
  EMBER_CHECK(parts.model != nullptr, "init_components: model_fn returned an empty model");
  sync_device(*parts.model);
  if (criterion_fn) parts.criterion = criterion_fn();
  if (optimizer_fn) parts.optimizer = optimizer_fn(*parts.model);
  // An evaluation-only run has no optimizer, hence no scheduler.
  if (scheduler_fn && parts.optimizer) parts.scheduler = scheduler_fn(*parts.optimizer);
  return parts;
}

void IEngine::zero_grad(nn::Module& model, optim::Optimizer& optimizer) {
  model.zero_grad();
  optimizer.zero_grad();
}

void IEngine::backward_loss(const Tensor& loss, nn::Module&, optim::Optimizer&) {
  loss.backward();
}

void IEngine::unscale_gradients(optim::Optimizer&) {}

bool IEngine::optimizer_step(nn::Module&, optim::Optimizer& optimizer) {
  optimizer.step();
  return true;
}

Scope IEngine::no_sync(nn::Module&) {
  return Scope();
}

Scope IEngine::autocast() {
  return Scope();
}

namespace {

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.rfind(prefix, 0) == 0;
}

}  // namespace

Checkpoint IEngine::pack_checkpoint(const nn::Module* model, const optim::Optimizer* optimizer,
                                    const optim::LRScheduler* scheduler,
                                    const Metadata& extra) const {
  Checkpoint checkpoint;
  checkpoint.metadata = extra;
  if (model) {
    for (const auto& [key, tensor] : model->state_dict())
      checkpoint.tensors.emplace_back("model." + key, tensor);
  }
  if (optimizer) {
    const optim::StateDict state = optimizer->state_dict();
    for (const auto& [key, tensor] : state.tensors)
      checkpoint.tensors.emplace_back("optimizer." + key, tensor);
    for (const auto& [key, value] : state.metadata)
      checkpoint.metadata["optimizer." + key] = value;
  }
  if (scheduler) {
    for (const auto& [key, value] : scheduler->state_dict())
      checkpoint.metadata[key] = value;
  }
  const GeneratorState rng = default_generator().state();
  checkpoint.metadata["rng.seed"] = std::to_string(rng.seed);
  checkpoint.metadata["rng.offset"] = std::to_string(rng.offset);
  checkpoint.metadata["engine"] = name();
  checkpoint.metadata["world_size"] = std::to_string(world_size());
  return checkpoint;
}

void IEngine::unpack_checkpoint(const Checkpoint& checkpoint, nn::Module* model,
                                optim::Optimizer* optimizer, optim::LRScheduler* scheduler) {
  if (model) {
    NamedTensors state;
    for (const auto& [key, tensor] : checkpoint.tensors) {
      if (starts_with(key, "model.")) state.emplace_back(key.substr(6), tensor);
    }
    EMBER_CHECK(!state.empty(), "unpack_checkpoint: the checkpoint holds no model (no tensor ",
                "named model.*); was it written by an ember engine?");
    model->load_state_dict(state);
  }
  if (optimizer) {
    optim::StateDict state;
    for (const auto& [key, tensor] : checkpoint.tensors) {
      if (starts_with(key, "optimizer.")) state.tensors.emplace_back(key.substr(10), tensor);
    }
    for (const auto& [key, value] : checkpoint.metadata) {
      if (starts_with(key, "optimizer.")) state.metadata[key.substr(10)] = value;
    }
    EMBER_CHECK(!state.metadata.empty(),
                "unpack_checkpoint: the checkpoint holds no optimizer state (no optimizer.* "
                "keys); it was saved without an optimizer");
    optimizer->load_state_dict(state);
  }
  if (scheduler) scheduler->load_state_dict(checkpoint.metadata);
  if (checkpoint.metadata.count("rng.seed") && checkpoint.metadata.count("rng.offset")) {
    default_generator().set_state(
        {parse_unsigned(checkpoint.meta("rng.seed"),
                        "unpack_checkpoint: the checkpoint's rng.seed"),
         parse_unsigned(checkpoint.meta("rng.offset"),
                        "unpack_checkpoint: the checkpoint's rng.offset")});
  }
}

void IEngine::save_checkpoint(const Checkpoint& checkpoint, const std::string& path) const {
  ember::save_checkpoint(path, checkpoint.tensors, checkpoint.metadata);
}

Checkpoint IEngine::load_checkpoint(const std::string& path) const {
  return ember::load_checkpoint(path);
}

}  // namespace ember::engines
