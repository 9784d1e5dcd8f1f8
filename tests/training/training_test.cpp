// Training as a whole: autocast's op lists, mixed precision with master weights, a checkpoint of
// every piece of state that continues bit-identically, and a small CNN that learns Fashion-MNIST.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "runtime/io/checkpoint.h"
#include "runtime/ops.h"

namespace ember {
namespace {

namespace fs = std::filesystem;

TEST(Autocast, EachOpRunsInTheDtypeItsListSays) {
  manual_seed(0);
  const Tensor x = randn({4, 8}), w = randn({3, 8}), image = randn({2, 3, 6, 6}),
               filters = randn({4, 3, 3, 3});
  const Tensor low = randn({4, 8}).to(DType::bf16);
  const Tensor targets = from_vector(std::vector<int64_t>{0, 1, 2, 0}, {4}, DType::i64);
  for (DType dtype : {DType::bf16, DType::f16}) {
    AutocastGuard guard(dtype);
    // Lower precision: the matrix products.
    EXPECT_EQ(matmul(x, w.t()).dtype(), dtype);
    EXPECT_EQ(linear(x, w).dtype(), dtype);
    EXPECT_EQ(bmm(x.unsqueeze(0), w.t().unsqueeze(0)).dtype(), dtype);
    EXPECT_EQ(conv2d(image, filters).dtype(), dtype);
    // f32: the numerically sensitive ones, even from 16-bit inputs.
    EXPECT_EQ(softmax(low, -1).dtype(), DType::f32);
    EXPECT_EQ(log_softmax(low, -1).dtype(), DType::f32);
    EXPECT_EQ(layer_norm(low, {8}).dtype(), DType::f32);
    EXPECT_EQ(cross_entropy(low, targets).dtype(), DType::f32);
    EXPECT_EQ(sum(low).dtype(), DType::f32);
    EXPECT_EQ(exp(low).dtype(), DType::f32);
    EXPECT_EQ(logsumexp(low, {1}).dtype(), DType::f32);
    // Promote: mixed inputs run in the widest.
    EXPECT_EQ(cat({x, low}, 0).dtype(), DType::f32);
    // Not on the lists: elementwise ops keep their input dtype.
    EXPECT_EQ(relu(low).dtype(), DType::bf16);
    EXPECT_EQ(relu(x).dtype(), DType::f32);
    // f64 is never cast.
    EXPECT_EQ(matmul(x.to(DType::f64), w.t().to(DType::f64)).dtype(), DType::f64);
    {
      AutocastGuard off(dtype, /*enabled=*/false);
      EXPECT_EQ(matmul(x, w.t()).dtype(), DType::f32);
    }
    EXPECT_EQ(matmul(x, w.t()).dtype(), dtype);
  }
  EXPECT_FALSE(autocast_enabled());
  EXPECT_EQ(matmul(x, w.t()).dtype(), DType::f32);
}

TEST(Autocast, GradientsReachF32LeavesInF32) {
  manual_seed(1);
  Tensor w = randn({3, 8}).requires_grad_();
  const Tensor x = randn({4, 8});
  {
    AutocastGuard guard(DType::bf16);
    sum(linear(x, w)).backward();
  }
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::f32);
  // d/dw sum(x w^T) = column sums of x, broadcast over the 3 outputs (bf16 accuracy).
  EXPECT_TRUE(allclose(w.grad(), sum(x, {0}, true).expand({3, 8}), 2e-2, 2e-2));
}

std::shared_ptr<nn::Sequential> small_net() {
  return nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Linear>(6, 16), nn::make<nn::ReLU>(), nn::make<nn::Dropout>(0.3),
      nn::make<nn::Linear>(16, 3)});
}

// One step of the full recipe: autocast (fp16), scaled loss, scaler step and update.
void train_step(nn::Module& model, optim::Optimizer& optimizer, optim::GradScaler& scaler,
                const Tensor& x, const Tensor& y) {
  Tensor loss;
  {
    AutocastGuard guard(DType::f16);
    loss = cross_entropy(model.forward(x), y);
  }
  optimizer.zero_grad();
  scaler.scale(loss).backward();
  scaler.step(optimizer);
  scaler.update();
}

struct Trainer {
  std::shared_ptr<nn::Sequential> model = small_net();
  optim::Adam optimizer{model->named_parameters(), {.lr = 1e-2}};
  optim::MultiStepLR scheduler{optimizer, {2, 4}, 0.5};
  optim::GradScaler scaler{{.init_scale = 256.0, .growth_interval = 3}};

  void epoch(const Tensor& x, const Tensor& y) {
    for (int64_t i = 0; i < x.size(0); i += 8)
      train_step(*model, optimizer, scaler, x.narrow(0, i, 8), y.narrow(0, i, 8));
    scheduler.step();
  }
  void save(const std::string& path) const {
    NamedTensors tensors;
    for (const auto& [name, t] : model->state_dict())
      tensors.emplace_back("model." + name, t);
    const optim::StateDict state = optimizer.state_dict();
    for (const auto& [name, t] : state.tensors)
      tensors.emplace_back("optimizer." + name, t);
    Metadata metadata;
    for (const auto& [key, value] : state.metadata)
      metadata["optimizer." + key] = value;
    metadata.merge(scheduler.state_dict());
    metadata.merge(scaler.state_dict());
    const GeneratorState rng = default_generator().state();
    metadata["rng.seed"] = std::to_string(rng.seed);
    metadata["rng.offset"] = std::to_string(rng.offset);
    save_checkpoint(path, tensors, metadata);
  }
  void load(const std::string& path) {
    const Checkpoint checkpoint = load_checkpoint(path);
    NamedTensors model_state;
    optim::StateDict optimizer_state;
    for (const auto& [name, t] : checkpoint.tensors) {
      if (name.rfind("model.", 0) == 0) model_state.emplace_back(name.substr(6), t);
      if (name.rfind("optimizer.", 0) == 0)
        optimizer_state.tensors.emplace_back(name.substr(10), t);
    }
    for (const auto& [key, value] : checkpoint.metadata) {
      if (key.rfind("optimizer.", 0) == 0) optimizer_state.metadata[key.substr(10)] = value;
    }
    model->load_state_dict(model_state);
    optimizer.load_state_dict(optimizer_state);
    scheduler.load_state_dict(checkpoint.metadata);
    scaler.load_state_dict(checkpoint.metadata);
    default_generator().set_state(
        {std::stoull(checkpoint.meta("rng.seed")), std::stoull(checkpoint.meta("rng.offset"))});
  }
};

TEST(Resume, EveryPieceOfStateRoundTripsAndTrainingContinuesBitIdentically) {
  const std::string path =
      (fs::temp_directory_path() / ("ember_resume_" + std::to_string(::getpid()) + ".ckpt"))
          .string();
  Generator data_rng(7);
  const Tensor x = randn({64, 6}, {}, &data_rng);
  const Tensor y = randint(0, 3, {64}, DType::i64, &data_rng);

  manual_seed(11);
  Trainer straight;
  for (int e = 0; e < 6; ++e)
    straight.epoch(x, y);

  manual_seed(11);
  Trainer first_half;
  for (int e = 0; e < 3; ++e)
    first_half.epoch(x, y);
  first_half.save(path);
  manual_seed(999);  // whatever happens in between must not matter
  randn({100});
  Trainer resumed;  // fresh weights, optimizer, schedule and scaler: all replaced by the load
  resumed.load(path);
  for (int e = 3; e < 6; ++e)
    resumed.epoch(x, y);
  fs::remove(path);

  const NamedTensors a = straight.model->state_dict(), b = resumed.model->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].second.nbytes(), b[i].second.nbytes());
    EXPECT_EQ(std::memcmp(a[i].second.data_ptr(), b[i].second.data_ptr(), a[i].second.nbytes()), 0)
        << a[i].first << " differs after resuming";
  }
  EXPECT_EQ(straight.scaler.get_scale(), resumed.scaler.get_scale());
  EXPECT_EQ(straight.scheduler.get_last_lr(), resumed.scheduler.get_last_lr());
  EXPECT_EQ(straight.optimizer.param_groups()[0].lr, resumed.optimizer.param_groups()[0].lr);
}

TEST(MixedPrecision, ABf16ModelWithF32MasterWeightsLearns) {
  manual_seed(3);
  auto model = nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Linear>(2, 32), nn::make<nn::Tanh>(), nn::make<nn::Linear>(32, 2)});
  model->to(DType::bf16);  // "O2": the model itself is bf16
  optim::Adam optimizer(model->named_parameters(), {.lr = 3e-2});
  const Tensor x = from_vector({0.f, 0.f, 0.f, 1.f, 1.f, 0.f, 1.f, 1.f}, {4, 2}).to(DType::bf16);
  const Tensor y = from_vector(std::vector<int64_t>{0, 1, 1, 0}, {4}, DType::i64);
  double first = 0, last = 0;
  for (int step = 0; step < 300; ++step) {
    Tensor loss = cross_entropy(model->forward(x), y);
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
    optimizer.zero_grad();
    loss.backward();
    optimizer.step();
  }
  EXPECT_EQ(model->parameters()[0].dtype(), DType::bf16);
  EXPECT_EQ(optimizer.master_param(0, 0).dtype(), DType::f32);
  EXPECT_LT(last, 0.1 * first);
  EXPECT_EQ(to_vector<int64_t>(argmax(model->forward(x), 1)), (std::vector<int64_t>{0, 1, 1, 0}));
}

TEST(FashionMnist, ASmallCnnReaches85PercentOnA5000ImageSubset) {
  if (!fs::exists(data::kFashionMnistDefaultDir)) {
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (" << data::kFashionMnistDefaultDir
                 << ")";
  }
  manual_seed(0);
  auto train_set =
      std::make_shared<data::FashionMnist>(data::kFashionMnistDefaultDir, data::Split::train, 5000);
  auto test_set =
      std::make_shared<data::FashionMnist>(data::kFashionMnistDefaultDir, data::Split::test);
  const std::vector<data::Transform> normalise = {data::normalize({0.5}, {0.5})};
  data::DataLoader train_loader(
      train_set, {.batch_size = 50, .shuffle = true, .seed = 1, .transforms = normalise});
  data::DataLoader test_loader(test_set, {.batch_size = 500, .transforms = normalise});
  // (N,1,28,28) -> conv 24 -> pool -> (N,24,14,14) -> conv 48 -> pool -> (N,48,7,7) -> 10
  auto block = [](int64_t in, int64_t out) {
    return nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
        nn::make<nn::Conv2d>(in, out, 3, Conv2dOptions{.padding = 1}),
        nn::make<nn::BatchNorm2d>(out), nn::make<nn::ReLU>(), nn::make<nn::MaxPool2d>(2)});
  };
  auto model = nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      block(1, 24), block(24, 48), nn::make<nn::Flatten>(), nn::make<nn::Linear>(48 * 7 * 7, 10)});
  optim::Adam optimizer(model->named_parameters(), {.lr = 2e-3});
  optim::MultiStepLR scheduler(optimizer, {3, 4}, 0.3);
  for (int64_t epoch = 0; epoch < 5; ++epoch) {
    train_loader.set_epoch(epoch);
    for (const data::Batch& batch : train_loader) {
      Tensor loss = cross_entropy(model->forward(batch.inputs), batch.targets);
      optimizer.zero_grad();
      loss.backward();
      optimizer.step();
    }
    scheduler.step();
  }
  NoGradGuard no_grad;
  model->eval();
  int64_t correct = 0;
  for (const data::Batch& batch : test_loader)
    correct += sum(eq(argmax(model->forward(batch.inputs), 1), batch.targets)).item<int64_t>();
  const double accuracy = static_cast<double>(correct) / static_cast<double>(test_set->size());
  std::cout << "small CNN, 5000 training images, 5 epochs: test accuracy " << accuracy * 100
            << "% on " << test_set->size() << " images\n";
  EXPECT_GE(accuracy, 0.85);
}

}  // namespace
}  // namespace ember
