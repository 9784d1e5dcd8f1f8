// `ember train` on the runner: Fashion-MNIST loaders, ResNet9, Adam and MultiStepLR handed to
// engines::SupervisedRunner with the callbacks and loggers of a supervised run.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include "engines/callbacks.h"
#include "engines/engine.h"

namespace ember::apps {

using engines::Progress;

struct TrainConfig {
  int64_t epochs = 3;
  int64_t batch_size = 128;
  double lr = 2e-3;
  int64_t model_size = 16;
  // auto | cpu | cuda | amp | o2 | dp | dp-amp | dp-o2 | ddp | ddp-amp | ddp-o2 | daso
  std::string engine = "auto";
  std::string amp = "none";     // none | fp16 | bf16: the AMP engine, or the precision of o2/ddp-*
  std::string device = "auto";  // auto | cpu | cuda
  std::string logdir = "logdir";
  uint64_t seed = 42;
  bool resume = false;
  bool overwrite = false;   // a logdir holding an earlier run is replaced, not refused
  int64_t stop_after = 0;   // > 0: end this run after that many epochs (resume later)
  int64_t limit_train = 0;  // 0: all
  int64_t limit_valid = 0;
  std::string data_dir;
  Progress progress = Progress::lines;
  bool sync_bn = false;          // ddp engines: batch norm over the global batch (SyncBatchNorm)
  bool tf32 = false;             // CUDA: f32 convolutions and products may use TF32 tensor cores
  bool cudnn_benchmark = false;  // CUDA: convolution algorithms chosen by timing them
  int daso_warmup = 4;           // --engine daso: blocking epochs first and last (Heat's defaults)
  int daso_cooldown = 4;
};

struct TrainResult {
  double best_valid_accuracy = 0;
  int64_t best_epoch = 0;
  double last_valid_accuracy = 0;
  double seconds = 0;
  std::string engine;             // the engine's name
  bool is_master_process = true;  // rank 0 (prints the summary)
};

// The engine the flags ask for: --engine, with --device choosing the device of auto/cpu/cuda/amp/o2
// and --amp turning auto/cpu/cuda into the AMP engine (or giving amp, o2 and the ddp forms their
// precision).
engines::EnginePtr make_train_engine(const TrainConfig& config);

TrainResult train_resnet9(const TrainConfig& config, std::ostream& out);

}  // namespace ember::apps
