// The fused multi-tensor CUDA optimizers, the CUDA GradScaler and the CUDA indexing ops against
// their CPU versions: several steps of SGD / Adam / AdamW over parameters of odd sizes (1, 3, 1023,
// 4097, and enough of them to fill several multi-tensor launches), f16/bf16 models with f32 master
// weights, the scaler skipping a step on Inf/NaN and backing off, the embedding backward with
// repeated indices, and the errors for a bad index.
//
// Everything here needs a GPU and skips without one. What a GPU run checks beyond "it runs":
// the optimizer kernels are meant to give the CPU's bits exactly (no fused multiply-add), so the
// tolerance below is a small multiple of f32 rounding and a failure means a formula drifted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "kernels/cuda/multi_tensor_plan.h"
#include "optim/optim.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/cuda/support.h"

namespace ember::testing {
namespace {

// What the tests here need a GPU for, said when they skip without one.
constexpr const char* kNeedsGpu = "this test compares CUDA with the CPU";

// The same parameters (and, per step, the same gradients) on the CPU and on CUDA.
struct TwinParams {
  std::vector<Tensor> cpu, cuda;
};

TwinParams make_params(const std::vector<Shape>& shapes, DType dtype, Generator& g) {
  TwinParams p;
  for (const Shape& shape : shapes) {
    const Tensor values = randn(shape, DType::f32, &g).to(dtype);
    p.cpu.push_back(values.clone().requires_grad_());
    p.cuda.push_back(values.to(Device::cuda(0)).requires_grad_());
  }
  return p;
}

void set_random_grads(TwinParams& p, Generator& g, double scale = 1.0) {
  for (size_t k = 0; k < p.cpu.size(); ++k) {
    const Tensor grad = mul(randn(p.cpu[k].sizes(), DType::f32, &g), scale).to(p.cpu[k].dtype());
    p.cpu[k].set_grad(grad);
    p.cuda[k].set_grad(grad.to(Device::cuda(0)));
  }
}

optim::AdamWOptions adamw_options(double lr, double weight_decay, double beta1 = 0.9) {
  optim::AdamWOptions options;  // not an aggregate: no designated initializers
  options.lr = lr;
  options.weight_decay = weight_decay;
  options.beta1 = beta1;
  return options;
}

// f32 rounding, a few times over: the kernels should match the CPU's bits.
constexpr double kF32Tolerance = 1e-6;

// Runs `steps` steps of the optimizers `make` builds on both devices and compares parameters,
// masters and every state tensor after each step.
void expect_same_steps(
    const std::string& what,
    const std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>& make,
    const std::vector<Shape>& shapes, DType dtype, int steps) {
  Generator g(42);
  TwinParams p = make_params(shapes, dtype, g);
  const std::unique_ptr<optim::Optimizer> on_cpu = make(p.cpu), on_cuda = make(p.cuda);
  const double param_tolerance = dtype == DType::f64   ? 1e-12
                                 : dtype == DType::f32 ? kF32Tolerance
                                                       : 1e-2;
  for (int step = 1; step <= steps; ++step) {
    set_random_grads(p, g);
    on_cpu->step();
    on_cuda->step();
    for (size_t k = 0; k < shapes.size(); ++k) {
      const std::string where = what + " in " + dtype_name(dtype) + ", step " +
                                std::to_string(step) + ", parameter " + std::to_string(k) + " " +
                                shape_str(shapes[k]);
      ASSERT_TRUE(p.cuda[k].is_cuda()) << where;
      EXPECT_EQ(mismatch(p.cuda[k], p.cpu[k], param_tolerance), "") << where;
      EXPECT_EQ(mismatch(on_cuda->master_param(0, k), on_cpu->master_param(0, k),
                         std::min(param_tolerance, kF32Tolerance)),
                "")
          << where << " (master)";
      const optim::ParamState& cpu_state = on_cpu->state(0, k);
      const optim::ParamState& cuda_state = on_cuda->state(0, k);
      EXPECT_EQ(cuda_state.step, cpu_state.step) << where;
      ASSERT_EQ(cuda_state.tensors.size(), cpu_state.tensors.size()) << where;
      for (const auto& [name, tensor] : cpu_state.tensors) {
        ASSERT_TRUE(cuda_state.tensors.count(name)) << where << ": no " << name;
        EXPECT_TRUE(cuda_state.tensors.at(name).is_cuda()) << where << ": " << name;
        EXPECT_EQ(
            mismatch(cuda_state.tensors.at(name), tensor, std::min(param_tolerance, kF32Tolerance)),
            "")
            << where << " (" << name << ")";
      }
    }
  }
}

// ---- the multi-tensor launch plan (host code: runs without a GPU) -------------------------------

// Every chunk of every non-empty tensor is handed to exactly one block, within the table's limits,
// through batches cut by too many tensors, too many blocks, or both in the middle of a tensor.
TEST(CudaMultiTensorPlan, EveryChunkOfEveryTensorOnce) {
  using kernels::cuda::kMultiTensorChunkSize;
  using kernels::cuda::kMultiTensorMaxBlocks;
  using kernels::cuda::kMultiTensorMaxTensors;
  const std::vector<std::vector<int64_t>> cases = {
      {1},
      {0, 3, 0},
      {1, 3, 1023, 4097, kMultiTensorChunkSize, kMultiTensorChunkSize + 1},
      std::vector<int64_t>(50, 7),                                     // > 24 tensors
      {kMultiTensorChunkSize * 700 + 5},                               // > 320 blocks in one
      {5, kMultiTensorChunkSize * 400, 9, kMultiTensorChunkSize * 3},  // a tensor carried over
      std::vector<int64_t>(30, kMultiTensorChunkSize * 11 + 1),        // both limits
  };
  for (size_t c = 0; c < cases.size(); ++c) {
    const std::vector<int64_t>& sizes = cases[c];
    // Tensor t's "pointer" is a fake address naming it; the second list points elsewhere.
    std::vector<kernels::cuda::TensorListEntry<2>> entries;
    for (size_t t = 0; t < sizes.size(); ++t) {
      kernels::cuda::TensorListEntry<2> entry;
      entry.pointers = {reinterpret_cast<void*>((t + 1) * 16),
                        reinterpret_cast<void*>((t + 1) * 16 + 8)};
      entry.size = sizes[t];
      entries.push_back(entry);
    }
    std::vector<std::vector<int>> seen(sizes.size());  // per tensor: times each chunk was seen
    for (size_t t = 0; t < sizes.size(); ++t)
      seen[t].assign(
          static_cast<size_t>((sizes[t] + kMultiTensorChunkSize - 1) / kMultiTensorChunkSize), 0);
    int launches = 0;
    kernels::cuda::multi_tensor_apply<2>(
        entries, [&](const kernels::cuda::TensorListArgs<2>& args, int blocks) {
          ++launches;
          ASSERT_GT(blocks, 0);
          ASSERT_LE(blocks, kMultiTensorMaxBlocks);
          for (int b = 0; b < blocks; ++b) {
            const int slot = args.block_tensor[b];
            ASSERT_LT(slot, kMultiTensorMaxTensors);
            const size_t t = reinterpret_cast<uintptr_t>(args.pointers[0][slot]) / 16 - 1;
            ASSERT_LT(t, sizes.size()) << "case " << c;
            EXPECT_EQ(reinterpret_cast<uintptr_t>(args.pointers[1][slot]), (t + 1) * 16 + 8);
            EXPECT_EQ(args.sizes[slot], sizes[t]);
            const int chunk = args.block_chunk[b];
            ASSERT_LT(static_cast<size_t>(chunk), seen[t].size()) << "case " << c;
            ++seen[t][static_cast<size_t>(chunk)];
          }
        });
    for (size_t t = 0; t < sizes.size(); ++t)
      for (size_t chunk = 0; chunk < seen[t].size(); ++chunk)
        EXPECT_EQ(seen[t][chunk], 1) << "case " << c << ", tensor " << t << ", chunk " << chunk;
    EXPECT_GE(launches, 1) << "case " << c;
  }
}

const std::vector<Shape> kOddShapes = {{1}, {3}, {1023}, {4097}, {3, 5}, {65536 * 2 + 5}};

TEST(CudaOptim, SgdMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  const std::vector<optim::SGDOptions> variants = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-2, .nesterov = true},
      {.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .weight_decay = 1e-3, .maximize = true},
  };
  for (size_t v = 0; v < variants.size(); ++v) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      expect_same_steps(
          "SGD variant " + std::to_string(v),
          [&](std::vector<Tensor> params) {
            return std::make_unique<optim::SGD>(std::move(params), variants[v]);
          },
          kOddShapes, dtype, 4);
    }
  }
}

TEST(CudaOptim, AdamAndAdamWMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    expect_same_steps(
        "Adam",
        [](std::vector<Tensor> params) {
          return std::make_unique<optim::Adam>(std::move(params), optim::AdamOptions{.lr = 1e-2});
        },
        kOddShapes, dtype, 4);
    expect_same_steps(
        "Adam (weight decay, amsgrad, maximize)",
        [](std::vector<Tensor> params) {
          return std::make_unique<optim::Adam>(
              std::move(params),
              optim::AdamOptions{
                  .lr = 1e-2, .weight_decay = 1e-2, .amsgrad = true, .maximize = true});
        },
        kOddShapes, dtype, 4);
    expect_same_steps(
        "AdamW",
        [](std::vector<Tensor> params) {
          return std::make_unique<optim::AdamW>(std::move(params), adamw_options(1e-2, 0.1));
        },
        kOddShapes, dtype, 4);
    expect_same_steps(
        "AdamW (beta1 0.3: lerp from the end)",
        [](std::vector<Tensor> params) {
          return std::make_unique<optim::AdamW>(std::move(params), adamw_options(1e-2, 1e-2, 0.3));
        },
        kOddShapes, dtype, 3);
  }
}

// fused = false (the reference path written with ember ops) and f64 parameters (which always
// take it) run on CUDA too, through the CUDA elementwise ops.
TEST(CudaOptim, ReferencePathMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    expect_same_steps(
        "SGD (reference path)",
        [](std::vector<Tensor> params) {
          return std::make_unique<optim::SGD>(
              std::move(params),
              optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .nesterov = true, .fused = false});
        },
        {{3}, {1023}}, dtype, 3);
    expect_same_steps(
        "Adam (reference path, amsgrad)",
        [](std::vector<Tensor> params) {
          return std::make_unique<optim::Adam>(
              std::move(params), optim::AdamOptions{.lr = 1e-2, .amsgrad = true, .fused = false});
        },
        {{3}, {1023}}, dtype, 3);
  }
}

// More tensors (30 > 24) and more chunks (> 320) than one launch takes: batches are cut, and one
// tensor is carried over from one launch into the next.
TEST(CudaOptim, ManyParametersSpanSeveralLaunches) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  std::vector<Shape> shapes;
  for (int k = 0; k < 30; ++k)
    shapes.push_back({k % 3 == 0 ? 1000003 : 17 + k});
  expect_same_steps(
      "AdamW over 30 parameters",
      [](std::vector<Tensor> params) {
        return std::make_unique<optim::AdamW>(std::move(params), adamw_options(1e-3, 0.01));
      },
      shapes, DType::f32, 2);
}

// Parameters that miss the 16-byte alignment (views at odd offsets into a larger buffer) take the
// element-wise path; f16 models with masters too.
TEST(CudaOptim, UnalignedParametersMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  for (DType dtype : {DType::f32, DType::f16}) {
    Generator g(7);
    const Tensor base = randn({4100}, DType::f32, &g).to(dtype);
    Tensor cpu_param = base.narrow(0, 1, 4097).detach().requires_grad_();
    Tensor cuda_param = base.to(Device::cuda(0)).narrow(0, 1, 4097).detach().requires_grad_();
    optim::SGD on_cpu({cpu_param}, {.lr = 0.1, .momentum = 0.9});
    optim::SGD on_cuda({cuda_param}, {.lr = 0.1, .momentum = 0.9});
    for (int step = 0; step < 3; ++step) {
      const Tensor grad = randn({4097}, DType::f32, &g).to(dtype);
      cpu_param.set_grad(grad);
      cuda_param.set_grad(grad.to(Device::cuda(0)));
      on_cpu.step();
      on_cuda.step();
      EXPECT_EQ(mismatch(cuda_param, cpu_param, dtype == DType::f32 ? kF32Tolerance : 2e-3), "")
          << dtype_name(dtype) << " step " << step;
    }
  }
}

// ---- GradScaler ---------------------------------------------------------------------------------

TEST(CudaGradScaler, InfOrNanInOneGradientSkipsTheStepAndBacksOff) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    for (float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
      Generator g(3);
      TwinParams p = make_params({{3}, {1023}, {4097}}, dtype, g);
      optim::Adam on_cpu(p.cpu, optim::AdamOptions{.lr = 0.1});
      optim::Adam on_cuda(p.cuda, optim::AdamOptions{.lr = 0.1});
      optim::GradScaler cpu_scaler, cuda_scaler;
      const std::vector<Tensor> before = {p.cuda[0].clone(), p.cuda[1].clone(), p.cuda[2].clone()};

      set_random_grads(p, g, 1000.0);
      // Plant the bad value in the middle gradient, at an odd position. On the GPU that gradient
      // starts one element into its buffer: the unscale kernel's unaligned (element) path.
      Tensor cpu_bad = p.cpu[1].grad().clone();
      cpu_bad.narrow(0, 517, 1).fill_(static_cast<double>(bad));
      p.cpu[1].set_grad(cpu_bad);
      Tensor cuda_bad = zeros({1024}, TensorOptions(dtype, Device::cuda(0))).narrow(0, 1, 1023);
      cuda_bad.copy_(cpu_bad);
      p.cuda[1].set_grad(cuda_bad);

      EXPECT_FALSE(cpu_scaler.step(on_cpu));
      EXPECT_FALSE(cuda_scaler.step(on_cuda)) << dtype_name(dtype) << " " << bad;
      for (size_t k = 0; k < 3; ++k)
        EXPECT_EQ(mismatch(p.cuda[k], before[k], 0.0), "") << "parameter " << k << " moved";
      EXPECT_EQ(on_cuda.state(0, 0).step, 0);
      cpu_scaler.update();
      cuda_scaler.update();
      EXPECT_EQ(cuda_scaler.get_scale(), 32768.0);
      EXPECT_EQ(cuda_scaler.get_scale(), cpu_scaler.get_scale());
      EXPECT_EQ(cuda_scaler.growth_tracker(), 0);

      // The next, finite step runs: gradients unscaled by the new scale, the same parameters.
      set_random_grads(p, g, 1000.0);
      cpu_scaler.unscale_(on_cpu);
      cuda_scaler.unscale_(on_cuda);
      for (size_t k = 0; k < 3; ++k)
        EXPECT_EQ(mismatch(p.cuda[k].grad(), p.cpu[k].grad(), 0.0), "") << "gradient " << k;
      EXPECT_TRUE(cpu_scaler.step(on_cpu));
      EXPECT_TRUE(cuda_scaler.step(on_cuda));
      cpu_scaler.update();
      cuda_scaler.update();
      for (size_t k = 0; k < 3; ++k)
        EXPECT_EQ(mismatch(p.cuda[k], p.cpu[k],
                           dtype == DType::f32 ? kF32Tolerance : cuda_tolerance(dtype)),
                  "")
            << "parameter " << k;
      EXPECT_EQ(cuda_scaler.growth_tracker(), 1);
    }
  }
}

TEST(CudaGradScaler, GrowsAfterTheIntervalLikeTheCpu) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  const optim::GradScalerOptions options{.init_scale = 8.0, .growth_interval = 2};
  optim::GradScaler cpu_scaler(options), cuda_scaler(options);
  Generator g(5);
  TwinParams p = make_params({{5}}, DType::f32, g);
  optim::SGD on_cpu(p.cpu, {.lr = 0.0}), on_cuda(p.cuda, {.lr = 0.0});
  for (int step = 0; step < 5; ++step) {
    set_random_grads(p, g);
    cpu_scaler.step(on_cpu);
    cuda_scaler.step(on_cuda);
    cpu_scaler.update();
    cuda_scaler.update();
    EXPECT_EQ(cuda_scaler.get_scale(), cpu_scaler.get_scale()) << "step " << step;
    EXPECT_EQ(cuda_scaler.growth_tracker(), cpu_scaler.growth_tracker()) << "step " << step;
  }
  EXPECT_EQ(cuda_scaler.get_scale(), 32.0);
  // The scaled loss uses the device scale.
  const Tensor loss = scalar_tensor(1.5, TensorOptions(DType::f32, Device::cuda(0)));
  EXPECT_EQ(cuda_scaler.scale(loss).item<double>(), 1.5 * 32.0);
  // state_dict reads the device values; loading writes them back.
  EXPECT_EQ(cuda_scaler.state_dict().at("scaler.scale"),
            cpu_scaler.state_dict().at("scaler.scale"));
  cuda_scaler.load_state_dict({{"scaler.scale", "4"},
                               {"scaler.growth_factor", "2"},
                               {"scaler.backoff_factor", "0.5"},
                               {"scaler.growth_interval", "2"},
                               {"scaler.growth_tracker", "1"}});
  EXPECT_EQ(cuda_scaler.get_scale(), 4.0);
  EXPECT_EQ(cuda_scaler.growth_tracker(), 1);
}

// After a CUDA step has put the scale on the device, a step in which no parameter has a gradient
// records no device flag: update() must treat that as "no Inf" (it once read a null flag on the
// device: an illegal address that poisons the CUDA context).
TEST(CudaGradScaler, AStepWithoutGradientsStillUpdates) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  const optim::GradScalerOptions options{.init_scale = 8.0, .growth_interval = 2};
  optim::GradScaler cpu_scaler(options), cuda_scaler(options);
  Generator g(7);
  TwinParams p = make_params({{5}}, DType::f32, g);
  optim::SGD on_cpu(p.cpu, {.lr = 0.0}), on_cuda(p.cuda, {.lr = 0.0});
  set_random_grads(p, g);
  EXPECT_TRUE(cpu_scaler.step(on_cpu));
  EXPECT_TRUE(cuda_scaler.step(on_cuda));
  cpu_scaler.update();
  cuda_scaler.update();
  on_cpu.zero_grad();
  on_cuda.zero_grad();
  EXPECT_TRUE(cpu_scaler.step(on_cpu));
  EXPECT_TRUE(cuda_scaler.step(on_cuda));
  cpu_scaler.update();
  cuda_scaler.update();
  EXPECT_EQ(cuda_scaler.get_scale(), cpu_scaler.get_scale());
  EXPECT_EQ(cuda_scaler.get_scale(), 16.0);
  EXPECT_EQ(cuda_scaler.growth_tracker(), cpu_scaler.growth_tracker());
}

// ---- indexing
// -------------------------------------------------------------------------------------

TEST(CudaIndexing, EmbeddingBackwardSumsRepeatedIndices) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    Generator g(11);
    // 4097 tokens of width 33 over 5 rows in f32 (each row hit ~800 times); over 257 rows in
    // f16/bf16 (~16 times), whose sums round at every add in an order that differs from the CPU's.
    const int64_t rows = dtype == DType::f32 ? 5 : 257;
    const Tensor indices = randint(0, rows, {4097}, DType::i64, &g);
    const Tensor weight = randn({rows, 33}, DType::f32, &g).to(dtype);
    const Tensor upstream = randn({4097, 33}, DType::f32, &g).to(dtype);
    Tensor cpu_weight = weight.clone().requires_grad_();
    Tensor cuda_weight = weight.to(Device::cuda(0)).requires_grad_();
    sum(mul(embedding(indices, cpu_weight), upstream)).backward();
    sum(mul(embedding(indices.to(Device::cuda(0)), cuda_weight), upstream.to(Device::cuda(0))))
        .backward();
    ASSERT_TRUE(cuda_weight.grad().defined());
    // Atomics add in another order than the CPU: rounding differences only. In bf16 each of the
    // ~16 adds rounds at the partial sum's magnitude (up to ~8, where an ulp is 0.03), so a sum
    // that cancels towards 0 can be off by a few ulps of the partials: 0.15 (5e-2 failed 38 of 40
    // seeds in a host simulation of a random add order; 0.15 passed 50 of 50).
    const double tol = dtype == DType::f32 ? 1e-4 : dtype == DType::f16 ? 5e-2 : 0.15;
    EXPECT_EQ(mismatch(cuda_weight.grad(), cpu_weight.grad(), tol), "") << dtype_name(dtype);
  }
}

TEST(CudaIndexing, GatherAndIndexSelectBackwardsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  Generator g(13);
  const Tensor x = randn({7, 1023}, DType::f32, &g);
  const Tensor gather_index = randint(0, 1023, {7, 4097}, DType::i64, &g);
  const Tensor select_index = randint(0, 7, {9}, DType::i32, &g);
  Tensor cpu_x = x.clone().requires_grad_();
  Tensor cuda_x = x.to(Device::cuda(0)).requires_grad_();
  auto loss = [&](const Tensor& input, const Device& device) {
    const Tensor a = gather(input, 1, gather_index.to(device));
    const Tensor b = index_select(input, 0, select_index.to(device));
    return add(sum(mul(a, a)), sum(mul(b, b)));
  };
  loss(cpu_x, Device::cpu()).backward();
  loss(cuda_x, Device::cuda(0)).backward();
  EXPECT_EQ(mismatch(cuda_x.grad(), cpu_x.grad(), 1e-4), "");
}

TEST(CudaIndexing, OutOfRangeIndexIsAnEmberError) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  const Device cuda = Device::cuda(0);
  const Tensor weight = randn({5, 3}, TensorOptions(DType::f32, cuda));
  const Tensor bad =
      from_vector(std::vector<int64_t>{1, 4, 7, 0}, {4}, TensorOptions(DType::i64, cuda));
  std::string message = error_of([&] { embedding(bad, weight); });
  EXPECT_NE(message.find("embedding: index 7 (at position 2 of the index) is out of range for the "
                         "embedding table (num_embeddings) of size 5; valid indices are [0, 5)"),
            std::string::npos)
      << message;

  const Tensor negative =
      from_vector(std::vector<int64_t>{0, -1, 2}, {3}, TensorOptions(DType::i64, cuda))
          .to(DType::i32);
  message = error_of([&] { index_select(weight, 1, negative); });
  EXPECT_NE(message.find("index_select: index -1 (at position 1 of the index)"), std::string::npos)
      << message;

  message = error_of([&] { gather(weight, 0, full({2, 3}, 5, TensorOptions(DType::i64, cuda))); });
  EXPECT_NE(message.find("gather: index 5 (at position 0 of the index) is out of range"),
            std::string::npos)
      << message;

  // The device still works after the error (no device-side assert poisoned the context).
  EXPECT_EQ(sum(weight).to(Device::cpu()).dim(), 0);

  // An index left on the CPU is refused with the devices named.
  message =
      error_of([&] { embedding(from_vector(std::vector<int64_t>{0}, {1}, DType::i64), weight); });
  EXPECT_NE(message.find("embedding: expected every tensor on cuda:0"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace ember::testing
