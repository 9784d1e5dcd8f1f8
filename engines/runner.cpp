#include "engines/runner.h"

#include <algorithm>
#include <iostream>
#include <optional>
#include <sstream>

#include "engines/callbacks.h"
#include "engines/factory.h"
#include "engines/loggers.h"
#include "runtime/error.h"
#include "runtime/ops.h"
#include "runtime/random.h"

namespace ember::engines {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Keeps the later callback of a name given twice, then sorts by order (stable: equal orders keep
// the order they were given in).
Callbacks sorted_callbacks(const Callbacks& given) {
  Callbacks unique;
  for (const auto& [name, callback] : given) {
    EMBER_CHECK(callback != nullptr, "runner: callback '", name, "' is empty");
    const std::string& key = name;  // (clang before 16 cannot capture a structured binding)
    auto same = std::find_if(unique.begin(), unique.end(),
                             [&](const auto& entry) { return entry.first == key; });
    if (same != unique.end())
      same->second = callback;
    else
      unique.emplace_back(name, callback);
  }
  std::stable_sort(unique.begin(), unique.end(), [](const auto& a, const auto& b) {
    return static_cast<int>(a.second->order()) < static_cast<int>(b.second->order());
  });
  return unique;
}

// Checkpoints and logs name the stage: the names must tell the stages apart.
void check_stage_names(const std::vector<std::string>& names) {
  EMBER_CHECK(!names.empty(), "runner: stages() is empty; a run needs one stage at least");
  for (size_t i = 0; i < names.size(); ++i) {
    EMBER_CHECK(!names[i].empty(), "runner: stage ", i + 1, " of stages() has an empty name");
    for (size_t j = 0; j < i; ++j)
      EMBER_CHECK(names[j] != names[i], "runner: stages() names '", names[i], "' twice (stages ",
                  j + 1, " and ", i + 1, "); checkpoints and logs tell stages apart by name");
  }
}

}  // namespace

EnginePtr IRunner::get_engine() {
  return make_engine("auto");
}

Metrics IRunner::running_metrics() const {
  Metrics metrics;
  for (const auto& [key, running] : running_)
    metrics[key] = running.weight > 0 && running.weighted_sum.defined()
                       ? running.weighted_sum.item<double>() / running.weight
                       : 0;
  return metrics;
}

double IRunner::epoch_metric(const std::string& loader_name, const std::string& key) const {
  std::ostringstream available;
  for (const auto& [name, metrics] : epoch_metrics) {
    for (const auto& [metric, value] : metrics) {
      if (name == loader_name && metric == key) return value;
      available << (available.tellp() > 0 ? ", " : "") << name << "/" << metric;
    }
  }
  EMBER_FAIL("runner: no metric '", key, "' for loader '", loader_name,
             "' this epoch; there are: ", available.str().empty() ? "none" : available.str(),
             " (check the loader and metric names, and that a callback computes the metric)");
}

void IRunner::run_event(void (ICallback::*event)(IRunner&)) {
  for (const auto& entry : callbacks)
    (entry.second.get()->*event)(*this);
}

void IRunner::run() {
  engine = get_engine();
  EMBER_CHECK(engine != nullptr, "runner: get_engine() returned no engine");
  loggers = engine->is_master_process() ? get_loggers() : Loggers{};
  try {
    const std::vector<std::string> stage_names = stages();
    check_stage_names(stage_names);
    num_stages = static_cast<int64_t>(stage_names.size());
    for (size_t i = 0; i < stage_names.size(); ++i)
      run_stage(stage_names[i], static_cast<int64_t>(i));
    run_event(&ICallback::on_experiment_end);
  } catch (...) {
    try {
      run_event(&ICallback::on_exception);
    } catch (...) {
      // The first error is the one worth reporting.
    }
    for (auto& [name, logger] : loggers)
      logger->close();
    engine->abandon_components();  // no barrier: the other ranks may never get there
    throw;
  }
  for (auto& [name, logger] : loggers)
    logger->close();
  engine->deinit_components();
}

void IRunner::run_stage(const std::string& stage_name, int64_t index) {
  const bool first = index == 0;
  stage = stage_name;
  stage_index = index;
  stage_len = get_stage_len(stage);
  EMBER_CHECK(stage_len >= 1, "runner: stage '", stage, "' has ", stage_len,
              " epochs; get_stage_len must return 1 or more");
  // Every rank draws different dropout masks and augmentations, reproducibly.
  manual_seed(seed + static_cast<uint64_t>(engine->rank()));
  Components parts = engine->init_components(
      [&] { return get_model(stage); }, [&] { return get_criterion(stage); },
      [&](nn::Module& placed) { return get_optimizer(stage, placed); },
      [&](optim::Optimizer& built) { return get_scheduler(stage, built); });
  model = parts.model;
  criterion = parts.criterion;
  optimizer = parts.optimizer;
  scheduler = parts.scheduler;
  if (optimizer) {
    // An optimizer built before the engine converted the model (O2) would update the 16-bit
    // weights directly, without f32 masters.
    for (size_t g = 0; g < optimizer->param_groups().size(); ++g) {
      const auto& params = optimizer->param_groups()[g].params;
      for (size_t i = 0; i < params.size(); ++i) {
        const DType dtype = params[i].dtype();
        EMBER_CHECK((dtype != DType::f16 && dtype != DType::bf16) ||
                        optimizer->master_param(g, i).dtype() != dtype,
                    "runner: the optimizer holds ", dtype,
                    " parameters without f32 master weights: it was "
                    "built before the engine (",
                    engine->name(),
                    ") converted the model; build it in "
                    "get_optimizer, or pass optimizer_fn instead of optimizer");
      }
    }
  }
  loaders = get_loaders(stage);
  EMBER_CHECK(!loaders.empty(), "runner: stage '", stage,
              "' has no loaders (get_loaders / "
              "loaders is empty)");
  for (auto& [name, given] : loaders) {
    EMBER_CHECK(given != nullptr, "runner: loader '", name, "' is empty");
    // Each rank its shard (a no-op for one process and for loaders already sharded).
    given = engine->shard_loader(given);
  }
  callbacks = sorted_callbacks(get_callbacks(stage));
  epoch = 0;
  if (first) global_epoch = 0;
  batch_step = 0;
  need_early_stop = false;
  if (first) run_event(&ICallback::on_experiment_start);
  // A resume (CheckpointCallback) sets epoch and global_epoch here, before the loggers start.
  run_event(&ICallback::on_stage_start);
  for (auto& [name, logger] : loggers)
    logger->start(*this);
  while (epoch < stage_len && !need_early_stop) {
    ++epoch;
    ++global_epoch;
    epoch_metrics.clear();
    run_event(&ICallback::on_epoch_start);
    for (const auto& [name, current] : loaders) {
      loader_key = name;
      loader = current;
      run_loader();
    }
    std::optional<double> train_loss;
    for (const auto& [key, metrics] : epoch_metrics) {
      auto it = metrics.find("loss");
      if (!train_loss && key.rfind("train", 0) == 0 && it != metrics.end()) train_loss = it->second;
    }
    engine->on_epoch_end(train_loss);
    run_event(&ICallback::on_epoch_end);
    for (auto& [name, logger] : loggers)
      logger->log_epoch(epoch_metrics, *this);
    run_event(&ICallback::on_epoch_logged);
  }
  run_event(&ICallback::on_stage_end);
}

void IRunner::run_loader() {
  is_train_loader = loader_key.rfind("train", 0) == 0;
  loader->set_epoch(epoch - 1);
  if (model) model->train(is_train_loader);
  loader_batch_len = loader->num_batches();
  // As Catalyst ("DataLoader with name ... is empty"): an epoch of no batches would train
  // nothing and log zeros without a word. Every rank holds as many batches (DistributedSampler
  // pads), so every rank stops here alike.
  EMBER_CHECK(
      loader_batch_len > 0, "runner: loader '", loader_key, "' has no batches (",
      loader->sampler().size(), " samples in batches of ", loader->batch_size(),
      loader->options().drop_last ? ", the last incomplete one dropped" : "",
      "); give it more samples, a smaller batch_size or drop_last = false, or leave it out");
  if (is_train_loader) engine->on_train_loader_start(loader_batch_len);
  loader_batch_step = 0;
  loader_sample_step = 0;
  running_.clear();
  const Clock::time_point start = Clock::now();
  double first_batch_seconds = 0;
  run_event(&ICallback::on_loader_start);
  {
    GradModeGuard gradients_only_when_training(is_train_loader);
    for (const data::Batch& raw : *loader) {
      ++loader_batch_step;
      batch_size = raw.size();
      loader_sample_step += batch_size;
      if (is_train_loader) ++batch_step;
      optimizer_stepped = false;
      batch.clear();
      batch_metrics.clear();
      data::Batch placed{engine->sync_device(raw.inputs), engine->sync_device(raw.targets)};
      run_event(&ICallback::on_batch_start);
      {
        Scope autocast = engine->autocast();
        handle_batch(placed);
      }
      run_event(&ICallback::on_batch_end);
      if (loader_batch_step == 1) first_batch_seconds = seconds_since(start);
      for (const auto& [key, value] : batch_metrics) {
        EMBER_CHECK(value.defined() && value.numel() == 1, "runner: batch metric '", key,
                    "' should hold one number, got ",
                    value.defined() ? describe(value) : std::string("an undefined tensor"));
        Running& running = running_[key];
        // In f64 on the metric's device, the same rounding as on the host: no synchronisation.
        NoGradGuard no_grad;
        const Tensor weighted = value.detach().to(DType::f64) * static_cast<double>(batch_size);
        running.weighted_sum =
            running.weighted_sum.defined() ? running.weighted_sum + weighted : weighted;
        running.weight += static_cast<double>(batch_size);
      }
    }
  }
  // Averages over every rank: one sum of (value * samples, samples) per metric, in key order
  // (the same on every rank).
  // The loader's one read of device metrics (the first item() waits for the GPU).
  std::vector<double> sums;
  for (const auto& [key, running] : running_) {
    sums.push_back(running.weighted_sum.defined() ? running.weighted_sum.item<double>() : 0.0);
    sums.push_back(running.weight);
  }
  sums.push_back(static_cast<double>(loader_sample_step));
  const Tensor reduced = engine->sync_tensor(
      from_vector(sums, {static_cast<int64_t>(sums.size())}, DType::f64), SyncMode::sum);
  const Tensor reduced_cpu = reduced.to(Device::cpu());
  const double* values = reduced_cpu.data<double>();
  loader_metrics.clear();
  size_t index = 0;
  for (const auto& [key, running] : running_) {
    loader_metrics[key] = values[index + 1] > 0 ? values[index] / values[index + 1] : 0;
    index += 2;
  }
  const double seconds = seconds_since(start);
  loader_metrics["throughput"] = values[index] / std::max(seconds, 1e-9);
  loader_metrics["seconds"] = seconds;
  loader_metrics["first_batch_seconds"] = first_batch_seconds;
  epoch_metrics.emplace_back(loader_key, loader_metrics);
  run_event(&ICallback::on_loader_end);
}

// ---- SupervisedRunner ----

void SupervisedRunner::train(TrainOptions options) {
  EMBER_CHECK(options.model != nullptr || options.model_fn != nullptr,
              "train: a model (or model_fn) is required");
  EMBER_CHECK(!(options.model && options.model_fn), "train: pass model or model_fn, not both");
  EMBER_CHECK(!options.loaders.empty(),
              "train: loaders is empty; pass at least a \"train\" loader");
  EMBER_CHECK(options.num_epochs >= 1, "train: num_epochs must be 1 or more, got ",
              options.num_epochs);
  EMBER_CHECK(!(options.optimizer && options.optimizer_fn),
              "train: pass optimizer or optimizer_fn, not both");
  EMBER_CHECK(!(options.scheduler && options.scheduler_fn),
              "train: pass scheduler or scheduler_fn, not both");
  if (!options.logdir.empty()) {
    bool has_valid = false;
    std::string names;
    for (const auto& [name, given] : options.loaders) {
      has_valid = has_valid || name == options.valid_loader;
      names += (names.empty() ? "" : ", ") + name;
    }
    EMBER_CHECK(has_valid, "train: valid_loader '", options.valid_loader,
                "' is not one of the loaders {", names,
                "}; checkpoints pick the best epoch by it (set valid_loader to one of them)");
  }
  options_ = std::move(options);
  seed = options_.seed;
  run();
}

EnginePtr SupervisedRunner::get_engine() {
  if (options_.engine_instance) return options_.engine_instance;
  std::string name = options_.engine;
  if (options_.ddp || options_.amp) {
    EMBER_CHECK(name == "auto", "train: pass engine or ddp/amp, not both (engine '", name, "')");
    name = options_.ddp && options_.amp ? "ddp-amp" : options_.ddp ? "ddp" : "amp";
  }
  return make_engine(name);
}

Loggers SupervisedRunner::get_loggers() {
  Loggers result;
  if (options_.use_default_loggers) {
    if (options_.verbose)
      result.emplace_back("console", std::make_shared<ConsoleLogger>(std::cout));
    if (!options_.logdir.empty()) {
      result.emplace_back("csv", std::make_shared<CSVLogger>(options_.logdir));
      result.emplace_back("tensorboard", std::make_shared<TensorboardLogger>(options_.logdir));
    }
  }
  for (const auto& entry : options_.loggers)
    result.push_back(entry);
  return result;
}

nn::ModulePtr SupervisedRunner::get_model(const std::string&) {
  return options_.model_fn ? options_.model_fn() : options_.model;
}

std::shared_ptr<optim::Optimizer> SupervisedRunner::get_optimizer(const std::string&,
                                                                  nn::Module& placed) {
  if (options_.optimizer_fn) return options_.optimizer_fn(placed);
  return options_.optimizer;
}

std::shared_ptr<optim::LRScheduler> SupervisedRunner::get_scheduler(const std::string&,
                                                                    optim::Optimizer& built) {
  if (options_.scheduler_fn) return options_.scheduler_fn(built);
  return options_.scheduler;
}

Callbacks SupervisedRunner::get_callbacks(const std::string&) {
  Callbacks result;
  if (options_.criterion) result.emplace_back("criterion", std::make_shared<CriterionCallback>());
  if (options_.optimizer || options_.optimizer_fn) {
    result.emplace_back("backward", std::make_shared<BackwardCallback>());
    result.emplace_back("optimizer", std::make_shared<OptimizerCallback>());
  }
  if (options_.scheduler || options_.scheduler_fn)
    result.emplace_back("scheduler", std::make_shared<SchedulerCallback>(
                                         SchedulerCallback::Mode::epoch, options_.valid_loader,
                                         options_.valid_metric));
  if (!options_.logdir.empty()) {
    result.emplace_back("checkpoint", std::make_shared<CheckpointCallback>(CheckpointOptions{
                                          .logdir = options_.logdir,
                                          .loader_key = options_.valid_loader,
                                          .metric_key = options_.valid_metric,
                                          .minimize = options_.minimize_valid_metric,
                                          .resume = options_.resume,
                                          .run_identity = {},
                                          .out = options_.verbose ? &std::cout : nullptr}));
  } else {
    EMBER_CHECK(options_.resume.empty(),
                "train: resume needs a logdir (the run's checkpoints and logs go there)");
  }
  if (options_.verbose)
    result.emplace_back("progress",
                        std::make_shared<ProgressBarCallback>(std::cout, Progress::lines));
  for (const auto& entry : options_.callbacks)
    result.push_back(entry);
  return result;
}

void SupervisedRunner::handle_batch(const data::Batch& input) {
  batch["features"] = input.inputs;
  batch["targets"] = input.targets;
  batch["logits"] = model->forward(input.inputs);
}

}  // namespace ember::engines
