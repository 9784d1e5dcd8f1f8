// The data-parallel engines (Catalyst's DataParallel, DistributedDataParallel and DASO engines),
// built on the single-process ones:
//
//   DataParallelEngine<Base>             one process, the batch split over several devices
//                                        (dist::DataParallel; Base = DeviceEngine, AMPEngine or
//                                        O2Engine for the fp32, AMP and O2 forms)
//   DistributedDataParallelEngine<Base>  one process per rank under mpirun: DDP's reducer attached
//                                        to the model, the loaders sharded by DistributedSampler
//   DasoEngine                           Heat's DASO (dist::Daso) over node-local and global groups
//
// The model is not wrapped: a DDP engine attaches the reducer to the model's parameters in
// sync_device, so the runner and the Accelerator see the model they built and checkpoints keep
// its plain keys (loadable by every engine, whatever the world size).
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "distributed/daso.h"
#include "distributed/ddp.h"
#include "engines/device_engines.h"

namespace ember::engines {

// The loader this rank iterates: `loader` itself when its sampler is already a
// DistributedSampler; otherwise the same dataset and options over a DistributedSampler
// (shuffling as the loader did, with its seed, padded so that every rank has as many batches).
// Catalyst shuffles every loader it shards (DistributedSampler's default); here an unshuffled
// loader stays in order, each rank taking every world-size-th sample.
std::shared_ptr<data::DataLoader> shard_over_ranks(std::shared_ptr<data::DataLoader> loader,
                                                   const dist::ProcessGroup& group);

template <typename Base>
class DistributedDataParallelEngine : public Base {
 public:
  // `base_args` construct Base (device, and the precision for AMP/O2).
  template <typename... BaseArgs>
  explicit DistributedDataParallelEngine(dist::ProcessGroupPtr group, dist::DdpOptions options = {},
                                         BaseArgs&&... base_args)
      : Base(std::forward<BaseArgs>(base_args)...), group_(std::move(group)), options_(options) {
    EMBER_CHECK(group_ != nullptr, "DistributedDataParallelEngine: the process group is null");
  }

  std::string name() const override { return "ddp-" + Base::name(); }
  dist::ProcessGroupPtr process_group() const override { return group_; }
  bool is_ddp() const override { return true; }

  using Base::sync_device;
  // Places (and for O2 converts) the module, checks that every rank built the same model,
  // broadcasts rank 0's parameters and buffers, and attaches the gradient reducer.
  void sync_device(nn::Module& module) const override;
  Scope no_sync(nn::Module& model) override;
  // The step, then rank 0's buffers (batch-norm statistics) to every rank, as PyTorch's
  // broadcast_buffers does before the next forward.
  bool optimizer_step(nn::Module& model, optim::Optimizer& optimizer) override;
  std::shared_ptr<data::DataLoader> shard_loader(
      std::shared_ptr<data::DataLoader> loader) const override {
    return shard_over_ranks(std::move(loader), *group_);
  }
  // Puts each rank back on its own random stream (seed + rank) after loading rank 0's.
  void unpack_checkpoint(const Checkpoint& checkpoint, nn::Module* model,
                         optim::Optimizer* optimizer, optim::LRScheduler* scheduler) override;
  void deinit_components() override;
  void abandon_components() override;

  dist::Reducer* reducer_of(const nn::Module& module) const;

 private:
  dist::ProcessGroupPtr group_;
  dist::DdpOptions options_;
  mutable std::map<const nn::Module*, std::unique_ptr<dist::Reducer>> reducers_;
};

template <typename Base>
class DataParallelEngine : public Base {
 public:
  // devices[0] holds the model; every device gets a replica (a repeated device is allowed).
  template <typename... BaseArgs>
  explicit DataParallelEngine(std::vector<Device> devices, BaseArgs&&... base_args)
      : Base(devices.empty() ? Device::cpu() : devices.front(),
             std::forward<BaseArgs>(base_args)...),
        devices_(std::move(devices)) {
    EMBER_CHECK(!devices_.empty(), "DataParallelEngine: the device list is empty");
  }

  std::string name() const override;
  const std::vector<Device>& devices() const { return devices_; }
  // The model built by model_fn, placed on devices[0], wrapped in dist::DataParallel.
  Components init_components(const ModelFn& model_fn, const CriterionFn& criterion_fn,
                             const OptimizerFn& optimizer_fn,
                             const SchedulerFn& scheduler_fn) override;
  using Base::sync_device;
  // A DataParallel places its own replicas; any other module goes to devices[0].
  void sync_device(nn::Module& module) const override;
  // The wrapper's "module." prefix (PyTorch's DataParallel names) stays out of checkpoints: they
  // hold the model's own names, as every other engine writes them (Catalyst unwraps the model
  // too), so that a run resumes on any engine. Checkpoints with the prefix still load.
  Checkpoint pack_checkpoint(const nn::Module* model, const optim::Optimizer* optimizer,
                             const optim::LRScheduler* scheduler,
                             const Metadata& extra = {}) const override;
  void unpack_checkpoint(const Checkpoint& checkpoint, nn::Module* model,
                         optim::Optimizer* optimizer, optim::LRScheduler* scheduler) override;

 private:
  std::vector<Device> devices_;
};

class DasoEngine : public DeviceEngine {
 public:
  DasoEngine(Device device, int total_epochs, dist::DasoOptions options = {},
             std::optional<dist::DasoGroups> groups = std::nullopt);

  std::string name() const override { return "daso-" + DeviceEngine::name(); }
  dist::ProcessGroupPtr process_group() const override { return groups_.world; }
  bool is_ddp() const override { return true; }

  // Builds the parts, then DASO around the optimizer (collective: rank 0's parameters).
  Components init_components(const ModelFn& model_fn, const CriterionFn& criterion_fn,
                             const OptimizerFn& optimizer_fn,
                             const SchedulerFn& scheduler_fn) override;
  void zero_grad(nn::Module& model, optim::Optimizer& optimizer) override;
  // DASO's step: node-local gradient average, the local step, this batch's global work.
  bool optimizer_step(nn::Module& model, optim::Optimizer& optimizer) override;
  std::shared_ptr<data::DataLoader> shard_loader(
      std::shared_ptr<data::DataLoader> loader) const override {
    return shard_over_ranks(std::move(loader), *groups_.world);
  }
  // DASO's schedule goes into checkpoints written between epochs ("daso.*": skips, epochs done,
  // the loss plateau), so a resumed run goes on where it was instead of warming up again; a
  // checkpoint written mid-epoch (Accelerator::save_state) holds none and restarts the schedule.
  Checkpoint pack_checkpoint(const nn::Module* model, const optim::Optimizer* optimizer,
                             const optim::LRScheduler* scheduler,
                             const Metadata& extra = {}) const override;
  // Across nodes the optimizers' states differ (gradients are averaged only inside a node), so
  // rank 0's checkpoint also holds every other node's, "daso.node<k>.optimizer.*", gathered at
  // the end of each epoch; "daso.nodes" says how many. Unpacking gives each node its own; a run
  // resumed on another number of nodes gives every node node 0's. Also puts each rank back on
  // its own random stream (seed + rank).
  void unpack_checkpoint(const Checkpoint& checkpoint, nn::Module* model,
                         optim::Optimizer* optimizer, optim::LRScheduler* scheduler) override;
  // Inner batches of a gradient accumulation leave the node's gradients local.
  Scope no_sync(nn::Module& model) override;
  void on_train_loader_start(int64_t optimizer_steps) override;
  void on_epoch_end(std::optional<double> train_loss) override;
  void deinit_components() override;
  void abandon_components() override;

  dist::Daso* daso() { return daso_.get(); }
  // How many nodes take turns in the global averages (the size of this rank's global group).
  int nodes() const { return groups_.global->size(); }
  // How many nodes' optimizer states a checkpoint of this engine holds ("daso.nodes"): 1 when it
  // holds rank 0's alone (one node, or written mid-epoch). unpack_checkpoint gives each node its
  // own only when this equals nodes(); otherwise every node takes node 0's.
  static int64_t optimizer_states_in(const Checkpoint& checkpoint);

 private:
  // Collective over the world: the leader (node rank 0) of every node k >= 1 sends its optimizer
  // state to rank 0, which keeps it for the checkpoint of this epoch.
  void gather_node_optimizer_states();

  int total_epochs_;
  dist::DasoOptions options_;
  dist::DasoGroups groups_;
  std::unique_ptr<dist::Daso> daso_;
  optim::Optimizer* optimizer_ = nullptr;  // the one DASO wraps
  // On rank 0: node k's optimizer tensors at [k - 1], as of `gathered_after_epochs_` epochs.
  std::vector<NamedTensors> node_optimizer_states_;
  int64_t gathered_after_epochs_ = -1;
};

}  // namespace ember::engines
