// DASO's schedule without communication: the skips of every epoch, the plateau test, and which
// group sends and merges on which batch (distributed/daso_schedule.h).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "distributed/daso_schedule.h"
#include "tests/common/expect_error.h"

namespace ember::dist {
namespace {

// Runs one epoch of `last_batch + 1` batches and returns their plans.
std::vector<DasoBatchPlan> run_epoch(DasoSchedule& schedule) {
  std::vector<DasoBatchPlan> plans;
  for (int64_t batch = 0; batch <= schedule.last_batch(); ++batch) {
    plans.push_back(schedule.next_batch());
  }
  return plans;
}

// Every send with a wait is merged exactly `wait` batches later by the same group, inside the
// epoch; the last batch is a blocking send and nothing is left pending.
void expect_consistent_epoch(const std::vector<DasoBatchPlan>& plans, int num_groups) {
  ASSERT_FALSE(plans.empty());
  EXPECT_TRUE(plans.back().last_batch);
  EXPECT_TRUE(plans.back().blocking());
  int expected_group = 0;
  for (size_t b = 0; b < plans.size(); ++b) {
    const DasoBatchPlan& plan = plans[b];
    EXPECT_EQ(plan.batch, static_cast<int64_t>(b));
    if (plan.send_group >= 0) {
      EXPECT_EQ(plan.send_group, expected_group) << "batch " << b;
      expected_group = (expected_group + 1) % num_groups;
      if (plan.send_wait > 0) {
        const size_t merge_at = b + static_cast<size_t>(plan.send_wait);
        ASSERT_LT(merge_at, plans.size()) << "send at batch " << b << " merged after the epoch";
        EXPECT_EQ(plans[merge_at].merge_group, plan.send_group) << "send at batch " << b;
        EXPECT_EQ(plans[merge_at].merge_wait, plan.send_wait) << "send at batch " << b;
      }
    }
    if (plan.merge_group >= 0) {
      const size_t sent_at = b - static_cast<size_t>(plan.merge_wait);
      EXPECT_EQ(plans[sent_at].send_group, plan.merge_group) << "merge at batch " << b;
    }
  }
}

// The skips in force from `first_epoch` on, until the next stage's.
struct Stage {
  int first_epoch;
  DasoSkips skips;
};

// Runs `epochs` epochs at a constant loss (it plateaus every third epoch) and checks the skips in
// force in each against the stages.
void expect_stages_at_constant_loss(DasoSchedule& schedule, int epochs,
                                    const std::vector<Stage>& stages) {
  for (int epoch = 0; epoch < epochs; ++epoch) {
    DasoSkips expected;
    for (const Stage& stage : stages) {
      if (epoch >= stage.first_epoch) expected = stage.skips;
    }
    const DasoSkips& got = schedule.skips();
    EXPECT_EQ(got, expected) << "epoch " << epoch << ": got (" << got.global_skip << ", "
                             << got.local_skip << ", " << got.batches_to_wait << ")";
    expect_consistent_epoch(run_epoch(schedule), schedule.num_groups());
    schedule.epoch_loss_logic(1.0);
  }
}

TEST(DasoSchedule, EpochSkipsWithConstantLossFollowHeat) {
  DasoSchedule schedule(
      {.total_epochs = 20, .warmup_epochs = 4, .cooldown_epochs = 4, .max_global_skips = 8},
      /*num_groups=*/4);
  schedule.set_last_batch(11);
  std::vector<DasoSkips> used;
  for (int epoch = 0; epoch < 20; ++epoch) {
    used.push_back(schedule.skips());
    expect_consistent_epoch(run_epoch(schedule), 4);
    schedule.epoch_loss_logic(1.0);
  }
  EXPECT_EQ(schedule.epochs_completed(), 20);
  for (int epoch = 0; epoch < 20; ++epoch) {
    DasoSkips expected;
    if (epoch >= 4 && epoch <= 6) expected = {4, 1, 1};
    if (epoch >= 7 && epoch <= 9) expected = {2, 1, 1};
    if (epoch >= 10 && epoch <= 12) expected = {1, 1, 1};
    if (epoch >= 13 && epoch <= 15) expected = {8, 2, 2};
    const DasoSkips& got = used[static_cast<size_t>(epoch)];
    EXPECT_EQ(got, expected) << "epoch " << epoch << ": got (" << got.global_skip << ", "
                             << got.local_skip << ", " << got.batches_to_wait << ")";
  }
}

// Cycling from the first epoch (no warm-up or cool-down), max_global_skips 8, two groups, eight
// batches an epoch.
DasoSchedule cycling_schedule(int total_epochs, int skip_reduction_factor) {
  DasoSchedule schedule({.total_epochs = total_epochs,
                         .warmup_epochs = 0,
                         .cooldown_epochs = 0,
                         .max_global_skips = 8,
                         .skip_reduction_factor = skip_reduction_factor},
                        /*num_groups=*/2);
  schedule.set_last_batch(7);
  return schedule;
}

// A plateau divides the global and local skips by skip_reduction_factor (here 4, not the default
// 2) and shortens the wait by one batch; at a global skip of 1 it starts again at (max,
// max / local_skip_factor, max / local_skip_factor): (8, 2, 2). No warm-up or cool-down: a
// constant loss plateaus after epochs 3, 6 and 9.
TEST(DasoSchedule, PlateauDividesTheSkipsByTheReductionFactorAndShortensTheWait) {
  DasoSchedule schedule = cycling_schedule(13, 4);
  expect_stages_at_constant_loss(schedule, 13,
                                 {{0, {4, 1, 1}},     // the cycling start
                                  {4, {1, 1, 1}},     // 4 / 4, at least 1 to wait
                                  {7, {8, 2, 2}},     // from 1: back to the longest
                                  {10, {2, 1, 1}}});  // 8 / 4, 2 / 4 (at least 1), 2 - 1
}

// A factor that does not divide the skips evenly (3 from 2) stops at a global skip of 1, so the
// next plateau restarts the cycle; Heat divides down to 0 and stays on blocking averages.
TEST(DasoSchedule, AnUnevenReductionFactorStopsAtOneAndTheCycleGoesOn) {
  DasoSchedule schedule = cycling_schedule(19, 3);
  expect_stages_at_constant_loss(schedule, 19,
                                 {{0, {4, 1, 1}},     // the cycling start
                                  {4, {1, 1, 1}},     // 4 / 3
                                  {7, {8, 2, 2}},     // from 1: back to the longest
                                  {10, {2, 1, 1}},    // 8 / 3, 2 / 3 (at least 1), 2 - 1
                                  {13, {1, 1, 1}},    // 2 / 3: 0 in Heat, 1 here
                                  {16, {8, 2, 2}}});  // and the cycle goes on
}

// A run shorter than its cool-down is all cool-down: blocking averages from epoch 0.
TEST(DasoSchedule, ARunThatIsAllCooldownAveragesFromTheFirstEpoch) {
  DasoSchedule schedule({.total_epochs = 2, .warmup_epochs = 0, .cooldown_epochs = 2}, 2);
  EXPECT_EQ(schedule.skips(), DasoSkips{});
  schedule.set_last_batch(3);
  for (const DasoBatchPlan& plan : run_epoch(schedule))
    EXPECT_TRUE(plan.blocking()) << "batch " << plan.batch;
}

TEST(DasoSchedule, ImprovingLossKeepsTheLongSkips) {
  DasoSchedule schedule({.total_epochs = 12, .warmup_epochs = 2, .cooldown_epochs = 2}, 2);
  double loss = 1.0;
  for (int epoch = 0; epoch < 10; ++epoch) {
    schedule.epoch_loss_logic(loss);
    loss *= 0.5;  // always more than 5 % better
    if (epoch >= 1 && epoch < 9) {
      EXPECT_EQ(schedule.skips(), (DasoSkips{4, 1, 1})) << "after epoch " << epoch;
    }
  }
  EXPECT_EQ(schedule.skips(), DasoSkips{}) << "cool-down";
}

TEST(DasoSchedule, PlateauIsThreeEpochsWithoutEnoughImprovementThenCountsAgain) {
  PlateauDetector plateau(/*threshold=*/0.05, /*patience=*/2);
  EXPECT_FALSE(plateau.record(1.0));  // the first loss is always an improvement on +inf
  EXPECT_DOUBLE_EQ(plateau.best(), 1.0);
  EXPECT_FALSE(plateau.record(0.96));  // lower, but not below 1.0 * 0.95
  EXPECT_FALSE(plateau.record(0.951));
  EXPECT_EQ(plateau.epochs_without_improvement(), 2);
  EXPECT_TRUE(plateau.record(0.99));
  EXPECT_EQ(plateau.epochs_without_improvement(), 0) << "the count restarts";
  EXPECT_DOUBLE_EQ(plateau.best(), 1.0) << "the best is kept";
  EXPECT_FALSE(plateau.record(1.2));
  EXPECT_FALSE(plateau.record(0.94));  // below 0.95: improves, the count restarts
  EXPECT_DOUBLE_EQ(plateau.best(), 0.94);
  EXPECT_EQ(plateau.epochs_without_improvement(), 0);
  EXPECT_FALSE(plateau.record(0.94));
  EXPECT_FALSE(plateau.record(0.94));
  EXPECT_TRUE(plateau.record(0.94));
  plateau.reset();
  EXPECT_FALSE(plateau.record(5.0));
  EXPECT_DOUBLE_EQ(plateau.best(), 5.0);
}

TEST(DasoSchedule, PlateauWithNegativeLossNeedsToGoLowerByTheFraction) {
  PlateauDetector plateau(0.1, 0);
  EXPECT_FALSE(plateau.record(-1.0));
  EXPECT_TRUE(plateau.record(-1.05));  // not below -1.0 * 1.1
  EXPECT_FALSE(plateau.record(-1.2));
  EXPECT_DOUBLE_EQ(plateau.best(), -1.2);
}

TEST(DasoSchedule, BatchesWithGlobalSkipFourWaitOneFourGroups) {
  // No warm-up: epoch 0 already cycles at (4, 1, 1).
  DasoSchedule schedule({.total_epochs = 10, .warmup_epochs = 0}, /*num_groups=*/4);
  ASSERT_EQ(schedule.skips(), (DasoSkips{4, 1, 1}));
  schedule.set_last_batch(11);
  const std::vector<DasoBatchPlan> plans = run_epoch(schedule);
  ASSERT_EQ(plans.size(), 12u);
  for (const DasoBatchPlan& plan : plans) {
    const int64_t b = plan.batch;
    SCOPED_TRACE("batch " + std::to_string(b));
    const int sender = b == 0 ? 0 : b == 4 ? 1 : b == 8 ? 2 : b == 11 ? 3 : -1;
    const int merged = b == 1 ? 0 : b == 5 ? 1 : b == 9 ? 2 : -1;
    EXPECT_EQ(plan.send_group, sender);
    EXPECT_EQ(plan.merge_group, merged);
    EXPECT_EQ(plan.last_batch, b == 11);
    if (sender >= 0) {
      EXPECT_EQ(plan.send_wait, b == 11 ? 0 : 1);
    }
    if (merged >= 0) {
      EXPECT_EQ(plan.merge_wait, 1);
    }
    EXPECT_EQ(plan.blocking(), b == 11);
  }
  // The next epoch starts again with group 0.
  EXPECT_EQ(schedule.current_batch(), 0);
  EXPECT_EQ(schedule.next_batch().send_group, 0);
}

TEST(DasoSchedule, WarmupAveragesEveryBatchBlockingWithGroupsInTurn) {
  DasoSchedule schedule({.total_epochs = 10}, /*num_groups=*/3);
  schedule.set_last_batch(4);
  for (int epoch = 0; epoch < 2; ++epoch) {
    const std::vector<DasoBatchPlan> plans = run_epoch(schedule);
    for (const DasoBatchPlan& plan : plans) {
      EXPECT_TRUE(plan.blocking());
      EXPECT_EQ(plan.send_group, static_cast<int>(plan.batch % 3));
      EXPECT_EQ(plan.merge_group, -1);
    }
    schedule.epoch_loss_logic(1.0);
  }
}

TEST(DasoSchedule, LongWaitIsMergedOnItsOwnBatchNearTheEpochEnd) {
  // (8, 2, 2) with batches 0..11: group 0 sends at 0 and merges at 2; group 1 sends at 8 and
  // merges at 10 (Heat would slip this merge to batch 11); group 2 averages blocking at 11.
  DasoSchedule schedule({.total_epochs = 30, .warmup_epochs = 0, .cooldown_epochs = 0}, 4);
  schedule.set_last_batch(11);
  while (schedule.skips() != DasoSkips{8, 2, 2}) {
    run_epoch(schedule);
    schedule.epoch_loss_logic(1.0);
    ASSERT_LT(schedule.epochs_completed(), 30);
  }
  const std::vector<DasoBatchPlan> plans = run_epoch(schedule);
  expect_consistent_epoch(plans, 4);
  EXPECT_EQ(plans[0].send_group, 0);
  EXPECT_EQ(plans[0].send_wait, 2);
  EXPECT_EQ(plans[2].merge_group, 0);
  EXPECT_EQ(plans[8].send_group, 1);
  EXPECT_EQ(plans[10].merge_group, 1);
  EXPECT_EQ(plans[10].merge_wait, 2);
  EXPECT_EQ(plans[11].send_group, 2);
  EXPECT_TRUE(plans[11].blocking());
  EXPECT_EQ(plans[11].merge_group, -1);
}

// Which batches average their gradients in the node ('T') under Heat's local skipping. The
// expected strings are what Heat's step() gives (its require_backward_grad_sync switches, run by
// hand for these skips): only a local skip above 1 skips, never the batches around a send, a
// merge's wait or the epoch's last.
TEST(DasoSchedule, LocalSkipAveragesInTheNodeOnTheBatchesHeatDoes) {
  struct Case {
    DasoSkips skips;
    int64_t last_batch;
    std::string expected;
  };
  const std::vector<Case> cases = {{{8, 2, 2}, 15, "TTTFTFTFTTTFTFTT"},
                                   {{8, 4, 2}, 15, "TTTFTFFFTTTFTFFT"},
                                   {{8, 2, 2}, 5, "TTTFTT"},
                                   {{4, 1, 1}, 11, "TTTTTTTTTTTT"},
                                   {{0, 0, 0}, 5, "TTTTTT"}};
  for (const Case& c : cases) {
    DasoSchedule schedule({.total_epochs = 30, .warmup_epochs = 0, .cooldown_epochs = 0}, 2);
    schedule.set_last_batch(c.last_batch);
    schedule.load_state({.skips = c.skips});
    for (int epoch = 0; epoch < 2; ++epoch) {  // the second epoch starts over
      std::string got;
      for (int64_t batch = 0; batch <= c.last_batch; ++batch) {
        got += schedule.averages_in_node() ? 'T' : 'F';
        schedule.next_batch();
      }
      EXPECT_EQ(got, c.expected) << "skips (" << c.skips.global_skip << ", " << c.skips.local_skip
                                 << ", " << c.skips.batches_to_wait << "), epoch " << epoch;
    }
  }
}

TEST(DasoSchedule, GlobalSkipOneSendsEveryBatchAndMergesTheNext) {
  DasoSchedule schedule({.total_epochs = 30, .warmup_epochs = 0, .cooldown_epochs = 0}, 2);
  schedule.set_last_batch(5);
  while (schedule.skips() != DasoSkips{1, 1, 1}) {
    run_epoch(schedule);
    schedule.epoch_loss_logic(1.0);
    ASSERT_LT(schedule.epochs_completed(), 30);
  }
  const std::vector<DasoBatchPlan> plans = run_epoch(schedule);
  expect_consistent_epoch(plans, 2);
  for (const DasoBatchPlan& plan : plans) {
    EXPECT_EQ(plan.send_group, static_cast<int>(plan.batch % 2));
    EXPECT_EQ(plan.merge_group, plan.batch == 0 ? -1 : static_cast<int>((plan.batch - 1) % 2));
  }
}

TEST(DasoSchedule, EveryConfigurationMergesEverySendInsideTheEpoch) {
  for (int max_skips : {0, 1, 2, 3, 8, 16}) {
    for (int local_skip_factor : {1, 2, 4}) {
      for (int64_t last_batch : {0, 1, 2, 7, 10, 23}) {
        for (int groups : {1, 3}) {
          SCOPED_TRACE(testing::Message() << "max " << max_skips << " factor " << local_skip_factor
                                          << " last " << last_batch << " groups " << groups);
          DasoSchedule schedule({.total_epochs = 40,
                                 .warmup_epochs = 1,
                                 .cooldown_epochs = 1,
                                 .max_global_skips = max_skips,
                                 .local_skip_factor = local_skip_factor},
                                groups);
          schedule.set_last_batch(last_batch);
          for (int epoch = 0; epoch < 40; ++epoch) {
            EXPECT_LE(schedule.skips().global_skip, max_skips);
            EXPECT_GE(schedule.skips().batches_to_wait, 0);
            expect_consistent_epoch(run_epoch(schedule), groups);
            schedule.epoch_loss_logic(1.0);
          }
        }
      }
    }
  }
}

TEST(DasoSchedule, SmallMaximumCapsTheCyclingStart) {
  DasoSchedule capped({.total_epochs = 10, .warmup_epochs = 0, .max_global_skips = 2}, 1);
  EXPECT_EQ(capped.skips(), (DasoSkips{2, 1, 1}));
  DasoSchedule blocking({.total_epochs = 10, .warmup_epochs = 0, .max_global_skips = 0}, 1);
  EXPECT_EQ(blocking.skips(), DasoSkips{});
}

TEST(DasoSchedule, ResetReturnsToTheStart) {
  DasoSchedule schedule({.total_epochs = 20, .warmup_epochs = 1}, 2);
  schedule.set_last_batch(3);
  for (int epoch = 0; epoch < 5; ++epoch) {
    run_epoch(schedule);
    schedule.epoch_loss_logic(1.0);
  }
  schedule.next_batch();
  ASSERT_NE(schedule.skips(), DasoSkips{});
  schedule.reset();
  EXPECT_EQ(schedule.skips(), DasoSkips{});
  EXPECT_EQ(schedule.epochs_completed(), 0);
  EXPECT_EQ(schedule.current_batch(), 0);
  EXPECT_EQ(schedule.next_batch().send_group, 0);
}

TEST(DasoSchedule, SavedStateContinuesTheSameSchedule) {
  const DasoScheduleOptions options{.total_epochs = 12, .warmup_epochs = 1, .cooldown_epochs = 1};
  const std::vector<double> losses = {5, 4, 4, 4, 4, 3.9, 3.9, 3.9, 3.9, 3.9, 3.8, 3.8};
  DasoSchedule straight(options, 2);
  straight.set_last_batch(9);
  DasoScheduleState saved;
  for (int epoch = 0; epoch < 12; ++epoch) {
    if (epoch == 6) saved = straight.state();
    run_epoch(straight);
    straight.epoch_loss_logic(losses[epoch]);
  }
  DasoSchedule resumed(options, 2);
  resumed.set_last_batch(9);
  resumed.load_state(saved);
  EXPECT_EQ(resumed.state(), saved);
  EXPECT_EQ(resumed.epochs_completed(), 6);
  for (int epoch = 6; epoch < 12; ++epoch) {
    run_epoch(resumed);
    resumed.epoch_loss_logic(losses[epoch]);
  }
  EXPECT_EQ(resumed.state(), straight.state());
  EXPECT_NE(saved.skips, DasoSkips{}) << "the test should save a state past the warm-up";
}

TEST(DasoSchedule, StateOnlyBetweenEpochsAndOnlyOneTheOptionsAllow) {
  DasoSchedule schedule({.total_epochs = 10, .max_global_skips = 4}, 2);
  schedule.set_last_batch(3);
  schedule.next_batch();
  EXPECT_ERROR_WITH(schedule.state(), "saved between epochs");
  EXPECT_ERROR_WITH(schedule.load_state({}), "between epochs only");
  DasoSchedule fresh({.total_epochs = 10, .max_global_skips = 4}, 2);
  EXPECT_ERROR_WITH(fresh.load_state({.skips = {.global_skip = 8}}), "max global skips 4");
  EXPECT_ERROR_WITH(fresh.load_state({.skips = {}, .epochs_completed = -1}), "cannot produce");
}

TEST(DasoSchedule, MisuseGivesClearErrors) {
  EXPECT_ERROR_WITH(DasoSchedule({.total_epochs = 0}, 1), "total_epochs", "> 0");
  EXPECT_ERROR_WITH(DasoSchedule({.total_epochs = 5, .warmup_epochs = -1}, 1), "warmup_epochs");
  EXPECT_ERROR_WITH(DasoSchedule({.total_epochs = 5, .stability_level = 1.5}, 1),
                    "stability_level");
  EXPECT_ERROR_WITH(DasoSchedule({.total_epochs = 5, .skip_reduction_factor = 0}, 1),
                    "skip_reduction_factor");
  EXPECT_ERROR_WITH(DasoSchedule({.total_epochs = 5}, 0), "ranks per node");

  DasoSchedule schedule({.total_epochs = 5}, 2);
  EXPECT_ERROR_WITH(schedule.next_batch(), "last_batch");
  EXPECT_ERROR_WITH(schedule.set_last_batch(-1), "last_batch", ">= 0");
  schedule.set_last_batch(9);
  schedule.next_batch();
  EXPECT_ERROR_WITH(schedule.epoch_loss_logic(1.0), "epoch_loss_logic", "after batch 0",
                    "batches per epoch - 1");
}

}  // namespace
}  // namespace ember::dist
