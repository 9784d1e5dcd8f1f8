// DistributedDataParallel: the model on every rank, its gradients averaged during backward.
//
//   auto world = dist::init();
//   auto model = nn::make<dist::DistributedDataParallel>(nn::resnet9(), world);
//   Tensor loss = cross_entropy((*model)(images), labels);   // this rank's shard of the batch
//   loss.backward();          // buckets of gradients are allreduced while backward runs
//   optimizer.step();         // every rank applies the same averaged gradient
//
// At construction rank 0's parameters and buffers are broadcast to every rank, after checking
// that all ranks hold the same model (names, shapes, dtypes): a mismatch is an error on every
// rank, not a hang. Buffers (batch-norm statistics) are broadcast from rank 0 before each
// forward that follows one run with grad enabled outside no_sync, in training or eval mode, as
// PyTorch's broadcast_buffers (require_forward_param_sync): the first eval forward after
// training sees rank 0's statistics on every rank, later ones under no_grad broadcast nothing.
// That broadcast is a collective: a forward on one rank alone goes through module(), as in
// PyTorch. The wrapped model is the child
// "module": state_dict keys read "module.<key>", and load into the unwrapped model as they are.
#pragma once

#include <memory>
#include <vector>

#include "distributed/reducer.h"
#include "nn/module.h"

namespace ember::dist {

struct DdpOptions {
  double bucket_cap_mb = 25;       // every bucket after the first
  double first_bucket_cap_mb = 1;  // the first bucket leaves early
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  std::optional<DType> compression;  // f16 or bf16 on the wire
  // Gradients become views of the flat buckets: no copy back after the allreduce (PyTorch's
  // option of the same name; off by default there too).
  bool gradient_as_bucket_view = false;
};

// The pieces DistributedDataParallel is made of, for engines that attach DDP to a model without
// wrapping it (engines/distributed_engines.h). All are collective over `group`.
// Throws on every rank when the ranks' models differ in names, shapes or dtypes.
void check_same_model_on_every_rank(const nn::Module& module, ProcessGroup& group);
// Rank 0's values for every tensor (parameters and buffers). Tensors of one dtype and device go
// flattened together, one collective per bucket_bytes; a world of one broadcasts nothing.
inline constexpr int64_t kBroadcastBucketBytes = int64_t{250} << 20;
void broadcast_from_rank_zero(const std::vector<Tensor>& tensors, ProcessGroup& group,
                              int64_t bucket_bytes = kBroadcastBucketBytes);
// A reducer over the module's parameters that require grad. With DdpOptions, buckets are
// delayed by EMBER_SIMULATE_GLOBAL_LINK when the world spans several nodes; with
// ReducerOptions, exactly as given (DASO's node-local reducer).
std::unique_ptr<Reducer> make_reducer(nn::Module& module, ProcessGroupPtr group,
                                      const DdpOptions& options);
std::unique_ptr<Reducer> make_reducer(nn::Module& module, ProcessGroupPtr group,
                                      const ReducerOptions& options);

class DistributedDataParallel : public nn::Module {
 public:
  DistributedDataParallel(nn::ModulePtr module, ProcessGroupPtr group, DdpOptions options = {});

  Tensor forward(const Tensor& input) override;
  std::string type_name() const override { return "DistributedDataParallel"; }

  nn::Module& module() { return *module_; }
  const nn::ModulePtr& module_ptr() const { return module_; }
  const ProcessGroupPtr& process_group() const { return group_; }
  Reducer& reducer() { return *reducer_; }

  // Inside the scope, backward passes accumulate gradients locally; the first backward after
  // it averages the accumulated sum (gradient accumulation without a collective per micro-batch).
  // What counts is where backward runs, not forward (PyTorch: forward; see reducer.h).
  class NoSync {
   public:
    explicit NoSync(Reducer& reducer) : reducer_(reducer), previous_(reducer.sync()) {
      reducer_.set_sync(false);
    }
    ~NoSync() { reducer_.set_sync(previous_); }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    Reducer& reducer_;
    bool previous_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*reducer_); }

 private:
  nn::ModulePtr module_;
  ProcessGroupPtr group_;
  DdpOptions options_;
  std::unique_ptr<Reducer> reducer_;
  bool sync_buffers_before_forward_ = true;  // the last forward had grad on, outside no_sync
};

}  // namespace ember::dist
