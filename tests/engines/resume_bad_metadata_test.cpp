// Resuming from a checkpoint whose checksums are right but whose values are not: a file edited by
// hand, or written by another program. Every metadata value is replaced in turn by text that ember
// never writes there. The resume then either works (a learning rate of 1.5 is a learning rate) or
// throws an ember::Error naming the value; it never throws another exception (std::stoll's bare
// "stoll") and never runs into undefined behaviour (the sanitizer build runs this test too).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <typeinfo>
#include <vector>

#include "engines/callbacks.h"
#include "engines/factory.h"
#include "runtime/io/checkpoint.h"
#include "tests/engines/fixtures.h"

namespace ember::engines {
namespace {

// Two epochs of the fixtures' MLP with every piece of state a checkpoint carries on one process:
// Adam, a StepLR, an fp16 GradScaler (the AMP engine), early stopping and the best-k list.
void run(const std::string& logdir, int64_t stop_after, bool resume) {
  manual_seed(5);
  Callbacks callbacks = {
      {"early_stopping", std::make_shared<EarlyStoppingCallback>(3, "valid", "loss")}};
  if (stop_after > 0)
    callbacks.emplace_back("stop", std::make_shared<testing::StopAfterEpoch>(stop_after));
  SupervisedRunner runner;
  runner.train({
      .model = testing::mlp(),
      .criterion = [](const Tensor& logits,
                      const Tensor& targets) { return cross_entropy(logits, targets); },
      .loaders = {{"train", testing::loader(16, 8, true)},
                  {"valid", testing::loader(8, 8, false, 11)}},
      .logdir = logdir,
      .num_epochs = 2,
      .valid_metric = "loss",
      .engine_instance = make_engine("amp", {.precision = DType::f16}),
      .callbacks = callbacks,
      .seed = 9,
      .resume = resume ? logdir + "/last.ckpt" : "",
      .optimizer_fn =
          [](nn::Module& model) {
            return std::make_shared<optim::Adam>(model.named_parameters(),
                                                 optim::AdamOptions{.lr = 1e-2});
          },
      .scheduler_fn =
          [](optim::Optimizer& optimizer) {
            return std::make_shared<optim::StepLR>(optimizer, 1, 0.5);
          },
  });
}

TEST(Resume, AMetadataValueEmberNeverWritesGivesAnEmberErrorOrResumes) {
  const std::string first = testing::fresh_dir("bad_metadata_first");
  run(first, /*stop_after=*/1, /*resume=*/false);
  const Checkpoint written = load_checkpoint(first + "/last.ckpt");
  // The keys this test must reach, so that it cannot pass by losing them.
  for (const char* key :
       {"checkpoint.epoch", "checkpoint.best", "rng.offset", "scaler.scale", "scheduler.last_epoch",
        "optimizer.optim.group.0.lr", "callback.early_stopping.bad_epochs"})
    ASSERT_TRUE(written.metadata.count(key)) << "the checkpoint has no " << key;

  const std::vector<std::string> wrong = {"",    "x",   "-1",    "1.5",
                                          "nan", "inf", "1e400", "99999999999999999999"};
  const std::string edited = testing::fresh_dir("bad_metadata_edited");
  int refused = 0, resumed = 0;
  for (const auto& [key, value] : written.metadata) {
    for (const std::string& text : wrong) {
      Metadata metadata = written.metadata;
      metadata[key] = text;
      save_checkpoint(edited + "/last.ckpt", written.tensors, metadata);
      try {
        run(edited, 0, /*resume=*/true);
        ++resumed;
      } catch (const Error&) {
        ++refused;
      } catch (const std::exception& e) {
        ADD_FAILURE() << key << " = '" << text << "' (was '" << value << "'): " << typeid(e).name()
                      << ": " << e.what();
      }
    }
  }
  // Most values are refused; a few are taken (a real-valued field given "1.5").
  EXPECT_GT(refused, resumed);
  std::filesystem::remove_all(first);
  std::filesystem::remove_all(edited);
}

}  // namespace
}  // namespace ember::engines
