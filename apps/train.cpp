// `ember train`: the ResNet9 of Catalyst's distributed tutorial on Fashion-MNIST.
//
// Adam and MultiStepLR as the tutorial; images padded to 32x32 (ResNet9's four poolings need it),
// shifted by up to 2 pixels and mirrored for training, normalised with mean 0.5 and std 0.5.
// Runs on engines::SupervisedRunner with the engine --engine names. Prints a progress line while an
// epoch runs and a summary after it; writes metrics.csv, metrics.jsonl, TensorBoard events,
// last.ckpt and best.ckpt (by valid accuracy) to the logdir; --resume continues from last.ckpt.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <iostream>

#include "apps/commands.h"
#include "apps/flags.h"
#include "apps/training.h"
#include "data/fashion_mnist.h"

namespace ember::apps {
namespace {

constexpr const char* kUsage =
    "usage: ember train [options]\n"
    "  Trains ResNet9 (Catalyst's distributed tutorial) on Fashion-MNIST.\n"
    "\n"
    "  --epochs N          passes over the training set (default 3)\n"
    "  --batch-size N      images per step (default 128); the training set's last\n"
    "                      incomplete batch is dropped (batch norm needs 2 images or more)\n"
    "  --lr X              Adam's learning rate (default 0.002); MultiStepLR x0.3 at 60% and 85%\n"
    "  --model-size N      ResNet9's base width (default 16, as the tutorial)\n"
    "  --engine E          auto | cpu | cuda | amp | o2 | dp | dp-amp | dp-o2 | ddp | ddp-amp |\n"
    "                      ddp-o2 | daso (default auto: ddp under mpirun, else cuda when a GPU\n"
    "                      is visible, else cpu); amp: autocast, o2: f16/bf16 model with f32\n"
    "                      master weights; dp: one process, DataParallel over the GPUs (two\n"
    "                      replicas on the CPU); --engine dp --amp X is dp-amp\n"
    "  --amp MODE          none | fp16 | bf16: autocast (fp16 with a GradScaler) on the chosen\n"
    "                      device, or the precision of the amp and o2 engines (default none)\n"
    "  --device D          auto | cpu | cuda (default auto: cuda when a GPU is visible); the\n"
    "                      device of cpu/cuda/amp/o2\n"
    "  --logdir DIR        metrics.csv/.jsonl, tensorboard/, last.ckpt, best.ckpt (default\n"
    "                      ./logdir); `ember report DIR` draws the curves\n"
    "  --seed N            weights, shuffling and augmentation (default 42)\n"
    "  --resume            continue from DIR/last.ckpt (same flags as the run that wrote it)\n"
    "  --overwrite         replace the run a --logdir holds (without --resume or --overwrite,\n"
    "                      a logdir with last.ckpt or metrics is refused, not overwritten)\n"
    "  --stop-after N      end this run after N epochs (continue later with --resume)\n"
    "  --limit-train N     use the first N training images (default all 60000)\n"
    "  --limit-valid N     use the first N test images (default all 10000)\n"
    "  --data DIR          Fashion-MNIST's IDX .gz files (default "
    "/usr/share/datasets/fashion-mnist)\n"
    "  --quiet             no progress line, only the per-epoch summaries\n"
    "  --sync-bn           ddp engines: batch norm statistics over the global batch\n"
    "                      (SyncBatchNorm) instead of each rank's share\n"
    "  --tf32              GPU engines: f32 convolutions and matrix products may round their\n"
    "                      inputs to TF32 to use the tensor cores (PyTorch's default for\n"
    "                      convolutions; ember's f32 is exact f32 otherwise)\n"
    "  --cudnn-benchmark   GPU engines: time cuDNN's convolution algorithms on each shape's first\n"
    "                      call and take the fastest deterministic one, instead of the\n"
    "                      heuristics' choice (PyTorch's torch.backends.cudnn.benchmark)\n"
    "  --daso-warmup N     --engine daso: epochs of blocking averaging first (default 4, Heat's)\n"
    "  --daso-cooldown N   --engine daso: and last (default 4); DASO skips global averages only\n"
    "                      in the epochs between\n";

std::string format_duration(double seconds) {
  char buffer[32];
  const int total = static_cast<int>(std::lround(seconds));
  std::snprintf(buffer, sizeof(buffer), "%d:%02d", total / 60, total % 60);
  return buffer;
}

}  // namespace

int run_train(int argc, char** argv) {
  if (asks_for_help(argc, argv)) {
    std::cout << kUsage;
    return 0;
  }
  const Flags flags(
      argc, argv,
      {"epochs", "batch-size", "lr", "model-size", "engine", "amp", "device", "logdir", "seed",
       "limit-train", "limit-valid", "data", "stop-after", "daso-warmup", "daso-cooldown"},
      {"resume", "overwrite", "quiet", "sync-bn", "tf32", "cudnn-benchmark"});
  if (!flags.positional().empty()) {
    const std::string& after = flags.switch_before(0);
    std::string why;  // a value given to a switch, said as such
    if (after == "resume") {
      why = "--resume takes no value: it continues from DIR/last.ckpt of --logdir DIR; ";
    } else if (!after.empty()) {
      why = "--" + after + " takes no value; ";
    }
    EMBER_FAIL("train: unexpected argument '", flags.positional()[0], "' (", why,
               "see `ember train --help`)");
  }
  TrainConfig config;
  config.epochs = flags.integer("epochs", 3, 1, 1000);
  config.batch_size = flags.integer("batch-size", 128, 1, 65536);
  config.lr = flags.number("lr", 2e-3, 1e-8, 10.0);
  config.model_size = flags.integer("model-size", 16, 1, 1024);
  config.engine = flags.choice("engine", "auto",
                               {"auto", "cpu", "cuda", "amp", "o2", "dp", "dp-amp", "dp-o2", "ddp",
                                "ddp-amp", "ddp-o2", "daso"});
  config.amp = flags.choice("amp", "none", {"none", "fp16", "bf16"});
  config.device = flags.choice("device", "auto", {"auto", "cpu", "cuda"});
  config.logdir = flags.text("logdir", "logdir");
  config.seed = static_cast<uint64_t>(flags.integer("seed", 42, 0, INT64_MAX));
  config.resume = flags.has("resume");
  config.overwrite = flags.has("overwrite");
  config.stop_after = flags.integer("stop-after", 0, 1, 1000);
  config.limit_train = flags.integer("limit-train", 0, 1, INT64_MAX);
  config.limit_valid = flags.integer("limit-valid", 0, 1, INT64_MAX);
  config.data_dir = flags.text("data", data::kFashionMnistDefaultDir);
  config.sync_bn = flags.has("sync-bn");
  config.tf32 = flags.has("tf32");
  config.cudnn_benchmark = flags.has("cudnn-benchmark");
  config.daso_warmup = static_cast<int>(flags.integer("daso-warmup", 4, 0, 1000));
  config.daso_cooldown = static_cast<int>(flags.integer("daso-cooldown", 4, 0, 1000));
  EMBER_CHECK(config.engine == "daso" || (!flags.has("daso-warmup") && !flags.has("daso-cooldown")),
              "train: --daso-warmup and --daso-cooldown go with --engine daso only");
  config.progress = !flags.has("quiet") && ::isatty(STDOUT_FILENO) ? Progress::live
                    : flags.has("quiet")                           ? Progress::none
                                                                   : Progress::lines;
  const TrainResult result = train_resnet9(config, std::cout);
  if (!result.is_master_process) return 0;
  char summary[160];
  std::snprintf(summary, sizeof(summary), "best valid accuracy %.2f%% (epoch %lld), %s in all; ",
                result.best_valid_accuracy * 100, static_cast<long long>(result.best_epoch),
                format_duration(result.seconds).c_str());
  std::cout << summary << config.logdir << "/metrics.csv, last.ckpt, best.ckpt (engine "
            << result.engine << ")\n";
  return 0;
}

}  // namespace ember::apps
