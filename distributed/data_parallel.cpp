// DataParallel: replicate, scatter, parallel forward, gather; and the gather's backward, which
// runs the replicas' backward passes in parallel and reduces their gradients.
#include "distributed/data_parallel.h"

#include <deque>
#include <exception>
#include <functional>
#include <optional>
#include <sstream>
#include <thread>

#include "runtime/autocast.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#if EMBER_WITH_CUDA
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember::dist {
namespace {

std::string device_list(const std::vector<Device>& devices) {
  std::ostringstream out;
  out << "{";
  for (size_t i = 0; i < devices.size(); ++i)
    out << (i ? ", " : "") << devices[i];
  out << "}";
  return out.str();
}

// A copy of `t` on `device` sharing no storage with it: replicas never alias the module.
Tensor copy_to(const Tensor& t, const Device& device) {
  const Tensor source = t.detach();
  return source.device() == device ? source.clone() : source.to(device);
}

// Grad mode and autocast are thread-local: a worker thread starts with grad on and autocast off,
// so it takes the caller's settings explicitly (PyTorch's parallel_apply does the same).
struct CallerState {
  bool grad_enabled = ember::grad_enabled();
  bool autocast_enabled = ember::autocast_enabled();
  DType autocast_dtype = ember::autocast_dtype();
};

// The seed of replica i's generator: the default generator's (seed, offset) and i, mixed by
// splitmix64 so that nearby states give unrelated Philox keys.
uint64_t replica_seed(const GeneratorState& base, size_t replica) {
  uint64_t x = base.seed ^ (base.offset * 0x9e3779b97f4a7c15ULL) ^ (replica + 1);
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Runs fn(i) for i in [0, count), each in a thread of its own with the caller's grad mode and
// autocast and, on CUDA, devices[i] as its current device. Rethrows the first failure (lowest i)
// once every thread has finished, so no thread outlives the tensors it uses.
void run_per_device(const std::vector<Device>& devices, size_t count,
                    const std::function<void(size_t)>& fn) {
  const CallerState caller;
#if EMBER_WITH_CUDA
  // Each replica queues its work on the caller's current stream of its device: ordered after
  // what the caller queued there (the inputs it made), and the caller's later work after it.
  std::vector<cudaStream_t> streams(count, nullptr);
  for (size_t i = 0; i < count; ++i) {
    if (devices[i].is_cuda()) streams[i] = cuda::current_stream(devices[i].index);
  }
#endif
  std::vector<std::exception_ptr> errors(count);
  std::vector<std::thread> threads;
  threads.reserve(count);
  auto join_all = [&] {
    for (std::thread& thread : threads)
      thread.join();
  };
  try {
    for (size_t i = 0; i < count; ++i) {
      threads.emplace_back([&, i] {
        try {
          GradModeGuard grad_mode(caller.grad_enabled);
          AutocastGuard autocast(caller.autocast_dtype, caller.autocast_enabled);
#if EMBER_WITH_CUDA
          std::optional<cuda::DeviceGuard> device_guard;
          std::optional<cuda::StreamGuard> stream_guard;
          if (devices[i].is_cuda()) {
            device_guard.emplace(devices[i].index);
            stream_guard.emplace(devices[i].index, streams[i]);
          }
#else
          (void)devices;
#endif
          fn(i);
        } catch (...) {
          errors[i] = std::current_exception();
        }
      });
    }
  } catch (...) {
    join_all();  // a thread could not be started: let the started ones finish, then report
    throw;
  }
  join_all();
  for (const std::exception_ptr& error : errors) {
    if (error) std::rethrow_exception(error);
  }
}

// The gathered output's grad_fn. Edges: the input (when it requires grad), then every parameter
// of the module (null where one does not require grad). Its backward runs each replica's backward
// pass in a thread of its own, sums the replicas' parameter gradients on the gather device (the
// module's) and concatenates the gradients of the input's slices.
class ReplicaGather final : public Node {
 public:
  ReplicaGather() : Node("data_parallel_gather") {}

  std::vector<Tensor> apply(const Tensor& grad_output) override {
    EMBER_CHECK(!released_,
                "backward through DataParallel a second time: the replicas' graphs "
                "were freed by the first backward; pass retain_graph=true to it");
    const size_t used = outputs.size();
    // grad_output (N, ...) -> one slice (N_i, ...) per replica, on its device.
    std::vector<Tensor> slice_gradients(used);
    int64_t offset = 0;
    for (size_t i = 0; i < used; ++i) {
      const int64_t rows = outputs[i].size(0);
      slice_gradients[i] = grad_output.narrow(0, offset, rows).to(devices[i]);
      offset += rows;
    }
    // Replicas' gradients are private to this pass: start them empty.
    for (size_t i = 0; i < used; ++i) {
      for (const Tensor& p : parameters[i])
        p.set_grad(Tensor());
      if (inputs[i].requires_grad()) inputs[i].set_grad(Tensor());
    }
    const bool retain_graph = backward_retains_graph();
    run_per_device(devices, used, [&](size_t i) {
      if (outputs[i].requires_grad())
        run_backward({outputs[i]}, {slice_gradients[i]}, retain_graph);
    });

    std::vector<Tensor> gradients;  // parallel to `next`
    gradients.reserve(next.size());
    if (input_requires_grad) {
      std::vector<Tensor> parts;
      for (size_t i = 0; i < used; ++i) {
        const Tensor g = inputs[i].grad();
        parts.push_back((g.defined() ? g : zeros_like(inputs[i])).to(input_device));
        inputs[i].set_grad(Tensor());
      }
      gradients.push_back(cat(parts, 0));
    } else {
      gradients.emplace_back();
    }
    const size_t num_parameters = parameters[0].size();
    for (size_t k = 0; k < num_parameters; ++k) {
      Tensor total;
      for (size_t i = 0; i < used; ++i) {  // replica order: the same sum every run
        const Tensor g = parameters[i][k].grad();
        if (!g.defined()) continue;
        const Tensor here = g.to(gather_device);
        total = total.defined() ? total + here : here;
        parameters[i][k].set_grad(Tensor());
      }
      gradients.push_back(total);
    }
    return gradients;
  }

  void release_saved() override {
    outputs.clear();
    inputs.clear();
    released_ = true;
  }

  std::vector<Device> devices;                  // of the replicas used
  std::vector<Tensor> outputs;                  // replica i's output (N_i, ...), with its graph
  std::vector<Tensor> inputs;                   // replica i's input slice (N_i, ...), a leaf
  std::vector<std::vector<Tensor>> parameters;  // [i][k]: replica i's copy of parameter k
  bool input_requires_grad = false;
  Device input_device;
  Device gather_device;

 private:
  bool released_ = false;
};

}  // namespace

DataParallel::DataParallel(nn::ModulePtr module, std::vector<Device> devices)
    : module_(std::move(module)), devices_(std::move(devices)) {
  EMBER_CHECK(module_ != nullptr, "DataParallel: the module handle is empty");
  EMBER_CHECK(!devices_.empty(),
              "DataParallel: the device list is empty; give one device per replica, e.g. "
              "{cuda:0, cuda:1} (a device may repeat: {cpu, cpu} runs two replicas on the CPU)");
  for (const Device& device : devices_) {
    EMBER_CHECK(device.type == devices_[0].type,
                "DataParallel: the devices must be all CUDA or all CPU, got ",
                device_list(devices_));
  }
  for (const Device& device : devices_) {
    try {
      check_device_available(device);
    } catch (const Error& error) {
      EMBER_FAIL("DataParallel: cannot use ", device, " of ", device_list(devices_), ": ",
                 error.what());
    }
  }
  register_module("module", module_);
}

std::string DataParallel::extra_repr() const {
  return "devices=" + device_list(devices_);
}

std::shared_ptr<nn::Module> DataParallel::make_clone() const {
  return nn::make<DataParallel>(make_clone_of(*module_), devices_);
}

void DataParallel::refresh_replicas(size_t count) {
  if (replicas_.empty()) {
    for (const Device& device : devices_) {
      nn::ModulePtr replica = module_->clone();
      replica->to(device);
      replicas_.push_back(std::move(replica));
    }
  }
  const NamedTensors parameters = module_->named_parameters();
  const NamedTensors buffers = module_->named_buffers();
  const auto modules = module_->named_modules();
  NoGradGuard no_grad;
  for (size_t i = 0; i < count; ++i) {
    nn::Module& replica = *replicas_[i];
    const NamedTensors replica_parameters = replica.named_parameters();
    const NamedTensors replica_buffers = replica.named_buffers();
    const auto replica_modules = replica.named_modules();
    EMBER_CHECK(replica_parameters.size() == parameters.size() &&
                    replica_buffers.size() == buffers.size() &&
                    replica_modules.size() == modules.size(),
                "DataParallel: the module no longer has the structure it had at the first forward "
                "(or it shares a parameter between submodules, which replicas cannot): it has ",
                parameters.size(), " parameters and ", buffers.size(), " buffers, its replica ",
                replica_parameters.size(), " and ", replica_buffers.size());
    // set_data to fresh copies rather than copy_: a graph recorded by an earlier forward still
    // holds the old values (and their version), so backward through it remains correct.
    for (size_t k = 0; k < parameters.size(); ++k) {
      Tensor target = replica_parameters[k].second;
      const Tensor& source = parameters[k].second;
      if (target.requires_grad() != source.requires_grad())
        target.requires_grad_(source.requires_grad());
      target.set_data(copy_to(source, devices_[i]));
    }
    for (size_t k = 0; k < buffers.size(); ++k)
      replica_buffers[k].second.set_data(copy_to(buffers[k].second, devices_[i]));
    // Parents first: each module's own flag wins over the one its parent's train() passed down.
    for (size_t m = 0; m < modules.size(); ++m)
      replica_modules[m].second->train(modules[m].second->is_training());
  }
}

Tensor DataParallel::forward(const Tensor& input) {
  EMBER_CHECK(input.defined() && input.dim() > 0,
              "DataParallel: expected an input (N, ...) to split along dim 0, got ",
              input.defined() ? describe(input) : std::string("an undefined tensor"));
  for (const auto& [name, tensor] : module_->state_dict()) {
    EMBER_CHECK(tensor.device() == devices_[0], "DataParallel: the module's '", name, "' is on ",
                tensor.device(), " but the first device is ", devices_[0],
                ": the module must live on the first device (call module->to(", devices_[0],
                ") first)");
  }
  if (devices_.size() == 1) return module_->forward(input.to(devices_[0]));
  EMBER_CHECK(input.size(0) > 0, "DataParallel: the batch is empty (input ", describe(input), ")");

  // Scatter: torch.chunk's pieces of ceil(N / devices), so a small batch uses fewer replicas.
  std::vector<Tensor> slices;
  {
    NoGradGuard no_grad;
    slices = chunk(input.detach(), static_cast<int64_t>(devices_.size()), 0);
  }
  const size_t used = slices.size();
  refresh_replicas(used);
  const bool record = grad_enabled();
  for (size_t i = 0; i < used; ++i) {
    NoGradGuard no_grad;
    slices[i] = slices[i].to(devices_[i]).detach();  // a leaf of replica i's graph
    if (record && input.requires_grad()) slices[i].requires_grad_(true);
  }

  // Each replica draws (dropout) from a generator of its own, keyed by the default generator's
  // state and its index; the default generator then moves on by one block. The masks are thus
  // the same in every run with the same seed, whatever the threads' timing.
  const GeneratorState base = default_generator().state();
  default_generator().reserve(1);
  std::deque<Generator> replica_generators;  // not movable (a mutex): a deque never moves them
  for (size_t i = 0; i < used; ++i)
    replica_generators.emplace_back(replica_seed(base, i));

  std::vector<Tensor> outputs(used);
  run_per_device(devices_, used, [&](size_t i) {
    DefaultGeneratorGuard generator(replica_generators[i]);
    outputs[i] = replicas_[i]->forward(slices[i]);
  });
  for (size_t i = 0; i < used; ++i) {
    EMBER_CHECK(
        outputs[i].defined() && outputs[i].dim() > 0 && outputs[i].size(0) == slices[i].size(0),
        "DataParallel: each replica's output must keep the batch dim to be gathered "
        "along it: replica ",
        i, " took ", describe(slices[i]), " and returned ",
        outputs[i].defined() ? describe(outputs[i]) : std::string("an undefined tensor"));
  }

  Tensor gathered;
  {
    NoGradGuard no_grad;
    std::vector<Tensor> parts;
    for (const Tensor& output : outputs)
      parts.push_back(output.detach().to(devices_[0]));
    gathered = cat(parts, 0);
    // Replica 0 stands for the module: its buffer updates (running statistics) are kept.
    const NamedTensors buffers = module_->named_buffers();
    const NamedTensors replica_buffers = replicas_[0]->named_buffers();
    for (size_t k = 0; k < buffers.size(); ++k) {
      Tensor target = buffers[k].second;
      target.copy_(replica_buffers[k].second);
    }
  }

  bool any_output_requires_grad = false;
  for (const Tensor& output : outputs)
    any_output_requires_grad = any_output_requires_grad || output.requires_grad();
  if (!record || !any_output_requires_grad) return gathered;

  auto node = std::make_shared<ReplicaGather>();
  node->devices.assign(devices_.begin(), devices_.begin() + static_cast<std::ptrdiff_t>(used));
  node->outputs = outputs;
  node->inputs = slices;
  node->input_requires_grad = input.requires_grad();
  node->input_device = input.device();
  node->gather_device = devices_[0];
  std::vector<Tensor> edge_inputs = {input};
  for (const Tensor& p : module_->parameters())
    edge_inputs.push_back(p);
  for (size_t i = 0; i < used; ++i)
    node->parameters.push_back(replicas_[i]->parameters());
  set_history(node, edge_inputs, gathered);
  return gathered;
}

}  // namespace ember::dist
