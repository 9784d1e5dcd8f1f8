#include "distributed/daso_schedule.h"

#include <algorithm>
#include <limits>

#include "runtime/error.h"

namespace ember::dist {

// ---- PlateauDetector ----------------------------------------------------------------------------

PlateauDetector::PlateauDetector(double threshold, int patience)
    : threshold_(threshold), patience_(patience), best_(std::numeric_limits<double>::infinity()) {
  EMBER_CHECK(threshold >= 0.0 && threshold < 1.0,
              "PlateauDetector: the relative threshold must be in [0, 1), got ", threshold);
  EMBER_CHECK(patience >= 0, "PlateauDetector: patience must be >= 0, got ", patience);
}

bool PlateauDetector::record(double loss) {
  // Relative threshold in "min" mode; a negative best is scaled the other way so that "better"
  // still means "lower by the fraction threshold" (Heat, after ReduceLROnPlateau).
  const double bar = best_ >= 0.0 ? best_ * (1.0 - threshold_) : best_ * (1.0 + threshold_);
  if (loss < bar) {
    best_ = loss;
    epochs_without_improvement_ = 0;
  } else {
    ++epochs_without_improvement_;
  }
  if (epochs_without_improvement_ > patience_) {
    epochs_without_improvement_ = 0;
    return true;
  }
  return false;
}

void PlateauDetector::reset() {
  best_ = std::numeric_limits<double>::infinity();
  epochs_without_improvement_ = 0;
}

void PlateauDetector::restore(double best, int epochs_without_improvement) {
  EMBER_CHECK(epochs_without_improvement >= 0,
              "PlateauDetector: epochs without improvement must be >= 0, got ",
              epochs_without_improvement);
  best_ = best;
  epochs_without_improvement_ = epochs_without_improvement;
}

// ---- DasoSchedule -------------------------------------------------------------------------------

namespace {

// The skips of the first cycling epoch. Heat hard-codes (4, 1, 1); with max_global_skips below 4
// that would start above the maximum, so ember caps the global skip at max_global_skips (and
// max_global_skips 0 means blocking averages throughout).
DasoSkips cycling_start(int max_global_skips) {
  const int global_skip = std::min(4, max_global_skips);
  if (global_skip == 0) return {};
  return {global_skip, 1, 1};
}

// Checked before the members are built, so that the plateau detector never reports a bad
// stability_level under its own name.
const DasoScheduleOptions& checked(const DasoScheduleOptions& options, int num_groups) {
  EMBER_CHECK(options.total_epochs > 0, "DASO: total_epochs must be > 0, got ",
              options.total_epochs);
  EMBER_CHECK(options.warmup_epochs >= 0, "DASO: warmup_epochs must be >= 0, got ",
              options.warmup_epochs);
  EMBER_CHECK(options.cooldown_epochs >= 0, "DASO: cooldown_epochs must be >= 0, got ",
              options.cooldown_epochs);
  EMBER_CHECK(options.stability_level >= 0.0 && options.stability_level < 1.0,
              "DASO: stability_level must be in [0, 1) (a relative loss change), got ",
              options.stability_level);
  EMBER_CHECK(options.max_global_skips >= 0, "DASO: max_global_skips must be >= 0, got ",
              options.max_global_skips);
  EMBER_CHECK(options.skip_reduction_factor > 0, "DASO: skip_reduction_factor must be > 0, got ",
              options.skip_reduction_factor);
  EMBER_CHECK(options.local_skip_factor > 0, "DASO: local_skip_factor must be > 0, got ",
              options.local_skip_factor);
  EMBER_CHECK(num_groups >= 1,
              "DASO: the number of global groups (ranks per node) must be >= 1, got ", num_groups);
  return options;
}

}  // namespace

DasoSchedule::DasoSchedule(const DasoScheduleOptions& options, int num_groups)
    : options_(checked(options, num_groups)),
      num_groups_(num_groups),
      plateau_(options.stability_level, 2) {
  skips_ = skips_for_epoch_start();
}

// The skips for epoch epochs_completed_ when no loss decides them: blocking in the warm-up and the
// cool-down, the cycling start in between. Heat starts every run at (0, 0, 0) and switches to the
// cycling start only in the call where epoch == warmup_epochs, which never comes when warmup_epochs
// is 0: its DASO then never leaves blocking averages. ember starts epoch 0 in the phase it is in.
DasoSkips DasoSchedule::skips_for_epoch_start() const {
  const int64_t epoch = epochs_completed_;
  if (epoch < options_.warmup_epochs) return {};
  if (epoch >= options_.total_epochs - options_.cooldown_epochs) return {};
  return cycling_start(options_.max_global_skips);
}

void DasoSchedule::set_last_batch(int64_t last_batch) {
  EMBER_CHECK(last_batch >= 0, "DASO: last_batch is the index of an epoch's last batch ",
              "(batches per epoch - 1) and must be >= 0, got ", last_batch);
  EMBER_CHECK(last_batch >= current_batch_, "DASO: last_batch ", last_batch,
              " is before the current batch ", current_batch_, " of this epoch");
  last_batch_ = last_batch;
}

DasoBatchPlan DasoSchedule::next_batch() {
  EMBER_CHECK(last_batch_ >= 0,
              "DASO: set last_batch (batches per epoch - 1) before the first step: the last batch "
              "of every epoch ends with a blocking average");
  DasoBatchPlan plan;
  const int64_t batch = current_batch_;
  plan.batch = batch;
  plan.last_batch = batch == last_batch_;
  const int global_skip = skips_.global_skip;

  const bool send = plan.last_batch || global_skip == 0 || batch % global_skip == 0;
  if (send) {
    // The wait is clamped so that the merge comes by the epoch's last batch (as Heat does) and by
    // the next send. Heat lets batches_to_wait exceed global_skip (local_skip_factor 1 gives
    // (max, max, max), halved to (max/2, .., max-1)); its next send then merges the pending one
    // early but still weights it by the longer wait. Capping the wait at global_skip keeps one
    // send in flight and the weight true. A global skip of 0 is a blocking average every batch,
    // whatever batches_to_wait says (Heat would queue non-blocking sends there).
    int wait = 0;
    if (global_skip > 0) {
      wait = static_cast<int>(
          std::min<int64_t>({skips_.batches_to_wait, global_skip, last_batch_ - batch}));
    }
    plan.send_group = next_send_group_;
    plan.send_wait = wait;
    next_send_group_ = (next_send_group_ + 1) % num_groups_;
  }

  // A pending send is merged exactly `wait` batches after it started. Heat decides this from the
  // current batch's clamped wait (gmod == btw), so near the end of an epoch (global skip 8, wait 2,
  // send at batch 8 of 0..11) it slips the merge to the last batch while still weighting it by 2;
  // ember merges on the batch the weight was computed for.
  if (pending_group_ >= 0 && batch == pending_merge_batch_) {
    plan.merge_group = pending_group_;
    plan.merge_wait = pending_wait_;
    pending_group_ = -1;
  }
  if (send && plan.send_wait > 0) {
    pending_group_ = plan.send_group;
    pending_wait_ = plan.send_wait;
    pending_merge_batch_ = batch + plan.send_wait;
  }

  if (!send) {
    averages_in_node_ =
        next_averages_in_node(batch, plan.merge_group >= 0, /*waiting=*/pending_group_ >= 0);
  }
  if (plan.last_batch) {
    current_batch_ = 0;
    next_send_group_ = 0;
    averages_in_node_ = true;
  } else {
    ++current_batch_;
  }
  return plan;
}

// Heat's step() decides after each batch whether the next one synchronises the node (torch DDP's
// require_backward_grad_sync); a batch that sends leaves the choice as it was. The rules, in its
// order: a batch before a send averages; between a send and its merge the choice is kept; a merge
// switches it off; then every local_skip-th batch switches it off and the one before the next
// multiple on; the epoch's last batch always averages. A local_skip of 0 or 1 averages every
// batch. (Heat's 0 beside a non-zero global skip, from local_skip_factor > max_global_skips, would
// switch averaging off on most batches; a skip of 0 means no skipping everywhere else.)
bool DasoSchedule::next_averages_in_node(int64_t batch, bool merged, bool waiting) const {
  const int64_t next = batch + 1;
  const int global_skip = skips_.global_skip;
  const int local_skip = skips_.local_skip;
  if (next == last_batch_ || (global_skip > 0 && next % global_skip == 0) || local_skip <= 1)
    return true;
  if (waiting) return averages_in_node_;
  bool average = merged ? false : averages_in_node_;
  if (batch % local_skip == 0) {
    average = false;
  } else if (next % local_skip == 0) {
    average = true;
  }
  return average;
}

void DasoSchedule::epoch_loss_logic(double averaged_loss) {
  // Heat counts epochs in step() on the last batch and here reads that count; a last_batch set to
  // the number of batches (as its documentation says) is never reached, so its epochs never
  // advance. ember counts the calls here, and refuses a call in the middle of an epoch.
  EMBER_CHECK(current_batch_ == 0, "DASO: epoch_loss_logic called after batch ", current_batch_ - 1,
              " of an epoch whose last batch is ", last_batch_,
              ": call it once per epoch, after the step of batch last_batch (set last_batch to the "
              "number of batches per epoch - 1)");
  ++epochs_completed_;
  const int64_t epoch = epochs_completed_;  // the epoch whose skips are decided now

  if (epoch < options_.warmup_epochs) {
    skips_ = {};
    return;
  }
  if (epoch == options_.warmup_epochs) skips_ = cycling_start(options_.max_global_skips);
  if (epoch >= options_.total_epochs - options_.cooldown_epochs) {
    skips_ = {};
    return;
  }

  if (!plateau_.record(averaged_loss)) return;
  // The loss has plateaued: synchronise more often, down to every batch; from there, start the
  // cycle again at the longest skips.
  if (skips_.global_skip > 1) {
    // At least 1: Heat divides down to 0 when the factor does not divide the skip (factor 3 from
    // 2, or 8 from 4), and a global skip of 0 is blocking averages with no plateau branch to
    // leave them, so its run stays there until the cool-down. Stopping at 1 lets the next plateau
    // restart the cycle, as with a factor that divides evenly.
    skips_.global_skip = std::max(skips_.global_skip / options_.skip_reduction_factor, 1);
    skips_.local_skip = std::max(skips_.local_skip / options_.skip_reduction_factor, 1);
    skips_.batches_to_wait = std::max(skips_.batches_to_wait - 1, 1);
  } else if (skips_.global_skip == 1) {
    const int longest = options_.max_global_skips;
    skips_ = {longest, longest / options_.local_skip_factor, longest / options_.local_skip_factor};
  }
  // Heat also counts epochs spent at max_global_skips (_gs8_waited) but never reads the count;
  // ember leaves it out.
}

void DasoSchedule::reset() {
  plateau_.reset();
  current_batch_ = 0;
  epochs_completed_ = 0;
  next_send_group_ = 0;
  pending_group_ = -1;
  averages_in_node_ = true;
  skips_ = skips_for_epoch_start();
}

DasoScheduleState DasoSchedule::state() const {
  EMBER_CHECK(current_batch_ == 0 && pending_group_ < 0,
              "DASO: the schedule's state is saved "
              "between epochs, and batch ",
              current_batch_, " of this epoch is next");
  return {.skips = skips_,
          .epochs_completed = epochs_completed_,
          .plateau_best = plateau_.best(),
          .plateau_epochs_without_improvement = plateau_.epochs_without_improvement()};
}

void DasoSchedule::load_state(const DasoScheduleState& state) {
  EMBER_CHECK(current_batch_ == 0 && pending_group_ < 0,
              "DASO: load_state between epochs only "
              "(batch ",
              current_batch_, " of this epoch is next)");
  const DasoSkips& s = state.skips;
  EMBER_CHECK(state.epochs_completed >= 0 && s.global_skip >= 0 &&
                  s.global_skip <= options_.max_global_skips && s.local_skip >= 0 &&
                  s.batches_to_wait >= 0 && s.batches_to_wait <= options_.max_global_skips,
              "DASO: a saved schedule state that these options cannot produce (epoch ",
              state.epochs_completed, ", global skip ", s.global_skip, ", local skip ",
              s.local_skip, ", batches to wait ", s.batches_to_wait, "; max global skips ",
              options_.max_global_skips, ")");
  skips_ = s;
  epochs_completed_ = state.epochs_completed;
  plateau_.restore(state.plateau_best, state.plateau_epochs_without_improvement);
  next_send_group_ = 0;
}

}  // namespace ember::dist
