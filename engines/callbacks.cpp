#include "engines/callbacks.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <ostream>
#include <sstream>

#include "engines/runner.h"
#include "optim/grad_clip.h"
#include "runtime/error.h"
#include "runtime/io/metadata_numbers.h"
#include "runtime/ops.h"

namespace ember::engines {
namespace {

const Tensor& batch_tensor(const IRunner& runner, const std::string& key, const char* callback) {
  const auto found = runner.batch.find(key);
  if (found != runner.batch.end()) return found->second;
  std::string keys;
  for (const auto& [name, tensor] : runner.batch)
    keys += (keys.empty() ? "" : ", ") + name;
  EMBER_FAIL(callback, ": the batch has no '", key, "' (it has {", keys,
             "}); handle_batch must set it, or pass the key it uses");
}

// "run.<key>"; built by append (GCC 12 warns falsely about `run_key(key)`).
std::string run_key(const std::string& key) {
  return std::string("run.").append(key);
}

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string clock_text(double seconds) {
  char buffer[32];
  const int total = static_cast<int>(std::lround(std::max(0.0, seconds)));
  std::snprintf(buffer, sizeof(buffer), "%d:%02d", total / 60, total % 60);
  return buffer;
}

}  // namespace

// ---- criterion, backward ----

CriterionCallback::CriterionCallback(std::string input_key, std::string target_key,
                                     std::string metric_key)
    : ICallback(CallbackOrder::metric),
      input_key_(std::move(input_key)),
      target_key_(std::move(target_key)),
      metric_key_(std::move(metric_key)) {}

void CriterionCallback::on_batch_end(IRunner& runner) {
  EMBER_CHECK(runner.criterion != nullptr,
              "CriterionCallback: the runner has no criterion (pass one, or override "
              "get_criterion)");
  const Tensor& output = batch_tensor(runner, input_key_, "CriterionCallback");
  const Tensor& target = batch_tensor(runner, target_key_, "CriterionCallback");
  Scope autocast = runner.engine->autocast();
  runner.batch_metrics[metric_key_] = runner.criterion(output, target);
}

BackwardCallback::BackwardCallback(std::string metric_key)
    : ICallback(CallbackOrder::backward), metric_key_(std::move(metric_key)) {}

void BackwardCallback::on_batch_end(IRunner& runner) {
  if (!runner.is_train_loader) return;
  const auto loss = runner.batch_metrics.find(metric_key_);
  EMBER_CHECK(loss != runner.batch_metrics.end(), "BackwardCallback: no batch metric '",
              metric_key_, "' to differentiate (add a CriterionCallback with that metric_key)");
  EMBER_CHECK(runner.optimizer != nullptr, "BackwardCallback: the runner has no optimizer");
  runner.engine->backward_loss(loss->second, *runner.model, *runner.optimizer);
}

// ---- optimizer ----

OptimizerCallback::OptimizerCallback(OptimizerOptions options)
    : ICallback(CallbackOrder::optimizer), options_(options) {
  EMBER_CHECK(options_.accumulation_steps >= 1,
              "OptimizerCallback: accumulation_steps must be 1 or more, got ",
              options_.accumulation_steps);
  EMBER_CHECK(options_.max_grad_norm >= 0,
              "OptimizerCallback: max_grad_norm must be >= 0 (0: no clipping), got ",
              options_.max_grad_norm);
}

void OptimizerCallback::on_loader_start(IRunner& runner) {
  accumulated_ = 0;
  if (!runner.is_train_loader) return;
  runner.engine->zero_grad(*runner.model, *runner.optimizer);
  // One step per accumulation_steps batches, and one for a shorter remainder at the end.
  const int64_t steps = options_.accumulation_steps;
  if (steps > 1)
    runner.engine->on_train_loader_start((runner.loader_batch_len + steps - 1) / steps);
}

void OptimizerCallback::on_batch_start(IRunner& runner) {
  if (!runner.is_train_loader) return;
  const bool steps_after_this = accumulated_ + 1 == options_.accumulation_steps ||
                                runner.loader_batch_step == runner.loader_batch_len;
  // Batches that only accumulate keep their gradients local (DDP reduces once, at the step).
  if (!steps_after_this) no_sync_ = runner.engine->no_sync(*runner.model);
}

void OptimizerCallback::on_batch_end(IRunner& runner) {
  if (!runner.is_train_loader) return;
  no_sync_.close();
  optim::Optimizer& optimizer = *runner.optimizer;
  runner.batch_metrics["lr"] = scalar_tensor(optimizer.param_groups().at(0).lr, DType::f64);
  ++accumulated_;
  if (accumulated_ < options_.accumulation_steps &&
      runner.loader_batch_step < runner.loader_batch_len)
    return;
  if (accumulated_ > 1) {
    // The mean of the accumulated batches' gradients, as one larger batch would give. Divided
    // by the integer: 1 / 3 as a number meets an f16/bf16 gradient as a 0-d tensor of its dtype,
    // 0.333984375 in bf16, where small integers are exact.
    NoGradGuard no_grad;
    const Scalar batches(int64_t{accumulated_});
    for (const optim::ParamGroup& group : optimizer.param_groups()) {
      for (const Tensor& param : group.params) {
        Tensor grad = param.grad();
        if (grad.defined()) grad.div_(batches);
      }
    }
  }
  if (options_.max_grad_norm > 0) {
    runner.engine->unscale_gradients(optimizer);
    std::vector<Tensor> params;
    for (const optim::ParamGroup& group : optimizer.param_groups())
      params.insert(params.end(), group.params.begin(), group.params.end());
    optim::clip_grad_norm_(params, options_.max_grad_norm);
  }
  runner.optimizer_stepped = runner.engine->optimizer_step(*runner.model, optimizer);
  runner.engine->zero_grad(*runner.model, optimizer);
  accumulated_ = 0;
}

void OptimizerCallback::on_loader_end(IRunner&) {
  no_sync_.close();
}

// ---- scheduler ----

SchedulerCallback::SchedulerCallback(Mode mode, std::string loader_key, std::string metric_key)
    : ICallback(CallbackOrder::scheduler),
      mode_(mode),
      loader_key_(std::move(loader_key)),
      metric_key_(std::move(metric_key)) {}

void SchedulerCallback::on_epoch_start(IRunner&) {
  optimizer_stepped_this_epoch_ = false;
}

void SchedulerCallback::on_batch_end(IRunner& runner) {
  // After the OptimizerCallback (order optimizer < scheduler): optimizer_stepped is this batch's.
  if (runner.is_train_loader && runner.optimizer_stepped) optimizer_stepped_this_epoch_ = true;
  if (mode_ != Mode::batch || !runner.scheduler) return;
  EMBER_CHECK(!runner.scheduler->steps_on_metric(),
              "SchedulerCallback: a scheduler that steps on a metric (ReduceLROnPlateau) steps "
              "once per epoch; use SchedulerCallback(SchedulerCallback::Mode::epoch, ...)");
  if (runner.is_train_loader && runner.optimizer_stepped) runner.scheduler->step();
}

void SchedulerCallback::on_epoch_end(IRunner& runner) {
  if (mode_ != Mode::epoch || !runner.scheduler || !optimizer_stepped_this_epoch_) return;
  if (runner.scheduler->steps_on_metric())
    runner.scheduler->step(runner.epoch_metric(loader_key_, metric_key_));
  else
    runner.scheduler->step();
}

// ---- accuracy ----

AccuracyCallback::AccuracyCallback(std::string input_key, std::string target_key,
                                   std::vector<int64_t> topk)
    : ICallback(CallbackOrder::metric),
      input_key_(std::move(input_key)),
      target_key_(std::move(target_key)),
      topk_(std::move(topk)) {
  EMBER_CHECK(!topk_.empty(), "AccuracyCallback: topk is empty; pass e.g. {1, 3, 5}");
  for (int64_t k : topk_)
    EMBER_CHECK(k >= 1, "AccuracyCallback: topk values must be 1 or more, got ", k);
}

void AccuracyCallback::on_batch_end(IRunner& runner) {
  NoGradGuard no_grad;
  // logits (N, C), targets (N) -> rank (N): how many classes score above the target's.
  const Tensor logits =
      batch_tensor(runner, input_key_, "AccuracyCallback").detach().to(DType::f32);
  const Tensor targets = batch_tensor(runner, target_key_, "AccuracyCallback");
  EMBER_CHECK(logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == logits.size(0),
              "AccuracyCallback: expected logits (N, C) and targets (N), got ",
              shape_str(logits.sizes()), " and ", shape_str(targets.sizes()));
  EMBER_CHECK(targets.device() == logits.device(), "AccuracyCallback: logits on ",
              logits.device().str(), " but targets on ", targets.device().str(),
              " (the engine's sync_device places both)");
  const Tensor target_index = targets.to(DType::i64).unsqueeze(1);  // (N, 1)
  const Tensor target_logit = gather(logits, 1, target_index);
  // Ties rank the lower class index first, as argmax does (16-bit logits tie often). The class
  // indices are made once per (C, device): arange on a GPU copies from the host, which waits.
  if (!class_index_.defined() || class_index_.size(1) != logits.size(1) ||
      class_index_.device() != logits.device())
    class_index_ = arange(logits.size(1), TensorOptions(DType::i64, logits.device())).unsqueeze(0);
  const Tensor ahead = add(
      gt(logits, target_logit).to(DType::i64),
      mul(eq(logits, target_logit).to(DType::i64), lt(class_index_, target_index).to(DType::i64)));
  const Tensor rank = sum(ahead, {1});
  const double n = static_cast<double>(logits.size(0));
  for (int64_t k : topk_) {
    // Stays on the logits' device: the runner averages it there, without a synchronisation.
    const Tensor value = sum(lt(rank, k).to(DType::f64)) / n;  // counts: exact in f64
    char name[32];
    std::snprintf(name, sizeof(name), "accuracy%02lld", static_cast<long long>(k));
    runner.batch_metrics[k == 1 ? "accuracy" : name] = value;
  }
}

// ---- checkpoints ----

CheckpointCallback::CheckpointCallback(CheckpointOptions options)
    : ICallback(CallbackOrder::checkpoint), options_(std::move(options)) {
  EMBER_CHECK(!options_.logdir.empty(), "CheckpointCallback: logdir is empty");
  EMBER_CHECK(options_.topk >= 1, "CheckpointCallback: topk must be 1 or more, got ",
              options_.topk);
}

std::string CheckpointCallback::topk_file(const IRunner& runner, int64_t epoch) const {
  char name[32];
  std::snprintf(name, sizeof(name), "epoch-%04lld.ckpt", static_cast<long long>(epoch));
  // Each stage keeps its own top k: the stage's name keeps its files apart from the others'.
  const std::string stage = runner.num_stages > 1 ? runner.stage + "." : "";
  return options_.logdir + "/" + stage + name;
}

namespace {

// The temporaries (NAME.ckpt.tmp-PID, save_checkpoint's) that a save killed midway left in
// `logdir`: those of processes that no longer run. A full checkpoint's size each, never read.
// Returns how many were removed.
int remove_abandoned_temporaries(const std::string& logdir) {
  int removed = 0;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(logdir, error)) {
    const std::string name = entry.path().filename().string();
    const size_t mark = name.find(".ckpt.tmp-");
    if (mark == std::string::npos) continue;
    const char* digits = name.data() + mark + 10;
    const char* end = name.data() + name.size();
    pid_t pid = 0;
    const auto [stop, parsed] = std::from_chars(digits, end, pid);
    if (parsed != std::errc() || stop != end || pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // it runs (EPERM: another user's)
    std::error_code ignored;
    if (std::filesystem::remove(entry.path(), ignored)) ++removed;
  }
  return removed;
}

}  // namespace

void CheckpointCallback::on_stage_start(IRunner& runner) {
  best_.clear();
  last_was_best_ = false;
  if (runner.engine->is_master_process()) {
    std::filesystem::create_directories(options_.logdir);
    const int removed = remove_abandoned_temporaries(options_.logdir);
    if (removed > 0 && options_.out != nullptr) {
      *options_.out << "removed " << removed << " temporary checkpoint file"
                    << (removed == 1 ? "" : "s") << " left in " << options_.logdir
                    << " by a save that did not finish\n";
    }
  }
  if (options_.resume.empty()) return;
  // A run's logdir stands for its last checkpoint.
  const std::string path = std::filesystem::is_directory(options_.resume)
                               ? options_.resume + "/last.ckpt"
                               : options_.resume;
  EMBER_CHECK(std::filesystem::exists(path), "resume: no checkpoint at '", path,
              "' (train without resume first, or check the path)");
  const Checkpoint checkpoint = runner.engine->load_checkpoint(path);
  for (const auto& [key, value] : options_.run_identity) {
    const bool has = checkpoint.metadata.count(run_key(key)) > 0;
    EMBER_CHECK(has && checkpoint.meta(run_key(key)) == value, "resume: ", path, " was made with ",
                key, " = ", has ? checkpoint.meta(run_key(key)) : "(none)", ", this run asks for ",
                value, "; resume with the same flags");
  }
  EMBER_CHECK(checkpoint.metadata.count("checkpoint.epoch"), "resume: ", path,
              " has no checkpoint.epoch: it was not written by a CheckpointCallback");
  auto meta_or = [&](const char* key, const std::string& fallback) {
    return checkpoint.metadata.count(key) ? checkpoint.meta(key) : fallback;
  };
  auto count = [&](const std::string& text, const char* key) {
    return parse_integer(text, "resume: " + path + "'s " + key, 0);
  };
  // Where the checkpoint was made. (Checkpoints from before stages were recorded come from a run
  // of one stage: the first, and the global epoch is the stage's.)
  const int64_t checkpoint_stage_index =
      count(meta_or("checkpoint.stage_index", "0"), "checkpoint.stage_index");
  const std::string checkpoint_stage = meta_or("checkpoint.stage", runner.stage);
  const int64_t checkpoint_epoch = count(checkpoint.meta("checkpoint.epoch"), "checkpoint.epoch");
  const int64_t checkpoint_global_epoch =
      count(meta_or("checkpoint.global_epoch", std::to_string(checkpoint_epoch)),
            "checkpoint.global_epoch");
  EMBER_CHECK(checkpoint_stage_index < runner.num_stages, "resume: ", path, " was made in stage ",
              checkpoint_stage_index + 1, " ('", checkpoint_stage, "'), but this run has ",
              runner.num_stages, " stage(s); resume with the same stages()");
  // Each stage's CheckpointCallback reads the checkpoint at its start (a stage's callbacks are
  // its own): only the checkpoint's stage loads it.
  if (checkpoint_stage_index < runner.stage_index) return;  // the run is past it: nothing to load
  if (checkpoint_stage_index > runner.stage_index) {
    // A stage the checkpoint had finished: none of its epochs runs again, and the loggers keep
    // every epoch the checkpoint covers.
    runner.epoch = runner.stage_len;
    runner.global_epoch = checkpoint_global_epoch;
    return;
  }
  EMBER_CHECK(checkpoint_stage == runner.stage, "resume: ", path, " was made in stage '",
              checkpoint_stage, "', but this run's stage ", runner.stage_index + 1, " is '",
              runner.stage, "'; resume with the same stages()");
  const int64_t batch_step =
      count(checkpoint.meta("checkpoint.batch_step"), "checkpoint.batch_step");
  const std::string stopped = meta_or("checkpoint.need_early_stop", "0");
  EMBER_CHECK(stopped == "0" || stopped == "1", "resume: ", path,
              "'s checkpoint.need_early_stop should be 0 or 1, got '", stopped, "'");
  // "epoch:value,epoch:value", best first.
  std::vector<std::pair<int64_t, double>> best;
  std::istringstream list(checkpoint.meta("checkpoint.best"));
  std::string item;
  while (std::getline(list, item, ',')) {
    const size_t colon = item.find(':');
    EMBER_CHECK(colon != std::string::npos, "resume: ", path,
                "'s checkpoint.best should list epoch:value pairs, got '",
                checkpoint.meta("checkpoint.best"), "'");
    best.emplace_back(
        count(item.substr(0, colon), "checkpoint.best epoch"),
        parse_real(item.substr(colon + 1), "resume: " + path + "'s checkpoint.best value"));
  }
  // Everything read: the engine loads the model, optimizer and scheduler, then the runner moves.
  runner.engine->unpack_checkpoint(checkpoint, runner.model.get(), runner.optimizer.get(),
                                   runner.scheduler.get());
  runner.epoch = checkpoint_epoch;
  runner.global_epoch = checkpoint_global_epoch;
  runner.batch_step = batch_step;
  // A stage that had stopped early (EarlyStoppingCallback) stays stopped: the next stage follows.
  runner.need_early_stop = stopped == "1";
  best_ = std::move(best);
  for (const auto& [name, callback] : runner.callbacks) {
    const std::string prefix = "callback." + name + ".";
    std::map<std::string, std::string> state;
    for (const auto& [key, value] : checkpoint.metadata)
      if (key.rfind(prefix, 0) == 0) state[key.substr(prefix.size())] = value;
    if (!state.empty()) callback->load_state_dict(state);
  }
  if (options_.out && runner.engine->is_master_process()) {
    *options_.out << "resuming from " << path << " after epoch " << runner.epoch;
    if (runner.num_stages > 1) *options_.out << " of stage " << runner.stage;
    *options_.out << "\n";
  }
}

void CheckpointCallback::on_epoch_end(IRunner& runner) {
  value_ = runner.epoch_metric(options_.loader_key, options_.metric_key);
  last_was_best_ = best_.empty() || better(value_, best_.front().second);
  // Insert into the top-k list (stable: an equal value ranks after the earlier epoch).
  std::vector<std::pair<int64_t, double>> ranked = best_;
  auto position = ranked.begin();
  while (position != ranked.end() && !better(value_, position->second))
    ++position;
  ranked.insert(position, {runner.epoch, value_});
  dropped_.clear();
  while (static_cast<int64_t>(ranked.size()) > options_.topk) {
    dropped_.push_back(ranked.back().first);
    ranked.pop_back();
  }
  best_ = ranked;
  // Set by callbacks ordered before this one (EarlyStoppingCallback): the stage ends here. Those
  // after it (a --stop-after) only end this run, which a resume continues.
  stage_stopped_early_ = runner.need_early_stop;
}

void CheckpointCallback::on_epoch_logged(IRunner& runner) {
  if (!runner.engine->is_master_process()) return;
  Metadata metadata;
  for (const auto& [key, identity] : options_.run_identity)
    metadata[run_key(key)] = identity;
  metadata["checkpoint.epoch"] = std::to_string(runner.epoch);
  metadata["checkpoint.batch_step"] = std::to_string(runner.batch_step);
  metadata["checkpoint.stage"] = runner.stage;
  metadata["checkpoint.stage_index"] = std::to_string(runner.stage_index);
  metadata["checkpoint.global_epoch"] = std::to_string(runner.global_epoch);
  metadata["checkpoint.need_early_stop"] = stage_stopped_early_ ? "1" : "0";
  metadata["checkpoint.metric"] = options_.loader_key + "/" + options_.metric_key;
  metadata["checkpoint.value"] = format_exact(value_);
  std::string list;
  for (const auto& [epoch, metric] : best_) {
    if (!list.empty()) list += ',';
    list.append(std::to_string(epoch)).append(":").append(format_exact(metric));
  }
  metadata["checkpoint.best"] = list;
  for (const auto& [name, callback] : runner.callbacks)
    for (const auto& [key, value] : callback->state_dict())
      metadata["callback." + name + "." + key] = value;
  const Checkpoint checkpoint = runner.engine->pack_checkpoint(
      runner.model.get(), runner.optimizer.get(), runner.scheduler.get(), metadata);
  // last.ckpt, which a resume reads, after the files its best list names: a run stopped before it
  // redoes the epoch and writes them again. The epochs it pushed out of the top k go after it (a
  // stop in between leaves a file too many, never one too few).
  if (last_was_best_) runner.engine->save_checkpoint(checkpoint, options_.logdir + "/best.ckpt");
  const bool kept = std::any_of(best_.begin(), best_.end(),
                                [&](const auto& entry) { return entry.first == runner.epoch; });
  if (options_.topk > 1 && kept)
    runner.engine->save_checkpoint(checkpoint, topk_file(runner, runner.epoch));
  runner.engine->save_checkpoint(checkpoint, options_.logdir + "/last.ckpt");
  if (options_.topk > 1) {
    for (int64_t epoch : dropped_)
      std::filesystem::remove(topk_file(runner, epoch));
  }
}

// ---- early stopping ----

EarlyStoppingCallback::EarlyStoppingCallback(int64_t patience, std::string loader_key,
                                             std::string metric_key, bool minimize,
                                             double min_delta)
    // Before the checkpoint (order checkpoint): the epoch it saves includes this epoch's count.
    : ICallback(CallbackOrder::scheduler),
      patience_(patience),
      loader_key_(std::move(loader_key)),
      metric_key_(std::move(metric_key)),
      minimize_(minimize),
      min_delta_(min_delta) {
  EMBER_CHECK(patience_ >= 1, "EarlyStoppingCallback: patience must be 1 or more, got ", patience_);
}

void EarlyStoppingCallback::on_epoch_end(IRunner& runner) {
  const double value = runner.epoch_metric(loader_key_, metric_key_);
  // Catalyst's MetricHandler: an improvement by min_delta or more counts, the bound included
  // (with min_delta 0, a tie with the best counts).
  const bool improved =
      !has_best_ || (minimize_ ? value <= best_ - min_delta_ : value >= best_ + min_delta_);
  if (improved) {
    best_ = value;
    has_best_ = true;
    bad_epochs_ = 0;
    return;
  }
  if (++bad_epochs_ >= patience_) runner.need_early_stop = true;
}

std::map<std::string, std::string> EarlyStoppingCallback::state_dict() const {
  return {{"has_best", has_best_ ? "1" : "0"},
          {"best", format_exact(best_)},
          {"bad_epochs", std::to_string(bad_epochs_)}};
}

void EarlyStoppingCallback::load_state_dict(const std::map<std::string, std::string>& state) {
  auto value_of = [&](const char* key) -> const std::string& {
    const auto found = state.find(key);
    EMBER_CHECK(found != state.end(), "EarlyStoppingCallback: the checkpoint's state has no \"",
                key, "\"");
    return found->second;
  };
  const std::string& has_best = value_of("has_best");
  EMBER_CHECK(has_best == "0" || has_best == "1",
              "EarlyStoppingCallback: the checkpoint's has_best should be 0 or 1, got '", has_best,
              "'");
  const double best = parse_real(value_of("best"), "EarlyStoppingCallback: the checkpoint's best");
  bad_epochs_ = parse_integer(value_of("bad_epochs"),
                              "EarlyStoppingCallback: the checkpoint's bad_epochs", 0);
  has_best_ = has_best == "1";
  best_ = best;
}

// ---- progress ----

ProgressBarCallback::ProgressBarCallback(std::ostream& out, Progress mode, bool all_loaders)
    : ICallback(CallbackOrder::external), out_(out), mode_(mode), all_loaders_(all_loaders) {}

void ProgressBarCallback::on_loader_start(IRunner& runner) {
  active_ = mode_ != Progress::none && runner.engine->is_master_process() &&
            (all_loaders_ || runner.is_train_loader) && runner.loader_batch_len > 0;
  label_ = "epoch " + std::to_string(runner.epoch) + "/" + std::to_string(runner.stage_len);
  if (all_loaders_) label_ += " " + runner.loader_key;
  start_ = seconds_now();
  last_draw_ = -1;
  printed_tenth_ = -1;
}

void ProgressBarCallback::on_batch_end(IRunner& runner) {
  if (!active_) return;
  const int64_t done = runner.loader_batch_step, total = runner.loader_batch_len;
  const double elapsed = seconds_now() - start_;
  const bool last = done == total;
  if (mode_ == Progress::lines) {
    const int64_t tenth = done * 10 / total;
    if (tenth == printed_tenth_ && !last) return;
    printed_tenth_ = tenth;
  } else if (elapsed - last_draw_ < 0.2 && !last) {
    return;
  }
  last_draw_ = elapsed;
  // The runner adds this batch to its averages after on_batch_end: count it here.
  double loss = 0;
  const Metrics running = runner.running_metrics();
  const auto current = runner.batch_metrics.find("loss");
  if (current != runner.batch_metrics.end()) {
    const double before = static_cast<double>(runner.loader_sample_step - runner.batch_size);
    const double earlier = running.count("loss") ? running.at("loss") * before : 0;
    loss = (earlier + current->second.item<double>() * static_cast<double>(runner.batch_size)) /
           static_cast<double>(std::max<int64_t>(runner.loader_sample_step, 1));
  }
  constexpr int kWidth = 24;
  const int filled = static_cast<int>(kWidth * done / total);
  std::string bar(static_cast<size_t>(filled), '=');
  if (filled < kWidth) bar += '>';
  bar.resize(kWidth, ' ');
  char text[256];
  std::snprintf(
      text, sizeof(text), "%s [%s] %lld/%lld  loss %.4f  %.0f img/s  ETA %s", label_.c_str(),
      bar.c_str(), static_cast<long long>(done), static_cast<long long>(total), loss,
      static_cast<double>(runner.loader_sample_step) / std::max(elapsed, 1e-9),
      clock_text(elapsed / static_cast<double>(done) * static_cast<double>(total - done)).c_str());
  if (mode_ == Progress::live) {
    out_ << "\r" << text << "\x1b[K" << std::flush;
    if (last) out_ << "\r\x1b[K" << std::flush;
  } else {
    out_ << text << "\n" << std::flush;
  }
}

}  // namespace ember::engines
