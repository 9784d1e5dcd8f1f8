// An Accelerate-style API: keep your own training loop, let the engine handle the hardware.
//
//   engines::Accelerator accelerator({.mixed_precision = "bf16", .gradient_accumulation_steps =
//   2}); auto [model, optimizer, loader, scheduler] =
//       accelerator.prepare(net, adam, train_loader, lr_schedule);
//   for (const data::Batch& batch : *loader) {            // batches arrive on the device
//     engines::Scope accumulate = accelerator.accumulate(*model);
//     const Tensor loss = cross_entropy((*model)(batch.inputs), batch.targets);
//     accelerator.backward(loss);
//     optimizer->step();                                  // only at the end of an accumulation
//     scheduler->step();                                  // not when the step was skipped;
//                                                         // once per process (Accelerate's)
//     optimizer->zero_grad();
//   }
//   accelerator.save_state("checkpoints");
//
// The prepared model runs its forward pass under the engine's autocast; unwrap_model gives the
// module back. gather/gather_for_metrics collect tensors from every rank.
#pragma once

#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "data/loader.h"
#include "engines/engine.h"
#include "nn/module.h"

namespace ember::engines {

struct AcceleratorOptions {
  std::string mixed_precision = "no";  // no | fp16 | bf16
  int64_t gradient_accumulation_steps = 1;
  // The engine family: auto | cpu | cuda | ddp ...; mixed precision picks its AMP form.
  std::string engine = "auto";
  EnginePtr engine_instance = {};  // used as is when set
};

class Accelerator;

// The prepared model: the module's forward under the engine's autocast. Its state_dict has the
// "module." prefix (as PyTorch's wrappers); unwrap_model() has none.
class AcceleratedModule : public nn::Module {
 public:
  AcceleratedModule(nn::ModulePtr module, EnginePtr engine);
  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "AcceleratedModule"; }
  const nn::ModulePtr& module() const { return module_; }

 private:
  nn::ModulePtr module_;
  EnginePtr engine_;
};

// step() and zero_grad() act only at the end of an accumulation (accelerator.sync_gradients()).
class AcceleratedOptimizer {
 public:
  AcceleratedOptimizer(std::shared_ptr<optim::Optimizer> optimizer, Accelerator& accelerator)
      : optimizer_(std::move(optimizer)), accelerator_(accelerator) {}
  void step();
  void zero_grad();
  // Whether the loss scaler skipped the last step that ran (Accelerate's step_was_skipped). A
  // step() between the batches of an accumulation runs nothing and leaves it as it was.
  bool step_was_skipped() const { return skipped_; }
  optim::Optimizer& optimizer() { return *optimizer_; }

 private:
  std::shared_ptr<optim::Optimizer> optimizer_;
  Accelerator& accelerator_;
  bool skipped_ = false;
};

// As Accelerate's AcceleratedScheduler (stepping with the optimizer, split_batches off): step()
// does nothing between the batches of an accumulation or after a step the loss scaler skipped,
// and otherwise steps the schedule once per process. Each process's loader holds 1/N of the
// data, so a schedule sized in one process's steps (OneCycleLR's total_steps, a warm-up) ends
// where it would in one process; OneCycleLR is not stepped past its total_steps.
class AcceleratedScheduler {
 public:
  AcceleratedScheduler(std::shared_ptr<optim::LRScheduler> scheduler, Accelerator& accelerator)
      : scheduler_(std::move(scheduler)), accelerator_(accelerator) {}
  void step();
  optim::LRScheduler& scheduler() { return *scheduler_; }

 private:
  std::shared_ptr<optim::LRScheduler> scheduler_;
  Accelerator& accelerator_;
};

// A loader whose batches are placed on the engine's device; tells the accelerator where a pass
// ends (accumulation steps there; gather_for_metrics drops the last batch's padding there).
class PreparedLoader {
 public:
  PreparedLoader(std::shared_ptr<data::DataLoader> loader, Accelerator& accelerator)
      : loader_(std::move(loader)), accelerator_(accelerator) {}

  class Iterator {
   public:
    using value_type = data::Batch;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    const data::Batch& operator*() const { return current_; }
    const data::Batch* operator->() const { return &current_; }
    Iterator& operator++();
    bool operator==(const Iterator& other) const { return inner_ == other.inner_; }

   private:
    friend class PreparedLoader;
    Iterator(data::DataLoader::Iterator inner, PreparedLoader* owner);
    void place();
    data::DataLoader::Iterator inner_;
    PreparedLoader* owner_ = nullptr;
    int64_t index_ = 0;
    int64_t samples_before_ = 0;  // samples of the earlier batches, over all ranks
    data::Batch current_;
  };

  Iterator begin();
  Iterator end() { return Iterator(); }
  int64_t num_batches() const { return loader_->num_batches(); }
  // The epoch of the next pass; each pass then counts one on from it (Accelerate's
  // DataLoaderShard: every pass calls set_epoch with its iteration count, so a loop that never
  // calls it still reshuffles, a DistributedSampler's shards included).
  void set_epoch(int64_t epoch) { next_epoch_ = epoch; }
  data::DataLoader& loader() { return *loader_; }

 private:
  std::shared_ptr<data::DataLoader> loader_;
  Accelerator& accelerator_;
  int64_t next_epoch_ = 0;
};

class Accelerator {
 public:
  explicit Accelerator(AcceleratorOptions options = {});
  Accelerator(const Accelerator&) = delete;
  Accelerator& operator=(const Accelerator&) = delete;

  IEngine& engine() { return *engine_; }
  Device device() const { return engine_->device(); }
  int process_index() const { return engine_->rank(); }
  int num_processes() const { return engine_->world_size(); }
  bool is_main_process() const { return engine_->is_master_process(); }
  int64_t gradient_accumulation_steps() const { return options_.gradient_accumulation_steps; }

  // ---- prepare ----
  std::shared_ptr<AcceleratedModule> prepare(nn::ModulePtr model);
  std::shared_ptr<AcceleratedOptimizer> prepare(std::shared_ptr<optim::Optimizer> optimizer);
  std::shared_ptr<PreparedLoader> prepare(std::shared_ptr<data::DataLoader> loader);
  std::shared_ptr<AcceleratedScheduler> prepare(std::shared_ptr<optim::LRScheduler> scheduler);
  struct Prepared {
    std::shared_ptr<AcceleratedModule> model;
    std::shared_ptr<AcceleratedOptimizer> optimizer;
    std::shared_ptr<PreparedLoader> loader;
    std::shared_ptr<AcceleratedScheduler> scheduler;  // empty without a scheduler
  };
  Prepared prepare(nn::ModulePtr model, std::shared_ptr<optim::Optimizer> optimizer,
                   std::shared_ptr<data::DataLoader> loader,
                   std::shared_ptr<optim::LRScheduler> scheduler = nullptr);

  // ---- the step ----
  // loss / gradient_accumulation_steps, backward through the engine (loss scaling).
  void backward(const Tensor& loss);
  // One batch of an accumulation: sets sync_gradients() (true at every N-th batch and at the end
  // of a loader) and keeps gradients local (no_sync) on the others.
  Scope accumulate(nn::Module& model);
  bool sync_gradients() const { return sync_gradients_; }
  // Unscales the gradients first (loss scaling) and clips their total norm; call it when
  // sync_gradients() is true. Between the batches of an accumulation it clips the partial sum
  // (no loss scaling) or refuses (fp16, whose gradients are still scaled there; Accelerate
  // fails there too, on its second unscale). Called twice before one step, it unscales once and
  // clips again, where Accelerate's second call fails in GradScaler.unscale_. Returns the total
  // norm from before clipping.
  Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                         double norm_type = 2.0);

  // ---- collectives ----
  // (n, ...) on each rank -> (world_size * n, ...); the tensor itself on one process.
  Tensor gather(const Tensor& tensor) const {
    return engine_->sync_tensor(tensor, SyncMode::all_gather);
  }
  // gather, without the samples a sharded loader repeats to fill its last batch (call it once per
  // batch of a prepared loader).
  Tensor gather_for_metrics(const Tensor& tensor);
  Tensor reduce(const Tensor& tensor, SyncMode mode = SyncMode::mean) const {
    return engine_->sync_tensor(tensor, mode);
  }
  void wait_for_everyone() const { engine_->barrier(); }
  // Prints on the main process only.
  template <typename... Args>
  void print(const Args&... args) const {
    if (!is_main_process()) return;
    (std::cout << ... << args) << "\n" << std::flush;
  }

  // ---- models and state ----
  nn::ModulePtr unwrap_model(const nn::ModulePtr& model) const;
  // dir/state.ckpt: the model (unwrapped), optimizer, scheduler, loss scaler and RNG of what was
  // prepared, written by the main process.
  void save_state(const std::string& dir);
  void load_state(const std::string& dir);

 private:
  friend class AcceleratedOptimizer;
  friend class AcceleratedScheduler;
  friend class PreparedLoader;
  void require_prepared(const char* what) const;

  AcceleratorOptions options_;
  EnginePtr engine_;
  std::shared_ptr<AcceleratedModule> model_;
  std::shared_ptr<AcceleratedOptimizer> optimizer_;
  std::shared_ptr<AcceleratedScheduler> scheduler_;
  bool sync_gradients_ = true;
  int64_t accumulation_step_ = 0;
  bool end_of_loader_ = false;
  int64_t loader_samples_ = 0;      // the dataset size of the loader being iterated
  int64_t batch_first_sample_ = 0;  // the current batch's first sample, counted over all ranks
  int64_t steps_taken_ = 0;
};

}  // namespace ember::engines
