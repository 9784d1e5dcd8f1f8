// The graph-API convolution (kernels/cuda/cudnn_graph_conv.h), checked without a GPU:
//   - cuDNN finalises tensors, convolutions and operation nodes without a handle, so a host sees
//     whether it accepts every attribute ember sets, in each direction, dtype and geometry that
//     the GPU tests run (tests/cuda/conv_pool_test.cpp);
//   - since cuDNN 9.8 its heuristics rank, and its plans finalise, for a device described in
//     JSON ("deviceless" compilation), so a host also sees the plans ember would choose from on an
//     H200: that every problem has one the policy allows, and that the policy's filters and order
//     hold. Running a plan needs a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/cuda/support.h"

#if defined(EMBER_WITH_CUDNN)
#include "kernels/cuda/check.h"
#include "kernels/cuda/cudnn_common.h"
#include "kernels/cuda/cudnn_graph_conv.h"
#endif

namespace ember::testing {
namespace {

#if defined(EMBER_WITH_CUDNN)

using kernels::Conv2dParams;
using kernels::cuda::ConvDataType;
using kernels::cuda::ConvDirection;
namespace graph_conv = kernels::cuda::graph_conv;

struct Geometry {
  std::string name;
  Conv2dParams params;
};

Conv2dParams geometry(int64_t n, int64_t c, int64_t h, int64_t w, int64_t k, int64_t r, int64_t s,
                      int64_t stride, int64_t pad, int64_t dilation, int64_t groups) {
  Conv2dParams p;
  p.batch = n, p.in_channels = c, p.in_height = h, p.in_width = w;
  p.out_channels = k, p.kernel_height = r, p.kernel_width = s;
  p.stride_h = p.stride_w = stride;
  p.pad_h = p.pad_w = pad;
  p.dilation_h = p.dilation_w = dilation;
  p.groups = groups;
  return p;
}

std::string describe(const graph_conv::Problem& problem, const std::string& name) {
  static const char* const dtypes[] = {"f32", "f64", "f16", "bf16"};
  static const char* const directions[] = {"forward", "backward data", "backward filter"};
  return name + " in " + dtypes[static_cast<int>(problem.dtype)] + ", " +
         directions[static_cast<int>(problem.direction)];
}

// The geometries of the GPU tests, and resnet9's at the training batch.
const std::vector<Geometry>& geometries() {
  static const std::vector<Geometry> all = {
      {"resnet9's first layer (1 channel)", geometry(512, 1, 28, 28, 64, 3, 3, 1, 1, 1, 1)},
      {"resnet9_layer", geometry(4, 16, 32, 32, 32, 3, 3, 1, 1, 1, 1)},
      {"stride2_groups2", geometry(3, 8, 13, 11, 6, 3, 3, 2, 1, 1, 2)},
      {"dilation2", geometry(2, 3, 12, 9, 5, 3, 3, 1, 2, 2, 1)},
      {"pointwise", geometry(5, 7, 6, 6, 9, 1, 1, 1, 0, 1, 1)},
      {"one_pixel", geometry(2, 3, 1, 1, 4, 1, 1, 1, 0, 1, 1)},
      {"resnet9 at batch 512 (128 -> 128 channels, 16 x 16)",
       geometry(512, 128, 16, 16, 128, 3, 3, 1, 1, 1, 1)},
  };
  return all;
}

TEST(CudnnGraphConv, CudnnAcceptsTheOperationOfEveryDirectionDtypeAndGeometry) {
  int finalised = 0;
  for (const Geometry& g : geometries()) {
    for (const ConvDataType dtype :
         {ConvDataType::f32, ConvDataType::f64, ConvDataType::f16, ConvDataType::bf16}) {
      for (const ConvDirection direction :
           {ConvDirection::forward, ConvDirection::backward_data, ConvDirection::backward_filter}) {
        const graph_conv::Problem problem{
            .params = g.params, .dtype = dtype, .direction = direction};
        try {
          const graph_conv::Operation op = graph_conv::make_operation(problem);
          EXPECT_NE(op.node->get(), nullptr) << describe(problem, g.name);
          ++finalised;
        } catch (const kernels::cuda::CudaError& error) {
          ADD_FAILURE() << describe(problem, g.name) << ": " << error.what();
        }
      }
    }
  }
  EXPECT_EQ(finalised, static_cast<int>(geometries().size()) * 4 * 3);
}

// A geometry cuDNN cannot take comes back as an exception naming the call and cuDNN's words,
// not as a crash or a descriptor half made; a CudnnError, which the graph path tells from a CUDA
// runtime error (a refused plan is passed over, a broken device is not).
TEST(CudnnGraphConv, AGeometryCudnnRefusesIsAnExceptionThatSaysSo) {
  graph_conv::Problem problem{.params = geometry(2, 3, 8, 8, 4, 3, 3, 1, 1, 0, 1)};  // dilation 0
  try {
    static_cast<void>(graph_conv::make_operation(problem));
    FAIL() << "a convolution of dilation 0 was finalised";
  } catch (const kernels::cuda::CudnnError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cuDNN error: cudnnBackendFinalize"), std::string::npos) << message;
    EXPECT_NE(message.find("CUDNN_STATUS_"), std::string::npos) << message;
  }
}

// An NVIDIA H200 as cuDNN describes a device (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION), from
// bench/gpu/h200_described.json: the JSON cuDNN wrote for the H200 of the GPU runs (132 SMs,
// compute capability 9.0, 227 KiB of shared memory a block, 60 MiB of L2), as printed by the GPU
// test CudnnGraphConvOnTheGpu.DescribesItsDeviceAsItsHandleSeesIt on 2026-11-29 (before that, a
// description written by hand, which ranked the same engines first).
std::string h200_json() {
  std::ifstream file(EMBER_H200_DESCRIBED_JSON);
  if (!file) ADD_FAILURE() << "cannot read " << EMBER_H200_DESCRIBED_JSON;
  std::stringstream json;
  json << file.rdbuf();
  return json.str();
}

// The described H200, or nullptr when this cuDNN cannot describe a device (before 9.8).
std::unique_ptr<graph_conv::Descriptor> described_h200() {
  try {
    return graph_conv::describe_device(h200_json());
  } catch (const kernels::cuda::CudaError&) {
    return nullptr;
  }
}

// Every problem of the GPU tests, with every policy: at least one plan the policy allows, none
// with a note it refuses (inputs converted down, a reduction in less than f32; tensor cores for
// exact f32 and f64), the deterministic ones first when it asks for determinism, each group in
// the heuristics' order, every workspace within 1 GiB.
TEST(CudnnGraphConv, EveryProblemHasAPlanThePolicyAllowsOnADescribedH200) {
  const std::unique_ptr<graph_conv::Descriptor> h200 = described_h200();
  if (!h200) GTEST_SKIP() << "this cuDNN cannot describe a device without one (cuDNN 9.8 can)";
  const graph_conv::Target target = graph_conv::Target::described(*h200);
  int problems = 0;
  for (const Geometry& g : geometries()) {
    for (const ConvDataType dtype :
         {ConvDataType::f32, ConvDataType::f64, ConvDataType::f16, ConvDataType::bf16}) {
      for (const ConvDirection direction :
           {ConvDirection::forward, ConvDirection::backward_data, ConvDirection::backward_filter}) {
        for (const bool tf32 : {false, true}) {
          if (tf32 && dtype != ConvDataType::f32) continue;
          for (const bool deterministic : {true, false}) {
            const graph_conv::Problem problem{.params = g.params,
                                              .dtype = dtype,
                                              .direction = direction,
                                              .allow_tf32 = tf32,
                                              .deterministic = deterministic};
            const std::string what = describe(problem, g.name) + (tf32 ? ", TF32" : "") +
                                     (deterministic ? ", deterministic first" : ", any");
            std::string why;
            const std::vector<std::unique_ptr<graph_conv::Plan>> plans = graph_conv::make_plans(
                target, problem, {.limit = 64, .only_rank = -1, .works = nullptr}, &why);
            ++problems;
            ASSERT_FALSE(plans.empty()) << what << ": " << why;
            const bool exact = dtype == ConvDataType::f64 || (dtype == ConvDataType::f32 && !tf32);
            bool nondeterministic_seen = false;
            int previous_rank = -1;
            for (const auto& plan : plans) {
              EXPECT_EQ(plan->notes.find("down_convert"), std::string::npos) << what;
              EXPECT_EQ(plan->notes.find("reduced_precision"), std::string::npos) << what;
              if (exact) {
                EXPECT_EQ(plan->notes.find("tensor_core"), std::string::npos) << what;
              }
              EXPECT_EQ(plan->deterministic,
                        plan->notes.find("nondeterministic") == std::string::npos)
                  << what;
              EXPECT_LE(plan->workspace_bytes, int64_t{1} << 30) << what;
              EXPECT_LT(plan->rank, plan->candidates) << what;
              if (deterministic) {
                // The deterministic group, then the others, each in the heuristics' order.
                if (!plan->deterministic && !nondeterministic_seen) {
                  nondeterministic_seen = true;
                  previous_rank = -1;
                }
                EXPECT_FALSE(plan->deterministic && nondeterministic_seen)
                    << what << ": a deterministic plan after a nondeterministic one";
              }
              EXPECT_GT(plan->rank, previous_rank) << what << ": out of the heuristics' order";
              previous_rank = plan->rank;
            }
          }
        }
      }
    }
  }
  EXPECT_EQ(problems, static_cast<int>(geometries().size()) * 5 * 3 * 2);
}

// PlanSearch: `limit`, `only_rank` (the plan another handle measured) and `works` (a plan cuDNN
// refuses to execute is passed over), on resnet9's layer in bf16 on the described H200.
TEST(CudnnGraphConv, APlanSearchKeepsWhatItIsAskedFor) {
  const std::unique_ptr<graph_conv::Descriptor> h200 = described_h200();
  if (!h200) GTEST_SKIP() << "this cuDNN cannot describe a device without one (cuDNN 9.8 can)";
  const graph_conv::Target target = graph_conv::Target::described(*h200);
  const graph_conv::Problem problem{.params = geometry(4, 16, 32, 32, 32, 3, 3, 1, 1, 1, 1),
                                    .dtype = ConvDataType::bf16,
                                    .direction = ConvDirection::forward,
                                    .allow_tf32 = false,
                                    .deterministic = true};
  std::string why;
  const auto all = graph_conv::make_plans(target, problem,
                                          {.limit = 64, .only_rank = -1, .works = nullptr}, &why);
  ASSERT_GE(all.size(), 3u) << why;
  const auto first = graph_conv::make_plans(target, problem,
                                            {.limit = 1, .only_rank = -1, .works = nullptr}, &why);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0]->rank, all[0]->rank);
  EXPECT_EQ(first[0]->engine, all[0]->engine);
  // The third allowed plan, asked for by its place in the ranking.
  const auto third = graph_conv::make_plans(
      target, problem, {.limit = 1, .only_rank = all[2]->rank, .works = nullptr}, &why);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_EQ(third[0]->engine, all[2]->engine);
  EXPECT_EQ(third[0]->rank, all[2]->rank);
  // The first two "fail to execute": the third is the one kept, and the tries say so.
  int tried = 0;
  const auto after_failures = graph_conv::make_plans(
      target, problem,
      {.limit = 1, .only_rank = -1, .works = [&](const graph_conv::Plan&) { return ++tried > 2; }},
      &why);
  ASSERT_EQ(after_failures.size(), 1u);
  EXPECT_EQ(after_failures[0]->rank, all[2]->rank);
  EXPECT_EQ(tried, 3);
  // None executes: no plan, and `why` names the failures.
  why.clear();
  const auto none = graph_conv::make_plans(
      target, problem,
      {.limit = 1, .only_rank = -1, .works = [](const graph_conv::Plan&) { return false; }}, &why);
  EXPECT_TRUE(none.empty());
  EXPECT_NE(why.find("fails to execute"), std::string::npos) << why;
}

// On a GPU: cuDNN's description of the machine's device (printed, for h200_described.json to be
// replaced with: run.sh's cuda_tests.log keeps it) reads back, and plans made for the device
// described so are those made with a handle: the same heuristics' first engine for resnet9's layer
// in each dtype. Whether the described H200 ranks as this device does is printed, not asserted (the
// device may be another).
TEST(CudnnGraphConvOnTheGpu, DescribesItsDeviceAsItsHandleSeesIt) {
  EMBER_SKIP_WITHOUT_GPU();
  const std::unique_ptr<graph_conv::Descriptor> h200 = described_h200();
  if (!h200) GTEST_SKIP() << "this cuDNN cannot describe a device without one (cuDNN 9.8 can)";
  cudnnHandle_t handle = nullptr;
  ASSERT_EQ(cudnnCreate(&handle), CUDNN_STATUS_SUCCESS);
  struct Destroy {
    cudnnHandle_t handle;
    ~Destroy() { static_cast<void>(cudnnDestroy(handle)); }
  } const destroy{handle};
  const std::string json = graph_conv::describe_device_of(handle);
  std::cout << "ember cuDNN device JSON: " << json << std::endl;
  const std::unique_ptr<graph_conv::Descriptor> described = graph_conv::describe_device(json);
  for (const ConvDataType dtype :
       {ConvDataType::f32, ConvDataType::f64, ConvDataType::f16, ConvDataType::bf16}) {
    const graph_conv::Problem problem{.params = geometry(4, 16, 32, 32, 32, 3, 3, 1, 1, 1, 1),
                                      .dtype = dtype,
                                      .direction = ConvDirection::forward,
                                      .allow_tf32 = false,
                                      .deterministic = true};
    const graph_conv::PlanSearch first{.limit = 1, .only_rank = -1, .works = nullptr};
    std::string why;
    const auto with_handle =
        graph_conv::make_plans(graph_conv::Target::of(handle), problem, first, &why);
    const auto from_json =
        graph_conv::make_plans(graph_conv::Target::described(*described), problem, first, &why);
    const auto from_h200 =
        graph_conv::make_plans(graph_conv::Target::described(*h200), problem, first, &why);
    ASSERT_EQ(with_handle.size(), 1u) << describe(problem, "resnet9_layer") << ": " << why;
    ASSERT_EQ(from_json.size(), 1u) << describe(problem, "resnet9_layer") << ": " << why;
    EXPECT_EQ(from_json[0]->engine, with_handle[0]->engine) << describe(problem, "resnet9_layer");
    EXPECT_EQ(from_json[0]->rank, with_handle[0]->rank) << describe(problem, "resnet9_layer");
    std::cout << describe(problem, "resnet9_layer") << ": engine " << with_handle[0]->engine
              << " with the handle, " << (from_h200.empty() ? -1 : from_h200[0]->engine)
              << " for the H200 described by hand" << std::endl;
  }
}

#else

TEST(CudnnGraphConv, NeedsCudnn) {
  GTEST_SKIP() << "this build has no cuDNN";
}

#endif

}  // namespace
}  // namespace ember::testing
