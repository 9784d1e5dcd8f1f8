#include "distributed/call_with_deadline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <limits>
#include <memory>
#include <stdexcept>
#include <thread>

#include "../common/expect_error.h"

namespace ember::dist {
namespace {

using namespace std::chrono_literals;

TEST(CallWithDeadline, AResultOnTimeComesBackAsFromADirectCall) {
  std::atomic<int> released{0};
  const int result = call_with_deadline<int>([] { return 42; }, 5.0,
                                             [&](int) { released.fetch_add(1); }, "the answer");
  EXPECT_EQ(result, 42);
  EXPECT_EQ(released.load(), 0);  // nothing to release: the caller has it
}

TEST(CallWithDeadline, AnExceptionOnTimeComesBackAsFromADirectCall) {
  EXPECT_THROW(call_with_deadline<int>([]() -> int { throw std::invalid_argument("bad rank"); },
                                       5.0, [](int) {}, "a failing call"),
               std::invalid_argument);
}

TEST(CallWithDeadline, ACallPastTheDeadlineFailsNamingItAndItsLateResultIsReleased) {
  // Shared with the call's thread, which may outlive this test if the release were late.
  auto may_return = std::make_shared<std::atomic<bool>>(false);
  auto released = std::make_shared<std::atomic<int>>(-1);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_ERROR_WITH(call_with_deadline<int>(
                        [may_return] {
                          while (!may_return->load())
                            std::this_thread::sleep_for(1ms);
                          return 7;
                        },
                        0.05, [released](int late) { released->store(late); },
                        "NCCL communicator of group 'world' on rank 3"),
                    "NCCL communicator of group 'world' on rank 3 did not complete within 0.05 s",
                    "EMBER_COLLECTIVE_TIMEOUT");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // the caller did not wait for it

  // The call returns after the caller gave up: its result goes to too_late, not nowhere.
  may_return->store(true);
  for (int i = 0; i < 5000 && released->load() < 0; ++i)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(released->load(), 7);
}

// EMBER_COLLECTIVE_TIMEOUT=inf (or 1e10) means "about never": the deadline saturates instead of
// overflowing the clock into the past, which failed every call at once.
TEST(CallWithDeadline, AnInfiniteOrHugeTimeoutIsNoDeadline) {
  const auto now = std::chrono::steady_clock::now();
  for (const double seconds : {1e10, 1e300, std::numeric_limits<double>::infinity()}) {
    EXPECT_GT(deadline_after(seconds), now + std::chrono::hours(24 * 365)) << seconds;
    EXPECT_EQ(call_with_deadline<int>(
                  [] {
                    std::this_thread::sleep_for(20ms);
                    return 42;
                  },
                  seconds, [](int) {}, "a patient call"),
              42)
        << seconds;
  }
  const auto in_a_minute = deadline_after(60);
  EXPECT_GT(in_a_minute, now + 59s);
  EXPECT_LT(in_a_minute, now + 61s + (std::chrono::steady_clock::now() - now));
}

}  // namespace
}  // namespace ember::dist
