// The vectorised flat path of the CUDA elementwise kernels (kernels/cuda/strided_loop.cuh): when
// every operand is dense and its base pointer 16-byte aligned, each thread moves kVector elements
// (4 f32, 8 f16/bf16, 2 f64) per operand in one access, and the last numel % kVector elements go
// one at a time. These tests aim at the edges of that path against the CPU:
//   - sizes below, at and just past multiples of every vector width (1, 3, 7, 8, 9, ..., 4097);
//   - misaligned views (x.slice(0, 1, n + 1): the base pointer is one element in), for the inputs,
//     the output (in-place ops and copy_into on a slice), or all of them: these take the scalar
//     flat path and must give the same values;
//   - every body that has a vector path: unary, binary, compare, copy (dtype casts), fill, where.
// They skip without a GPU. Never run on a GPU yet (written on a machine without one): a GPU run
// must check that they pass, and under compute-sanitizer memcheck (no out-of-bounds tail access).
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "runtime/device.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/cuda/support.h"

namespace ember::testing {
namespace {

const Device kCuda = Device::cuda(0);

// Sizes around the vector widths 2, 4 and 8: tail only, exact multiples, one past, and larger
// sizes whose tails are 1, 3 and 7 elements.
const std::vector<int64_t> kSizes = {1,  2,  3,  4,  5,    7,    8,    9,
                                     15, 16, 17, 33, 1023, 1024, 4097, 65543};

const std::vector<DType> kFloatTypes = {DType::f32, DType::f16, DType::bf16, DType::f64};

// The same random values on the CPU and the GPU: (n + 1) elements, so that slice(0, 1, n + 1)
// gives a view one element in (misaligned for every vector width).
struct Pair {
  Tensor cpu, cuda;
};
Pair random_pair(int64_t n, DType dtype, Generator& generator, double low = -2.0,
                 double high = 2.0) {
  const Tensor cpu = uniform({n + 1}, low, high, DType::f64, &generator).to(dtype);
  return {cpu, cpu.to(kCuda)};
}

// The first n elements (aligned: the allocator's blocks are) or elements 1..n (misaligned).
Tensor view_of(const Tensor& t, int64_t n, bool misaligned) {
  return misaligned ? t.slice(0, 1, n + 1) : t.slice(0, 0, n);
}

TEST(CudaElementwiseVector, UnaryAndBinaryMatchTheCpuAtEverySizeAndAlignment) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(21);
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      const Pair a = random_pair(n, dtype, generator), b = random_pair(n, dtype, generator);
      // {a aligned, b aligned}, {a misaligned, b aligned}, {both misaligned}.
      for (int misaligned : {0, 1, 2}) {
        const Tensor a_cpu = view_of(a.cpu, n, misaligned >= 1);
        const Tensor a_cuda = view_of(a.cuda, n, misaligned >= 1);
        const Tensor b_cpu = view_of(b.cpu, n, misaligned >= 2);
        const Tensor b_cuda = view_of(b.cuda, n, misaligned >= 2);
        const std::string where = std::string(" in ") + dtype_name(dtype) + ", n " +
                                  std::to_string(n) + ", misaligned " + std::to_string(misaligned);
        const double tol = cuda_tolerance(dtype);
        EXPECT_EQ(mismatch(a_cuda + b_cuda, a_cpu + b_cpu, tol), "") << "add" << where;
        EXPECT_EQ(mismatch(a_cuda * b_cuda, a_cpu * b_cpu, tol), "") << "mul" << where;
        EXPECT_EQ(mismatch(sub(a_cuda, b_cuda, 2.5), sub(a_cpu, b_cpu, 2.5), tol), "")
            << "sub alpha" << where;
        EXPECT_EQ(mismatch(maximum(a_cuda, b_cuda), maximum(a_cpu, b_cpu), tol), "")
            << "maximum" << where;
        EXPECT_EQ(mismatch(exp(a_cuda), exp(a_cpu), tol), "") << "exp" << where;
        EXPECT_EQ(mismatch(relu(a_cuda), relu(a_cpu), tol), "") << "relu" << where;
        EXPECT_EQ(mismatch(lt(a_cuda, b_cuda), lt(a_cpu, b_cpu), 0.0), "") << "lt" << where;
      }
    }
  }
}

TEST(CudaElementwiseVector, InPlaceOpsOnMisalignedOutputsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(22);
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (bool out_misaligned : {false, true}) {
        const Pair a = random_pair(n, dtype, generator), b = random_pair(n, dtype, generator);
        Tensor out_cpu = view_of(a.cpu, n, out_misaligned);
        Tensor out_cuda = view_of(a.cuda, n, out_misaligned);
        out_cpu.add_(view_of(b.cpu, n, false), 0.5);
        out_cuda.add_(view_of(b.cuda, n, false), 0.5);
        // The whole buffer: the element outside the view must be untouched on both devices.
        EXPECT_EQ(mismatch(a.cuda, a.cpu, cuda_tolerance(dtype)), "")
            << "add_ in " << dtype_name(dtype) << ", n " << n << ", out misaligned "
            << out_misaligned;
      }
    }
  }
}

TEST(CudaElementwiseVector, CastsMatchTheCpuBitForBit) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(23);
  // Every pair of floating dtypes has a vector path (f32 -> bf16: 16 bytes read, 8 written).
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      for (int64_t n : kSizes) {
        const Pair x = random_pair(n, from, generator, -300.0, 300.0);
        for (bool misaligned : {false, true}) {
          const Tensor expected = view_of(x.cpu, n, misaligned).to(to);
          const Tensor actual = view_of(x.cuda, n, misaligned).to(to);
          EXPECT_EQ(mismatch(actual, expected, 0.0), "")
              << dtype_name(from) << " -> " << dtype_name(to) << ", n " << n << ", misaligned "
              << misaligned;
        }
        // Into a misaligned destination (copy_into), from an aligned source.
        Tensor dst_cpu = zeros({n + 1}, to), dst_cuda = zeros({n + 1}, TensorOptions(to, kCuda));
        Tensor dst_cpu_view = dst_cpu.slice(0, 1, n + 1);
        Tensor dst_cuda_view = dst_cuda.slice(0, 1, n + 1);
        copy_into(dst_cpu_view, view_of(x.cpu, n, false));
        copy_into(dst_cuda_view, view_of(x.cuda, n, false));
        EXPECT_EQ(mismatch(dst_cuda, dst_cpu, 0.0), "")
            << "copy_into a misaligned " << dtype_name(to) << " from " << dtype_name(from) << ", n "
            << n;
      }
    }
  }
}

TEST(CudaElementwiseVector, FillAndWhereMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(24);
  for (DType dtype : kFloatTypes) {
    for (int64_t n : kSizes) {
      for (bool misaligned : {false, true}) {
        const std::string where_text = std::string(" in ") + dtype_name(dtype) + ", n " +
                                       std::to_string(n) + ", misaligned " +
                                       std::to_string(misaligned);
        Tensor filled_cpu = zeros({n + 1}, dtype);
        Tensor filled_cuda = zeros({n + 1}, TensorOptions(dtype, kCuda));
        view_of(filled_cpu, n, misaligned).fill_(1.75);
        view_of(filled_cuda, n, misaligned).fill_(1.75);
        EXPECT_EQ(mismatch(filled_cuda, filled_cpu, 0.0), "") << "fill_" << where_text;

        const Pair a = random_pair(n, dtype, generator), b = random_pair(n, dtype, generator);
        const Pair c = random_pair(n, DType::f64, generator);
        const Tensor cond_cpu = gt(view_of(c.cpu, n, misaligned), 0.0);
        const Tensor cond_cuda = gt(view_of(c.cuda, n, misaligned), 0.0);
        EXPECT_EQ(
            mismatch(where(cond_cuda, view_of(a.cuda, n, misaligned), view_of(b.cuda, n, false)),
                     where(cond_cpu, view_of(a.cpu, n, misaligned), view_of(b.cpu, n, false)), 0.0),
            "")
            << "where" << where_text;
      }
    }
  }
}

// Bool operands compare as u8 (false < true) on both devices, at every size and alignment; the
// masks are broadcast against a row too.
TEST(CudaElementwiseVector, ComparisonsOfBoolTensorsMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(11);
  using Compare = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, Compare>> compares = {
      {"eq", eq}, {"ne", ne}, {"lt", lt}, {"le", le}, {"gt", gt}, {"ge", ge}};
  for (int64_t n : kSizes) {
    const Pair a = random_pair(n, DType::f64, generator), b = random_pair(n, DType::f64, generator);
    for (bool misaligned : {false, true}) {
      const Tensor mask_a_cpu = gt(view_of(a.cpu, n, misaligned), 0.0);
      const Tensor mask_b_cpu = gt(view_of(b.cpu, n, false), 0.0);
      const Tensor mask_a_cuda = gt(view_of(a.cuda, n, misaligned), 0.0);
      const Tensor mask_b_cuda = gt(view_of(b.cuda, n, false), 0.0);
      for (const auto& [name, compare] : compares) {
        EXPECT_EQ(mismatch(compare(mask_a_cuda, mask_b_cuda), compare(mask_a_cpu, mask_b_cpu), 0.0),
                  "")
            << name << " n " << n << (misaligned ? " misaligned" : "");
      }
    }
  }
  const Tensor rows = gt(randn({5, 7}, DType::f32, &generator), 0.0);
  const Tensor row = gt(randn({7}, DType::f32, &generator), 0.0);
  EXPECT_EQ(mismatch(lt(rows.to(kCuda), row.to(kCuda)), lt(rows, row), 0.0), "");
}

// More than 2^31 elements: every index in the flat (vector) and strided paths is 64-bit. u8, so
// that each tensor is 2 GiB; skipped where the GPU has less than 10 GiB free.
TEST(CudaElementwiseVector, MoreThan2To31ElementsReachTheLastOne) {
  EMBER_SKIP_WITHOUT_GPU();
  if (cuda::memory_info(0).first < (size_t{10} << 30)) GTEST_SKIP() << "needs 10 GiB free";
  const int64_t n = (int64_t{1} << 31) + 5;
  const auto element = [](const Tensor& t, int64_t i) {
    return t.reshape({-1}).narrow(0, i, 1).item<double>();
  };
  {
    const Tensor x = full({n}, 3, TensorOptions(DType::u8, kCuda));
    const Tensor y = add(x, x);  // dense and aligned: the vector path
    for (int64_t i : {int64_t{0}, (int64_t{1} << 31) - 1, int64_t{1} << 31, n - 1})
      EXPECT_EQ(element(y, i), 6.0) << "element " << i;
  }
  {
    const int64_t half = n / 2 + 1;  // (2, half) seen as (half, 2): the strided path
    const Tensor x = full({2, half}, 3, TensorOptions(DType::u8, kCuda)).t();
    const Tensor y = mul(x, 2);
    ASSERT_EQ(y.numel(), 2 * half);
    for (int64_t i : {int64_t{0}, int64_t{1} << 31, 2 * half - 1})
      EXPECT_EQ(element(y, i), 6.0) << "element " << i;
  }
}

}  // namespace
}  // namespace ember::testing
