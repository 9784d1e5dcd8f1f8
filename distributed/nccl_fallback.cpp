// make_nccl_group for builds without NCCL: says how to get it.
#if !EMBER_WITH_NCCL
#include "distributed/nccl/nccl_process_group.h"
#include "runtime/error.h"

namespace ember::dist {

ProcessGroupPtr make_nccl_group(const ProcessGroupPtr&, int) {
  EMBER_FAIL("the NCCL backend is not in this build of ember: configure with the CUDA backend on ",
             "and NCCL found (-DEMBER_NCCL=ON; set NCCL_ROOT if nccl.h is elsewhere), or use the ",
             "MPI backend (dist::world())");
}

bool nccl_available() {
  return false;
}

}  // namespace ember::dist
#endif
