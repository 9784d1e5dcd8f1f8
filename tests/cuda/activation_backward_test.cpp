// The fused CUDA activation backward (kernels/cuda/activation_backward.cu) against the CPU's
// (kernels/cpu/activation_backward.cpp): the input gradient of relu, gelu (erf and tanh), silu,
// sigmoid and tanh on both devices, in f32, f64, f16 and bf16, at odd sizes (one element, fewer
// than a packet, a packet and a half, past one block) and through three layouts: dense and
// 16-byte aligned (the vectorised flat path), one element into a buffer (the scalar flat path),
// and transposed (the strided path, with a transposed incoming gradient too).
//
// Everything here needs a GPU and skips without one. What a GPU run checks: that each of the
// three launch paths computes f'(saved) for the right saved tensor (x for gelu and silu, y for
// relu, sigmoid and tanh) on the right element. Both devices compute 16-bit values in f32 and
// round once, so f16 / bf16 agree within one rounding of the result; f32 differs only by the CPU's
// vectorised exp and sigmoid polynomials against CUDA's expf (a few ulp).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/op_cases.h"
#include "tests/cuda/support.h"

namespace ember::testing {
namespace {

// What the tests here need a GPU for, said when they skip without one.
constexpr const char* kNeedsGpu = "this test compares CUDA with the CPU";

struct Activation {
  std::string name;
  std::function<Tensor(const Tensor&)> forward;
};

const std::vector<Activation>& activations() {
  static const std::vector<Activation> all = {
      {"relu", [](const Tensor& x) { return relu(x); }},
      {"gelu_erf", [](const Tensor& x) { return gelu(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); }},
      {"silu", [](const Tensor& x) { return silu(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }},
      {"tanh", [](const Tensor& x) { return tanh(x); }},
  };
  return all;
}

enum class Layout { aligned, offset_by_one, transposed };

const char* layout_name(Layout layout) {
  switch (layout) {
    case Layout::aligned:
      return "aligned";
    case Layout::offset_by_one:
      return "offset by one";
    case Layout::transposed:
      return "transposed";
  }
  return "?";
}

// The gradient of act(view(x)) with respect to the leaf x for an incoming gradient `incoming`
// (rows, cols), on `device`. `values` holds rows * cols + 1 elements: the offset layout reads
// from the second one. A random incoming gradient (rather than ones) gives every element its own
// value, so that a mixed-up element cannot pass.
Tensor input_gradient(const Activation& activation, const Tensor& values, const Tensor& incoming,
                      int64_t rows, int64_t cols, Layout layout, Device device) {
  Tensor leaf = values.to(device).detach();
  leaf.requires_grad_(true);
  Tensor y;
  if (layout == Layout::aligned) {
    y = activation.forward(leaf.narrow(0, 0, rows * cols).view({rows, cols}));
  } else if (layout == Layout::offset_by_one) {
    y = activation.forward(leaf.narrow(0, 1, rows * cols).view({rows, cols}));
  } else {
    // (rows, cols) seen as (cols, rows): the saved input and the incoming gradient are strided.
    const Tensor x = leaf.narrow(0, 0, rows * cols).view({rows, cols}).transpose(0, 1);
    y = activation.forward(x).transpose(0, 1);
  }
  y.backward(incoming.to(device));
  return leaf.grad();
}

TEST(CudaActivationBackward, GradientsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  // (rows, cols): 1 element, 3 (under one packet), 13 (a packet and a half in f32 plus a tail),
  // 1023 and 4097 (past one block of 256 threads, odd), and a 2-D block with odd sides.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {1, 3}, {1, 13}, {3, 341}, {17, 241}, {1, 1023}, {1, 4097}, {33, 65}};
  Generator generator(31);
  for (const Activation& activation : activations()) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      for (const auto& [rows, cols] : shapes) {
        // [-4, 4): both tails of sigmoid / tanh / gelu, and relu's kink (0 is a value in f16).
        const Tensor values =
            random_input({rows * cols + 1}, dtype, Device::cpu(), generator, -4.0, 4.0);
        const Tensor incoming = random_input({rows, cols}, dtype, Device::cpu(), generator);
        for (Layout layout : {Layout::aligned, Layout::offset_by_one, Layout::transposed}) {
          const std::string what = activation.name + " " + shape_str({rows, cols}) + " " +
                                   dtype_name(dtype) + " " + layout_name(layout);
          const Tensor cpu =
              input_gradient(activation, values, incoming, rows, cols, layout, Device::cpu());
          const Tensor cuda =
              input_gradient(activation, values, incoming, rows, cols, layout, Device::cuda(0));
          ASSERT_TRUE(cuda.defined()) << what;
          EXPECT_TRUE(cuda.is_cuda()) << what;
          EXPECT_EQ(cuda.dtype(), dtype) << what;
          EXPECT_EQ(mismatch(cuda, cpu, cuda_tolerance(dtype)), "") << what;
        }
      }
    }
  }
}

// NaN and infinities go through each formula as the CPU kernel sends them (relu of NaN gives a
// zero gradient: NaN > 0 is false on both devices).
TEST(CudaActivationBackward, SpecialValuesMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU(kNeedsGpu);
  const double inf = std::numeric_limits<double>::infinity();
  // NaN first and a finite value last: an unwritten element reads as NaN (the allocator's poison),
  // and would go unseen where the expected value is NaN too, such as at the vector path's tail.
  const std::vector<double> special = {NAN, 0.0, -0.0, 1e-30, -1e-30, 30.0, -30.0, inf, -inf, 0.5};
  for (const Activation& activation : activations()) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16}) {
      const Tensor values =
          from_vector(special, {static_cast<int64_t>(special.size())}, DType::f64).to(dtype);
      const auto gradient = [&](Device device) {
        Tensor x = values.to(device).detach();
        x.requires_grad_(true);
        activation.forward(x).backward(ones_like(x));
        return x.grad();
      };
      EXPECT_EQ(mismatch(gradient(Device::cuda(0)), gradient(Device::cpu()), cuda_tolerance(dtype)),
                "")
          << activation.name << " " << dtype_name(dtype);
    }
  }
}

}  // namespace
}  // namespace ember::testing
