// A job where the last rank leaves early (it finalises and exits, or hangs in a sleep) while the
// others enter an allreduce, or starts late (it sleeps before dist::init, whose MPI start waits
// for every process). ctest expects ember's message, naming the collective, the group and the
// rank (or MPI's start), within EMBER_COLLECTIVE_TIMEOUT, and the job to end (the watchdog ends
// the waiting process, or its wait() throws and finalize() aborts the job; a late start ends the
// process, and mpirun the rest).
//   mpirun -np 2 ember_peer_exits_early exit|hang|late
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <thread>

#include "distributed/world.h"
#include "runtime/ops.h"

namespace {

// Whether mpirun (Open MPI) made this process the job's last rank; known before MPI starts.
bool last_rank_by_the_launcher() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_SIZE");
  return rank != nullptr && size != nullptr && std::atoi(rank) == std::atoi(size) - 1;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "exit";
  if (std::strcmp(mode, "late") == 0 && last_rank_by_the_launcher()) {
    std::this_thread::sleep_for(std::chrono::seconds(120));
  }
  auto world = ember::dist::init();
  if (world->rank() == world->size() - 1) {
    if (std::strcmp(mode, "hang") == 0) std::this_thread::sleep_for(std::chrono::seconds(120));
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
