#include "optim/schedulers.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numbers>

#include "runtime/io/metadata_numbers.h"

namespace ember::optim {

namespace {

const std::string& entry(const Metadata& state, const std::string& key, const char* op) {
  const auto it = state.find(key);
  EMBER_CHECK(it != state.end(), op, ".load_state_dict: no '", key, "' entry");
  return it->second;
}

double read_number(const Metadata& state, const std::string& key, const char* op) {
  return parse_real(entry(state, key, op), std::string(op) + ".load_state_dict: '" + key + "'");
}

// last_epoch starts at -1 (no step yet), the counters at 0.
int64_t read_integer(const Metadata& state, const std::string& key, const char* op, int64_t min) {
  return parse_integer(entry(state, key, op), std::string(op) + ".load_state_dict: '" + key + "'",
                       min);
}

std::vector<double> group_lrs(const Optimizer& optimizer) {
  std::vector<double> lrs;
  for (const ParamGroup& group : optimizer.param_groups())
    lrs.push_back(group.lr);
  return lrs;
}

constexpr double kPi = std::numbers::pi;

constexpr int64_t kLastEpoch = std::numeric_limits<int64_t>::max();

// One more epoch, or an error when the count is already int64's largest (a state dict can say so).
void count_epoch(int64_t& last_epoch, const char* op) {
  EMBER_CHECK(last_epoch < kLastEpoch, op, ".step: last_epoch is already ", last_epoch,
              ", the largest int64; it cannot step again");
  last_epoch += 1;
}

// PyTorch's (epoch - 1 - T_max) % (2 T_max) == 0, the first epoch of a rising half period, without
// int64's overflow for a T_max past 2^62 (epoch >= 1).
bool starts_rising_half_period(int64_t epoch, int64_t t_max) {
  const int64_t past = epoch - 1;
  if (past < t_max) return false;  // the difference is in (-T_max, 0): never a multiple
  return (static_cast<uint64_t>(past) - static_cast<uint64_t>(t_max)) %
             (2 * static_cast<uint64_t>(t_max)) ==
         0;
}

}  // namespace

// ---- LRScheduler --------------------------------------------------------------------------------

LRScheduler::LRScheduler(Optimizer& optimizer) : optimizer_(optimizer) {}

void LRScheduler::initialize() {
  base_lrs_.clear();
  for (ParamGroup& group : optimizer_.param_groups()) {
    if (!group.initial_lr) group.initial_lr = group.lr;
    base_lrs_.push_back(*group.initial_lr);
  }
  step();
}

void LRScheduler::step() {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  // Before compute_lr, which reads a base learning rate per group: a group added to the
  // optimizer after the scheduler was made has none.
  EMBER_CHECK(groups.size() == base_lrs_.size(), "LRScheduler.step: the optimizer has ",
              groups.size(), " parameter groups but the scheduler was made for ", base_lrs_.size(),
              " (make the scheduler after the last add_param_group)");
  count_epoch(last_epoch_, "LRScheduler");
  if (step_count_ < kLastEpoch) step_count_ += 1;  // only ever compared with 1
  const std::vector<double> lrs = compute_lr();
  for (size_t g = 0; g < groups.size(); ++g)
    groups[g].lr = lrs[g];
  last_lr_ = lrs;
}

void LRScheduler::step(double) {
  EMBER_FAIL(
      "LRScheduler.step(metric): this scheduler steps without a metric; call step() "
      "(only ReduceLROnPlateau steps on a metric)");
}

Metadata LRScheduler::state_dict() const {
  Metadata out{{"scheduler.last_epoch", std::to_string(last_epoch_)},
               {"scheduler.step_count", std::to_string(step_count_)},
               {"scheduler.num_groups", std::to_string(base_lrs_.size())}};
  for (size_t g = 0; g < base_lrs_.size(); ++g) {
    out["scheduler.base_lr." + std::to_string(g)] = format_exact(base_lrs_[g]);
    out["scheduler.last_lr." + std::to_string(g)] = format_exact(last_lr_[g]);
  }
  return out;
}

void LRScheduler::load_state_dict(const Metadata& state) {
  const int64_t groups = read_integer(state, "scheduler.num_groups", "LRScheduler", 0);
  EMBER_CHECK(groups == static_cast<int64_t>(base_lrs_.size()),
              "LRScheduler.load_state_dict: the state dict has ", groups,
              " parameter groups, this scheduler has ", base_lrs_.size());
  std::vector<double> base(base_lrs_.size()), last(base_lrs_.size());
  for (size_t g = 0; g < base.size(); ++g) {
    base[g] = read_number(state, "scheduler.base_lr." + std::to_string(g), "LRScheduler");
    last[g] = read_number(state, "scheduler.last_lr." + std::to_string(g), "LRScheduler");
  }
  const int64_t last_epoch = read_integer(state, "scheduler.last_epoch", "LRScheduler", -1);
  step_count_ = read_integer(state, "scheduler.step_count", "LRScheduler", 0);
  last_epoch_ = last_epoch;
  base_lrs_ = std::move(base);
  last_lr_ = std::move(last);
}

// ---- StepLR, MultiStepLR, ExponentialLR ---------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer), step_size_(step_size), gamma_(gamma) {
  EMBER_CHECK(step_size > 0, "StepLR: step_size must be positive, got ", step_size);
  initialize();
}

std::vector<double> StepLR::compute_lr() {
  std::vector<double> lrs = group_lrs(optimizer_);
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs)
    lr *= gamma_;
  return lrs;
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma)
    : LRScheduler(optimizer), milestones_(std::move(milestones)), gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initialize();
}

std::vector<double> MultiStepLR::compute_lr() {
  std::vector<double> lrs = group_lrs(optimizer_);
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return lrs;
  const double factor = std::pow(gamma_, static_cast<double>(count));
  for (double& lr : lrs)
    lr *= factor;
  return lrs;
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma)
    : LRScheduler(optimizer), gamma_(gamma) {
  initialize();
}

std::vector<double> ExponentialLR::compute_lr() {
  std::vector<double> lrs = group_lrs(optimizer_);
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs)
    lr *= gamma_;
  return lrs;
}

// ---- CosineAnnealingLR --------------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer), t_max_(t_max), eta_min_(eta_min) {
  EMBER_CHECK(t_max > 0, "CosineAnnealingLR: T_max must be positive, got ", t_max);
  initialize();
}

std::vector<double> CosineAnnealingLR::compute_lr() {
  std::vector<double> lrs = group_lrs(optimizer_);
  const double t_max = static_cast<double>(t_max_);
  const double epoch = static_cast<double>(last_epoch_);
  if (last_epoch_ == 0) return lrs;
  for (size_t g = 0; g < lrs.size(); ++g) {
    const double base = base_lrs_[g];
    if (step_count_ == 1 && last_epoch_ > 0) {
      lrs[g] = eta_min_ + (base - eta_min_) * (1 + std::cos(epoch * kPi / t_max)) / 2;
    } else if (starts_rising_half_period(last_epoch_, t_max_)) {
      lrs[g] = lrs[g] + (base - eta_min_) * (1 - std::cos(kPi / t_max)) / 2;
    } else {
      lrs[g] = (1 + std::cos(kPi * epoch / t_max)) / (1 + std::cos(kPi * (epoch - 1) / t_max)) *
                   (lrs[g] - eta_min_) +
               eta_min_;
    }
  }
  return lrs;
}

// ---- LinearLR -----------------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters)
    : LRScheduler(optimizer),
      start_factor_(start_factor),
      end_factor_(end_factor),
      total_iters_(total_iters) {
  EMBER_CHECK(start_factor > 0.0 && start_factor <= 1.0,
              "LinearLR: start_factor must be in (0, 1], got ", start_factor);
  EMBER_CHECK(end_factor >= 0.0 && end_factor <= 1.0,
              "LinearLR: end_factor must be in [0, 1], got ", end_factor);
  EMBER_CHECK(total_iters > 0, "LinearLR: total_iters must be positive, got ", total_iters);
  initialize();
}

std::vector<double> LinearLR::compute_lr() {
  std::vector<double> lrs = group_lrs(optimizer_);
  if (last_epoch_ == 0) {
    for (double& lr : lrs)
      lr *= start_factor_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double change = end_factor_ - start_factor_;
  const double factor = 1.0 + change / (static_cast<double>(total_iters_) * start_factor_ +
                                        static_cast<double>(last_epoch_ - 1) * change);
  for (double& lr : lrs)
    lr *= factor;
  return lrs;
}

// ---- OneCycleLR ---------------------------------------------------------------------------------

OneCycleLR::OneCycleLR(Optimizer& optimizer, double max_lr, int64_t total_steps,
                       const OneCycleOptions& options)
    : OneCycleLR(optimizer, std::vector<double>(optimizer.param_groups().size(), max_lr),
                 total_steps, options) {}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
                       const OneCycleOptions& options)
    : LRScheduler(optimizer),
      total_steps_(total_steps),
      options_(options),
      max_lrs_(std::move(max_lrs)),
      use_beta1_(optimizer.name() != "SGD") {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  EMBER_CHECK(total_steps > 0, "OneCycleLR: total_steps must be positive, got ", total_steps);
  EMBER_CHECK(options.pct_start >= 0.0 && options.pct_start <= 1.0,
              "OneCycleLR: pct_start must be in [0, 1], got ", options.pct_start);
  EMBER_CHECK(max_lrs_.size() == groups.size(), "OneCycleLR: got ", max_lrs_.size(),
              " max_lr values for ", groups.size(), " parameter groups");
  // PyTorch's _schedule_phases: end steps as floats, one step before the phase's share ends.
  const double total = static_cast<double>(total_steps);
  const double low = options.base_momentum, high = options.max_momentum;
  if (options.three_phase) {
    phases_ = {{options.pct_start * total - 1, Level::initial, Level::max, high, low},
               {2 * options.pct_start * total - 2, Level::max, Level::initial, low, high},
               {total - 1, Level::initial, Level::min, high, high}};
  } else {
    phases_ = {{options.pct_start * total - 1, Level::initial, Level::max, high, low},
               {total - 1, Level::max, Level::min, low, high}};
  }
  for (size_t g = 0; g < groups.size(); ++g) {
    initial_lrs_.push_back(max_lrs_[g] / options.div_factor);
    min_lrs_.push_back(initial_lrs_[g] / options.final_div_factor);
    groups[g].initial_lr = initial_lrs_[g];
    if (options.cycle_momentum) {
      if (use_beta1_) {
        groups[g].beta1 = options.max_momentum;
      } else {
        groups[g].momentum = options.max_momentum;
      }
    }
  }
  initialize();
}

double OneCycleLR::level(Level which, size_t group) const {
  switch (which) {
    case Level::initial:
      return initial_lrs_[group];
    case Level::max:
      return max_lrs_[group];
    case Level::min:
      return min_lrs_[group];
  }
  return 0.0;
}

std::vector<double> OneCycleLR::compute_lr() {
  EMBER_CHECK(last_epoch_ <= total_steps_, "OneCycleLR: tried to step ", last_epoch_,
              " times; the specified number of total steps is ", total_steps_);
  const bool linear = options_.anneal_strategy == OneCycleOptions::Anneal::linear;
  const auto anneal = [linear](double start, double end, double pct) {
    if (linear) return (end - start) * pct + start;
    return end + (start - end) / 2.0 * (std::cos(kPi * pct) + 1);
  };
  const double step = static_cast<double>(last_epoch_);
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  std::vector<double> lrs(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    // The first phase whose end the step has not passed (the last one past the end).
    double start_step = 0.0;
    for (size_t i = 0; i < phases_.size(); ++i) {
      const Phase& phase = phases_[i];
      if (step <= phase.end_step || i + 1 == phases_.size()) {
        const double pct = (step - start_step) / (phase.end_step - start_step);
        lrs[g] = anneal(level(phase.start_lr, g), level(phase.end_lr, g), pct);
        const double momentum = anneal(phase.start_momentum, phase.end_momentum, pct);
        if (options_.cycle_momentum) {
          if (use_beta1_) {
            groups[g].beta1 = momentum;
          } else {
            groups[g].momentum = momentum;
          }
        }
        break;
      }
      start_step = phase.end_step;
    }
  }
  return lrs;
}

// ---- ReduceLROnPlateau --------------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, const ReduceLROnPlateauOptions& options)
    : LRScheduler(optimizer), options_(options) {
  EMBER_CHECK(options.factor < 1.0, "ReduceLROnPlateau: factor should be < 1.0, got ",
              options.factor);
  EMBER_CHECK(options.patience >= 0 && options.cooldown >= 0,
              "ReduceLROnPlateau: patience and cooldown must be >= 0");
  const double inf = std::numeric_limits<double>::infinity();
  best_ = options.mode == ReduceLROnPlateauOptions::Mode::min ? inf : -inf;
  // No first step here (PyTorch's takes one that changes nothing): last_epoch_ starts at 0.
  last_epoch_ = 0;
  base_lrs_ = last_lr_ = group_lrs(optimizer);
}

std::vector<double> ReduceLROnPlateau::compute_lr() {
  return group_lrs(optimizer_);
}

void ReduceLROnPlateau::step() {
  EMBER_FAIL(
      "ReduceLROnPlateau.step(): this scheduler steps on a metric, call step(value) (in the "
      "runner, SchedulerCallback passes the epoch's metric of its loader_key/metric_key)");
}

bool ReduceLROnPlateau::is_better(double value) const {
  using Mode = ReduceLROnPlateauOptions::Mode;
  using ThresholdMode = ReduceLROnPlateauOptions::ThresholdMode;
  const double t = options_.threshold;
  if (options_.mode == Mode::min && options_.threshold_mode == ThresholdMode::rel)
    return value < best_ * (1.0 - t);
  if (options_.mode == Mode::min) return value < best_ - t;
  if (options_.threshold_mode == ThresholdMode::rel) return value > best_ * (t + 1.0);
  return value > best_ + t;
}

void ReduceLROnPlateau::step(double metric) {
  count_epoch(last_epoch_, "ReduceLROnPlateau");
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else if (num_bad_epochs_ < kLastEpoch) {  // saturates: still more than any patience
    num_bad_epochs_ += 1;
  }
  if (cooldown_counter_ > 0) {
    cooldown_counter_ -= 1;
    num_bad_epochs_ = 0;  // bad epochs in cooldown are ignored
  }
  if (num_bad_epochs_ > options_.patience) {
    for (ParamGroup& group : optimizer_.param_groups()) {
      const double new_lr = std::max(group.lr * options_.factor, options_.min_lr);
      if (group.lr - new_lr > options_.eps) group.lr = new_lr;
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_ = group_lrs(optimizer_);
}

Metadata ReduceLROnPlateau::state_dict() const {
  return {{"plateau.best", format_exact(best_)},
          {"plateau.num_bad_epochs", std::to_string(num_bad_epochs_)},
          {"plateau.cooldown_counter", std::to_string(cooldown_counter_)},
          {"plateau.last_epoch", std::to_string(last_epoch_)}};
}

void ReduceLROnPlateau::load_state_dict(const Metadata& state) {
  const char* op = "ReduceLROnPlateau";
  const double best = read_number(state, "plateau.best", op);
  const int64_t bad = read_integer(state, "plateau.num_bad_epochs", op, 0);
  const int64_t cooldown = read_integer(state, "plateau.cooldown_counter", op, 0);
  const int64_t epoch = read_integer(state, "plateau.last_epoch", op, -1);
  best_ = best;
  num_bad_epochs_ = bad;
  cooldown_counter_ = cooldown;
  last_epoch_ = epoch;
  last_lr_ = group_lrs(optimizer_);
}

}  // namespace ember::optim
