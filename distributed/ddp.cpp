#include "distributed/ddp.h"

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <vector>

#include "distributed/world.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/ops.h"

namespace ember::dist {
namespace {

// FNV-1a over the names, dtypes and shapes: equal on every rank exactly when the models match.
uint64_t fingerprint(const NamedTensors& tensors) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](const std::string& text) {
    for (unsigned char c : text)
      hash = (hash ^ c) * 1099511628211ull;
  };
  for (const auto& [name, tensor] : tensors) {
    mix(name);
    mix(dtype_name(tensor.dtype()));
    mix(shape_str(tensor.sizes()));
  }
  return hash;
}

}  // namespace

void check_same_model_on_every_rank(const nn::Module& module, ProcessGroup& group) {
  const NamedTensors state = module.state_dict();
  // On the model's device: an NCCL group takes only tensors on its GPU (MPI takes any).
  const Device device = state.empty() ? Device::cpu() : state.front().second.device();
  Tensor mine = from_vector(std::vector<int64_t>{static_cast<int64_t>(fingerprint(state)),
                                                 static_cast<int64_t>(state.size())},
                            {2}, DType::i64)
                    .to(device);
  Tensor everyone = zeros({group.size(), 2}, TensorOptions(DType::i64, device));
  group.allgather(everyone, mine)->wait();
  everyone = everyone.to(Device::cpu());
  const int64_t* all = everyone.data<int64_t>();
  for (int r = 0; r < group.size(); ++r) {
    if (all[2 * r] == all[0] && all[2 * r + 1] == all[1]) continue;
    std::ostringstream first;
    size_t shown = 0;
    for (const auto& [name, tensor] : state) {
      if (shown++ == 3) break;
      first << (shown > 1 ? ", " : "") << name << " " << describe(tensor);
    }
    EMBER_FAIL("DistributedDataParallel: the model differs across ranks: rank ", r, " has ",
               all[2 * r + 1], " parameters and buffers, rank 0 has ", all[1],
               ", or their names, shapes or dtypes differ (this is rank ", group.rank(),
               ", whose first entries are: ", first.str(),
               "). Every rank must build the same model");
  }
}

void broadcast_from_rank_zero(const std::vector<Tensor>& tensors, ProcessGroup& group,
                              int64_t bucket_bytes) {
  EMBER_CHECK(bucket_bytes > 0, "broadcast_from_rank_zero: bucket_bytes must be positive, got ",
              bucket_bytes);
  if (group.size() == 1) return;  // rank 0's values are everywhere already
  NoGradGuard no_grad;
  // Tensors of one dtype on one device travel together, flattened into one wire tensor, up to
  // bucket_bytes a wire (PyTorch's _broadcast_coalesced): resnet9's 24 batch-norm buffers take
  // two collectives (the f32 statistics, the i64 batch counts), not 24.
  struct Bucket {
    std::vector<size_t> members;  // indices into tensors, in order
    int64_t bytes = 0;
    Tensor wire;
    bool in_place = false;  // the wire is the one member's own storage
    WorkPtr work;
  };
  std::vector<Bucket> buckets;
  std::vector<size_t> open;  // per dtype and device, the bucket still taking tensors
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& tensor = tensors[i];
    const int64_t bytes = static_cast<int64_t>(tensor.nbytes());
    // The open bucket of this dtype and device, or a new one when there is none or it is full.
    auto it = std::find_if(open.begin(), open.end(), [&](size_t b) {
      const Tensor& first = tensors[buckets[b].members.front()];
      return first.dtype() == tensor.dtype() && first.device() == tensor.device();
    });
    if (it == open.end() || buckets[*it].bytes + bytes > bucket_bytes) {
      buckets.emplace_back();
      if (it == open.end()) {
        it = open.insert(open.end(), buckets.size() - 1);
      } else {
        *it = buckets.size() - 1;
      }
    }
    Bucket& bucket = buckets[*it];
    bucket.members.push_back(i);
    bucket.bytes += bytes;
  }
  // Flat copies cost memory: at most two buckets are in flight (PyTorch's broadcast_coalesced
  // keeps two too), each finished (waited on, copied back, its wire released) before the
  // bucket two after it is flattened.
  const auto finish = [&](Bucket& bucket) {
    bucket.work->wait();
    if (!bucket.in_place && group.rank() != 0) {  // rank 0's wire holds its own values
      if (bucket.members.size() == 1) {
        tensors[bucket.members.front()].detach().copy_(bucket.wire);
      } else {
        int64_t offset = 0;
        for (size_t i : bucket.members) {
          Tensor data = tensors[i].detach();
          const int64_t n = data.numel();
          data.copy_(bucket.wire.narrow(0, offset, n).view(data.sizes()));
          offset += n;
        }
      }
    }
    bucket.wire = Tensor();
    bucket.work.reset();
  };
  constexpr size_t kInFlight = 2;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (b >= kInFlight) finish(buckets[b - kInFlight]);
    Bucket& bucket = buckets[b];
    if (bucket.members.size() == 1) {
      // Parameters are leaves that require grad: the broadcast writes a detached handle's data.
      const Tensor data = tensors[bucket.members.front()].detach();
      bucket.in_place = data.is_contiguous();
      bucket.wire = bucket.in_place ? data : data.contiguous();
    } else if (group.rank() == 0) {
      std::vector<Tensor> flat;
      for (size_t i : bucket.members)
        flat.push_back(tensors[i].detach().reshape({-1}));
      bucket.wire = cat(flat);
    } else {  // the broadcast overwrites it
      const Tensor& first = tensors[bucket.members.front()];
      int64_t numel = 0;
      for (size_t i : bucket.members)
        numel += tensors[i].numel();
      bucket.wire = empty({numel}, TensorOptions(first.dtype(), first.device()));
    }
    bucket.work = group.broadcast(bucket.wire, 0);
  }
  for (size_t b = buckets.size() > kInFlight ? buckets.size() - kInFlight : 0; b < buckets.size();
       ++b)
    finish(buckets[b]);
}

std::unique_ptr<Reducer> make_reducer(nn::Module& module, ProcessGroupPtr group,
                                      const ReducerOptions& options) {
  std::vector<Tensor> parameters;
  std::vector<std::string> names;
  for (const auto& [name, parameter] : module.named_parameters()) {
    if (!parameter.requires_grad()) continue;
    parameters.push_back(parameter);
    names.push_back(name);
  }
  return std::make_unique<Reducer>(std::move(parameters), std::move(names), std::move(group),
                                   options);
}

std::unique_ptr<Reducer> make_reducer(nn::Module& module, ProcessGroupPtr group,
                                      const DdpOptions& options) {
  EMBER_CHECK(options.bucket_cap_mb > 0 && options.first_bucket_cap_mb > 0,
              "DistributedDataParallel: bucket_cap_mb and first_bucket_cap_mb must be positive, "
              "got ",
              options.bucket_cap_mb, " and ", options.first_bucket_cap_mb);
  ReducerOptions reducer_options;
  reducer_options.bucket_bytes = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
  reducer_options.first_bucket_bytes =
      static_cast<int64_t>(options.first_bucket_cap_mb * 1024 * 1024);
  reducer_options.find_unused_parameters = options.find_unused_parameters;
  reducer_options.compression = options.compression;
  reducer_options.gradient_as_bucket_view = options.gradient_as_bucket_view;
  if (topology().num_nodes > 1) reducer_options.simulated_link = SimulatedLink::from_environment();
  return make_reducer(module, std::move(group), reducer_options);
}

DistributedDataParallel::DistributedDataParallel(nn::ModulePtr module, ProcessGroupPtr group,
                                                 DdpOptions options)
    : module_(std::move(module)), group_(std::move(group)), options_(options) {
  EMBER_CHECK(module_ != nullptr, "DistributedDataParallel: the module is null");
  EMBER_CHECK(group_ != nullptr, "DistributedDataParallel: the process group is null (call ",
              "dist::init() and pass dist::world())");
  register_module("module", module_);
  check_same_model_on_every_rank(*module_, *group_);
  std::vector<Tensor> state;
  for (const auto& [name, tensor] : module_->state_dict())
    state.push_back(tensor);
  broadcast_from_rank_zero(state, *group_);
  reducer_ = make_reducer(*module_, group_, options_);
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  if (options_.broadcast_buffers && sync_buffers_before_forward_ && group_->size() > 1) {
    broadcast_from_rank_zero(module_->buffers(), *group_);
  }
  Tensor output = module_->forward(input);
  sync_buffers_before_forward_ = grad_enabled() && reducer_->sync();
  return output;
}

}  // namespace ember::dist
