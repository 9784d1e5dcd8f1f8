// Engines by name: what `ember train --engine NAME` and the runner's `engine` option accept.
//
//   auto engine = engines::make_engine("amp", {.precision = DType::bf16});
//
//   auto      the best for this machine: under mpirun with several processes, ddp; else one GPU
//             when one is visible (cuda); else the CPU
//   cpu       DeviceEngine on the CPU                   cuda, cuda:N   DeviceEngine on a GPU
//   amp       AMPEngine (autocast, GradScaler for f16)  o2             O2Engine (f16/bf16 model,
//                                                                      f32 master weights)
//   dp, dp-amp, dp-o2   DataParallelEngine: one process, replicas on every GPU (two on the CPU)
//   ddp, ddp-amp, ddp-o2, daso: one process per rank under mpirun (NCCL on GPUs, MPI on CPUs);
//                       without a launcher they say how to start them (EMBER_DDP_WORLD_OF_ONE=1
//                       with a GPU and NCCL: a world of one over NCCL on cuda:0, for testing)
//
// amp and o2 run on the GPU when one is visible, else on the CPU; their precision defaults to f16
// on a GPU and bf16 on the CPU (as PyTorch's autocast).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "distributed/daso.h"
#include "distributed/ddp.h"
#include "engines/engine.h"

namespace ember::engines {

struct EngineOptions {
  std::optional<DType> precision = {};  // amp, o2 and their data-parallel forms: f16 or bf16
  dist::DdpOptions ddp = {};            // ddp, ddp-amp, ddp-o2: buckets, unused parameters
  int64_t total_epochs = 0;             // daso: the schedule's length (required)
  dist::DasoOptions daso = {};          // daso: warm-up, cool-down, skips, chunks (Heat's defaults)
};

// Throws for an unknown name (listing the known ones) and for an engine this machine or build
// cannot run, saying what to use instead.
EnginePtr make_engine(const std::string& name, const EngineOptions& options = {});

// The engine `auto` stands for on this machine ("cpu", "cuda" or "ddp"); other names unchanged.
std::string resolve_engine_name(const std::string& name);

// One row of the engine table.
struct EngineEntry {
  std::string name;
  std::string summary;
  // Builds the engine; empty while the engine is not available in this build.
  std::function<EnginePtr(const EngineOptions&)> make;
};
// Every engine make_engine knows, in the order shown to users.
const std::vector<EngineEntry>& engine_table();

}  // namespace ember::engines
