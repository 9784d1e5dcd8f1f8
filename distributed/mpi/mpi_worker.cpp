#include "distributed/mpi/mpi_worker.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <thread>

#include "distributed/call_with_deadline.h"
#include "runtime/error.h"

namespace ember::dist::mpi {

// Waking a sleeping thread can cost a scheduler time slice when the cores are oversubscribed:
// both sides spin, yielding, for this long before they sleep. Short, because a spinning waiter
// takes a core from the computation it is meant to overlap (2 ms measured no better).
constexpr auto kSpinBeforeSleeping = std::chrono::microseconds(50);

namespace {
bool run_here_if_next(MpiWork* work);
}  // namespace

void MpiWork::wait() {
  // A blocking operation that no thread has started yet runs here, on the caller's thread.
  if (!done_flag_.load(std::memory_order_acquire)) run_here_if_next(this);
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

// A blocking operation waits this long in the queue for its caller: a caller that waits for it
// at once (submit then wait, the common synchronous use) runs it on its own thread, which saves
// the two thread hand-offs (about 5 us, and more on a core shared with the worker). One that is
// not waited for within this time is started by the worker, so that it overlaps the caller's
// work (DDP's buckets during backward).
constexpr auto kGraceForCaller = std::chrono::microseconds(30);

std::atomic<std::chrono::microseconds> g_caller_pause{std::chrono::microseconds(0)};

struct Queued {
  MpiOperation operation;
  uint64_t ticket = 0;  // submission order: operations start in this order on every rank
  Clock::time_point submitted;
};

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
            detail::concat("ember: ", operation.describe(),
                           " was not started: an earlier collective failed (", failure_, ")"))));
        return work;
      }
      queue_.push_back(Queued{std::move(operation), next_ticket_++, Clock::now()});
    }
    queue_changed_.notify_one();
    return work;
  }

  // Called by wait(): when `work` is the next operation to start and a blocking one, takes it
  // from the queue and runs it on the calling thread. False when the worker has it (or it must
  // wait for earlier operations, which the worker starts).
  bool run_here_if_next(MpiWork* work) {
    Queued taken;
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty() || queue_.front().operation.work.get() != work ||
          !queue_.front().operation.blocking) {
        return false;
      }
      taken = std::move(queue_.front());
      queue_.pop_front();
    }
    if (const auto pause = g_caller_pause.load(); pause.count() > 0)
      std::this_thread::sleep_for(pause);
    std::unique_lock mpi(mpi_mutex_);
    std::vector<InFlight> none;
    start(std::move(taken), none, mpi);  // blocking: done (or failed) when it returns
    if (!none.empty()) poll(none.front());
    return true;
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
      std::deque<Queued> fresh;
      {
        std::unique_lock lock(mutex_);
        if (in_flight.empty() && queue_.empty()) {
          // Idle: spin a little (the next collective often follows at once), then sleep.
          // (Measured: sleeping at once, or not spinning after a caller ran its own operation,
          // made small collectives 10-25 us slower on this VM.)
          const auto spin_until = std::chrono::steady_clock::now() + kSpinBeforeSleeping;
          while (queue_.empty() && !stopping_ && std::chrono::steady_clock::now() < spin_until) {
            lock.unlock();
            std::this_thread::yield();
            lock.lock();
          }
          queue_changed_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
          if (queue_.empty()) return;  // stopping, and nothing left to do
        }
        // A young blocking operation is left to its caller for a moment (kGraceForCaller);
        // everything queued before it is taken now, in order.
        while (!queue_.empty() && (stopping_ || !queue_.front().operation.blocking ||
                                   Clock::now() - queue_.front().submitted >= kGraceForCaller)) {
          fresh.push_back(std::move(queue_.front()));
          queue_.pop_front();
        }
        if (fresh.empty() && in_flight.empty() && !queue_.empty()) {
          // Spin (yielding) through the grace instead of sleeping until it ends. A worker asleep
          // here is woken by the next submit (a futex wake), and the woken thread takes the
          // caller's core: with a caller that submits and waits in a loop, the worker was asleep
          // at every submit, and each small collective took about 17 us instead of 0.7
          // (bench/results/distributed-cpu-2026-11-23.md, evening of 2026-11-24).
          const auto ripe = queue_.front().submitted + kGraceForCaller;
          const MpiWork* young = queue_.front().operation.work.get();
          while (!stopping_ && Clock::now() < ripe && !queue_.empty() &&
                 queue_.front().operation.work.get() == young) {
            lock.unlock();
            std::this_thread::yield();
            lock.lock();
          }
          continue;
        }
      }
      bool progressed = !fresh.empty();
      if (!fresh.empty() || !in_flight.empty()) {
        std::unique_lock mpi(mpi_mutex_);
        for (auto& queued : fresh)
          start(std::move(queued), in_flight, mpi);
        for (size_t i = 0; i < in_flight.size();) {
          if (poll(in_flight[i])) {
            in_flight.erase(in_flight.begin() + static_cast<std::ptrdiff_t>(i));
            progressed = true;
          } else {
            ++i;
          }
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

  // Starts `queued` once every operation queued before it has started (the worker and a
  // caller running its own may hold neighbouring tickets: MPI needs the same order on every
  // rank); `mpi` holds mpi_mutex_. A blocking operation is done when this returns, a
  // non-blocking one joins `in_flight`.
  void start(Queued queued, std::vector<InFlight>& in_flight, std::unique_lock<std::mutex>& mpi) {
    started_changed_.wait(mpi, [&] { return next_to_start_ == queued.ticket; });
    InFlight entry{std::move(queued.operation), {}, deadline_after(timeout_)};
    struct CountStarted {  // even when it fails: the next ticket may go
      Worker* worker;
      ~CountStarted() {
        ++worker->next_to_start_;
        worker->started_changed_.notify_all();
      }
    } count_started{this};
    {
      std::lock_guard lock(mutex_);
      if (!failure_.empty()) {
        entry.operation.work->mark_done(std::make_exception_ptr(Error(
            detail::concat("ember: ", entry.operation.describe(),
                           " was not started: an earlier collective failed (", failure_, ")"))));
        return;
      }
    }
    try {
      if (entry.operation.blocking) watch(&entry.operation.describe, entry.deadline);
      if (entry.operation.start) entry.operation.start(entry.requests);
      if (entry.operation.blocking) watch(nullptr, {});
    } catch (...) {
      // Unwatched here too: `entry`, which the watchdog would name, is gone after this.
      if (entry.operation.blocking) watch(nullptr, {});
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
    const std::string message = detail::concat("ember: ", entry.operation.describe(), " ", why);
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

  // Says which blocking call is in progress (null: none), for the watchdog.
  void watch(const std::function<std::string()>* describe, Clock::time_point deadline) {
    std::lock_guard lock(watch_mutex_);
    watched_ = describe;
    watched_deadline_ = deadline;
  }

  // A blocking collective cannot be abandoned: when one outlives the timeout, the watchdog says
  // which one and ends the process, and the launcher then ends the job.
  void watchdog() {
    while (!watchdog_stopping_.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::lock_guard watch(watch_mutex_);
      if (watched_ == nullptr || Clock::now() <= watched_deadline_) continue;
      std::fprintf(stderr,
                   "ember: %s did not complete within %g s (EMBER_COLLECTIVE_TIMEOUT): a peer "
                   "rank has exited, hung, or is waiting in a different collective; ending this "
                   "process\n",
                   (*watched_)().c_str(), timeout_);
      std::fflush(stderr);
      std::_Exit(1);
    }
  }

  double timeout_;
  // Held by whichever thread makes MPI calls (the worker, or a caller running its own blocking
  // operation): MPI_THREAD_SERIALIZED allows any thread, one at a time.
  std::mutex mpi_mutex_;
  std::condition_variable started_changed_;  // next_to_start_ moved (with mpi_mutex_)
  uint64_t next_to_start_ = 0;               // guarded by mpi_mutex_
  uint64_t next_ticket_ = 0;                 // guarded by mutex_
  std::mutex watch_mutex_;
  std::atomic<bool> watchdog_stopping_{false};
  // Names the blocking call in progress (its operation outlives the call); null when none.
  const std::function<std::string()>* watched_ = nullptr;
  Clock::time_point watched_deadline_;
  std::mutex mutex_;
  std::condition_variable queue_changed_;
  std::deque<Queued> queue_;
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

bool run_here_if_next(MpiWork* work) {
  return worker().run_here_if_next(work);
}

}  // namespace

WorkPtr submit(MpiOperation operation) {
  return worker().submit(std::move(operation));
}

void run_on_worker(const std::function<void()>& fn) {
  MpiOperation operation;
  operation.describe = [] { return std::string("a communicator operation"); };
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

void set_caller_pause_for_testing(std::chrono::microseconds pause) {
  g_caller_pause.store(pause);
}

std::string first_failure() {
  std::lock_guard lock(g_worker_mutex);
  return g_worker == nullptr ? std::string() : g_worker->failure();
}

}  // namespace ember::dist::mpi
