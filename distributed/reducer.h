// The DDP reducer: averages gradients across ranks while backward is still running.
//
//   parameters (registration order 0..P-1)
//     -> buckets, in reverse order (the last layers' gradients are ready first): bucket 0
//        closes once it holds first_bucket_bytes (1 MiB), the others once they hold
//        bucket_bytes (25 MiB), the parameter that crosses the capacity included; a change of
//        dtype or device also starts a new bucket
//   backward: each parameter's post-accumulate hook copies its gradient, divided by the world
//     size, into its slot of the bucket's flat buffer; a bucket whose last slot is filled is
//     allreduced (sum) asynchronously, buckets launched strictly in order (MPI and NCCL need
//     the same order on every rank)
//   end of backward (an autograd final callback): wait for every bucket, copy the averages back
//     into the gradients (nothing to copy with gradient_as_bucket_view: the gradients are views
//     of the buckets)
//
// After the first iteration the buckets are rebuilt once, in the order the gradients actually
// arrived (rank 0's order, broadcast, so every rank agrees; parameters that got no gradient
// go last): the first bucket fills and leaves as early as possible.
//
// This follows PyTorch's reducer (torch/csrc/distributed/c10d/reducer.cpp), except:
//   - First iteration: ember buckets by the capacities above from the start, the order
//     reversed first (its 1 MiB bucket holds the last parameters and leaves first). PyTorch,
//     with find_unused_parameters off, puts every parameter in one bucket (per dtype and
//     device) for the first iteration: one allreduce once every gradient is in; it buckets by
//     capacity only when it rebuilds. With it on, PyTorch fills buckets in registration order
//     and then reverses the list of buckets: its 1 MiB bucket holds the first parameters and
//     leaves last.
//   - find_unused_parameters on: ember still rebuilds after the first iteration; PyTorch never
//     rebuilds then (unless static_graph) and keeps its initial buckets.
//   - Mixed dtypes or devices: ember closes a bucket when the dtype or device changes; PyTorch
//     keeps one bucket filling per (dtype, device) as it goes through the parameters.
//   - Unused parameters: PyTorch finds them when forward ends (walking the graph from the
//     outputs) and marks them ready at the first gradient hook, so their buckets can leave
//     during backward. ember finds them only when backward ends (the final callback): a
//     bucket holding an unused parameter, and every bucket after it (launches are in order),
//     is launched after backward.
//   - no_sync: ember reads it in each gradient hook, i.e. where backward runs; PyTorch reads it
//     in forward. A forward inside no_sync whose backward runs outside it is synchronised here
//     and not in PyTorch (and the other way round).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "distributed/process_group.h"
#include "distributed/simulated_link.h"

namespace ember::dist {

struct ReducerOptions {
  int64_t bucket_bytes = 25 * 1024 * 1024;
  int64_t first_bucket_bytes = 1024 * 1024;
  // Parameters that get no gradient in a backward pass are found when it ends; their gradient
  // (one accumulated under no_sync) is reduced, or zeros when they have none. One that no rank
  // used, in this pass or under no_sync since the last synced one, keeps its gradient as it
  // was. Without it such a pass is an error naming them (PyTorch's find_unused_parameters).
  bool find_unused_parameters = false;
  // f16 or bf16: buckets travel in that dtype, as with PyTorch's fp16/bf16 compression hooks,
  // but divided by the world size before the cast where PyTorch casts first: a gradient between
  // f16's largest value (65504) and 65504 times the world size overflows there (a step the
  // GradScaler then skips) and travels here.
  std::optional<DType> compression;
  // Each gradient becomes a view of its slot in the bucket (PyTorch's gradient_as_bucket_view):
  // the hook's copy into the bucket happens only when autograd made a new gradient tensor
  // (after zero_grad(set_to_none)), and the averages need no copy back at the end. One
  // difference from copying: with find_unused_parameters, a parameter that no rank used has its
  // slot reduced all the same, so a gradient that is already a view of it reads the average of
  // the ranks' old values (zeros after zero_grad) rather than keeping its own.
  bool gradient_as_bucket_view = false;
  // Delays each bucket as if it crossed this link (EMBER_SIMULATE_GLOBAL_LINK, when the world
  // spans several nodes): for the DASO-versus-DDP benchmark.
  std::optional<SimulatedLink> simulated_link;
};

// What happened when, for tests and the overlap benchmark (steady clock, one backward pass).
struct ReducerEvent {
  // bucket_done: its collective has completed (and, before it, the earlier buckets' averages
  // were written); gradients_written: the last average is in the gradients.
  enum class Kind { bucket_launched, backward_finished, bucket_done, gradients_written } kind;
  int bucket = -1;
  std::chrono::steady_clock::time_point time;
};

class Reducer {
 public:
  // `names[i]` names `parameters[i]` in errors. Registers a hook on every parameter.
  Reducer(std::vector<Tensor> parameters, std::vector<std::string> names, ProcessGroupPtr group,
          ReducerOptions options);
  ~Reducer();
  Reducer(const Reducer&) = delete;
  Reducer& operator=(const Reducer&) = delete;

  // Off: hooks leave gradients to accumulate locally (no_sync).
  void set_sync(bool sync) { sync_ = sync; }
  bool sync() const { return sync_; }

  // Bucket k's parameter indices, in bucket order.
  const std::vector<std::vector<size_t>>& bucket_parameters() const { return bucket_indices_; }
  bool rebuilt() const { return rebuilt_; }
  const std::vector<ReducerEvent>& timeline() const { return timeline_; }
  int64_t iterations() const { return iterations_; }

  // Called by the hooks and the final callback (public for the hooks' lambdas).
  void gradient_ready(size_t index);

 private:
  struct Bucket {
    std::vector<size_t> parameters;  // indices, in bucket order
    std::vector<int64_t> offsets;    // element offset of each parameter in `buffer`
    Tensor buffer;                   // flat, the parameters' dtype and device
    Tensor wire;                     // what travels: `buffer`, or its compressed copy
    size_t pending = 0;
    WorkPtr work;
    std::chrono::steady_clock::time_point launched;
  };
  void build_buckets(const std::vector<size_t>& order);
  void prepare_iteration();
  void launch_ready_buckets();
  void finalize();
  void rebuild_from_arrival_order();

  std::vector<Tensor> parameters_;
  std::vector<std::string> names_;
  ProcessGroupPtr group_;
  ReducerOptions options_;
  bool sync_ = true;

  std::vector<std::vector<size_t>> bucket_indices_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;      // parameter -> bucket
  std::vector<size_t> position_of_;    // parameter -> position in its bucket
  std::vector<bool> ready_;            // this iteration
  std::vector<bool> used_since_sync_;  // got a gradient since the last synced pass (no_sync too)
  size_t next_to_launch_ = 0;
  bool in_backward_ = false;
  bool rebuilt_ = false;
  std::vector<size_t> arrival_order_;  // first synced iteration
  std::vector<ReducerEvent> timeline_;
  int64_t iterations_ = 0;
  std::shared_ptr<bool> alive_;  // hooks outlive the reducer: they check this first
  std::optional<SimulatedLinkQueue> link_;
};

}  // namespace ember::dist
