// DASO's schedule as a pure state machine: which global group sends its parameters on which batch,
// when an earlier send is merged, and how the skips change from epoch to epoch. No communication
// happens here, so every decision can be tested on its own; dist::Daso (distributed/daso.h) asks
// this schedule what to do on each batch and does it.
//
// Reimplemented from Heat's heat.optim.DASO (epoch_loss_logic, step, _global_sync) and its
// DetectMetricPlateau. The places where ember departs from Heat are listed in daso_schedule.cpp,
// each at the line that departs.
//
//   DasoSchedule schedule({.total_epochs = 20}, /*num_groups=*/topology.local_size);
//   schedule.set_last_batch(batches_per_epoch - 1);
//   for (epoch ...) {
//     for (batch ...) { DasoBatchPlan plan = schedule.next_batch(); /* send, merge, ... */ }
//     schedule.epoch_loss_logic(loss_averaged_over_all_ranks);
//   }
#pragma once

#include <cstdint>

namespace ember::dist {

// Heat's DetectMetricPlateau as DASO uses it: mode "min", relative threshold, no cooldown. A loss
// improves when it is below best * (1 - threshold) (best * (1 + threshold) for a negative best).
class PlateauDetector {
 public:
  explicit PlateauDetector(double threshold, int patience = 2);

  // Records one epoch's loss. True when more than `patience` epochs in a row brought no
  // improvement; the count then starts again from zero (the best loss is kept).
  bool record(double loss);
  // Forgets the best loss and the count.
  void reset();
  // Continues from a saved best loss and count (a checkpoint's); throws on a negative count.
  void restore(double best, int epochs_without_improvement);

  double best() const { return best_; }  // +inf before the first loss
  int epochs_without_improvement() const { return epochs_without_improvement_; }
  double threshold() const { return threshold_; }

 private:
  double threshold_;
  int patience_;
  double best_;
  int epochs_without_improvement_ = 0;
};

// The skips in force for an epoch. global_skip: batches between the starts of two global
// synchronisations (0: a blocking average every batch). batches_to_wait: batches between a send
// and the merge of its average. local_skip: Heat's batches between node-local gradient averages
// (averages_in_node() below says which batches average; 0 and 1 mean every batch).
struct DasoSkips {
  int global_skip = 0;
  int local_skip = 0;
  int batches_to_wait = 0;
  bool operator==(const DasoSkips&) const = default;
};

struct DasoScheduleOptions {
  int total_epochs = 0;
  int warmup_epochs = 4;          // epochs of blocking averages at the start
  int cooldown_epochs = 4;        // and at the end
  double stability_level = 0.05;  // relative loss improvement that still counts as improving
  int max_global_skips = 8;
  int skip_reduction_factor = 2;  // skips are divided by this when the loss plateaus
  int local_skip_factor = 4;  // on a reset to max_global_skips: local skips and waits = max / this
};

// What happens on one batch, after the local optimizer's step. Groups are numbered by local rank:
// group g is the ranks with local rank g on every node (dist::cross_node_group()). In order:
//   1. send_group >= 0: that group casts its parameters down and starts averaging them;
//   2. merge_group >= 0: that group waits for the average it started merge_wait batches ago,
//      merges it into its parameters, and every node broadcasts them from that local rank;
//   3. send_wait == 0 (blocking()): the group of step 1 waits for its average at once, replaces
//      its parameters by it, and every node broadcasts them from that local rank.
struct DasoBatchPlan {
  int64_t batch = 0;  // index in the epoch, 0 .. last_batch
  bool last_batch = false;
  int send_group = -1;
  int send_wait = 0;  // batches until the merge (B in the merge weight 2B); 0: blocking
  int merge_group = -1;
  int merge_wait = 0;  // the B of that send
  bool blocking() const { return send_group >= 0 && send_wait == 0; }
};

// What a checkpoint keeps of the schedule between two epochs (nothing is pending then): enough for
// a resumed run to continue with the skips, epoch count and plateau it had, not a new warm-up.
struct DasoScheduleState {
  DasoSkips skips;
  int64_t epochs_completed = 0;
  double plateau_best = 0;
  int plateau_epochs_without_improvement = 0;
  bool operator==(const DasoScheduleState&) const = default;
};

class DasoSchedule {
 public:
  // num_groups: ranks per node (the number of global groups), >= 1. Throws on options out of range.
  DasoSchedule(const DasoScheduleOptions& options, int num_groups);

  // The index of the last batch of an epoch (batches per epoch - 1). Must be set before the first
  // next_batch(); the last batch always ends with a blocking average.
  void set_last_batch(int64_t last_batch);
  int64_t last_batch() const { return last_batch_; }

  // The plan for the current batch; advances to the next one (to batch 0 after the last).
  DasoBatchPlan next_batch();
  // Whether the current batch's gradients are averaged in the node. Heat's local skipping: with
  // local_skip L > 1 (the cycling phase's long skips), only every L-th batch averages, plus the
  // batches around a global send and the epoch's last; otherwise every batch does.
  bool averages_in_node() const { return averages_in_node_; }

  // Ends an epoch: `averaged_loss` is the epoch's loss averaged over all ranks (every rank must
  // pass the same value, or the ranks' schedules diverge). Sets the skips of the next epoch.
  // Throws when called in the middle of an epoch.
  void epoch_loss_logic(double averaged_loss);

  // Back to the state after construction.
  void reset();

  // The state between two epochs, and back. Both throw in the middle of an epoch; load_state
  // also throws on a state these options could not have produced (e.g. skips above the maximum).
  DasoScheduleState state() const;
  void load_state(const DasoScheduleState& state);

  const DasoSkips& skips() const { return skips_; }
  int64_t epochs_completed() const { return epochs_completed_; }
  int64_t current_batch() const { return current_batch_; }
  int num_groups() const { return num_groups_; }
  const PlateauDetector& plateau() const { return plateau_; }
  const DasoScheduleOptions& options() const { return options_; }

 private:
  DasoSkips skips_for_epoch_start() const;
  // After a batch that did not send: whether the next one averages in the node.
  bool next_averages_in_node(int64_t batch, bool merged, bool waiting) const;

  DasoScheduleOptions options_;
  int num_groups_;
  PlateauDetector plateau_;
  DasoSkips skips_;
  int64_t last_batch_ = -1;
  int64_t current_batch_ = 0;
  int64_t epochs_completed_ = 0;
  int next_send_group_ = 0;
  bool averages_in_node_ = true;
  // The send not merged yet (at most one: it is always due before the next send).
  int pending_group_ = -1;
  int pending_wait_ = 0;
  int64_t pending_merge_batch_ = 0;
};

}  // namespace ember::dist
