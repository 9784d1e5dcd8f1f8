// matmul, bmm and linear against plain loops; 16-bit floats against f32; error messages.
#include <gtest/gtest.h>

#include <omp.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "runtime/ops.h"

namespace ember {
namespace {

// a (n, k) @ b (k, m) in f64 loops, from any dtype.
std::vector<double> naive_product(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = to_vector<double>(a.contiguous()),
                            y = to_vector<double>(b.contiguous());
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  std::vector<double> out(static_cast<size_t>(n * m), 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double total = 0.0;
      for (int64_t l = 0; l < k; ++l)
        total += x[static_cast<size_t>(i * k + l)] * y[static_cast<size_t>(l * m + j)];
      out[static_cast<size_t>(i * m + j)] = total;
    }
  return out;
}

void expect_near_all(const Tensor& actual, const std::vector<double>& expected, double tolerance,
                     const std::string& what) {
  const std::vector<double> values = to_vector<double>(actual);
  ASSERT_EQ(values.size(), expected.size()) << what;
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_NEAR(values[i], expected[i], tolerance * (1.0 + std::abs(expected[i])))
        << what << " at " << i;
  }
}

Tensor random(const Shape& shape, Generator& g, DType dtype = DType::f32) {
  return uniform(shape, -1.0, 1.0, DType::f32, &g).to(dtype);
}

TEST(Matmul, MatchesNaiveLoopsAtRandomSizes) {
  Generator g(7);
  const std::vector<std::array<int64_t, 3>> sizes = {{1, 1, 1},    {3, 5, 7},       {17, 1, 9},
                                                     {33, 65, 31}, {128, 127, 129}, {1, 300, 2}};
  for (const auto& [n, k, m] : sizes) {
    const Tensor a = random({n, k}, g), b = random({k, m}, g);
    const std::string what = shape_str(a.sizes()) + " @ " + shape_str(b.sizes());
    expect_near_all(matmul(a, b), naive_product(a, b), 1e-5, what);
  }
}

TEST(Matmul, TransposedAndStridedOperands) {
  Generator g(8);
  const Tensor a = random({6, 5}, g), b = random({7, 6}, g);
  // a^T (5, 6) @ b^T (6, 7): both read through BLAS's transpose flags.
  expect_near_all(matmul(a.t(), b.t()), naive_product(a.t(), b.t()), 1e-5, "transposed");
  const Tensor wide = random({5, 12}, g);
  const Tensor strided = wide.slice(1, 0, 12, 2);  // (5, 6), column stride 2: copied
  expect_near_all(matmul(strided, a), naive_product(strided, a), 1e-5, "strided");
}

TEST(Matmul, VectorOperands) {
  Generator g(9);
  const Tensor v = random({4}, g), m = random({4, 3}, g), w = random({4}, g);
  const Tensor row = matmul(v, m);
  EXPECT_EQ(row.sizes(), (Shape{3}));
  expect_near_all(row, naive_product(v.unsqueeze(0), m), 1e-6, "vector @ matrix");
  const Tensor column = matmul(m.t(), v);
  EXPECT_EQ(column.sizes(), (Shape{3}));
  expect_near_all(column, naive_product(m.t(), v.unsqueeze(1)), 1e-6, "matrix @ vector");
  const Tensor dot = matmul(v, w);
  EXPECT_EQ(dot.dim(), 0);
  expect_near_all(dot, naive_product(v.unsqueeze(0), w.unsqueeze(1)), 1e-6, "dot");
}

TEST(Matmul, BroadcastsBatchDims) {
  Generator g(10);
  const Tensor a = random({2, 1, 3, 4}, g), b = random({3, 4, 5}, g);
  const Tensor out = matmul(a, b);
  ASSERT_EQ(out.sizes(), (Shape{2, 3, 3, 5}));
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      expect_near_all(out.select(0, i).select(0, j),
                      naive_product(a.select(0, i).select(0, 0), b.select(0, j)), 1e-5, "batch");
  // (batch, n, k) @ (k, m) folds the batch into rows; (k) @ (batch, k, m) broadcasts a vector.
  const Tensor folded = matmul(b, random({5, 2}, g));
  EXPECT_EQ(folded.sizes(), (Shape{3, 4, 2}));
  const Tensor v = random({4}, g);
  const Tensor vb = matmul(v, b);
  ASSERT_EQ(vb.sizes(), (Shape{3, 5}));
  expect_near_all(vb.select(0, 1), naive_product(v.unsqueeze(0), b.select(0, 1)), 1e-5, "vec");
}

TEST(Matmul, EmptyInnerDimGivesZeros) {
  const Tensor out = matmul(ones({3, 0}), ones({0, 4}));
  EXPECT_EQ(out.sizes(), (Shape{3, 4}));
  expect_near_all(out, std::vector<double>(12, 0.0), 0.0, "k = 0");
}

TEST(Matmul, HalfAndBFloat16MatchFloat) {
  Generator g(11);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Tensor a = random({19, 37}, g, dtype), b = random({37, 23}, g, dtype);
    const Tensor low = matmul(a, b);
    EXPECT_EQ(low.dtype(), dtype);
    const Tensor reference = matmul(a.to(DType::f32), b.to(DType::f32));
    const double tolerance = dtype == DType::bf16 ? 1e-2 : 2e-3;
    // Accumulation is f32: only the final rounding differs (relative to the result's scale).
    EXPECT_TRUE(allclose(low.to(DType::f32), reference, tolerance, tolerance * 4)) << dtype;
    const Tensor batched =
        bmm(a.unsqueeze(0).expand({2, 19, 37}), b.unsqueeze(0).expand({2, 37, 23}));
    EXPECT_TRUE(allclose(batched.select(0, 1).to(DType::f32), reference, tolerance, tolerance * 4))
        << dtype;
  }
}

TEST(Matmul, F64MatchesNaive) {
  Generator g(12);
  const Tensor a = random({9, 13}, g, DType::f64), b = random({13, 5}, g, DType::f64);
  expect_near_all(matmul(a, b), naive_product(a, b), 1e-12, "f64");
}

// OpenBLAS's thread count is one setting for the whole process, and its bits depend on it. A
// product that wants another count than the products running must wait for them: otherwise a
// DataParallel replica's head layer (2 threads) changed the count under the other replica's
// weight gradients (1 thread each, inside an OpenMP region), and a resumed `ember train --engine
// dp --amp fp16` differed from a straight one in conv1's weights.
TEST(Matmul, AProductWaitsWhileProductsWantingAnotherBlasThreadCountRun) {
  Generator g(16);
  const Tensor a = random({64, 64}, g), b = random({64, 64}, g);
  std::optional<kernels::cpu::BlasThreadsLease> running(std::in_place, 1);  // a product in flight
  ASSERT_EQ(kernels::cpu::blas_threads(), 1);
  std::atomic<bool> done{false};
  Tensor product;
  std::thread wanting_two([&] {
    omp_set_num_threads(2);  // this thread's count, outside any OpenMP region
    product = matmul(a, b);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load()) << "the product wanting 2 threads ran beside one wanting 1";
  EXPECT_EQ(kernels::cpu::blas_threads(), 1) << "the count changed under a running product";
  running.reset();
  wanting_two.join();
  EXPECT_TRUE(done.load());
  EXPECT_EQ(kernels::cpu::blas_threads(), 2);
  expect_near_all(product, naive_product(a, b), 1e-5, "the product that waited");
}

// Products that want the same count run together: a second one-thread product does not wait.
TEST(Matmul, ProductsWantingTheSameBlasThreadCountRunTogether) {
  Generator g(17);
  const Tensor a = random({64, 64}, g), b = random({64, 64}, g);
  std::optional<kernels::cpu::BlasThreadsLease> running(std::in_place, 1);
  std::atomic<bool> done{false};
  Tensor product;
  std::thread wanting_one([&] {
    omp_set_num_threads(1);
    product = matmul(a, b);
    done = true;
  });
  for (int waited_ms = 0; !done && waited_ms < 10000; waited_ms += 10)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(done.load()) << "a product wanting 1 thread waited for another wanting 1";
  running.reset();
  wanting_one.join();
  expect_near_all(product, naive_product(a, b), 1e-5, "the product beside another");
}

TEST(Matmul, MismatchedInnerDimsNameTheShapes) {
  try {
    matmul(ones({4, 3}), ones({5, 2}));
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("matmul: shapes (4,3) and (5,2) cannot be multiplied "
                                         "(3 != 5)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(matmul(ones({2, 4, 3}), ones({3, 5, 2})), std::exception);  // batch 2 vs 3
  EXPECT_THROW(matmul(ones({3}), ones({4})), std::exception);
  EXPECT_THROW(matmul(ones({2, 2}), ones({2, 2}, DType::f64)), std::exception);
}

TEST(Bmm, MatchesNaiveLoopsAndChecksShapes) {
  Generator g(13);
  const Tensor a = random({3, 5, 7}, g), b = random({3, 7, 2}, g);
  const Tensor out = bmm(a, b);
  ASSERT_EQ(out.sizes(), (Shape{3, 5, 2}));
  for (int64_t i = 0; i < 3; ++i)
    expect_near_all(out.select(0, i), naive_product(a.select(0, i), b.select(0, i)), 1e-5, "bmm");
  const Tensor bt = random({3, 2, 7}, g).transpose(1, 2);
  expect_near_all(bmm(a, bt).select(0, 2), naive_product(a.select(0, 2), bt.select(0, 2)), 1e-5,
                  "bmm transposed");
  EXPECT_THROW(bmm(ones({2, 3, 4}), ones({3, 4, 5})), std::exception);
  try {
    bmm(ones({2, 3, 4}), ones({2, 5, 5}));
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be multiplied (4 != 5)"), std::string::npos);
  }
}

TEST(Linear, MatchesNaiveLoopsWithAndWithoutBias) {
  Generator g(14);
  const Tensor x = random({2, 3, 7}, g), weight = random({5, 7}, g), bias = random({5}, g);
  const Tensor out = linear(x, weight, bias);
  ASSERT_EQ(out.sizes(), (Shape{2, 3, 5}));
  std::vector<double> expected = naive_product(x.reshape({6, 7}), weight.t());
  const std::vector<double> b = to_vector<double>(bias);
  const std::vector<double> no_bias = expected;
  for (size_t i = 0; i < expected.size(); ++i)
    expected[i] += b[i % 5];
  expect_near_all(out, expected, 1e-5, "linear with bias");
  expect_near_all(linear(x, weight), no_bias, 1e-5, "linear without bias");
  try {
    linear(x, ones({5, 6}));
    FAIL() << "expected an error";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("cannot be multiplied (7 != 6)"), std::string::npos);
  }
  EXPECT_THROW(linear(x, weight, ones({4})), std::exception);
}

TEST(Linear, GradientsOfAllThreeInputs) {
  Generator g(15);
  Tensor x = random({4, 3}, g), weight = random({2, 3}, g), bias = random({2}, g);
  x.requires_grad_();
  weight.requires_grad_();
  bias.requires_grad_();
  sum(linear(x, weight, bias)).backward();
  // d sum / d bias = number of rows; d / d x = column sums of weight; d / d w = column sums of x.
  expect_near_all(bias.grad(), {4.0, 4.0}, 1e-6, "bias grad");
  const Tensor weight_col_sums = sum(weight.detach(), {0});
  expect_near_all(x.grad().select(0, 2), to_vector<double>(weight_col_sums), 1e-6, "x grad");
  expect_near_all(weight.grad().select(0, 1), to_vector<double>(sum(x.detach(), {0})), 1e-6,
                  "weight grad");
}

}  // namespace
}  // namespace ember
