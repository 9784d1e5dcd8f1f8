// What cuDNN's heuristics rank first for the convolutions of `ember train`'s resnet9, and which
// plan ember's graph path takes, for a device described in JSON: no GPU needed (cuDNN's
// "deviceless" plans, since 9.8; kernels/cuda/cudnn_graph_conv.h).
//
//   build/bin/ember_cudnn_ranking bench/gpu/h200_described.json [--batch 512] [--width 64]
//
// The JSON is what cuDNN writes for a device (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION; the GPU
// test CudnnGraphConvOnTheGpu.DescribesItsDeviceAsItsHandleSeesIt prints the machine's), or one
// written by hand (bench/gpu/h200_described.json). One line per layer, dtype and direction: how
// many configurations the heuristics give and the first one's engine, then the plan ember takes
// by default (deterministic engines first) and with determinism off (EMBER_CUDNN_DETERMINISTIC=0,
// PyTorch's default), each as engine@place in the ranking [notes]. A plan's engine is cuDNN's
// global engine index: the same number in two dtypes is the same kind of kernel.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#if defined(EMBER_WITH_CUDNN)
#include "kernels/cuda/check.h"
#include "kernels/cuda/cudnn_graph_conv.h"
#endif

#if defined(EMBER_WITH_CUDNN)
namespace {

using ember::kernels::Conv2dParams;
using ember::kernels::cuda::ConvDataType;
using ember::kernels::cuda::ConvDirection;
namespace graph_conv = ember::kernels::cuda::graph_conv;

struct Layer {
  std::string name;
  Conv2dParams params;
};

// nn::resnet9's eight 3x3 convolutions (padding 1) on 32x32 images, by distinct geometry.
std::vector<Layer> resnet9_layers(int64_t batch, int64_t width) {
  const auto conv = [batch](int64_t in, int64_t out, int64_t side) {
    Conv2dParams p;
    p.batch = batch, p.in_channels = in, p.in_height = side, p.in_width = side;
    p.out_channels = out, p.kernel_height = 3, p.kernel_width = 3;
    p.stride_h = p.stride_w = 1, p.pad_h = p.pad_w = 1;
    p.dilation_h = p.dilation_w = 1, p.groups = 1;
    return p;
  };
  const int64_t s1 = width, s2 = 2 * width, s4 = 4 * width, s8 = 8 * width;
  return {{"conv1 1->" + std::to_string(s1) + " 32x32", conv(1, s1, 32)},
          {"conv2 " + std::to_string(s1) + "->" + std::to_string(s2) + " 32x32", conv(s1, s2, 32)},
          {"res1 " + std::to_string(s2) + " 16x16 (x2)", conv(s2, s2, 16)},
          {"conv3 " + std::to_string(s2) + "->" + std::to_string(s4) + " 16x16", conv(s2, s4, 16)},
          {"conv4 " + std::to_string(s4) + "->" + std::to_string(s8) + " 8x8", conv(s4, s8, 8)},
          {"res2 " + std::to_string(s8) + " 4x4 (x2)", conv(s8, s8, 4)}};
}

// "engine@place [notes]" of the first plan the policy takes, or why there is none.
std::string first_plan(const graph_conv::Target& target, const graph_conv::Problem& problem,
                       int* candidates, int64_t* first_engine) {
  std::string why;
  const auto plans = graph_conv::make_plans(target, problem,
                                            {.limit = 1, .only_rank = -1, .works = nullptr}, &why);
  if (plans.empty()) return "none (" + why + ")";
  *candidates = plans[0]->candidates;
  *first_engine = plans[0]->first_engine;
  return std::to_string(plans[0]->engine) + "@" + std::to_string(plans[0]->rank) + " [" +
         plans[0]->notes + "]";
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]).starts_with("-")) {
    std::fprintf(stderr, "usage: %s DEVICE_JSON [--batch 512] [--width 64]\n", argv[0]);
    return 2;
  }
  int64_t batch = 512, width = 64;
  for (int i = 2; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const int64_t value = std::atoll(argv[i + 1]);
    if ((flag != "--batch" && flag != "--width") || value <= 0) {
      std::fprintf(stderr, "%s: expected --batch N or --width N (N > 0), got '%s %s'\n", argv[0],
                   argv[i], argv[i + 1]);
      return 2;
    }
    (flag == "--batch" ? batch : width) = value;
  }
  std::ifstream file(argv[1]);
  if (!file) {
    std::fprintf(stderr, "%s: cannot read '%s'\n", argv[0], argv[1]);
    return 2;
  }
  std::stringstream json;
  json << file.rdbuf();
  std::unique_ptr<graph_conv::Descriptor> device;
  try {
    device = graph_conv::describe_device(json.str());
  } catch (const ember::kernels::cuda::CudaError& error) {
    std::fprintf(stderr,
                 "%s: cuDNN refuses the device in '%s' (cuDNN 9.8 or later reads one): %s\n",
                 argv[0], argv[1], error.what());
    return 1;
  }
  const graph_conv::Target target = graph_conv::Target::described(*device);
  struct Precision {
    const char* name;
    ConvDataType dtype;
    bool tf32;
  };
  const Precision precisions[] = {{"f32", ConvDataType::f32, false},
                                  {"tf32", ConvDataType::f32, true},
                                  {"f16", ConvDataType::f16, false},
                                  {"bf16", ConvDataType::bf16, false}};
  const char* const directions[] = {"forward", "backward data", "backward filter"};
  std::printf(
      "| layer | precision | direction | configurations | heuristics' first | ember's plan "
      "(deterministic first) | with determinism off |\n|---|---|---|---:|---:|---|---|\n");
  for (const Layer& layer : resnet9_layers(batch, width)) {
    for (const Precision& precision : precisions) {
      for (int d = 0; d < 3; ++d) {
        graph_conv::Problem problem{.params = layer.params,
                                    .dtype = precision.dtype,
                                    .direction = static_cast<ConvDirection>(d),
                                    .allow_tf32 = precision.tf32,
                                    .deterministic = true};
        int candidates = 0;
        int64_t first_engine = -1;
        const std::string deterministic = first_plan(target, problem, &candidates, &first_engine);
        problem.deterministic = false;
        const std::string any = first_plan(target, problem, &candidates, &first_engine);
        std::printf("| %s | %s | %s | %d | %lld | %s | %s |\n", layer.name.c_str(), precision.name,
                    directions[d], candidates, static_cast<long long>(first_engine),
                    deterministic.c_str(), any.c_str());
      }
    }
  }
  return 0;
}

#else

int main() {
  std::fprintf(stderr, "ember_cudnn_ranking: this build has no cuDNN\n");
  return 1;
}

#endif
