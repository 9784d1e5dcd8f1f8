// Callbacks: code the runner calls at each event of a run, in `order` (then insertion order).
//
//   on_experiment_start
//     on_stage_start                      (per stage: components, loaders, callbacks are ready)
//       on_epoch_start
//         on_loader_start                 (per loader: train, valid, ...)
//           on_batch_start, [handle_batch], on_batch_end     (per batch)
//         on_loader_end                   (runner.loader_metrics hold the averages over ranks)
//       on_epoch_end                      (runner.epoch_metrics hold every loader's metrics)
//       on_epoch_logged                   (the loggers have written the epoch)
//     on_stage_end
//   on_experiment_end                     on_exception: when anything above threw
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ember::engines {

class IRunner;

// Catalyst's CallbackOrder: metrics are computed before backward, backward before the optimizer
// step, the step before the scheduler, and checkpoints see the finished epoch.
enum class CallbackOrder : int {
  internal = 0,
  metric = 20,
  metric_aggregation = 40,
  backward = 60,
  optimizer = 80,
  scheduler = 100,
  checkpoint = 120,
  external = 200,
};

class ICallback {
 public:
  explicit ICallback(CallbackOrder order) : order_(order) {}
  virtual ~ICallback() = default;
  CallbackOrder order() const { return order_; }

  virtual void on_experiment_start(IRunner&) {}
  virtual void on_stage_start(IRunner&) {}
  virtual void on_epoch_start(IRunner&) {}
  virtual void on_loader_start(IRunner&) {}
  virtual void on_batch_start(IRunner&) {}
  virtual void on_batch_end(IRunner&) {}
  virtual void on_loader_end(IRunner&) {}
  virtual void on_epoch_end(IRunner&) {}
  // Not in Catalyst: after the loggers wrote the epoch's row. CheckpointCallback saves here, so
  // that a run stopped in between has a row its resume drops and writes again, never a
  // checkpoint whose epoch has no row; and the checkpoint holds what every on_epoch_end left.
  virtual void on_epoch_logged(IRunner&) {}
  virtual void on_stage_end(IRunner&) {}
  virtual void on_experiment_end(IRunner&) {}
  virtual void on_exception(IRunner&) {}

  // State a resumed run needs (EarlyStoppingCallback's best value and count): CheckpointCallback
  // stores it as "callback.<name>.<key>" and gives it back on resume. Empty for most callbacks.
  virtual std::map<std::string, std::string> state_dict() const { return {}; }
  virtual void load_state_dict(const std::map<std::string, std::string>& /*state*/) {}

 private:
  CallbackOrder order_;
};

using CallbackPtr = std::shared_ptr<ICallback>;
// Named, as Catalyst's dict of callbacks: a name given twice keeps the later callback.
using Callbacks = std::vector<std::pair<std::string, CallbackPtr>>;

}  // namespace ember::engines
