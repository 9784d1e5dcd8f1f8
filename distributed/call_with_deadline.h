// call_with_deadline: a blocking call that cannot be interrupted, bounded by a timeout.
//
//   ncclComm_t comm = call_with_deadline<ncclComm_t>(
//       [&] { return init_communicator(); },           // may block forever on a dead peer
//       collective_timeout_seconds(),
//       [](ncclComm_t late) { ncclCommAbort(late); },  // if it returns after we gave up
//       "NCCL communicator of group 'world' on rank 3");
//
// Some library calls block until every peer has joined and offer no timeout of their own (NCCL's
// blocking ncclCommInitRank waits for all ranks to connect). The call runs on a thread of its own
// while the caller waits at most `seconds`. On time, its result (or its exception) comes back as
// if it had been called directly. Past the deadline the caller gets an error that names the call
// and the timeout, and the thread is left behind: when the call returns after all, `too_late`
// releases its result; if it never returns, the process ends with the thread still blocked, which
// is what a user who reads the error does anyway.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "runtime/error.h"

namespace ember::dist {

// The moment `seconds` from now. Saturates instead of overflowing the clock: a timeout of 1e10 s
// or `inf` (EMBER_COLLECTIVE_TIMEOUT accepts both) means "about never", not "already past".
inline std::chrono::steady_clock::time_point deadline_after(double seconds) {
  constexpr double kLongest = 1e9;  // about 32 years; far inside steady_clock's range
  return std::chrono::steady_clock::now() +
         std::chrono::duration_cast<std::chrono::steady_clock::duration>(
             std::chrono::duration<double>(std::min(seconds, kLongest)));
}

template <class Result>
Result call_with_deadline(std::function<Result()> call, double seconds,
                          std::function<void(Result)> too_late, const std::string& what) {
  // Shared by the caller and the thread: whichever finishes last frees it.
  struct State {
    std::mutex mutex;
    std::condition_variable finished;
    std::optional<Result> result;
    std::exception_ptr error;
    bool done = false;
    bool abandoned = false;  // the caller gave up: a late result goes to too_late
  };
  auto state = std::make_shared<State>();
  std::thread([state, call = std::move(call), too_late = std::move(too_late)] {
    std::optional<Result> result;
    std::exception_ptr error;
    try {
      result.emplace(call());
    } catch (...) {
      error = std::current_exception();
    }
    std::unique_lock lock(state->mutex);
    if (state->abandoned) {
      lock.unlock();
      if (result) too_late(std::move(*result));
      return;
    }
    state->result = std::move(result);
    state->error = error;
    state->done = true;
    state->finished.notify_one();
  }).detach();

  std::unique_lock lock(state->mutex);
  const auto deadline = deadline_after(seconds);
  if (!state->finished.wait_until(lock, deadline, [&] { return state->done; })) {
    state->abandoned = true;
    EMBER_FAIL("ember: ", what, " did not complete within ", seconds,
               " s (EMBER_COLLECTIVE_TIMEOUT): a peer rank has exited, hung, or has not reached "
               "the same point");
  }
  if (state->error) std::rethrow_exception(state->error);
  return std::move(*state->result);
}

}  // namespace ember::dist
