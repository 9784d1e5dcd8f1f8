// The runner: the order of hooks and callback events, gradient accumulation, the scheduler's
// rules, checkpoints' top-k and early stopping, and the errors a user meets.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "distributed/distributed_sampler.h"
#include "engines/callbacks.h"
#include "engines/device_engines.h"
#include "engines/factory.h"
#include "tests/common/expect_error.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

using testing::fresh_dir;

Tensor cross_entropy_loss(const Tensor& logits, const Tensor& targets) {
  return cross_entropy(logits, targets);
}

class RecordingCallback : public ICallback {
 public:
  RecordingCallback(std::string name, CallbackOrder order, std::vector<std::string>& log)
      : ICallback(order), name_(std::move(name)), log_(log) {}
  void on_experiment_start(IRunner&) override { add("experiment_start"); }
  void on_stage_start(IRunner&) override { add("stage_start"); }
  void on_epoch_start(IRunner& runner) override {
    add("epoch_start " + std::to_string(runner.epoch));
  }
  void on_loader_start(IRunner& runner) override { add("loader_start " + runner.loader_key); }
  void on_batch_start(IRunner&) override { add("batch_start"); }
  void on_batch_end(IRunner&) override { add("batch_end"); }
  void on_loader_end(IRunner& runner) override { add("loader_end " + runner.loader_key); }
  void on_epoch_end(IRunner&) override { add("epoch_end"); }
  void on_epoch_logged(IRunner&) override { add("epoch_logged"); }
  void on_stage_end(IRunner&) override { add("stage_end"); }
  void on_experiment_end(IRunner&) override { add("experiment_end"); }
  void on_exception(IRunner&) override { add("exception"); }

 private:
  void add(const std::string& event) { log_.push_back(name_ + ": " + event); }
  std::string name_;
  std::vector<std::string>& log_;
};

// The tutorial's custom runner, recording each hook.
class HookRunner : public IRunner {
 public:
  explicit HookRunner(bool fail_in_batch = false) : fail_in_batch_(fail_in_batch) {}
  std::vector<std::string> log;
  EnginePtr get_engine() override {
    log.push_back("get_engine");
    return make_engine("cpu");
  }
  Loggers get_loggers() override {
    log.push_back("get_loggers");
    return {};
  }
  std::vector<std::string> stages() override {
    log.push_back("stages");
    return {"train"};
  }
  int64_t get_stage_len(const std::string&) override {
    log.push_back("get_stage_len");
    return 2;
  }
  Loaders get_loaders(const std::string&) override {
    log.push_back("get_loaders");
    return {{"train", testing::loader(8, 4, true)}, {"valid", testing::loader(4, 4, false)}};
  }
  nn::ModulePtr get_model(const std::string&) override {
    log.push_back("get_model");
    return testing::mlp();
  }
  Criterion get_criterion(const std::string&) override {
    log.push_back("get_criterion");
    return cross_entropy_loss;
  }
  std::shared_ptr<optim::Optimizer> get_optimizer(const std::string&, nn::Module& m) override {
    log.push_back("get_optimizer");
    return std::make_shared<optim::SGD>(m.named_parameters(), optim::SGDOptions{.lr = 0.1});
  }
  std::shared_ptr<optim::LRScheduler> get_scheduler(const std::string&,
                                                    optim::Optimizer& o) override {
    log.push_back("get_scheduler");
    return std::make_shared<optim::StepLR>(o, 1, 0.5);
  }
  Callbacks get_callbacks(const std::string&) override {
    log.push_back("get_callbacks");
    // Given out of order: the runner sorts by order, keeping the given order among equals.
    return {{"late", std::make_shared<RecordingCallback>("late", CallbackOrder::external, events)},
            {"early", std::make_shared<RecordingCallback>("early", CallbackOrder::metric, events)},
            {"criterion", std::make_shared<CriterionCallback>()},
            {"backward", std::make_shared<BackwardCallback>()},
            {"optimizer", std::make_shared<OptimizerCallback>()},
            {"scheduler", std::make_shared<SchedulerCallback>()}};
  }
  void handle_batch(const data::Batch& batch_in) override {
    EMBER_CHECK(!fail_in_batch_, "boom");
    batch["features"] = batch_in.inputs;
    batch["targets"] = batch_in.targets;
    batch["logits"] = model->forward(batch_in.inputs);
    grad_enabled_in_batch.push_back(grad_enabled());
  }
  std::vector<std::string> events;
  std::vector<bool> grad_enabled_in_batch;

 private:
  bool fail_in_batch_;
};

TEST(Runner, HooksRunInTheTutorialsOrder) {
  HookRunner runner;
  runner.run();
  EXPECT_EQ(runner.log,
            (std::vector<std::string>{"get_engine", "get_loggers", "stages", "get_stage_len",
                                      "get_model", "get_criterion", "get_optimizer",
                                      "get_scheduler", "get_loaders", "get_callbacks"}));
  EXPECT_EQ(runner.epoch, 2);
  EXPECT_EQ(runner.batch_step, 4);  // 2 epochs x 2 training batches
  EXPECT_EQ(runner.scheduler->last_epoch(), 2);
  // Gradients are recorded in training batches only.
  EXPECT_EQ(runner.grad_enabled_in_batch,
            (std::vector<bool>{true, true, false, true, true, false}));
}

TEST(Runner, CallbackEventsNestAndFollowTheOrder) {
  HookRunner runner;
  runner.run();
  std::vector<std::string> expected = {"early: experiment_start", "late: experiment_start",
                                       "early: stage_start", "late: stage_start"};
  for (int epoch = 1; epoch <= 2; ++epoch) {
    for (const std::string e : {"early: ", "late: "})
      expected.push_back(e + "epoch_start " + std::to_string(epoch));
    for (const auto& [loader, batches] : {std::pair<std::string, int>{"train", 2}, {"valid", 1}}) {
      for (const std::string e : {"early: ", "late: "})
        expected.push_back(e + "loader_start " + loader);
      for (int b = 0; b < batches; ++b) {
        expected.insert(expected.end(), {"early: batch_start", "late: batch_start",
                                         "early: batch_end", "late: batch_end"});
      }
      for (const std::string e : {"early: ", "late: "})
        expected.push_back(e + "loader_end " + loader);
    }
    expected.insert(expected.end(), {"early: epoch_end", "late: epoch_end", "early: epoch_logged",
                                     "late: epoch_logged"});
  }
  expected.insert(expected.end(), {"early: stage_end", "late: stage_end", "early: experiment_end",
                                   "late: experiment_end"});
  EXPECT_EQ(runner.events, expected);
  // Metrics: every loader's loss, averaged, plus throughput and seconds.
  ASSERT_EQ(runner.epoch_metrics.size(), 2u);
  EXPECT_EQ(runner.epoch_metrics[0].first, "train");
  EXPECT_TRUE(runner.epoch_metrics[0].second.count("loss"));
  EXPECT_TRUE(runner.epoch_metrics[0].second.count("lr"));
  EXPECT_TRUE(runner.epoch_metrics[1].second.count("throughput"));
  EXPECT_FALSE(runner.epoch_metrics[1].second.count("lr"));  // no step outside training
}

TEST(Runner, AnErrorReachesOnExceptionThenTheCaller) {
  HookRunner runner(/*fail_in_batch=*/true);
  EXPECT_ERROR_WITH(runner.run(), "boom");
  ASSERT_FALSE(runner.events.empty());
  EXPECT_EQ(runner.events.back(), "late: exception");
}

// Final weights of one training epoch over `n` samples in batches of `batch_size`, stepping every
// `accumulation` batches.
std::vector<Tensor> weights_after(int64_t n, int64_t batch_size, int64_t accumulation,
                                  const std::string& engine_name) {
  manual_seed(3);
  auto model = testing::mlp(/*dropout=*/false);
  SupervisedRunner runner;
  runner.train(
      {.model = model,
       .criterion = cross_entropy_loss,
       .loaders = {{"train", testing::loader(n, batch_size, false)}},
       .engine = engine_name,
       .callbacks = {{"optimizer", std::make_shared<OptimizerCallback>(
                                       OptimizerOptions{.accumulation_steps = accumulation})}},
       .optimizer_fn = [](nn::Module& m) {
         return std::make_shared<optim::SGD>(m.named_parameters(), optim::SGDOptions{.lr = 0.5});
       }});
  std::vector<Tensor> weights;
  for (const Tensor& p : model->parameters())
    weights.push_back(p.to(DType::f32));
  return weights;
}

TEST(Runner, AccumulationGivesTheUpdateOfOneBigBatch) {
  const auto big = weights_after(16, 16, 1, "cpu");
  const auto accumulated = weights_after(16, 4, 4, "cpu");
  const auto unaccumulated = weights_after(16, 4, 1, "cpu");
  for (size_t i = 0; i < big.size(); ++i) {
    EXPECT_TRUE(allclose(big[i], accumulated[i], 1e-5, 1e-6)) << i;
    EXPECT_FALSE(allclose(big[i], unaccumulated[i], 1e-5, 1e-6)) << i;  // 4 steps differ
  }
  // The last, partial accumulation of a loader steps too: 3 batches with steps of 2 = 2 steps.
  const auto partial = weights_after(12, 4, 2, "cpu");
  const auto untouched = [] {
    manual_seed(3);
    return testing::mlp(false)->parameters();
  }();
  EXPECT_FALSE(allclose(partial[0], untouched[0], 0, 0));
}

// A loader's last, shorter accumulation is the mean of its own batches: 20 samples in batches of
// 4, stepping every 3, give the updates of batches of 12 and then 8 (the last two batches' mean,
// not their sum divided by 3).
TEST(Runner, AShortLastAccumulationIsTheMeanOfItsOwnBatches) {
  const auto big = weights_after(20, 12, 1, "cpu");  // batches of 12 and 8
  const auto accumulated = weights_after(20, 4, 3, "cpu");
  for (size_t i = 0; i < big.size(); ++i)
    EXPECT_TRUE(allclose(big[i], accumulated[i], 1e-5, 1e-6)) << i;
}

// The optimizer and schedule of the scheduler tests: SGD at lr 0.1, and StepLR halving the rate
// at each of its steps, handed to `scheduler` as the runner makes it.
std::shared_ptr<optim::Optimizer> sgd(nn::Module& m) {
  return std::make_shared<optim::SGD>(m.named_parameters(), optim::SGDOptions{.lr = 0.1});
}
SchedulerFn step_lr_into(std::shared_ptr<optim::LRScheduler>& scheduler) {
  return [&scheduler](optim::Optimizer& o) {
    scheduler = std::make_shared<optim::StepLR>(o, 1, 0.5);
    return scheduler;
  };
}

// Records, for each batch, its loader and whether the model was in training mode.
class ModeRecorder : public ICallback {
 public:
  ModeRecorder() : ICallback(CallbackOrder::external) {}
  void on_batch_end(IRunner& runner) override {
    modes.push_back(runner.loader_key + (runner.model->is_training() ? " train" : " eval"));
  }
  std::vector<std::string> modes;
};

// As Catalyst's runner (model.train(is_train_loader)): dropout and batch statistics are on in the
// train loader only; a valid loader runs the model in eval mode, and the next train loader turns
// training mode back on.
TEST(Runner, ValidLoadersRunTheModelInEvalMode) {
  auto recorder = std::make_shared<ModeRecorder>();
  SupervisedRunner runner;
  runner.train({.model = testing::mlp(),
                .criterion = cross_entropy_loss,
                .loaders = {{"train", testing::loader(8, 8, false)},
                            {"valid", testing::loader(4, 4, false)}},
                .num_epochs = 2,
                .engine = "cpu",
                .callbacks = {{"recorder", recorder}},
                .optimizer_fn = sgd});
  EXPECT_EQ(recorder->modes,
            (std::vector<std::string>{"train train", "valid eval", "train train", "valid eval"}));
}

// Records the train loss the runner hands the engine at each epoch's end (DASO's schedule reads
// it).
class EpochLossEngine : public DeviceEngine {
 public:
  void on_epoch_end(std::optional<double> train_loss) override { losses.push_back(train_loss); }
  std::vector<std::optional<double>> losses;
};

// The engine's epoch end gets the train loader's loss, the loaders given in any order.
TEST(Runner, TheEngineGetsTheEpochsTrainLossWhateverTheLoadersOrder) {
  auto engine = std::make_shared<EpochLossEngine>();
  SupervisedRunner runner;
  runner.train({.model = testing::mlp(false),
                .criterion = cross_entropy_loss,
                .loaders = {{"valid", testing::loader(8, 4, false, 3)},
                            {"train", testing::loader(8, 4, false)}},
                .engine_instance = engine,
                .optimizer_fn = sgd});
  ASSERT_EQ(engine->losses.size(), 1u);
  ASSERT_TRUE(engine->losses[0].has_value());
  EXPECT_EQ(*engine->losses[0], runner.epoch_metric("train", "loss"));
  EXPECT_NE(*engine->losses[0], runner.epoch_metric("valid", "loss"));
}

TEST(Runner, SchedulerIsNotSteppedWhenTheScalerSkipsTheStep) {
  manual_seed(4);
  // A loss scale so large that f16 gradients overflow: every step is skipped.
  auto engine = std::make_shared<AMPEngine>(Device::cpu(), DType::f16,
                                            optim::GradScalerOptions{.init_scale = 1e30});
  auto model = testing::mlp(false);
  const auto before = model->state_dict();
  std::shared_ptr<optim::LRScheduler> scheduler;
  SupervisedRunner runner;
  runner.train({.model = model,
                .criterion = cross_entropy_loss,
                .loaders = {{"train", testing::loader(8, 4, false)}},
                .engine_instance = engine,
                .callbacks = {{"scheduler", std::make_shared<SchedulerCallback>(
                                                SchedulerCallback::Mode::batch)}},
                .optimizer_fn = sgd,
                .scheduler_fn = step_lr_into(scheduler)});
  EXPECT_EQ(scheduler->last_epoch(), 0);
  EXPECT_DOUBLE_EQ(engine->scaler().get_scale(), 1e30f * 0.25f);  // backed off twice
  const auto after = model->state_dict();
  for (size_t i = 0; i < before.size(); ++i)
    EXPECT_TRUE(testing::identical(before[i].second, after[i].second)) << before[i].first;
}

// Counts the optimizer steps that ran (not skipped by the loss scaler).
class StepCounter : public ICallback {
 public:
  StepCounter() : ICallback(CallbackOrder::external) {}
  void on_batch_end(IRunner& runner) override {
    if (runner.is_train_loader && runner.optimizer_stepped) ++steps;
  }
  int64_t steps = 0;
};

// Per epoch (SupervisedRunner's default), the scheduler steps after an epoch only when the
// optimizer stepped in it. Two epochs of 2 batches under an f16 loss scale of 1e30: every
// gradient overflows, every step is skipped and the schedule stays; with a backoff of 1e-30 the
// scale falls to about 1 after the first skipped step, so each epoch steps at least once.
TEST(Runner, EpochSchedulerIsNotSteppedAfterAnEpochOfSkippedSteps) {
  auto run = [](double backoff_factor) {
    manual_seed(4);
    auto engine = std::make_shared<AMPEngine>(
        Device::cpu(), DType::f16,
        optim::GradScalerOptions{.init_scale = 1e30, .backoff_factor = backoff_factor});
    auto counter = std::make_shared<StepCounter>();
    std::shared_ptr<optim::LRScheduler> scheduler;
    SupervisedRunner runner;
    runner.train({.model = testing::mlp(false),
                  .criterion = cross_entropy_loss,
                  .loaders = {{"train", testing::loader(8, 4, false)}},
                  .num_epochs = 2,
                  .engine_instance = engine,
                  .callbacks = {{"counter", counter}},
                  .optimizer_fn = sgd,
                  .scheduler_fn = step_lr_into(scheduler)});
    return std::pair<int64_t, int64_t>{counter->steps, scheduler->last_epoch()};
  };
  const auto [steps_all_skipped, epochs_all_skipped] = run(0.5);
  EXPECT_EQ(steps_all_skipped, 0);
  EXPECT_EQ(epochs_all_skipped, 0);
  const auto [steps_first_skipped, epochs_first_skipped] = run(1e-30);
  EXPECT_EQ(steps_first_skipped, 3);
  EXPECT_EQ(epochs_first_skipped, 2);
}

// An f32 engine that skips the optimizer steps whose index (from 0, over the run) is in `skipped`,
// as a loss scaler would.
class SkippingEngine : public DeviceEngine {
 public:
  explicit SkippingEngine(std::set<int64_t> skipped) : skipped_(std::move(skipped)) {}
  bool optimizer_step(nn::Module& model, optim::Optimizer& optimizer) override {
    if (skipped_.count(next_step_++)) return false;
    return DeviceEngine::optimizer_step(model, optimizer);
  }

 private:
  std::set<int64_t> skipped_;
  int64_t next_step_ = 0;
};

// Three epochs of 2 steps: all of epoch 1 run, all of epoch 2 are skipped, one of epoch 3 runs.
// The schedule moves after epochs 1 and 3 only (each epoch is judged on its own steps).
TEST(Runner, EpochSchedulerJudgesEachEpochOnItsOwnSteps) {
  manual_seed(4);
  std::shared_ptr<optim::LRScheduler> scheduler;
  auto counter = std::make_shared<StepCounter>();
  SupervisedRunner runner;
  runner.train({.model = testing::mlp(false),
                .criterion = cross_entropy_loss,
                .loaders = {{"train", testing::loader(8, 4, false)}},
                .num_epochs = 3,
                .engine_instance = std::make_shared<SkippingEngine>(std::set<int64_t>{2, 3, 4}),
                .callbacks = {{"counter", counter}},
                .optimizer_fn = sgd,
                .scheduler_fn = step_lr_into(scheduler)});
  EXPECT_EQ(counter->steps, 3);
  EXPECT_EQ(scheduler->last_epoch(), 2);
}

TEST(Runner, BatchSchedulerStepsOncePerOptimizerStep) {
  manual_seed(4);
  std::shared_ptr<optim::LRScheduler> scheduler;
  SupervisedRunner runner;
  runner.train(
      {.model = testing::mlp(),
       .criterion = cross_entropy_loss,
       .loaders = {{"train", testing::loader(16, 4, true)}},
       .num_epochs = 2,
       .engine = "cpu",
       .callbacks = {{"optimizer", std::make_shared<OptimizerCallback>(OptimizerOptions{
                                       .accumulation_steps = 2, .max_grad_norm = 1.0})},
                     {"scheduler",
                      std::make_shared<SchedulerCallback>(SchedulerCallback::Mode::batch)}},
       .optimizer_fn =
           [](nn::Module& m) {
             return std::make_shared<optim::Adam>(m.named_parameters(), optim::AdamOptions{});
           },
       .scheduler_fn =
           [&](optim::Optimizer& o) {
             scheduler = std::make_shared<optim::StepLR>(o, 1, 0.9);
             return scheduler;
           }});
  EXPECT_EQ(scheduler->last_epoch(), 4);  // 2 epochs x 4 batches / 2 accumulated
}

// Clipping reads true gradients: under an f16 loss scale the OptimizerCallback unscales them
// before clipping. One step of SGD with lr 1 moves the weights by minus the clipped gradient, so
// the move's norm is the clip norm in unscaled units (clipping the scaled gradients instead would
// give a move 1024 times smaller: the scaler divides them by the scale after the clipping).
TEST(Runner, ClippingUnscalesTheGradientsFirst) {
  constexpr double kMaxNorm = 0.01, kScale = 1024;
  manual_seed(4);
  auto engine = std::make_shared<AMPEngine>(Device::cpu(), DType::f16,
                                            optim::GradScalerOptions{.init_scale = kScale});
  ASSERT_TRUE(engine->scaler().is_enabled());
  auto model = testing::mlp(false);
  std::vector<Tensor> before;
  for (const Tensor& param : model->parameters())
    before.push_back(param.to(DType::f64));
  auto counter = std::make_shared<StepCounter>();
  SupervisedRunner runner;
  runner.train({.model = model,
                .criterion = cross_entropy_loss,
                .loaders = {{"train", testing::loader(8, 8, false)}},  // one batch: one step
                .engine_instance = engine,
                .callbacks = {{"optimizer", std::make_shared<OptimizerCallback>(
                                                OptimizerOptions{.max_grad_norm = kMaxNorm})},
                              {"counter", counter}},
                .optimizer_fn = [](nn::Module& m) {
                  return std::make_shared<optim::SGD>(m.named_parameters(),
                                                      optim::SGDOptions{.lr = 1.0});
                }});
  ASSERT_EQ(counter->steps, 1);                            // not skipped
  EXPECT_DOUBLE_EQ(engine->scaler().get_scale(), kScale);  // no overflow: the scale stayed
  double squared_move = 0;
  const std::vector<Tensor> after = model->parameters();
  for (size_t i = 0; i < after.size(); ++i)
    squared_move += sum(square(after[i].to(DType::f64) - before[i])).item<double>();
  // The true gradient's norm is far above 0.01, so it is clipped to 0.01 (less 1e-6 relative).
  EXPECT_NEAR(std::sqrt(squared_move), kMaxNorm, kMaxNorm * 1e-4);
}

TEST(Runner, ReduceLROnPlateauStepsOnTheValidMetric) {
  // The default scheduler callback passes valid/loss. A threshold this large (rel, mode min)
  // counts every epoch as bad: with patience 0 the lr halves at the end of every epoch.
  manual_seed(4);
  std::shared_ptr<optim::LRScheduler> scheduler;
  std::shared_ptr<optim::Optimizer> optimizer;
  SupervisedRunner runner;
  runner.train(
      {.model = testing::mlp(),
       .criterion = cross_entropy_loss,
       .loaders = {{"train", testing::loader(16, 4, true)},
                   {"valid", testing::loader(8, 4, false, 3)}},
       .num_epochs = 3,
       .engine = "cpu",
       .optimizer_fn =
           [&](nn::Module& m) {
             optimizer =
                 std::make_shared<optim::SGD>(m.named_parameters(), optim::SGDOptions{.lr = 0.1});
             return optimizer;
           },
       .scheduler_fn =
           [&](optim::Optimizer& o) {
             scheduler = std::make_shared<optim::ReduceLROnPlateau>(
                 o, optim::ReduceLROnPlateauOptions{.factor = 0.5, .patience = 0, .threshold = 10});
             return scheduler;
           }});
  EXPECT_DOUBLE_EQ(optimizer->param_groups()[0].lr, 0.1 * 0.5 * 0.5 * 0.5);
  EXPECT_EQ(scheduler->last_epoch(), 3);

  // A metric the loaders do not report, and a plateau stepped per batch, are refused clearly.
  auto plateau_run = [&](std::shared_ptr<SchedulerCallback> callback) {
    SupervisedRunner again;
    again.train(
        {.model = testing::mlp(),
         .criterion = cross_entropy_loss,
         .loaders = {{"train", testing::loader(16, 4, true)}},
         .num_epochs = 1,
         .engine = "cpu",
         .callbacks = {{"scheduler", callback}},
         .optimizer_fn =
             [](nn::Module& m) {
               return std::make_shared<optim::SGD>(m.named_parameters(),
                                                   optim::SGDOptions{.lr = 0.1});
             },
         .scheduler_fn =
             [](optim::Optimizer& o) { return std::make_shared<optim::ReduceLROnPlateau>(o); }});
  };
  EXPECT_ERROR_WITH(plateau_run(std::make_shared<SchedulerCallback>(SchedulerCallback::Mode::epoch,
                                                                    "valid", "loss")),
                    "valid");
  EXPECT_ERROR_WITH(
      plateau_run(std::make_shared<SchedulerCallback>(SchedulerCallback::Mode::batch)),
      "steps once per epoch");
}

TEST(Runner, EarlyStoppingCountsCarryAcrossAResume) {
  // lr 0: the valid loss never improves after epoch 1, so patience 2 stops the run at epoch 3,
  // also when it was interrupted after epoch 2 (the count of bad epochs is in the checkpoint).
  auto run = [](const std::string& logdir, int64_t stop_after, bool resume) {
    manual_seed(4);
    Callbacks callbacks = {
        {"early_stopping", std::make_shared<EarlyStoppingCallback>(2, "valid", "loss")}};
    if (stop_after > 0)
      callbacks.emplace_back("stop", std::make_shared<testing::StopAfterEpoch>(stop_after));
    SupervisedRunner runner;
    runner.train({.model = testing::mlp(false),
                  .criterion = cross_entropy_loss,
                  .loaders = {{"train", testing::loader(16, 4, false)},
                              {"valid", testing::loader(8, 4, false, 3)}},
                  .logdir = logdir,
                  .num_epochs = 6,
                  .engine = "cpu",
                  .callbacks = callbacks,
                  .resume = resume ? logdir + "/last.ckpt" : "",
                  .optimizer_fn = [](nn::Module& m) {
                    return std::make_shared<optim::SGD>(m.named_parameters(),
                                                        optim::SGDOptions{.lr = 0.0});
                  }});
    return load_checkpoint(logdir + "/last.ckpt");
  };
  const std::string straight = fresh_dir("early_straight"), resumed = fresh_dir("early_resumed");
  EXPECT_EQ(run(straight, 0, false).meta("checkpoint.epoch"), "3");
  const Checkpoint interrupted = run(resumed, 2, false);
  EXPECT_EQ(interrupted.meta("checkpoint.epoch"), "2");
  EXPECT_EQ(interrupted.meta("callback.early_stopping.bad_epochs"), "1");
  EXPECT_EQ(run(resumed, 0, true).meta("checkpoint.epoch"), "3");
  // The checkpoint of the stopping epoch records the stop: resuming the finished run trains no
  // further epoch (last.ckpt stays epoch 3's).
  EXPECT_EQ(run(resumed, 0, true).meta("checkpoint.epoch"), "3");
  std::filesystem::remove_all(straight);
  std::filesystem::remove_all(resumed);
}

TEST(Runner, AccuracyTopKAndCheckpointTopKAndEarlyStopping) {
  const std::string logdir = fresh_dir("topk");
  manual_seed(6);
  SupervisedRunner runner;
  auto checkpoint = std::make_shared<CheckpointCallback>(CheckpointOptions{.logdir = logdir,
                                                                           .loader_key = "valid",
                                                                           .metric_key = "accuracy",
                                                                           .minimize = false,
                                                                           .topk = 2});
  runner.train(
      {.model = testing::mlp(),
       .criterion = cross_entropy_loss,
       .loaders = {{"train", testing::loader(32, 8, true)},
                   {"valid", testing::loader(16, 8, false, 8)}},
       .logdir = logdir,
       .num_epochs = 6,
       .engine = "cpu",
       .callbacks = {{"accuracy", std::make_shared<AccuracyCallback>("logits", "targets",
                                                                     std::vector<int64_t>{1, 3})},
                     {"checkpoint", checkpoint},
                     // Patience 1 on a metric that cannot strictly improve by 10: stops after 2.
                     {"early",
                      std::make_shared<EarlyStoppingCallback>(1, "valid", "loss", true, 10.0)}},
       .optimizer_fn = [](nn::Module& m) {
         return std::make_shared<optim::Adam>(m.named_parameters(), optim::AdamOptions{});
       }});
  EXPECT_EQ(runner.epoch, 2);
  const Metrics& valid = runner.epoch_metrics[1].second;
  EXPECT_DOUBLE_EQ(valid.at("accuracy03"), 1.0);  // 3 classes: always in the top 3
  EXPECT_LE(valid.at("accuracy"), valid.at("accuracy03"));
  EXPECT_FALSE(valid.count("accuracy01"));
  EXPECT_TRUE(std::filesystem::exists(logdir + "/last.ckpt"));
  EXPECT_TRUE(std::filesystem::exists(logdir + "/best.ckpt"));
  EXPECT_TRUE(std::filesystem::exists(logdir + "/epoch-0001.ckpt"));
  EXPECT_TRUE(std::filesystem::exists(logdir + "/epoch-0002.ckpt"));
  const Checkpoint best = load_checkpoint(logdir + "/best.ckpt");
  EXPECT_EQ(best.meta("checkpoint.epoch"), std::to_string(checkpoint->best_epoch()));
  std::filesystem::remove_all(logdir);
}

// The valid loader's "score" of epoch e is per_epoch[e - 1]: a metric that improves and worsens.
class ScriptedScore : public ICallback {
 public:
  explicit ScriptedScore(std::vector<double> per_epoch)
      : ICallback(CallbackOrder::metric), per_epoch_(std::move(per_epoch)) {}
  void on_batch_end(IRunner& runner) override {
    if (runner.loader_key == "valid")
      runner.batch_metrics["score"] =
          scalar_tensor(per_epoch_.at(static_cast<size_t>(runner.epoch - 1)), DType::f64);
  }

 private:
  std::vector<double> per_epoch_;
};

// The mlp trained for one epoch per score, ScriptedScore reporting the scores as "score".
TrainOptions scored_training(const std::string& logdir, const std::vector<double>& scores) {
  return {
      .model = testing::mlp(),
      .loaders = {{"train", testing::loader(8, 4, false)}, {"valid", testing::loader(4, 4, false)}},
      .logdir = logdir,
      .num_epochs = static_cast<int64_t>(scores.size()),
      .engine = "cpu",
      .callbacks = {{"score", std::make_shared<ScriptedScore>(scores)}}};
}

// scored_training with a CheckpointCallback ranking the epochs by the score; returns that
// callback.
std::shared_ptr<CheckpointCallback> train_scored(const std::string& logdir,
                                                 const std::vector<double>& scores, bool minimize,
                                                 int64_t topk) {
  auto checkpoint = std::make_shared<CheckpointCallback>(CheckpointOptions{
      .logdir = logdir, .metric_key = "score", .minimize = minimize, .topk = topk});
  TrainOptions options = scored_training(logdir, scores);
  options.callbacks.emplace_back("checkpoint", checkpoint);
  SupervisedRunner runner;
  runner.train(std::move(options));
  return checkpoint;
}

// The epochs of the last checkpoint's best list ("epoch:value,...", best first).
std::vector<int64_t> ranked_epochs(const std::string& logdir) {
  std::vector<int64_t> ranked;
  std::istringstream list(load_checkpoint(logdir + "/last.ckpt").meta("checkpoint.best"));
  for (std::string item; std::getline(list, item, ',');)
    ranked.push_back(std::stoll(item.substr(0, item.find(':'))));
  return ranked;
}

// Seven epochs, top 3: each epoch's file is written, and dropped once three better ones exist.
// What remains is the 3 best epochs' files (plus best and last), and the best list in the last
// checkpoint ranks them by the metric, in the direction `minimize` says.
TEST(Runner, CheckpointTopKKeepsTheBestEpochsFiles) {
  const std::vector<double> scores = {0.5, 0.9, 0.3, 0.7, 0.8, 0.1, 0.6};
  for (const bool minimize : {false, true}) {
    SCOPED_TRACE(minimize);
    const std::string logdir = fresh_dir("topk_eviction");
    const auto checkpoint = train_scored(logdir, scores, minimize, 3);
    // Highest first: 0.9 (epoch 2), 0.8 (5), 0.7 (4); lowest first: 0.1 (6), 0.3 (3), 0.5 (1).
    const std::vector<int64_t> best_epochs =
        minimize ? std::vector<int64_t>{6, 3, 1} : std::vector<int64_t>{2, 5, 4};
    std::set<std::string> expected_files = {"best.ckpt", "last.ckpt"};
    for (const int64_t epoch : best_epochs) {
      char name[32];
      std::snprintf(name, sizeof(name), "epoch-%04lld.ckpt", static_cast<long long>(epoch));
      expected_files.insert(name);
      const Checkpoint kept = load_checkpoint(logdir + "/" + name);
      EXPECT_EQ(kept.meta("checkpoint.epoch"), std::to_string(epoch));
      EXPECT_EQ(std::stod(kept.meta("checkpoint.value")), scores[static_cast<size_t>(epoch - 1)]);
    }
    EXPECT_EQ(testing::checkpoint_files(logdir), expected_files);
    EXPECT_EQ(ranked_epochs(logdir), best_epochs);
    EXPECT_EQ(checkpoint->best_epoch(), best_epochs[0]);
    EXPECT_EQ(load_checkpoint(logdir + "/best.ckpt").meta("checkpoint.epoch"),
              std::to_string(best_epochs[0]));
    std::filesystem::remove_all(logdir);
  }
}

// A save killed midway leaves NAME.ckpt.tmp-PID (save_checkpoint's temporary). The next run in
// that logdir removes those of processes that no longer run, and says so; a temporary of a
// running process, and other files, stay.
TEST(Runner, CheckpointRemovesTemporariesThatAKilledSaveLeft) {
  const std::string logdir = fresh_dir("abandoned_temporaries");
  // A pid above the system's largest cannot run; the test's parent does.
  int64_t pid_max = 4194304;
  std::ifstream("/proc/sys/kernel/pid_max") >> pid_max;
  const std::string dead = logdir + "/last.ckpt.tmp-" + std::to_string(pid_max + 1);
  const std::string running = logdir + "/best.ckpt.tmp-" + std::to_string(::getppid());
  const std::string other = logdir + "/notes.ckpt.tmp-x";
  for (const std::string& path : {dead, running, other})
    std::ofstream(path) << "half a checkpoint";
  std::ostringstream out;
  auto checkpoint = std::make_shared<CheckpointCallback>(
      CheckpointOptions{.logdir = logdir, .metric_key = "score", .minimize = false, .out = &out});
  TrainOptions options = scored_training(logdir, {0.5});
  options.callbacks.emplace_back("checkpoint", checkpoint);
  SupervisedRunner().train(std::move(options));
  EXPECT_FALSE(std::filesystem::exists(dead));
  EXPECT_TRUE(std::filesystem::exists(running));
  EXPECT_TRUE(std::filesystem::exists(other));
  EXPECT_NE(out.str().find("removed 1 temporary checkpoint file left in"), std::string::npos)
      << out.str();
  std::filesystem::remove_all(logdir);
}

// With topk 1 best.ckpt is the top-1 file: no epoch-NNNN.ckpt is written (none would ever be
// removed: the logdir would gain one file per improving epoch).
TEST(Runner, CheckpointTopOneKeepsOnlyBestAndLast) {
  const std::vector<double> scores = {0.5, 0.9, 0.3, 0.95};
  const std::string logdir = fresh_dir("top_one");
  train_scored(logdir, scores, /*minimize=*/false, 1);
  EXPECT_EQ(testing::checkpoint_files(logdir), (std::set<std::string>{"best.ckpt", "last.ckpt"}));
  EXPECT_EQ(load_checkpoint(logdir + "/best.ckpt").meta("checkpoint.epoch"), "4");
  std::filesystem::remove_all(logdir);
}

// A tie with the best ranks after the earlier epoch: best.ckpt stays the earlier epoch's, and a
// tie at the bottom of the top k is the one left out. Top 3, highest first: 0.9 (epoch 2), 0.9 (3),
// 0.5 (1); epoch 4's 0.5 ties epoch 1's and is dropped.
TEST(Runner, CheckpointTiesRankAfterTheEarlierEpoch) {
  const std::vector<double> scores = {0.5, 0.9, 0.9, 0.5};
  const std::string logdir = fresh_dir("topk_ties");
  train_scored(logdir, scores, /*minimize=*/false, 3);
  EXPECT_EQ(load_checkpoint(logdir + "/best.ckpt").meta("checkpoint.epoch"), "2");
  EXPECT_EQ(ranked_epochs(logdir), (std::vector<int64_t>{2, 3, 1}));
  EXPECT_EQ(testing::checkpoint_files(logdir),
            (std::set<std::string>{"best.ckpt", "last.ckpt", "epoch-0001.ckpt", "epoch-0002.ckpt",
                                   "epoch-0003.ckpt"}));
  std::filesystem::remove_all(logdir);
}

// SupervisedRunner's own CheckpointCallback picks the best epoch by valid_metric in the direction
// minimize_valid_metric says: scores 0.5, 0.9, 0.3 make epoch 3 the best when minimizing, 2 when
// maximizing.
TEST(Runner, TheDefaultCheckpointFollowsMinimizeValidMetric) {
  const std::vector<double> scores = {0.5, 0.9, 0.3};
  for (const bool minimize : {true, false}) {
    SCOPED_TRACE(minimize);
    const std::string logdir = fresh_dir("default_checkpoint_direction");
    TrainOptions options = scored_training(logdir, scores);
    options.valid_metric = "score";
    options.minimize_valid_metric = minimize;
    SupervisedRunner runner;
    runner.train(std::move(options));
    EXPECT_EQ(load_checkpoint(logdir + "/best.ckpt").meta("checkpoint.epoch"),
              minimize ? "3" : "2");
    std::filesystem::remove_all(logdir);
  }
}

// What the checkpoint of epoch k sees, from a logger and a callback after it.
class CheckpointWitness : public ILogger, public ICallback {
 public:
  explicit CheckpointWitness(std::string logdir)
      : ICallback(CallbackOrder::external), logdir_(std::move(logdir)) {}
  // At each row: the epoch of last.ckpt then (0 when there is none yet).
  void log_epoch(const LoaderMetrics&, const IRunner&) override {
    const std::string last = logdir_ + "/last.ckpt";
    saved_at_row.push_back(std::filesystem::exists(last)
                               ? std::stoll(load_checkpoint(last).meta("checkpoint.epoch"))
                               : 0);
  }
  // A callback after the checkpoint's order, with state it changes at the epoch's end.
  void on_epoch_end(IRunner& runner) override { ended_ = runner.epoch; }
  std::map<std::string, std::string> state_dict() const override {
    return {{"ended", std::to_string(ended_)}};
  }
  std::vector<int64_t> saved_at_row;

 private:
  std::string logdir_;
  int64_t ended_ = 0;
};

// The checkpoint of an epoch is written after its log row: a run stopped between the two leaves a
// row that its resume drops and writes again, never a checkpoint whose epoch has no row. It holds
// what every callback's on_epoch_end left, the ones ordered after it too.
TEST(Runner, TheCheckpointFollowsTheEpochsLogRow) {
  const std::string logdir = fresh_dir("checkpoint_after_row");
  auto witness = std::make_shared<CheckpointWitness>(logdir);
  SupervisedRunner runner;
  runner.train({.model = testing::mlp(),
                .criterion = cross_entropy_loss,
                .loaders = {{"train", testing::loader(8, 4, false)},
                            {"valid", testing::loader(4, 4, false)}},
                .logdir = logdir,
                .num_epochs = 3,
                .engine = "cpu",
                .callbacks = {{"witness", witness}},
                .loggers = {{"witness", witness}}});
  EXPECT_EQ(witness->saved_at_row, (std::vector<int64_t>{0, 1, 2}));
  const Checkpoint last = load_checkpoint(logdir + "/last.ckpt");
  EXPECT_EQ(last.meta("checkpoint.epoch"), "3");
  EXPECT_EQ(last.meta("callback.witness.ended"), "3");
  std::filesystem::remove_all(logdir);
}

TEST(Runner, ModelFnBuildsTheModelAfterSeeding) {
  GeneratorState seen;
  SupervisedRunner runner;
  runner.train({.model_fn =
                    [&] {
                      seen = default_generator().state();
                      return testing::mlp();
                    },
                .loaders = {{"train", testing::loader(8, 4, false)}},
                .engine = "cpu",
                .seed = 77});
  EXPECT_EQ(seen, (GeneratorState{77, 0}));
}

// Samples whose only feature is their dataset index: (n, 1) f32 features, class-0 targets.
std::shared_ptr<data::TensorDataset> indexed_dataset(int64_t n) {
  return std::make_shared<data::TensorDataset>(arange(n, TensorOptions(DType::f32)).unsqueeze(1),
                                               zeros({n}, TensorOptions(DType::i64)));
}

// The dataset indices each training epoch visits, in the order its batches bring them.
class VisitRecorder : public ICallback {
 public:
  VisitRecorder() : ICallback(CallbackOrder::external) {}
  void on_batch_end(IRunner& runner) override {
    if (!runner.is_train_loader) return;
    for (const float index : to_vector<float>(runner.batch.at("features").reshape({-1})))
      visited[runner.epoch].push_back(static_cast<int64_t>(index));
  }
  std::map<int64_t, std::vector<int64_t>> visited;  // epoch -> indices
};

// Before each loader the runner gives its sampler set_epoch(epoch - 1), as a PyTorch loop gives
// DistributedSampler.set_epoch(epoch): every epoch visits the permutation the sampler defines
// for it, in a resumed run too (whose sampler is new and would otherwise repeat epoch 0's).
TEST(Runner, SamplersGetTheirEpochBeforeEachLoader) {
  constexpr int64_t kSamples = 12;
  const dist::DistributedSamplerOptions shuffled{.shuffle = true, .seed = 5};
  auto order_of_epoch = [&](int64_t epoch) {
    dist::DistributedSampler sampler(kSamples, 1, 0, shuffled);
    sampler.set_epoch(epoch);
    return sampler.epoch_indices();
  };
  ASSERT_NE(order_of_epoch(0), order_of_epoch(1));
  auto run = [&](const std::string& logdir, int64_t stop_after, bool resume) {
    auto recorder = std::make_shared<VisitRecorder>();
    Callbacks callbacks = {{"recorder", recorder}};
    if (stop_after > 0)
      callbacks.emplace_back("stop", std::make_shared<testing::StopAfterEpoch>(stop_after));
    SupervisedRunner runner;
    runner.train(
        {.model = nn::make<nn::Linear>(1, 3),
         .criterion = cross_entropy_loss,
         .loaders = {{"train",
                      std::make_shared<data::DataLoader>(
                          indexed_dataset(kSamples), data::DataLoaderOptions{.batch_size = 5},
                          std::make_shared<dist::DistributedSampler>(kSamples, 1, 0, shuffled))},
                     {"valid", std::make_shared<data::DataLoader>(
                                   indexed_dataset(4), data::DataLoaderOptions{.batch_size = 4})}},
         .logdir = logdir,
         .num_epochs = 3,
         .engine = "cpu",
         .callbacks = callbacks,
         .resume = resume ? logdir : ""});
    return recorder->visited;
  };
  const std::string logdir = fresh_dir("set_epoch");
  const auto straight = run(logdir, 0, false);
  ASSERT_EQ(straight.size(), 3u);
  for (int64_t epoch = 1; epoch <= 3; ++epoch)
    EXPECT_EQ(straight.at(epoch), order_of_epoch(epoch - 1)) << "epoch " << epoch;
  run(logdir, /*stop_after=*/1, false);
  const auto resumed = run(logdir, 0, /*resume=*/true);
  ASSERT_EQ(resumed.size(), 2u);
  EXPECT_EQ(resumed.at(2), order_of_epoch(1));
  EXPECT_EQ(resumed.at(3), order_of_epoch(2));
  std::filesystem::remove_all(logdir);
}

// A runner holding a batch, to call callbacks directly.
class BareRunner : public IRunner {
 public:
  int64_t get_stage_len(const std::string&) override { return 1; }
  Loaders get_loaders(const std::string&) override { return {}; }
  nn::ModulePtr get_model(const std::string&) override { return nullptr; }
  void handle_batch(const data::Batch&) override {}
};

// Catalyst's MetricHandler: improving by exactly min_delta counts, and so does a tie when
// min_delta is 0; less does not.
// An empty loader is an error that says why it is empty, not an epoch that trains nothing.
TEST(Runner, AnEmptyLoaderIsAnErrorThatSaysWhy) {
  SupervisedRunner runner;
  EXPECT_ERROR_WITH(
      runner.train(
          {.model = testing::mlp(/*dropout=*/false),
           .criterion = [](const Tensor& logits,
                           const Tensor& targets) { return cross_entropy(logits, targets); },
           .loaders = {{"train", std::make_shared<data::DataLoader>(
                                     testing::synthetic_dataset(6, 7),
                                     data::DataLoaderOptions{.batch_size = 8, .drop_last = true})}},
           .optimizer_fn =
               [](nn::Module& m) {
                 return std::make_shared<optim::SGD>(m.named_parameters(),
                                                     optim::SGDOptions{.lr = 0.1});
               }}),
      "loader 'train' has no batches (6 samples in batches of 8, the last incomplete one dropped)");
}

TEST(Runner, EarlyStoppingCountsAnImprovementOfExactlyMinDelta) {
  auto run = [](double min_delta, const std::vector<double>& accuracies) {
    BareRunner runner;
    EarlyStoppingCallback early_stopping(2, "valid", "accuracy", /*minimize=*/false, min_delta);
    int64_t stopped_after = 0;
    for (const double accuracy : accuracies) {
      runner.epoch_metrics = {{"valid", {{"accuracy", accuracy}}}};
      early_stopping.on_epoch_end(runner);
      ++stopped_after;
      if (runner.need_early_stop) break;
    }
    return stopped_after;
  };
  EXPECT_EQ(run(0.0, {0.5, 0.5, 0.5, 0.5}), 4) << "a tie is an improvement with min_delta 0";
  EXPECT_EQ(run(0.25, {0.5, 0.75, 1.0, 1.25}), 4) << "exactly min_delta is an improvement";
  EXPECT_EQ(run(0.25, {0.5, 0.625, 0.7, 0.72}), 3) << "less than min_delta is not";
}

// Patience counts bad epochs in a row: an improvement starts the count again. Accuracy that
// worsens every other epoch never stops a run with patience 2.
TEST(Runner, EarlyStoppingCountsOnlyBadEpochsInARow) {
  BareRunner runner;
  EarlyStoppingCallback early_stopping(2, "valid", "accuracy", /*minimize=*/false);
  int64_t epochs = 0;
  for (const double accuracy : {0.5, 0.4, 0.6, 0.5, 0.7, 0.6, 0.8, 0.7}) {
    runner.epoch_metrics = {{"valid", {{"accuracy", accuracy}}}};
    early_stopping.on_epoch_end(runner);
    ++epochs;
    if (runner.need_early_stop) break;
  }
  EXPECT_EQ(epochs, 8);
  EXPECT_FALSE(runner.need_early_stop);
}

// The state a checkpoint keeps holds the best value itself: a callback resumed from it judges the
// next epoch against that value (0.7 after a best of 0.9 is a bad epoch, and patience 1 stops).
TEST(Runner, EarlyStoppingResumesWithTheBestValue) {
  BareRunner runner;
  EarlyStoppingCallback before(1, "valid", "accuracy", /*minimize=*/false);
  for (const double accuracy : {0.5, 0.9}) {
    runner.epoch_metrics = {{"valid", {{"accuracy", accuracy}}}};
    before.on_epoch_end(runner);
  }
  ASSERT_FALSE(runner.need_early_stop);
  EarlyStoppingCallback resumed(1, "valid", "accuracy", /*minimize=*/false);
  resumed.load_state_dict(before.state_dict());
  EXPECT_EQ(resumed.state_dict(), before.state_dict());
  runner.epoch_metrics = {{"valid", {{"accuracy", 0.7}}}};
  resumed.on_epoch_end(runner);
  EXPECT_TRUE(runner.need_early_stop);
}

TEST(Runner, AccuracyBreaksTiesAsArgmax) {
  BareRunner runner;
  // Row 0: the target (1) ties with class 0, which ranks first; row 1: it ties with class 2, after.
  runner.batch["logits"] = from_vector(std::vector<float>{1, 1, 0, 0, 2, 2}, {2, 3});
  runner.batch["targets"] = from_vector(std::vector<int64_t>{1, 1}, {2}, DType::i64);
  AccuracyCallback accuracy("logits", "targets", {1, 2});
  accuracy.on_batch_end(runner);
  EXPECT_DOUBLE_EQ(runner.batch_metrics.at("accuracy").item<double>(), 0.5);
  EXPECT_DOUBLE_EQ(runner.batch_metrics.at("accuracy02").item<double>(), 1.0);
  EXPECT_EQ(argmax(runner.batch["logits"], 1).select(0, 0).item<int64_t>(), 0);
  runner.batch["logits"] = from_vector(std::vector<float>{1, 2, 3}, {3});
  EXPECT_ERROR_WITH(accuracy.on_batch_end(runner), "expected logits (N, C) and targets (N)");
  runner.batch.erase("logits");
  EXPECT_ERROR_WITH(accuracy.on_batch_end(runner), "the batch has no 'logits'", "targets");
}

// The metric stays a 0-d f64 tensor on the logits' device (a CUDA one is averaged there, without
// a host synchronisation per batch), and a batch with another class count rebuilds the cached
// class indices.
TEST(Runner, AccuracyIsA0dTensorOnTheLogitsDevice) {
  BareRunner runner;
  AccuracyCallback accuracy("logits", "targets", {1});
  runner.batch["logits"] = from_vector(std::vector<float>{0, 3, 1, 2, 0, 1}, {2, 3});
  runner.batch["targets"] = from_vector(std::vector<int64_t>{1, 2}, {2}, DType::i64);
  accuracy.on_batch_end(runner);
  const Tensor value = runner.batch_metrics.at("accuracy");
  EXPECT_EQ(value.dim(), 0);
  EXPECT_EQ(value.dtype(), DType::f64);
  EXPECT_EQ(value.device(), Device::cpu());
  EXPECT_DOUBLE_EQ(value.item<double>(), 0.5);
  // Five classes now; the target (4) is the largest of its row, and ties class 0 in the other.
  runner.batch["logits"] = from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 1, 1, 1, 5}, {2, 5});
  runner.batch["targets"] = from_vector(std::vector<int64_t>{4, 4}, {2}, DType::i64);
  accuracy.on_batch_end(runner);
  EXPECT_DOUBLE_EQ(runner.batch_metrics.at("accuracy").item<double>(), 0.5);
}

// Records each train batch's loss and size as the runner sees them.
class LossRecorder : public ICallback {
 public:
  LossRecorder() : ICallback(CallbackOrder::external) {}
  void on_batch_end(IRunner& runner) override {
    if (!runner.is_train_loader) return;
    losses.push_back(runner.batch_metrics.at("loss").item<double>());
    sizes.push_back(static_cast<double>(runner.batch_size));
  }
  std::vector<double> losses, sizes;
};

// The loader's loss is the batch-size-weighted mean of the batches' losses, with a smaller last
// batch, summed in the same order and precision as on the host (the sums now stay on the
// metric's device until the loader ends).
TEST(Runner, LoaderMetricsAreBatchSizeWeightedMeans) {
  manual_seed(3);
  SupervisedRunner runner;
  auto recorder = std::make_shared<LossRecorder>();
  runner.train({.model = testing::mlp(false),
                .criterion = cross_entropy_loss,
                .loaders = {{"train", testing::loader(22, 8, true)}},  // batches of 8, 8, 6
                .num_epochs = 1,
                .engine = "cpu",
                .callbacks = {{"recorder", recorder}},
                .optimizer_fn = [](nn::Module& m) {
                  return std::make_shared<optim::SGD>(m.named_parameters(),
                                                      optim::SGDOptions{.lr = 0.1});
                }});
  ASSERT_EQ(recorder->losses.size(), 3u);
  EXPECT_EQ(recorder->sizes, (std::vector<double>{8, 8, 6}));
  double weighted_sum = recorder->losses[0] * recorder->sizes[0];
  for (size_t i = 1; i < recorder->losses.size(); ++i)
    weighted_sum = weighted_sum + recorder->losses[i] * recorder->sizes[i];
  EXPECT_DOUBLE_EQ(runner.epoch_metric("train", "loss"), weighted_sum / 22.0);
  EXPECT_EQ(runner.epoch_metric("train", "loss"), weighted_sum / 22.0);  // bit for bit
  EXPECT_EQ(runner.epoch_metric("train", "lr"), 0.1);
}

// Stands for a first-use set-up (cuDNN's algorithm choices, say): the first train batch of the
// first epoch takes `delay` longer, and then the second batch of the second epoch (a slow batch
// that is not the first). Records each train loader's first_batch_seconds and seconds.
class SlowFirstBatch : public ICallback {
 public:
  explicit SlowFirstBatch(std::chrono::milliseconds delay)
      : ICallback(CallbackOrder::external), delay_(delay) {}
  void on_batch_end(IRunner& runner) override {
    if (runner.is_train_loader && runner.loader_batch_step == runner.epoch)
      std::this_thread::sleep_for(delay_);
  }
  void on_loader_end(IRunner& runner) override {
    if (!runner.is_train_loader) return;
    first_batch.push_back(runner.loader_metrics.at("first_batch_seconds"));
    loader.push_back(runner.loader_metrics.at("seconds"));
  }
  std::vector<double> first_batch, loader;

 private:
  std::chrono::milliseconds delay_;
};

// first_batch_seconds holds what the first batch cost, so that a set-up paid once shows apart
// from the epoch's steady rate.
TEST(Runner, FirstBatchSecondsHoldTheFirstBatchsSetUp) {
  manual_seed(3);
  SupervisedRunner runner;
  auto slow = std::make_shared<SlowFirstBatch>(std::chrono::milliseconds(300));
  runner.train({.model = testing::mlp(false),
                .criterion = cross_entropy_loss,
                .loaders = {{"train", testing::loader(24, 8, true)}},
                .num_epochs = 2,
                .engine = "cpu",
                .callbacks = {{"slow", slow}},
                .optimizer_fn = [](nn::Module& m) {
                  return std::make_shared<optim::SGD>(m.named_parameters(),
                                                      optim::SGDOptions{.lr = 0.1});
                }});
  ASSERT_EQ(slow->first_batch.size(), 2u);
  EXPECT_GE(slow->first_batch[0], 0.3);
  EXPECT_LE(slow->first_batch[0], slow->loader[0]);
  EXPECT_GT(slow->first_batch[1], 0.0);
  EXPECT_LT(slow->first_batch[1], 0.3);
  EXPECT_GE(slow->loader[1], 0.3);
}

// A metric of several numbers is refused at the batch that makes it, naming the metric.
class VectorMetric : public ICallback {
 public:
  VectorMetric() : ICallback(CallbackOrder::metric) {}
  void on_batch_end(IRunner& runner) override { runner.batch_metrics["pair"] = zeros({2}); }
};

TEST(Runner, AMetricMustHoldOneNumber) {
  SupervisedRunner runner;
  EXPECT_ERROR_WITH(runner.train({.model = testing::mlp(false),
                                  .loaders = {{"train", testing::loader(8, 4, false)}},
                                  .engine = "cpu",
                                  .callbacks = {{"pair", std::make_shared<VectorMetric>()}}}),
                    "batch metric 'pair' should hold one number", "(2)");
}

TEST(Runner, BadInputSaysWhatToDo) {
  SupervisedRunner runner;
  EXPECT_ERROR_WITH(runner.train({}), "a model (or model_fn) is required");
  EXPECT_ERROR_WITH(
      runner.train({.model = testing::mlp(), .model_fn = [] { return testing::mlp(); }}),
      "pass model or model_fn, not both");
  EXPECT_ERROR_WITH(runner.train({.model = testing::mlp()}), "loaders is empty");
  EXPECT_ERROR_WITH(runner.train({.model = testing::mlp(),
                                  .loaders = {{"train", testing::loader(8, 4, false)}},
                                  .logdir = fresh_dir("bad")}),
                    "valid_loader 'valid' is not one of the loaders {train}");
  EXPECT_ERROR_WITH(runner.train({.model = testing::mlp(),
                                  .loaders = {{"train", testing::loader(8, 4, false)}},
                                  .engine = "ddp"}),
                    "engine 'ddp'", "mpirun -np 2");
  // An O2 engine needs the optimizer built after the conversion.
  auto model = testing::mlp();
  auto sgd = std::make_shared<optim::SGD>(model->named_parameters(), optim::SGDOptions{});
  EXPECT_ERROR_WITH(runner.train({.model = model,
                                  .criterion = cross_entropy_loss,
                                  .optimizer = sgd,
                                  .loaders = {{"train", testing::loader(8, 4, false)}},
                                  .engine = "o2"}),
                    "without f32 master weights", "optimizer_fn");
  EXPECT_ERROR_WITH(runner.train({.model = testing::mlp(),
                                  .loaders = {{"train", testing::loader(8, 4, false)},
                                              {"valid", testing::loader(8, 4, false)}},
                                  .logdir = fresh_dir("bad2"),
                                  .engine = "cpu",
                                  .resume = "/nonexistent/last.ckpt"}),
                    "no checkpoint at '/nonexistent/last.ckpt'");
  // A logdir stands for its last checkpoint.
  const std::string empty_logdir = fresh_dir("bad_resume");
  const std::string expected = "no checkpoint at '" + empty_logdir + "/last.ckpt'";
  EXPECT_ERROR_WITH(runner.train({.model = testing::mlp(),
                                  .loaders = {{"train", testing::loader(8, 4, false)},
                                              {"valid", testing::loader(8, 4, false)}},
                                  .logdir = fresh_dir("bad4"),
                                  .engine = "cpu",
                                  .resume = empty_logdir}),
                    expected.c_str());
  // A metric nobody computes.
  EXPECT_ERROR_WITH(runner.train({.model = testing::mlp(),
                                  .criterion = cross_entropy_loss,
                                  .loaders = {{"train", testing::loader(8, 4, false)},
                                              {"valid", testing::loader(8, 4, false)}},
                                  .logdir = fresh_dir("bad3"),
                                  .valid_metric = "accuracy",
                                  .engine = "cpu"}),
                    "no metric 'accuracy' for loader 'valid'", "valid/loss");
  for (const std::string name : {"bad", "bad2", "bad3", "bad4", "bad_resume"})
    std::filesystem::remove_all(fresh_dir(name));
  EXPECT_ERROR_WITH(AccuracyCallback("logits", "targets", {0}), "topk values must be 1 or more");
  EXPECT_ERROR_WITH(OptimizerCallback({.accumulation_steps = 0}), "accumulation_steps");
}

}  // namespace
}  // namespace ember::engines
