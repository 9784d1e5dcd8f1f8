// The MPI world: initialisation, topology (node = machine, or EMBER_LOCAL_SIZE ranks), the node
// and cross-node groups, and the end of MPI.
#include <mpi.h>

#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "distributed/call_with_deadline.h"
#include "distributed/mpi/cuda_aware.h"
#include "distributed/mpi/mpi_process_group.h"
#include "distributed/mpi/mpi_worker.h"
#include "distributed/world.h"
#include "runtime/error.h"

namespace ember::dist {
namespace {

std::mutex g_mutex;
ProcessGroupPtr g_world;
ProcessGroupPtr g_node_group;
ProcessGroupPtr g_cross_node_group;
Topology g_topology;
bool g_finalized = false;

int env_int(const char* name, int fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  errno = 0;
  const long value = std::strtol(text, &end, 10);
  EMBER_CHECK(end != text && *end == '\0', name, "='", text, "': expected an integer");
  // 4294967297 cast to int is 1: a value past int's range is refused, not wrapped.
  EMBER_CHECK(errno != ERANGE && value >= std::numeric_limits<int>::min() &&
                  value <= std::numeric_limits<int>::max(),
              name, "='", text, "': out of range (at most ", std::numeric_limits<int>::max(), ")");
  return static_cast<int>(value);
}

// Ranks on one machine share a node unless EMBER_LOCAL_SIZE says how many ranks a node holds.
Topology find_topology(MPI_Comm world, int rank, int size) {
  Topology topology;
  MPI_Comm shared = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shared);
  MPI_Comm_rank(shared, &topology.rank_on_machine);
  MPI_Comm_size(shared, &topology.ranks_on_machine);
  const int forced = env_int("EMBER_LOCAL_SIZE", 0);
  if (forced != 0) {
    MPI_Comm_free(&shared);
    EMBER_CHECK(forced > 0 && size % forced == 0, "EMBER_LOCAL_SIZE=", forced,
                ": must be a positive divisor of the number of processes (", size,
                "), so that every node holds the same number of ranks");
    topology.local_size = forced;
    topology.local_rank = rank % forced;
    topology.node = rank / forced;
    topology.num_nodes = size / forced;
    return topology;
  }
  MPI_Comm_rank(shared, &topology.local_rank);
  MPI_Comm_size(shared, &topology.local_size);
  // The node's index: its lowest world rank, ranked among all nodes' lowest ranks.
  int leader = rank;
  MPI_Bcast(&leader, 1, MPI_INT, 0, shared);
  MPI_Comm_free(&shared);
  std::vector<int> leaders(static_cast<size_t>(size));
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, world);
  topology.node = 0;
  topology.num_nodes = 0;
  for (int r = 0; r < size; ++r) {
    if (leaders[static_cast<size_t>(r)] != r) continue;  // r leads a node
    if (r < leader) ++topology.node;
    ++topology.num_nodes;
  }
  return topology;
}

void finalize_at_exit() {
  finalize();
}

// Ends this process if MPI has not started within `seconds`. MPI's start waits for every process
// of the job (Open MPI exchanges their addresses in it), so a process that never reaches
// dist::init (hung, or busy before it) would hold the others there forever, and MPI offers no
// timeout. Until MPI has started it cannot abort the job either: this process exits, and the
// launcher ends the others.
class StartDeadline {
 public:
  explicit StartDeadline(double seconds) : thread_([this, seconds] { watch(seconds); }) {}
  ~StartDeadline() {
    {
      std::lock_guard lock(mutex_);
      started_ = true;
    }
    started_or_late_.notify_one();
    thread_.join();
  }
  StartDeadline(const StartDeadline&) = delete;
  StartDeadline& operator=(const StartDeadline&) = delete;

 private:
  void watch(double seconds) {
    std::unique_lock lock(mutex_);
    if (started_or_late_.wait_until(lock, deadline_after(seconds), [this] { return started_; }))
      return;
    std::fprintf(stderr,
                 "ember: dist::init: MPI did not start within %g s (EMBER_COLLECTIVE_TIMEOUT). "
                 "It waits for every process of the job, and at least one has not reached "
                 "dist::init (hung, or still busy before it); ending this process\n",
                 seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }

  std::mutex mutex_;
  std::condition_variable started_or_late_;
  bool started_ = false;
  std::thread thread_;  // last: starts once the members it uses exist
};

// Whether a launcher (mpirun, srun, a PMI or PMIx one) started this process, whatever its world.
bool started_by_a_launcher() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"})
    if (std::getenv(name) != nullptr) return true;
  return false;
}

// A singleton's session directory base of its own (start_alone_without_a_daemon), removed after
// MPI_Finalize; empty when there is none (a launcher's process, or the user's own setting).
std::string g_singleton_session_base;  // under g_mutex

// A process that no launcher started is a world of one (MPI's singleton). Open MPI 4 would start
// a daemon (orted) for it, in case it later spawns processes; ember never does, and a world of one
// should not depend on a second program starting. But isolated singletons all take job family 0,
// so that every one on a machine has its session directory in <TMPDIR>/ompi.<host>.<uid>/jf.0:
// one that finalises removes it while another starts in it ("A call to mkdir was unable to create
// the desired directory", orte_init failed: 1 of 64 test programs started 16 at a time here,
// 2026-11-29). So each singleton gets a base of its own under TMPDIR. The user's settings win.
void start_alone_without_a_daemon() {
  ::setenv("OMPI_MCA_ess_singleton_isolated", "1", /*overwrite=*/0);
  if (started_by_a_launcher() || std::getenv("OMPI_MCA_orte_tmpdir_base") != nullptr) return;
  const char* tmpdir = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp") + "/ember-mpi-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) return;  // Open MPI's shared default, then
  g_singleton_session_base = pattern;
  ::setenv("OMPI_MCA_orte_tmpdir_base", g_singleton_session_base.c_str(), /*overwrite=*/1);
}

}  // namespace

ProcessGroupPtr init() {
  std::lock_guard lock(g_mutex);
  if (g_world) return g_world;
  EMBER_CHECK(!g_finalized, "dist::init: MPI was already finalised in this process; it cannot ",
              "be initialised twice");
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    start_alone_without_a_daemon();
    int provided = 0;
    int rc = MPI_SUCCESS;
    {
      const StartDeadline deadline(collective_timeout_seconds());
      // Serialized is enough: after this, ember calls MPI one call at a time (mpi_worker.h).
      // MPI_Init's errors are fatal by default; this is for a library set to return them.
      rc = MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    }
    EMBER_CHECK(rc == MPI_SUCCESS, "dist::init: MPI_Init_thread failed (error ", rc, ")");
    EMBER_CHECK(provided >= MPI_THREAD_SERIALIZED,
                "dist::init: this MPI library does not support MPI_THREAD_SERIALIZED (provided ",
                provided, "); ember needs it for its communication thread");
    std::atexit(finalize_at_exit);
  }
  // Errors come back as return codes (reported by ember) instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  mpi::decide_cuda_aware_at_init();  // EMBER_MPI_CUDA_AWARE, or the library's own answer
  mpi::create_half_operations();
  MPI_Comm world = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world);  // ember's traffic never mixes with the user's
  int rank = 0, size = 1;
  MPI_Comm_rank(world, &rank);
  MPI_Comm_size(world, &size);
  g_topology = find_topology(world, rank, size);
  g_world = std::make_shared<mpi::MpiProcessGroup>(world, "world");
  return g_world;
}

bool is_initialized() {
  std::lock_guard lock(g_mutex);
  return g_world != nullptr;
}

ProcessGroupPtr world() {
  std::lock_guard lock(g_mutex);
  EMBER_CHECK(g_world != nullptr, "dist::world(): call dist::init() first");
  return g_world;
}

Topology topology() {
  std::lock_guard lock(g_mutex);
  EMBER_CHECK(g_world != nullptr, "dist::topology(): call dist::init() first");
  return g_topology;
}

ProcessGroupPtr node_group() {
  ProcessGroupPtr group = world();
  std::lock_guard lock(g_mutex);
  if (!g_node_group) {
    g_node_group = group->split(g_topology.node, g_topology.local_rank);
  }
  return g_node_group;
}

ProcessGroupPtr cross_node_group() {
  ProcessGroupPtr group = world();
  std::lock_guard lock(g_mutex);
  if (!g_cross_node_group) {
    g_cross_node_group = group->split(g_topology.local_rank, g_topology.node);
  }
  return g_cross_node_group;
}

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (initialized && !finalized) MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

void finalize() {
  std::unique_lock lock(g_mutex);
  if (g_finalized) return;
  g_finalized = true;
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) return;
  g_node_group.reset();
  g_cross_node_group.reset();
  g_world.reset();
  lock.unlock();
  if (!mpi::stop_worker()) {
    std::fprintf(stderr, "ember: aborting the MPI job: a collective failed on this rank\n");
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  mpi::free_half_operations();
  MPI_Finalize();
  lock.lock();
  if (!g_singleton_session_base.empty()) {
    std::error_code ignored;  // what is left is a few empty directories
    std::filesystem::remove_all(g_singleton_session_base, ignored);
    g_singleton_session_base.clear();
  }
}

}  // namespace ember::dist
