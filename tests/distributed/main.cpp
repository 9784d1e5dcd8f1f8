// The distributed suite's main: MPI is initialised before the tests and finalised after them.
// Run alone it is a world of one; under `mpirun -np N` every test runs on every rank, and only
// rank 0 prints the usual report (the other ranks print their failures, prefixed by their rank).
#include <gtest/gtest.h>

#include <cstdio>

#include "distributed/world.h"

namespace {

// Prints only failures, prefixed with the rank, for ranks other than 0.
class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (!result.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: failure\n%s\n", rank_,
                 result.file_name() ? result.file_name() : "?", result.line_number(),
                 result.message());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  auto world = ember::dist::init();
  if (world->rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(world->rank()));
  }
  const int result = RUN_ALL_TESTS();
  world.reset();
  ember::dist::finalize();
  return result;
}
