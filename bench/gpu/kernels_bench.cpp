// Google Benchmark suite of ember's ops on one GPU, through the public op API (what users run),
// timed as the hardware is measured: CUDA events around each call, warm-up first, the L2 cache
// flushed before every timed call (a cudaMemsetAsync over 2x cudaDeviceProp::l2CacheSize), and
// medians over repetitions.
//
//   cmake -S . -B build -G Ninja -DEMBER_CUDA=ON -DEMBER_BENCH=ON -DCMAKE_CUDA_ARCHITECTURES=90
//   ninja -C build ember_gpu_bench
//   build/bin/ember_gpu_bench --benchmark_repetitions=10 --benchmark_report_aggregates_only=true
//     --benchmark_out=gpu_bench.json --benchmark_out_format=json --skipped_out=skipped.json
//
// bench/gpu/torch_side_by_side.py reads that JSON and times the same cases in PyTorch.
//
// Each case reports counters (medians over repetitions of each repetition's value):
//   ms           time of one call
//   GB/s         bytes / time, with bytes the fewest the op must move (each input read once, each
//                output written once; decimal GB)
//   pct_of_copy  GB/s over the device-to-device copy bandwidth measured at the start of the same
//                run (cudaMemcpyAsync of 256 MB, counting bytes read plus bytes written)
//   floor_ms     bytes / copy bandwidth: the time no version can beat by much
// The bytes, with N elements of 4 bytes (f32) per tensor:
//   add, mul        a, b read, out written                    3 N 4      (N = 64M: 256 MB each)
//                   (_misaligned: inputs one element into their buffers: the scalar path)
//   bias add        x (512, 64, 32, 32) + b (1, 64, 1, 1) in bf16 into a new tensor, conv2d's
//                   bias (a broadcast: the vectorised row path): x read, out written  2 N 2
//                   (_f32: the same in f32, 2 N 4; _4x4: x (512, 512, 4, 4), rows of 16)
//   cast f32->bf16  read 4 N, write 2 N                       6 N
//   softmax fwd     x read, y written                         2 N 4
//   layer_norm fwd  x read, y written (weight, bias, stats: one row each, not counted)  2 N 4
//   layer_norm f+b  forward 2 N 4, backward reads x and dy and writes dx: 3 N 4        5 N 4
//   cross-entropy   forward reads the logits: N 4; backward reads them, writes dlogits: 2 N 4
//   batch_norm f+b  bf16 or f16 (512, 64, 32, 32), resnet9's first activations, training mode with
//                   f32 weight and bias: forward reads x, writes y (2 N 2); backward reads x and
//                   dy, writes dx (3 N 2): 5 N 2. (ember reads x once more in each direction, for
//                   the statistics and the per-channel sums, as cuDNN does: 8 N 2 moved.)
//   batch_norm_relu f+b  the same with a ReLU after it (as in resnet9's blocks), fused by ember
//                   (batch_norm_relu): the same 5 N 2 counted, as ReLU's mask can come from x.
//                   (ember also reads its saved output backward: 10 N 2 moved; the two ops
//                   apart move 13 N 2.)
//   AdamW (f32)     per parameter: read p, g, m, v (16 B), write p, m, v (12 B) = 28 B; over
//                   100M parameters 2.8 GB
// matmul reports TFLOP/s (2 M N K); the resnet9 step reports ms and images/s.
//
// An op ember cannot run on CUDA yet (it throws "...: not implemented for CUDA tensors yet") is
// reported as skipped with that message (state.SkipWithError), and the rest still run; the
// reasons are printed at the end and written to --skipped_out=PATH (JSON) when given.
//
// SIGTERM or SIGINT (bench/gpu/run.sh's `timeout` at the end of the step's budget) stops the
// case being timed after its current call and skips the rest ("stopped: ..."), so that Google
// Benchmark still writes a complete --benchmark_out JSON with every case finished so far.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "bench/gpu/resnet9_step.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/stream.h"
#include "runtime/ops.h"

namespace ember {
namespace {

constexpr int kDevice = 0;
constexpr int kWarmupCalls = 3;
constexpr const char* kStopped = "stopped: SIGTERM (the step's time budget ran out)";

// Set by SIGTERM/SIGINT: finish the call in flight, skip the rest, write the JSON. A second
// signal kills as usual (e.g. a second Ctrl-C when a call hangs).
volatile std::sig_atomic_t stop_requested = 0;
void request_stop(int signal_number) {
  stop_requested = 1;
  std::signal(signal_number, SIG_DFL);
}
constexpr int64_t kMB = 1 << 20;
constexpr int64_t k256MBofF32 = 256 * kMB / 4;  // 64M elements

TensorOptions on_gpu(DType dtype = DType::f32) {
  return TensorOptions(dtype, Device::cuda(kDevice));
}
cudaStream_t stream() {
  return cuda::current_stream(kDevice);
}

// Written before every timed call so that no input is still in L2 from the last one.
class L2Flusher {
 public:
  L2Flusher() {
    cudaDeviceProp prop{};
    EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, kDevice));
    bytes_ = 2 * static_cast<size_t>(std::max(prop.l2CacheSize, 1 << 20));
    EMBER_CUDA_CHECK(cudaMalloc(&buffer_, bytes_));
  }
  ~L2Flusher() { cudaFree(buffer_); }
  L2Flusher(const L2Flusher&) = delete;
  L2Flusher& operator=(const L2Flusher&) = delete;
  void flush() {
    flips_ ^= 1;  // a different value each time: nothing can skip the write
    EMBER_CUDA_CHECK(cudaMemsetAsync(buffer_, flips_, bytes_, stream()));
  }

 private:
  void* buffer_ = nullptr;
  size_t bytes_ = 0;
  int flips_ = 0;
};

L2Flusher& flusher() {
  static L2Flusher instance;
  return instance;
}

class EventPair {
 public:
  EventPair() {
    EMBER_CUDA_CHECK(cudaEventCreate(&start_));
    EMBER_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventPair() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  // Seconds `fn` takes on the current stream, after an L2 flush.
  double time(const std::function<void()>& fn) {
    flusher().flush();
    EMBER_CUDA_CHECK(cudaEventRecord(start_, stream()));
    fn();
    EMBER_CUDA_CHECK(cudaEventRecord(stop_, stream()));
    EMBER_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    EMBER_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms / 1e3;
  }

 private:
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// The D2D copy bandwidth in GB/s (bytes read + written), measured once: median of 21 copies of
// 256 MB, after at least 200 ms of copies (so that the GPU has left its idle clocks: a ceiling
// measured too low would put every case's pct_of_copy above 100). Every memory-bound case is
// reported against it.
double copy_bandwidth_gbps() {
  static const double gbps = [] {
    const size_t bytes = 256 * kMB;
    void *src = nullptr, *dst = nullptr;
    EMBER_CUDA_CHECK(cudaMalloc(&src, bytes));
    EMBER_CUDA_CHECK(cudaMalloc(&dst, bytes));
    EMBER_CUDA_CHECK(cudaMemsetAsync(src, 1, bytes, stream()));
    EventPair events;
    auto copy = [&] {
      EMBER_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream()));
    };
    const auto warm_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(200);
    for (int i = 0; i < kWarmupCalls || std::chrono::steady_clock::now() < warm_until; ++i)
      events.time(copy);
    std::vector<double> seconds;
    for (int i = 0; i < 21; ++i)
      seconds.push_back(events.time(copy));
    std::nth_element(seconds.begin(), seconds.begin() + 10, seconds.end());
    EMBER_CUDA_CHECK(cudaFree(src));
    EMBER_CUDA_CHECK(cudaFree(dst));
    return 2.0 * static_cast<double>(bytes) / seconds[10] / 1e9;
  }();
  return gbps;
}

// What one call moves and computes, for the counters.
struct Work {
  double bytes = 0;   // fewest bytes through device memory (0: not memory-bound)
  double flops = 0;   // for matmul
  double images = 0;  // for a training step
};

// Cases skipped and why, for --skipped_out. Google Benchmark 1.7 writes a case that errored in
// every repetition as its per-repetition runs ("error_occurred", "error_message") even with
// --benchmark_report_aggregates_only, but other versions differ: the table scripts read the
// reasons from here too (bench/gpu/ember_table.py).
std::map<std::string, std::string>& skipped_cases() {
  static std::map<std::string, std::string> cases;
  return cases;
}
std::string& current_case() {
  static std::string name;
  return name;
}

// Whether this repetition of the current case has entered its `for (auto _ : state)` loop.
bool& loop_started() {
  static bool started = false;
  return started;
}

// Skips this repetition of the case. Outside the timing loop, it then runs the loop (empty: a
// skipped State runs no iteration) so that the run reports the case's full iteration count, as a
// run skipped inside the loop or completed does: Google Benchmark 1.7's ComputeStats (Debian's
// build keeps its checks) aborts the whole program when the repetitions of one case report
// different counts, which a repetition skipped before its loop (0) against the others did.
void skip(benchmark::State& state, const std::string& message) {
  state.SkipWithError(message.c_str());
  skipped_cases()[current_case()] = message;
  if (!loop_started()) {
    loop_started() = true;
    for (auto _ : state) {
    }
  }
}

// Times `call` once per benchmark iteration (manual time, CUDA events, L2 flushed first) after a
// warm-up. `setup`, if any, runs before each call outside the timed region (e.g. dropping the
// last call's gradients). An exception (an op not implemented for CUDA yet, say) skips the case
// with its message.
void run_case(benchmark::State& state, const Work& work, const std::function<void()>& call,
              const std::function<void()>& setup = {}) {
  EventPair events;
  try {
    for (int i = 0; i < kWarmupCalls; ++i) {
      if (stop_requested) {
        skip(state, kStopped);
        return;
      }
      if (setup) setup();
      call();
    }
    EMBER_CUDA_CHECK(cudaStreamSynchronize(stream()));
  } catch (const std::exception& e) {
    skip(state, e.what());
    return;
  }
  double total_seconds = 0;
  int64_t calls = 0;
  loop_started() = true;
  for (auto _ : state) {
    if (stop_requested) {
      skip(state, kStopped);
      break;
    }
    try {
      if (setup) setup();
      const double seconds = events.time(call);
      state.SetIterationTime(seconds);
      total_seconds += seconds;
      ++calls;
    } catch (const std::exception& e) {
      skip(state, e.what());
      break;
    }
  }
  if (calls == 0 || total_seconds <= 0) return;
  const double seconds = total_seconds / static_cast<double>(calls);
  state.counters["ms"] = seconds * 1e3;
  if (work.bytes > 0) {
    const double gbps = work.bytes / seconds / 1e9;
    state.counters["bytes"] = work.bytes;
    state.counters["GB/s"] = gbps;
    state.counters["pct_of_copy"] = 100.0 * gbps / copy_bandwidth_gbps();
    state.counters["floor_ms"] = work.bytes / (copy_bandwidth_gbps() * 1e9) * 1e3;
  }
  if (work.flops > 0) state.counters["TFLOP/s"] = work.flops / seconds / 1e12;
  if (work.images > 0) state.counters["images/s"] = work.images / seconds;
}

// Runs `body(state)` and turns an exception during setup (allocating, filling the
// inputs) into a skipped case too.
void guarded(benchmark::State& state, const std::function<void(benchmark::State&)>& body) {
  if (stop_requested) {
    skip(state, kStopped);
    return;
  }
  try {
    body(state);
  } catch (const std::exception& e) {
    skip(state, e.what());
  }
}

// ---- the cases -------------------------------------------------------------------------------

void bm_copy(benchmark::State& state) {
  const Tensor src = randn({k256MBofF32}, on_gpu());
  Tensor dst = empty({k256MBofF32}, on_gpu());
  run_case(state, {.bytes = 2.0 * 256 * kMB}, [&] {
    EMBER_CUDA_CHECK(cudaMemcpyAsync(dst.data_ptr(), src.data_ptr(), 256 * kMB,
                                     cudaMemcpyDeviceToDevice, stream()));
  });
}

// a + b or a * b over 256 MB per tensor (64M f32 or 128M bf16). misaligned: a and b are views
// starting one element into their buffers, which keeps the elementwise kernel off its 16-byte
// vector path (kernels/cuda/strided_loop.cuh): the same bytes, one element per access.
void bm_binary(benchmark::State& state, bool multiply, DType dtype, bool misaligned = false) {
  const int64_t n = 256 * kMB / static_cast<int64_t>(element_size(dtype));
  const int64_t first = misaligned ? 1 : 0;
  const Tensor a = randn({n + first}, on_gpu()).to(dtype).slice(0, first, n + first);
  const Tensor b = randn({n + first}, on_gpu()).to(dtype).slice(0, first, n + first);
  run_case(state, {.bytes = 3.0 * 256 * kMB},
           [&] { const Tensor out = multiply ? mul(a, b) : add(a, b); });
}

// conv2d's bias add, x (512, channels, side, side) + bias (1, channels, 1, 1): a broadcast, the
// layout (N, C, H * W) with the bias's strides (0, 1, 0). Rows of H * W elements that are whole
// packets (16 bytes) take the elementwise loop's vectorised row path (one walk of the dims per
// packet, kernels/cuda/strided_loop.cuh), others the scalar strided path (one per element).
// resnet9's first activations (64 channels of 32x32) and its last (512 channels of 4x4: rows of
// two bf16 packets).
void bm_bias_add(benchmark::State& state, DType dtype, int64_t channels, int64_t side) {
  const Tensor x = randn({512, channels, side, side}, on_gpu()).to(dtype);
  const Tensor bias = randn({channels}, on_gpu()).to(dtype).reshape({1, channels, 1, 1});
  const double element = static_cast<double>(element_size(dtype));
  run_case(state, {.bytes = 2.0 * element * static_cast<double>(x.numel())},
           [&] { const Tensor out = add(x, bias); });
}

// A per-channel sum over resnet9's first activations (sum(x, {0, 2, 3}), the bias gradient's
// reduction written with ops): one read of x on batch norm's plan.
void bm_sum_channels(benchmark::State& state) {
  const Tensor x = randn({512, 64, 32, 32}, on_gpu()).to(DType::bf16);
  run_case(state, {.bytes = 2.0 * static_cast<double>(x.numel())}, [&] {
    const Tensor out = sum(x, {0, 2, 3});
  });
}

// 256 MB of f32 cast to a 16-bit dtype (f16 or bf16).
void bm_cast_from_f32(benchmark::State& state, DType to) {
  const Tensor x = randn({k256MBofF32}, on_gpu());
  run_case(state, {.bytes = 6.0 * static_cast<double>(k256MBofF32)},
           [&] { const Tensor out = x.to(to); });
}

// x (256 MB / 4 / row, row) f32.
Shape rows_of(int64_t row) {
  return {k256MBofF32 / row, row};
}

void bm_softmax(benchmark::State& state, int64_t row) {
  const Tensor x = randn(rows_of(row), on_gpu());
  run_case(state, {.bytes = 2.0 * 4 * static_cast<double>(k256MBofF32)},
           [&] { const Tensor y = softmax(x, -1); });
}

void bm_layer_norm(benchmark::State& state, int64_t row, bool backward) {
  const double n_bytes = 4.0 * static_cast<double>(k256MBofF32);
  Tensor x = randn(rows_of(row), on_gpu());
  Tensor weight = randn({row}, on_gpu()), bias = randn({row}, on_gpu());
  const Tensor dy = randn(rows_of(row), on_gpu());
  if (backward) {
    x.requires_grad_();
    weight.requires_grad_();
    bias.requires_grad_();
  }
  // Gradients set to none before each call, so the backward writes them instead of adding.
  auto drop_grads = [&] {
    for (Tensor* t : {&x, &weight, &bias})
      t->set_grad(Tensor());
  };
  run_case(
      state, {.bytes = (backward ? 5.0 : 2.0) * n_bytes},
      [&] {
        const Tensor y = layer_norm(x, {row}, weight, bias);
        if (backward) y.backward(dy);
      },
      backward ? std::function<void()>(drop_grads) : std::function<void()>());
}

void bm_cross_entropy(benchmark::State& state, int64_t classes, bool backward) {
  const double n_bytes = 4.0 * static_cast<double>(k256MBofF32);
  Tensor logits = randn(rows_of(classes), on_gpu());
  const Tensor target = randint(0, classes, {k256MBofF32 / classes}, on_gpu(DType::i64));
  if (backward) logits.requires_grad_();
  run_case(
      state, {.bytes = (backward ? 3.0 : 1.0) * n_bytes},
      [&] {
        const Tensor loss = cross_entropy(logits, target);
        if (backward) loss.backward();
      },
      backward ? std::function<void()>([&] { logits.set_grad(Tensor()); })
               : std::function<void()>());
}

// Batch norm in training mode over resnet9's first activations (bf16, as under autocast), with
// f32 weight and bias and running statistics: forward, then backward. relu: with the ReLU after
// it, fused (batch_norm_relu).
void bm_batch_norm(benchmark::State& state, DType dtype, bool relu) {
  const Shape shape = {512, 64, 32, 32};
  const int64_t n = 512 * 64 * 32 * 32;
  Tensor x = randn(shape, on_gpu()).to(dtype);
  Tensor weight = ones({64}, on_gpu()), bias = zeros({64}, on_gpu());
  Tensor running_mean = zeros({64}, on_gpu()), running_var = ones({64}, on_gpu());
  const Tensor dy = randn(shape, on_gpu()).to(dtype);
  for (Tensor* t : {&x, &weight, &bias})
    t->requires_grad_();
  run_case(
      state, {.bytes = 5.0 * 2 * static_cast<double>(n)},
      [&] {
        const Tensor y =
            relu ? batch_norm_relu(x, running_mean, running_var, weight, bias, true, 0.1, 1e-5)
                 : batch_norm(x, running_mean, running_var, weight, bias, true, 0.1, 1e-5);
        y.backward(dy);
      },
      [&] {
        for (Tensor* t : {&x, &weight, &bias})
          t->set_grad(Tensor());
      });
}

// 100M f32 parameters in 25 tensors of 4M (a model's worth of layers), gradients random.
constexpr int64_t kAdamTensors = 25, kAdamTensorSize = 4'000'000;

void bm_adamw(benchmark::State& state) {
  std::vector<Tensor> params;
  for (int64_t i = 0; i < kAdamTensors; ++i) {
    Tensor p = randn({kAdamTensorSize}, on_gpu());
    p.requires_grad_();
    p.set_grad(randn({kAdamTensorSize}, on_gpu()));
    params.push_back(p);
  }
  optim::AdamWOptions options;
  options.fused = true;
  optim::AdamW adamw(params, options);
  run_case(state, {.bytes = 28.0 * static_cast<double>(kAdamTensors * kAdamTensorSize)},
           [&] { adamw.step(); });
}

void bm_matmul(benchmark::State& state, int64_t size, DType dtype) {
  const Tensor a = randn({size, size}, on_gpu()).to(dtype),
               b = randn({size, size}, on_gpu()).to(dtype);
  const double m = static_cast<double>(size);
  run_case(state, {.flops = 2.0 * m * m * m}, [&] { const Tensor c = matmul(a, b); });
}

// One training step of `ember train`'s model and batch on random data (bench/gpu/resnet9_step.h):
// bf16 or fp16 autocast (fp16 with a GradScaler, whose step reads its non-finite flag on the
// host), or f32 (exact f32 convolutions, as ember computes them). Timed per step like every case,
// so the three differ by their GPU work, not by how far the host runs ahead
// (bench/gpu/engines_gpu.py measures that).
void bm_resnet9_step(benchmark::State& state, std::optional<DType> autocast_dtype) {
  bench::Resnet9Step step(autocast_dtype, kDevice);
  run_case(state, {.images = static_cast<double>(bench::Resnet9Step::kBatch)}, [&] { step(); });
}

// The f32 step with TF32 convolutions and matmuls (`ember train --tf32`; PyTorch's default
// convolutions), the switches put back afterwards.
void bm_resnet9_tf32_step(benchmark::State& state) {
  struct AllowTf32 {
    bool conv = conv_allow_tf32(), matmul = matmul_allow_tf32();
    AllowTf32() {
      set_conv_allow_tf32(true);
      set_matmul_allow_tf32(true);
    }
    ~AllowTf32() {
      set_conv_allow_tf32(conv);
      set_matmul_allow_tf32(matmul);
    }
  } const allowed;
  bm_resnet9_step(state, std::nullopt);
}

void register_cases() {
  using benchmark::State;
  // Each case: its own name (bench/gpu/torch_side_by_side.py uses the same), manual time from
  // CUDA events, a fixed number of timed calls per repetition.
  auto add_case = [](const std::string& name, int iterations, std::function<void(State&)> fn) {
    benchmark::RegisterBenchmark(name.c_str(),
                                 [name, fn](State& state) {
                                   current_case() = name;
                                   loop_started() = false;
                                   guarded(state, fn);
                                 })
        ->UseManualTime()
        ->Iterations(iterations)
        ->Unit(benchmark::kMillisecond);
  };
  add_case("copy_d2d_256MB", 20, bm_copy);
  add_case("add_f32_256MB", 20, [](State& s) { bm_binary(s, false, DType::f32); });
  add_case("add_bf16_256MB", 20, [](State& s) { bm_binary(s, false, DType::bf16); });
  add_case("add_f16_256MB", 20, [](State& s) { bm_binary(s, false, DType::f16); });
  add_case("add_f32_256MB_misaligned", 20, [](State& s) { bm_binary(s, false, DType::f32, true); });
  add_case("add_bf16_256MB_misaligned", 20,
           [](State& s) { bm_binary(s, false, DType::bf16, true); });
  add_case("mul_f32_256MB", 20, [](State& s) { bm_binary(s, true, DType::f32); });
  add_case("bias_add_bf16_r9", 20, [](State& s) { bm_bias_add(s, DType::bf16, 64, 32); });
  add_case("bias_add_f32_r9", 20, [](State& s) { bm_bias_add(s, DType::f32, 64, 32); });
  add_case("bias_add_bf16_r9_4x4", 20, [](State& s) { bm_bias_add(s, DType::bf16, 512, 4); });
  add_case("sum_channels_bf16_r9", 20, bm_sum_channels);
  add_case("cast_f32_bf16_256MB", 20, [](State& s) { bm_cast_from_f32(s, DType::bf16); });
  add_case("cast_f32_f16_256MB", 20, [](State& s) { bm_cast_from_f32(s, DType::f16); });
  for (const auto& [row, label] :
       {std::pair<int64_t, const char*>{1024, "1K"}, {4096, "4K"}, {32768, "32K"}}) {
    const int64_t r = row;
    add_case(std::string("softmax_row") + label, 10, [r](State& s) { bm_softmax(s, r); });
    add_case(std::string("layer_norm_fwd_row") + label, 10,
             [r](State& s) { bm_layer_norm(s, r, false); });
    add_case(std::string("layer_norm_fwdbwd_row") + label, 5,
             [r](State& s) { bm_layer_norm(s, r, true); });
    add_case(std::string("cross_entropy_fwd_row") + label, 10,
             [r](State& s) { bm_cross_entropy(s, r, false); });
    add_case(std::string("cross_entropy_fwdbwd_row") + label, 5,
             [r](State& s) { bm_cross_entropy(s, r, true); });
  }
  add_case("batch_norm_fwdbwd_bf16_r9", 10, [](State& s) { bm_batch_norm(s, DType::bf16, false); });
  add_case("batch_norm_fwdbwd_f16_r9", 10, [](State& s) { bm_batch_norm(s, DType::f16, false); });
  add_case("batch_norm_relu_fwdbwd_bf16_r9", 10,
           [](State& s) { bm_batch_norm(s, DType::bf16, true); });
  add_case("batch_norm_relu_fwdbwd_f16_r9", 10,
           [](State& s) { bm_batch_norm(s, DType::f16, true); });
  add_case("adamw_fused_100M", 10, bm_adamw);
  add_case("matmul_bf16_8192", 10, [](State& s) { bm_matmul(s, 8192, DType::bf16); });
  add_case("matmul_f32_4096", 10, [](State& s) { bm_matmul(s, 4096, DType::f32); });
  add_case("resnet9_s64_b512_bf16_step", 10, [](State& s) { bm_resnet9_step(s, DType::bf16); });
  add_case("resnet9_s64_b512_fp16_step", 10, [](State& s) { bm_resnet9_step(s, DType::f16); });
  add_case("resnet9_s64_b512_f32_step", 10, [](State& s) { bm_resnet9_step(s, std::nullopt); });
  add_case("resnet9_s64_b512_tf32_step", 10, bm_resnet9_tf32_step);
}

}  // namespace
}  // namespace ember

namespace {

// Our one flag, --skipped_out=PATH (a JSON object: case -> reason), taken out of argv before
// Google Benchmark parses the rest.
std::string take_skipped_out(int& argc, char** argv) {
  const std::string prefix = "--skipped_out=";
  std::string path;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg.rfind(prefix, 0) == 0) {
      path = arg.substr(prefix.size());
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return path;
}

std::string json_string(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += ' ';
    } else {
      out += c;
    }
  }
  return out + "\"";
}

void write_skipped(const std::string& path) {
  const auto& cases = ember::skipped_cases();
  if (!cases.empty()) std::printf("\nskipped cases:\n");
  for (const auto& [name, reason] : cases)
    std::printf("  %s: %s\n", name.c_str(), reason.c_str());
  if (path.empty()) return;
  std::ofstream out(path);
  out << "{";
  const char* separator = "\n";
  for (const auto& [name, reason] : cases) {
    out << separator << "  " << json_string(name) << ": " << json_string(reason);
    separator = ",\n";
  }
  out << "\n}\n";
}

}  // namespace

int main(int argc, char** argv) {
  const std::string skipped_out = take_skipped_out(argc, argv);
  std::signal(SIGTERM, ember::request_stop);
  std::signal(SIGINT, ember::request_stop);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  if (ember::cuda_device_count() == 0) {
    std::fprintf(stderr,
                 "ember_gpu_bench: no CUDA device visible (nvidia-smi? CUDA_VISIBLE_DEVICES?)\n");
    return 1;
  }
  cudaDeviceProp prop{};
  EMBER_CUDA_CHECK(cudaGetDeviceProperties(&prop, ember::kDevice));
  benchmark::AddCustomContext("gpu", prop.name);
  benchmark::AddCustomContext("l2_bytes", std::to_string(prop.l2CacheSize));
  benchmark::AddCustomContext("copy_GBps", std::to_string(ember::copy_bandwidth_gbps()));
  std::printf("%s: L2 %d MB, device-to-device copy %.0f GB/s (read + write, 256 MB)\n", prop.name,
              prop.l2CacheSize >> 20, ember::copy_bandwidth_gbps());
  ember::register_cases();
  benchmark::RunSpecifiedBenchmarks();
  write_skipped(skipped_out);
  benchmark::Shutdown();
  return 0;
}
