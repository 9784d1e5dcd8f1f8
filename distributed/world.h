// The world of processes launched together (mpirun, srun) and where each one sits.
//
// MPI is the launcher and the bootstrap: init() initialises MPI once and returns the group of every
// process. A process not started by a launcher is a world of one. Ranks on the same machine share a
// node; EMBER_LOCAL_SIZE=k overrides that, so that one machine can pose as several nodes of k
// ranks.
#pragma once

#include "distributed/process_group.h"

namespace ember::dist {

// Initialises MPI (once; later calls return the same group) and returns the world group.
ProcessGroupPtr init();
bool is_initialized();
// The world group; init() must have been called.
ProcessGroupPtr world();
// Whether this process was started by mpirun/srun with more than one process, judged from the
// launcher's environment (no MPI call): lets `auto` choose an engine before init().
bool launched_with_several_processes();

// Where this rank sits: its node (a machine, or a group of EMBER_LOCAL_SIZE ranks) and its place
// in it. With EMBER_LOCAL_SIZE every node holds that many ranks (it must divide the world size).
struct Topology {
  int local_rank = 0;  // place in the node
  int local_size = 1;  // ranks per node
  int node = 0;        // which node
  int num_nodes = 1;
  // This rank's place among the ranks of its machine (MPI_COMM_TYPE_SHARED), and their number,
  // whatever EMBER_LOCAL_SIZE makes a node: which of the machine's GPUs it takes, and how many
  // processes share them.
  int rank_on_machine = 0;
  int ranks_on_machine = 1;
};
Topology topology();
// The ranks of this node, and the ranks sharing this rank's local rank across nodes (DASO's
// global groups). Made once, on first use; collective over the world.
ProcessGroupPtr node_group();
ProcessGroupPtr cross_node_group();

// Ends MPI (also done at exit). After a collective failed, aborts the job instead of finalising,
// since the peers may wait forever.
void finalize();

// Ends every process of the job at once with `exit_code` (MPI_Abort; without a launcher, this
// process exits). For an error on one rank that its peers cannot learn of: they would otherwise
// wait in their next collective until EMBER_COLLECTIVE_TIMEOUT, and MPI_Finalize would wait for
// them. Flushes stdout and stderr first, so that the error message is not lost.
[[noreturn]] void abort_job(int exit_code);

}  // namespace ember::dist
