#include "engines/factory.h"

#include <sstream>

#include "distributed/nccl/nccl_process_group.h"
#include "distributed/world.h"
#include "engines/device_engines.h"
#include "engines/distributed_engines.h"
#include "runtime/env.h"
#include "runtime/error.h"

namespace ember::engines {
namespace {

Device best_device() {
  return cuda_device_count() > 0 ? Device::cuda(0) : Device::cpu();
}

DType precision_for(const EngineOptions& options, const Device& device) {
  if (options.precision) return *options.precision;
  return device.is_cuda() ? DType::f16 : DType::bf16;
}

// dp's replicas: one on every visible GPU, else two on the CPU. With one GPU the module runs as it
// is, as torch.nn.DataParallel does: two replicas taking turns on one GPU do twice the launches on
// half batches plus a reduction, and trained at 0.88x-0.96x of the plain loop (H200, 2026-11-28).
// On the CPU two replicas, each a thread on half the batch, train faster than one process's
// OpenMP alone (828 against 740 images/s, bench/results/cpu-2026-11-29.md), so the CPU keeps them.
// dist::DataParallel itself takes any list ({cuda:0, cuda:0} included; tests/distributed).
std::vector<Device> data_parallel_devices() {
  const int gpus = cuda_device_count();
  if (gpus == 0) return {Device::cpu(), Device::cpu()};
  std::vector<Device> devices;
  for (int i = 0; i < gpus; ++i)
    devices.push_back(Device::cuda(i));
  return devices;
}

// EMBER_DDP_WORLD_OF_ONE=1 with a GPU and NCCL: the data-parallel engines run without a launcher,
// as a world of one over NCCL on cuda:0 (to test the NCCL path on one GPU; the average over one
// rank changes nothing). On the CPU a world of one stays an error: it is only ever a mistake.
bool world_of_one_allowed() {
  return env_switch("EMBER_DDP_WORLD_OF_ONE", false,
                    "run a data-parallel engine without a launcher, a world of one over NCCL") &&
         cuda_device_count() > 0 && dist::nccl_available();
}

// A data-parallel engine's group and device: under a launcher only (or a world of one, above).
// With GPUs, rank k of a machine works on GPU k mod #GPUs, over NCCL when every rank of the
// machine has a GPU of its own, else over MPI; without GPUs, over MPI on the CPU.
struct Ranks {
  dist::ProcessGroupPtr group;
  Device device = Device::cpu();
};
Ranks ranks_for(const std::string& engine, bool with_nccl = true) {
  EMBER_CHECK(dist::launched_with_several_processes() || world_of_one_allowed(),
              "it trains with several processes: start it under a launcher, e.g. mpirun -np 2 "
              "build/bin/ember train --engine ",
              engine,
              " (or pick cpu, cuda, amp or o2 for one process; EMBER_DDP_WORLD_OF_ONE=1 runs it "
              "as a world of one over NCCL when a GPU and NCCL are there)");
  Ranks ranks;
  ranks.group = dist::init();
  const int gpus = cuda_device_count();
  if (gpus == 0) return ranks;
  const dist::Topology where = dist::topology();
  const int device = where.rank_on_machine % gpus;
  ranks.device = Device::cuda(device);
  // NCCL refuses two ranks of one communicator on one GPU: with more ranks on the machine than
  // GPUs they stay on the MPI group, which stages CUDA tensors through pinned host memory.
  // (DASO builds its own node and global groups over MPI and needs no NCCL group.)
  if (with_nccl && dist::nccl_available() && where.ranks_on_machine <= gpus)
    ranks.group = dist::make_nccl_group(ranks.group, device);
  return ranks;
}

std::string known_names() {
  std::ostringstream names;
  for (const EngineEntry& entry : engine_table())
    names << (names.tellp() > 0 ? ", " : "") << entry.name;
  return names.str();
}

}  // namespace

const std::vector<EngineEntry>& engine_table() {
  // One row per engine name; `auto` has no `make` of its own (resolve_engine_name picks a row).
  // An engine added later without `make` answers "not available yet".
  static const std::vector<EngineEntry> table = {
      {"auto", "ddp under mpirun, else cuda when a GPU is visible, else cpu", nullptr},
      {"cpu", "f32 on the CPU (DeviceEngine)",
       [](const EngineOptions&) -> EnginePtr { return std::make_shared<DeviceEngine>(); }},
      {"cuda", "f32 on one GPU (DeviceEngine; cuda:N picks the GPU)",
       [](const EngineOptions&) -> EnginePtr {
         return std::make_shared<DeviceEngine>(Device::cuda(0));
       }},
      {"amp", "autocast f16 (with a GradScaler) or bf16 on one device (AMPEngine)",
       [](const EngineOptions& options) -> EnginePtr {
         const Device device = best_device();
         return std::make_shared<AMPEngine>(device, precision_for(options, device));
       }},
      {"o2", "model in f16/bf16, f32 master weights in the optimizer (O2Engine)",
       [](const EngineOptions& options) -> EnginePtr {
         const Device device = best_device();
         return std::make_shared<O2Engine>(device, precision_for(options, device));
       }},
      {"dp",
       "one process, the batch split over every visible GPU, or over two CPU replicas "
       "(DataParallelEngine)",
       [](const EngineOptions&) -> EnginePtr {
         return std::make_shared<DataParallelEngine<DeviceEngine>>(data_parallel_devices());
       }},
      {"dp-amp", "dp with autocast",
       [](const EngineOptions& options) -> EnginePtr {
         const auto devices = data_parallel_devices();
         return std::make_shared<DataParallelEngine<AMPEngine>>(
             devices, precision_for(options, devices.front()));
       }},
      {"dp-o2", "dp with an f16/bf16 model and f32 master weights",
       [](const EngineOptions& options) -> EnginePtr {
         const auto devices = data_parallel_devices();
         return std::make_shared<DataParallelEngine<O2Engine>>(
             devices, precision_for(options, devices.front()));
       }},
      {"ddp",
       "one process per rank under mpirun, gradients averaged during backward over NCCL (GPUs) "
       "or MPI (CPUs) (DistributedDataParallelEngine)",
       [](const EngineOptions& options) -> EnginePtr {
         const Ranks ranks = ranks_for("ddp");
         return std::make_shared<DistributedDataParallelEngine<DeviceEngine>>(
             ranks.group, options.ddp, ranks.device);
       }},
      {"ddp-amp", "ddp with autocast",
       [](const EngineOptions& options) -> EnginePtr {
         const Ranks ranks = ranks_for("ddp-amp");
         return std::make_shared<DistributedDataParallelEngine<AMPEngine>>(
             ranks.group, options.ddp, ranks.device, precision_for(options, ranks.device));
       }},
      {"ddp-o2", "ddp with an f16/bf16 model and f32 master weights",
       [](const EngineOptions& options) -> EnginePtr {
         const Ranks ranks = ranks_for("ddp-o2");
         return std::make_shared<DistributedDataParallelEngine<O2Engine>>(
             ranks.group, options.ddp, ranks.device, precision_for(options, ranks.device));
       }},
      {"daso",
       "Heat's DASO under mpirun: node-local gradient averaging, global parameter averaging "
       "(DasoEngine)",
       [](const EngineOptions& options) -> EnginePtr {
         const Ranks ranks = ranks_for("daso", /*with_nccl=*/false);
         return std::make_shared<DasoEngine>(ranks.device, static_cast<int>(options.total_epochs),
                                             options.daso);
       }},
  };
  return table;
}

std::string resolve_engine_name(const std::string& name) {
  if (name != "auto") return name;
  if (dist::launched_with_several_processes()) return "ddp";
  return cuda_device_count() > 0 ? "cuda" : "cpu";
}

EnginePtr make_engine(const std::string& requested, const EngineOptions& options) {
  const std::string name = resolve_engine_name(requested);
  if (name.rfind("cuda:", 0) == 0) {
    const Device device = Device::parse(name);
    try {
      return std::make_shared<DeviceEngine>(device);
    } catch (const Error& error) {
      EMBER_FAIL("engine '", name, "': ", error.what(),
                 " (pick engine cpu, or auto: the CPU when no GPU is visible)");
    }
  }
  for (const EngineEntry& entry : engine_table()) {
    if (entry.name != name) continue;
    EMBER_CHECK(entry.make != nullptr, "engine '", name,
                "' is not available yet in this build of ember; use cpu, cuda, amp or o2 (or "
                "auto)",
                requested == "auto" ? " (auto chose it because this process was started by a "
                                      "launcher with several processes)"
                                    : "");
    try {
      return entry.make(options);
    } catch (const Error& error) {
      EMBER_FAIL(
          "engine '", name, "': ", error.what(),
          name == "cuda" ? " (pick engine cpu, or auto: the CPU when no GPU is visible)" : "");
    }
  }
  EMBER_FAIL("unknown engine '", requested, "': expected one of ", known_names());
}

}  // namespace ember::engines
