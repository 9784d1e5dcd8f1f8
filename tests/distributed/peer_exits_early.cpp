// A job where the last rank leaves early (it finalises and exits, or hangs in a sleep) while the
// others enter an allreduce. ctest expects the others to fail within EMBER_COLLECTIVE_TIMEOUT
// with ember's message naming the collective, the group and the rank, and the job to end.
//   mpirun -np 2 ember_peer_exits_early exit|hang
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

#include "distributed/world.h"
#include "runtime/ops.h"

int main(int argc, char** argv) {
  const bool hang = argc > 1 && std::strcmp(argv[1], "hang") == 0;
  auto world = ember::dist::init();
  if (world->rank() == world->size() - 1) {
    if (hang) std::this_thread::sleep_for(std::chrono::seconds(120));
    world.reset();
    ember::dist::finalize();
    return 0;
  }
  try {
    ember::Tensor x = ember::ones({1024});
    world->allreduce(x)->wait();
    std::printf("rank %d: the allreduce completed without its peer\n", world->rank());
    return 2;
  } catch (const std::exception& error) {
    std::printf("rank %d caught: %s\n", world->rank(), error.what());
    return 1;  // finalize() at exit sees the failed collective and aborts the job
  }
}
