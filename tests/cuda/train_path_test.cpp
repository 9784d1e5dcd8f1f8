// The runner on a GPU as `ember train` drives it: batches moved to the device, the loss and
// accuracy averaged there, checkpoints written from the device (through the host) and loaded back
// onto it, for the f32, AMP (bf16, fp16 with its GradScaler) and O2 engines. The model is a
// convolution and a flatten (no matmul), so that these tests run before the GEMM lands.
//
// Everything here needs a GPU and skips without one. What a GPU run checks: a run stopped after
// one epoch and resumed ends where a straight run ends (within a small tolerance: cuDNN's backward
// may sum with atomics, so GPU runs are not bit-reproducible), every parameter and optimizer master
// weight is on the GPU in every batch of the resumed run, and the metrics are finite.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engines/callbacks.h"
#include "engines/device_engines.h"
#include "engines/runner.h"
#include "nn/nn.h"
#include "optim/adam.h"
#include "optim/grad_clip.h"
#include "runtime/io/checkpoint.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/cuda/support.h"
#include "tests/engines/fixtures.h"

namespace ember::testing {
namespace {

// What the tests here need a GPU for, said when they skip without one.
constexpr const char* kNeedsGpu = "this test trains on the GPU";

// images (N, 3, 4, 4) -> logits (N, 3)
nn::ModulePtr conv_net() {
  return nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Conv2d>(3, 8, 3, Conv2dOptions{.padding = 1}), nn::make<nn::ReLU>(),
      nn::make<nn::Dropout>(0.1), nn::make<nn::Conv2d>(8, 3, 4), nn::make<nn::Flatten>()});
}

// 48 images whose class is the channel with the largest mean: learnable by the net.
std::shared_ptr<data::DataLoader> image_loader(bool shuffle) {
  Generator generator(8);
  const Tensor images = randn({48, 3, 4, 4}, {}, &generator);
  const Tensor labels = argmax(mean(images, {2, 3}), 1);
  return std::make_shared<data::DataLoader>(
      std::make_shared<data::TensorDataset>(images, labels),
      data::DataLoaderOptions{.batch_size = 16, .shuffle = shuffle, .seed = 3});
}

// In every train batch: each parameter and each optimizer master weight on the GPU.
class PlacementCheck : public engines::ICallback {
 public:
  explicit PlacementCheck(std::vector<std::string>& errors)
      : ICallback(engines::CallbackOrder::external), errors_(errors) {}
  void on_batch_end(engines::IRunner& runner) override {
    if (!runner.is_train_loader) return;
    for (const auto& [name, param] : runner.model->named_parameters())
      if (!param.is_cuda()) errors_.push_back(name + " is on " + param.device().str());
    const auto& groups = runner.optimizer->param_groups();
    for (size_t g = 0; g < groups.size(); ++g)
      for (size_t i = 0; i < groups[g].params.size(); ++i)
        if (!runner.optimizer->master_param(g, i).is_cuda())
          errors_.push_back("master weight " + std::to_string(i) + " is on the host");
    if (!runner.batch_metrics.at("loss").is_cuda()) errors_.push_back("the loss is on the host");
  }

 private:
  std::vector<std::string>& errors_;
};

// 2 epochs (stopping after `stop_after` when > 0, resuming from logdir/last.ckpt when `resume`).
// Returns the last epoch's metrics.
engines::LoaderMetrics run(const std::function<engines::EnginePtr()>& engine,
                           const std::string& logdir, int64_t stop_after, bool resume,
                           std::vector<std::string>& placement_errors) {
  engines::SupervisedRunner runner;
  engines::Callbacks callbacks = {
      {"accuracy", std::make_shared<engines::AccuracyCallback>()},
      {"placement", std::make_shared<PlacementCheck>(placement_errors)}};
  if (stop_after > 0)
    callbacks.emplace_back("stop", std::make_shared<engines::testing::StopAfterEpoch>(stop_after));
  runner.train({.model_fn = conv_net,
                .criterion = [](const Tensor& logits,
                                const Tensor& targets) { return cross_entropy(logits, targets); },
                .loaders = {{"train", image_loader(true)}, {"valid", image_loader(false)}},
                .logdir = logdir,
                .num_epochs = 2,
                .valid_metric = "accuracy",
                .minimize_valid_metric = false,
                .engine_instance = engine(),
                .callbacks = callbacks,
                .seed = 5,
                .resume = resume ? logdir : "",
                .optimizer_fn =
                    [](nn::Module& placed) {
                      return std::make_shared<optim::Adam>(placed.named_parameters(),
                                                           optim::AdamOptions{.lr = 1e-2});
                    },
                .use_default_loggers = false});
  return runner.epoch_metrics;
}

struct EngineCase {
  std::string name;
  std::function<engines::EnginePtr()> make;
  double tolerance;  // straight against resumed weights
};

TEST(CudaTrainPath, EachEngineTrainsStopsAndResumesOnTheGpu) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  const std::vector<EngineCase> cases = {
      {"cuda", [] { return std::make_shared<engines::DeviceEngine>(Device::cuda(0)); }, 1e-4},
      {"amp_bf16",
       [] { return std::make_shared<engines::AMPEngine>(Device::cuda(0), DType::bf16); }, 1e-2},
      {"amp_fp16", [] { return std::make_shared<engines::AMPEngine>(Device::cuda(0), DType::f16); },
       1e-3},
      {"o2_bf16", [] { return std::make_shared<engines::O2Engine>(Device::cuda(0), DType::bf16); },
       1e-2},
      {"o2_fp16", [] { return std::make_shared<engines::O2Engine>(Device::cuda(0), DType::f16); },
       1e-3},
  };
  for (const EngineCase& c : cases) {
    const std::string straight = engines::testing::fresh_dir("cuda_straight_" + c.name);
    const std::string resumed = engines::testing::fresh_dir("cuda_resumed_" + c.name);
    std::vector<std::string> errors;
    run(c.make, straight, 0, false, errors);
    run(c.make, resumed, 1, false, errors);
    const engines::LoaderMetrics after_resume = run(c.make, resumed, 0, true, errors);
    EXPECT_TRUE(errors.empty()) << c.name << ": " << errors.front();
    ASSERT_EQ(after_resume.size(), 2u) << c.name;  // train and valid of epoch 2
    for (const auto& [loader, metrics] : after_resume) {
      for (const char* key : {"loss", "accuracy"}) {
        const double value = metrics.at(key);
        EXPECT_TRUE(std::isfinite(value)) << c.name << " " << loader << " " << key;
      }
      EXPECT_GE(metrics.at("accuracy"), 0.0);
      EXPECT_LE(metrics.at("accuracy"), 1.0);
    }
    // The checkpoints hold host copies of the device tensors; the resumed run ends where the
    // straight one does.
    const Checkpoint a = load_checkpoint(straight + "/last.ckpt");
    const Checkpoint b = load_checkpoint(resumed + "/last.ckpt");
    EXPECT_EQ(a.meta("checkpoint.epoch"), "2") << c.name;
    EXPECT_EQ(b.meta("checkpoint.epoch"), "2") << c.name;
    EXPECT_EQ(b.meta("engine"), a.meta("engine")) << c.name;
    ASSERT_EQ(a.tensors.size(), b.tensors.size()) << c.name;
    for (size_t i = 0; i < a.tensors.size(); ++i) {
      const auto& [name, tensor] = a.tensors[i];
      EXPECT_EQ(b.tensors[i].first, name) << c.name;
      EXPECT_TRUE(tensor.is_cpu()) << c.name << " " << name;
      EXPECT_TRUE(allclose(b.tensors[i].second.to(DType::f64), tensor.to(DType::f64), c.tolerance,
                           c.tolerance))
          << c.name << ": " << name << " differs between the straight and the resumed run";
    }
    std::filesystem::remove_all(straight);
    std::filesystem::remove_all(resumed);
  }
}

// OptimizerCallback's max_grad_norm on CUDA gradients: the norm and the coefficient stay on the
// GPU (no host 0-d tensor copied in, which would wait for the GPU), and clip as on the CPU.
TEST(CudaTrainPath, ClipGradNormStaysOnTheGpuAndMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  Generator generator(4);
  std::vector<Tensor> cpu_params, cuda_params;
  for (const Shape& shape : {Shape{3, 5}, Shape{1}, Shape{4097}}) {
    Tensor cpu = zeros(shape).requires_grad_(true);
    cpu.set_grad(randn(shape, {}, &generator));
    Tensor cuda = zeros(shape, TensorOptions(DType::f32, Device::cuda(0))).requires_grad_(true);
    cuda.set_grad(cpu.grad().clone().to(Device::cuda(0)));
    cpu_params.push_back(cpu);
    cuda_params.push_back(cuda);
  }
  const Tensor cpu_norm = optim::clip_grad_norm_(cpu_params, 1.0);
  const Tensor cuda_norm = optim::clip_grad_norm_(cuda_params, 1.0);
  EXPECT_TRUE(cuda_norm.is_cuda());
  EXPECT_NEAR(cuda_norm.item<double>(), cpu_norm.item<double>(), 1e-5 * cpu_norm.item<double>());
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_TRUE(allclose(cuda_params[i].grad().to(Device::cpu()), cpu_params[i].grad(), 1e-5, 1e-7))
        << "parameter " << i;
  }
}

}  // namespace
}  // namespace ember::testing
