// The NCCL backend of ProcessGroup: CUDA tensors, one GPU per rank (or several ranks sharing one).
//
// Bootstrapped over another group (MPI): rank 0 creates NCCL's unique id and broadcasts it. A
// bootstrap group of one rank (the world of a build without MPI, dist::init() with EMBER_MPI=OFF,
// or a split of one rank) needs no exchange: a communicator of one rank, on one GPU, whose
// collectives are copies (avg divides by 1) — for tests and single-GPU DDP.
//
//   auto nccl = dist::make_nccl_group(dist::init(), 0);   // cuda:0 tensors from here on
// Collectives run on the group's own stream, ordered after the caller's current stream by an
// event (so they see the values the caller produced) and finished by another; wait() blocks the
// host until that event, polling NCCL's asynchronous error and the timeout
// (EMBER_COLLECTIVE_TIMEOUT), and aborts the communicator when either fires. Creating the
// communicator is bounded by the same timeout (a peer that never joins). send/recv take no
// tags and run in order on that one stream: a rank's recv blocks its later send (no ring of
// recv-then-send, which the MPI group allows).
#pragma once

#include "distributed/process_group.h"

namespace ember::dist {

// Collective over `bootstrap`: every rank passes the CUDA device its tensors live on. Every
// tensor given to the group must be a contiguous tensor on that device (CPU tensors go to the
// MPI group).
ProcessGroupPtr make_nccl_group(const ProcessGroupPtr& bootstrap, int device_index);
// Whether this build has the NCCL backend (EMBER_NCCL).
bool nccl_available();

}  // namespace ember::dist
