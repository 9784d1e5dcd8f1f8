#include "distributed/process_group.h"

#include <cstdlib>
#include <string>

#include "distributed/world.h"
#include "runtime/error.h"

namespace ember::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

double collective_timeout_seconds() {
  const char* text = std::getenv("EMBER_COLLECTIVE_TIMEOUT");
  if (text == nullptr || *text == '\0') return 600.0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  EMBER_CHECK(end != text && *end == '\0' && seconds > 0, "EMBER_COLLECTIVE_TIMEOUT='", text,
              "': expected a positive number of seconds (default 600; inf for no limit)");
  return seconds;
}

// The launchers' own variables (Open MPI, MPICH/Hydra, PMIx, Slurm): no MPI call needed.
bool launched_with_several_processes() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", "SLURM_NTASKS"}) {
    const char* text = std::getenv(name);
    if (text != nullptr && std::atoi(text) > 1) return true;
  }
  return false;
}

}  // namespace ember::dist
