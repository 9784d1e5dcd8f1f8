#include "engines/factory.h"

#include <cstdlib>
#include <sstream>

#include "engines/device_engines.h"
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

// The launcher's own variables (Open MPI, MPICH/Hydra, Slurm): judged before MPI is initialised.
bool launched_with_several_processes() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"}) {
    const char* value = std::getenv(variable);
    if (value && std::atoi(value) > 1) return true;
  }
  return false;
}

std::string known_names() {
  std::ostringstream names;
  for (const EngineEntry& entry : engine_table())
    names << (names.tellp() > 0 ? ", " : "") << entry.name;
  return names.str();
}

}  // namespace

const std::vector<EngineEntry>& engine_table() {
  // The data-parallel engines come from distributed/; an entry without `make` answers "not
  // available yet". Wiring one is filling in its `make`.
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
      {"dp", "one process, the batch split over every visible GPU (DataParallelEngine)", nullptr},
      {"ddp", "one process per GPU or CPU rank under mpirun (DistributedDataParallelEngine)",
       nullptr},
      {"ddp-amp", "ddp with autocast (DistributedDataParallelAMPEngine)", nullptr},
      {"ddp-o2", "ddp with f16/bf16 model and f32 master weights", nullptr},
      {"daso", "Heat's DASO: node-local gradient averaging, global parameter averaging", nullptr},
  };
  return table;
}

std::string resolve_engine_name(const std::string& name) {
  if (name != "auto") return name;
  if (launched_with_several_processes()) return "ddp";
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
