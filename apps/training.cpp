#include "apps/training.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/grad_scaler.h"
#include "optim/schedulers.h"
#include "runtime/io/checkpoint.h"
#include "runtime/ops.h"

namespace ember::apps {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

std::string clock_text(double seconds) {
  char buffer[32];
  const int total = static_cast<int>(std::lround(std::max(0.0, seconds)));
  std::snprintf(buffer, sizeof(buffer), "%d:%02d", total / 60, total % 60);
  return buffer;
}

std::string exact(double value) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.17g", value);
  return buffer;
}

Device resolve_device(const std::string& choice) {
  if (choice == "cpu") return Device::cpu();
  if (choice == "cuda") {
    check_device_available(Device::cuda(0));
    return Device::cuda(0);
  }
  return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
}

// The running sums of one pass over a loader.
struct PassStats {
  double loss_sum = 0;
  int64_t correct = 0;
  int64_t seen = 0;
  double loss() const { return seen ? loss_sum / static_cast<double>(seen) : 0; }
  double accuracy() const {
    return seen ? static_cast<double>(correct) / static_cast<double>(seen) : 0;
  }
  void add(const Tensor& logits, const Tensor& targets, const Tensor& loss) {
    NoGradGuard no_grad;
    const int64_t n = targets.size(0);
    loss_sum += loss.item<double>() * static_cast<double>(n);
    correct += sum(eq(argmax(logits, 1), targets)).item<int64_t>();
    seen += n;
  }
};

class ProgressLine {
 public:
  ProgressLine(std::ostream& out, Progress mode, std::string label, int64_t total)
      : out_(out), mode_(mode), label_(std::move(label)), total_(total), start_(Clock::now()) {}

  void update(int64_t done, const PassStats& stats) {
    if (mode_ == Progress::none || total_ == 0) return;
    const double elapsed = seconds_since(start_);
    const bool last = done == total_;
    if (mode_ == Progress::lines) {
      const int64_t tenth = done * 10 / total_;
      if (tenth == printed_tenth_ && !last) return;
      printed_tenth_ = tenth;
    } else if (elapsed - last_draw_ < 0.2 && !last) {
      return;
    }
    last_draw_ = elapsed;
    constexpr int kWidth = 24;
    const int filled = static_cast<int>(kWidth * done / total_);
    std::string bar(static_cast<size_t>(filled), '=');
    if (filled < kWidth) bar += '>';
    bar.resize(kWidth, ' ');
    char text[256];
    std::snprintf(
        text, sizeof(text), "%s [%s] %lld/%lld  loss %.4f  %.0f img/s  ETA %s", label_.c_str(),
        bar.c_str(), static_cast<long long>(done), static_cast<long long>(total_), stats.loss(),
        static_cast<double>(stats.seen) / std::max(elapsed, 1e-9),
        clock_text(elapsed / static_cast<double>(done) * static_cast<double>(total_ - done))
            .c_str());
    if (mode_ == Progress::live) {
      out_ << "\r" << text << "\x1b[K" << std::flush;
      if (last) out_ << "\r\x1b[K" << std::flush;
    } else {
      out_ << text << "\n" << std::flush;
    }
  }

 private:
  std::ostream& out_;
  Progress mode_;
  std::string label_;
  int64_t total_;
  Clock::time_point start_;
  double last_draw_ = -1;
  int64_t printed_tenth_ = -1;
};

// Everything a checkpoint holds, prefixed so that the parts cannot collide.
void save_state(const std::string& path, nn::Module& model, const optim::Optimizer& optimizer,
                const optim::LRScheduler& scheduler, const optim::GradScaler& scaler,
                Metadata progress) {
  NamedTensors tensors;
  for (const auto& [name, tensor] : model.state_dict())
    tensors.emplace_back("model." + name, tensor);
  const optim::StateDict optimizer_state = optimizer.state_dict();
  for (const auto& [name, tensor] : optimizer_state.tensors)
    tensors.emplace_back("optimizer." + name, tensor);
  Metadata metadata = std::move(progress);
  for (const auto& [key, value] : optimizer_state.metadata)
    metadata["optimizer." + key] = value;
  for (const auto& [key, value] : scheduler.state_dict())
    metadata[key] = value;
  for (const auto& [key, value] : scaler.state_dict())
    metadata[key] = value;
  const GeneratorState rng = default_generator().state();
  metadata["rng.seed"] = std::to_string(rng.seed);
  metadata["rng.offset"] = std::to_string(rng.offset);
  save_checkpoint(path, tensors, metadata);
}

int64_t parse_int(const Checkpoint& checkpoint, const std::string& key) {
  return std::stoll(checkpoint.meta(key));
}

}  // namespace

TrainResult train_resnet9(const TrainConfig& config, std::ostream& out) {
  const Clock::time_point start = Clock::now();
  const Device device = resolve_device(config.device);
  manual_seed(config.seed);
  const std::string last_path = config.logdir + "/last.ckpt";
  EMBER_CHECK(!config.resume || std::filesystem::exists(last_path),
              "train: --resume: no checkpoint at '", last_path,
              "' (train without --resume first, or pass --logdir)");

  // ---- data ----
  auto train_set =
      std::make_shared<data::FashionMnist>(config.data_dir, data::Split::train, config.limit_train);
  auto valid_set =
      std::make_shared<data::FashionMnist>(config.data_dir, data::Split::test, config.limit_valid);
  EMBER_CHECK(train_set->size() >= 2,
              "train: need at least 2 training images (batch norm needs "
              "two per batch), got ",
              train_set->size());
  const int64_t batch_size = std::min(config.batch_size, train_set->size());
  data::DataLoader train_loader(
      train_set, {.batch_size = batch_size,
                  .shuffle = true,
                  .seed = config.seed,
                  .drop_last = true,  // batch norm needs more than one image per batch
                  .transforms = {data::pad(2), data::random_crop(32, 2),
                                 data::random_horizontal_flip(), data::normalize({0.5}, {0.5})}});
  data::DataLoader valid_loader(
      valid_set, {.batch_size = 512, .transforms = {data::pad(2), data::normalize({0.5}, {0.5})}});

  // ---- model, optimizer, schedule, precision ----
  auto model = nn::resnet9(1, 10, config.model_size);
  model->to(device);
  optim::Adam optimizer(model->named_parameters(), {.lr = config.lr});
  const std::vector<int64_t> milestones = {
      std::max<int64_t>(1, std::llround(0.6 * static_cast<double>(config.epochs))),
      std::max<int64_t>(1, std::llround(0.85 * static_cast<double>(config.epochs)))};
  optim::MultiStepLR scheduler(optimizer, milestones, 0.3);
  optim::GradScaler scaler({.enabled = config.amp == "fp16"});
  const bool autocast = config.amp != "none";
  const DType autocast_dtype = config.amp == "fp16" ? DType::f16 : DType::bf16;

  // ---- resume ----
  std::filesystem::create_directories(config.logdir);
  const std::string best_path = config.logdir + "/best.ckpt";
  const std::string metrics_path = config.logdir + "/metrics.csv";
  int64_t first_epoch = 0, best_epoch = 0;
  double best_accuracy = -1;
  Metadata run_identity = {{"model_size", std::to_string(config.model_size)},
                           {"batch_size", std::to_string(batch_size)},
                           {"seed", std::to_string(config.seed)},
                           {"amp", config.amp},
                           {"epochs", std::to_string(config.epochs)},
                           {"limit_train", std::to_string(config.limit_train)}};
  if (config.resume) {
    const Checkpoint checkpoint = load_checkpoint(last_path);
    for (const auto& [key, value] : run_identity) {
      EMBER_CHECK(checkpoint.metadata.count(key) && checkpoint.meta(key) == value,
                  "train: --resume: ", last_path, " was made with ", key, " = ",
                  checkpoint.metadata.count(key) ? checkpoint.meta(key) : "(none)",
                  ", this run asks for ", value, "; resume with the same flags");
    }
    NamedTensors model_state, optimizer_tensors;
    for (const auto& [name, tensor] : checkpoint.tensors) {
      if (name.rfind("model.", 0) == 0) model_state.emplace_back(name.substr(6), tensor);
      if (name.rfind("optimizer.", 0) == 0) optimizer_tensors.emplace_back(name.substr(10), tensor);
    }
    model->load_state_dict(model_state);
    optim::StateDict optimizer_state{optimizer_tensors, {}};
    for (const auto& [key, value] : checkpoint.metadata) {
      if (key.rfind("optimizer.", 0) == 0) optimizer_state.metadata[key.substr(10)] = value;
    }
    optimizer.load_state_dict(optimizer_state);
    scheduler.load_state_dict(checkpoint.metadata);
    if (scaler.is_enabled()) scaler.load_state_dict(checkpoint.metadata);
    default_generator().set_state(
        {std::stoull(checkpoint.meta("rng.seed")), std::stoull(checkpoint.meta("rng.offset"))});
    first_epoch = parse_int(checkpoint, "epoch");
    best_epoch = parse_int(checkpoint, "best_epoch");
    best_accuracy = std::stod(checkpoint.meta("best_valid_accuracy"));
    out << "resuming from " << last_path << " after epoch " << first_epoch << "\n";
    // Keep the metrics of the epochs the checkpoint covers; drop any written after it.
    std::ifstream old_metrics(metrics_path);
    std::string line, kept;
    int64_t row = -1;
    while (std::getline(old_metrics, line) && row < first_epoch) {
      kept += line + "\n";
      ++row;
    }
    std::ofstream(metrics_path, std::ios::trunc) << kept;
  } else {
    std::ofstream(metrics_path, std::ios::trunc)
        << "epoch,train_loss,train_accuracy,valid_loss,valid_accuracy,lr,seconds\n";
  }

  out << "ember train: resnet9(size " << config.model_size << ", " << model->num_parameters()
      << " parameters) on " << device << ", Fashion-MNIST " << train_set->size() << " train / "
      << valid_set->size() << " valid images, batch " << batch_size << ", Adam lr " << config.lr
      << ", amp " << config.amp << ", " << config.epochs << " epochs\n";

  TrainResult result;
  const int64_t last_epoch = config.stop_after > 0
                                 ? std::min(config.epochs, first_epoch + config.stop_after)
                                 : config.epochs;
  for (int64_t epoch = first_epoch; epoch < last_epoch; ++epoch) {
    const Clock::time_point epoch_start = Clock::now();
    const double lr = optimizer.param_groups()[0].lr;
    // ---- train ----
    model->train();
    train_loader.set_epoch(epoch);
    PassStats train_stats;
    ProgressLine progress(
        out, config.progress,
        "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(config.epochs),
        train_loader.num_batches());
    int64_t step = 0;
    for (const data::Batch& batch : train_loader) {
      const Tensor inputs = batch.inputs.to(device), targets = batch.targets.to(device);
      Tensor logits, loss;
      {
        AutocastGuard guard(autocast_dtype, autocast);
        logits = model->forward(inputs);
        loss = cross_entropy(logits, targets);
      }
      optimizer.zero_grad();
      scaler.scale(loss).backward();
      scaler.step(optimizer);
      scaler.update();
      train_stats.add(logits, targets, loss);
      progress.update(++step, train_stats);
    }
    scheduler.step();
    // ---- validate ----
    model->eval();
    PassStats valid_stats;
    {
      NoGradGuard no_grad;
      AutocastGuard guard(autocast_dtype, autocast);
      for (const data::Batch& batch : valid_loader) {
        const Tensor inputs = batch.inputs.to(device), targets = batch.targets.to(device);
        const Tensor logits = model->forward(inputs);
        valid_stats.add(logits, targets, cross_entropy(logits, targets));
      }
    }
    const double epoch_seconds = seconds_since(epoch_start);
    const bool best = valid_stats.accuracy() > best_accuracy;
    if (best) {
      best_accuracy = valid_stats.accuracy();
      best_epoch = epoch + 1;
    }
    char summary[256];
    std::snprintf(summary, sizeof(summary),
                  "epoch %lld/%lld  train loss %.4f acc %.2f%%  valid loss %.4f acc %.2f%%  "
                  "lr %.2g  %s%s\n",
                  static_cast<long long>(epoch + 1), static_cast<long long>(config.epochs),
                  train_stats.loss(), 100 * train_stats.accuracy(), valid_stats.loss(),
                  100 * valid_stats.accuracy(), lr, clock_text(epoch_seconds).c_str(),
                  best ? "  (best)" : "");
    out << summary << std::flush;
    std::ofstream(metrics_path, std::ios::app)
        << epoch + 1 << "," << exact(train_stats.loss()) << "," << exact(train_stats.accuracy())
        << "," << exact(valid_stats.loss()) << "," << exact(valid_stats.accuracy()) << ","
        << exact(lr) << "," << exact(epoch_seconds) << "\n";
    Metadata progress_state = run_identity;
    progress_state["epoch"] = std::to_string(epoch + 1);
    progress_state["best_epoch"] = std::to_string(best_epoch);
    progress_state["best_valid_accuracy"] = exact(best_accuracy);
    progress_state["valid_accuracy"] = exact(valid_stats.accuracy());
    save_state(last_path, *model, optimizer, scheduler, scaler, progress_state);
    if (best) save_state(best_path, *model, optimizer, scheduler, scaler, progress_state);
    result.last_valid_accuracy = valid_stats.accuracy();
  }
  if (last_epoch < config.epochs) {
    out << "stopping after epoch " << last_epoch << " of " << config.epochs
        << " (--stop-after); continue with the same flags and --resume\n";
  }
  result.best_valid_accuracy = best_accuracy;
  result.best_epoch = best_epoch;
  result.seconds = seconds_since(start);
  return result;
}

}  // namespace ember::apps
