#include "distributed/mpi/mpi_worker.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <thread>

#include "runtime/error.h"

namespace ember::dist::mpi {

// Waking a sleeping thread can cost a scheduler time slice when the cores are oversubscribed:
// both sides spin, yielding, for this long before they sleep. Short, because a spinning waiter
// takes a core from the computation it is meant to overlap (2 ms measured no better).
constexpr auto kSpinBeforeSleeping = std::chrono::microseconds(50);

void MpiWork::wait() {
  const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleeping;
  while (!done_flag_.load(std::memory_order_acquire) &&
         std::chrono::steady_clock::now() < spin_until) {
    std::this_thread::yield();
  }
  std::unique_lock lock(mutex_);
  done_changed_.wait(lock, [&] { return done_; });
  if (error_) std::rethrow_exception(error_);
  if (after_wait && !after_wait_ran_) {
    after_wait_ran_ = true;
    after_wait();
  }
}

bool MpiWork::is_completed() {
  std::lock_guard lock(mutex_);
  return done_;
}

void MpiWork::mark_done(std::exception_ptr error) {
  {
    std::lock_guard lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  done_flag_.store(true, std::memory_order_release);
  done_changed_.notify_all();
}

namespace {

using Clock = std::chrono::steady_clock;

struct InFlight {
  MpiOperation operation;
  std::vector<MPI_Request> requests;
  Clock::time_point deadline;
};

class Worker {
 public:
  Worker() : timeout_(collective_timeout_seconds()), thread_([this] { loop(); }) {}
  ~Worker() {
    if (watchdog_thread_.joinable()) watchdog_thread_.join();
  }

  WorkPtr submit(MpiOperation operation) {
    auto work = operation.work;
    {
      std::lock_guard lock(mutex_);
      if (!failure_.empty()) {
        work->mark_done(std::make_exception_ptr(Error(
            detail::concat("ember: ", operation.description,
                           " was not started: an earlier collective failed (", failure_, ")"))));
        return work;
      }
      queue_.push_back(std::move(operation));
    }
    queue_changed_.notify_one();
    return work;
  }

  bool stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    queue_changed_.notify_one();
    thread_.join();
    watchdog_stopping_.store(true);
    watchdog_thread_.join();
    std::lock_guard lock(mutex_);
    return failure_.empty();
  }

  std::string failure() {
    std::lock_guard lock(mutex_);
    return failure_;
  }

 private:
  void loop() {
    std::vector<InFlight> in_flight;
    int idle_polls = 0;
    while (true) {
      std::deque<MpiOperation> fresh;
      {
        std::unique_lock lock(mutex_);
        if (in_flight.empty() && queue_.empty()) {
          // Idle: spin a little (the next collective often follows at once), then sleep.
          const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleeping;
          while (queue_.empty() && !stopping_ && std::chrono::steady_clock::now() < spin_until) {
            lock.unlock();
            std::this_thread::yield();
            lock.lock();
          }
          queue_changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
          if (queue_.empty()) return;  // stopping, and nothing left to do
        }
        fresh.swap(queue_);
      }
      for (auto& operation : fresh)
        start(std::move(operation), in_flight);
      bool progressed = !fresh.empty();
      for (size_t i = 0; i < in_flight.size();) {
        if (poll(in_flight[i])) {
          in_flight.erase(in_flight.begin() + static_cast<std::ptrdiff_t>(i));
          progressed = true;
        } else {
          ++i;
        }
      }
      // Spin (yielding) while operations are young, then back off: a long wait for a peer
      // should not take a core from the computation it is overlapping.
      idle_polls = progressed ? 0 : idle_polls + 1;
      if (in_flight.empty()) continue;
      if (idle_polls < 2000) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
    }
  }

  void start(MpiOperation operation, std::vector<InFlight>& in_flight) {
    InFlight entry{std::move(operation), {}, Clock::now() + to_duration(timeout_)};
    {
      std::lock_guard lock(mutex_);
      if (!failure_.empty()) {
        entry.operation.work->mark_done(std::make_exception_ptr(Error(
            detail::concat("ember: ", entry.operation.description,
                           " was not started: an earlier collective failed (", failure_, ")"))));
        return;
      }
    }
    try {
      if (entry.operation.blocking) {
        std::lock_guard watch(watch_mutex_);
        watched_ = entry.operation.description;
        watched_deadline_ = entry.deadline;
      }
      if (entry.operation.start) entry.operation.start(entry.requests);
      if (entry.operation.blocking) {
        std::lock_guard watch(watch_mutex_);
        watched_.clear();
      }
    } catch (...) {
      entry.operation.work->mark_done(std::current_exception());
      return;
    }
    in_flight.push_back(std::move(entry));
  }

  // True when the entry is done (completed, failed or timed out).
  bool poll(InFlight& entry) {
    int done = 1;
    if (!entry.requests.empty()) {
      const int rc = MPI_Testall(static_cast<int>(entry.requests.size()), entry.requests.data(),
                                 &done, MPI_STATUSES_IGNORE);
      if (rc != MPI_SUCCESS) {
        fail(entry, detail::concat("MPI_Testall returned ", error_string(rc)));
        return true;
      }
    }
    if (done) {
      try {
        if (entry.operation.finish) entry.operation.finish();
        entry.operation.work->mark_done(nullptr);
      } catch (...) {
        entry.operation.work->mark_done(std::current_exception());
      }
      return true;
    }
    if (Clock::now() > entry.deadline) {
      fail(entry, detail::concat("did not complete within ", timeout_,
                                 " s (EMBER_COLLECTIVE_TIMEOUT): a peer rank has exited, hung, "
                                 "or is waiting in a different collective"));
      return true;
    }
    return false;
  }

  void fail(InFlight& entry, const std::string& why) {
    const std::string message = detail::concat("ember: ", entry.operation.description, " ", why);
    {
      std::lock_guard lock(mutex_);
      if (failure_.empty()) failure_ = message;
    }
    // Said at once: the caller may be blocked elsewhere and never wait on this Work.
    std::fprintf(stderr, "%s\n", message.c_str());
    std::fflush(stderr);
    entry.operation.work->mark_done(std::make_exception_ptr(Error(message)));
  }

  static std::string error_string(int rc) {
    char text[MPI_MAX_ERROR_STRING];
    int length = 0;
    MPI_Error_string(rc, text, &length);
    return std::string(text, static_cast<size_t>(length));
  }

  static Clock::duration to_duration(double seconds) {
    return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  }

  // A blocking collective cannot be abandoned: when one outlives the timeout, the watchdog says
  // which one and ends the process, and the launcher then ends the job.
  void watchdog() {
    while (!watchdog_stopping_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard watch(watch_mutex_);
      if (watched_.empty() || Clock::now() <= watched_deadline_) continue;
      std::fprintf(stderr,
                   "ember: %s did not complete within %g s (EMBER_COLLECTIVE_TIMEOUT): a peer "
                   "rank has exited, hung, or is waiting in a different collective; ending this "
                   "process\n",
                   watched_.c_str(), timeout_);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }

  double timeout_;
  std::mutex watch_mutex_;
  std::atomic<bool> watchdog_stopping_{false};
  std::string watched_;  // the blocking call in progress, empty when none
  Clock::time_point watched_deadline_;
  std::mutex mutex_;
  std::condition_variable queue_changed_;
  std::deque<MpiOperation> queue_;
  bool stopping_ = false;
  std::string failure_;
  std::thread thread_;  // last: start once the members above exist
  std::thread watchdog_thread_{[this] { watchdog(); }};
};

std::mutex g_worker_mutex;
Worker* g_worker = nullptr;  // never destroyed before stop_worker(): it owns a running thread

Worker& worker() {
  std::lock_guard lock(g_worker_mutex);
  if (g_worker == nullptr) g_worker = new Worker();
  return *g_worker;
}

}  // namespace

WorkPtr submit(MpiOperation operation) {
  return worker().submit(std::move(operation));
}

void run_on_worker(const std::function<void()>& fn) {
  MpiOperation operation;
  operation.description = "a communicator operation";
  operation.start = [&fn](std::vector<MPI_Request>&) { fn(); };
  submit(std::move(operation))->wait();
}

bool stop_worker() {
  std::lock_guard lock(g_worker_mutex);
  if (g_worker == nullptr) return true;
  const bool clean = g_worker->stop();
  delete g_worker;
  g_worker = nullptr;
  return clean;
}

std::string first_failure() {
  std::lock_guard lock(g_worker_mutex);
  return g_worker == nullptr ? std::string() : g_worker->failure();
}

}  // namespace ember::dist::mpi
