// Small runs for the engine tests: a synthetic 3-class problem and a tiny MLP (with dropout, so
// that a resume must restore the RNG to continue identically).
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <set>
#include <string>

#include "data/dataset.h"
#include "data/loader.h"
#include "engines/runner.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "runtime/ops.h"

namespace ember::engines::testing {

// (n, 6) features, labels from a fixed linear rule, so that the problem can be learned.
inline std::shared_ptr<data::TensorDataset> synthetic_dataset(int64_t n, uint64_t seed = 7) {
  Generator generator(seed);
  const Tensor features = randn({n, 6}, {}, &generator);
  const Tensor labels = argmax(matmul(features, randn({6, 3}, {}, &generator)), 1);
  return std::make_shared<data::TensorDataset>(features, labels);
}

inline std::shared_ptr<data::DataLoader> loader(int64_t n, int64_t batch_size, bool shuffle,
                                                uint64_t seed = 7) {
  return std::make_shared<data::DataLoader>(
      synthetic_dataset(n, seed),
      data::DataLoaderOptions{.batch_size = batch_size, .shuffle = shuffle, .seed = 3});
}

inline nn::ModulePtr mlp(bool dropout = true) {
  return nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Linear>(6, 16), nn::make<nn::ReLU>(), nn::make<nn::Dropout>(dropout ? 0.2 : 0.0),
      nn::make<nn::Linear>(16, 3)});
}

// Same shape and the same values, bit for bit (NaN aside).
inline bool identical(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && allclose(a.to(DType::f64), b.to(DType::f64), 0, 0);
}

inline std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(file), {});
}

// A fresh directory under the test temp dir.
inline std::string fresh_dir(const std::string& name) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("ember_engines_" + std::to_string(::getpid()) + "_" + name))
                              .string();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// The checkpoint files (*.ckpt) of a logdir, by name.
inline std::set<std::string> checkpoint_files(const std::string& logdir) {
  std::set<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(logdir))
    if (entry.path().extension() == ".ckpt") names.insert(entry.path().filename().string());
  return names;
}

// Ends the run after epoch `last` (a run that is resumed later).
class StopAfterEpoch : public ICallback {
 public:
  explicit StopAfterEpoch(int64_t last) : ICallback(CallbackOrder::external), last_(last) {}
  void on_epoch_end(IRunner& runner) override {
    if (runner.epoch >= last_) runner.need_early_stop = true;
  }

 private:
  int64_t last_;
};

// Trains 2 epochs over 32 samples with Adam and a StepLR (stopping after `stop_after` when > 0),
// optionally resuming from logdir/last.ckpt; the checkpoints in `logdir` are the result.
// `batch` is per rank; without dropout the loader does not shuffle either. `callbacks` are added
// to the runner's own.
inline void small_run(const std::function<EnginePtr()>& engine, const std::string& logdir,
                      int64_t stop_after, bool resume, bool dropout = true, int64_t batch = 16,
                      Callbacks callbacks = {}) {
  manual_seed(5);
  SupervisedRunner runner;
  TrainOptions options{
      .model = mlp(dropout),
      .criterion = [](const Tensor& logits,
                      const Tensor& targets) { return cross_entropy(logits, targets); },
      .loaders = {{"train", loader(32, batch, /*shuffle=*/dropout)},
                  {"valid", loader(24, 8, false, 11)}},
      .logdir = logdir,
      .num_epochs = 2,
      .valid_metric = "loss",
      .engine_instance = engine(),
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
  };
  options.callbacks = std::move(callbacks);
  if (stop_after > 0)
    options.callbacks.emplace_back("stop", std::make_shared<StopAfterEpoch>(stop_after));
  runner.train(std::move(options));
}

}  // namespace ember::engines::testing
