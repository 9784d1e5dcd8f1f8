// The thread that makes ember's MPI calls after MPI_Init (MPI_THREAD_SERIALIZED is enough: a
// mutex keeps the calls one at a time).
//
// Why a thread: collectives must overlap the caller's computation (DDP's buckets reduce while
// backward runs), and non-blocking MPI collectives only advance while someone calls into MPI.
// Operations are started in the order they were submitted, which MPI requires to be the same on
// every rank. Collectives are blocking calls on this thread: OpenMPI's blocking collectives
// (the "tuned" shared-memory algorithms) reach about twice the bandwidth of its non-blocking ones
// at 1-8 MiB (bench/collectives.cpp), and the thread is what overlaps them with the caller's
// work. A collective whose caller waits for it at once (within kGraceForCaller of submitting it,
// before the worker took it) runs on the caller's thread instead: no hand-off, so a small
// allreduce costs 0.7 to 2 us rather than 6 (2 ranks, the 2-core VMs). Point-to-point operations
// are non-blocking and progressed with MPI_Testall, so a send and a receive in flight together
// cannot deadlock each other. Every operation is bounded by collective_timeout_seconds(): a
// non-blocking one fails its Work; a blocking one cannot be abandoned, so a watchdog names it and
// ends the process (the launcher then ends the job).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "distributed/process_group.h"

namespace ember::dist::mpi {

// The Work of an MPI operation: done once its requests completed and its finish step ran.
class MpiWork final : public Work {
 public:
  void wait() override;
  bool is_completed() override;
  // Runs on the thread that waits, after completion (CUDA tensors: the copy back from the
  // host staging buffer, on that thread's stream).
  std::function<void()> after_wait;

  // Called by the worker: completion, with the error when it failed.
  void mark_done(std::exception_ptr error);

 private:
  std::mutex mutex_;
  std::condition_variable done_changed_;
  bool done_ = false;
  std::atomic<bool> done_flag_{false};  // done_, readable without the mutex (wait() spins on it)
  std::exception_ptr error_;
  bool after_wait_ran_ = false;  // guarded by mutex_: wait() may be called more than once
};

struct MpiOperation {
  // "allreduce(sum) of f32 (1024) on group 'world' at rank 1 of 2": names it in errors, called
  // only when one is raised.
  std::function<std::string()> describe;
  // Issues the calls: non-blocking ones append their requests; a blocking one (blocking = true)
  // returns when done, watched by the timeout's watchdog.
  std::function<void(std::vector<MPI_Request>& requests)> start;
  bool blocking = false;
  // Runs on the worker once every request completed (may be empty).
  std::function<void()> finish;
  std::shared_ptr<MpiWork> work = std::make_shared<MpiWork>();
};

// Queues `operation` on the worker (started lazily on first use) and returns its Work.
WorkPtr submit(MpiOperation operation);
// Runs `fn` on the worker, after everything queued before it has started, and waits for it:
// for blocking MPI calls (communicator creation and freeing).
void run_on_worker(const std::function<void()>& fn);
// Waits for everything queued, then stops the worker. Returns false when an operation failed,
// in which case the job must be aborted rather than finalised (peers may wait forever).
bool stop_worker();
// The first failure, empty when none.
std::string first_failure();
// For tests: a caller that takes its own operation from the queue pauses this long before it
// starts it, so that the worker takes the ones queued after it meanwhile (a race otherwise
// rare). Zero, the default, pauses nothing.
void set_caller_pause_for_testing(std::chrono::microseconds pause);

}  // namespace ember::dist::mpi
