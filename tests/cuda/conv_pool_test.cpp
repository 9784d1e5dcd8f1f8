// The CUDA path of the layers a ResNet9 needs beyond elementwise ops and GEMM, against the CPU:
// conv2d through cuDNN (forward, gradients of input / weight / bias, the algorithm cache),
// batch_norm (output, gradients, running statistics), pooling gradients, the reductions' special
// values and long rows, and the errors for tensors on different devices.
//
// Without a visible GPU every test here skips. The op cases of tests/common compare forward values
// (tests/cuda/cuda_test.cpp); this file checks what they cannot: backward passes and state.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <functional>
#include <iostream>
#include <limits>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "nn/models.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/op_cases.h"
#include "tests/cuda/support.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/cudnn_conv.h"
#endif

namespace ember::testing {
namespace {

const std::vector<DType> kFloating = {DType::f32, DType::f64, DType::f16, DType::bf16};

// CUDA-vs-CPU tolerance for the long sums of this file (convolutions through cuDNN, batch norm
// statistics, pooling gradients, long reduction rows): twice cuda_tolerance in f16 and bf16 and
// 10x in f32 (100x in f64), because cuDNN and the reductions sum thousands of terms (a weight
// gradient) in another order than the CPU; 16-bit types stay about a rounding of the result.
double long_sum_tolerance(DType dtype) {
  switch (dtype) {
    case DType::f16:
      return 4e-3;
    case DType::bf16:
      return 2e-2;
    case DType::f64:
      return 1e-10;
    default:
      return 1e-4;
  }
}

struct ForwardBackward {
  Tensor output;
  std::vector<Tensor> grads;  // undefined where no gradient was asked for
};

// f on copies of `host_inputs` on `device` (leaves; those flagged in wants_grad require grad),
// then backward of sum(f * distinct weights).
ForwardBackward run_on(Device device, const std::vector<Tensor>& host_inputs,
                       const std::vector<bool>& wants_grad,
                       const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  std::vector<Tensor> leaves;
  for (size_t i = 0; i < host_inputs.size(); ++i) {
    Tensor leaf = host_inputs[i].defined() ? host_inputs[i].to(device).detach() : Tensor();
    if (leaf.defined() && wants_grad[i]) leaf.requires_grad_();
    leaves.push_back(leaf);
  }
  ForwardBackward result;
  result.output = f(leaves);
  sum(result.output * distinct_weights(result.output)).backward();
  for (size_t i = 0; i < leaves.size(); ++i)
    result.grads.push_back(leaves[i].defined() && wants_grad[i] ? leaves[i].grad() : Tensor());
  return result;
}

void expect_forward_backward_match(const std::string& what, const std::vector<Tensor>& inputs,
                                   const std::vector<bool>& wants_grad,
                                   const std::function<Tensor(const std::vector<Tensor>&)>& f,
                                   double tol) {
  const ForwardBackward cpu = run_on(Device::cpu(), inputs, wants_grad, f);
  const ForwardBackward cuda = run_on(Device::cuda(0), inputs, wants_grad, f);
  ASSERT_TRUE(cuda.output.is_cuda()) << what;
  std::string error = mismatch(cuda.output, cpu.output, tol);
  EXPECT_TRUE(error.empty()) << what << ", output: " << error;
  for (size_t i = 0; i < cpu.grads.size(); ++i) {
    if (!cpu.grads[i].defined()) continue;
    ASSERT_TRUE(cuda.grads[i].defined()) << what << ": no gradient for input " << i << " on CUDA";
    EXPECT_TRUE(cuda.grads[i].is_cuda()) << what << ", gradient " << i;
    // Norm-wise: resnet9_layer's f32 weight gradient sums 4096 products, up to 189, with
    // elements near 0.05 beside them; CPU f32 against f64 used 0.68 of an element-wise 1e-4.
    error = mismatch_normwise(cuda.grads[i], cpu.grads[i], tol);
    EXPECT_TRUE(error.empty()) << what << ", gradient of input " << i << ": " << error;
  }
}

#if EMBER_WITH_CUDA
// The output and the input and weight gradients of one run on the GPU, as doubles in one vector:
// two runs of a deterministic choice give equal vectors.
std::vector<double> gpu_run_values(const std::vector<Tensor>& inputs,
                                   const std::vector<bool>& wants_grad,
                                   const std::function<Tensor(const std::vector<Tensor>&)>& f) {
  const ForwardBackward result = run_on(Device::cuda(0), inputs, wants_grad, f);
  std::vector<double> values;
  for (const Tensor& t : {result.output, result.grads[0], result.grads[1]}) {
    const std::vector<double> v = to_vector<double>(t.to(Device::cpu()).to(DType::f64));
    values.insert(values.end(), v.begin(), v.end());
  }
  return values;
}
#endif

// ---- conv2d ------------------------------------------------------------------------------------

struct ConvCase {
  std::string name;
  Shape input, weight;
  bool bias;
  Conv2dOptions options;
};

// resnet9's 3x3 / padding 1 at its first layer's size (batch 4), a strided grouped one, a dilated
// one, a pointwise one, and one pixel.
std::vector<ConvCase> conv_cases() {
  return {
      {"resnet9_layer", {4, 16, 32, 32}, {32, 16, 3, 3}, true, {.padding = 1}},
      {"stride2_groups2",
       {3, 8, 13, 11},
       {6, 4, 3, 3},
       true,
       {.stride = 2, .padding = 1, .groups = 2}},
      {"dilation2_no_bias", {2, 3, 12, 9}, {5, 3, 3, 2}, false, {.padding = 2, .dilation = 2}},
      {"pointwise", {5, 7, 6, 6}, {9, 7, 1, 1}, true, {}},
      {"one_pixel", {2, 3, 1, 1}, {4, 3, 1, 1}, true, {}},
  };
}

TEST(CudaConvPool, Conv2dGradientsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  const std::vector<ConvCase> cases = conv_cases();
  Generator generator(21);
  for (const ConvCase& c : cases) {
    for (DType dtype : kFloating) {
      const std::vector<Tensor> inputs = {
          uniform(c.input, -1.0, 1.0, dtype, &generator),
          uniform(c.weight, -1.0, 1.0, dtype, &generator),
          c.bias ? uniform({c.weight[0]}, -1.0, 1.0, dtype, &generator) : Tensor()};
      expect_forward_backward_match(
          "conv2d/" + c.name + " in " + dtype_name(dtype), inputs, {true, true, c.bias},
          [&](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], c.options); },
          long_sum_tolerance(dtype));
    }
  }
}

#if EMBER_WITH_CUDA
// PyTorch's torch.backends.cudnn.allow_tf32 (its default): f32 convolutions round their inputs to
// TF32 (10-bit mantissa). The result stays close to the exact f32 one, the choice of algorithm is
// made apart (it is cached per math), and the switch is ember's, off unless asked.
TEST(CudaConvPool, Conv2dWithTf32AllowedStaysCloseToTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  if (!kernels::cuda::cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  EXPECT_FALSE(conv_allow_tf32());
  // A process-wide switch: put back even when a convolution throws, or every later f32 test
  // runs with TF32.
  struct AllowTf32 {
    AllowTf32() { set_conv_allow_tf32(true); }
    ~AllowTf32() { set_conv_allow_tf32(false); }
  };
  Generator generator(22);
  // resnet9's layer shape at batch 4; a geometry of its own (17 x 15), so that both searches
  // below are misses.
  const std::vector<Tensor> inputs = {uniform({4, 16, 17, 15}, -1.0, 1.0, DType::f32, &generator),
                                      uniform({32, 16, 3, 3}, -1.0, 1.0, DType::f32, &generator),
                                      uniform({32}, -1.0, 1.0, DType::f32, &generator)};
  const auto conv = [](const std::vector<Tensor>& in) {
    return conv2d(in[0], in[1], in[2], {.padding = 1});
  };
  expect_forward_backward_match("conv2d f32, exact", inputs, {true, true, true}, conv,
                                long_sum_tolerance(DType::f32));
  const int64_t searches = kernels::cuda::cudnn_conv_algorithm_searches();
  {
    const AllowTf32 allowed;
    // TF32 keeps 10 mantissa bits: about 2^-11 relative per input, sqrt(144) products adding up
    // in the forward (~2e-3 absolute at outputs near 4) and sqrt(4 * 17 * 15) in the weight
    // gradient; 3e-2, as for TF32 matrix products (tests/cuda/gemm_test.cpp).
    expect_forward_backward_match("conv2d f32 with TF32", inputs, {true, true, true}, conv, 3e-2);
  }
  EXPECT_EQ(kernels::cuda::cudnn_conv_algorithm_searches(), searches + 3)
      << "forward, backward data and backward filter are chosen again for TF32 math";
  EXPECT_FALSE(conv_allow_tf32());
}

// PyTorch's default, torch.backends.cudnn.deterministic = False: the heuristics' first choice,
// which may add with atomics. Still the CPU's result within the same tolerance, in every dtype.
TEST(CudaConvPool, Conv2dWithTheHeuristicsFirstChoiceMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  if (!kernels::cuda::cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  EXPECT_TRUE(conv_deterministic());
  struct AnyAlgorithm {  // a process-wide switch: put back whatever happens
    AnyAlgorithm() { set_conv_deterministic(false); }
    ~AnyAlgorithm() { set_conv_deterministic(true); }
  };
  const AnyAlgorithm any;
  Generator generator(24);
  for (DType dtype : kFloating) {
    const std::vector<Tensor> inputs = {uniform({8, 16, 16, 16}, -1.0, 1.0, dtype, &generator),
                                        uniform({32, 16, 3, 3}, -1.0, 1.0, dtype, &generator),
                                        Tensor()};
    expect_forward_backward_match(
        std::string("conv2d, any algorithm, in ") + dtype_name(dtype), inputs, {true, true, false},
        [](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], {.padding = 1}); },
        long_sum_tolerance(dtype));
  }
}

// torch.backends.cudnn.benchmark: each algorithm is run once and the fastest deterministic one
// taken. The CPU's result within the same tolerance, in every dtype; each direction is measured
// once per shape (a cache of its own beside the heuristics' choices), and the measured choice is
// deterministic: the same inputs give the same bits again.
TEST(CudaConvPool, Conv2dWithMeasuredAlgorithmsMatchesTheCpuAndRepeatsItsBits) {
  EMBER_SKIP_WITHOUT_GPU();
  if (!kernels::cuda::cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  EXPECT_FALSE(conv_benchmark());
  struct Measure {  // a process-wide switch: put back whatever happens
    Measure() { set_conv_benchmark(true); }
    ~Measure() { set_conv_benchmark(false); }
  };
  const Measure measure;
  Generator generator(26);
  const auto conv = [](const std::vector<Tensor>& in) {
    return conv2d(in[0], in[1], in[2], {.padding = 1});
  };
  for (DType dtype : kFloating) {
    // A geometry of its own (13 x 11, 24 channels), so that the three choices are misses.
    const std::vector<Tensor> inputs = {uniform({6, 24, 13, 11}, -1.0, 1.0, dtype, &generator),
                                        uniform({40, 24, 3, 3}, -1.0, 1.0, dtype, &generator),
                                        Tensor()};
    const int64_t searches = kernels::cuda::cudnn_conv_algorithm_searches();
    expect_forward_backward_match(
        std::string("conv2d, measured algorithms, in ") + dtype_name(dtype), inputs,
        {true, true, false}, conv, long_sum_tolerance(dtype));
    EXPECT_EQ(kernels::cuda::cudnn_conv_algorithm_searches(), searches + 3)
        << "forward, backward data and backward filter, each measured once in "
        << dtype_name(dtype);
    // Twice more on the GPU, the measured choices cached: the same bits.
    const std::vector<double> first_run = gpu_run_values(inputs, {true, true, false}, conv);
    const std::vector<double> second_run = gpu_run_values(inputs, {true, true, false}, conv);
    EXPECT_EQ(kernels::cuda::cudnn_conv_algorithm_searches(), searches + 3);
    EXPECT_EQ(first_run, second_run)
        << "the measured choice in " << dtype_name(dtype) << " gave other bits the second time";
  }
}

// The graph API on (and the policy's benchmark, if asked) for a test's lifetime: process-wide
// switches, put back whatever happens.
class GraphApiOn {
 public:
  explicit GraphApiOn(bool benchmark) : benchmark_(benchmark) {
    set_conv_graph_api(true);
    if (benchmark_) set_conv_benchmark(true);
  }
  ~GraphApiOn() {
    if (benchmark_) set_conv_benchmark(false);
    set_conv_graph_api(false);
  }
  GraphApiOn(const GraphApiOn&) = delete;
  GraphApiOn& operator=(const GraphApiOn&) = delete;

 private:
  bool benchmark_;
};

// The graph API (set_conv_graph_api, EMBER_CUDNN_GRAPH=1), the path PyTorch takes to cuDNN. Every
// geometry of Conv2dGradientsMatchTheCpu, in every dtype, gives the CPU's result within the same
// tolerance. resnet9's layer runs on graph plans in f32, f16 and bf16 (no fallback to the
// v7-style path there; f64 and the odd geometries may fall back, which the log line counts), the
// cached plans give the same bits again, and TF32 through the graph API stays close.
TEST(CudaConvPool, Conv2dThroughTheGraphApiMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  if (!kernels::cuda::cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  EXPECT_FALSE(conv_graph_api());
  const GraphApiOn graph(/*benchmark=*/false);
  const std::vector<ConvCase> cases = conv_cases();
  Generator generator(27);
  std::ostringstream fallbacks;
  for (const ConvCase& c : cases) {
    for (DType dtype : kFloating) {
      const int64_t built = kernels::cuda::cudnn_conv_graph_plans_built();
      const int64_t fell_back = kernels::cuda::cudnn_conv_graph_fallbacks();
      const std::vector<Tensor> inputs = {
          uniform(c.input, -1.0, 1.0, dtype, &generator),
          uniform(c.weight, -1.0, 1.0, dtype, &generator),
          c.bias ? uniform({c.weight[0]}, -1.0, 1.0, dtype, &generator) : Tensor()};
      const auto conv = [&](const std::vector<Tensor>& in) {
        return conv2d(in[0], in[1], in[2], c.options);
      };
      const std::string what =
          "conv2d through the graph API/" + c.name + " in " + dtype_name(dtype);
      expect_forward_backward_match(what, inputs, {true, true, c.bias}, conv,
                                    long_sum_tolerance(dtype));
      const int64_t new_plans = kernels::cuda::cudnn_conv_graph_plans_built() - built;
      const int64_t new_fallbacks = kernels::cuda::cudnn_conv_graph_fallbacks() - fell_back;
      EXPECT_EQ(new_plans + new_fallbacks, 3) << what << ": one choice per direction";
      if (new_fallbacks > 0)
        fallbacks << " " << c.name << "/" << dtype_name(dtype) << ":" << new_fallbacks;
      if (c.name == "resnet9_layer" && dtype != DType::f64) {
        EXPECT_EQ(new_fallbacks, 0)
            << what << " took the v7-style path (EMBER_CUDNN_LOG=1 says why)";
        // Twice more, the plans cached: the same bits.
        const std::vector<double> first_run = gpu_run_values(inputs, {true, true, true}, conv);
        const std::vector<double> second_run = gpu_run_values(inputs, {true, true, true}, conv);
        EXPECT_EQ(first_run, second_run) << what << ": other bits the second time";
      }
    }
  }
  std::cout << "graph API fallbacks to the v7-style path:"
            << (fallbacks.str().empty() ? " none" : fallbacks.str()) << std::endl;
  // TF32 through the graph API: a problem of its own, close to the exact result (as in
  // Conv2dWithTf32AllowedStaysCloseToTheCpu).
  struct AllowTf32 {
    AllowTf32() { set_conv_allow_tf32(true); }
    ~AllowTf32() { set_conv_allow_tf32(false); }
  };
  const AllowTf32 tf32;
  const std::vector<Tensor> inputs = {uniform({4, 16, 17, 15}, -1.0, 1.0, DType::f32, &generator),
                                      uniform({32, 16, 3, 3}, -1.0, 1.0, DType::f32, &generator),
                                      uniform({32}, -1.0, 1.0, DType::f32, &generator)};
  const int64_t built = kernels::cuda::cudnn_conv_graph_plans_built();
  expect_forward_backward_match(
      "conv2d f32 with TF32 through the graph API", inputs, {true, true, true},
      [](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], {.padding = 1}); },
      3e-2);
  EXPECT_EQ(kernels::cuda::cudnn_conv_graph_plans_built(), built + 3);
}

// The graph API with the policy's benchmark (PyTorch's cudnn.benchmark on its v8 path): the plans
// timed once each and the fastest deterministic one taken; the CPU's result, and the same bits
// again from the cached choice.
TEST(CudaConvPool, Conv2dThroughTheGraphApiWithMeasuredPlansMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  if (!kernels::cuda::cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  const GraphApiOn measured(/*benchmark=*/true);
  Generator generator(28);
  const auto conv = [](const std::vector<Tensor>& in) {
    return conv2d(in[0], in[1], in[2], {.padding = 1});
  };
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const std::vector<Tensor> inputs = {uniform({6, 24, 13, 11}, -1.0, 1.0, dtype, &generator),
                                        uniform({40, 24, 3, 3}, -1.0, 1.0, dtype, &generator),
                                        Tensor()};
    const int64_t built = kernels::cuda::cudnn_conv_graph_plans_built();
    const std::string what = std::string("conv2d, measured graph plans, in ") + dtype_name(dtype);
    expect_forward_backward_match(what, inputs, {true, true, false}, conv,
                                  long_sum_tolerance(dtype));
    EXPECT_EQ(kernels::cuda::cudnn_conv_graph_plans_built(), built + 3) << what;
    const std::vector<double> first_run = gpu_run_values(inputs, {true, true, false}, conv);
    const std::vector<double> second_run = gpu_run_values(inputs, {true, true, false}, conv);
    EXPECT_EQ(kernels::cuda::cudnn_conv_graph_plans_built(), built + 3) << what << ": cached";
    EXPECT_EQ(first_run, second_run) << what << ": other bits the second time";
  }
}

// The graph API with the policy's benchmark on threads alive together, each on a cuDNN handle of
// its own (DataParallel's replicas): the plans are timed once per problem, every other handle
// builds the plan measured fastest, and every thread gets the same bits. (Timed per handle, two
// threads could take two engines, whose sums round differently.)
TEST(CudaConvPool, Conv2dThroughTheGraphApiWithMeasuredPlansRunsOneEngineOnEveryThread) {
  EMBER_SKIP_WITHOUT_GPU();
  if (!kernels::cuda::cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  const GraphApiOn measured(/*benchmark=*/true);
  Generator generator(29);
  // A geometry no other test uses (17 x 9, 20 -> 36 channels), so that every direction is a miss.
  const std::vector<Tensor> inputs = {
      uniform({5, 20, 17, 9}, -1.0, 1.0, DType::bf16, &generator).to(Device::cuda(0)),
      uniform({36, 20, 3, 3}, -1.0, 1.0, DType::bf16, &generator).to(Device::cuda(0))};
  const Tensor warm_x = ones({1, 3, 8, 8}, TensorOptions(DType::f32, Device::cuda(0)));
  const Tensor warm_w = ones({4, 3, 3, 3}, TensorOptions(DType::f32, Device::cuda(0)));
  constexpr int kThreads = 3;
  std::vector<std::string> errors(kThreads);
  std::vector<std::vector<double>> results(kThreads);
  std::mutex mutex;
  std::condition_variable changed;
  int holding_a_handle = 0;
  bool go = false;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        // Each thread takes its handle (a convolution of another geometry), then waits for the
        // others to hold theirs and for the counters to be read.
        conv2d(warm_x, warm_w, Tensor(), {.padding = 1});
        {
          std::unique_lock<std::mutex> lock(mutex);
          ++holding_a_handle;
          changed.notify_all();
          changed.wait(lock, [&] { return go; });
        }
        const Tensor x = inputs[0].clone().requires_grad_();
        const Tensor w = inputs[1].clone().requires_grad_();
        const Tensor y = conv2d(x, w, Tensor(), {.padding = 1});
        sum(y * y).backward();
        for (const Tensor& value : {y, x.grad(), w.grad()}) {
          const std::vector<double> values = to_vector<double>(value.to(Device::cpu()));
          results[t].insert(results[t].end(), values.begin(), values.end());
        }
      } catch (const std::exception& error) {
        errors[t] = error.what();
        const std::lock_guard<std::mutex> lock(mutex);
        ++holding_a_handle;  // so that the others are not held back
        changed.notify_all();
      }
    });
  }
  int64_t measured_before = 0, built_before = 0;
  {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return holding_a_handle == kThreads; });
    measured_before = kernels::cuda::cudnn_conv_graph_measurements();
    built_before = kernels::cuda::cudnn_conv_graph_plans_built();
    go = true;
    changed.notify_all();
  }
  for (std::thread& thread : threads)
    thread.join();
  for (const std::string& error : errors)
    ASSERT_EQ(error, "");
  EXPECT_EQ(kernels::cuda::cudnn_conv_graph_measurements(), measured_before + 3)
      << "forward, backward data and backward filter, each timed once for " << kThreads
      << " threads";
  EXPECT_EQ(kernels::cuda::cudnn_conv_graph_plans_built(), built_before + 3 * kThreads)
      << "a plan per direction on each thread's handle";
  for (int t = 1; t < kThreads; ++t)
    EXPECT_EQ(results[t], results[0]) << "thread " << t << " got other bits than thread 0";
}

TEST(CudaConvPool, Conv2dChoosesEachAlgorithmOnce) {
  EMBER_SKIP_WITHOUT_GPU();
  if (!kernels::cuda::cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  // A geometry no other test uses, so that the first call is a miss.
  const TensorOptions options(DType::f32, Device::cuda(0));
  const Tensor x = ones({1, 3, 13, 17}, options).requires_grad_();
  const Tensor w = ones({5, 3, 3, 3}, options).requires_grad_();
  const int64_t before = kernels::cuda::cudnn_conv_algorithm_searches();
  Tensor y = conv2d(x, w, Tensor(), {.padding = Size2(1, 2)});
  EXPECT_EQ(kernels::cuda::cudnn_conv_algorithm_searches(), before + 1);  // forward
  y = conv2d(x, w, Tensor(), {.padding = Size2(1, 2)});
  EXPECT_EQ(kernels::cuda::cudnn_conv_algorithm_searches(), before + 1);  // cached
  sum(y).backward();
  EXPECT_EQ(kernels::cuda::cudnn_conv_algorithm_searches(), before + 3);  // data + filter
  sum(conv2d(x, w, Tensor(), {.padding = Size2(1, 2)})).backward();
  EXPECT_EQ(kernels::cuda::cudnn_conv_algorithm_searches(), before + 3);  // all cached
  // Another dtype is another problem.
  conv2d(x.detach().to(DType::f16), w.detach().to(DType::f16), Tensor(), {.padding = Size2(1, 2)});
  EXPECT_EQ(kernels::cuda::cudnn_conv_algorithm_searches(), before + 4);
  // The values: every output is the count of in-bounds taps times 1.
  // y (1, 5, 13, 19): output (6, 8) of channel 0 sees all 27 taps inside the input.
  EXPECT_DOUBLE_EQ(to_vector<double>(y.to(Device::cpu()))[6 * 19 + 8], 27.0);
}

// DataParallel's replicas on one GPU meet each problem together on their first batch: they
// make one choice per direction between them, not one each (cudnn_conv.cpp, choice_mutex).
TEST(CudaConvPool, ThreadsMeetingANewProblemTogetherChooseOnce) {
  EMBER_SKIP_WITHOUT_GPU();
  if (!kernels::cuda::cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  // A geometry no other test uses (19 x 11, padding 2), so that every direction is a miss.
  const TensorOptions options(DType::f32, Device::cuda(0));
  const Tensor x = ones({2, 3, 19, 11}, options), w = ones({4, 3, 3, 3}, options);
  const int64_t before = kernels::cuda::cudnn_conv_algorithm_searches();
  constexpr int kReplicas = 4;
  std::vector<std::string> errors(kReplicas);
  std::vector<std::thread> replicas;
  for (int r = 0; r < kReplicas; ++r) {
    replicas.emplace_back([&, r] {
      try {
        const Tensor xr = x.clone().requires_grad_(), wr = w.clone().requires_grad_();
        sum(conv2d(xr, wr, Tensor(), {.padding = 2})).backward();
      } catch (const std::exception& error) {
        errors[r] = error.what();
      }
    });
  }
  for (std::thread& replica : replicas)
    replica.join();
  for (const std::string& error : errors)
    EXPECT_EQ(error, "");
  EXPECT_EQ(kernels::cuda::cudnn_conv_algorithm_searches(), before + 3)
      << "forward, backward data and backward filter, each chosen once for " << kReplicas
      << " threads";
}

// Threads that come and go (DataParallel's replicas) reuse the cuDNN handles of ended threads.
TEST(CudaConvPool, ThreadsThatEndGiveTheirCudnnHandleBack) {
  EMBER_SKIP_WITHOUT_GPU();
  if (!kernels::cuda::cudnn_available()) GTEST_SKIP() << "this build has no cuDNN";
  const TensorOptions options(DType::f32, Device::cuda(0));
  const Tensor x = ones({1, 3, 8, 8}, options), w = ones({4, 3, 3, 3}, options);
  const auto convolve_on_a_new_thread = [&] {
    std::thread thread([&] { conv2d(x, w, Tensor(), {.padding = 1}); });
    thread.join();
  };
  convolve_on_a_new_thread();
  const int64_t before = kernels::cuda::cudnn_handles_created();
  for (int i = 0; i < 10; ++i)
    convolve_on_a_new_thread();
  EXPECT_EQ(kernels::cuda::cudnn_handles_created(), before) << "each thread made a handle";
}

TEST(CudaConvPool, Conv2dWithoutCudnnSaysThatTheBuildHasNone) {
  EMBER_SKIP_WITHOUT_GPU();
  if (kernels::cuda::cudnn_available()) GTEST_SKIP() << "this build has cuDNN";
  const TensorOptions options(DType::f32, Device::cuda(0));
  const std::string message = error_of([&] {
    conv2d(ones({1, 2, 5, 5}, options), ones({3, 2, 3, 3}, options), {}, {});
  });
  EXPECT_NE(message.find("this build of ember has no cuDNN"), std::string::npos) << message;
  EXPECT_NE(message.find("CUDNN_ROOT"), std::string::npos) << message;
}
#endif

TEST(CudaConvPool, Conv2dOnAViewStartingInsideItsStorage) {
  EMBER_SKIP_WITHOUT_GPU();
  // Batch item 1 of an f16 (3, 3, 5, 5) tensor starts 150 bytes in: not 16-byte aligned, which
  // cuDNN's vectorised kernels need (the runtime copies such inputs first).
  Generator generator(5);
  const Tensor whole = uniform({3, 3, 5, 5}, -1.0, 1.0, DType::f16, &generator);
  const Tensor w = uniform({4, 3, 3, 3}, -1.0, 1.0, DType::f16, &generator);
  const Tensor cpu = conv2d(whole.narrow(0, 1, 2), w, Tensor(), {.padding = 1});
  const Tensor cuda = conv2d(whole.to(Device::cuda(0)).narrow(0, 1, 2), w.to(Device::cuda(0)),
                             Tensor(), {.padding = 1});
  EXPECT_EQ(mismatch(cuda, cpu, long_sum_tolerance(DType::f16)), "");
}

TEST(CudaConvPool, Conv2dSaysWhichTensorIsOnAnotherDevice) {
  EMBER_SKIP_WITHOUT_GPU();
  const Tensor x = ones({1, 2, 5, 5}, TensorOptions(DType::f32, Device::cuda(0)));
  const Tensor w = ones({3, 2, 3, 3});
  std::string message = error_of([&] { conv2d(x, w, Tensor(), {}); });
  EXPECT_NE(message.find("conv2d: expected the input, weight and bias on the same device"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  EXPECT_NE(message.find("weight is"), std::string::npos) << message;
  message = error_of([&] { conv2d(x, w.to(Device::cuda(0)), ones({3}), {}); });
  EXPECT_NE(message.find("bias is"), std::string::npos) << message;
}

// ---- batch_norm --------------------------------------------------------------------------------

// batch_norm's weight gradient in training, dw[c] = rstd[c] * sum(g * (x - mean[c])), is
// ill-conditioned in the mean: the two devices sum the same values in another order, so their
// means differ by a few ulps d, and that moves dw[c] by rstd[c] * d * sum(g). With x in [3, 5]
// and g = distinct_weights (about 1.8), that is about 1.5e-6 per value of the channel (0.025 at
// 16384 values), while dw itself is about sqrt(count) / 2, because sum(x - mean) is 0. A host
// replay of the kernels (2026-11-27) put the CUDA and the CPU results equally far from the exact
// one, and 6 of the 8 shapes below beyond 1e-4 of each other. So dw may differ by 8 ulps of the
// mean's worth on top of `tol`; a wrong index moves it by about |g * x_hat|, 2 per value.
std::string weight_gradient_mismatch(const Tensor& cuda_dw, const Tensor& cpu_dw, const Tensor& x,
                                     double tol) {
  const Shape& shape = x.sizes();  // (N, C, *), contiguous
  const int64_t batch = shape[0], channels = shape[1], plane = x.numel() / (batch * channels);
  const std::vector<double> values = to_vector<double>(x.to(DType::f64));
  const std::vector<double> g = to_vector<double>(distinct_weights(x).to(DType::f64));
  const double mean_ulp = x.dtype() == DType::f64 ? 0x1p-52 : 0x1p-23;  // relative: f32 sums
  const std::vector<double> actual = to_vector<double>(cuda_dw.to(Device::cpu()).to(DType::f64));
  const std::vector<double> expected = to_vector<double>(cpu_dw.to(DType::f64));
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0, sum_squares = 0, sum_g = 0;
    for (int64_t n = 0; n < batch; ++n) {
      for (int64_t i = 0; i < plane; ++i) {
        const size_t at = static_cast<size_t>((n * channels + c) * plane + i);
        sum += values[at];
        sum_squares += values[at] * values[at];
        sum_g += std::abs(g[at]);
      }
    }
    const double count = static_cast<double>(batch * plane);
    const double mean = sum / count, variance = std::max(sum_squares / count - mean * mean, 0.0);
    const double rstd = 1.0 / std::sqrt(variance + 1e-5);
    const double slack = 8 * mean_ulp * std::abs(mean) * rstd * sum_g;
    const double a = actual[static_cast<size_t>(c)], e = expected[static_cast<size_t>(c)];
    if (!(std::abs(a - e) <= tol * (std::abs(e) + 1.0) + slack)) {
      return "channel " + std::to_string(c) + ": cuda " + std::to_string(a) + ", cpu " +
             std::to_string(e) + " (tolerance " + std::to_string(tol) + " relative + " +
             std::to_string(slack) + ")";
    }
  }
  return "";
}

TEST(CudaConvPool, BatchNormGradientsAndRunningStatisticsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  // (N, C) as batch_norm1d, a count below one block, resnet9's (N, C, 32, 32) at batch 8 (8192
  // values per channel), and batch 1; counts over one block with planes under it ({600, 4},
  // {16, 4, 7, 7}); several blocks per channel (splits, batch_norm_plan.h) with 16-byte vectors
  // ({64, 3, 16, 16}) and with planes that cannot be read by vectors ({37, 3, 9, 11}); and 75
  // to 150 splits, more than a warp has lanes: the finalize kernel's walk ({600, 1, 16, 16}).
  const std::vector<Shape> shapes = {{33, 5},         {8, 16, 9, 7},  {8, 4, 32, 32},
                                     {1, 3, 5, 7},    {600, 4},       {16, 4, 7, 7},
                                     {64, 3, 16, 16}, {37, 3, 9, 11}, {600, 1, 16, 16}};
  Generator generator(8);
  for (const Shape& shape : shapes) {
    const int64_t channels = shape[1];
    for (DType dtype : kFloating) {
      // 16-bit activations with 16-bit parameters, and with f32 ones (autocast's case).
      std::vector<DType> parameter_dtypes = {dtype};
      if (dtype == DType::f16 || dtype == DType::bf16) parameter_dtypes.push_back(DType::f32);
      for (DType parameter_dtype : parameter_dtypes) {
        for (bool training : {true, false}) {
          const std::string what = "batch_norm " + shape_str(shape) + " in " + dtype_name(dtype) +
                                   " with " + dtype_name(parameter_dtype) + " parameters" +
                                   (training ? ", training" : ", eval");
          // A large mean: the variance must not lose it to cancellation.
          const Tensor x = uniform(shape, 3.0, 5.0, dtype, &generator);
          const Tensor weight = uniform({channels}, 0.5, 1.5, parameter_dtype, &generator);
          const Tensor bias = uniform({channels}, -1.0, 1.0, parameter_dtype, &generator);
          const Tensor mean0 = uniform({channels}, -0.5, 0.5, DType::f32, &generator);
          const Tensor var0 = uniform({channels}, 0.5, 2.0, DType::f32, &generator);
          Tensor cpu_mean = mean0.clone(), cpu_var = var0.clone();
          Tensor cuda_mean = mean0.to(Device::cuda(0)), cuda_var = var0.to(Device::cuda(0));
          const ForwardBackward cpu = run_on(Device::cpu(), {x, weight, bias}, {true, true, true},
                                             [&](const std::vector<Tensor>& in) {
                                               return batch_norm(in[0], cpu_mean, cpu_var, in[1],
                                                                 in[2], training, 0.1, 1e-5);
                                             });
          const uint32_t mean_version = cuda_mean.version(), var_version = cuda_var.version();
          const ForwardBackward cuda = run_on(
              Device::cuda(0), {x, weight, bias}, {true, true, true},
              [&](const std::vector<Tensor>& in) {
                return batch_norm(in[0], cuda_mean, cuda_var, in[1], in[2], training, 0.1, 1e-5);
              });
          const double tol = long_sum_tolerance(dtype);
          std::string error = mismatch(cuda.output, cpu.output, tol);
          EXPECT_TRUE(error.empty()) << what << ", output: " << error;
          for (size_t i = 0; i < 3; ++i) {
            error = i == 1 && training
                        ? weight_gradient_mismatch(cuda.grads[i], cpu.grads[i], x, tol)
                        : mismatch(cuda.grads[i], cpu.grads[i], tol);
            EXPECT_TRUE(error.empty()) << what << ", gradient " << i << ": " << error;
          }
          error = mismatch(cuda_mean, cpu_mean, 1e-5);
          EXPECT_TRUE(error.empty()) << what << ", running_mean: " << error;
          error = mismatch(cuda_var, cpu_var, 1e-5);
          EXPECT_TRUE(error.empty()) << what << ", running_var: " << error;
          // Written in place in training (by the finalize kernel), as on the CPU.
          EXPECT_EQ(cuda_mean.version() != mean_version, training) << what;
          EXPECT_EQ(cuda_var.version() != var_version, training) << what;
        }
      }
    }
  }
}

// batch_norm_relu against the CPU, forward and backward (CudaOpCaseTest compares its forward
// only, and tests/cuda/batch_norm_relu_test.cpp the fused layers with the two apart on the GPU):
// every dtype, training and eval, planes the kernels read by 16-byte vectors and planes they
// cannot. x is 2 + d in the first half of the batch and 2 - d in the second, for the same d, a
// multiple of 1/8 in [1/4, 2]: every value is exact in every dtype and every partial sum of them
// in f32, so the batch mean is exactly 2 on both devices, and no value comes near 0 before the
// ReLU (|w x_hat| >= 0.06, the bias below 0.02; the sign is taken in f32, before rounding). ReLU
// then masks the same elements on both: one within rounding of 0 could be masked on one device
// and not on the other.
TEST(CudaConvPool, BatchNormReluGradientsAndRunningStatisticsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  // 16 x 14 = 224 values a plane: 16-byte vectors in every dtype; 7 x 9 = 63: one at a time;
  // (16, 2, 32, 32): several blocks per channel.
  const std::vector<Shape> shapes = {{8, 3, 16, 14}, {6, 5, 7, 9}, {16, 2, 32, 32}};
  Generator generator(31);
  for (const Shape& shape : shapes) {
    const int64_t channels = shape[1];
    Shape half = shape;
    half[0] /= 2;
    for (DType dtype : kFloating) {
      for (bool training : {true, false}) {
        const std::string what = "batch_norm_relu " + shape_str(shape) + " in " +
                                 dtype_name(dtype) + (training ? ", training" : ", eval");
        const Tensor d = randint(2, 17, half, DType::f64, &generator) / 8.0;
        const Tensor x = cat({2.0 + d, 2.0 - d}, 0).to(dtype);
        const Tensor weight = uniform({channels}, 0.5, 1.5, dtype, &generator);
        const Tensor bias = uniform({channels}, -0.02, 0.02, dtype, &generator);
        const Tensor mean0 = full({channels}, 2.0, DType::f32);
        const Tensor var0 = uniform({channels}, 0.5, 2.0, DType::f32, &generator);
        Tensor cpu_mean = mean0.clone(), cpu_var = var0.clone();
        Tensor cuda_mean = mean0.to(Device::cuda(0)), cuda_var = var0.to(Device::cuda(0));
        const ForwardBackward cpu =
            run_on(Device::cpu(), {x, weight, bias}, {true, true, true},
                   [&](const std::vector<Tensor>& in) {
                     return batch_norm_relu(in[0], cpu_mean, cpu_var, in[1], in[2], training);
                   });
        const ForwardBackward cuda =
            run_on(Device::cuda(0), {x, weight, bias}, {true, true, true},
                   [&](const std::vector<Tensor>& in) {
                     return batch_norm_relu(in[0], cuda_mean, cuda_var, in[1], in[2], training);
                   });
        const double tol = long_sum_tolerance(dtype);
        std::string error = mismatch(cuda.output, cpu.output, tol);
        EXPECT_TRUE(error.empty()) << what << ", output: " << error;
        const std::vector<double> output = to_vector<double>(cpu.output.to(DType::f64));
        const auto zeros_out = std::count(output.begin(), output.end(), 0.0);
        EXPECT_GT(zeros_out, 0) << what << ": ReLU masked nothing";
        EXPECT_LT(zeros_out, static_cast<std::ptrdiff_t>(output.size())) << what;
        for (size_t i = 0; i < 3; ++i) {
          error = mismatch(cuda.grads[i], cpu.grads[i], tol);
          EXPECT_TRUE(error.empty()) << what << ", gradient " << i << ": " << error;
        }
        error = mismatch(cuda_mean, cpu_mean, 1e-5);
        EXPECT_TRUE(error.empty()) << what << ", running_mean: " << error;
        error = mismatch(cuda_var, cpu_var, 1e-5);
        EXPECT_TRUE(error.empty()) << what << ", running_var: " << error;
      }
    }
  }
}

// The fused training path (statistics, rstd/scale/shift and the running-statistics update in one
// finalize kernel) with what the test above always has left out: no affine parameters, no running
// statistics, running statistics in f64 (f64 inputs: the kernel's double instantiation), and a
// single value per channel in the batch but two in all ({2, 1, 1, 1}).
TEST(CudaConvPool, BatchNormWithoutAffineOrRunningStatisticsMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  const std::vector<Shape> shapes = {{2, 1, 1, 1}, {33, 5}, {8, 16, 9, 7}};
  Generator generator(12);
  for (const Shape& shape : shapes) {
    const int64_t channels = shape[1];
    for (DType dtype : kFloating) {
      const DType statistics = dtype == DType::f64 ? DType::f64 : DType::f32;
      for (bool affine : {false, true}) {
        for (bool tracked : {false, true}) {
          if (affine && tracked && dtype != DType::f64) continue;  // the test above
          std::ostringstream what;
          what << "batch_norm " << shape_str(shape) << " in " << dtype_name(dtype)
               << (affine ? ", affine" : ", no weight or bias")
               << (tracked ? ", running statistics" : ", no running statistics");
          const Tensor x = uniform(shape, 3.0, 5.0, dtype, &generator);
          const Tensor weight =
              affine ? uniform({channels}, 0.5, 1.5, statistics, &generator) : Tensor();
          const Tensor bias =
              affine ? uniform({channels}, -1.0, 1.0, statistics, &generator) : Tensor();
          const Tensor mean0 = uniform({channels}, -0.5, 0.5, statistics, &generator);
          const Tensor var0 = uniform({channels}, 0.5, 2.0, statistics, &generator);
          Tensor cpu_mean = tracked ? mean0.clone() : Tensor();
          Tensor cpu_var = tracked ? var0.clone() : Tensor();
          Tensor cuda_mean = tracked ? mean0.to(Device::cuda(0)) : Tensor();
          Tensor cuda_var = tracked ? var0.to(Device::cuda(0)) : Tensor();
          const ForwardBackward cpu =
              run_on(Device::cpu(), {x, weight, bias}, {true, true, true},
                     [&](const std::vector<Tensor>& in) {
                       return batch_norm(in[0], cpu_mean, cpu_var, in[1], in[2], true, 0.1, 1e-5);
                     });
          const ForwardBackward cuda =
              run_on(Device::cuda(0), {x, weight, bias}, {true, true, true},
                     [&](const std::vector<Tensor>& in) {
                       return batch_norm(in[0], cuda_mean, cuda_var, in[1], in[2], true, 0.1, 1e-5);
                     });
          const double tol = long_sum_tolerance(dtype);
          std::string error = mismatch(cuda.output, cpu.output, tol);
          EXPECT_TRUE(error.empty()) << what.str() << ", output: " << error;
          for (size_t i = 0; i < 3; ++i) {
            ASSERT_EQ(cuda.grads[i].defined(), cpu.grads[i].defined()) << what.str() << ", " << i;
            if (!cpu.grads[i].defined()) continue;
            error = i == 1 ? weight_gradient_mismatch(cuda.grads[i], cpu.grads[i], x, tol)
                           : mismatch(cuda.grads[i], cpu.grads[i], tol);
            EXPECT_TRUE(error.empty()) << what.str() << ", gradient " << i << ": " << error;
          }
          if (!tracked) continue;
          const double stat_tol = dtype == DType::f64 ? 1e-12 : 1e-5;
          error = mismatch(cuda_mean, cpu_mean, stat_tol);
          EXPECT_TRUE(error.empty()) << what.str() << ", running_mean: " << error;
          error = mismatch(cuda_var, cpu_var, stat_tol);
          EXPECT_TRUE(error.empty()) << what.str() << ", running_var: " << error;
        }
      }
    }
  }
}

TEST(CudaConvPool, BatchNormSaysWhichTensorIsOnAnotherDevice) {
  EMBER_SKIP_WITHOUT_GPU();
  const TensorOptions on_gpu(DType::f32, Device::cuda(0));
  const Tensor x = ones({4, 3}, on_gpu);
  const std::string message =
      error_of([&] { batch_norm(x, zeros({3}), ones({3}), Tensor(), Tensor(), true); });
  EXPECT_NE(message.find("batch_norm: expected every tensor on the input's device"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("running_mean is"), std::string::npos) << message;
}

// ---- pooling -----------------------------------------------------------------------------------

TEST(CudaConvPool, PoolingGradientsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  struct PoolCase {
    std::string name;
    Shape input;
    std::function<Tensor(const Tensor&)> pool;
  };
  const std::vector<PoolCase> cases = {
      {"max_pool2d resnet9 2x2",
       {4, 16, 32, 32},
       [](const Tensor& x) { return max_pool2d(x, {.kernel_size = 2}); }},
      {"max_pool2d 2x2 on odd sizes (the generic kernels)",
       {2, 3, 33, 31},
       [](const Tensor& x) { return max_pool2d(x, {.kernel_size = 2}); }},
      {"max_pool2d 2x2 on one wide plane (a block spans rows)",
       {1, 1, 6, 1030},
       [](const Tensor& x) { return max_pool2d(x, {.kernel_size = 2}); }},
      {"max_pool2d 2x2 on 16x16 planes (4 a block, 37 planes: the last block part-full)",
       {1, 37, 16, 16},
       [](const Tensor& x) { return max_pool2d(x, {.kernel_size = 2}); }},
      {"max_pool2d 2x2 on 8x8 planes (16 a block)",
       {3, 13, 8, 8},
       [](const Tensor& x) { return max_pool2d(x, {.kernel_size = 2}); }},
      {"max_pool2d 2x2 on 20x20 planes (100 outputs: 2 a block, 56 threads idle)",
       {3, 7, 20, 20},
       [](const Tensor& x) { return max_pool2d(x, {.kernel_size = 2}); }},
      {"max_pool2d resnet9 head 4x4",
       {4, 64, 4, 4},
       [](const Tensor& x) { return max_pool2d(x, {.kernel_size = 4}); }},
      {"max_pool2d overlapping",
       {2, 3, 33, 31},
       [](const Tensor& x) {
         return max_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1});
       }},
      {"avg_pool2d overlapping",
       {2, 3, 17, 19},
       [](const Tensor& x) {
         return avg_pool2d(x, {.kernel_size = 3, .stride = 2, .padding = 1});
       }},
      {"avg_pool2d exclude_pad stride1",
       {2, 3, 9, 8},
       [](const Tensor& x) {
         return avg_pool2d(
             x,
             {.kernel_size = Size2(3, 2), .stride = 1, .padding = 1, .count_include_pad = false});
       }},
      {"adaptive_avg_pool2d 7x9 to 3x4",
       {2, 3, 7, 9},
       [](const Tensor& x) { return adaptive_avg_pool2d(x, Size2(3, 4)); }},
      {"adaptive_avg_pool2d 3x4 to 5x5",
       {2, 3, 3, 4},
       [](const Tensor& x) { return adaptive_avg_pool2d(x, 5); }},
  };
  Generator generator(9);
  for (const PoolCase& c : cases) {
    for (DType dtype : kFloating) {
      // In f16 / bf16 a max window may hold ties; both devices pick the first one.
      const Tensor x = uniform(c.input, -1.0, 1.0, dtype, &generator);
      expect_forward_backward_match(
          c.name + " in " + dtype_name(dtype), {x}, {true},
          [&](const std::vector<Tensor>& in) { return c.pool(in[0]); }, long_sum_tolerance(dtype));
    }
  }
}

TEST(CudaConvPool, MaxPoolPropagatesNaNLikeTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Tensor values =
      from_vector(std::vector<double>{1, nan, 3, 4, 5, 6, 7, 8, 9, -1, -2, -3, -4, -5, -6, -7},
                  {1, 1, 4, 4}, DType::f64);
  // 2x2 windows (the CPU's vector path), and 3x3 at stride 2 with padding (its generic loop).
  const std::vector<std::pair<std::string, Pool2dOptions>> windows = {
      {"2x2", {.kernel_size = 2}},
      {"3x3 stride 2 padding 1", {.kernel_size = 3, .stride = 2, .padding = 1}}};
  for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
    const Tensor x = values.to(dtype);
    for (const auto& [name, options] : windows) {
      const Tensor cpu = max_pool2d(x, options);
      const Tensor cuda = max_pool2d(x.to(Device::cuda(0)), options);
      EXPECT_EQ(mismatch(cuda, cpu, 0.0), "") << name << " in " << dtype_name(dtype);
      EXPECT_TRUE(std::isnan(to_vector<double>(cuda.to(Device::cpu()))[0])) << name;
    }
  }
}

// ---- reductions --------------------------------------------------------------------------------

TEST(CudaConvPool, ReductionsMatchTheCpuOnSpecialValuesAndLongRows) {
  EMBER_SKIP_WITHOUT_GPU();
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  // Rows: plain, with a NaN, all -inf, with +inf, with ties.
  const Tensor special =
      from_vector(std::vector<double>{1,    2,    3, 4,   0.5, nan, 7, 2, -inf, -inf,
                                      -inf, -inf, 1, inf, -2,  3,   5, 1, 5,    5},
                  {5, 4}, DType::f64);
  Generator generator(4);
  // A few long rows (the chunked two-pass path), many short rows, strided lines.
  const std::vector<Tensor> random = {
      uniform({1, 100003}, -2.0, 2.0, DType::f64, &generator),
      uniform({3, 70001}, -2.0, 2.0, DType::f64, &generator),
      uniform({300, 7}, -2.0, 2.0, DType::f64, &generator),
      uniform({5, 300, 33}, -2.0, 2.0, DType::f64, &generator),
  };
  const std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> reductions = {
      {"max", [](const Tensor& x) { return max(x, {-1}); }},
      {"min", [](const Tensor& x) { return min(x, {-1}); }},
      {"argmax", [](const Tensor& x) { return argmax(x, -1); }},
      {"argmin", [](const Tensor& x) { return argmin(x, -1); }},
      {"max of middle dim", [](const Tensor& x) { return max(x, {x.dim() > 2 ? 1 : 0}); }},
      {"argmax of middle dim", [](const Tensor& x) { return argmax(x, x.dim() > 2 ? 1 : 0); }},
      {"mean", [](const Tensor& x) { return mean(x, {-1}); }},
      {"var", [](const Tensor& x) { return var(x, {-1}); }},
      {"std all", [](const Tensor& x) { return std(x); }},
      {"logsumexp", [](const Tensor& x) { return logsumexp(x, {-1}); }},
      {"norm 2", [](const Tensor& x) { return norm(x, 2.0, {-1}); }},
      {"norm 1", [](const Tensor& x) { return norm(x, 1.0, {-1}); }},
      {"norm 0", [](const Tensor& x) { return norm(x, 0.0, {-1}); }},
      {"norm inf", [inf](const Tensor& x) { return norm(x, inf, {-1}); }},
      {"norm -inf", [inf](const Tensor& x) { return norm(x, -inf, {-1}); }},
      {"norm 3", [](const Tensor& x) { return norm(x, 3.0, {-1}); }},
  };
  std::vector<Tensor> inputs = random;
  inputs.push_back(special);
  for (const Tensor& source : inputs) {
    for (DType dtype : kFloating) {
      const Tensor x = source.to(dtype);
      for (const auto& [name, f] : reductions) {
        const Tensor cpu = f(x);
        const Tensor cuda = f(x.to(Device::cuda(0)));
        const std::string error = mismatch(cuda, cpu, long_sum_tolerance(dtype));
        EXPECT_TRUE(error.empty()) << name << " of " << describe(x) << ": " << error;
      }
    }
  }
  // Integer extremes: the fold's identity is the type's lowest / highest value.
  for (DType dtype : {DType::i32, DType::i64, DType::u8}) {
    const Tensor x = uniform({7, 301}, 0.0, 250.0, DType::f64, &generator).to(dtype);
    for (const auto& [name, f] :
         std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>>{
             {"max", [](const Tensor& t) { return max(t, {1}); }},
             {"min", [](const Tensor& t) { return min(t, {0}); }},
             {"argmax", [](const Tensor& t) { return argmax(t, 1); }},
             {"argmin", [](const Tensor& t) { return argmin(t); }}}) {
      const std::string error = mismatch(f(x.to(Device::cuda(0))), f(x), 0.0);
      EXPECT_TRUE(error.empty()) << name << " of " << describe(x) << ": " << error;
    }
  }
}

// ---- the whole model ----------------------------------------------------------------------------

TEST(CudaConvPool, ResNet9ForwardAndBackwardMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  const std::shared_ptr<nn::Sequential> cpu_model = nn::resnet9(3, 10, 8);
  cpu_model->train();
  (*cpu_model)[8]->eval();  // the Dropout: its masks would come from two generators
  const std::shared_ptr<nn::Module> cuda_model = cpu_model->clone();
  cuda_model->to(Device::cuda(0));
  Generator generator(3);
  const Tensor x = uniform({4, 3, 32, 32}, -1.0, 1.0, DType::f32, &generator);
  const Tensor cpu_out = (*cpu_model)(x);
  sum(cpu_out * distinct_weights(cpu_out)).backward();
  Tensor cuda_out;
  try {
    cuda_out = (*cuda_model)(x.to(Device::cuda(0)));
    sum(cuda_out * distinct_weights(cuda_out)).backward();
  } catch (const Error& e) {
    FAIL() << "resnet9 threw on CUDA: " << e.what();
  }
  // Nine layers deep in f32: the summation orders of cuDNN and the CPU drift apart a little.
  const double tol = 1e-3;
  EXPECT_EQ(mismatch(cuda_out, cpu_out, tol), "");
  const NamedTensors cpu_parameters = cpu_model->named_parameters();
  const NamedTensors cuda_parameters = cuda_model->named_parameters();
  ASSERT_EQ(cpu_parameters.size(), cuda_parameters.size());
  for (size_t i = 0; i < cpu_parameters.size(); ++i) {
    const Tensor& cpu_grad = cpu_parameters[i].second.grad();
    const Tensor& cuda_grad = cuda_parameters[i].second.grad();
    ASSERT_TRUE(cuda_grad.defined()) << cuda_parameters[i].first;
    EXPECT_EQ(mismatch(cuda_grad, cpu_grad, tol), "") << cpu_parameters[i].first;
  }
  const NamedTensors cpu_buffers = cpu_model->named_buffers();
  const NamedTensors cuda_buffers = cuda_model->named_buffers();
  ASSERT_EQ(cpu_buffers.size(), cuda_buffers.size());
  for (size_t i = 0; i < cpu_buffers.size(); ++i) {
    EXPECT_EQ(mismatch(cuda_buffers[i].second, cpu_buffers[i].second, tol), "")
        << cpu_buffers[i].first;  // the batch norms' running statistics
  }
}

}  // namespace
}  // namespace ember::testing
