// GEMM on the GPU: cuBLAS(Lt) and ember's own kernels v1 .. v4 (kernels/cuda/gemm_mma.h) side by
// side, c (n, n) = a (n, n) @ b^T with b stored (n, n) row-major, i.e. linear's x @ W^T (the
// layout every version runs natively, v4 included), in bf16 and f16 (f32 accumulation),
// n = 1024 .. 8192. v4 is registered only on a compute capability 9.0 GPU in a build targeting 90.
//
//   cmake -S . -B build -G Ninja -DEMBER_CUDA=ON -DEMBER_BENCH=ON && ninja -C build
//   ember_gemm_bench build/bin/ember_gemm_bench                                   # everything
//   build/bin/ember_gemm_bench --benchmark_filter='bf16/.*/4096' # one shape
//
// Measured like the hardware: the kernels are called directly on raw device buffers (no Tensor,
// no allocation), each timed launch is bracketed by CUDA events on its own stream, the L2 cache is
// flushed before each (a 2 x L2-sized memset), and the reported time is the median launch.
// Counters: TFLOP/s (2 n^3 per product) and pct_of_cublas, the same shape's cuBLAS median as
// the ceiling (measured first; measured on demand when a filter left cuBLAS out).
// Each ember kernel's product is first compared with cuBLAS's: a wrong one is reported as an
// error, without a time.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/common/scalar_types.h"
#include "kernels/cuda/gemm.h"

namespace ember {
namespace {

using kernels::cuda::GemmAlgo;

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    std::fprintf(stderr, "ember_gemm_bench: %s failed: %s\n", what, cudaGetErrorString(status));
    std::exit(1);
  }
}

constexpr int64_t kLargest = 8192;

// Device buffers for the largest shape, shared by every benchmark (smaller shapes use a prefix),
// filled once with N(0, 1) values, plus the L2-flush buffer and the stream and events.
template <typename T>
struct Buffers {
  T* a = nullptr;
  T* b = nullptr;
  T* c = nullptr;
  void* flush = nullptr;
  size_t flush_bytes = 0;
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;

  static Buffers& get() {
    static Buffers buffers = make();
    return buffers;
  }

 private:
  static Buffers make() {
    Buffers s;
    const size_t count = static_cast<size_t>(kLargest * kLargest);
    std::vector<T> host(count);
    std::mt19937 rng(0);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (T& value : host)
      value = T(normal(rng));
    for (T** buffer : {&s.a, &s.b, &s.c}) {
      check(cudaMalloc(reinterpret_cast<void**>(buffer), count * sizeof(T)), "cudaMalloc");
    }
    check(cudaMemcpy(s.a, host.data(), count * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
    // b differs from a: with b = a, c = a a^T would be symmetric, and a kernel that wrote c
    // transposed would still match cuBLAS in matches_cublas().
    for (T& value : host)
      value = T(normal(rng));
    check(cudaMemcpy(s.b, host.data(), count * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
    int device = 0, l2_bytes = 0;
    check(cudaGetDevice(&device), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&l2_bytes, cudaDevAttrL2CacheSize, device), "L2 size");
    s.flush_bytes = std::max<size_t>(size_t{2} * static_cast<size_t>(l2_bytes), size_t{1} << 20);
    check(cudaMalloc(&s.flush, s.flush_bytes), "cudaMalloc");
    check(cudaStreamCreate(&s.stream), "cudaStreamCreate");
    check(cudaEventCreate(&s.start), "cudaEventCreate");
    check(cudaEventCreate(&s.stop), "cudaEventCreate");
    return s;
  }
};

template <typename T>
const char* dtype_name() {
  return std::is_same_v<T, Half> ? "f16" : "bf16";
}

const char* algo_name(GemmAlgo algo) {
  switch (algo) {
    case GemmAlgo::cublas:
      return "cublas";
    case GemmAlgo::ember:
      return "ember";
    case GemmAlgo::ember_v1:
      return "ember-v1";
    case GemmAlgo::ember_v2:
      return "ember-v2";
    case GemmAlgo::ember_v3:
      return "ember-v3";
    case GemmAlgo::ember_v4:
      return "ember-v4";
  }
  return "?";
}

// One timed product of size n: milliseconds between the events around the launch.
template <typename T>
float timed_product(GemmAlgo algo, int64_t n) {
  Buffers<T>& s = Buffers<T>::get();
  kernels::cuda::GemmShape shape;
  shape.trans_b = true;
  shape.m = shape.n = shape.k = n;
  shape.lda = shape.ldb = shape.ldc = n;
  kernels::cuda::GemmOptions options;
  options.algo = algo;
  check(cudaMemsetAsync(s.flush, 0, s.flush_bytes, s.stream), "L2 flush");
  check(cudaEventRecord(s.start, s.stream), "cudaEventRecord");
  kernels::cuda::gemm<T>(shape, options, 1.0f, s.a, s.b, 0.0f, s.c, s.stream);
  check(cudaEventRecord(s.stop, s.stream), "cudaEventRecord");
  check(cudaEventSynchronize(s.stop), "cudaEventSynchronize");
  float ms = 0.0f;
  check(cudaEventElapsedTime(&ms, s.start, s.stop), "cudaEventElapsedTime");
  return ms;
}

double median(std::vector<float> values) {
  std::sort(values.begin(), values.end());
  return values.empty() ? 0.0 : values[values.size() / 2];
}

double tflops(int64_t n, double ms) {
  return ms > 0.0 ? 2.0 * static_cast<double>(n) * n * n / (ms * 1e-3) / 1e12 : 0.0;
}

// cuBLAS's median TFLOP/s per (dtype, n): the ceiling for pct_of_cublas.
std::map<std::pair<std::string, int64_t>, double>& cublas_tflops() {
  static std::map<std::pair<std::string, int64_t>, double> measured;
  return measured;
}

template <typename T>
double cublas_ceiling(int64_t n) {
  const auto key = std::make_pair(std::string(dtype_name<T>()), n);
  auto it = cublas_tflops().find(key);
  if (it != cublas_tflops().end()) return it->second;
  timed_product<T>(GemmAlgo::cublas, n);  // warm-up: picks and caches the algorithm
  std::vector<float> times;
  for (int i = 0; i < 20; ++i)
    times.push_back(timed_product<T>(GemmAlgo::cublas, n));
  return cublas_tflops()[key] = tflops(n, median(times));
}

// c of `algo` against cuBLAS's at the same shape, element by element within 2e-2 (|cublas| + 1):
// both accumulate in f32 and round once, so they differ by a 16-bit ulp; a wrong layout, a lost
// k-slice or an unwritten tile differs by O(1). An empty string when they agree.
template <typename T>
std::string mismatch_with_cublas(GemmAlgo algo, int64_t n) {
  Buffers<T>& s = Buffers<T>::get();
  const size_t count = static_cast<size_t>(n * n);
  std::vector<T> mine(count), reference(count);
  timed_product<T>(algo, n);
  check(cudaMemcpy(mine.data(), s.c, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  timed_product<T>(GemmAlgo::cublas, n);
  check(cudaMemcpy(reference.data(), s.c, count * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (size_t i = 0; i < count; ++i) {
    const float got = static_cast<float>(mine[i]), want = static_cast<float>(reference[i]);
    if (!(std::abs(got - want) <= 2e-2f * (std::abs(want) + 1.0f))) {
      return "c[" + std::to_string(i / n) + ", " + std::to_string(i % n) +
             "] = " + std::to_string(got) + ", cuBLAS gives " + std::to_string(want);
    }
  }
  return "";
}

template <typename T>
void BM_gemm(benchmark::State& state, GemmAlgo algo) {
  const int64_t n = state.range(0);
  timed_product<T>(algo, n);  // warm-up (cuBLAS's heuristic, v3's shared-memory attribute)
  // A kernel's time counts only if its product is right: checked once per (kernel, dtype, n),
  // and every repetition reports the same (the check copies and compares 2 n^2 values).
  if (algo != GemmAlgo::cublas) {
    static std::map<std::tuple<int, std::string, int64_t>, std::string> checked;
    const auto key = std::make_tuple(static_cast<int>(algo), std::string(dtype_name<T>()), n);
    if (checked.find(key) == checked.end()) checked[key] = mismatch_with_cublas<T>(algo, n);
    const std::string& wrong = checked[key];
    if (!wrong.empty()) {
      state.SkipWithError(("result differs from cuBLAS: " + wrong).c_str());
      return;
    }
  }
  std::vector<float> times;
  for (auto _ : state) {
    const float ms = timed_product<T>(algo, n);
    state.SetIterationTime(ms * 1e-3);
    times.push_back(ms);
  }
  const double achieved = tflops(n, median(times));
  if (algo == GemmAlgo::cublas) {
    cublas_tflops()[{dtype_name<T>(), n}] = achieved;
  }
  state.counters["TFLOP/s"] = achieved;
  state.counters["pct_of_cublas"] = 100.0 * achieved / cublas_ceiling<T>(n);
}

template <typename T>
void register_dtype() {
  for (GemmAlgo algo : {GemmAlgo::cublas, GemmAlgo::ember_v1, GemmAlgo::ember_v2,
                        GemmAlgo::ember_v3, GemmAlgo::ember_v4}) {
    if (!kernels::cuda::gemm_algo_available(algo)) continue;
    const std::string name = std::string("gemm/") + dtype_name<T>() + "/" + algo_name(algo);
    auto* bench = benchmark::RegisterBenchmark(
        name.c_str(), [algo](benchmark::State& state) { BM_gemm<T>(state, algo); });
    bench->UseManualTime()->Unit(benchmark::kMillisecond);
    for (int64_t n : {1024, 2048, 4096, 8192})
      bench->Arg(n);
    // v1 runs on CUDA cores: a few launches at 8192 already take seconds.
    if (algo == GemmAlgo::ember_v1) bench->Iterations(3);
  }
}

}  // namespace
}  // namespace ember

int main(int argc, char** argv) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(
        stderr, "ember_gemm_bench: no CUDA device visible (CUDA_VISIBLE_DEVICES=%s)\n",
        std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "<unset>");
    return 1;
  }
  ember::register_dtype<ember::BFloat16>();
  ember::register_dtype<ember::Half>();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
