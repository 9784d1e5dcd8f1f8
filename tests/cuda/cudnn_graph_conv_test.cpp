// The graph-API convolution's descriptors (kernels/cuda/cudnn_graph_conv.h), checked without a
// GPU: cuDNN finalises tensors, convolutions and operation nodes without a handle, so a host sees
// whether it accepts every attribute ember sets, in each direction, dtype and geometry that the
// GPU tests run (tests/cuda/conv_pool_test.cpp). Choosing and running a plan needs a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#if defined(EMBER_WITH_CUDNN)
#include "kernels/cuda/check.h"
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

TEST(CudnnGraphConv, CudnnAcceptsTheOperationOfEveryDirectionDtypeAndGeometry) {
  const std::vector<Geometry> geometries = {
      {"resnet9's first layer (1 channel)", geometry(512, 1, 28, 28, 64, 3, 3, 1, 1, 1, 1)},
      {"resnet9_layer", geometry(4, 16, 32, 32, 32, 3, 3, 1, 1, 1, 1)},
      {"stride2_groups2", geometry(3, 8, 13, 11, 6, 3, 3, 2, 1, 1, 2)},
      {"dilation2", geometry(2, 3, 12, 9, 5, 3, 3, 1, 2, 2, 1)},
      {"pointwise", geometry(5, 7, 6, 6, 9, 1, 1, 1, 0, 1, 1)},
      {"one_pixel", geometry(2, 3, 1, 1, 4, 1, 1, 1, 0, 1, 1)},
  };
  int finalised = 0;
  for (const Geometry& g : geometries) {
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
  EXPECT_EQ(finalised, 6 * 4 * 3);
}

// A geometry cuDNN cannot take comes back as an exception naming the call and cuDNN's words,
// not as a crash or a descriptor half made.
TEST(CudnnGraphConv, AGeometryCudnnRefusesIsAnExceptionThatSaysSo) {
  graph_conv::Problem problem{.params = geometry(2, 3, 8, 8, 4, 3, 3, 1, 1, 0, 1)};  // dilation 0
  try {
    static_cast<void>(graph_conv::make_operation(problem));
    FAIL() << "a convolution of dilation 0 was finalised";
  } catch (const kernels::cuda::CudaError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("cuDNN error: cudnnBackendFinalize"), std::string::npos) << message;
    EXPECT_NE(message.find("CUDNN_STATUS_"), std::string::npos) << message;
  }
}

#else

TEST(CudnnGraphConv, NeedsCudnn) {
  GTEST_SKIP() << "this build has no cuDNN";
}

#endif

}  // namespace
}  // namespace ember::testing
