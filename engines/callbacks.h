// The callbacks of a supervised run (Catalyst's dl.*Callback).
#pragma once

#include <cstdint>
#include <iosfwd>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engines/callback.h"
#include "engines/engine.h"
#include "runtime/io/checkpoint.h"

namespace ember::engines {

// batch_metrics[metric_key] = criterion(batch[input_key], batch[target_key]), under the engine's
// autocast (losses run in f32 there).
class CriterionCallback : public ICallback {
 public:
  explicit CriterionCallback(std::string input_key = "logits", std::string target_key = "targets",
                             std::string metric_key = "loss");
  void on_batch_end(IRunner& runner) override;

 private:
  std::string input_key_, target_key_, metric_key_;
};

// engine.backward_loss(batch_metrics[metric_key]) on training loaders.
class BackwardCallback : public ICallback {
 public:
  explicit BackwardCallback(std::string metric_key = "loss");
  void on_batch_end(IRunner& runner) override;

 private:
  std::string metric_key_;
};

struct OptimizerOptions {
  // Gradients of this many batches are summed (under the engine's no_sync, so a DDP engine
  // reduces only once) and averaged before one step: with a mean loss and equal batches, the
  // same update as one batch this many times larger. The last batches of a loader step too, and
  // the count starts again with each loader. (Catalyst's OptimizerCallback sums without dividing,
  // so its update is this many times larger; it leaves a loader's last incomplete group for the
  // next loader, and keeps counting across loaders and epochs.)
  int64_t accumulation_steps = 1;
  // > 0: clip the gradients' total 2-norm to this, after the engine has unscaled them.
  double max_grad_norm = 0;
};

// engine.optimizer_step + zero_grad on training loaders; sets runner.optimizer_stepped (false
// when the loss scaler skipped the step) and logs "lr" (group 0's, before the step).
class OptimizerCallback : public ICallback {
 public:
  explicit OptimizerCallback(OptimizerOptions options = {});
  void on_loader_start(IRunner& runner) override;
  void on_batch_start(IRunner& runner) override;
  void on_batch_end(IRunner& runner) override;
  void on_loader_end(IRunner& runner) override;

 private:
  OptimizerOptions options_;
  int64_t accumulated_ = 0;
  Scope no_sync_;
};

// scheduler.step() after each epoch in which the optimizer stepped at least once, or after each
// optimizer step (mode batch) — never for steps the loss scaler skipped, nor between accumulated
// batches: an epoch whose every step was skipped (f16 gradients overflowing) leaves the schedule
// where it was. That is Accelerate's AcceleratedScheduler rule (and what issue 6 asks for);
// Catalyst's SchedulerCallback steps on every batch or epoch whatever the optimizer did, and a
// plain PyTorch scheduler steps whenever it is called.
class SchedulerCallback : public ICallback {
 public:
  enum class Mode { epoch, batch };
  // A scheduler that steps on a metric (ReduceLROnPlateau) gets the epoch's `metric_key` of
  // `loader_key`, as Catalyst's SchedulerCallback does; it steps per epoch only.
  explicit SchedulerCallback(Mode mode = Mode::epoch, std::string loader_key = "valid",
                             std::string metric_key = "loss");
  void on_epoch_start(IRunner& runner) override;
  void on_batch_end(IRunner& runner) override;
  void on_epoch_end(IRunner& runner) override;

 private:
  Mode mode_;
  std::string loader_key_, metric_key_;
  bool optimizer_stepped_this_epoch_ = false;
};

// "accuracy" (top-1) and "accuracyNN" for each other k of topk: the share of rows whose target is
// among the k largest logits (among equal logits the lower class index ranks first, as argmax).
class AccuracyCallback : public ICallback {
 public:
  explicit AccuracyCallback(std::string input_key = "logits", std::string target_key = "targets",
                            std::vector<int64_t> topk = {1});
  void on_batch_end(IRunner& runner) override;

 private:
  std::string input_key_, target_key_;
  std::vector<int64_t> topk_;
  Tensor class_index_;  // (1, C) i64 on the logits' device
};

struct CheckpointOptions {
  std::string logdir = {};
  std::string loader_key = "valid";
  std::string metric_key = "loss";
  bool minimize = true;
  // best.ckpt always holds the best epoch (of the running stage); with topk > 1 the topk best
  // epochs are also kept as epoch-NNNN.ckpt (<stage>.epoch-NNNN.ckpt with several stages).
  // last.ckpt holds the latest epoch.
  int64_t topk = 1;
  // A checkpoint to continue from (its stage and epoch, components, RNG and best list), or a
  // logdir (its last.ckpt). The stages before the checkpoint's are skipped, the checkpoint's
  // continues after its epoch (or ends, when it had stopped early) and the later ones run.
  std::string resume = {};
  // Recorded in every checkpoint; a resume whose values differ is refused (same flags needed).
  Metadata run_identity = {};
  std::ostream* out = nullptr;  // "resuming from ..." (master only)
};

// Ranks each epoch at its end, saves once the loggers have written it (master only), and resumes
// at stage start. Besides the components, a checkpoint records "checkpoint.stage" (and its
// index), "checkpoint.epoch" (in the stage), "checkpoint.global_epoch",
// "checkpoint.need_early_stop" and the best list.
class CheckpointCallback : public ICallback {
 public:
  explicit CheckpointCallback(CheckpointOptions options);
  void on_stage_start(IRunner& runner) override;
  void on_epoch_end(IRunner& runner) override;
  void on_epoch_logged(IRunner& runner) override;

  int64_t best_epoch() const { return best_.empty() ? 0 : best_.front().first; }
  double best_value() const { return best_.empty() ? 0 : best_.front().second; }
  // Whether the epoch that just ended is the best so far.
  bool last_was_best() const { return last_was_best_; }

 private:
  bool better(double a, double b) const { return options_.minimize ? a < b : a > b; }
  std::string topk_file(const IRunner& runner, int64_t epoch) const;

  CheckpointOptions options_;
  std::vector<std::pair<int64_t, double>> best_;  // (epoch, value), best first; at most topk
  bool last_was_best_ = false;
  // From on_epoch_end to on_epoch_logged: the epoch's value, the epochs it pushed out of the top
  // k, and whether the callbacks before this one ended the stage.
  double value_ = 0;
  std::vector<int64_t> dropped_;
  bool stage_stopped_early_ = false;
};

// Stops the run (runner.need_early_stop) once loader_key's metric_key has not improved by at
// least min_delta for `patience` epochs (Catalyst's comparison: with min_delta 0, a tie counts).
class EarlyStoppingCallback : public ICallback {
 public:
  EarlyStoppingCallback(int64_t patience, std::string loader_key = "valid",
                        std::string metric_key = "loss", bool minimize = true,
                        double min_delta = 1e-6);
  void on_epoch_end(IRunner& runner) override;
  // "best", "bad_epochs" (and "has_best"): a resumed run stops where the straight one would.
  std::map<std::string, std::string> state_dict() const override;
  void load_state_dict(const std::map<std::string, std::string>& state) override;

 private:
  int64_t patience_;
  std::string loader_key_, metric_key_;
  bool minimize_;
  double min_delta_;
  bool has_best_ = false;
  double best_ = 0;
  int64_t bad_epochs_ = 0;
};

enum class Progress { none, lines, live };  // live: one line redrawn in place (a terminal)

// A progress line for training loaders (master only): batches done, running loss, images/s, ETA.
// lines: a line at every tenth of the loader; live: one line redrawn at most 5 times a second.
class ProgressBarCallback : public ICallback {
 public:
  ProgressBarCallback(std::ostream& out, Progress mode, bool all_loaders = false);
  void on_loader_start(IRunner& runner) override;
  void on_batch_end(IRunner& runner) override;

 private:
  std::ostream& out_;
  Progress mode_;
  bool all_loaders_;
  bool active_ = false;
  std::string label_;
  double start_ = 0;
  double last_draw_ = -1;
  int64_t printed_tenth_ = -1;
};

}  // namespace ember::engines
