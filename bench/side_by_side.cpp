// ember next to LibTorch: the same ops, on the same values, in one process, with the same number
// of threads. Prints a markdown table: median times, GFLOP/s or GB/s, the ratio of speeds
// (ember / LibTorch: above 1 means ember is faster) and how far the results are apart.
//
//   ember_vs_libtorch [threads]      (default 2; also sets OpenMP and OpenBLAS)
#include <omp.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "kernels/cpu/blas_kernels_advice.h"
#include "kernels/cpu/gemm.h"
#include "runtime/ops.h"

namespace {

using Clock = std::chrono::steady_clock;

// Median of `repetitions` timed runs after `warmup` untimed ones, in seconds.
double median_seconds(const std::function<void()>& run, int warmup, int repetitions) {
  for (int i = 0; i < warmup; ++i)
    run();
  std::vector<double> times;
  for (int i = 0; i < repetitions; ++i) {
    const auto start = Clock::now();
    run();
    times.push_back(std::chrono::duration<double>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// The LibTorch twin of an ember f32 tensor: same shape, same values.
torch::Tensor to_torch(const ember::Tensor& t) {
  const std::vector<float> values = ember::to_vector<float>(t);
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  return torch::from_blob(const_cast<float*>(values.data()), sizes, torch::kFloat32).clone();
}

// max |ember - torch| / max |torch|: relative to the result's scale, so that entries near 0 do
// not dominate.
double max_relative_difference(const ember::Tensor& mine, const torch::Tensor& theirs) {
  const std::vector<float> a = ember::to_vector<float>(mine);
  const torch::Tensor b_dense = theirs.contiguous();
  const float* b = b_dense.data_ptr<float>();
  double max_diff = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    max_diff = std::max(max_diff, std::abs(static_cast<double>(a[i]) - b[i]));
    max_abs = std::max(max_abs, std::abs(static_cast<double>(b[i])));
  }
  return max_abs > 0.0 ? max_diff / max_abs : max_diff;
}

struct Row {
  std::string op, shape, unit;
  double ember_seconds, torch_seconds, work, difference;
};

void print_table(const std::vector<Row>& rows, int threads) {
  std::printf("\nember vs LibTorch %s, f32, %d thread(s), median times; OpenBLAS kernels: %s\n\n",
              TORCH_VERSION, threads, ember::kernels::cpu::blas_kernels_report().c_str());
  std::printf(
      "| op | shape | ember ms | LibTorch ms | ember | LibTorch | ratio | max rel diff |\n");
  std::printf("|---|---|---:|---:|---:|---:|---:|---:|\n");
  for (const Row& r : rows) {
    const double ember_rate = r.work / r.ember_seconds / 1e9;
    const double torch_rate = r.work / r.torch_seconds / 1e9;
    std::printf("| %s | %s | %.3f | %.3f | %.1f %s | %.1f %s | %.2fx | %.1e |\n", r.op.c_str(),
                r.shape.c_str(), r.ember_seconds * 1e3, r.torch_seconds * 1e3, ember_rate,
                r.unit.c_str(), torch_rate, r.unit.c_str(), r.torch_seconds / r.ember_seconds,
                r.difference);
  }
}

ember::Tensor random_tensor(const ember::Shape& shape, ember::Generator& generator) {
  return ember::uniform(shape, -1.0, 1.0, ember::DType::f32, &generator);
}

// One op in both libraries, `repetitions` timed runs each after 3 warm-ups: its row, with the
// distance between the last results.
Row timed_row(const char* op, const char* shape, const char* unit, double work, int repetitions,
              const std::function<ember::Tensor()>& mine,
              const std::function<torch::Tensor()>& theirs) {
  ember::Tensor out;
  torch::Tensor tout;
  const double mine_seconds = median_seconds([&] { out = mine(); }, 3, repetitions);
  const double theirs_seconds = median_seconds([&] { tout = theirs(); }, 3, repetitions);
  return {op, shape, unit, mine_seconds, theirs_seconds, work, max_relative_difference(out, tout)};
}

Row bench_add(ember::Generator& generator) {
  const int64_t n = 16 * 1024 * 1024;
  const ember::Tensor a = random_tensor({n}, generator), b = random_tensor({n}, generator);
  const torch::Tensor ta = to_torch(a), tb = to_torch(b);
  return timed_row(
      "add", "16M", "GB/s", 3.0 * n * sizeof(float), 20, [&] { return ember::add(a, b); },
      [&] { return ta + tb; });
}

Row bench_matmul(ember::Generator& generator, int64_t n) {
  const ember::Tensor a = random_tensor({n, n}, generator), b = random_tensor({n, n}, generator);
  const torch::Tensor ta = to_torch(a), tb = to_torch(b);
  ember::Tensor out;
  torch::Tensor tout;
  const int reps = n >= 1024 ? 10 : 20;
  const double mine = median_seconds([&] { out = ember::matmul(a, b); }, 3, reps);
  const double theirs = median_seconds([&] { tout = torch::matmul(ta, tb); }, 3, reps);
  const std::string shape = std::to_string(n) + "x" + std::to_string(n);
  return {"matmul",
          shape,
          "GFLOP/s",
          mine,
          theirs,
          2.0 * n * n * n,
          max_relative_difference(out, tout)};
}

Row bench_softmax(ember::Generator& generator) {
  const ember::Tensor x = random_tensor({4096, 1024}, generator);
  const torch::Tensor tx = to_torch(x);
  return timed_row(
      "softmax (last dim)", "4096x1024", "GB/s", 2.0 * x.numel() * sizeof(float), 20,
      [&] { return ember::softmax(x, -1); }, [&] { return torch::softmax(tx, -1); });
}

// A per-channel sum of NCHW activations (a bias gradient, batch norm's statistics written with
// ops): reduced dims that are not adjacent.
Row bench_channel_sum(ember::Generator& generator) {
  const ember::Tensor x = random_tensor({128, 64, 32, 32}, generator);
  const torch::Tensor tx = to_torch(x);
  return timed_row(
      "sum over (N, H, W)", "128x64x32x32", "GB/s", 1.0 * x.numel() * sizeof(float), 20,
      [&] {
        return ember::sum(x, {0, 2, 3});
      },
      [&] {
        return tx.sum({0, 2, 3});
      });
}

Row bench_layer_norm(ember::Generator& generator) {
  const ember::Tensor x = random_tensor({4096, 1024}, generator);
  const ember::Tensor weight = random_tensor({1024}, generator);
  const ember::Tensor bias = random_tensor({1024}, generator);
  const torch::Tensor tx = to_torch(x), tweight = to_torch(weight), tbias = to_torch(bias);
  return timed_row(
      "layer_norm (last dim)", "4096x1024", "GB/s", 2.0 * x.numel() * sizeof(float), 20,
      [&] { return ember::layer_norm(x, {1024}, weight, bias); },
      [&] { return torch::layer_norm(tx, {1024}, tweight, tbias); });
}

// input (128, 32, 32, 32), weight (32, 32, 3, 3), padding 1, no bias.
constexpr int64_t kConvN = 128, kConvC = 32, kConvH = 32, kConvK = 32;
constexpr double kConvFlops = 2.0 * kConvN * kConvK * kConvH * kConvH * kConvC * 9;
const char* const kConvShape = "128x32x32x32, 3x3 -> 32";

Row bench_conv_forward(ember::Generator& generator) {
  const ember::Tensor x = random_tensor({kConvN, kConvC, kConvH, kConvH}, generator);
  const ember::Tensor w = random_tensor({kConvK, kConvC, 3, 3}, generator);
  const torch::Tensor tx = to_torch(x), tw = to_torch(w);
  ember::Tensor out;
  torch::Tensor tout;
  ember::NoGradGuard ember_no_grad;
  torch::NoGradGuard torch_no_grad;
  const double mine =
      median_seconds([&] { out = ember::conv2d(x, w, ember::Tensor(), {.padding = 1}); }, 2, 10);
  const double theirs = median_seconds([&] { tout = torch::conv2d(tx, tw, {}, 1, 1); }, 2, 10);
  return {"conv2d forward",
          kConvShape,
          "GFLOP/s",
          mine,
          theirs,
          kConvFlops,
          max_relative_difference(out, tout)};
}

// Loss = sum of the output; gradients with respect to the input and the weight (3x the
// forward's flops: forward, grad_input, grad_weight).
Row bench_conv_backward(ember::Generator& generator) {
  ember::Tensor x = random_tensor({kConvN, kConvC, kConvH, kConvH}, generator);
  ember::Tensor w = random_tensor({kConvK, kConvC, 3, 3}, generator);
  torch::Tensor tx = to_torch(x).requires_grad_(true), tw = to_torch(w).requires_grad_(true);
  x.requires_grad_(true);
  w.requires_grad_(true);
  const double mine = median_seconds(
      [&] {
        x.set_grad(ember::Tensor());
        w.set_grad(ember::Tensor());
        ember::sum(ember::conv2d(x, w, ember::Tensor(), {.padding = 1})).backward();
      },
      1, 5);
  const double theirs = median_seconds(
      [&] {
        tx.mutable_grad() = torch::Tensor();
        tw.mutable_grad() = torch::Tensor();
        torch::conv2d(tx, tw, {}, 1, 1).sum().backward();
      },
      1, 5);
  const double difference = std::max(max_relative_difference(x.grad(), tx.grad()),
                                     max_relative_difference(w.grad(), tw.grad()));
  return {"conv2d forward+backward", kConvShape, "GFLOP/s", mine, theirs,
          3.0 * kConvFlops,          difference};
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 2;
  if (threads < 1) {
    std::fprintf(stderr, "usage: %s [threads >= 1]\n", argv[0]);
    return 2;
  }
  // One thread count for both: OpenMP (ember's kernels; ember sets OpenBLAS to match before
  // every GEMM) and LibTorch's intra-op pool.
  omp_set_num_threads(threads);
  torch::set_num_threads(threads);

  ember::Generator generator(2024);
  std::vector<Row> rows;
  rows.push_back(bench_add(generator));
  rows.push_back(bench_matmul(generator, 512));
  rows.push_back(bench_matmul(generator, 1024));
  rows.push_back(bench_softmax(generator));
  rows.push_back(bench_channel_sum(generator));
  rows.push_back(bench_layer_norm(generator));
  rows.push_back(bench_conv_forward(generator));
  rows.push_back(bench_conv_backward(generator));
  print_table(rows, threads);
  return 0;
}
