// DataParallel on repeated CPU devices ({cpu, cpu}, {cpu, cpu, cpu}): outputs and gradients equal
// those of the module on the whole batch, a training step equals the plain one, small batches use
// fewer replicas, buffers come from replica 0, and bad device lists are refused clearly.
#include <gtest/gtest.h>

#include "distributed/data_parallel.h"
#include "nn/nn.h"
#include "optim/sgd.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/expect_error.h"

#if EMBER_WITH_CUDA
#include "runtime/cuda/stream.h"
#endif

namespace ember::dist {
namespace {

std::vector<Device> cpus(size_t n) {
  return std::vector<Device>(n, Device::cpu());
}

// A model with most kinds of layer whose output row depends on its input row only (no batch
// norm in training mode), so that a split batch must give the whole batch's results.
nn::ModulePtr make_mlp(DType dtype) {
  auto model = nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Linear>(6, 10), nn::make<nn::LayerNorm>(Shape{10}), nn::make<nn::Tanh>(),
      nn::make<nn::Sequential>(
          std::initializer_list<nn::ModulePtr>{nn::make<nn::Linear>(10, 7), nn::make<nn::GELU>()}),
      nn::make<nn::Linear>(7, 3)});
  model->to(dtype);
  return model;
}

Tensor random_input(const Shape& shape, DType dtype, uint64_t seed) {
  Generator generator(seed);
  return randn(shape, dtype, &generator);
}

// Same shape and the same values, bit for bit.
bool identical(const Tensor& a, const Tensor& b) {
  return a.sizes() == b.sizes() && allclose(a.to(DType::f64), b.to(DType::f64), 0, 0);
}

// Weights that make every output element's gradient different.
Tensor distinct(const Tensor& like) {
  return arange(1, like.numel() + 1, 1, TensorOptions(like.dtype())).reshape(like.sizes()) /
         static_cast<double>(like.numel());
}

void expect_close(const Tensor& got, const Tensor& expected, double tolerance,
                  const std::string& what) {
  ASSERT_TRUE(got.defined()) << what;
  ASSERT_TRUE(expected.defined()) << what;
  ASSERT_EQ(got.sizes(), expected.sizes()) << what;
  EXPECT_TRUE(allclose(got, expected, tolerance, tolerance))
      << what << ": max difference "
      << max(abs(got.to(DType::f64) - expected.to(DType::f64))).item<double>();
}

// The module and its DataParallel wrapper on `devices` give the same outputs and the same
// parameter and input gradients on a batch of `batch` rows.
void check_matches_module(size_t num_devices, int64_t batch, DType dtype, double tolerance) {
  SCOPED_TRACE("devices " + std::to_string(num_devices) + ", batch " + std::to_string(batch));
  nn::ModulePtr model = make_mlp(dtype);
  nn::ModulePtr reference = model->clone();
  auto parallel = nn::make<DataParallel>(model, cpus(num_devices));

  const Tensor data = random_input({batch, 6}, dtype, 17);
  Tensor x = data.clone().requires_grad_();
  Tensor x_reference = data.clone().requires_grad_();
  const Tensor y = (*parallel)(x);
  const Tensor y_reference = (*reference)(x_reference);
  expect_close(y, y_reference, tolerance, "output");
  EXPECT_EQ(y.device(), Device::cpu());

  sum(y * distinct(y)).backward();
  sum(y_reference * distinct(y_reference)).backward();
  expect_close(x.grad(), x_reference.grad(), tolerance, "input gradient");
  const NamedTensors got = model->named_parameters(), expected = reference->named_parameters();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t k = 0; k < got.size(); ++k)
    expect_close(got[k].second.grad(), expected[k].second.grad(), tolerance, got[k].first);
}

TEST(DataParallel, OutputsAndGradientsEqualTheModulesOnTheWholeBatch) {
  for (size_t devices : {2u, 3u}) {
    for (int64_t batch : {6, 7, 12})
      check_matches_module(devices, batch, DType::f64, 1e-12);
    check_matches_module(devices, 9, DType::f32, 1e-6);
  }
}

TEST(DataParallel, ABatchSmallerThanTheDeviceListUsesFewerReplicas) {
  check_matches_module(3, 5, DType::f64, 1e-12);  // torch.chunk: 2, 2, 1
  check_matches_module(3, 4, DType::f64, 1e-12);  // 2, 2: the third replica idles
  check_matches_module(2, 1, DType::f64, 1e-12);  // one row, one replica
  check_matches_module(3, 2, DType::f64, 1e-12);
}

TEST(DataParallel, ATrainingStepEqualsThePlainOne) {
  nn::ModulePtr model = make_mlp(DType::f64);
  nn::ModulePtr reference = model->clone();
  auto parallel = nn::make<DataParallel>(model, cpus(3));
  optim::SGD optimizer(parallel->parameters(), {.lr = 0.1, .momentum = 0.9});
  optim::SGD reference_optimizer(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  Generator generator(3);
  for (int step = 0; step < 3; ++step) {
    const Tensor x = randn({8, 6}, DType::f64, &generator);
    const Tensor target = randint(0, 3, {8}, DType::i64, &generator);
    optimizer.zero_grad();
    cross_entropy((*parallel)(x), target).backward();
    optimizer.step();
    reference_optimizer.zero_grad();
    cross_entropy((*reference)(x), target).backward();
    reference_optimizer.step();
  }
  const NamedTensors got = model->state_dict(), expected = reference->state_dict();
  for (size_t k = 0; k < got.size(); ++k)
    expect_close(got[k].second, expected[k].second, 1e-12, got[k].first);
}

// Gradients reach the module through the ordinary graph: a post-accumulate hook (DDP's trigger)
// fires once per backward with the complete gradient.
TEST(DataParallel, ParameterHooksSeeTheSummedGradientOnce) {
  nn::ModulePtr model = make_mlp(DType::f64);
  nn::ModulePtr reference = model->clone();
  auto parallel = nn::make<DataParallel>(model, cpus(2));
  const Tensor weight = model->parameters()[0];
  int calls = 0;
  Tensor seen;
  weight.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    ++calls;
    seen = leaf.grad().clone();
  });
  const Tensor x = random_input({5, 6}, DType::f64, 4);
  sum((*parallel)(x)).backward();
  sum((*reference)(x)).backward();
  EXPECT_EQ(calls, 1);
  expect_close(seen, reference->parameters()[0].grad(), 1e-12, "hooked gradient");
}

// A forward made before the parameters changed still back-propagates through the values it saw:
// replicas take fresh copies at each forward instead of writing over the ones a graph saved.
TEST(DataParallel, TwoForwardsBeforeOneBackward) {
  nn::ModulePtr model = make_mlp(DType::f64);
  auto parallel = nn::make<DataParallel>(model, cpus(2));
  nn::ModulePtr before = model->clone();
  const Tensor x1 = random_input({4, 6}, DType::f64, 5), x2 = random_input({3, 6}, DType::f64, 6);
  const Tensor y1 = (*parallel)(x1);
  {
    NoGradGuard no_grad;
    for (Tensor p : model->parameters())
      p.mul_(0.5);
  }
  nn::ModulePtr after = model->clone();
  const Tensor y2 = (*parallel)(x2);
  (sum(y1 * y1) + sum(y2)).backward();
  const Tensor y1_before = (*before)(x1);
  (sum(y1_before * y1_before) + sum((*after)(x2))).backward();
  const NamedTensors got = model->named_parameters();
  const std::vector<Tensor> first = before->parameters(), second = after->parameters();
  for (size_t k = 0; k < got.size(); ++k)
    expect_close(got[k].second.grad(), first[k].grad() + second[k].grad(), 1e-12, got[k].first);
}

TEST(DataParallel, RetainGraphAllowsASecondBackward) {
  nn::ModulePtr model = make_mlp(DType::f64);
  auto parallel = nn::make<DataParallel>(model, cpus(2));
  const Tensor loss = sum((*parallel)(random_input({4, 6}, DType::f64, 8)));
  loss.backward(Tensor(), /*retain_graph=*/true);
  const Tensor once = model->parameters()[0].grad().clone();
  loss.backward();
  expect_close(model->parameters()[0].grad(), once * 2.0, 1e-12, "twice");
  EXPECT_ERROR_WITH(loss.backward(), "a second time", "retain_graph");
}

TEST(DataParallel, FollowsGradModeAndAutocastIntoTheReplicas) {
  nn::ModulePtr model = make_mlp(DType::f32);
  auto parallel = nn::make<DataParallel>(model, cpus(2));
  const Tensor x = random_input({4, 6}, DType::f32, 9);
  {
    NoGradGuard no_grad;
    EXPECT_FALSE((*parallel)(x).requires_grad());
  }
  {
    AutocastGuard autocast(DType::bf16);
    const Tensor y = (*parallel)(x);
    EXPECT_EQ(y.dtype(), DType::bf16);  // the last Linear ran in bf16 in every replica
    const Tensor y_module = (*model)(x);
    expect_close(y.to(DType::f32), y_module.to(DType::f32), 1e-2, "bf16 output");
  }
}

// Each replica normalises its own slice; the module keeps replica 0's running statistics.
TEST(DataParallel, BatchNormBuffersComeFromReplicaZero) {
  auto model = nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Conv2d>(2, 3, 3), nn::make<nn::BatchNorm2d>(3), nn::make<nn::ReLU>()});
  model->to(DType::f64);
  nn::ModulePtr first_slice_model = model->clone();
  nn::ModulePtr second_slice_model = model->clone();
  auto parallel = nn::make<DataParallel>(model, cpus(2));
  const Tensor x = random_input({5, 2, 5, 5}, DType::f64, 10);
  const Tensor y = (*parallel)(x);
  const Tensor y0 = (*first_slice_model)(x.narrow(0, 0, 3));
  const Tensor y1 = (*second_slice_model)(x.narrow(0, 3, 2));
  expect_close(y, cat({y0, y1}, 0), 1e-12, "per-slice batch norm");
  const NamedTensors got = model->named_buffers(), expected = first_slice_model->named_buffers();
  ASSERT_EQ(got.size(), 3u);
  for (size_t k = 0; k < got.size(); ++k)
    expect_close(got[k].second.to(DType::f64), expected[k].second.to(DType::f64), 1e-12,
                 got[k].first);
  // In eval every replica normalises with the (copied) running statistics.
  parallel->eval();
  EXPECT_FALSE(model->is_training());
  expect_close((*parallel)(x), (*model)(x), 1e-12, "eval");
}

nn::ModulePtr make_conv_batch_norm() {
  auto model = nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Conv2d>(2, 3, 3), nn::make<nn::BatchNorm2d>(3), nn::make<nn::ReLU>()});
  model->to(DType::f64);
  return model;
}

// The batch splits as torch.chunk: pieces of ceil(N / devices), the last one smaller, so 7 rows on
// three devices are 3, 3, 1 and 4 rows are 2, 2 (not 3, 2, 2 and 2, 1, 1). Batch norm in training
// mode shows each replica's slice.
TEST(DataParallel, TheBatchSplitsAsTorchChunk) {
  for (const auto& [batch, pieces] : {std::pair<int64_t, std::vector<int64_t>>{7, {3, 3, 1}},
                                      std::pair<int64_t, std::vector<int64_t>>{4, {2, 2}}}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    nn::ModulePtr model = make_conv_batch_norm();
    nn::ModulePtr reference = model->clone();
    auto parallel = nn::make<DataParallel>(model, cpus(3));
    const Tensor x = random_input({batch, 2, 5, 5}, DType::f64, 11);
    std::vector<Tensor> expected;
    int64_t start = 0;
    for (int64_t rows : pieces) {
      expected.push_back((*reference->clone())(x.narrow(0, start, rows)));
      start += rows;
    }
    expect_close((*parallel)(x), cat(expected, 0), 1e-12, "per-slice batch norm");
  }
}

// A child the user put in eval mode stays in eval in the replicas while its parent trains: each
// module's own flag is copied, not the one its parent's train() would pass down.
TEST(DataParallel, AChildInEvalStaysInEvalInTheReplicas) {
  nn::ModulePtr model = make_conv_batch_norm();
  model->train();
  for (auto& [name, m] : model->named_modules()) {
    if (dynamic_cast<nn::BatchNorm*>(m) != nullptr) m->eval();
  }
  auto parallel = nn::make<DataParallel>(model, cpus(2));
  const Tensor x = random_input({5, 2, 5, 5}, DType::f64, 12);
  const Tensor y = (*parallel)(x);
  EXPECT_TRUE(model->is_training());
  expect_close(y, (*model)(x), 1e-12, "frozen batch norm");
}

TEST(DataParallel, GptMiniOnTokens) {
  auto model = nn::gpt_mini(13, 8, 2, 2, 8);
  model->to(DType::f64);
  nn::ModulePtr reference = model->clone();
  auto parallel = nn::make<DataParallel>(model, cpus(3));
  Generator generator(12);
  const Tensor tokens = randint(0, 13, {5, 6}, DType::i64, &generator);
  const Tensor y = (*parallel)(tokens);
  expect_close(y, (*reference)(tokens), 1e-12, "logits");
  sum(y * distinct(y)).backward();
  const Tensor y_reference = (*reference)(tokens);
  sum(y_reference * distinct(y_reference)).backward();
  const NamedTensors got = model->named_parameters(), expected = reference->named_parameters();
  for (size_t k = 0; k < got.size(); ++k)
    expect_close(got[k].second.grad(), expected[k].second.grad(), 1e-10, got[k].first);
}

TEST(DataParallel, StateDictIsPrefixedAndLoadsIntoTheUnwrappedModule) {
  nn::ModulePtr model = make_mlp(DType::f32);
  auto parallel = nn::make<DataParallel>(model, cpus(2));
  EXPECT_EQ(parallel->module(), model);
  const NamedTensors wrapped = parallel->state_dict();
  const NamedTensors plain = model->state_dict();
  ASSERT_EQ(wrapped.size(), plain.size());
  NamedTensors unprefixed;
  for (size_t k = 0; k < wrapped.size(); ++k) {
    EXPECT_EQ(wrapped[k].first, "module." + plain[k].first);
    unprefixed.emplace_back(wrapped[k].first.substr(7), wrapped[k].second);
  }
  nn::ModulePtr other = make_mlp(DType::f32);
  other->load_state_dict(unprefixed);
  const Tensor x = random_input({3, 6}, DType::f32, 2);
  expect_close((*other)(x), (*parallel)(x), 1e-6, "loaded");
  EXPECT_EQ(parallel->parameters().size(), model->parameters().size());
  EXPECT_NE(parallel->str().find("DataParallel(devices={cpu, cpu}"), std::string::npos);
  // The wrapper clones too (its module and devices).
  auto copy = nn::clone(parallel);
  EXPECT_EQ(copy->devices().size(), 2u);
  expect_close((*copy)(x), (*parallel)(x), 1e-6, "clone");
}

TEST(DataParallel, OneDeviceRunsTheModuleItself) {
  nn::ModulePtr model = make_mlp(DType::f64);
  auto parallel = nn::make<DataParallel>(model, cpus(1));
  const Tensor x = random_input({4, 6}, DType::f64, 1);
  expect_close((*parallel)(x), (*model)(x), 0.0, "one device");
}

// A replica's failure reaches the caller (after every thread has finished), and replicas draw
// dropout masks concurrently from the one default generator without harm.
TEST(DataParallel, ReplicaErrorsAndRandomnessInThreads) {
  auto parallel = nn::make<DataParallel>(make_mlp(DType::f32), cpus(3));
  EXPECT_ERROR_WITH((*parallel)(zeros({6, 5})), "linear");
  auto dropout =
      nn::make<DataParallel>(nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
                                 nn::make<nn::Linear>(4, 64), nn::make<nn::Dropout>(0.5)}),
                             cpus(3));
  const Tensor y = (*dropout)(ones({9, 4}));
  sum(y).backward();
  const double zeros_fraction = mean(eq(y, 0.0).to(DType::f32)).item<double>();
  EXPECT_GT(zeros_fraction, 0.3);
  EXPECT_LT(zeros_fraction, 0.7);

  // Each replica draws from its own stream: the same seed gives the same masks in every run,
  // whatever order the threads draw in, and the replicas' masks differ from each other.
  auto masks = [&] {
    manual_seed(17);
    std::vector<Tensor> runs;
    for (int step = 0; step < 2; ++step)
      runs.push_back((*dropout)(ones({9, 4})).detach());
    return runs;
  };
  const std::vector<Tensor> first = masks();
  for (int repeat = 0; repeat < 5; ++repeat) {
    const std::vector<Tensor> again = masks();
    for (size_t step = 0; step < first.size(); ++step)
      EXPECT_TRUE(identical(again[step], first[step])) << "repeat " << repeat << " step " << step;
  }
  EXPECT_FALSE(identical(first[0], first[1])) << "two steps drew the same masks";
  EXPECT_FALSE(identical(first[0].narrow(0, 0, 3), first[0].narrow(0, 3, 3)))
      << "two replicas drew the same masks";
}

class NotCloneable : public nn::Module {
 public:
  std::string type_name() const override { return "NotCloneable"; }
  Tensor forward(const Tensor& x) override { return x; }
};

TEST(DataParallel, BadDeviceListsAndInputsAreRefusedClearly) {
  nn::ModulePtr model = make_mlp(DType::f32);
  EXPECT_ERROR_WITH(DataParallel(model, {}), "DataParallel", "device list is empty");
  EXPECT_ERROR_WITH(DataParallel(nullptr, cpus(2)), "DataParallel", "module handle is empty");
  EXPECT_ERROR_WITH(DataParallel(model, {Device::cpu(), Device::cuda(0)}), "DataParallel",
                    "all CUDA or all CPU", "{cpu, cuda:0}");
  if (cuda_device_count() == 0) {
    EXPECT_ERROR_WITH(DataParallel(model, {Device::cuda(0), Device::cuda(0)}), "DataParallel",
                      "cuda:0", "CUDA");
  } else {
    EXPECT_ERROR_WITH(DataParallel(model, {Device::cuda(0), Device::cuda(cuda_device_count())}),
                      "DataParallel", "CUDA device(s) are visible");
  }
  DataParallel parallel(model, cpus(2));
  EXPECT_ERROR_WITH(parallel.forward(scalar_tensor(1.0)), "DataParallel", "split along dim 0");
  EXPECT_ERROR_WITH(parallel.forward(zeros({0, 6})), "DataParallel", "batch is empty");
  DataParallel not_cloneable(nn::make<NotCloneable>(), cpus(2));
  EXPECT_ERROR_WITH(not_cloneable.forward(zeros({2, 6})), "NotCloneable",
                    "clone() is not supported");
}

// Two replicas on one GPU, {cuda:0, cuda:0}, as the dp engine runs on a one-GPU machine: the
// module's outputs and gradients on the whole batch (cuDNN may pick other algorithms for the
// halves: f32 rounding apart), with the caller on a non-blocking stream of its own, which the
// replicas must follow (nothing orders it with the legacy default stream).
TEST(DataParallel, TwoReplicasOnOneGpuMatchTheModuleOnAStreamOfTheCallers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "needs a GPU";
#if EMBER_WITH_CUDA
  const Device gpu = Device::cuda(0);
  auto conv_net = [] {
    return nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        nn::make<nn::Conv2d>(3, 8, Size2(3), Conv2dOptions{.padding = 1}), nn::make<nn::ReLU>(),
        nn::make<nn::Flatten>(), nn::make<nn::Linear>(8 * 7 * 7, 5)});
  };
  nn::ModulePtr model = conv_net();
  model->to(gpu);
  nn::ModulePtr reference = model->clone();
  auto parallel = nn::make<DataParallel>(model, std::vector<Device>{gpu, gpu});
  const cuda::Stream side(0, cuda::Stream::Kind::non_blocking);
  const cuda::StreamGuard on_side(0, side.get());
  for (int step = 0; step < 3; ++step) {  // and no cuDNN handle per step (threads come and go)
    const Tensor data = random_input({9, 3, 7, 7}, DType::f32, 30 + step).to(gpu);
    Tensor x = data.clone().requires_grad_(), x_reference = data.clone().requires_grad_();
    const Tensor y = (*parallel)(x), y_reference = (*reference)(x_reference);
    expect_close(y.to(Device::cpu()), y_reference.to(Device::cpu()), 1e-5, "output");
    sum(y * distinct(y.to(Device::cpu())).to(gpu)).backward();
    sum(y_reference * distinct(y_reference.to(Device::cpu())).to(gpu)).backward();
    expect_close(x.grad().to(Device::cpu()), x_reference.grad().to(Device::cpu()), 1e-5,
                 "input gradient");
    const NamedTensors got = model->named_parameters(), expected = reference->named_parameters();
    for (size_t k = 0; k < got.size(); ++k) {
      expect_close(got[k].second.grad().to(Device::cpu()),
                   expected[k].second.grad().to(Device::cpu()), 1e-4, got[k].first);
      got[k].second.set_grad(Tensor());
      expected[k].second.set_grad(Tensor());
    }
  }
  side.synchronize();
#endif
}

}  // namespace
}  // namespace ember::dist
