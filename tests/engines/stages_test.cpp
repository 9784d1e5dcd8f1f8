// A run of several stages (IRunner::stages()), as Catalyst's: the logs keep every stage's rows and
// name the stage, checkpoints record it, and a run interrupted anywhere and resumed ends as the
// straight run does (weights, checkpoints, log rows).
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <sstream>

#include "engines/callbacks.h"
#include "engines/device_engines.h"
#include "engines/loggers.h"
#include "tests/common/expect_error.h"
#include "tests/engines/event_files.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

using testing::checkpoint_files;
using testing::fresh_dir;
using testing::read_file;

// Throws at the start of the epoch after global epoch `last`: the process dies there (the
// checkpoint and the log rows of `last` are written, nothing after).
class InterruptAfter : public ICallback {
 public:
  explicit InterruptAfter(int64_t last) : ICallback(CallbackOrder::external), last_(last) {}
  void on_epoch_start(IRunner& runner) override {
    EMBER_CHECK(runner.global_epoch <= last_, "interrupted");
  }

 private:
  int64_t last_;
};

// "warmup": up to 3 epochs of SGD, stopped early after its 2nd (no loss improves by 10), then
// "finetune": 3 epochs of Adam with a StepLR, on the same model (the warmup's weights carry on).
// Dropout and shuffled loaders: a resume must restore the RNG and the samplers' epochs.
class TwoStageRunner : public IRunner {
 public:
  TwoStageRunner(std::string logdir, std::string resume, int64_t interrupt_after = 0)
      : logdir_(std::move(logdir)), resume_(std::move(resume)), interrupt_after_(interrupt_after) {}

  EnginePtr get_engine() override { return std::make_shared<DeviceEngine>(); }
  Loggers get_loggers() override {
    return {{"console", std::make_shared<ConsoleLogger>(console)},
            {"csv", std::make_shared<CSVLogger>(logdir_)},
            {"jsonl", std::make_shared<JsonlLogger>(logdir_)},
            {"tensorboard", std::make_shared<TensorboardLogger>(logdir_)}};
  }
  std::vector<std::string> stages() override { return {"warmup", "finetune"}; }
  int64_t get_stage_len(const std::string&) override { return 3; }
  Loaders get_loaders(const std::string&) override {
    return {{"train", testing::loader(32, 8, /*shuffle=*/true)},
            {"valid", testing::loader(16, 8, false, 11)}};
  }
  nn::ModulePtr get_model(const std::string&) override {
    if (!the_model_) the_model_ = testing::mlp();
    return the_model_;
  }
  Criterion get_criterion(const std::string&) override {
    return
        [](const Tensor& logits, const Tensor& targets) { return cross_entropy(logits, targets); };
  }
  std::shared_ptr<optim::Optimizer> get_optimizer(const std::string& stage_name,
                                                  nn::Module& placed) override {
    if (stage_name == "warmup")
      return std::make_shared<optim::SGD>(placed.named_parameters(), optim::SGDOptions{.lr = 0.1});
    return std::make_shared<optim::Adam>(placed.named_parameters(), optim::AdamOptions{.lr = 1e-2});
  }
  std::shared_ptr<optim::LRScheduler> get_scheduler(const std::string& stage_name,
                                                    optim::Optimizer& built) override {
    if (stage_name == "warmup") return nullptr;
    return std::make_shared<optim::StepLR>(built, 1, 0.5);
  }
  Callbacks get_callbacks(const std::string& stage_name) override {
    Callbacks callbacks = {{"criterion", std::make_shared<CriterionCallback>()},
                           {"backward", std::make_shared<BackwardCallback>()},
                           {"optimizer", std::make_shared<OptimizerCallback>()},
                           {"scheduler", std::make_shared<SchedulerCallback>()},
                           {"checkpoint", std::make_shared<CheckpointCallback>(CheckpointOptions{
                                              .logdir = logdir_, .topk = 2, .resume = resume_})}};
    if (stage_name == "warmup")
      callbacks.emplace_back("early_stopping", std::make_shared<EarlyStoppingCallback>(
                                                   1, "valid", "loss", true, /*min_delta=*/10.0));
    if (interrupt_after_ > 0)
      callbacks.emplace_back("interrupt", std::make_shared<InterruptAfter>(interrupt_after_));
    return callbacks;
  }
  std::ostringstream console;

  void handle_batch(const data::Batch& input) override {
    batch["features"] = input.inputs;
    batch["targets"] = input.targets;
    batch["logits"] = model->forward(input.inputs);
  }

 private:
  std::string logdir_, resume_;
  int64_t interrupt_after_;
  nn::ModulePtr the_model_;
};

// Records the experiment's and the stages' starts and ends.
class StartsAndEnds : public ICallback {
 public:
  StartsAndEnds() : ICallback(CallbackOrder::external) {}
  void on_experiment_start(IRunner&) override { events.push_back("experiment_start"); }
  void on_stage_start(IRunner& runner) override { events.push_back("stage_start " + runner.stage); }
  void on_stage_end(IRunner& runner) override { events.push_back("stage_end " + runner.stage); }
  void on_experiment_end(IRunner&) override { events.push_back("experiment_end"); }
  std::vector<std::string> events;
};

// TwoStageRunner with one StartsAndEnds callback in both stages.
class RecordedTwoStageRunner : public TwoStageRunner {
 public:
  using TwoStageRunner::TwoStageRunner;
  Callbacks get_callbacks(const std::string& stage_name) override {
    Callbacks callbacks = TwoStageRunner::get_callbacks(stage_name);
    callbacks.emplace_back("recorder", recorder);
    return callbacks;
  }
  std::shared_ptr<StartsAndEnds> recorder = std::make_shared<StartsAndEnds>();
};

// The file's lines without the columns (CSV) or members (JSON lines) that time the run.
std::vector<std::string> untimed_lines(const std::string& path) {
  auto timed = [](const std::string& name) {
    return name.find("_seconds") != std::string::npos ||
           name.find("_throughput") != std::string::npos;
  };
  const bool csv = path.ends_with(".csv");
  std::istringstream file(read_file(path));
  std::vector<std::string> lines;
  std::vector<bool> keep_column;
  for (std::string line; std::getline(file, line);) {
    // CSV cells split at ',', JSON members at ", " (no value here holds either).
    std::vector<std::string> cells;
    const std::string separator = csv ? "," : ", ";
    for (size_t from = 0;;) {
      const size_t to = line.find(separator, from);
      cells.push_back(line.substr(from, to - from));
      if (to == std::string::npos) break;
      from = to + separator.size();
    }
    if (csv && keep_column.empty()) {
      for (const std::string& name : cells)
        keep_column.push_back(!timed(name));
    }
    std::ostringstream kept;
    for (size_t i = 0; i < cells.size(); ++i) {
      if (csv ? i < keep_column.size() && keep_column[i] : !timed(cells[i]))
        kept << cells[i] << separator;
    }
    lines.push_back(kept.str());
  }
  return lines;
}

// step -> the scalars of that step over every event file of the logdir (timings left out); a step
// written twice fails the test.
std::map<int64_t, std::map<std::string, float>> scalars_by_step(const std::string& logdir) {
  std::map<int64_t, std::map<std::string, float>> steps;
  for (const std::string& path : testing::event_files(logdir)) {
    for (const testing::Event& event : testing::read_events(path)) {
      if (event.scalars.empty()) continue;
      EXPECT_FALSE(steps.count(event.step)) << "step " << event.step << " written twice";
      for (const auto& [tag, value] : event.scalars) {
        if (tag.find("seconds") == std::string::npos && tag.find("throughput") == std::string::npos)
          steps[event.step][tag] = value;
      }
    }
  }
  return steps;
}

// As Catalyst's: the experiment starts once, before the first stage, and ends once, after the
// last; a callback in both stages sees each stage start and end.
TEST(Stages, TheExperimentStartsAndEndsOnceAroundTheStages) {
  const std::string logdir = fresh_dir("stages_starts_and_ends");
  RecordedTwoStageRunner runner(logdir, "");
  runner.run();
  EXPECT_EQ(
      runner.recorder->events,
      (std::vector<std::string>{"experiment_start", "stage_start warmup", "stage_end warmup",
                                "stage_start finetune", "stage_end finetune", "experiment_end"}));
  std::filesystem::remove_all(logdir);
}

TEST(Stages, LogsAndCheckpointsNameTheStage) {
  const std::string logdir = fresh_dir("stages_straight_names");
  TwoStageRunner runner(logdir, "");
  runner.run();
  EXPECT_EQ(runner.stage, "finetune");
  EXPECT_EQ(runner.stage_index, 1);
  EXPECT_EQ(runner.num_stages, 2);
  EXPECT_EQ(runner.epoch, 3);
  EXPECT_EQ(runner.global_epoch, 5);    // warmup stopped after 2 of its 3, then 3
  EXPECT_EQ(runner.batch_step, 3 * 4);  // this stage's: 3 epochs of 32 samples in batches of 8

  // Both stages' rows: the global epoch first, then the stage and its epoch.
  const std::vector<std::string> csv = untimed_lines(logdir + "/metrics.csv");
  ASSERT_EQ(csv.size(), 6u);
  EXPECT_EQ(csv[0], "epoch,stage,stage_epoch,train_loss,train_lr,valid_loss,");
  const std::vector<std::string> row_starts = {"1,warmup,1,", "2,warmup,2,", "3,finetune,1,",
                                               "4,finetune,2,", "5,finetune,3,"};
  for (size_t row = 0; row < row_starts.size(); ++row)
    EXPECT_EQ(csv[row + 1].rfind(row_starts[row], 0), 0u) << csv[row + 1];
  const std::vector<std::string> jsonl = untimed_lines(logdir + "/metrics.jsonl");
  ASSERT_EQ(jsonl.size(), 5u);
  EXPECT_EQ(jsonl[0].rfind("{\"epoch\": 1, \"stage\": \"warmup\", \"stage_epoch\": 1, ", 0), 0u)
      << jsonl[0];
  EXPECT_EQ(jsonl[2].rfind("{\"epoch\": 3, \"stage\": \"finetune\", \"stage_epoch\": 1, ", 0), 0u)
      << jsonl[2];
  EXPECT_NE(runner.console.str().find("stage warmup epoch 2/3  train: loss "), std::string::npos)
      << runner.console.str();
  EXPECT_NE(runner.console.str().find("stage finetune epoch 3/3  train: loss "), std::string::npos);
  // TensorBoard steps go on across the stages.
  const auto steps = scalars_by_step(logdir);
  ASSERT_EQ(steps.size(), 5u);
  EXPECT_EQ(steps.begin()->first, 1);
  EXPECT_EQ(steps.rbegin()->first, 5);

  const Checkpoint last = load_checkpoint(logdir + "/last.ckpt");
  EXPECT_EQ(last.meta("checkpoint.stage"), "finetune");
  EXPECT_EQ(last.meta("checkpoint.stage_index"), "1");
  EXPECT_EQ(last.meta("checkpoint.epoch"), "3");
  EXPECT_EQ(last.meta("checkpoint.global_epoch"), "5");
  // Each stage keeps its own top 2, under its name.
  const std::set<std::string> files = checkpoint_files(logdir);
  EXPECT_EQ(std::count_if(files.begin(), files.end(),
                          [](const std::string& name) { return name.starts_with("warmup."); }),
            2);
  EXPECT_EQ(std::count_if(files.begin(), files.end(),
                          [](const std::string& name) { return name.starts_with("finetune."); }),
            2);
  std::filesystem::remove_all(logdir);
}

// Interrupted after each global epoch in turn: within the warmup, at the warmup's early stop
// (the stage boundary: the warmup must not run its 3rd epoch), and within the finetune stage
// (the warmup must be skipped, not reloaded or rerun).
TEST(Stages, ResumedRunEndsAsTheStraightRun) {
  const std::string straight = fresh_dir("stages_straight");
  TwoStageRunner(straight, "").run();
  const auto straight_steps = scalars_by_step(straight);
  for (int64_t interrupt_after = 1; interrupt_after <= 4; ++interrupt_after) {
    SCOPED_TRACE(interrupt_after);
    const std::string resumed = fresh_dir("stages_resumed");
    TwoStageRunner interrupted(resumed, "", interrupt_after);
    EXPECT_ERROR_WITH(interrupted.run(), "interrupted");
    EXPECT_EQ(load_checkpoint(resumed + "/last.ckpt").meta("checkpoint.global_epoch"),
              std::to_string(interrupt_after));
    TwoStageRunner continued(resumed, resumed);
    continued.run();
    EXPECT_EQ(continued.global_epoch, 5);

    // The same weights, optimizer, scheduler, RNG and best lists: the same checkpoint files.
    EXPECT_EQ(checkpoint_files(resumed), checkpoint_files(straight));
    for (const std::string& name : checkpoint_files(straight))
      EXPECT_EQ(read_file(resumed + "/" + name), read_file(straight + "/" + name)) << name;
    // The same rows (every epoch once), timings aside.
    for (const std::string file : {"/metrics.csv", "/metrics.jsonl"})
      EXPECT_EQ(untimed_lines(resumed + file), untimed_lines(straight + file)) << file;
    EXPECT_EQ(scalars_by_step(resumed), straight_steps);
    std::filesystem::remove_all(resumed);
  }
  std::filesystem::remove_all(straight);
}

// Stage names tell checkpoints apart; a checkpoint from other stages is refused.
class NamedStagesRunner : public TwoStageRunner {
 public:
  NamedStagesRunner(std::vector<std::string> names, std::string logdir, std::string resume)
      : TwoStageRunner(std::move(logdir), std::move(resume)), names_(std::move(names)) {}
  std::vector<std::string> stages() override { return names_; }

 private:
  std::vector<std::string> names_;
};

TEST(Stages, StageNamesMustDifferAndMatchOnResume) {
  const std::string logdir = fresh_dir("stages_names");
  NamedStagesRunner twice({"warmup", "warmup"}, logdir, "");
  EXPECT_ERROR_WITH(twice.run(), "stages() names 'warmup' twice (stages 1 and 2)");
  TwoStageRunner in_warmup(logdir, "", /*interrupt_after=*/1);
  EXPECT_ERROR_WITH(in_warmup.run(), "interrupted");
  NamedStagesRunner renamed({"pretrain", "finetune"}, logdir, logdir);
  EXPECT_ERROR_WITH(renamed.run(), "was made in stage 'warmup'",
                    "this run's stage 1 is 'pretrain'");
  TwoStageRunner in_finetune(logdir, "", /*interrupt_after=*/3);
  EXPECT_ERROR_WITH(in_finetune.run(), "interrupted");
  NamedStagesRunner one_stage({"warmup"}, logdir, logdir);
  EXPECT_ERROR_WITH(one_stage.run(), "was made in stage 2 ('finetune')", "this run has 1 stage(s)");
  std::filesystem::remove_all(logdir);
}

}  // namespace
}  // namespace ember::engines
