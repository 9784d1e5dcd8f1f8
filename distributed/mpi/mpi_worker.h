// The one thread that makes every MPI call after MPI_Init (MPI_THREAD_SERIALIZED is enough).
//
// Why a thread: collectives must overlap the caller's computation (DDP's buckets reduce while
// backward runs), and non-blocking MPI collectives only advance while someone calls into MPI.
// Operations are started in the order they were submitted, which MPI requires to be the same on
// every rank, and progressed together with MPI_Testall, so a send and a receive in flight at the
// same time cannot deadlock each other. Each one fails after collective_timeout_seconds().
#pragma once

#include <mpi.h>

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
  std::exception_ptr error_;
  bool after_wait_ran_ = false;  // guarded by mutex_: wait() may be called more than once
};

struct MpiOperation {
  // "allreduce(sum) of f32 (1024) on group 'world' at rank 1 of 2": names it in errors.
  std::string description;
  // Issues the non-blocking calls, appending their requests.
  std::function<void(std::vector<MPI_Request>& requests)> start;
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

}  // namespace ember::dist::mpi
