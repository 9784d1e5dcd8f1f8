// The training loop behind `ember train`: data, model, optimizer, AMP, metrics, checkpoints.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

namespace ember::apps {

enum class Progress { none, lines, live };  // live: one line redrawn in place (a terminal)

struct TrainConfig {
  int64_t epochs = 3;
  int64_t batch_size = 128;
  double lr = 2e-3;
  int64_t model_size = 16;
  std::string amp = "none";     // none | fp16 | bf16
  std::string device = "auto";  // auto | cpu | cuda
  std::string logdir = "logdir";
  uint64_t seed = 42;
  bool resume = false;
  int64_t stop_after = 0;   // > 0: end this run after that many epochs (resume later)
  int64_t limit_train = 0;  // 0: all
  int64_t limit_valid = 0;
  std::string data_dir;
  Progress progress = Progress::lines;
};

struct TrainResult {
  double best_valid_accuracy = 0;
  int64_t best_epoch = 0;
  double last_valid_accuracy = 0;
  double seconds = 0;
};

TrainResult train_resnet9(const TrainConfig& config, std::ostream& out);

}  // namespace ember::apps
