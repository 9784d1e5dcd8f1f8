// Every scheduler's lr sequence against its closed-form formula, computed independently here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numbers>

#include "optim/optim.h"
#include "runtime/ops.h"
#include "tests/common/expect_error.h"

namespace ember::optim {
namespace {

constexpr double kPi = std::numbers::pi;
constexpr int kSteps = 30;

std::vector<Tensor> params() {
  Tensor p = ones({3});
  p.requires_grad_();
  return {p};
}

// lr after each of kSteps scheduler steps (index 0: right after construction) equals formula(e).
void expect_schedule(Optimizer& optimizer, LRScheduler& scheduler,
                     const std::function<double(int)>& formula, int steps = kSteps) {
  for (int epoch = 0; epoch <= steps; ++epoch) {
    if (epoch > 0) scheduler.step();
    const double want = formula(epoch);
    EXPECT_NEAR(optimizer.param_groups()[0].lr, want, 1e-12 * (1 + std::abs(want)))
        << "epoch " << epoch;
    EXPECT_EQ(scheduler.get_last_lr()[0], optimizer.param_groups()[0].lr);
    EXPECT_EQ(scheduler.last_epoch(), epoch);
  }
}

TEST(StepLR, DecaysEveryStepSize) {
  SGD sgd(params(), {.lr = 0.5});
  StepLR scheduler(sgd, 7, 0.3);
  expect_schedule(sgd, scheduler, [](int e) { return 0.5 * std::pow(0.3, e / 7); });
  EXPECT_EQ(*sgd.param_groups()[0].initial_lr, 0.5);
}

TEST(MultiStepLR, DecaysAtMilestones) {
  SGD sgd(params(), {.lr = 0.2});
  MultiStepLR scheduler(sgd, {12, 5, 20, 20}, 0.5);
  expect_schedule(sgd, scheduler, [](int e) {
    int passed = 0;
    for (int m : {5, 12, 20, 20})
      passed += e >= m;
    return 0.2 * std::pow(0.5, passed);
  });
}

TEST(ExponentialLR, DecaysEveryEpoch) {
  Adam adam(params(), {.lr = 0.01});
  ExponentialLR scheduler(adam, 0.9);
  expect_schedule(adam, scheduler, [](int e) { return 0.01 * std::pow(0.9, e); });
}

TEST(CosineAnnealingLR, FollowsTheCosineAcrossSeveralHalfPeriods) {
  SGD sgd(params(), {.lr = 0.1});
  CosineAnnealingLR scheduler(sgd, 10, 0.001);
  expect_schedule(sgd, scheduler,
                  [](int e) { return 0.001 + (0.1 - 0.001) * (1 + std::cos(kPi * e / 10.0)) / 2; });
}

// A group added after the scheduler was made has no base learning rate: step() says so before
// it reads one (it read past the end of its base learning rates before).
TEST(CosineAnnealingLR, AGroupAddedAfterTheSchedulerIsAClearError) {
  SGD sgd(params(), {.lr = 0.1});
  CosineAnnealingLR cosine(sgd, 10);
  cosine.step();
  Tensor extra = ones({2});
  extra.requires_grad_();
  ParamGroup group;
  group.params = {extra};
  group.lr = 0.5;
  sgd.add_param_group(group);
  EXPECT_ERROR_WITH(cosine.step(), "2 parameter groups but the scheduler was made for 1",
                    "after the last add_param_group");
  EXPECT_EQ(cosine.last_epoch(), 1) << "a refused step counts nothing";
}

TEST(LinearLR, WarmsUpLinearlyThenStays) {
  SGD sgd(params(), {.lr = 0.3});
  LinearLR scheduler(sgd, 0.25, 1.0, 8);
  expect_schedule(sgd, scheduler,
                  [](int e) { return 0.3 * (0.25 + (1.0 - 0.25) * std::min(e, 8) / 8.0); });
}

TEST(LinearWarmup, IsLinearLRToOne) {
  Adam adam(params(), {.lr = 1e-3});
  LinearWarmup scheduler(adam, 10, 0.1);
  expect_schedule(adam, scheduler,
                  [](int e) { return 1e-3 * (0.1 + 0.9 * std::min(e, 10) / 10.0); });
}

TEST(LinearLR, DecayToAnEndFactor) {
  SGD sgd(params(), {.lr = 1.0});
  LinearLR scheduler(sgd, 1.0, 0.1, 20);
  expect_schedule(sgd, scheduler, [](int e) { return 1.0 + (0.1 - 1.0) * std::min(e, 20) / 20.0; });
}

double one_cycle(int step, double max_lr, int total, double pct_start, double start, double peak,
                 double end) {
  const auto anneal = [](double from, double to, double pct) {
    return to + (from - to) / 2.0 * (std::cos(kPi * pct) + 1);
  };
  const double warm_end = pct_start * total - 1;
  (void)max_lr;
  if (step <= warm_end) return anneal(start, peak, step / warm_end);
  return anneal(peak, end, (step - warm_end) / (total - 1 - warm_end));
}

TEST(OneCycleLR, CosineUpThenDownWithPyTorchDefaults) {
  SGD sgd(params(), {.lr = 0.01, .momentum = 0.9});
  const int total = 40;
  OneCycleLR scheduler(sgd, 0.8, total);
  const double initial = 0.8 / 25, final_lr = 0.8 / 25 / 1e4;
  for (int step = 0; step < total; ++step) {
    if (step > 0) scheduler.step();
    EXPECT_NEAR(sgd.param_groups()[0].lr, one_cycle(step, 0.8, total, 0.3, initial, 0.8, final_lr),
                1e-12)
        << "step " << step;
    // Momentum cycles the other way, between 0.95 and 0.85.
    EXPECT_NEAR(sgd.param_groups()[0].momentum, one_cycle(step, 0, total, 0.3, 0.95, 0.85, 0.95),
                1e-12);
  }
  EXPECT_NEAR(scheduler.get_last_lr()[0], final_lr, 1e-15);  // the last step reaches min_lr
  EXPECT_NEAR(*sgd.param_groups()[0].initial_lr, initial, 1e-15);
  scheduler.step();  // step total_steps is still allowed, as in PyTorch
  EXPECT_THROW(scheduler.step(), Error);
}

TEST(OneCycleLR, CyclesAdamsBeta1) {
  Adam adam(params());
  OneCycleLR scheduler(adam, 0.01, 25);
  EXPECT_NEAR(adam.param_groups()[0].beta1, 0.95, 1e-15);
  for (int i = 0; i < 7; ++i)
    scheduler.step();
  // Just past the peak (0.3 * 25 - 1 = 6.5): beta1 is back on its way up from 0.85.
  EXPECT_NEAR(adam.param_groups()[0].beta1, one_cycle(7, 0, 25, 0.3, 0.95, 0.85, 0.95), 1e-12);
  EXPECT_GT(adam.param_groups()[0].beta1, 0.85);
  EXPECT_NEAR(adam.param_groups()[0].lr, one_cycle(7, 0.01, 25, 0.3, 4e-4, 0.01, 4e-8), 1e-15);
}

TEST(OneCycleLR, ThreePhasesWithLinearAnnealing) {
  // PyTorch's three phases for 10 steps at pct_start 0.3: up to max_lr by step 0.3 * 10 - 1 = 2,
  // back down to initial_lr by 2 * 3 - 2 = 4, then down to min_lr by 9; linear: start + (end -
  // start) * pct. Momentum: 0.95 -> 0.85 -> 0.95, then flat.
  SGD sgd(params(), {.lr = 0.01, .momentum = 0.9});
  OneCycleLR scheduler(sgd, 1.0, 10,
                       {.anneal_strategy = OneCycleOptions::Anneal::linear, .three_phase = true});
  const double initial = 1.0 / 25, min_lr = initial / 1e4;
  const auto line = [](double start, double end, double pct) {
    return start + (end - start) * pct;
  };
  const std::vector<double> lrs = {initial,
                                   line(initial, 1, 0.5),
                                   1,
                                   line(1, initial, 0.5),
                                   initial,
                                   line(initial, min_lr, 0.2),
                                   line(initial, min_lr, 0.4),
                                   line(initial, min_lr, 0.6),
                                   line(initial, min_lr, 0.8),
                                   min_lr};
  const std::vector<double> momenta = {0.95, 0.9, 0.85, 0.9, 0.95, 0.95, 0.95, 0.95, 0.95, 0.95};
  for (int step = 0; step < 10; ++step) {
    if (step > 0) scheduler.step();
    EXPECT_NEAR(sgd.param_groups()[0].lr, lrs[step], 1e-15) << "step " << step;
    EXPECT_NEAR(sgd.param_groups()[0].momentum, momenta[step], 1e-15) << "step " << step;
  }
}

TEST(OneCycleLR, ThreePhasesWithCosineAnnealing) {
  // The same phases, cosine: end + (start - end) / 2 (cos(pi pct) + 1).
  Adam adam(params());
  OneCycleLR scheduler(adam, 0.5, 20, {.pct_start = 0.25, .three_phase = true});
  const double initial = 0.5 / 25, min_lr = initial / 1e4;
  const auto cosine = [](double start, double end, double pct) {
    return end + (start - end) / 2.0 * (std::cos(std::acos(-1.0) * pct) + 1);
  };
  for (int step = 0; step <= 20; ++step) {
    if (step > 0) scheduler.step();
    // Phase ends: 0.25 * 20 - 1 = 4, 2 * 5 - 2 = 8, 19 (step 20 continues the last phase).
    const double expected = step <= 4   ? cosine(initial, 0.5, step / 4.0)
                            : step <= 8 ? cosine(0.5, initial, (step - 4) / 4.0)
                                        : cosine(initial, min_lr, (step - 8) / 11.0);
    EXPECT_NEAR(adam.param_groups()[0].lr, expected, 1e-15) << "step " << step;
  }
  EXPECT_NEAR(adam.param_groups()[0].beta1, 0.95, 1e-15);  // flat in the third phase
}

TEST(Schedulers, StateDictRoundTripContinuesTheSchedule) {
  SGD a(params(), {.lr = 0.1}), b(params(), {.lr = 0.1});
  CosineAnnealingLR sa(a, 12, 0.0), sb_first(b, 12, 0.0);
  for (int i = 0; i < 7; ++i) {
    sa.step();
    sb_first.step();
  }
  const Metadata scheduler_state = sb_first.state_dict();
  const StateDict optimizer_state = b.state_dict();
  SGD c(params(), {.lr = 0.1});
  c.load_state_dict(optimizer_state);
  CosineAnnealingLR sc(c, 12, 0.0);
  sc.load_state_dict(scheduler_state);
  for (int i = 0; i < 10; ++i) {
    sa.step();
    sc.step();
    EXPECT_EQ(a.param_groups()[0].lr, c.param_groups()[0].lr);
  }
  EXPECT_EQ(sc.last_epoch(), 17);
}

TEST(Schedulers, ChainedSchedulersCompose) {
  // Recursive forms chain, as in PyTorch: warm-up and exponential decay multiply.
  SGD sgd(params(), {.lr = 1.0});
  LinearLR warmup(sgd, 0.5, 1.0, 4);
  ExponentialLR decay(sgd, 0.9);
  for (int e = 1; e <= 10; ++e) {
    warmup.step();
    decay.step();
    EXPECT_NEAR(sgd.param_groups()[0].lr, (0.5 + 0.5 * std::min(e, 4) / 4.0) * std::pow(0.9, e),
                1e-12);
  }
}

TEST(ReduceLROnPlateau, ReducesAfterPatienceWithCooldown) {
  SGD sgd(params(), {.lr = 1.0});
  ReduceLROnPlateau plateau(sgd, {.factor = 0.5, .patience = 2, .cooldown = 1});
  const std::vector<double> metrics = {1.0,  0.9,  0.95, 0.95, 0.95, 0.95, 0.95,
                                       0.95, 0.95, 0.5,  0.5,  0.5,  0.5};
  const std::vector<double> lrs = {1.0, 1.0,  1.0,  1.0,  0.5,  0.5,  0.5,
                                   0.5, 0.25, 0.25, 0.25, 0.25, 0.125};
  for (size_t i = 0; i < metrics.size(); ++i) {
    plateau.step(metrics[i]);
    EXPECT_EQ(plateau.get_last_lr()[0], lrs[i]) << "step " << i + 1;
  }
}

TEST(ReduceLROnPlateau, RelativeThresholdMaxModeAndMinLr) {
  SGD sgd(params(), {.lr = 1.0});
  ReduceLROnPlateau plateau(sgd, {.mode = ReduceLROnPlateauOptions::Mode::max,
                                  .factor = 0.1,
                                  .patience = 0,
                                  .threshold = 0.01,
                                  .min_lr = 0.05});
  plateau.step(1.0);   // better than -inf
  plateau.step(1.02);  // > 1.0 * 1.01: better
  EXPECT_EQ(sgd.param_groups()[0].lr, 1.0);
  plateau.step(1.025);  // not > 1.02 * 1.01 = 1.0302: bad, patience 0 -> reduce
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr, 0.1);
  plateau.step(0.0);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr, 0.05);  // clamped to min_lr
  plateau.step(0.0);
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr, 0.05);
  EXPECT_EQ(plateau.best(), 1.02);

  ReduceLROnPlateau restored(sgd, {.mode = ReduceLROnPlateauOptions::Mode::max});
  restored.load_state_dict(plateau.state_dict());
  EXPECT_EQ(restored.best(), 1.02);
}

TEST(ReduceLROnPlateau, IsAnLRSchedulerThatNeedsItsMetric) {
  SGD sgd(params(), {.lr = 1.0});
  StepLR step_lr(sgd, 1, 0.5);
  EXPECT_FALSE(step_lr.steps_on_metric());
  EXPECT_ERROR_WITH(step_lr.step(1.0), "steps without a metric");
  ReduceLROnPlateau plateau(sgd, {.factor = 0.5, .patience = 0});
  LRScheduler& scheduler = plateau;
  EXPECT_TRUE(scheduler.steps_on_metric());
  EXPECT_ERROR_WITH(scheduler.step(), "steps on a metric, call step(value)");
  EXPECT_EQ(scheduler.last_epoch(), 0);
  scheduler.step(2.0);
  scheduler.step(3.0);  // worse: halves the lr
  EXPECT_EQ(scheduler.last_epoch(), 2);
  EXPECT_DOUBLE_EQ(scheduler.get_last_lr()[0], sgd.param_groups()[0].lr);
  // The virtual state_dict is the plateau's, so checkpoints through an LRScheduler keep it.
  EXPECT_EQ(scheduler.state_dict().count("plateau.best"), 1u);
}

TEST(Schedulers, BadArgumentsAreRefused) {
  SGD sgd(params(), {.lr = 0.1});
  EXPECT_THROW(StepLR(sgd, 0), Error);
  EXPECT_THROW(LinearLR(sgd, 0.0), Error);
  EXPECT_THROW(CosineAnnealingLR(sgd, 0), Error);
  EXPECT_THROW(OneCycleLR(sgd, 0.1, 0), Error);
  EXPECT_THROW(ReduceLROnPlateau(sgd, {.factor = 1.0}), Error);
}

// A state dict may hold any int64 (a long run, or a file edited by hand): the counts' end is an
// error that says so, and a T_max past 2^62 keeps PyTorch's schedule (2 T_max overflowed int64).
TEST(Schedulers, CountsAtInt64sEndAreAnErrorNotAnOverflow) {
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  SGD sgd(params(), {.lr = 0.1});
  StepLR step_lr(sgd, 3, 0.5);
  Metadata state = step_lr.state_dict();
  state["scheduler.last_epoch"] = std::to_string(kMax);
  state["scheduler.step_count"] = std::to_string(kMax);
  step_lr.load_state_dict(state);
  EXPECT_ERROR_WITH(step_lr.step(), "last_epoch is already 9223372036854775807");
  EXPECT_EQ(step_lr.last_epoch(), kMax);
  EXPECT_EQ(sgd.param_groups()[0].lr, 0.1);

  state["scheduler.last_epoch"] = std::to_string(kMax - 1);
  step_lr.load_state_dict(state);
  step_lr.step();  // the last one there is; the step count stays at its end
  EXPECT_EQ(step_lr.last_epoch(), kMax);
  EXPECT_EQ(step_lr.state_dict().at("scheduler.step_count"), std::to_string(kMax));

  // The bad-epoch count saturates: at its end it is still more than any patience.
  ReduceLROnPlateau plateau(sgd, {.factor = 0.5, .patience = kMax - 1});
  Metadata plateau_state = plateau.state_dict();
  plateau_state["plateau.best"] = "0";
  plateau_state["plateau.num_bad_epochs"] = std::to_string(kMax);
  plateau_state["plateau.last_epoch"] = std::to_string(kMax - 2);
  plateau.load_state_dict(plateau_state);
  plateau.step(1.0);  // worse than 0: kMax bad epochs > patience, so the lr halves
  EXPECT_EQ(sgd.param_groups()[0].lr, 0.05);
  plateau.step(1.0);
  EXPECT_EQ(plateau.last_epoch(), kMax);
  EXPECT_ERROR_WITH(plateau.step(1.0), "last_epoch is already 9223372036854775807");
}

TEST(CosineAnnealingLR, ATMaxPast2To62KeepsTheSchedule) {
  for (const int64_t t_max :
       {int64_t{1} << 62, (int64_t{1} << 62) + 1, std::numeric_limits<int64_t>::max()}) {
    SGD sgd(params(), {.lr = 1.0});
    CosineAnnealingLR cosine(sgd, t_max, 0.0);
    for (int e = 1; e <= 5; ++e) {
      cosine.step();
      const double want = (1 + std::cos(kPi * e / static_cast<double>(t_max))) / 2;
      EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr, want) << "T_max " << t_max << ", epoch " << e;
    }
  }
  // The rising half period's first epoch, T_max + 1 (and every 2 T_max after): lr goes from
  // eta_min back up by the first step's drop, as in PyTorch's recursion.
  SGD sgd(params(), {.lr = 1.0});
  const int64_t t_max = (int64_t{1} << 62) + 3;
  CosineAnnealingLR cosine(sgd, t_max, 0.0);
  Metadata state = cosine.state_dict();
  state["scheduler.last_epoch"] = std::to_string(t_max);
  cosine.load_state_dict(state);
  sgd.param_groups()[0].lr = 0.0;  // eta_min, where the half period ends
  cosine.step();
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].lr, (1 - std::cos(kPi / static_cast<double>(t_max))) / 2);
}

}  // namespace
}  // namespace ember::optim
