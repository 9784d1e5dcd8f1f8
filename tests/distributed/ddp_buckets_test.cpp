// How DDP's reducer groups parameters into buckets, when it rebuilds them, and when each bucket
// leaves: at the real 1 MiB / 25 MiB capacities, in the gradients' arrival order, and while
// backward is still producing the rest.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "distributed/ddp.h"
#include "distributed/world.h"
#include "nn/nn.h"
#include "runtime/ops.h"
#include "runtime/random.h"

namespace ember::dist {
namespace {

using Layout = std::vector<std::vector<std::string>>;  // bucket -> its parameters' names

constexpr int64_t kKiB = 1024 / 4;  // f32 elements in 1 KiB
constexpr int64_t kMiB = 1024 * kKiB;

// f32 parameters of the given element counts, registered as p0, p1, ... (no forward: only the
// layout the reducer builds from them is looked at).
class SizedParameters : public nn::Module {
 public:
  explicit SizedParameters(const std::vector<int64_t>& numels) {
    for (size_t i = 0; i < numels.size(); ++i) {
      std::ostringstream name;
      name << "p" << i;
      register_parameter(name.str(), zeros({numels[i]}));
    }
  }
  std::string type_name() const override { return "SizedParameters"; }
};

// The reducer's buckets by parameter name (the reducer's indices follow named_parameters()).
Layout layout_of(DistributedDataParallel& ddp) {
  const auto named = ddp.module().named_parameters();
  Layout layout;
  for (const auto& bucket : ddp.reducer().bucket_parameters()) {
    layout.emplace_back();
    for (size_t index : bucket)
      layout.back().push_back(named[index].first);
  }
  return layout;
}

// Registration order p0..p7; the reducer starts from the reverse, p7 first. The sizes put a
// bucket exactly at each capacity (1 MiB, then 25 MiB: a bucket that reaches it closes), one
// across it (26 MiB: the parameter that crosses stays in the bucket) and one parameter after.
std::shared_ptr<SizedParameters> boundary_model() {
  return nn::make<SizedParameters>(std::vector<int64_t>{
      4 * kKiB,    // p0
      6 * kMiB,    // p1
      20 * kMiB,   // p2
      5 * kMiB,    // p3
      10 * kMiB,   // p4
      10 * kMiB,   // p5
      512 * kKiB,  // p6
      512 * kKiB,  // p7
  });
}

TEST(DdpBuckets, DefaultCapsAreOneMebibyteFirstThenTwentyFiveInReverseOrder) {
  auto group = world();
  auto ddp = nn::make<DistributedDataParallel>(boundary_model(), group);
  const Layout want = {
      {"p7", "p6"},        // 1 MiB exactly: the first bucket is full
      {"p5", "p4", "p3"},  // 25 MiB exactly
      {"p2", "p1"},        // 20 MiB, then 26 MiB: p1 crosses the cap and stays
      {"p0"},
  };
  EXPECT_EQ(layout_of(*ddp), want);
}

TEST(DdpBuckets, CustomCapsApplyToTheFirstBucketAndToTheRest) {
  auto group = world();
  DdpOptions options;
  options.first_bucket_cap_mb = 0.25;
  options.bucket_cap_mb = 12;
  auto ddp = nn::make<DistributedDataParallel>(boundary_model(), group, options);
  const Layout want = {
      {"p7"},              // 512 KiB: past 0.25 MiB at once
      {"p6", "p5", "p4"},  // 10.5 MiB, then 20.5 MiB crosses 12
      {"p3", "p2"},        // 5, then 25 MiB
      {"p1", "p0"},        // 6 MiB + 4 KiB: the last bucket need not be full
  };
  EXPECT_EQ(layout_of(*ddp), want);
}
}  // namespace
}  // namespace ember::dist
