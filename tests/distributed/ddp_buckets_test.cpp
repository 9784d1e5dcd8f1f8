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

// p0 f32, p1 f64, p2 f32, all small enough to share the first bucket.
class MixedDtypes : public nn::Module {
 public:
  MixedDtypes() {
    register_parameter("p0", zeros({4}));
    register_parameter("p1", zeros({4}, DType::f64));
    register_parameter("p2", zeros({4}));
  }
  std::string type_name() const override { return "MixedDtypes"; }
};

// A bucket is one flat buffer of one dtype: a change of dtype closes it, or the f64 gradient would
// travel (and be averaged) in the f32 bucket's precision.
TEST(DdpBuckets, ADtypeChangeStartsANewBucket) {
  auto group = world();
  auto ddp = nn::make<DistributedDataParallel>(nn::make<MixedDtypes>(), group);
  const Layout want = {{"p2"}, {"p1"}, {"p0"}};
  EXPECT_EQ(layout_of(*ddp), want);
}

// Layers registered as c, a, b but applied a -> b -> c: backward produces c's gradients first,
// then b's, then a's, which is not the reverse of registration (b, a, c).
class RegisteredOutOfOrder : public nn::Module {
 public:
  explicit RegisteredOutOfOrder(int64_t hidden = 16) {
    c = register_module("c", nn::make<nn::Linear>(12, 3));
    a = register_module("a", nn::make<nn::Linear>(8, hidden));
    b = register_module("b", nn::make<nn::Linear>(hidden, 12));
  }
  Tensor forward(const Tensor& x) override { return (*c)(tanh((*b)(tanh((*a)(x))))); }
  std::string type_name() const override { return "RegisteredOutOfOrder"; }
  std::shared_ptr<nn::Linear> c, a, b;
};

// The layout the reducer's rules give for parameters taken in `order`: a bucket closes once it
// holds `first_bucket_bytes` (the first) or `bucket_bytes` (the others), the parameter that
// crosses the capacity included. All f32 on the CPU here, so no dtype or device splits.
Layout reference_layout(const NamedTensors& named, const std::vector<size_t>& order,
                        int64_t first_bucket_bytes, int64_t bucket_bytes) {
  Layout layout;
  int64_t bytes = 0;
  for (size_t index : order) {
    const int64_t capacity = layout.size() == 1 ? first_bucket_bytes : bucket_bytes;
    if (layout.empty() || bytes >= capacity) {
      layout.emplace_back();
      bytes = 0;
    }
    layout.back().push_back(named[index].first);
    bytes += static_cast<int64_t>(named[index].second.nbytes());
  }
  return layout;
}

DdpOptions small_buckets() {
  DdpOptions options;
  options.bucket_cap_mb = 200.0 / (1024 * 1024);
  options.first_bucket_cap_mb = 100.0 / (1024 * 1024);
  return options;
}

// Records, for each gradient as it arrives, which parameter it belongs to and how many buckets
// the reducer had launched in this pass just before it. The hooks are registered before DDP's,
// so each runs before the reducer has seen that gradient.
struct ArrivalLog {
  const Reducer* reducer = nullptr;
  std::vector<size_t> order;
  std::vector<int> launched_before;
  void clear() {
    order.clear();
    launched_before.clear();
  }
};

std::shared_ptr<ArrivalLog> log_arrivals(nn::Module& model) {
  auto log = std::make_shared<ArrivalLog>();
  const auto parameters = model.parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    parameters[i].register_post_accumulate_grad_hook([log, i](const Tensor&) {
      int launched = 0;
      // Before the first gradient the timeline still holds the previous pass (the reducer starts
      // a pass when it sees that gradient): nothing of this pass can have launched yet.
      if (!log->order.empty()) {
        for (const ReducerEvent& event : log->reducer->timeline())
          launched += event.kind == ReducerEvent::Kind::bucket_launched;
      }
      log->order.push_back(i);
      log->launched_before.push_back(launched);
    });
  }
  return log;
}

TEST(DdpBuckets, RebuiltBucketsFollowTheGradientsArrivalOrder) {
  auto group = world();
  auto model = nn::make<RegisteredOutOfOrder>();
  auto log = log_arrivals(*model);
  const DdpOptions options = small_buckets();
  auto ddp = nn::make<DistributedDataParallel>(model, group, options);
  log->reducer = &ddp->reducer();
  const auto named = model->named_parameters();
  const auto first_bytes = static_cast<int64_t>(options.first_bucket_cap_mb * 1024 * 1024);
  const auto bytes = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);

  std::vector<size_t> reverse_registration;
  for (size_t i = named.size(); i-- > 0;)
    reverse_registration.push_back(i);
  EXPECT_EQ(layout_of(*ddp), reference_layout(named, reverse_registration, first_bytes, bytes))
      << "before the first pass: reverse registration order";

  Generator generator(5);
  Tensor x = randn({4, 8}, {}, &generator);
  Tensor y = randn({4, 3}, {}, &generator);
  mse_loss((*ddp)(x), y).backward();
  ASSERT_EQ(log->order.size(), named.size());
  ASSERT_NE(log->order, reverse_registration) << "the model must make arrival differ";
  ASSERT_TRUE(ddp->reducer().rebuilt());
  // Every rank arrives in the same order here, so rank 0's order (the one broadcast) is ours.
  EXPECT_EQ(layout_of(*ddp), reference_layout(named, log->order, first_bytes, bytes));

  // And the next pass arrives in bucket order: each bucket fills in turn.
  log->clear();
  model->zero_grad();
  mse_loss((*ddp)(x), y).backward();
  std::vector<size_t> bucket_order;
  for (const auto& bucket : ddp->reducer().bucket_parameters())
    bucket_order.insert(bucket_order.end(), bucket.begin(), bucket.end());
  EXPECT_EQ(log->order, bucket_order);
}

// Two layers applied to the same input and summed, `a` first or `b` first: which gradient backward
// produces first follows the order of the forward, so it can differ from rank to rank.
class EitherOrder : public nn::Module {
 public:
  EitherOrder() {
    a = register_module("a", nn::make<nn::Linear>(8, 3));
    b = register_module("b", nn::make<nn::Linear>(8, 3));
  }
  Tensor forward(const Tensor& x) override {
    if (a_first) {
      Tensor from_a = (*a)(x);
      return from_a + (*b)(x);
    }
    Tensor from_b = (*b)(x);
    return from_b + (*a)(x);
  }
  std::string type_name() const override { return "EitherOrder"; }
  bool a_first = true;
  std::shared_ptr<nn::Linear> a, b;
};

// The rebuilt buckets follow rank 0's arrival order on every rank, also where a rank's own
// gradients arrived in another order: buckets that differ across ranks would pair up collectives
// of different parameters (or sizes).
TEST(DdpBuckets, RebuiltBucketsFollowRankZerosArrivalOrderOnEveryRank) {
  auto group = world();
  if (group->size() < 2) GTEST_SKIP() << "needs 2 ranks (run under mpirun -np 2)";
  auto model = nn::make<EitherOrder>();
  model->a_first = group->rank() % 2 == 0;
  auto log = log_arrivals(*model);
  const DdpOptions options = small_buckets();
  auto ddp = nn::make<DistributedDataParallel>(model, group, options);
  log->reducer = &ddp->reducer();
  Generator generator(9);
  Tensor x = randn({4, 8}, {}, &generator);
  Tensor y = randn({4, 3}, {}, &generator);
  mse_loss((*ddp)(x), y).backward();
  ASSERT_TRUE(ddp->reducer().rebuilt());

  // (world size, parameters): every rank's arrival order.
  const auto named = model->named_parameters();
  const auto count = static_cast<int64_t>(named.size());
  ASSERT_EQ(static_cast<int64_t>(log->order.size()), count);
  std::vector<int64_t> order(log->order.begin(), log->order.end());
  Tensor mine = from_vector(order, {count}, DType::i64);
  Tensor everyone = zeros({group->size(), count}, DType::i64);
  group->allgather(everyone, mine)->wait();
  const std::vector<int64_t> rank_one = to_vector<int64_t>(everyone.select(0, 1));
  const std::vector<int64_t> rank_zero = to_vector<int64_t>(everyone.select(0, 0));
  ASSERT_NE(rank_zero, rank_one) << "the model must make the ranks' arrival orders differ";

  std::vector<size_t> rank_zero_order(rank_zero.begin(), rank_zero.end());
  const auto first_bytes = static_cast<int64_t>(options.first_bucket_cap_mb * 1024 * 1024);
  const auto bytes = static_cast<int64_t>(options.bucket_cap_mb * 1024 * 1024);
  EXPECT_EQ(layout_of(*ddp), reference_layout(named, rank_zero_order, first_bytes, bytes))
      << "rank " << group->rank();
}

// How many buckets, from the first, hold only parameters among `arrived`: those that the
// reducer can have launched (in order) once these gradients are in.
int launchable_prefix(const std::vector<std::vector<size_t>>& buckets,
                      const std::vector<size_t>& arrived) {
  int prefix = 0;
  for (const auto& bucket : buckets) {
    for (size_t index : bucket) {
      if (std::find(arrived.begin(), arrived.end(), index) == arrived.end()) return prefix;
    }
    ++prefix;
  }
  return prefix;
}

// Each bucket leaves as soon as it and the buckets before it are full, while backward is still
// producing the earlier layers' gradients: when the last gradient arrives (the first layer's),
// every bucket that does not wait for it has already been launched. A reducer that launched
// everything at the end of backward, or in the last gradient's hook, fails here.
TEST(DdpBuckets, BucketsLaunchBeforeTheLastGradientArrives) {
  auto group = world();
  auto model = nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Linear>(8, 64), nn::make<nn::Tanh>(), nn::make<nn::Linear>(64, 12),
      nn::make<nn::Tanh>(), nn::make<nn::Linear>(12, 3)});
  auto log = log_arrivals(*model);
  auto ddp = nn::make<DistributedDataParallel>(model, group, small_buckets());
  log->reducer = &ddp->reducer();
  const size_t parameter_count = model->parameters().size();
  for (int step = 0; step < 2; ++step) {  // the second pass uses the rebuilt buckets
    const auto buckets = ddp->reducer().bucket_parameters();  // this pass's (a rebuild follows)
    ASSERT_GE(buckets.size(), 4u);
    log->clear();
    Generator generator(20 + step);
    Tensor x = randn({4, 8}, {}, &generator);
    Tensor y = randn({4, 3}, {}, &generator);
    mse_loss((*ddp)(x), y).backward();
    ASSERT_EQ(log->order.size(), parameter_count);
    std::vector<size_t> arrived;
    for (size_t k = 0; k < log->order.size(); ++k) {
      EXPECT_EQ(log->launched_before[k], launchable_prefix(buckets, arrived))
          << "step " << step << ": buckets launched before gradient " << k << " (parameter "
          << log->order[k] << ") arrived";
      arrived.push_back(log->order[k]);
    }
    // The last gradient to arrive is the first layer's (parameter 0 or 1): only the buckets from
    // the first one holding a first-layer parameter on may still wait.
    const size_t last = log->order.back();
    EXPECT_LE(last, 1u) << "step " << step;
    size_t first_layer_bucket = buckets.size();
    for (size_t b = 0; b < buckets.size() && first_layer_bucket == buckets.size(); ++b) {
      for (size_t index : buckets[b]) {
        if (index <= 1) first_layer_bucket = b;
      }
    }
    EXPECT_GE(log->launched_before.back(), static_cast<int>(first_layer_bucket))
        << "step " << step << ": buckets without a first-layer parameter must have left";
    EXPECT_GE(log->launched_before.back(), static_cast<int>(buckets.size()) - 2) << "step " << step;
    model->zero_grad();
  }
}

}  // namespace
}  // namespace ember::dist
