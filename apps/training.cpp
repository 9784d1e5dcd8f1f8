#include "apps/training.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "distributed/sync_batch_norm.h"
#include "distributed/world.h"
#include "engines/device_engines.h"
#include "engines/distributed_engines.h"
#include "engines/factory.h"
#include "engines/loggers.h"
#include "engines/runner.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/schedulers.h"
#include "runtime/allocator.h"
#include "runtime/block_allocator.h"
#include "runtime/io/checkpoint.h"
#include "runtime/io/metadata_numbers.h"
#include "runtime/ops.h"

namespace ember::apps {
namespace {

using Clock = std::chrono::steady_clock;

std::string clock_text(double seconds) {
  char buffer[32];
  const int total = static_cast<int>(std::lround(std::max(0.0, seconds)));
  std::snprintf(buffer, sizeof(buffer), "%d:%02d", total / 60, total % 60);
  return buffer;
}

// "epoch 2/3  train loss 0.4321 acc 84.12%  valid loss ... acc ...%  lr 0.002  0:41  (best)"
class EpochSummaryLogger : public engines::ILogger {
 public:
  EpochSummaryLogger(std::ostream& out, const engines::CheckpointCallback& checkpoint)
      : out_(out), checkpoint_(checkpoint) {}

  void log_epoch(const engines::LoaderMetrics&, const engines::IRunner& runner) override {
    const auto metric = [&](const char* loader, const char* key) {
      return runner.epoch_metric(loader, key);
    };
    char summary[256];
    std::snprintf(summary, sizeof(summary),
                  "epoch %lld/%lld  train loss %.4f acc %.2f%%  valid loss %.4f acc %.2f%%  "
                  "lr %.2g  %s%s\n",
                  static_cast<long long>(runner.epoch), static_cast<long long>(runner.stage_len),
                  metric("train", "loss"), 100 * metric("train", "accuracy"),
                  metric("valid", "loss"), 100 * metric("valid", "accuracy"), metric("train", "lr"),
                  clock_text(metric("train", "seconds") + metric("valid", "seconds")).c_str(),
                  checkpoint_.last_was_best() ? "  (best)" : "");
    out_ << summary << std::flush;
  }

 private:
  std::ostream& out_;
  const engines::CheckpointCallback& checkpoint_;
};

class StopAfterEpochs : public engines::ICallback {
 public:
  explicit StopAfterEpochs(int64_t epochs)
      : ICallback(engines::CallbackOrder::external), epochs_(epochs) {}
  void on_stage_start(engines::IRunner& runner) override { last_ = runner.epoch + epochs_; }
  void on_epoch_end(engines::IRunner& runner) override {
    if (runner.epoch >= last_) runner.need_early_stop = true;
  }

 private:
  int64_t epochs_;
  int64_t last_ = 0;
};

// A checkpoint written by another number of processes: the model, optimizer and schedule are the
// same on every rank, and the run resumes between epochs, so the next epoch is simply sharded
// over this run's ranks (the global batch stays --batch-size). Says so, on rank 0.
// DASO's checkpoint also holds each node's optimizer state, which differ across nodes (gradients
// are averaged only inside a node); resumed on another number of nodes, every node takes node 0's.
// Says that too.
void note_a_change_of_world_size(const std::string& checkpoint_path, const engines::IEngine& engine,
                                 int64_t batch_size, std::ostream& out) {
  const Checkpoint checkpoint = load_checkpoint(checkpoint_path);
  if (!engine.is_master_process()) return;
  const auto* daso = dynamic_cast<const engines::DasoEngine*>(&engine);
  const int64_t nodes_written = daso ? engines::DasoEngine::optimizer_states_in(checkpoint) : 1;
  if (nodes_written > 1 && nodes_written != daso->nodes())
    out << "resuming DASO on " << daso->nodes() << (daso->nodes() == 1 ? " node" : " nodes")
        << " from a checkpoint of " << nodes_written
        << " nodes, each with its own optimizer state: every node starts from node 0's\n";
  if (!checkpoint.metadata.count("world_size")) return;
  const int64_t written_by =
      parse_integer(checkpoint.meta("world_size"), "resume: the checkpoint's world_size", 1);
  const int64_t ranks = engine.world_size();
  if (written_by == ranks) return;
  out << "resuming a run of " << written_by << (written_by == 1 ? " process" : " processes")
      << " (engine " << (checkpoint.metadata.count("engine") ? checkpoint.meta("engine") : "?")
      << ") with " << ranks << " (engine " << engine.name()
      << "): the remaining epochs are sharded over " << ranks << " ranks, a global batch of "
      << batch_size / ranks * ranks << " (" << batch_size / ranks << " per rank)\n";
}

}  // namespace

namespace {

// --engine amp or o2 with --device cpu or cuda: that engine on that device (without --device the
// factory picks the GPU when one is visible). --amp gives the precision; without it, f16 on a
// GPU and bf16 on the CPU, as the factory's defaults.
engines::EnginePtr make_precision_engine_on(const TrainConfig& config) {
  const Device device = config.device == "cpu" ? Device::cpu() : Device::cuda(0);
  const DType precision = config.amp == "fp16"   ? DType::f16
                          : config.amp == "bf16" ? DType::bf16
                          : device.is_cuda()     ? DType::f16
                                                 : DType::bf16;
  try {
    if (config.engine == "amp") return std::make_shared<engines::AMPEngine>(device, precision);
    return std::make_shared<engines::O2Engine>(device, precision);
  } catch (const Error& error) {
    EMBER_FAIL("engine '", config.engine, "' on --device ", config.device, ": ", error.what(),
               " (pick --device cpu, or drop --device: the CPU when no GPU is visible)");
  }
}

}  // namespace

engines::EnginePtr make_train_engine(const TrainConfig& config) {
  std::string name = config.engine;
  const bool single_device = name == "auto" || name == "cpu" || name == "cuda";
  const bool single_device_precision = name == "amp" || name == "o2";
  if (config.device != "auto") {
    if (single_device_precision) return make_precision_engine_on(config);
    EMBER_CHECK(single_device || name == config.device, "train: --device ", config.device,
                " does not go with --engine ", name,
                " (the engine picks its devices; drop --device)");
    EMBER_CHECK(name == "auto" || name == config.device, "train: --device ", config.device,
                " contradicts --engine ", name, "; pass one of them");
    name = config.device;
  }
  engines::EngineOptions options;
  options.total_epochs = config.epochs;  // daso plans its schedule over the whole run
  options.daso.warmup_epochs = config.daso_warmup;
  options.daso.cooldown_epochs = config.daso_cooldown;
  // ddp engines: gradients are views of the buckets, so no copy back after each allreduce
  // (PyTorch's gradient_as_bucket_view; the library default stays off, as there).
  options.ddp.gradient_as_bucket_view = true;
  if (config.amp == "none") return engines::make_engine(name, options);
  EMBER_CHECK(engines::resolve_engine_name(name) != "daso", "train: --amp ", config.amp,
              " does not go with --engine daso, which trains in f32; drop --amp");
  const DType precision = config.amp == "fp16" ? DType::f16 : DType::bf16;
  options.precision = precision;
  if (single_device) {
    // --amp on one device: the AMP engine there (auto: the GPU when one is visible).
    const std::string device_name = engines::resolve_engine_name(name);
    if (device_name == "cpu" || device_name == "cuda") {
      const Device device = device_name == "cpu" ? Device::cpu() : Device::cuda(0);
      try {
        return std::make_shared<engines::AMPEngine>(device, precision);
      } catch (const Error& error) {
        EMBER_FAIL("engine '", device_name, "': ", error.what(),
                   " (pick engine cpu, or auto: the CPU when no GPU is visible)");
      }
    }
    name = device_name + "-amp";  // under mpirun: ddp-amp
  }
  if (name == "ddp" || name == "dp") name += "-amp";
  return engines::make_engine(name, options);
}

TrainResult train_resnet9(const TrainConfig& config, std::ostream& out) {
  const Clock::time_point start = Clock::now();
  const std::string last_path = config.logdir + "/last.ckpt";
  EMBER_CHECK(!config.resume || std::filesystem::exists(last_path),
              "train: --resume: no checkpoint at '", last_path,
              "' (train without --resume first, or pass --logdir)");
  EMBER_CHECK(!(config.resume && config.overwrite),
              "train: --resume continues the run in --logdir and --overwrite replaces it: pass "
              "one of them");
  if (!config.resume && !config.overwrite) {
    // An earlier run's checkpoints and metrics are continued or replaced on request, never
    // silently (the default --logdir is the same for every run).
    std::string found;
    for (const char* name : {"last.ckpt", "best.ckpt", "metrics.csv", "metrics.jsonl"}) {
      std::error_code error;
      if (std::filesystem::exists(config.logdir + "/" + name, error))
        found += (found.empty() ? "" : ", ") + std::string(name);
    }
    EMBER_CHECK(found.empty(), "train: --logdir ", config.logdir, " holds an earlier run (", found,
                "): pass --resume to continue it, --overwrite to replace it, or another --logdir");
  }
  const engines::EnginePtr engine = make_train_engine(config);
  EMBER_CHECK(engine->world_size() > 1 || !dist::launched_with_several_processes(),
              "train: --engine ", config.engine, " (", engine->name(),
              ") trains in one process, but a launcher started several: each would train on all "
              "the data as rank 0 and write the same logdir. Use --engine ddp, ddp-amp, ddp-o2 or "
              "daso under mpirun (auto picks ddp), or start one process");
  const bool daso = engines::resolve_engine_name(config.engine) == "daso";
  EMBER_CHECK(!config.sync_bn || (engine->is_ddp() && !daso),
              "train: --sync-bn goes with the ddp "
              "engines (ddp, ddp-amp, ddp-o2 under mpirun); engine ",
              engine->name(), " has no batch to share");
  EMBER_CHECK(!config.tf32 || engine->device().is_cuda(),
              "train: --tf32 lets CUDA's f32 convolutions and matrix products use TF32; engine ",
              engine->name(), " runs on the CPU, where it would change nothing: drop --tf32");
  // Process-wide switches (PyTorch's torch.backends.cudnn.allow_tf32 and
  // torch.backends.cuda.matmul.allow_tf32), put back when this run ends.
  struct Tf32Switches {
    bool conv = conv_allow_tf32(), matmul = matmul_allow_tf32();
    explicit Tf32Switches(bool allow) {
      set_conv_allow_tf32(allow || conv);
      set_matmul_allow_tf32(allow || matmul);
    }
    ~Tf32Switches() {
      set_conv_allow_tf32(conv);
      set_matmul_allow_tf32(matmul);
    }
    Tf32Switches(const Tf32Switches&) = delete;
    Tf32Switches& operator=(const Tf32Switches&) = delete;
  } const tf32_switches(config.tf32);
  EMBER_CHECK(!config.cudnn_benchmark || engine->device().is_cuda(),
              "train: --cudnn-benchmark times cuDNN's convolution algorithms; engine ",
              engine->name(),
              " runs on the CPU, where there is nothing to choose: drop --cudnn-benchmark");
  // torch.backends.cudnn.benchmark, process-wide as there: put back when this run ends.
  struct BenchmarkSwitch {
    bool before = conv_benchmark();
    explicit BenchmarkSwitch(bool measure) { set_conv_benchmark(measure || before); }
    ~BenchmarkSwitch() { set_conv_benchmark(before); }
    BenchmarkSwitch(const BenchmarkSwitch&) = delete;
    BenchmarkSwitch& operator=(const BenchmarkSwitch&) = delete;
  } const benchmark_switch(config.cudnn_benchmark);
  if (daso && config.daso_warmup + config.daso_cooldown >= config.epochs &&
      engine->is_master_process()) {
    out << "note: DASO with " << config.epochs << " epochs, warm-up " << config.daso_warmup
        << " and cool-down " << config.daso_cooldown
        << " averages every batch, blocking, for the whole run: it skips global averages only "
           "in the epochs between (pass e.g. --daso-warmup 1 --daso-cooldown 1, or more "
           "epochs)\n";
  }

  // ---- data ----
  auto train_set =
      std::make_shared<data::FashionMnist>(config.data_dir, data::Split::train, config.limit_train);
  auto valid_set =
      std::make_shared<data::FashionMnist>(config.data_dir, data::Split::test, config.limit_valid);
  // Made (or checked) once the data is there, so that a logdir that cannot be one fails before
  // training, with the reason, and not after the first epoch.
  std::error_code logdir_error;
  std::filesystem::create_directories(config.logdir, logdir_error);
  EMBER_CHECK(!logdir_error && std::filesystem::is_directory(config.logdir), "train: --logdir ",
              config.logdir, ": cannot make it a directory (",
              logdir_error ? logdir_error.message() : "a file has that name",
              "); pass another --logdir");
  EMBER_CHECK(train_set->size() >= 2,
              "train: need at least 2 training images (batch norm needs "
              "two per batch), got ",
              train_set->size());
  const int64_t batch_size = std::min(config.batch_size, train_set->size());
  // --batch-size is the global batch: N ranks take batch_size / N images each per step, so a
  // data-parallel run makes the same steps as one process (same learning rate, same count).
  const int64_t ranks = engine->world_size();
  const int64_t rank_batch_size = batch_size / ranks;
  EMBER_CHECK(rank_batch_size >= 2, "train: --batch-size ", batch_size, " over ", ranks,
              " ranks leaves ", rank_batch_size,
              " images per rank; batch norm needs 2: use --batch-size ", 2 * ranks, " or more");
  auto train_loader = engine->shard_loader(std::make_shared<data::DataLoader>(
      train_set,
      data::DataLoaderOptions{
          .batch_size = rank_batch_size,
          .shuffle = true,
          .seed = config.seed,
          .drop_last = true,  // batch norm needs more than one image per batch
          .pin_memory = engine->device().is_cuda(),
          .transforms = {data::pad(2), data::random_crop(32, 2), data::random_horizontal_flip(),
                         data::normalize({0.5}, {0.5})}}));
  if (config.resume) note_a_change_of_world_size(last_path, *engine, batch_size, out);
  auto valid_loader = engine->shard_loader(std::make_shared<data::DataLoader>(
      valid_set,
      data::DataLoaderOptions{.batch_size = std::max<int64_t>(1, 512 / ranks),
                              .pin_memory = engine->device().is_cuda(),
                              .transforms = {data::pad(2), data::normalize({0.5}, {0.5})}}));

  // ---- the model is built once the runner has seeded the RNG (seed + rank), the optimizer and
  // schedule once the engine has placed it ----
  const int64_t model_size = config.model_size;
  const int64_t epochs = config.epochs;
  const double lr = config.lr;

  // ---- callbacks and loggers ----
  // What a resumed run must share with the run that wrote the checkpoint (the engine and the
  // number of processes may change: see note_a_change_of_world_size).
  // The precision the engine trains in, not --amp alone: --engine amp without --amp is bf16.
  const auto* mixed = dynamic_cast<const engines::AMPEngine*>(engine.get());
  const std::string precision = mixed == nullptr                   ? "none"
                                : mixed->precision() == DType::f16 ? "fp16"
                                                                   : "bf16";
  // lr too: the optimizer's state (and schedule) come back from the checkpoint, so a new --lr
  // would be announced and not used.
  std::map<std::string, std::string> run_identity = {
      {"model_size", std::to_string(config.model_size)},
      {"batch_size", std::to_string(batch_size)},
      {"seed", std::to_string(config.seed)},
      {"amp", precision},
      {"lr", format_exact(config.lr)},
      {"epochs", std::to_string(config.epochs)},
      {"limit_train", std::to_string(config.limit_train)}};
  if (daso) {
    run_identity["daso_warmup"] = std::to_string(config.daso_warmup);
    run_identity["daso_cooldown"] = std::to_string(config.daso_cooldown);
  }
  auto checkpoint = std::make_shared<engines::CheckpointCallback>(
      engines::CheckpointOptions{.logdir = config.logdir,
                                 .loader_key = "valid",
                                 .metric_key = "accuracy",
                                 .minimize = false,
                                 .resume = config.resume ? last_path : "",
                                 .run_identity = run_identity,
                                 .out = &out});
  engines::Callbacks callbacks = {
      {"accuracy", std::make_shared<engines::AccuracyCallback>()},
      {"checkpoint", checkpoint},
      {"progress", std::make_shared<engines::ProgressBarCallback>(out, config.progress)}};
  if (config.stop_after > 0)
    callbacks.emplace_back("stop_after", std::make_shared<StopAfterEpochs>(config.stop_after));

  const auto announce = [&](int64_t parameters) {
    if (!engine->is_master_process()) return;
    // The batch used: rank_batch_size on each rank, which is --batch-size / ranks rounded down.
    std::string shares;
    if (ranks > 1) {
      shares = detail::concat(" (", rank_batch_size, " per rank x ", ranks);
      if (batch_size % ranks != 0)
        shares += detail::concat("; ", batch_size, " does not divide among the ranks");
      shares += ")";
    }
    out << "ember train: resnet9(size " << config.model_size << ", " << parameters << " parameters"
        << (config.sync_bn ? ", SyncBatchNorm" : "") << ") on " << engine->name()
        << (config.tf32 ? " with TF32" : "")
        << (config.cudnn_benchmark ? ", cuDNN algorithms timed" : "") << ", Fashion-MNIST "
        << train_set->size() << " train / " << valid_set->size() << " valid images, batch "
        << rank_batch_size * ranks << shares << ", Adam lr " << config.lr << ", " << config.epochs
        << (config.epochs == 1 ? " epoch\n" : " epochs\n") << std::flush;
  };

  engines::SupervisedRunner runner;
  runner.train({
      .model_fn = [&]() -> nn::ModulePtr {
        nn::ModulePtr model = nn::resnet9(1, 10, model_size);
        if (config.sync_bn) model = dist::convert_sync_batchnorm(model, engine->process_group());
        announce(model->num_parameters());
        return model;
      },
      .criterion = [](const Tensor& logits,
                      const Tensor& targets) { return cross_entropy(logits, targets); },
      .loaders = {{"train", train_loader}, {"valid", valid_loader}},
      .logdir = config.logdir,
      .num_epochs = config.epochs,
      .valid_loader = "valid",
      .valid_metric = "accuracy",
      .minimize_valid_metric = false,
      .engine_instance = engine,
      .callbacks = callbacks,
      .seed = config.seed,
      .optimizer_fn =
          [lr](nn::Module& placed) {
            return std::make_shared<optim::Adam>(placed.named_parameters(),
                                                 optim::AdamOptions{.lr = lr});
          },
      .scheduler_fn =
          [epochs](optim::Optimizer& optimizer) {
            const std::vector<int64_t> milestones = {
                std::max<int64_t>(1, std::llround(0.6 * static_cast<double>(epochs))),
                std::max<int64_t>(1, std::llround(0.85 * static_cast<double>(epochs)))};
            return std::make_shared<optim::MultiStepLR>(optimizer, milestones, 0.3);
          },
      .use_default_loggers = false,
      .loggers = {{"summary", std::make_shared<EpochSummaryLogger>(out, *checkpoint)},
                  {"csv", std::make_shared<engines::CSVLogger>(config.logdir)},
                  {"jsonl", std::make_shared<engines::JsonlLogger>(config.logdir)},
                  {"tensorboard", std::make_shared<engines::TensorboardLogger>(config.logdir)}},
  });
  if (runner.epoch < config.epochs && engine->is_master_process()) {
    out << "stopping after epoch " << runner.epoch << " of " << config.epochs
        << " (--stop-after); continue with the same flags and --resume\n";
  }

  if (engine->device().is_cuda() && engine->is_master_process()) {
    // PyTorch's torch.cuda.max_memory_allocated and memory_reserved, and what growing the cache
    // cost: a set-up paid in the first steps.
    const AllocatorStats memory = allocator_for(engine->device()).stats();
    char seconds[32];
    std::snprintf(seconds, sizeof(seconds), "%.3f", memory.system_alloc_seconds);
    out << engine->device() << " memory: peak " << format_bytes(memory.peak_allocated_bytes)
        << " allocated, " << format_bytes(memory.reserved_bytes) << " reserved; "
        << memory.num_system_allocs << " cudaMalloc calls took " << seconds << " s\n";
  }

  TrainResult result;
  result.best_valid_accuracy = checkpoint->best_value();
  result.best_epoch = checkpoint->best_epoch();
  result.last_valid_accuracy =
      runner.epoch_metrics.empty() ? 0 : runner.epoch_metric("valid", "accuracy");
  result.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  result.engine = engine->name();
  result.is_master_process = engine->is_master_process();
  return result;
}

}  // namespace ember::apps
