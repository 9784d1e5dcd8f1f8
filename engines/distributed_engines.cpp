#include "engines/distributed_engines.h"

#include <cmath>
#include <cstdio>
#include <limits>

#include "distributed/data_parallel.h"
#include "distributed/distributed_sampler.h"
#include "runtime/io/metadata_numbers.h"
#include "runtime/random.h"

namespace ember::engines {

std::shared_ptr<data::DataLoader> shard_over_ranks(std::shared_ptr<data::DataLoader> loader,
                                                   const dist::ProcessGroup& group) {
  EMBER_CHECK(loader != nullptr, "shard_loader: the loader is empty");
  if (dynamic_cast<dist::DistributedSampler*>(&loader->sampler()) != nullptr) return loader;
  const data::DataLoaderOptions& options = loader->options();
  // The ranks' shards partition one permutation, so the sampler keeps the shared seed; with a
  // sampler given, the loader's own seed only drives the random transforms, and each rank gets
  // its own (seed + rank), as PyTorch's workers seeded per rank draw different augmentations.
  auto sampler = std::make_shared<dist::DistributedSampler>(
      loader->dataset().size(), group.size(), group.rank(),
      dist::DistributedSamplerOptions{.shuffle = options.shuffle, .seed = options.seed});
  data::DataLoaderOptions sharded = options;
  sharded.seed = options.seed + static_cast<uint64_t>(group.rank());
  return std::make_shared<data::DataLoader>(loader->dataset_ptr(), sharded, std::move(sampler));
}

namespace {

// Node k's optimizer tensors in a DASO checkpoint: "daso.node<k>.optimizer.<key>".
std::string node_optimizer_prefix(int node) {
  return "daso.node" + std::to_string(node) + ".optimizer.";
}

// Checkpoints hold rank 0's generator; rank r runs on seed + r (the runner seeds it so).
void continue_this_ranks_random_stream(int rank) {
  GeneratorState state = default_generator().state();
  state.seed += static_cast<uint64_t>(rank);
  default_generator().set_state(state);
}

}  // namespace

// ---- DistributedDataParallelEngine ----

template <typename Base>
void DistributedDataParallelEngine<Base>::sync_device(nn::Module& module) const {
  Base::sync_device(module);
  if (reducers_.count(&module)) return;
  dist::check_same_model_on_every_rank(module, *group_);
  std::vector<Tensor> state;
  for (const auto& [name, tensor] : module.state_dict())
    state.push_back(tensor);
  dist::broadcast_from_rank_zero(state, *group_);
  reducers_[&module] = dist::make_reducer(module, group_, options_);
}

template <typename Base>
dist::Reducer* DistributedDataParallelEngine<Base>::reducer_of(const nn::Module& module) const {
  auto it = reducers_.find(&module);
  return it == reducers_.end() ? nullptr : it->second.get();
}

template <typename Base>
Scope DistributedDataParallelEngine<Base>::no_sync(nn::Module& model) {
  dist::Reducer* reducer = reducer_of(model);
  EMBER_CHECK(reducer != nullptr, name(),
              ": no_sync on a model this engine did not place (pass it through "
              "init_components or sync_device first)");
  const bool previous = reducer->sync();
  reducer->set_sync(false);
  return Scope([reducer, previous] { reducer->set_sync(previous); });
}

template <typename Base>
bool DistributedDataParallelEngine<Base>::optimizer_step(nn::Module& model,
                                                         optim::Optimizer& optimizer) {
  const bool stepped = Base::optimizer_step(model, optimizer);
  if (options_.broadcast_buffers) dist::broadcast_from_rank_zero(model.buffers(), *group_);
  return stepped;
}

template <typename Base>
void DistributedDataParallelEngine<Base>::unpack_checkpoint(const Checkpoint& checkpoint,
                                                            nn::Module* model,
                                                            optim::Optimizer* optimizer,
                                                            optim::LRScheduler* scheduler) {
  Base::unpack_checkpoint(checkpoint, model, optimizer, scheduler);
  continue_this_ranks_random_stream(group_->rank());
}

template <typename Base>
void DistributedDataParallelEngine<Base>::deinit_components() {
  group_->barrier()->wait();
  abandon_components();
}

template <typename Base>
void DistributedDataParallelEngine<Base>::abandon_components() {
  reducers_.clear();
  Base::deinit_components();
}

template class DistributedDataParallelEngine<DeviceEngine>;
template class DistributedDataParallelEngine<AMPEngine>;
template class DistributedDataParallelEngine<O2Engine>;

// ---- DataParallelEngine ----

template <typename Base>
std::string DataParallelEngine<Base>::name() const {
  return detail::concat("dp-", Base::name(), " x", devices_.size());
}

template <typename Base>
Components DataParallelEngine<Base>::init_components(const ModelFn& model_fn,
                                                     const CriterionFn& criterion_fn,
                                                     const OptimizerFn& optimizer_fn,
                                                     const SchedulerFn& scheduler_fn) {
  EMBER_CHECK(model_fn != nullptr, "init_components: a model_fn is required");
  const ModelFn wrapped = [&]() -> nn::ModulePtr {
    nn::ModulePtr model = model_fn();
    EMBER_CHECK(model != nullptr, "init_components: model_fn returned an empty model");
    Base::sync_device(*model);  // on devices[0], converted for O2
    return nn::make<dist::DataParallel>(model, devices_);
  };
  return Base::init_components(wrapped, criterion_fn, optimizer_fn, scheduler_fn);
}

template <typename Base>
void DataParallelEngine<Base>::sync_device(nn::Module& module) const {
  if (dynamic_cast<dist::DataParallel*>(&module) != nullptr) return;
  Base::sync_device(module);
}

namespace {

constexpr std::string_view kWrapped = "module.";

// A key holding a parameter's name in an optimizer's state dict ("optimizer.group.G.param.I.name").
bool names_a_parameter(const std::string& key) {
  return key.starts_with("optimizer.") && key.ends_with(".name");
}

// Every model tensor and optimizer parameter name with DataParallel's prefix (wrap), or without
// it (unwrap); names already in the asked form are left as they are.
Checkpoint with_wrapped_names(Checkpoint checkpoint, bool wrap) {
  const auto rename = [wrap](const std::string& name) {
    if (wrap) return name.starts_with(kWrapped) ? name : std::string(kWrapped) + name;
    return name.starts_with(kWrapped) ? name.substr(kWrapped.size()) : name;
  };
  for (auto& [key, tensor] : checkpoint.tensors) {
    if (key.starts_with("model.")) key = "model." + rename(key.substr(6));
  }
  for (auto& [key, value] : checkpoint.metadata) {
    if (names_a_parameter(key)) value = rename(value);
  }
  return checkpoint;
}

}  // namespace

template <typename Base>
Checkpoint DataParallelEngine<Base>::pack_checkpoint(const nn::Module* model,
                                                     const optim::Optimizer* optimizer,
                                                     const optim::LRScheduler* scheduler,
                                                     const Metadata& extra) const {
  Checkpoint checkpoint = Base::pack_checkpoint(model, optimizer, scheduler, extra);
  if (dynamic_cast<const dist::DataParallel*>(model) == nullptr) return checkpoint;
  return with_wrapped_names(std::move(checkpoint), false);
}

template <typename Base>
void DataParallelEngine<Base>::unpack_checkpoint(const Checkpoint& checkpoint, nn::Module* model,
                                                 optim::Optimizer* optimizer,
                                                 optim::LRScheduler* scheduler) {
  if (dynamic_cast<const dist::DataParallel*>(model) == nullptr) {
    Base::unpack_checkpoint(checkpoint, model, optimizer, scheduler);
    return;
  }
  Base::unpack_checkpoint(with_wrapped_names(checkpoint, true), model, optimizer, scheduler);
}

template class DataParallelEngine<DeviceEngine>;
template class DataParallelEngine<AMPEngine>;
template class DataParallelEngine<O2Engine>;

// ---- DasoEngine ----

DasoEngine::DasoEngine(Device device, int total_epochs, dist::DasoOptions options,
                       std::optional<dist::DasoGroups> groups)
    : DeviceEngine(device),
      total_epochs_(total_epochs),
      options_(options),
      groups_(groups ? *groups : dist::DasoGroups::default_groups()) {
  EMBER_CHECK(total_epochs_ >= 1, "DasoEngine: total_epochs must be 1 or more, got ", total_epochs_,
              " (DASO plans its warm-up and cool-down from it)");
}

Components DasoEngine::init_components(const ModelFn& model_fn, const CriterionFn& criterion_fn,
                                       const OptimizerFn& optimizer_fn,
                                       const SchedulerFn& scheduler_fn) {
  Components parts =
      DeviceEngine::init_components(model_fn, criterion_fn, optimizer_fn, scheduler_fn);
  EMBER_CHECK(parts.optimizer != nullptr, name(),
              ": DASO wraps the optimizer; pass an optimizer (or optimizer_fn)");
  // Buffers (batch-norm statistics) are not DASO's: rank 0's, once, so every rank starts equal.
  dist::broadcast_from_rank_zero(parts.model->buffers(), *groups_.world);
  daso_ = std::make_unique<dist::Daso>(*parts.optimizer, total_epochs_, options_, groups_);
  daso_->set_model(*parts.model);
  optimizer_ = parts.optimizer.get();
  return parts;
}

void DasoEngine::zero_grad(nn::Module& model, optim::Optimizer&) {
  EMBER_CHECK(daso_ != nullptr, name(), ": zero_grad before init_components");
  model.zero_grad(false);
  daso_->zero_grad();
}

bool DasoEngine::optimizer_step(nn::Module&, optim::Optimizer&) {
  EMBER_CHECK(daso_ != nullptr, name(), ": optimizer_step before init_components");
  daso_->step();
  return true;
}

Checkpoint DasoEngine::pack_checkpoint(const nn::Module* model, const optim::Optimizer* optimizer,
                                       const optim::LRScheduler* scheduler,
                                       const Metadata& extra) const {
  Checkpoint checkpoint = DeviceEngine::pack_checkpoint(model, optimizer, scheduler, extra);
  if (daso_ && daso_->schedule().current_batch() == 0) {
    const dist::DasoScheduleState state = daso_->schedule().state();
    checkpoint.metadata["daso.global_skip"] = std::to_string(state.skips.global_skip);
    checkpoint.metadata["daso.local_skip"] = std::to_string(state.skips.local_skip);
    checkpoint.metadata["daso.batches_to_wait"] = std::to_string(state.skips.batches_to_wait);
    checkpoint.metadata["daso.epochs_completed"] = std::to_string(state.epochs_completed);
    checkpoint.metadata["daso.plateau_best"] = format_exact(state.plateau_best);  // "inf" at first
    checkpoint.metadata["daso.plateau_epochs_without_improvement"] =
        std::to_string(state.plateau_epochs_without_improvement);
    if (!node_optimizer_states_.empty() && gathered_after_epochs_ == state.epochs_completed) {
      checkpoint.metadata["daso.nodes"] = std::to_string(node_optimizer_states_.size() + 1);
      for (size_t k = 0; k < node_optimizer_states_.size(); ++k)
        for (const auto& [key, tensor] : node_optimizer_states_[k])
          checkpoint.tensors.emplace_back(node_optimizer_prefix(static_cast<int>(k + 1)) + key,
                                          tensor);
    }
  }
  return checkpoint;
}

int64_t DasoEngine::optimizer_states_in(const Checkpoint& checkpoint) {
  if (!checkpoint.metadata.count("daso.nodes")) return 1;
  return parse_integer(checkpoint.meta("daso.nodes"), "DASO checkpoint: metadata daso.nodes", 1);
}

void DasoEngine::unpack_checkpoint(const Checkpoint& checkpoint, nn::Module* model,
                                   optim::Optimizer* optimizer, optim::LRScheduler* scheduler) {
  auto what = [&](const char* key) { return name() + ": checkpoint metadata " + key; };
  auto count = [&](const char* key) {
    return static_cast<int>(
        parse_integer(checkpoint.meta(key), what(key), 0, std::numeric_limits<int>::max()));
  };
  const int node = groups_.global->rank();
  if (node > 0 && optimizer_states_in(checkpoint) == nodes()) {
    // This node's optimizer state in place of node 0's.
    const std::string prefix = node_optimizer_prefix(node);
    Checkpoint own;
    own.metadata = checkpoint.metadata;
    for (const auto& [key, tensor] : checkpoint.tensors) {
      if (key.rfind("optimizer.", 0) == 0) continue;
      if (key.rfind(prefix, 0) == 0) {
        own.tensors.emplace_back("optimizer." + key.substr(prefix.size()), tensor);
      } else {
        own.tensors.emplace_back(key, tensor);
      }
    }
    DeviceEngine::unpack_checkpoint(own, model, optimizer, scheduler);
  } else {
    DeviceEngine::unpack_checkpoint(checkpoint, model, optimizer, scheduler);
  }
  continue_this_ranks_random_stream(groups_.world->rank());
  if (!daso_ || !checkpoint.metadata.count("daso.epochs_completed")) return;
  dist::DasoScheduleState state;
  state.skips.global_skip = count("daso.global_skip");
  state.skips.local_skip = count("daso.local_skip");
  state.skips.batches_to_wait = count("daso.batches_to_wait");
  state.epochs_completed =
      parse_integer(checkpoint.meta("daso.epochs_completed"), what("daso.epochs_completed"), 0);
  // inf before the first epoch's loss; never nan, which no loss would ever improve on.
  state.plateau_best = parse_real(checkpoint.meta("daso.plateau_best"), what("daso.plateau_best"));
  EMBER_CHECK(!std::isnan(state.plateau_best), what("daso.plateau_best"),
              " should be a loss or inf, got nan");
  state.plateau_epochs_without_improvement = count("daso.plateau_epochs_without_improvement");
  daso_->load_schedule_state(state);
}

Scope DasoEngine::no_sync(nn::Module&) {
  EMBER_CHECK(daso_ != nullptr, name(), ": no_sync before init_components");
  const bool previous = daso_->gradient_sync();
  daso_->set_gradient_sync(false);
  return Scope([daso = daso_.get(), previous] { daso->set_gradient_sync(previous); });
}

void DasoEngine::on_train_loader_start(int64_t optimizer_steps) {
  if (daso_) daso_->set_last_batch(optimizer_steps - 1);
}

void DasoEngine::on_epoch_end(std::optional<double> train_loss) {
  if (!daso_) return;
  EMBER_CHECK(train_loss.has_value(), name(),
              ": DASO needs the epoch's training loss, and the training loader reported no "
              "\"loss\" metric (add a CriterionCallback)");
  daso_->epoch_loss_logic(*train_loss, /*loss_globally_averaged=*/true);
  gather_node_optimizer_states();
}

void DasoEngine::gather_node_optimizer_states() {
  node_optimizer_states_.clear();
  const int nodes = groups_.global->size();
  if (nodes == 1 || optimizer_ == nullptr) return;
  dist::ProcessGroup& world = *groups_.world;
  // Which world rank leads each node: entry r is r's node index if r leads its node, else -1.
  const bool leads = groups_.node->rank() == 0;
  // On the engine's device: a group of NCCL takes device tensors only.
  const Tensor mine = full({1}, leads ? groups_.global->rank() : -1, {DType::i64, device()});
  const Tensor gathered = empty({world.size()}, {DType::i64, device()});
  world.allgather(gathered, mine)->wait();
  const Tensor leaders = gathered.to(Device::cpu());
  const NamedTensors local = optimizer_->state_dict().tensors;
  // Sent and received one at a time, in state_dict order, which is the same on every node (the
  // same model and optimizer, stepped the same number of times).
  if (world.rank() == 0) {
    node_optimizer_states_.resize(static_cast<size_t>(nodes - 1));
    for (int r = 0; r < world.size(); ++r) {
      const int64_t node = leaders.data<int64_t>()[r];
      if (node <= 0) continue;
      NamedTensors& state = node_optimizer_states_[static_cast<size_t>(node - 1)];
      for (const auto& [key, tensor] : local) {
        Tensor received = empty_like(tensor);
        world.recv(received, r)->wait();
        state.emplace_back(key, received);
      }
    }
    gathered_after_epochs_ = daso_->schedule().state().epochs_completed;
  } else if (leads) {
    for (const auto& [key, tensor] : local)
      world.send(tensor.contiguous(), 0)->wait();
  }
}

void DasoEngine::deinit_components() {
  groups_.world->barrier()->wait();
  abandon_components();
}

void DasoEngine::abandon_components() {
  daso_.reset();
  optimizer_ = nullptr;
  node_optimizer_states_.clear();
  DeviceEngine::deinit_components();
}

}  // namespace ember::engines
