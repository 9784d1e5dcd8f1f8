// Resuming from a checkpoint whose checksums are right but whose contents are not: a file edited
// by hand, or written by another program. Every metadata value is replaced in turn by text that
// ember never writes there, and every tensor is left out, resized or retyped. The resume then
// either works (a learning rate of 1.5 is a learning rate) or throws an ember::Error naming what
// is wrong; it never throws another exception (std::stoll's bare "stoll") and never runs into
// undefined behaviour (the sanitizer build runs this test too).
#include <gtest/gtest.h>

#include <cstddef>
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

// The fixtures' small run with every piece of state a checkpoint carries on one process: Adam, a
// StepLR, an fp16 GradScaler (the AMP engine), early stopping and the best-k list.
void run(const std::string& logdir, int64_t stop_after, bool resume) {
  testing::small_run(
      [] { return make_engine("amp", {.precision = DType::f16}); }, logdir, stop_after, resume,
      /*dropout=*/true, /*batch=*/16,
      {{"early_stopping", std::make_shared<EarlyStoppingCallback>(3, "valid", "loss")}});
}

struct Outcomes {
  int refused = 0;
  int resumed = 0;
};

// Resumes from `tensors` and `metadata` written as `dir`/last.ckpt; counts the outcome, and fails
// the test on anything but success or an ember::Error.
void resume_from(const std::string& dir, const NamedTensors& tensors, const Metadata& metadata,
                 const std::string& change, Outcomes* outcomes) {
  save_checkpoint(dir + "/last.ckpt", tensors, metadata);
  try {
    run(dir, 0, /*resume=*/true);
    ++outcomes->resumed;
  } catch (const Error&) {
    ++outcomes->refused;
  } catch (const std::exception& e) {
    ADD_FAILURE() << change << ": " << typeid(e).name() << ": " << e.what();
  }
}

class Resume : public ::testing::Test {
 protected:
  void SetUp() override {
    run(first_, /*stop_after=*/1, /*resume=*/false);
    written_ = load_checkpoint(first_ + "/last.ckpt");
  }
  void TearDown() override {
    std::filesystem::remove_all(first_);
    std::filesystem::remove_all(edited_);
  }
  const std::string first_ = testing::fresh_dir("edited_checkpoint_first");
  const std::string edited_ = testing::fresh_dir("edited_checkpoint");
  Checkpoint written_;
};

TEST_F(Resume, AMetadataValueEmberNeverWritesGivesAnEmberErrorOrResumes) {
  // The keys this test must reach, so that it cannot pass by losing them.
  for (const char* key :
       {"checkpoint.epoch", "checkpoint.best", "rng.offset", "scaler.scale", "scheduler.last_epoch",
        "optimizer.optim.group.0.lr", "callback.early_stopping.bad_epochs"})
    ASSERT_TRUE(written_.metadata.count(key)) << "the checkpoint has no " << key;

  const std::vector<std::string> wrong = {"",    "x",   "-1",    "1.5",
                                          "nan", "inf", "1e400", "99999999999999999999"};
  Outcomes outcomes;
  for (const auto& [key, value] : written_.metadata) {
    for (const std::string& text : wrong) {
      Metadata metadata = written_.metadata;
      metadata[key] = text;
      resume_from(edited_, written_.tensors, metadata,
                  key + " = '" + text + "' (was '" + value + "')", &outcomes);
    }
  }
  // Most values are refused; a few are taken (a real-valued field given "1.5").
  EXPECT_GT(outcomes.refused, outcomes.resumed);
}

// Every tensor (the model's, the optimizer's moments and step counts) in turn left out, given one
// element more, or given another dtype.
TEST_F(Resume, ATensorLeftOutResizedOrRetypedGivesAnEmberErrorOrResumes) {
  ASSERT_GE(written_.tensors.size(), 8u);
  Outcomes outcomes;
  for (size_t i = 0; i < written_.tensors.size(); ++i) {
    const auto& [name, tensor] = written_.tensors[i];
    NamedTensors left_out = written_.tensors;
    left_out.erase(left_out.begin() + static_cast<std::ptrdiff_t>(i));
    resume_from(edited_, left_out, written_.metadata, name + " left out", &outcomes);

    NamedTensors resized = written_.tensors;
    resized[i].second = zeros({tensor.numel() + 1}, tensor.dtype());
    resume_from(edited_, resized, written_.metadata, name + " resized", &outcomes);

    NamedTensors retyped = written_.tensors;
    retyped[i].second = tensor.to(tensor.dtype() == DType::f64 ? DType::i32 : DType::f64);
    resume_from(edited_, retyped, written_.metadata, name + " retyped", &outcomes);
  }
  // Left out and resized are refused; another dtype is converted, as PyTorch's load_state_dict
  // copies into the parameter (and casts an optimizer's state to its parameter's dtype).
  EXPECT_EQ(outcomes.refused, 2 * static_cast<int>(written_.tensors.size()));
}

}  // namespace
}  // namespace ember::engines
