// DASO, the Distributed Asynchronous and Selective Optimization of Heat (heat.optim.DASO):
// hierarchical data parallelism for machines whose nodes talk to each other far more slowly than
// their own GPUs do.
//
//   auto& topology = ...;                      // dist::init(); EMBER_LOCAL_SIZE=k for k-rank nodes
//   optim::SGD sgd(model->parameters(), {.lr = 0.1});
//   dist::Daso daso(sgd, /*total_epochs=*/20);
//   daso.set_last_batch(batches_per_epoch - 1);
//   for (epoch ...) {
//     for (batch ...) { daso.zero_grad(); loss = ...; loss.backward(); daso.step(); }
//     daso.epoch_loss_logic(epoch_loss);       // averaged over all ranks here
//   }
//
// The ranks of a node average their gradients before the local optimizer steps (every batch but
// those local skipping leaves out, below): during backward, bucket by bucket, through
// a DDP reducer over the node group once set_model() attached one (as Heat's DataParallelMultiGPU
// wraps the model in torch's DDP over the node); otherwise in one blocking allreduce in step().
// Across nodes the parameters are averaged by one global group at a time (the ranks sharing a local
// rank, one per node), in turns, as DasoSchedule says: the group's ranks flatten their parameters,
// cast them down to downcast_type, and start non-blocking allreduces of sending_chunk_size elements
// each; B batches later they merge the received sum into their parameters,
//     p <- (2B * p_local + sum_n p_n) / (N + 2B)          (N nodes),
// the local parameters weighing in for the B batches they moved on since, and broadcast them inside
// their node. In the warm-up and cool-down, and on the last batch of every epoch, the average is
// blocking and replaces the parameters (p <- sum_n p_n / N): after every epoch all ranks hold
// bitwise identical parameters.
//
// Parameters are the local optimizer's (every group); for f16/bf16 parameters DASO averages the
// optimizer's f32 master copies and writes them back rounded, so the optimizer never undoes it.
// Construction is collective over the world and broadcasts rank 0's parameters.
//
// EMBER_SIMULATE_GLOBAL_LINK=latency_us,GBps models a slow inter-node link (for benchmarks on one
// machine): each global-group collective of b bytes (the down-cast chunk this rank sends) is ready
// no earlier than latency_us + b / GBps after the link is free. The collective itself starts at
// once; its wait() sleeps until that time, so computation overlaps the simulated transfer exactly
// as it would overlap a real one, and a blocking average costs the full delay. Chunks queue on the
// link one after another.
//
// Where ember departs from Heat (each explained where it is done):
// - No `scheduler` argument: Heat's step() calls scheduler.step() *instead of* the optimizer's
//   step when one is given, so its parameters never move. Here the caller (or the runner) steps
//   its LR scheduler after step(), as with any optimizer.
// - Parameters larger than a chunk: Heat's merge reassembles whole parameters from the chunks
//   received so far and reads past them when a parameter spans more than two; ember merges chunk
//   by chunk on the flat buffer (daso.cpp, start_send).
// - Every global send is cast to downcast_type (Heat sends f32 while cycling), and the received
//   sum is converted to f32 before dividing (daso.cpp, start_send).
// - The schedule (daso_schedule.cpp): warmup_epochs 0 starts cycling at once (Heat never leaves
//   blocking averages); the first cycling skip is capped at max_global_skips; batches_to_wait is
//   capped at global_skip and a merge comes exactly that many batches after its send; a plateau
//   divides the global skip down to 1 at the least (Heat's can reach 0, blocking averages for
//   the rest of the run, when skip_reduction_factor does not divide it); epochs are
//   counted per epoch_loss_logic call, which refuses a call in mid-epoch; the plateau test treats
//   a negative best loss as Heat does.
// - One node (num_nodes() == 1) makes no global sends (an average of one only rounds).
//
// Global averages travel on a communicator of their own (a split of `global`) whose allreduces
// are non-blocking (ProcessGroup::set_nonblocking_allreduce): on the MPI backend, where one
// thread makes every MPI call, a global average waiting for a slow link or a late node does not
// hold up the node's gradient average, as Heat's non-blocking MPI calls do not. (Before
// 2026-11-24 it did, and the simulated link, which delays only wait(), hid that stall.)
//
// Local skipping, as Heat's: with local_skip L > 1 (the long skips of the cycling phase) only some
// batches average their gradients in the node (DasoSchedule::averages_in_node); the others leave
// them local, the node's ranks drift apart, and the next merge's broadcast or the epoch's blocking
// average brings them back together. With one node, where nothing global ever does, every batch
// averages.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/daso_schedule.h"
#include "distributed/process_group.h"
#include "distributed/reducer.h"
#include "distributed/simulated_link.h"
#include "nn/module.h"
#include "optim/grad_scaler.h"
#include "optim/optimizer.h"

namespace ember::dist {

struct DasoOptions {
  int warmup_epochs = 4;
  int cooldown_epochs = 4;
  double stability_level = 0.05;
  int max_global_skips = 8;
  int64_t sending_chunk_size = 10'000'000;  // elements per global allreduce
  DType downcast_type = DType::bf16;        // bf16, f16 or f32
  int skip_reduction_factor = 2;
  int local_skip_factor = 4;
  bool verbose = false;  // world rank 0 prints the skips chosen at each epoch's end
};

// The groups DASO talks over. default_groups(): dist::world(), dist::node_group(),
// dist::cross_node_group(). Tests may build their own (world->split) to pose as other shapes.
struct DasoGroups {
  ProcessGroupPtr world;
  ProcessGroupPtr node;    // this node's ranks; node->rank() is the local rank
  ProcessGroupPtr global;  // the ranks with this local rank on every node, one per node
  static DasoGroups default_groups();
};

class Daso {
 public:
  Daso(optim::Optimizer& local_optimizer, int total_epochs, const DasoOptions& options = {},
       DasoGroups groups = DasoGroups::default_groups());
  ~Daso();
  Daso(const Daso&) = delete;
  Daso& operator=(const Daso&) = delete;

  // The index of each epoch's last batch (batches per epoch - 1); required before step(). Heat's
  // documentation says "number of batches", which its code never reaches: this is the index.
  void set_last_batch(int64_t last_batch) { schedule_.set_last_batch(last_batch); }
  int64_t last_batch() const { return schedule_.last_batch(); }

  // After backward: node-local gradient average, the local optimizer's step (through the scaler
  // when one was added), then this batch's global work.
  void step();
  // Zeroes the local optimizer's gradients in place (kept allocated, as Heat does).
  void zero_grad();
  // Once per epoch, after the step of the last batch: decides the next epoch's skips from the loss
  // averaged over all ranks (averaged here over the world unless loss_globally_averaged).
  void epoch_loss_logic(double loss, bool loss_globally_averaged = false);
  void epoch_loss_logic(const Tensor& loss, bool loss_globally_averaged = false);
  // Steps through this scaler (scaler.step, then scaler.update), for f16 training.
  void add_scaler(optim::GradScaler& scaler) { scaler_ = &scaler; }
  // Records the model and checks that the local optimizer holds every trainable parameter of it
  // (one DASO does not average would silently drift apart across nodes). On a node of several
  // ranks it also attaches a DDP reducer over the node group (default buckets): from then on
  // backward averages the node's gradients as it goes, and step() no longer does. Every
  // trainable parameter must then take part in each backward pass, as under DDP. step() then
  // also gives the node its first rank's buffers (batch norm's running statistics) after every
  // batch that averaged in the node, as Heat's DDP over the node does; across nodes buffers are
  // never averaged, as in Heat.
  void set_model(nn::Module& module);
  // Off: backward leaves the node's gradients local (gradient accumulation, DDP's no_sync); the
  // first backward with it on again averages the accumulated sum. step() sets it for the next
  // batch from the schedule (local skipping); a no_sync scope inside a step's batches still
  // applies. Without set_model's reducer there is nothing to switch: step() averages once,
  // whatever backward accumulated.
  void set_gradient_sync(bool sync);
  bool gradient_sync() const { return !node_reducer_ || node_reducer_->sync(); }
  // set_model's reducer; null before set_model and on nodes of one rank.
  const Reducer* node_reducer() const { return node_reducer_.get(); }
  // Back to the state after construction (schedule, pending sends, gradients zeroed); the
  // parameters are kept.
  void reset();
  // Continues a checkpointed schedule (DasoSchedule::load_state; between epochs only).
  void load_schedule_state(const DasoScheduleState& state) { schedule_.load_state(state); }

  const DasoSchedule& schedule() const { return schedule_; }
  const DasoSkips& skips() const { return schedule_.skips(); }
  int local_rank() const { return groups_.node->rank(); }
  int num_nodes() const { return groups_.global->size(); }
  // Elements in the flat parameter buffer.
  int64_t num_elements() const { return num_elements_; }

 private:
  struct PendingSend;
  Tensor flatten_masters() const;
  void unflatten_into_masters(const Tensor& flat);
  // Whether the coming batch's gradients are averaged in the node (local skipping).
  bool averages_in_node() const;
  void average_gradients_in_node();
  void start_send(int batches_to_wait);
  Tensor merge_pending();
  Tensor replace_by_average();
  void broadcast_in_node(int root, Tensor flat);
  WorkPtr global_allreduce(const Tensor& chunk);

  optim::Optimizer& optimizer_;
  DasoOptions options_;
  DasoGroups groups_;
  DasoSchedule schedule_;
  optim::GradScaler* scaler_ = nullptr;
  nn::Module* module_ = nullptr;
  std::unique_ptr<Reducer> node_reducer_;  // set_model's, on nodes of several ranks
  std::vector<Tensor> params_;             // the optimizer's parameters, every group in order
  std::vector<Tensor> masters_;  // what its steps update: f32 masters of f16/bf16 params, or params
  int64_t num_elements_ = 0;
  DType master_dtype_ = DType::f32;
  // Sends not merged yet, oldest first: two when one rank per node sends on the batch that merges
  // its previous send.
  std::deque<std::unique_ptr<PendingSend>> pending_;
  std::optional<SimulatedLink> link_;
  std::chrono::steady_clock::time_point link_free_at_{};
};

}  // namespace ember::dist
