// IEngine: the one object that knows the hardware (Catalyst's engines).
//
//   auto engine = engines::make_engine("auto");      // cpu, cuda, amp, o2, ... (engines/factory.h)
//   auto parts = engine->init_components(model_fn, criterion_fn, optimizer_fn, scheduler_fn);
//   { engines::Scope autocast = engine->autocast(); logits = (*parts.model)(x); }
//   engine->backward_loss(loss, *parts.model, *parts.optimizer);
//   engine->optimizer_step(*parts.model, *parts.optimizer);
//
// The runner, callbacks and loggers never branch on the hardware: they ask the engine. Collective
// work (sync_tensor, barrier) is written once here in terms of process_group(); a single-process
// engine has none, and world size 1 makes every collective the identity.
//
// A data-parallel engine derives from DeviceEngine (from AMPEngine / O2Engine for its mixed-
// precision forms, engines/device_engines.h) and overrides:
//   name()                      "ddp", "ddp-amp-bf16 cuda:0", ...
//   process_group(), is_ddp()   the world (dist::init()) and true: sync_tensor, barrier, metric
//                               averaging, rank-0-only logs and checkpoints and seed + rank follow
//   sync_device(nn::Module&)    place the model, broadcast parameters and buffers from rank 0 and
//                               attach the gradient reducer (the one place the runner and the
//                               Accelerator both go through)
//   backward_loss / no_sync     run backward through the reducer; suspend its reduction in no_sync
//   shard_loader                rebuild the loader over a DistributedSampler(rank, world size)
//   deinit_components           a barrier before the process group is released
//   abandon_components          the same release without the barrier (after an error)
// and fills in its `make` in engine_table() (engines/factory.cpp). The runner, callbacks, loggers
// and Accelerator need no change.
//
// Differences from Catalyst's interface: rank() is 0 (not -1) outside DDP, so that it can be used
// as an index and added to seeds; optimizer_step returns whether the step ran (a GradScaler skips
// steps whose gradients hold Inf/NaN).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data/loader.h"
#include "distributed/process_group.h"
#include "nn/module.h"
#include "optim/optimizer.h"
#include "optim/schedulers.h"
#include "runtime/io/checkpoint.h"

namespace ember::engines {

// A region the engine opens (autocast, no_sync); it closes when the Scope is destroyed.
class Scope {
 public:
  Scope() = default;
  explicit Scope(std::function<void()> close) : close_(std::move(close)) {}
  Scope(Scope&& other) noexcept : close_(std::move(other.close_)) { other.close_ = nullptr; }
  Scope& operator=(Scope&& other) noexcept;
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;
  ~Scope() { close(); }
  // Closes the region now (idempotent).
  void close();

 private:
  std::function<void()> close_;
};

// (output, target) -> loss, e.g. nn::CrossEntropyLoss or a lambda.
using Criterion = std::function<Tensor(const Tensor& output, const Tensor& target)>;

using ModelFn = std::function<nn::ModulePtr()>;
using CriterionFn = std::function<Criterion()>;
// Called with the model already placed (and converted, for O2), so the optimizer sees the final
// parameters: an f16/bf16 parameter gets its f32 master copy at construction.
using OptimizerFn = std::function<std::shared_ptr<optim::Optimizer>(nn::Module& model)>;
using SchedulerFn = std::function<std::shared_ptr<optim::LRScheduler>(optim::Optimizer& optimizer)>;

struct Components {
  nn::ModulePtr model = {};
  Criterion criterion = {};
  std::shared_ptr<optim::Optimizer> optimizer = {};
  std::shared_ptr<optim::LRScheduler> scheduler = {};  // may be empty
};

enum class SyncMode { sum, mean, all_gather };

class IEngine {
 public:
  virtual ~IEngine() = default;
  IEngine() = default;
  IEngine(const IEngine&) = delete;
  IEngine& operator=(const IEngine&) = delete;

  // "cpu", "cuda:0", "amp-bf16 cpu", ...: shown in logs, recorded in checkpoints.
  virtual std::string name() const = 0;

  // ---- processes ----
  // The group this engine reduces over; nullptr for a single-process engine.
  virtual dist::ProcessGroupPtr process_group() const { return nullptr; }
  int rank() const;
  int world_size() const;
  bool is_master_process() const { return rank() == 0; }
  bool is_worker_process() const { return !is_master_process(); }
  // Whether several processes train one model (data sharded with a DistributedSampler).
  virtual bool is_ddp() const { return false; }

  // ---- placement ----
  virtual Device device() const = 0;
  // `tensor` on the engine's device (floating inputs also in the model's dtype for O2).
  virtual Tensor sync_device(const Tensor& tensor) const;
  // Moves (and for O2 converts) the module in place.
  virtual void sync_device(nn::Module& module) const;
  // sum / mean over ranks, or all_gather: (n, ...) on each rank -> (world_size * n, ...), rank
  // r's rows at [r * n, (r + 1) * n). A copy; `tensor` is left as it is. Identity on one rank.
  Tensor sync_tensor(const Tensor& tensor, SyncMode mode) const;
  // Every rank waits for all the others; nothing on one rank.
  void barrier() const;
  // The loader this rank should iterate: a data-parallel engine gives each rank its shard (a
  // DistributedSampler); single-process engines return `loader` itself.
  virtual std::shared_ptr<data::DataLoader> shard_loader(
      std::shared_ptr<data::DataLoader> loader) const {
    return loader;
  }

  // ---- components ----
  // model_fn(), placed; criterion_fn(); optimizer_fn(model); scheduler_fn(optimizer). A missing
  // function, or one returning nothing, leaves that part empty (no optimizer: no scheduler).
  virtual Components init_components(const ModelFn& model_fn, const CriterionFn& criterion_fn,
                                     const OptimizerFn& optimizer_fn,
                                     const SchedulerFn& scheduler_fn);
  // Releases what init_components set up across processes; nothing for one process.
  virtual void deinit_components() {}
  // The same after an error: no collective (the peers of a rank that failed alone never reach
  // deinit_components' barrier, and waiting there would hide the error until the timeout).
  virtual void abandon_components() { deinit_components(); }

  // ---- one step ----
  virtual void zero_grad(nn::Module& model, optim::Optimizer& optimizer);
  virtual void backward_loss(const Tensor& loss, nn::Module& model, optim::Optimizer& optimizer);
  // Makes the gradients true gradients (undoes loss scaling) before they are read or clipped;
  // at most once per step.
  virtual void unscale_gradients(optim::Optimizer& optimizer);
  // Returns whether the step ran (false: skipped by the loss scaler).
  virtual bool optimizer_step(nn::Module& model, optim::Optimizer& optimizer);
  // Inside it, backward accumulates gradients locally without reducing them across ranks (DDP's
  // no_sync, for gradient accumulation); a no-op for one process.
  virtual Scope no_sync(nn::Module& model);
  // Mixed-precision region for the forward pass and the loss; a no-op for f32 engines.
  virtual Scope autocast();

  // ---- the runner's epoch, for engines with a schedule (DASO) ----
  // Before a training loader's first batch: how many optimizer steps it will make. The runner
  // says one per batch; an OptimizerCallback that accumulates gradients says again, with its
  // own count (DASO finds each epoch's last step from it).
  virtual void on_train_loader_start(int64_t /*optimizer_steps*/) {}
  // After every loader of an epoch: the training loss averaged over ranks (none when the
  // training loader reports no "loss").
  virtual void on_epoch_end(std::optional<double> /*train_loss*/) {}

  // ---- checkpoints ----
  // Tensors "model.<key>", "optimizer.<key>"; metadata "optimizer.<key>", "scheduler.*", the
  // engine's own state ("scaler.*"), "engine", "world_size", the RNG and `extra`.
  virtual Checkpoint pack_checkpoint(const nn::Module* model, const optim::Optimizer* optimizer,
                                     const optim::LRScheduler* scheduler,
                                     const Metadata& extra = {}) const;
  // Loads the parts that are given (and the engine's own state, the RNG) from `checkpoint`.
  virtual void unpack_checkpoint(const Checkpoint& checkpoint, nn::Module* model,
                                 optim::Optimizer* optimizer, optim::LRScheduler* scheduler);
  virtual void save_checkpoint(const Checkpoint& checkpoint, const std::string& path) const;
  virtual Checkpoint load_checkpoint(const std::string& path) const;
};

using EnginePtr = std::shared_ptr<IEngine>;

}  // namespace ember::engines
