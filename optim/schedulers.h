// Learning-rate schedulers (torch.optim.lr_scheduler). Each writes the groups' lr on step().
//
//   optim::StepLR scheduler(optimizer, /*step_size=*/30, /*gamma=*/0.1);
//   for (epoch ...) { train(); scheduler.step(); }
//
// As in PyTorch, constructing a scheduler takes the first step (last_epoch becomes 0), records
// each group's initial_lr once, and step() uses PyTorch's recursive (chainable) forms, so the
// values match PyTorch's to the last bit for a normal schedule.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "optim/optimizer.h"

namespace ember::optim {

class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Advances one epoch (or batch) and writes the new lrs into the optimizer's groups.
  virtual void step();
  // Schedulers driven by a metric (ReduceLROnPlateau) step on its value instead; the others
  // throw, saying so.
  virtual bool steps_on_metric() const { return false; }
  virtual void step(double metric);
  std::vector<double> get_last_lr() const { return last_lr_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }

  // Metadata "scheduler.last_epoch", "scheduler.step_count", "scheduler.base_lr.<g>",
  // "scheduler.last_lr.<g>", numbers with 17 significant digits. The hyper-parameters (step
  // size, milestones, T_max, gamma, ...) are the constructor's, not the state's: PyTorch's
  // state_dict holds them and its load_state_dict restores them, so build the scheduler as the
  // checkpointed run did (`ember train` refuses a resume with other flags).
  virtual Metadata state_dict() const;
  virtual void load_state_dict(const Metadata& state);

 protected:
  explicit LRScheduler(Optimizer& optimizer);
  // Records initial_lr and base_lrs and takes the first step; called by the subclass constructor.
  void initialize();
  // The lrs for last_epoch_, from the groups' current lrs (PyTorch's get_lr).
  virtual std::vector<double> compute_lr() = 0;

  Optimizer& optimizer_;
  std::vector<double> base_lrs_;
  std::vector<double> last_lr_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
};

// lr * gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);

 protected:
  std::vector<double> compute_lr() override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr * gamma at each milestone (a milestone listed twice applies gamma twice).
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1);

 protected:
  std::vector<double> compute_lr() override;

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

// lr * gamma every epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma);

 protected:
  std::vector<double> compute_lr() override;

 private:
  double gamma_;
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2, by PyTorch's recursion.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);

 protected:
  std::vector<double> compute_lr() override;

 private:
  int64_t t_max_;
  double eta_min_;
};

// torch.optim.lr_scheduler.LinearLR: the factor goes linearly from start_factor to end_factor over
// total_iters steps, then stays. With end_factor 1 it is a linear warm-up.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0,
           int64_t total_iters = 5);

 protected:
  std::vector<double> compute_lr() override;

 private:
  double start_factor_;
  double end_factor_;
  int64_t total_iters_;
};

// Linear warm-up from start_factor * lr to lr over warmup_steps steps.
class LinearWarmup : public LinearLR {
 public:
  LinearWarmup(Optimizer& optimizer, int64_t warmup_steps, double start_factor = 1.0 / 3.0)
      : LinearLR(optimizer, start_factor, 1.0, warmup_steps) {}
};

struct OneCycleOptions {
  enum class Anneal { cos, linear };
  double pct_start = 0.3;
  Anneal anneal_strategy = Anneal::cos;
  double div_factor = 25.0;       // initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;  // min_lr = initial_lr / final_div_factor
  bool three_phase = false;
  bool cycle_momentum = true;  // SGD's momentum, or Adam's beta1
  double base_momentum = 0.85;
  double max_momentum = 0.95;
};

// The 1cycle policy (torch.optim.lr_scheduler.OneCycleLR), cosine or linear annealing. Two
// phases: from max_lr / div_factor up to max_lr over pct_start of total_steps, then down to
// min_lr. Three phases: up to max_lr, back down to max_lr / div_factor over as many steps, then
// down to min_lr. Momentum (or Adam's beta1) moves the other way, between max_momentum and
// base_momentum. Stepping past total_steps is an error.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
             const OneCycleOptions& options = {});
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
             const OneCycleOptions& options = {});
  int64_t total_steps() const { return total_steps_; }

 protected:
  std::vector<double> compute_lr() override;

 private:
  // A phase runs from the previous phase's end_step to its own, annealing the learning rate
  // from one of the three levels to another, and the momentum between its two.
  enum class Level { initial, max, min };
  struct Phase {
    double end_step;
    Level start_lr, end_lr;
    double start_momentum, end_momentum;
  };
  double level(Level which, size_t group) const;

  int64_t total_steps_;
  OneCycleOptions options_;
  std::vector<Phase> phases_;
  std::vector<double> initial_lrs_, max_lrs_, min_lrs_;
  bool use_beta1_;
};

struct ReduceLROnPlateauOptions {
  enum class Mode { min, max };
  enum class ThresholdMode { rel, abs };
  Mode mode = Mode::min;
  double factor = 0.1;
  int64_t patience = 10;
  double threshold = 1e-4;
  ThresholdMode threshold_mode = ThresholdMode::rel;
  int64_t cooldown = 0;
  double min_lr = 0.0;
  double eps = 1e-8;  // changes smaller than this are not applied
};

// Multiplies the lr by `factor` once the metric has not improved for `patience` steps. An
// LRScheduler (as in PyTorch 2) that steps on a metric: step(value), not step(); in the runner,
// SchedulerCallback gives it the epoch's metric of its loader_key/metric_key ("valid"/"loss").
class ReduceLROnPlateau : public LRScheduler {
 public:
  explicit ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options = {});

  bool steps_on_metric() const override { return true; }
  void step(double metric) override;
  void step() override;  // throws: this scheduler needs the metric
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  double best() const { return best_; }

  // Metadata "plateau.best", "plateau.num_bad_epochs", "plateau.cooldown_counter",
  // "plateau.last_epoch".
  Metadata state_dict() const override;
  void load_state_dict(const Metadata& state) override;

 protected:
  std::vector<double> compute_lr() override;  // the groups' lrs as they are

 private:
  bool is_better(double value) const;

  ReduceLROnPlateauOptions options_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
};

}  // namespace ember::optim
