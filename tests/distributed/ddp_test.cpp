// DistributedDataParallel against one process training on the whole batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <sstream>

#include "distributed/ddp.h"
#include "distributed/world.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/expect_error.h"

namespace ember::dist {
namespace {

constexpr int64_t kRowsPerRank = 4;

std::shared_ptr<nn::Sequential> make_mlp(int64_t hidden = 16) {
  return nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Linear>(8, hidden), nn::make<nn::Tanh>(), nn::make<nn::Linear>(hidden, 12),
      nn::make<nn::Tanh>(), nn::make<nn::Linear>(12, 3)});
}

// The whole batch (every rank's rows) for step `step`, the same on every rank.
std::pair<Tensor, Tensor> global_batch(int world_size, int step) {
  Generator generator(1000 + step);
  Tensor x = randn({kRowsPerRank * world_size, 8}, {}, &generator);
  Tensor y = randn({kRowsPerRank * world_size, 3}, {}, &generator);
  return {x, y};
}

Tensor rows_of_rank(const Tensor& t, int rank) {
  return t.narrow(0, rank * kRowsPerRank, kRowsPerRank);
}

bool same(const Tensor& a, const Tensor& b) {
  return allclose(a, b, 0.0, 0.0);
}

void expect_close(const Tensor& a, const Tensor& b, double tolerance, const std::string& what) {
  const double difference = max(abs(a - b)).item<double>();
  EXPECT_LE(difference, tolerance) << what;
}

// Tiny buckets: the three Linear layers' parameters spread over several buckets.
DdpOptions small_buckets() {
  DdpOptions options;
  options.bucket_cap_mb = 200.0 / (1024 * 1024);
  options.first_bucket_cap_mb = 100.0 / (1024 * 1024);
  return options;
}

TEST(Ddp, StepsMatchOneProcessTrainingOnTheConcatenatedBatch) {
  auto group = world();
  manual_seed(7 + group->rank());  // different initial weights: DDP must broadcast rank 0's
  auto model = make_mlp();
  auto ddp = nn::make<DistributedDataParallel>(model, group, small_buckets());
  // The reference starts from the broadcast weights and sees the whole batch.
  auto reference = make_mlp();
  reference->load_state_dict(model->state_dict());

  optim::SGD optimizer(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 4; ++step) {
    auto [x, y] = global_batch(group->size(), step);
    optimizer.zero_grad();
    mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank())).backward();
    optimizer.step();
    reference_optimizer.zero_grad();
    mse_loss((*reference)(x), y).backward();
    reference_optimizer.step();
  }
  const auto mine = model->named_parameters();
  const auto theirs = reference->named_parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    expect_close(mine[i].second, theirs[i].second, 2e-6, mine[i].first);
  }
  EXPECT_TRUE(ddp->reducer().rebuilt());
  EXPECT_EQ(ddp->reducer().iterations(), 4);
}

TEST(Ddp, BucketsLaunchInOrderBeforeBackwardEnds) {
  auto group = world();
  auto model = make_mlp(64);
  auto ddp = nn::make<DistributedDataParallel>(model, group, small_buckets());
  for (int step = 0; step < 2; ++step) {  // the second pass uses the rebuilt buckets
    auto [x, y] = global_batch(group->size(), step);
    mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank())).backward();
    const auto& timeline = ddp->reducer().timeline();
    const size_t buckets = ddp->reducer().bucket_parameters().size();
    ASSERT_GE(buckets, 3u);
    std::vector<int> launched;
    size_t backward_end = timeline.size();
    for (size_t k = 0; k < timeline.size(); ++k) {
      if (timeline[k].kind == ReducerEvent::Kind::bucket_launched) {
        launched.push_back(timeline[k].bucket);
      }
      if (timeline[k].kind == ReducerEvent::Kind::backward_finished) backward_end = k;
    }
    ASSERT_EQ(launched.size(), buckets);
    for (size_t k = 0; k < launched.size(); ++k)
      EXPECT_EQ(launched[k], static_cast<int>(k));
    // Every bucket is launched by the time backward's final callback runs (that they leave
    // while backward still runs: DdpBuckets.BucketsLaunchBeforeTheLastGradientArrives).
    ASSERT_LT(backward_end, timeline.size());
    EXPECT_EQ(timeline[0].kind, ReducerEvent::Kind::bucket_launched);
    int launched_before_end = 0;
    for (size_t k = 0; k < backward_end; ++k) {
      launched_before_end += timeline[k].kind == ReducerEvent::Kind::bucket_launched;
    }
    EXPECT_EQ(launched_before_end, static_cast<int>(buckets)) << "step " << step;
    model->zero_grad();
  }
}

TEST(Ddp, RebuiltBucketsAreTheSameOnEveryRank) {
  auto group = world();
  auto model = make_mlp();
  auto ddp = nn::make<DistributedDataParallel>(model, group, small_buckets());
  auto [x, y] = global_batch(group->size(), 0);
  mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank())).backward();
  ASSERT_TRUE(ddp->reducer().rebuilt());
  std::vector<int64_t> layout;
  for (const auto& bucket : ddp->reducer().bucket_parameters()) {
    for (size_t index : bucket)
      layout.push_back(static_cast<int64_t>(index));
    layout.push_back(-1);
  }
  Tensor mine = from_vector(layout, {static_cast<int64_t>(layout.size())}, DType::i64);
  Tensor everyone = zeros({group->size(), mine.numel()}, DType::i64);
  group->allgather(everyone, mine)->wait();
  for (int r = 0; r < group->size(); ++r) {
    EXPECT_TRUE(same(everyone.select(0, r), mine)) << "rank " << r << "'s buckets differ";
  }
}

// Linear -> BatchNorm1d -> Linear: running_mean, running_var and num_batches_tracked are
// buffers, which training forwards update from each rank's own rows.
std::shared_ptr<nn::Sequential> make_batch_norm_mlp() {
  return nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Linear>(8, 16), nn::make<nn::BatchNorm1d>(16), nn::make<nn::Tanh>(),
      nn::make<nn::Linear>(16, 3)});
}

// Rank `rank`'s own buffer values (positive, integral: valid as variances and as counts).
void fill_buffers_for_rank(nn::Module& model, int rank) {
  for (Tensor& buffer : model.buffers())
    buffer.fill_(Scalar(3 + 2 * rank));
}

void expect_same_buffers(const nn::Module& model, const nn::Module& reference,
                         const std::string& when) {
  const auto mine = model.named_buffers();
  const auto theirs = reference.named_buffers();
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i)
    EXPECT_TRUE(same(mine[i].second, theirs[i].second)) << mine[i].first << " " << when;
}

TEST(Ddp, BuffersAreRankZerosAfterConstructionAndAtEachTrainingForward) {
  auto group = world();
  auto model = make_batch_norm_mlp();
  ASSERT_EQ(model->buffers().size(), 3u);
  fill_buffers_for_rank(*model, group->rank());
  auto ddp = nn::make<DistributedDataParallel>(model, group);
  // Rank 0's model as every rank knows it: the broadcast parameters, rank 0's buffers.
  auto rank_zeros = std::dynamic_pointer_cast<nn::Sequential>(model->clone());
  fill_buffers_for_rank(*rank_zeros, 0);
  expect_same_buffers(*model, *rank_zeros, "after construction");

  // The buffers drift apart (as they would without the broadcast); the next training forward
  // starts from rank 0's again, then updates them from this rank's rows only.
  for (int step = 0; step < 2; ++step) {
    fill_buffers_for_rank(*model, group->rank());
    fill_buffers_for_rank(*rank_zeros, 0);
    auto [x, y] = global_batch(group->size(), step);
    const Tensor rows = rows_of_rank(x, group->rank());
    mse_loss((*ddp)(rows), rows_of_rank(y, group->rank())).backward();
    (*rank_zeros)(rows);
    std::ostringstream when;
    when << "after training forward " << step;
    expect_same_buffers(*model, *rank_zeros, when.str());
    model->zero_grad();
  }
}

// A group that counts the broadcasts it passes on to `inner`.
class CountingBroadcasts final : public ProcessGroup {
 public:
  explicit CountingBroadcasts(ProcessGroupPtr inner)
      : ProcessGroup(inner->rank(), inner->size(), inner->name()), inner_(std::move(inner)) {}
  const char* backend() const override { return inner_->backend(); }
  WorkPtr allreduce(const Tensor& t, ReduceOp op) override { return inner_->allreduce(t, op); }
  WorkPtr broadcast(const Tensor& t, int root) override {
    ++broadcasts;
    most_in_flight = std::max(most_in_flight, ++in_flight);
    return std::make_shared<Counted>(inner_->broadcast(t, root), in_flight);
  }
  WorkPtr allgather(const Tensor& out, const Tensor& in) override {
    return inner_->allgather(out, in);
  }
  WorkPtr reduce_scatter(const Tensor& out, const Tensor& in, ReduceOp op) override {
    return inner_->reduce_scatter(out, in, op);
  }
  WorkPtr barrier() override { return inner_->barrier(); }
  WorkPtr send(const Tensor& t, int to, int tag) override { return inner_->send(t, to, tag); }
  WorkPtr recv(const Tensor& t, int from, int tag) override { return inner_->recv(t, from, tag); }
  std::shared_ptr<ProcessGroup> split(int color, int key) override {
    return inner_->split(color, key);
  }
  int broadcasts = 0;
  int in_flight = 0;  // launched, not yet waited on
  int most_in_flight = 0;

 private:
  // The inner work; its first wait takes it out of the count.
  class Counted final : public Work {
   public:
    Counted(WorkPtr inner, int& in_flight) : inner_(std::move(inner)), in_flight_(in_flight) {}
    void wait() override {
      inner_->wait();
      if (!waited_) --in_flight_;
      waited_ = true;
    }
    bool is_completed() override { return inner_->is_completed(); }

   private:
    WorkPtr inner_;
    int& in_flight_;
    bool waited_ = false;
  };
  ProcessGroupPtr inner_;
};

// Every tensor ends with rank 0's values in its own shape and layout: several dtypes
// interleaved, a scalar, an empty tensor, a transposed (non-contiguous) view written through to
// its base, a tensor alone in its dtype. Tensors of one dtype share a collective up to the
// bucket size.
TEST(BroadcastFromRankZero, EveryTensorGetsRankZerosValuesInOneCollectivePerDtypeAndBucket) {
  auto counting = std::make_shared<CountingBroadcasts>(world());
  const int rank = counting->rank();
  auto values = [](int of_rank, int64_t n, DType dtype) {
    return (arange(0, static_cast<double>(n)) + 100.0 * of_rank).to(dtype);
  };
  auto make = [&](int of_rank) {
    Tensor base = values(of_rank, 12, DType::f32).reshape({3, 4});
    return std::vector<Tensor>{
        values(of_rank, 5, DType::f32),
        values(of_rank, 1, DType::i64).reshape({}),  // num_batches_tracked
        values(of_rank, 7, DType::f32).reshape({7, 1}),
        values(of_rank, 0, DType::f32),  // empty
        base.transpose(0, 1),            // a view, not contiguous
        values(of_rank, 3, DType::i64),
        values(of_rank, 4, DType::f64),  // alone in its dtype
        values(of_rank, 1, DType::f32).reshape({}),
    };
  };
  const std::vector<Tensor> mine = make(rank), rank_zeros = make(0);
  const Tensor transposed_base = mine[4].transpose(0, 1);  // the view's base, (3, 4)
  broadcast_from_rank_zero(mine, *counting);
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(mine[i].sizes(), rank_zeros[i].sizes()) << "tensor " << i;
    EXPECT_EQ(mine[i].dtype(), rank_zeros[i].dtype()) << "tensor " << i;
    EXPECT_TRUE(same(mine[i], rank_zeros[i])) << "tensor " << i << " on rank " << rank;
  }
  EXPECT_TRUE(same(transposed_base, rank_zeros[4].transpose(0, 1)));
  EXPECT_FALSE(mine[4].is_contiguous());
  // f32, i64 and f64: three collectives, whatever the number of tensors (none in a world of one).
  EXPECT_EQ(counting->broadcasts, counting->size() > 1 ? 3 : 0);

  // Buckets of 40 bytes: the f32 tensors (20, 28, 0, 48 and 4 bytes, in order) take four (20 |
  // 28 + 0 | 48 | 4), the i64 ones (8 + 24) one, the f64 one one.
  const std::vector<Tensor> again = make(rank);
  counting->broadcasts = 0;
  broadcast_from_rank_zero(again, *counting, 40);
  for (size_t i = 0; i < again.size(); ++i)
    EXPECT_TRUE(same(again[i], rank_zeros[i])) << "tensor " << i << ", 40-byte buckets";
  EXPECT_EQ(counting->broadcasts, counting->size() > 1 ? 6 : 0);
  // Each flat copy is a bucket's worth of memory: no more than two are alive at once.
  EXPECT_EQ(counting->most_in_flight, counting->size() > 1 ? 2 : 0);
  EXPECT_EQ(counting->in_flight, 0);
  EXPECT_ERROR_WITH(broadcast_from_rank_zero(again, *counting, 0),
                    "bucket_bytes must be positive, got 0");
}

// PyTorch's require_forward_param_sync: the first forward after a training step (grad on,
// outside no_sync) starts from rank 0's buffers even in eval mode, so every rank validates with
// the same statistics; a forward under no_grad leaves the next one unsynchronised.
TEST(Ddp, TheFirstEvalForwardAfterTrainingTakesRankZerosBuffersAndTheNextDoesNot) {
  auto group = world();
  auto model = make_batch_norm_mlp();
  auto ddp = nn::make<DistributedDataParallel>(model, group);
  auto rank_zeros = std::dynamic_pointer_cast<nn::Sequential>(model->clone());
  auto [x, y] = global_batch(group->size(), 0);
  const Tensor rows = rows_of_rank(x, group->rank());
  mse_loss((*ddp)(rows), rows_of_rank(y, group->rank())).backward();

  // The statistics drift apart by rank (as this rank's rows would make them); eval mode does
  // not update them, so after the forward they are what it started from.
  fill_buffers_for_rank(*model, group->rank());
  fill_buffers_for_rank(*rank_zeros, 0);
  ddp->eval();
  NoGradGuard no_grad;
  (*ddp)(rows);
  expect_same_buffers(*model, *rank_zeros, "after the first eval forward");

  fill_buffers_for_rank(*model, group->rank());
  auto own = std::dynamic_pointer_cast<nn::Sequential>(model->clone());
  (*ddp)(rows);
  expect_same_buffers(*model, *own, "after a second eval forward under no_grad");
}

TEST(Ddp, NoSyncAccumulatesLocallyThenAveragesTheSum) {
  auto group = world();
  auto model = make_mlp();
  auto ddp = nn::make<DistributedDataParallel>(model, group, small_buckets());
  auto reference = make_mlp();
  reference->load_state_dict(model->state_dict());
  for (int micro = 0; micro < 3; ++micro) {
    // Not a structured binding: the lambda below uses x and y (clang before 16 cannot capture one).
    const auto batch = global_batch(group->size(), micro);
    const Tensor& x = batch.first;
    const Tensor& y = batch.second;
    auto local = [&] {
      return mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank()));
    };
    if (micro < 2) {
      auto guard = ddp->no_sync();
      local().backward();
    } else {
      local().backward();
    }
    mse_loss((*reference)(x), y).backward();
  }
  const auto mine = model->named_parameters();
  const auto theirs = reference->named_parameters();
  for (size_t i = 0; i < mine.size(); ++i) {
    expect_close(mine[i].second.grad(), theirs[i].second.grad(), 1e-6, mine[i].first);
  }
}

// gradient_as_bucket_view changes where the gradients live, not what they hold: the same steps
// as the copying reducer, bit for bit, through both ways of zeroing (a fresh gradient that the
// hook copies into the bucket; a zeroed view that autograd accumulates into) and no_sync.
TEST(Ddp, GradientAsBucketViewTrainsAsTheCopyingReducerDoes) {
  auto group = world();
  auto copying = make_mlp();
  auto viewing = make_mlp();
  viewing->load_state_dict(copying->state_dict());
  DdpOptions view_options = small_buckets();
  view_options.gradient_as_bucket_view = true;
  auto ddp_copying = nn::make<DistributedDataParallel>(copying, group, small_buckets());
  auto ddp_viewing = nn::make<DistributedDataParallel>(viewing, group, view_options);
  optim::SGD copying_optimizer(copying->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD viewing_optimizer(viewing->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int step = 0; step < 5; ++step) {
    const bool set_to_none = step % 2 == 0;
    copying_optimizer.zero_grad(set_to_none);
    viewing_optimizer.zero_grad(set_to_none);
    for (auto* ddp : {ddp_copying.get(), ddp_viewing.get()}) {
      auto pass = [&](int micro) {
        auto [x, y] = global_batch(group->size(), 10 * step + micro);
        mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank())).backward();
      };
      if (step == 3) {  // gradient accumulation: one local pass, then the synced one
        auto guard = ddp->no_sync();
        pass(1);
      }
      pass(0);
    }
    const auto copied = copying->named_parameters();
    const auto viewed = viewing->named_parameters();
    for (size_t i = 0; i < copied.size(); ++i) {
      const Tensor grad = viewed[i].second.grad();
      EXPECT_TRUE(grad.is_view()) << viewed[i].first << " at step " << step;
      EXPECT_FALSE(copied[i].second.grad().is_view()) << copied[i].first;
      EXPECT_TRUE(same(grad, copied[i].second.grad())) << viewed[i].first << " at step " << step;
    }
    copying_optimizer.step();
    viewing_optimizer.step();
  }
  const auto copied = copying->named_parameters();
  const auto viewed = viewing->named_parameters();
  for (size_t i = 0; i < copied.size(); ++i)
    EXPECT_TRUE(same(viewed[i].second, copied[i].second)) << viewed[i].first;
}

// Uses `head_b` only when told to: an unused parameter for DDP to find.
class TwoHeads : public nn::Module {
 public:
  TwoHeads() {
    trunk = register_module("trunk", nn::make<nn::Linear>(8, 6));
    head_a = register_module("head_a", nn::make<nn::Linear>(6, 3));
    head_b = register_module("head_b", nn::make<nn::Linear>(6, 3));
  }
  Tensor forward(const Tensor& x) override {
    Tensor h = tanh((*trunk)(x));
    return use_b ? (*head_a)(h) + (*head_b)(h) : (*head_a)(h);
  }
  std::string type_name() const override { return "TwoHeads"; }
  bool use_b = false;
  std::shared_ptr<nn::Linear> trunk, head_a, head_b;
};

TEST(Ddp, UnusedParametersAreAnErrorThatSaysWhatToDo) {
  auto group = world();
  auto model = nn::make<TwoHeads>();
  auto ddp = nn::make<DistributedDataParallel>(model, group);
  auto [x, y] = global_batch(group->size(), 0);
  EXPECT_ERROR_WITH(
      mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank())).backward(),
      "head_b.weight", "find_unused_parameters = true");
}

TEST(Ddp, FindUnusedParametersAveragesWhatSomeRankUsed) {
  auto group = world();
  auto model = nn::make<TwoHeads>();
  DdpOptions options;
  options.find_unused_parameters = true;
  auto ddp = nn::make<DistributedDataParallel>(model, group, options);
  auto reference = nn::make<TwoHeads>();
  reference->load_state_dict(model->state_dict());
  auto [x, y] = global_batch(group->size(), 0);
  // Iteration 1: no rank uses head_b; its gradient stays undefined, as in one process.
  mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank())).backward();
  EXPECT_FALSE(model->head_b->weight.grad().defined());
  EXPECT_TRUE(model->head_a->weight.grad().defined());
  // Iteration 2: only rank 0 uses head_b; every rank gets rank 0's gradient / world size.
  model->zero_grad();
  model->use_b = group->rank() == 0;
  mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank())).backward();
  ASSERT_TRUE(model->head_b->weight.grad().defined());
  reference->use_b = true;
  mse_loss((*reference)(rows_of_rank(x, 0)), rows_of_rank(y, 0)).backward();
  expect_close(model->head_b->weight.grad(),
               reference->head_b->weight.grad() / static_cast<double>(group->size()), 1e-6,
               "head_b.weight");
}

// Gradient accumulation with an unused head: head_b takes part only in the first, no_sync pass
// (on every rank), then in the synced pass on no rank (round 0) or on rank 0 only (round 1). Its
// accumulated gradient must be averaged like the rest, as a use under no_sync counts in PyTorch.
TEST(Ddp, FindUnusedParametersCountsAUseInsideNoSync) {
  auto group = world();
  const int world_size = group->size();
  for (const bool as_view : {false, true}) {
    for (int round = 0; round < 2; ++round) {
      SCOPED_TRACE(std::string(as_view ? "gradient_as_bucket_view, " : "") + "round " +
                   std::to_string(round));
      auto model = nn::make<TwoHeads>();
      DdpOptions options;
      options.find_unused_parameters = true;
      options.gradient_as_bucket_view = as_view;
      auto ddp = nn::make<DistributedDataParallel>(model, group, options);
      auto reference = nn::make<TwoHeads>();
      reference->load_state_dict(model->state_dict());
      // Pass 0 under no_sync, pass 1 synced; `uses_b(pass, rank)`.
      auto uses_b = [&](int pass, int rank) { return pass == 0 || (round == 1 && rank == 0); };
      for (int pass = 0; pass < 2; ++pass) {
        auto [x, y] = global_batch(world_size, pass);
        model->use_b = uses_b(pass, group->rank());
        {
          std::optional<DistributedDataParallel::NoSync> guard;  // ddp->no_sync(), in a branch
          if (pass == 0) guard.emplace(ddp->reducer());
          mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank()))
              .backward();
        }
        // The reference: every rank's loss in one process, summed, then divided by the ranks.
        for (int rank = 0; rank < world_size; ++rank) {
          reference->use_b = uses_b(pass, rank);
          mse_loss((*reference)(rows_of_rank(x, rank)), rows_of_rank(y, rank)).backward();
        }
      }
      const auto mine = model->named_parameters();
      const auto theirs = reference->named_parameters();
      for (size_t i = 0; i < mine.size(); ++i) {
        ASSERT_TRUE(mine[i].second.grad().defined()) << mine[i].first;
        expect_close(mine[i].second.grad(),
                     theirs[i].second.grad() / static_cast<double>(world_size), 1e-6,
                     mine[i].first);
      }
    }
  }
}

// Without gradient_as_bucket_view the gradients DDP hands out are the caller's own tensors: one
// it fills for a parameter this rank did not use must not be the bucket's slot, which the next
// backward overwrites under the caller's feet.
TEST(Ddp, AGradientFilledForAnUnusedParameterIsNotTheBucketsSlot) {
  auto group = world();
  if (group->size() < 2) GTEST_SKIP() << "needs a rank that leaves head_b out (mpirun -np 2)";
  auto model = nn::make<TwoHeads>();
  DdpOptions options;
  options.find_unused_parameters = true;
  auto ddp = nn::make<DistributedDataParallel>(model, group, options);
  auto step = [&](int batch) {
    auto [x, y] = global_batch(group->size(), batch);
    model->use_b = group->rank() == 0;  // the other ranks get head_b's gradient from rank 0
    mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank())).backward();
  };
  step(0);  // the buckets are rebuilt after this first step: new buffers
  model->zero_grad();
  step(1);
  const Tensor held = model->head_b->weight.grad();
  ASSERT_TRUE(held.defined());
  const Tensor values = held.clone();
  model->zero_grad();  // set_to_none: the next backward makes new gradients
  step(2);
  EXPECT_TRUE(same(held, values)) << "the gradient kept from the second step changed";
}

TEST(Ddp, DifferentModelsOnTheRanksAreAClearErrorOnEveryRank) {
  auto group = world();
  if (group->size() < 2) GTEST_SKIP() << "needs 2 ranks (run under mpirun -np 2)";
  auto model = make_mlp(group->rank() == 1 ? 17 : 16);
  EXPECT_ERROR_WITH(nn::make<DistributedDataParallel>(model, group),
                    "the model differs across ranks", "rank 1",
                    "Every rank must build the same model");
}

TEST(Ddp, WrappedStateDictLoadsIntoTheUnwrappedModelAndBack) {
  auto group = world();
  auto model = make_mlp();
  auto ddp = nn::make<DistributedDataParallel>(model, group);
  const auto wrapped = ddp->state_dict();
  ASSERT_FALSE(wrapped.empty());
  EXPECT_EQ(wrapped.front().first.rfind("module.", 0), 0u);
  auto plain = make_mlp();
  plain->load_state_dict(wrapped);
  for (const auto& [name, tensor] : plain->state_dict()) {
    EXPECT_TRUE(same(tensor, model->state_dict()[0].second) || name != "0.weight");
  }
  EXPECT_TRUE(same(plain->named_parameters()[0].second, model->named_parameters()[0].second));
  // And back: the unwrapped model's keys into the wrapper.
  manual_seed(99);
  auto other = make_mlp();
  ddp->load_state_dict(other->state_dict());
  EXPECT_TRUE(same(model->named_parameters()[0].second, other->named_parameters()[0].second));
}

// One backward under DDP with buckets compressed to `wire`, and the same batch whole on one
// model: each parameter's name, its DDP gradient and the exact average.
struct CompressedGradient {
  std::string name;
  Tensor grad, exact;
};
std::vector<CompressedGradient> gradients_compressed_to(DType wire) {
  auto group = world();
  auto model = make_mlp();
  DdpOptions options = small_buckets();
  options.compression = wire;
  auto ddp = nn::make<DistributedDataParallel>(model, group, options);
  auto reference = make_mlp();
  reference->load_state_dict(model->state_dict());
  auto [x, y] = global_batch(group->size(), 0);
  mse_loss((*ddp)(rows_of_rank(x, group->rank())), rows_of_rank(y, group->rank())).backward();
  mse_loss((*reference)(x), y).backward();
  const auto mine = model->named_parameters();
  const auto theirs = reference->named_parameters();
  std::vector<CompressedGradient> gradients;
  for (size_t i = 0; i < mine.size(); ++i)
    gradients.push_back({mine[i].first, mine[i].second.grad(), theirs[i].second.grad()});
  return gradients;
}

TEST(Ddp, Bf16CompressionStaysCloseToTheExactAverage) {
  for (const auto& [name, grad, exact] : gradients_compressed_to(DType::bf16)) {
    const double scale = max(abs(exact)).item<double>();
    expect_close(grad, exact, 2e-2 * scale + 1e-6, name);
  }
}

// The buckets travel as f16: every average is an f16 value (the wire's, widened), some need
// f16's mantissa (more than bf16's 8 bits), and all are within f16's rounding of the exact
// average (about 2^-11 of each contribution, a few roundings deep: 4e-4 of the largest seen).
TEST(Ddp, F16CompressionTravelsAsF16AndStaysCloseToTheExactAverage) {
  bool needs_more_than_bf16 = false;
  for (const auto& [name, grad, exact] : gradients_compressed_to(DType::f16)) {
    const double scale = max(abs(exact)).item<double>();
    expect_close(grad, exact, 2e-3 * scale + 1e-6, name);
    EXPECT_TRUE(same(grad, grad.to(DType::f16).to(grad.dtype())))
        << name << ": not every value is an f16 value";
    needs_more_than_bf16 |= !same(grad, grad.to(DType::bf16).to(grad.dtype()));
  }
  EXPECT_TRUE(needs_more_than_bf16) << "every average fits bf16: was the wire f16?";
}

// A bf16 model's buckets are divided by the world size in bf16: by the integer, so each rank
// sends round(g / n). (1 / 3 as a bf16 number is 0.333984375: every average of three ranks came
// out 0.2% large, and these gradients a bf16 step too far.) Every rank has the same gradient g,
// so the average must be round(round(g / n) * n) for n <= 4, where sums of equal values round
// alike in any order; run under -np 3 by ctest.
TEST(Ddp, SixteenBitBucketsAreDividedByTheWorldSizeWithoutABiasedFactor) {
  auto group = world();
  const int n = group->size();
  if (n > 4) GTEST_SKIP() << "sums of more than four equal values may round by their order";
  auto model = nn::make<nn::Linear>(4, 1, false);
  model->to(DType::bf16);
  auto ddp = nn::make<DistributedDataParallel>(model, group);
  // d sum(x w^T) / dw = x: the gradient is these bf16 values on every rank.
  const Tensor x =
      from_vector(std::vector<float>{1.0390625f, 1.0859375f, 1.1328125f, 1.1796875f}, {1, 4})
          .to(DType::bf16);
  sum((*ddp)(x)).backward();
  Tensor expected = x.reshape({4}) / static_cast<int64_t>(n);  // round(g / n), in bf16
  const Tensor share = expected.clone();
  for (int rank = 1; rank < n; ++rank)
    expected = expected + share;  // bf16 adds, as the reduction's
  EXPECT_TRUE(same(model->weight.grad().reshape({4}), expected))
      << "rank " << group->rank() << " of " << n << ": got " << model->weight.grad()
      << ", expected " << expected;
}

TEST(Ddp, BadOptionsSayWhatWasExpected) {
  auto group = world();
  DdpOptions options;
  options.bucket_cap_mb = 0;
  EXPECT_ERROR_WITH(nn::make<DistributedDataParallel>(make_mlp(), group, options), "bucket_cap_mb",
                    "positive");
  options = {};
  options.compression = DType::i32;
  EXPECT_ERROR_WITH(nn::make<DistributedDataParallel>(make_mlp(), group, options), "compression",
                    "f16 or bf16");
  EXPECT_ERROR_WITH(nn::make<DistributedDataParallel>(make_mlp(), nullptr), "process group");
}

}  // namespace
}  // namespace ember::dist
