// ProgressBarCallback: what it prints for a tiny run, in lines and live modes, for which loaders
// and on which ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "engines/callbacks.h"
#include "engines/device_engines.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

Tensor cross_entropy_loss(const Tensor& logits, const Tensor& targets) {
  return cross_entropy(logits, targets);
}

// Each training batch's loss, as the runner sees it.
class LossRecorder : public ICallback {
 public:
  LossRecorder() : ICallback(CallbackOrder::external) {}
  void on_batch_end(IRunner& runner) override {
    if (runner.is_train_loader) losses.push_back(runner.batch_metrics.at("loss").item<double>());
  }
  std::vector<double> losses;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);)
    lines.push_back(line);
  return lines;
}

// The fields of a progress line, "epoch E/N [bar] D/B  loss L  S img/s  ETA m:ss". (Parsed by
// hand: GCC 12's std::regex trips -Wmaybe-uninitialized in the sanitizer build.)
struct ProgressLine {
  std::string epoch, bar, done, loss;  // "E/N", "[...]", "D/B", "L"
};

ProgressLine parse_progress_line(const std::string& line) {
  ProgressLine fields;
  const size_t open = line.find('['), close = line.find(']');
  if (line.rfind("epoch ", 0) != 0 || open == std::string::npos || close == std::string::npos ||
      close < open) {
    ADD_FAILURE() << "not a progress line: " << line;
    return fields;
  }
  fields.epoch = line.substr(6, open - 7);
  fields.bar = line.substr(open, close - open + 1);
  std::istringstream rest(line.substr(close + 1));
  std::string loss_word, speed, img_s, eta_word, eta;
  rest >> fields.done >> loss_word >> fields.loss >> speed >> img_s >> eta_word >> eta;
  const bool laid_out = loss_word == "loss" && img_s == "img/s" && eta_word == "ETA" &&
                        eta.find(':') != std::string::npos &&
                        line.find("  loss ") != std::string::npos &&
                        line.find("  ETA ") != std::string::npos;
  EXPECT_TRUE(laid_out) << "fields out of place in: " << line;
  return fields;
}

// "[========>               ]": 24 columns, `done` of `total` filled, '>' at the front.
std::string bar(int64_t done, int64_t total) {
  const auto filled = static_cast<size_t>(24 * done / total);
  std::string text(filled, '=');
  if (filled < 24) text += '>';
  text.resize(24, ' ');
  return "[" + text + "]";
}

// Trains `epochs` epochs over a train loader of `train_batches` batches of 4 and a valid loader
// of one, with a progress bar writing to `out`; returns the training batches' losses.
std::vector<double> run_with_progress(std::ostream& out, Progress mode, bool all_loaders,
                                      int64_t train_batches, int64_t epochs) {
  manual_seed(3);
  auto recorder = std::make_shared<LossRecorder>();
  SupervisedRunner runner;
  runner.train(
      {.model = testing::mlp(false),
       .criterion = cross_entropy_loss,
       .loaders = {{"train", testing::loader(4 * train_batches, 4, false)},
                   {"valid", testing::loader(4, 4, false, 11)}},
       .num_epochs = epochs,
       .engine = "cpu",
       .callbacks = {{"recorder", recorder},
                     {"progress", std::make_shared<ProgressBarCallback>(out, mode, all_loaders)}},
       .optimizer_fn = [](nn::Module& m) {
         return std::make_shared<optim::SGD>(m.named_parameters(), optim::SGDOptions{.lr = 0.1});
       }});
  return recorder->losses;
}

// A training loader of 3 batches: a line per batch (each is a new tenth), with the epoch, the bar,
// the batches done, the running loss of the loader so far, the speed and the time left; nothing
// for the valid loader.
TEST(ProgressBar, LinesShowEpochBarBatchesRunningLossSpeedAndEta) {
  std::ostringstream out;
  const std::vector<double> losses = run_with_progress(out, Progress::lines, false, 3, 2);
  ASSERT_EQ(losses.size(), 6u);
  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 6u) << out.str();
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    const ProgressLine fields = parse_progress_line(lines[i]);
    const int64_t epoch = static_cast<int64_t>(i / 3) + 1, done = static_cast<int64_t>(i % 3) + 1;
    EXPECT_EQ(fields.epoch, std::to_string(epoch) + "/2");
    EXPECT_EQ(fields.bar, bar(done, 3));
    EXPECT_EQ(fields.done, std::to_string(done) + "/3");
    // Batches of equal size: the running loss is the mean of this epoch's losses so far.
    double sum = 0;
    for (size_t batch = i - static_cast<size_t>(done - 1); batch <= i; ++batch)
      sum += losses[batch];
    char expected[32];
    std::snprintf(expected, sizeof(expected), "%.4f", sum / static_cast<double>(done));
    EXPECT_EQ(fields.loss, expected);
  }
  // The last line of an epoch has nothing left to wait for.
  EXPECT_NE(lines[2].find("ETA 0:00"), std::string::npos);
}

// A longer loader: a line when the tenth of the loader done changes (the first batch starts the
// 0th tenth) and at the last batch, not one per batch.
TEST(ProgressBar, LinesComeAtEachTenthOfALongLoader) {
  std::ostringstream out;
  run_with_progress(out, Progress::lines, false, 25, 1);
  std::vector<int64_t> done;
  for (const std::string& line : lines_of(out.str())) {
    const ProgressLine fields = parse_progress_line(line);
    ASSERT_EQ(fields.done.substr(fields.done.find('/')), "/25") << line;
    done.push_back(std::stoll(fields.done));
  }
  EXPECT_EQ(done, (std::vector<int64_t>{1, 3, 5, 8, 10, 13, 15, 18, 20, 23, 25}));
}

TEST(ProgressBar, AllLoadersNameTheLoader) {
  std::ostringstream out;
  run_with_progress(out, Progress::lines, /*all_loaders=*/true, 2, 1);
  const std::vector<std::string> lines = lines_of(out.str());
  ASSERT_EQ(lines.size(), 3u) << out.str();
  EXPECT_EQ(lines[0].rfind("epoch 1/1 train " + bar(1, 2) + " 1/2  loss ", 0), 0u) << lines[0];
  EXPECT_EQ(lines[1].rfind("epoch 1/1 train " + bar(2, 2) + " 2/2  loss ", 0), 0u) << lines[1];
  EXPECT_EQ(lines[2].rfind("epoch 1/1 valid " + bar(1, 1) + " 1/1  loss ", 0), 0u) << lines[2];
}

// Live: one line redrawn in place ("\r" ... erase to the end of the line), no newline, and
// erased after the loader's last batch.
TEST(ProgressBar, LiveRedrawsOneLineAndClearsIt) {
  std::ostringstream out;
  run_with_progress(out, Progress::live, false, 3, 1);
  const std::string text = out.str();
  EXPECT_EQ(text.find('\n'), std::string::npos);
  ASSERT_EQ(text.rfind("\repoch 1/1 " + bar(1, 3) + " 1/3  loss ", 0), 0u) << text;
  const std::string last_draw = "\repoch 1/1 " + bar(3, 3) + " 3/3  loss ";
  const size_t last = text.rfind(last_draw);
  ASSERT_NE(last, std::string::npos) << text;
  const std::string tail = text.substr(last);
  const std::string end = "\x1b[K\r\x1b[K";  // the last draw, then the line erased
  ASSERT_GE(tail.size(), end.size());
  EXPECT_EQ(tail.substr(tail.size() - end.size()), end);
  EXPECT_EQ(std::count(tail.begin(), tail.end(), '\r'), 2);
}

// A process group of two in which this process is rank 1; the progress bar only asks the rank.
class RankOneOfTwo : public dist::ProcessGroup {
 public:
  RankOneOfTwo() : ProcessGroup(1, 2, "rank-one") {}
  const char* backend() const override { return "none"; }
  dist::WorkPtr allreduce(const Tensor&, dist::ReduceOp) override { EMBER_FAIL("unused"); }
  dist::WorkPtr broadcast(const Tensor&, int) override { EMBER_FAIL("unused"); }
  dist::WorkPtr allgather(const Tensor&, const Tensor&) override { EMBER_FAIL("unused"); }
  dist::WorkPtr reduce_scatter(const Tensor&, const Tensor&, dist::ReduceOp) override {
    EMBER_FAIL("unused");
  }
  dist::WorkPtr barrier() override { EMBER_FAIL("unused"); }
  dist::WorkPtr send(const Tensor&, int, int) override { EMBER_FAIL("unused"); }
  dist::WorkPtr recv(const Tensor&, int, int) override { EMBER_FAIL("unused"); }
  std::shared_ptr<ProcessGroup> split(int, int) override { return nullptr; }
};

class RankOneEngine : public DeviceEngine {
 public:
  dist::ProcessGroupPtr process_group() const override { return group_; }

 private:
  dist::ProcessGroupPtr group_ = std::make_shared<RankOneOfTwo>();
};

// A runner in the middle of a training loader of 2 batches, to call the callback directly.
class MidLoaderRunner : public IRunner {
 public:
  explicit MidLoaderRunner(EnginePtr with_engine) {
    engine = std::move(with_engine);
    stage_len = 1;
    epoch = 1;
    loader_key = "train";
    is_train_loader = true;
    loader_batch_len = 2;
  }
  int64_t get_stage_len(const std::string&) override { return 1; }
  Loaders get_loaders(const std::string&) override { return {}; }
  nn::ModulePtr get_model(const std::string&) override { return nullptr; }
  void handle_batch(const data::Batch&) override {}
};

// What a rank prints for a loader of 2 batches.
std::string printed_on(const EnginePtr& engine) {
  std::ostringstream out;
  ProgressBarCallback progress(out, Progress::lines);
  MidLoaderRunner runner(engine);
  progress.on_loader_start(runner);
  for (int64_t done = 1; done <= 2; ++done) {
    runner.loader_batch_step = done;
    runner.batch_size = 4;
    runner.loader_sample_step = 4 * done;
    progress.on_batch_end(runner);
  }
  return out.str();
}

TEST(ProgressBar, OnlyTheMasterProcessPrints) {
  EXPECT_EQ(lines_of(printed_on(std::make_shared<DeviceEngine>())).size(), 2u);
  EXPECT_EQ(printed_on(std::make_shared<RankOneEngine>()), "");
}

}  // namespace
}  // namespace ember::engines
