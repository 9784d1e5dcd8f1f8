#include "distributed/call_with_deadline.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
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
  std::atomic<bool> may_return{false};
  std::atomic<int> released{-1};
  const auto start = std::chrono::steady_clock::now();
  EXPECT_ERROR_WITH(call_with_deadline<int>(
                        [&] {
                          while (!may_return.load())
                            std::this_thread::sleep_for(1ms);
                          return 7;
                        },
                        0.05, [&](int late) { released.store(late); },
                        "NCCL communicator of group 'world' on rank 3"),
                    "NCCL communicator of group 'world' on rank 3 did not complete within 0.05 s",
                    "EMBER_COLLECTIVE_TIMEOUT");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // the caller did not wait for it

  // The call returns after the caller gave up: its result goes to too_late, not nowhere.
  may_return.store(true);
  for (int i = 0; i < 5000 && released.load() < 0; ++i)
    std::this_thread::sleep_for(1ms);
  EXPECT_EQ(released.load(), 7);
}

}  // namespace
}  // namespace ember::dist
