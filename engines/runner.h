// The runner: Catalyst's IRunner (a run described by overridable hooks) and SupervisedRunner (the
// tutorial's runner.train(model=..., criterion=..., ...)).
//
//   engines::SupervisedRunner runner;
//   auto loss = [](const Tensor& x, const Tensor& y) { return cross_entropy(x, y); };
//   runner.train({.model = model, .criterion = loss, .optimizer = adam,
//                 .scheduler = scheduler, .loaders = {{"train", train}, {"valid", valid}},
//                 .logdir = "logdir", .num_epochs = 10, .verbose = true,
//                 .valid_loader = "valid", .valid_metric = "loss",
//                 .minimize_valid_metric = true, .engine = "amp"});
//
// (examples/catalyst_*.cpp are the tutorial's three programs.) A custom runner derives from IRunner
// and overrides the get_* hooks and handle_batch, then calls run(). The runner never branches on
// the hardware: placement, precision, backward, the step, checkpoint packing and the reduction of
// metrics across ranks are the engine's. Only the master process logs and writes checkpoints; seeds
// are seed + rank; each loader's sampler gets set_epoch(epoch - 1) before the loader runs.
//
// Several stages (stages(), e.g. {"warmup", "train"}) run one after the other, as Catalyst's: each
// gets its components from the get_* hooks (a runner that returns the same model object carries
// its weights into the next stage), its epochs count from 1 (`epoch`) while `global_epoch` counts
// over the whole run, and the logs name the stage. A resumed run skips the stages its checkpoint
// had finished and continues the checkpoint's stage after its epoch.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/loader.h"
#include "engines/callback.h"
#include "engines/engine.h"
#include "engines/logger.h"

namespace ember::engines {

// name -> loader, in the order they run each epoch ("train" before "valid").
using Loaders = std::vector<std::pair<std::string, std::shared_ptr<data::DataLoader>>>;

class IRunner {
 public:
  virtual ~IRunner() = default;
  IRunner() = default;
  IRunner(const IRunner&) = delete;
  IRunner& operator=(const IRunner&) = delete;

  // ---- hooks ----
  virtual EnginePtr get_engine();  // default: make_engine("auto")
  virtual Loggers get_loggers() { return {}; }
  virtual std::vector<std::string> stages() { return {"train"}; }
  virtual int64_t get_stage_len(const std::string& stage) = 0;  // epochs
  virtual Loaders get_loaders(const std::string& stage) = 0;
  virtual nn::ModulePtr get_model(const std::string& stage) = 0;
  virtual Criterion get_criterion(const std::string&) { return {}; }
  // Called with the model placed (and converted) by the engine.
  virtual std::shared_ptr<optim::Optimizer> get_optimizer(const std::string&, nn::Module&) {
    return nullptr;
  }
  virtual std::shared_ptr<optim::LRScheduler> get_scheduler(const std::string&, optim::Optimizer&) {
    return nullptr;
  }
  virtual Callbacks get_callbacks(const std::string&) { return {}; }
  // One batch (already on the engine's device): fill `batch` ("features", "targets", "logits").
  // Runs under the engine's autocast; without gradients outside train loaders.
  virtual void handle_batch(const data::Batch& batch) = 0;

  // Runs every stage. Errors reach the caller after callbacks' on_exception and the loggers'
  // close().
  void run();

  // ---- state, read and written by callbacks ----
  uint64_t seed = 42;
  EnginePtr engine;
  Loggers loggers;
  nn::ModulePtr model;
  Criterion criterion;
  std::shared_ptr<optim::Optimizer> optimizer;
  std::shared_ptr<optim::LRScheduler> scheduler;
  Loaders loaders;
  Callbacks callbacks;  // sorted by order

  std::string stage;
  int64_t stage_index = 0;  // in stages(), from 0
  int64_t num_stages = 1;   // stages().size()
  int64_t stage_len = 0;
  // The running epoch of this stage, from 1; a resume sets it to the stage's epochs already done.
  int64_t epoch = 0;
  // The running epoch over every stage, from 1 (Catalyst's global_epoch_step): the step of the
  // logs. A resume sets it to the epochs its checkpoint covers.
  int64_t global_epoch = 0;
  std::string loader_key;
  std::shared_ptr<data::DataLoader> loader;
  bool is_train_loader = false;
  int64_t loader_batch_len = 0;   // batches in this loader
  int64_t loader_batch_step = 0;  // batches done in this loader, this one included
  int64_t loader_sample_step = 0;
  int64_t batch_size = 0;          // of the current batch
  int64_t batch_step = 0;          // training batches in this stage, all its epochs (Catalyst's
                                   // stage_batch_step: reset when a stage starts)
  bool optimizer_stepped = false;  // the optimizer stepped at this batch (not skipped)
  bool need_early_stop = false;    // set by a callback: no further epoch starts

  // "features", "targets", "logits", ...: the current batch's tensors.
  std::map<std::string, Tensor> batch;
  // 0-d tensors of this batch ("loss", "accuracy", "lr"); averaged over the loader, weighted by
  // batch size. The loss keeps its graph (the backward callback uses it).
  std::map<std::string, Tensor> batch_metrics;
  // This loader's running averages so far, on this rank (progress bars). Reads device metrics
  // back: call it once in a while, not every batch.
  Metrics running_metrics() const;
  // After a loader: its averages over every rank, plus "throughput" (samples/s over all ranks),
  // "seconds", and "first_batch_seconds" (this rank's host time from the loader's start to the end
  // of its first batch: the loader's start-up and whatever is set up on first use, such as
  // cuDNN's algorithm choices; work still queued on a GPU is not in it).
  Metrics loader_metrics;
  // After each loader: every loader of this epoch.
  LoaderMetrics epoch_metrics;
  // The metric `key` of loader `loader_name` this epoch; an error listing what there is.
  double epoch_metric(const std::string& loader_name, const std::string& key) const;

 private:
  void run_stage(const std::string& stage_name, int64_t index);
  void run_loader();
  void run_event(void (ICallback::*event)(IRunner&));

  // sum(value * batch size) as an f64 0-d tensor on the metric's device: adding a CUDA loss to it
  // queues a kernel instead of waiting for the GPU, so the metrics cost no host synchronisation
  // per batch (one per loader, when run_loader reads the sums).
  struct Running {
    Tensor weighted_sum;  // undefined before the loader's first batch
    double weight = 0;
  };
  std::map<std::string, Running> running_;
};

// The tutorial's train(...) parameters.
struct TrainOptions {
  // The model, or model_fn to build it after the runner has seeded the RNG (seed + rank).
  nn::ModulePtr model = {};
  ModelFn model_fn = {};
  Criterion criterion = {};
  std::shared_ptr<optim::Optimizer> optimizer = {};  // or optimizer_fn (needed by the O2 engines)
  std::shared_ptr<optim::LRScheduler> scheduler = {};
  Loaders loaders = {};
  std::string logdir = {};  // empty: no checkpoints, no file logs
  int64_t num_epochs = 1;
  bool verbose = false;  // progress bar and console logger
  // The metric that picks the best checkpoint (and early stopping's, ReduceLROnPlateau's). When
  // the tutorial leaves them out, Catalyst keeps the last epoch as "best"; here they default to
  // the lowest validation loss.
  std::string valid_loader = "valid";
  std::string valid_metric = "loss";
  bool minimize_valid_metric = true;
  // "auto", "cpu", "amp", ... (engines/factory.h); `engine_instance` wins when set.
  std::string engine = "auto";
  EnginePtr engine_instance = {};
  bool ddp = false;  // the tutorial's shortcuts: engine "ddp", "amp", "ddp-amp"
  bool amp = false;
  Callbacks callbacks = {};  // added to (or replacing, by name) the defaults
  // Seeds the global generator (weights, dropout) with seed + rank. A loader's order and random
  // transforms follow its own DataLoaderOptions::seed (and the epoch), not this one; Catalyst's
  // loaders draw from the global generator, so give each loader a seed derived from this one to
  // vary the data with it.
  uint64_t seed = 42;
  std::string resume = {};  // a checkpoint to continue from, or a logdir (its last.ckpt)
  // Built after the engine placed the model: the O2 engines need it so (master weights).
  OptimizerFn optimizer_fn = {};
  SchedulerFn scheduler_fn = {};
  bool use_default_loggers = true;  // console (verbose), CSV and TensorBoard (logdir)
  Loggers loggers = {};
};

// criterion(model(features), targets) with Catalyst's defaults: callbacks criterion, backward,
// optimizer, scheduler (per epoch), checkpoint (logdir; best by valid_metric on valid_loader,
// plus last) and a progress bar (verbose).
class SupervisedRunner : public IRunner {
 public:
  void train(TrainOptions options);

  EnginePtr get_engine() override;
  Loggers get_loggers() override;
  int64_t get_stage_len(const std::string&) override { return options_.num_epochs; }
  Loaders get_loaders(const std::string&) override { return options_.loaders; }
  nn::ModulePtr get_model(const std::string&) override;
  Criterion get_criterion(const std::string&) override { return options_.criterion; }
  std::shared_ptr<optim::Optimizer> get_optimizer(const std::string&, nn::Module&) override;
  std::shared_ptr<optim::LRScheduler> get_scheduler(const std::string&, optim::Optimizer&) override;
  Callbacks get_callbacks(const std::string&) override;
  void handle_batch(const data::Batch& batch) override;

 protected:
  TrainOptions options_;
};

}  // namespace ember::engines
