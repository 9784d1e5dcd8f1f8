// The vectorised row path of the CUDA elementwise kernels (kernels/cuda/strided_loop.cuh): layouts
// that are not flat but whose innermost dim (the row) every operand walks densely or not at all,
// such as conv2d's bias add x (N, C, H, W) + bias (1, C, 1, 1). Each result is checked
//   - bit for bit against the GPU's scalar strided path on the same values (the path the row path
//     replaces: the same arithmetic per element, so the same bits), reached through an operand one
//     element into its buffer (misaligned for every vector width);
//   - bit for bit against the CPU where both compute the same correctly rounded values (add, mul,
//     div, maximum, comparisons, where, copies and casts), else within cuda_tolerance;
//   - against row_vector_plan.h: each case says whether its layout is meant to take the row path,
//     so that one meant for it cannot pass by falling back, nor a fallback case by taking it.
// Rows of 49, 1, 3, 16, 8 and 1024 elements (whole packets of W = 2, 4, 8 or not), the broadcast
// operand on either side, (N, C, 1, 1) broadcasts, misaligned and row-padded views, in-place ops,
// compare, where, unary ops and copies of expanded views, fill of a padded view, and more packets
// than one grid step.
// They skip without a GPU. Never run on a GPU yet (written on a machine without one): a GPU run
// must check that they pass, and under compute-sanitizer memcheck.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cuda/row_vector_plan.h"
#include "runtime/device.h"
#include "runtime/ops.h"
#include "runtime/ops/layout.h"
#include "runtime/random.h"
#include "tests/cuda/support.h"

namespace ember::testing {
namespace {

const Device kCuda = Device::cuda(0);
const std::vector<DType> kFloatTypes = {DType::f32, DType::f16, DType::bf16, DType::f64};

// "" when `actual` (any device) holds the bytes of `expected` element for element, else how many
// elements differ and the first. any_nan: two NaNs match whatever their bits (the CPU and the GPU
// make different NaNs of an add).
std::string bits_differ(const Tensor& actual_any_device, const Tensor& expected,
                        bool any_nan = false) {
  const Tensor actual = actual_any_device.to(Device::cpu());
  if (actual.sizes() != expected.sizes() || actual.dtype() != expected.dtype())
    return "differ: " + describe(actual) + " vs " + describe(expected);
  const std::vector<unsigned char> a = bytes_of(actual), e = bytes_of(expected);
  const std::vector<double> a_values = to_vector<double>(actual);
  const std::vector<double> e_values = to_vector<double>(expected.contiguous());
  const size_t size = element_size(expected.dtype());
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < e_values.size(); ++i) {
    if (std::memcmp(&a[i * size], &e[i * size], size) == 0) continue;
    if (any_nan && std::isnan(a_values[i]) && std::isnan(e_values[i])) continue;
    if (mismatches++ == 0) first = i;
  }
  if (mismatches == 0) return "";
  return std::to_string(mismatches) + " of " + std::to_string(e_values.size()) +
         " elements differ; the first, element " + std::to_string(first) + ": " +
         std::to_string(a_values[first]) + ", expected " + std::to_string(e_values[first]);
}

// A copy of `t` (same device and dtype, dense) whose base pointer is one element into its buffer:
// misaligned for every vector width, so that an op reading it takes the scalar strided path.
Tensor misaligned_copy(const Tensor& t) {
  Tensor buffer = empty({t.numel() + 1}, TensorOptions(t.dtype(), t.device()));
  Tensor view = buffer.slice(0, 1, t.numel() + 1).view(t.sizes());
  copy_into(view, t);
  return view;
}

// Whether out = f(inputs) takes the row path, as the launch decides it: the body's vector width is
// 16 bytes of the widest operand (a where's bool mask aside), operand k's alignment that of its
// base pointer. `out` stands for the op's output: the ops allocate theirs dense and aligned.
bool takes_row_path(const Tensor& out, const std::vector<const Tensor*>& inputs) {
  size_t widest = element_size(out.dtype()) * (out.dtype() == DType::boolean ? 0 : 1);
  for (const Tensor* input : inputs) {
    if (input->dtype() != DType::boolean) widest = std::max(widest, element_size(input->dtype()));
  }
  const int width = static_cast<int>(16 / widest);
  uint32_t aligned = 0;
  std::vector<const Tensor*> operands = {&out};
  operands.insert(operands.end(), inputs.begin(), inputs.end());
  for (size_t k = 0; k < operands.size(); ++k) {
    const auto address = reinterpret_cast<uintptr_t>(operands[k]->data_ptr());
    if (address % (width * element_size(operands[k]->dtype())) == 0) aligned |= 1u << k;
  }
  return kernels::cuda::plan_row_vectors(make_layout(out, inputs, "test"), width, aligned).usable;
}

int vector_width(DType dtype) {
  return static_cast<int>(16 / element_size(dtype));
}

struct Pair {
  Tensor cpu, cuda;
};
Pair random_pair(const Shape& shape, DType dtype, Generator& generator) {
  const Tensor cpu = uniform(shape, -2.0, 2.0, DType::f64, &generator).to(dtype);
  return {cpu, cpu.to(kCuda)};
}

// (N, C, H, W): 7x7, 1x1 (5 and 16 channels), 1x3, 4x4, 2x4 and 32x32 maps.
const std::vector<Shape> kShapes = {{3, 5, 7, 7}, {3, 5, 1, 1}, {3, 16, 1, 1}, {3, 5, 1, 3},
                                    {3, 5, 4, 4}, {3, 5, 2, 4}, {2, 3, 32, 32}};

// Whether (N, C, H, W) + (1, C, 1, 1) is meant for the row path: its row (H*W, or the channels
// for 1x1 maps, where the bias is dense along the row) a whole number of packets.
bool bias_add_is_row_path(const Shape& shape, DType dtype) {
  const int64_t row = shape[2] * shape[3] > 1 ? shape[2] * shape[3] : shape[1];
  return row % vector_width(dtype) == 0;
}

TEST(CudaElementwiseRowVector, BiasAddsMatchTheScalarPathAndTheCpuBitForBit) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(31);
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      const int64_t n = shape[0], c = shape[1];
      const Pair x = random_pair(shape, dtype, generator);
      const Pair bias = random_pair({1, c, 1, 1}, dtype, generator);
      const Pair scale = random_pair({n, c, 1, 1}, dtype, generator);
      const Tensor x_misaligned = misaligned_copy(x.cuda);
      const std::string context =
          std::string(" in ") + dtype_name(dtype) + ", shape " + shape_str(shape);
      const bool row_path = bias_add_is_row_path(shape, dtype);
      const Tensor out = empty(shape, TensorOptions(dtype, kCuda));
      ASSERT_EQ(takes_row_path(out, {&x.cuda, &bias.cuda}), row_path) << context;
      ASSERT_EQ(takes_row_path(out, {&bias.cuda, &x.cuda}), row_path) << context;
      ASSERT_FALSE(takes_row_path(out, {&x_misaligned, &bias.cuda})) << context;
      ASSERT_FALSE(takes_row_path(out, {&bias.cuda, &x_misaligned})) << context;

      using Binary = Tensor (*)(const Tensor&, const Tensor&);
      struct Op {
        const char* name;
        Binary op;
        bool exact_on_cpu;  // correctly rounded on both devices: the CPU's bits
      };
      const std::vector<Op> ops = {
          {"add", [](const Tensor& a, const Tensor& b) { return add(a, b); }, true},
          {"sub alpha 2.5", [](const Tensor& a, const Tensor& b) { return sub(a, b, 2.5); },
           false},  // a - 2.5 b: the GPU may fuse it into one FMA, the CPU rounds twice
          {"mul", [](const Tensor& a, const Tensor& b) { return mul(a, b); }, true},
          {"div", [](const Tensor& a, const Tensor& b) { return div(a, b); }, true},
          {"maximum", [](const Tensor& a, const Tensor& b) { return maximum(a, b); }, true},
      };
      for (const Op& op : ops) {
        // x op bias, bias op x, x op scale (N, C, 1, 1).
        const Tensor forward = op.op(x.cuda, bias.cuda), backward = op.op(bias.cuda, x.cuda);
        const Tensor per_sample = op.op(x.cuda, scale.cuda);
        EXPECT_EQ(bits_differ(forward, op.op(x_misaligned, bias.cuda)), "")
            << op.name << " x, bias vs the scalar path" << context;
        EXPECT_EQ(bits_differ(backward, op.op(bias.cuda, x_misaligned)), "")
            << op.name << " bias, x vs the scalar path" << context;
        EXPECT_EQ(bits_differ(per_sample, op.op(x_misaligned, scale.cuda)), "")
            << op.name << " x, scale vs the scalar path" << context;
        const Tensor forward_cpu = op.op(x.cpu, bias.cpu), backward_cpu = op.op(bias.cpu, x.cpu);
        const Tensor per_sample_cpu = op.op(x.cpu, scale.cpu);
        if (op.exact_on_cpu) {
          EXPECT_EQ(bits_differ(forward, forward_cpu), "") << op.name << " x, bias" << context;
          EXPECT_EQ(bits_differ(backward, backward_cpu), "") << op.name << " bias, x" << context;
          EXPECT_EQ(bits_differ(per_sample, per_sample_cpu), "")
              << op.name << " x, scale" << context;
        } else {
          const double tol = cuda_tolerance(dtype);
          EXPECT_EQ(mismatch(forward, forward_cpu, tol), "") << op.name << " x, bias" << context;
          EXPECT_EQ(mismatch(backward, backward_cpu, tol), "") << op.name << " bias, x" << context;
          EXPECT_EQ(mismatch(per_sample, per_sample_cpu, tol), "")
              << op.name << " x, scale" << context;
        }
      }

      // In place: out aliases x (the row path loads every packet before it stores it).
      Tensor in_place = x.cuda.clone();
      in_place.add_(bias.cuda);
      EXPECT_EQ(bits_differ(in_place, add(x.cpu, bias.cpu)), "") << "add_" << context;
      // In place on a misaligned output: the scalar path.
      Tensor in_place_misaligned = misaligned_copy(x.cuda);
      ASSERT_FALSE(takes_row_path(in_place_misaligned, {&bias.cuda})) << context;
      in_place_misaligned.add_(bias.cuda);
      EXPECT_EQ(bits_differ(in_place_misaligned, add(x.cpu, bias.cpu)), "")
          << "add_ misaligned" << context;
    }
  }
}

TEST(CudaElementwiseRowVector, ComparisonsAndWhereMatchTheCpuBitForBit) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(32);
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      const int64_t c = shape[1];
      const Pair x = random_pair(shape, dtype, generator), y = random_pair(shape, dtype, generator);
      const Pair bias = random_pair({1, c, 1, 1}, dtype, generator);
      const Pair pixels = random_pair({1, 1, shape[2], shape[3]}, dtype, generator);
      const std::string context =
          std::string(" in ") + dtype_name(dtype) + ", shape " + shape_str(shape);
      const Tensor mask_out = empty(shape, TensorOptions(DType::boolean, kCuda));
      EXPECT_EQ(takes_row_path(mask_out, {&x.cuda, &bias.cuda}), bias_add_is_row_path(shape, dtype))
          << context;

      EXPECT_EQ(bits_differ(lt(x.cuda, bias.cuda), lt(x.cpu, bias.cpu)), "") << "lt" << context;
      EXPECT_EQ(bits_differ(ge(bias.cuda, x.cuda), ge(bias.cpu, x.cpu)), "") << "ge" << context;
      EXPECT_EQ(bits_differ(eq(x.cuda, pixels.cuda), eq(x.cpu, pixels.cpu)), "") << "eq" << context;

      // where(mask, x, bias): the value broadcast along the row; where(per-pixel mask, x, y): a
      // mask (1, 1, H, W), dense along the row and 0 along the outer dims.
      const Tensor mask_cpu = gt(x.cpu, 0.0), mask_cuda = gt(x.cuda, 0.0);
      const Tensor pixel_mask_cpu = gt(pixels.cpu, 0.0), pixel_mask_cuda = gt(pixels.cuda, 0.0);
      EXPECT_EQ(bits_differ(where(mask_cuda, x.cuda, bias.cuda), where(mask_cpu, x.cpu, bias.cpu)),
                "")
          << "where, bias" << context;
      EXPECT_EQ(
          bits_differ(where(pixel_mask_cuda, x.cuda, y.cuda), where(pixel_mask_cpu, x.cpu, y.cpu)),
          "")
          << "where, pixel mask" << context;
    }
  }
}

TEST(CudaElementwiseRowVector, UnaryOpsAndCopiesOfExpandedViewsMatch) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(33);
  for (DType dtype : kFloatTypes) {
    for (const Shape& shape : kShapes) {
      const Pair bias = random_pair({1, shape[1], 1, 1}, dtype, generator);
      const Tensor expanded_cpu = bias.cpu.expand(shape), expanded_cuda = bias.cuda.expand(shape);
      const std::string context =
          std::string(" in ") + dtype_name(dtype) + ", shape " + shape_str(shape);
      const Tensor out = empty(shape, TensorOptions(dtype, kCuda));
      EXPECT_EQ(takes_row_path(out, {&expanded_cuda}), bias_add_is_row_path(shape, dtype))
          << context;

      // exp of every element is exp of its channel's value: the bits of exp(bias), expanded.
      EXPECT_EQ(bits_differ(exp(expanded_cuda), exp(bias.cuda).expand(shape).contiguous()), "")
          << "exp" << context;
      EXPECT_EQ(mismatch(exp(expanded_cuda), exp(expanded_cpu), cuda_tolerance(dtype)), "")
          << "exp vs the cpu" << context;
      EXPECT_EQ(bits_differ(relu(expanded_cuda), relu(expanded_cpu)), "") << "relu" << context;
      EXPECT_EQ(bits_differ(expanded_cuda.contiguous(), expanded_cpu.contiguous()), "")
          << "contiguous" << context;
      for (DType to : kFloatTypes) {
        EXPECT_EQ(bits_differ(expanded_cuda.to(to), expanded_cpu.to(to)), "")
            << "to " << dtype_name(to) << context;
      }
    }
  }
}

// x (2, 3, 4, 16) viewed in a (2, 3, 4, 20) buffer: rows 20 elements apart, a multiple of the
// vector width of f64 and f32 (the row path) but not of f16 and bf16 (the scalar path). The
// elements between the rows must be left as they were.
TEST(CudaElementwiseRowVector, RowPaddedViewsMatchTheCpuBitForBit) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(34);
  for (DType dtype : kFloatTypes) {
    const Pair buffer = random_pair({2, 3, 4, 20}, dtype, generator);
    const Pair bias = random_pair({1, 3, 1, 1}, dtype, generator);
    const Tensor padded_cpu = buffer.cpu.narrow(3, 0, 16);
    const Tensor padded_cuda = buffer.cuda.narrow(3, 0, 16);
    const std::string context = std::string(" in ") + dtype_name(dtype);
    const bool row_path = 20 % vector_width(dtype) == 0;
    const Tensor out = empty({2, 3, 4, 16}, TensorOptions(dtype, kCuda));
    ASSERT_EQ(takes_row_path(out, {&padded_cuda, &bias.cuda}), row_path) << context;
    ASSERT_EQ(takes_row_path(padded_cuda, {&bias.cuda}), row_path) << context;

    EXPECT_EQ(bits_differ(add(padded_cuda, bias.cuda), add(padded_cpu, bias.cpu)), "")
        << "add" << context;
    EXPECT_EQ(bits_differ(padded_cuda.contiguous(), padded_cpu.contiguous()), "")
        << "contiguous" << context;

    Tensor in_place_cpu = buffer.cpu.clone(), in_place_cuda = buffer.cuda.clone();
    in_place_cpu.narrow(3, 0, 16).add_(bias.cpu);
    in_place_cuda.narrow(3, 0, 16).add_(bias.cuda);
    EXPECT_EQ(bits_differ(in_place_cuda, in_place_cpu), "") << "add_ into the view" << context;

    Tensor filled_cpu = buffer.cpu.clone(), filled_cuda = buffer.cuda.clone();
    filled_cpu.narrow(3, 0, 16).fill_(1.75);
    filled_cuda.narrow(3, 0, 16).fill_(1.75);
    EXPECT_EQ(bits_differ(filled_cuda, filled_cpu), "") << "fill_ of the view" << context;
  }
}

// NaN and -0 in the bias: a packet with a NaN takes the element-by-element conversions
// (convert_values.cuh); the scalar path's bits exactly, the CPU's but for NaN payloads.
TEST(CudaElementwiseRowVector, NaNsAndSignedZerosInTheBroadcastOperand) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(35);
  for (DType dtype : kFloatTypes) {
    const Shape shape = {2, 4, 4, 8};
    const Pair x = random_pair(shape, dtype, generator);
    const Tensor bias_cpu =
        from_vector(std::vector<double>{std::nan(""), -0.0, 0.0, 1.5}, {1, 4, 1, 1}, DType::f64)
            .to(dtype);
    const Tensor bias_cuda = bias_cpu.to(kCuda);
    const Tensor x_misaligned = misaligned_copy(x.cuda);
    const std::string context = std::string(" in ") + dtype_name(dtype);
    for (bool swapped : {false, true}) {
      const Tensor& a_cuda = swapped ? bias_cuda : x.cuda;
      const Tensor& b_cuda = swapped ? x.cuda : bias_cuda;
      const Tensor& a_scalar = swapped ? bias_cuda : x_misaligned;
      const Tensor& b_scalar = swapped ? x_misaligned : bias_cuda;
      const Tensor& a_cpu = swapped ? bias_cpu : x.cpu;
      const Tensor& b_cpu = swapped ? x.cpu : bias_cpu;
      EXPECT_EQ(bits_differ(add(a_cuda, b_cuda), add(a_scalar, b_scalar)), "")
          << "add vs the scalar path, swapped " << swapped << context;
      EXPECT_EQ(bits_differ(add(a_cuda, b_cuda), add(a_cpu, b_cpu), true), "")
          << "add, swapped " << swapped << context;
      EXPECT_EQ(bits_differ(mul(a_cuda, b_cuda), mul(a_scalar, b_scalar)), "")
          << "mul vs the scalar path, swapped " << swapped << context;
      EXPECT_EQ(bits_differ(maximum(a_cuda, b_cuda), maximum(a_scalar, b_scalar)), "")
          << "maximum vs the scalar path, swapped " << swapped << context;
    }
  }
}

// More packets than one grid step covers (65535 blocks of 256 threads, one packet a thread):
// f32 (65, 64, 128, 128) is 17.0M packets of 4, so threads go round the grid-stride loop.
TEST(CudaElementwiseRowVector, ABiasAddOfMorePacketsThanTheGridReachesEveryRow) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(36);
  const Shape shape = {65, 64, 128, 128};
  const Pair x = random_pair(shape, DType::f32, generator);
  const Pair bias = random_pair({1, 64, 1, 1}, DType::f32, generator);
  const Tensor out = empty(shape, TensorOptions(DType::f32, kCuda));
  ASSERT_TRUE(takes_row_path(out, {&x.cuda, &bias.cuda}));
  EXPECT_EQ(bits_differ(add(x.cuda, bias.cuda), add(x.cpu, bias.cpu)), "");
}

}  // namespace
}  // namespace ember::testing
