// Google Benchmark suite of ember's CPU kernels and ops, reporting bytes/s and FLOP/s.
//
//   cmake -S . -B build -G Ninja -DEMBER_BENCH=ON && cmake --build build --target ember_bench
//   OMP_NUM_THREADS=2 build/bin/ember_bench --benchmark_repetitions=5
//                     --benchmark_report_aggregates_only=true
//
// The elementwise and reduction benchmarks call kernels/ directly (no Tensor, no allocation),
// which is what a kernel microbenchmark wants; the rest go through the ops as a user calls them.
// Bytes count what the kernel must move (each input read once, the output written once).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <string>
#include <type_traits>

#include "kernels/common/scalar_types.h"
#include "kernels/cpu/blas_kernels_advice.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/convert_runs.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/optimizers.h"
#include "kernels/cpu/reduce.h"
#include "runtime/autograd/node.h"
#include "runtime/ops.h"
#include "runtime/ops/layout.h"

namespace ember {
namespace {

void set_bytes(benchmark::State& state, double bytes_per_iteration) {
  state.counters["bytes_per_second"] =
      benchmark::Counter(bytes_per_iteration, benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1024);
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["FLOP/s"] =
      benchmark::Counter(flops_per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

template <typename T>
DType dtype_for() {
  return dtype_of<T>;
}

// out = a + b over n dense elements: the kernel's flat, vectorised path.
template <typename T>
void BM_add_kernel(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n}).to(dtype_for<T>()), b = randn({n}).to(dtype_for<T>());
  Tensor out = empty({n}, dtype_for<T>());
  const kernels::StridedLayout layout = make_layout(out, {&a, &b}, "add");
  for (auto _ : state) {
    kernels::cpu::binary<T>(kernels::BinaryOp::add, layout, out.data<T>(), a.data<T>(), b.data<T>(),
                            1.0);
    benchmark::ClobberMemory();
  }
  set_bytes(state, 3.0 * static_cast<double>(n * static_cast<int64_t>(sizeof(T))));
  set_flops(state, static_cast<double>(n));
}
BENCHMARK(BM_add_kernel<float>)->Arg(1 << 16)->Arg(1 << 24)->UseRealTime();
BENCHMARK(BM_add_kernel<BFloat16>)->Arg(1 << 24)->UseRealTime();
BENCHMARK(BM_add_kernel<Half>)->Arg(1 << 24)->UseRealTime();

// out = a + b with b a row broadcast over (rows, cols) and a transposed: the strided path.
void BM_add_kernel_strided(benchmark::State& state) {
  const int64_t rows = 4096, cols = state.range(0);
  Tensor a = randn({cols, rows}).t(), b = randn({cols});
  Tensor out = empty({rows, cols});
  const kernels::StridedLayout layout = make_layout(out, {&a, &b}, "add");
  for (auto _ : state) {
    kernels::cpu::binary<float>(kernels::BinaryOp::add, layout, out.data<float>(),
                                static_cast<const float*>(a.data_ptr()), b.data<float>(), 1.0);
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2.0 * static_cast<double>(rows * cols * 4));
}
BENCHMARK(BM_add_kernel_strided)->Arg(1024)->UseRealTime();

template <kernels::UnaryOp op>
void BM_unary_kernel(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x = randn({n}), out = empty({n});
  const kernels::StridedLayout layout = make_layout(out, {&x}, "unary");
  for (auto _ : state) {
    kernels::cpu::unary<float>(op, layout, out.data<float>(), x.data<float>(), 0.0);
    benchmark::ClobberMemory();
  }
  set_bytes(state, 2.0 * static_cast<double>(n * 4));
}
BENCHMARK(BM_unary_kernel<kernels::UnaryOp::exp>)->Arg(1 << 22)->UseRealTime();
BENCHMARK(BM_unary_kernel<kernels::UnaryOp::gelu_tanh>)->Arg(1 << 22)->UseRealTime();
BENCHMARK(BM_unary_kernel<kernels::UnaryOp::relu>)->Arg(1 << 22)->UseRealTime();

// f32 -> bf16 conversion with round to nearest even.
void BM_convert_f32_to_bf16(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x = randn({n}), out = empty({n}, DType::bf16);
  const kernels::StridedLayout layout = make_layout(out, {&x}, "copy_");
  for (auto _ : state) {
    kernels::cpu::copy<BFloat16, float>(layout, out.data<BFloat16>(), x.data<float>());
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(n * 6));
}
BENCHMARK(BM_convert_f32_to_bf16)->Arg(1 << 24)->UseRealTime();

// Casts between f32 and f16 as the tensor op runs them (the loop the CPU picked), then each
// binary16 loop this CPU has on its own: "scalar" is the element-wise conversion of
// scalar_types.h, which every dense f16 run took before the F16C loops.
template <typename Dst, typename Src>
void BM_convert(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x = randn({n}).to(dtype_of<Src>), out = empty({n}, dtype_of<Dst>);
  const kernels::StridedLayout layout = make_layout(out, {&x}, "copy_");
  for (auto _ : state) {
    kernels::cpu::copy<Dst, Src>(layout, out.data<Dst>(), x.data<Src>());
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(n * 6));
}
BENCHMARK(BM_convert<Half, float>)->Arg(1 << 24)->UseRealTime();
BENCHMARK(BM_convert<float, Half>)->Arg(1 << 24)->UseRealTime();

// Args (n, row): n elements converted in runs of `row`. Runs of 7 and 28 are the rows of the
// ResNet9 feature maps, which the convolutions widen one at a time (n small: in L2).
void BM_half_loops(benchmark::State& state, const kernels::cpu::HalfConversionLoops& loops,
                   bool narrow) {
  const int64_t n = state.range(0), row = state.range(1);
  Tensor wide = randn({n}), half = wide.to(DType::f16);
  auto* bits = reinterpret_cast<uint16_t*>(half.data<Half>());
  float* values = wide.data<float>();
  for (auto _ : state) {
    for (int64_t begin = 0; begin < n; begin += row) {
      const int64_t m = std::min(row, n - begin);
      if (narrow) {
        loops.narrow(values + begin, bits + begin, m);
      } else {
        loops.widen(bits + begin, values + begin, m);
      }
    }
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(n * 6));
}

const bool half_loops_registered = [] {
  for (const kernels::cpu::HalfConversionLoops& loops : kernels::cpu::half_conversion_loops()) {
    for (bool narrow : {true, false}) {
      const std::string name =
          std::string("BM_half_loop/") + loops.name + (narrow ? "/f32_to_f16" : "/f16_to_f32");
      benchmark::RegisterBenchmark(name.c_str(), BM_half_loops, loops, narrow)
          ->Args({1 << 24, 1 << 24})
          ->Args({1 << 16, 28})
          ->Args({1 << 16, 7})
          ->UseRealTime();
    }
  }
  return true;
}();

// One fused Adam step over n parameters: an f32 model (the master is the parameter), and f16 and
// bf16 models with f32 master weights (as the o2 engine steps them); the second argument turns on
// amsgrad. Bytes: master, exp_avg and exp_avg_sq read and written (and amsgrad's max_exp_avg_sq),
// the gradient read, the 16-bit model written.
template <typename T>
void BM_adam_step(benchmark::State& state) {
  const int64_t n = state.range(0);
  const bool amsgrad = state.range(1) != 0;
  Tensor master = randn({n}), grad = randn({n}).to(dtype_of<T>), exp_avg = zeros({n});
  Tensor exp_avg_sq = zeros({n}), model = empty({n}, dtype_of<T>);
  Tensor max_exp_avg_sq = amsgrad ? zeros({n}) : Tensor();
  constexpr bool kSeparateModel = !std::is_same_v<T, float>;
  kernels::cpu::AdamHyper hyper;
  hyper.amsgrad = amsgrad;
  for (auto _ : state) {
    kernels::cpu::adam_step<T, T>(master.data<float>(), grad.data<T>(), exp_avg.data<float>(),
                                  exp_avg_sq.data<float>(),
                                  amsgrad ? max_exp_avg_sq.data<float>() : nullptr,
                                  kSeparateModel ? model.data<T>() : nullptr, n, hyper);
    ++hyper.step;
    benchmark::ClobberMemory();
  }
  const double bytes_per_element =
      24.0 + (amsgrad ? 8.0 : 0.0) + sizeof(T) + (kSeparateModel ? sizeof(T) : 0);
  set_bytes(state, static_cast<double>(n) * bytes_per_element);
}
BENCHMARK(BM_adam_step<float>)->ArgsProduct({{1 << 22}, {0, 1}})->UseRealTime();
BENCHMARK(BM_adam_step<Half>)->ArgsProduct({{1 << 22}, {0, 1}})->UseRealTime();
BENCHMARK(BM_adam_step<BFloat16>)->ArgsProduct({{1 << 22}, {0, 1}})->UseRealTime();

// Sum over the middle dim of (outer, reduce, inner): rows (inner 1) and columns (outer 1).
void BM_sum_kernel(benchmark::State& state) {
  const int64_t outer = state.range(0), reduce = state.range(1), inner = state.range(2);
  Tensor x = randn({outer * reduce * inner}), out = empty({outer * inner});
  for (auto _ : state) {
    kernels::cpu::sum<float>(x.data<float>(), out.data<float>(), outer, reduce, inner);
    benchmark::ClobberMemory();
  }
  set_bytes(state, static_cast<double>(x.nbytes()));
}
BENCHMARK(BM_sum_kernel)->Args({4096, 1024, 1})->Args({1, 1024, 4096})->UseRealTime();

// ---- ops as a user calls them (allocation included) ---------------------------------------------

void BM_matmul(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n, n}), b = randn({n, n});
  for (auto _ : state)
    benchmark::DoNotOptimize(matmul(a, b));
  set_flops(state, 2.0 * static_cast<double>(n * n * n));
}
BENCHMARK(BM_matmul)->Arg(512)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();

// A small product: the per-call costs (allocation, dispatch, the BLAS thread-count lease).
BENCHMARK(BM_matmul)
    ->Name("BM_matmul_small")
    ->Arg(16)
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

void BM_matmul_bf16(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor a = randn({n, n}).to(DType::bf16), b = randn({n, n}).to(DType::bf16);
  for (auto _ : state)
    benchmark::DoNotOptimize(matmul(a, b));
  set_flops(state, 2.0 * static_cast<double>(n * n * n));
}
BENCHMARK(BM_matmul_bf16)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_softmax(benchmark::State& state) {
  Tensor x = randn({4096, 1024});
  for (auto _ : state)
    benchmark::DoNotOptimize(softmax(x, -1));
  set_bytes(state, 2.0 * static_cast<double>(x.nbytes()));
}
BENCHMARK(BM_softmax)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_layer_norm(benchmark::State& state) {
  Tensor x = randn({4096, 1024}), weight = ones({1024}), bias = zeros({1024});
  for (auto _ : state)
    benchmark::DoNotOptimize(layer_norm(x, {1024}, weight, bias));
  set_bytes(state, 2.0 * static_cast<double>(x.nbytes()));
}
BENCHMARK(BM_layer_norm)->Unit(benchmark::kMillisecond)->UseRealTime();

// The backward node alone (grad_fn()->apply), with the gradients wanted given by the argument:
// bit 0 the input, bit 1 the weight, bit 2 the bias (7: all; 1: a frozen affine; 6: the input is
// data). Bytes: what the all-wanted pass moves at least (read g and x, write grad_x), for every
// variant alike, so that bytes/s compare as times do.
Tensor leaf(const Tensor& t, bool requires_grad) {
  return t.clone().requires_grad_(requires_grad);
}

void time_backward_node(benchmark::State& state, const Tensor& y, const Tensor& cotangent) {
  for (auto _ : state)
    benchmark::DoNotOptimize(y.grad_fn()->apply(cotangent));
  set_bytes(state, 3.0 * static_cast<double>(cotangent.nbytes()));
}

void BM_layer_norm_backward(benchmark::State& state) {
  const int wanted = static_cast<int>(state.range(0));
  Tensor x = leaf(randn({8192, 1024}), wanted & 1), weight = leaf(randn({1024}), wanted & 2),
         bias = leaf(randn({1024}), wanted & 4), cotangent = randn({8192, 1024});
  time_backward_node(state, layer_norm(x, {1024}, weight, bias), cotangent);
}
BENCHMARK(BM_layer_norm_backward)
    ->ArgName("wanted")
    ->Arg(7)
    ->Arg(1)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_batch_norm_backward(benchmark::State& state) {
  const int wanted = static_cast<int>(state.range(0));
  Tensor x = leaf(randn({128, 64, 32, 32}), wanted & 1), weight = leaf(randn({64}), wanted & 2),
         bias = leaf(randn({64}), wanted & 4), cotangent = randn({128, 64, 32, 32});
  time_backward_node(state, batch_norm(x, Tensor(), Tensor(), weight, bias, /*training=*/true),
                     cotangent);
}
BENCHMARK(BM_batch_norm_backward)
    ->ArgName("wanted")
    ->Arg(7)
    ->Arg(1)
    ->Arg(6)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Training-mode batch norm with a ReLU after it, forward then backward, as in resnet9's blocks:
// fused 1 is batch_norm_relu (what nn::Sequential runs), 0 the two ops; bf16 1: bf16 activations
// (as under autocast), 0: f32. Bytes: what the pair moves at least (read x, write y; read x and
// dy, write dx), the same for both, so that bytes/s compare as times do.
void BM_batch_norm_relu_fwdbwd(benchmark::State& state) {
  const bool fused = state.range(0) == 1;
  const DType dtype = state.range(1) == 1 ? DType::bf16 : DType::f32;
  const Shape shape = {64, 64, 32, 32};
  Tensor x = randn(shape).to(dtype).requires_grad_(true), weight = ones({64}).requires_grad_(true),
         bias = zeros({64}).requires_grad_(true);
  Tensor running_mean = zeros({64}), running_var = ones({64});
  const Tensor dy = randn(shape).to(dtype);
  for (auto _ : state) {
    const Tensor y = fused ? batch_norm_relu(x, running_mean, running_var, weight, bias, true)
                           : relu(batch_norm(x, running_mean, running_var, weight, bias, true));
    y.backward(dy);
    for (Tensor* t : {&x, &weight, &bias})
      t->set_grad(Tensor());
  }
  set_bytes(state, 5.0 * static_cast<double>(x.nbytes()));
}
BENCHMARK(BM_batch_norm_relu_fwdbwd)
    ->ArgNames({"fused", "bf16"})
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// input (128, 32, 32, 32), weight (32, 32, 3, 3), padding 1: 2 N K C R S P Q FLOPs.
constexpr double kConvFlops = 2.0 * 128 * 32 * 32 * 3 * 3 * 32 * 32;

void BM_conv2d_forward(benchmark::State& state) {
  Tensor x = randn({128, 32, 32, 32}), w = randn({32, 32, 3, 3}), b = randn({32});
  NoGradGuard no_grad;
  for (auto _ : state)
    benchmark::DoNotOptimize(conv2d(x, w, b, {.padding = 1}));
  set_flops(state, kConvFlops);
}
BENCHMARK(BM_conv2d_forward)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_conv2d_forward_backward(benchmark::State& state) {
  Tensor x = randn({128, 32, 32, 32}).requires_grad_(), w = randn({32, 32, 3, 3}).requires_grad_();
  for (auto _ : state) {
    sum(conv2d(x, w, Tensor(), {.padding = 1})).backward();
    x.set_grad({});
    w.set_grad({});
  }
  set_flops(state, 3.0 * kConvFlops);  // forward, grad_input, grad_weight
}
BENCHMARK(BM_conv2d_forward_backward)->Unit(benchmark::kMillisecond)->UseRealTime();

// The two halves of a convolution's backward pass, apart, on resnet9's 16x16, 8x8 and 4x4 planes:
// Args (C, K, H = W, weight), batch 128, 3x3, padding 1; weight 0 = grad_input, 1 = grad_weight.
// Each half is 2 N K C R S P Q FLOPs.
void BM_conv2d_backward_half(benchmark::State& state) {
  const int64_t channels = state.range(0), filters = state.range(1), side = state.range(2);
  const bool weight_half = state.range(3) == 1;
  kernels::Conv2dParams params{.batch = 128,
                               .in_channels = channels,
                               .in_height = side,
                               .in_width = side,
                               .out_channels = filters,
                               .kernel_height = 3,
                               .kernel_width = 3,
                               .pad_h = 1,
                               .pad_w = 1};
  Tensor x = randn({128, channels, side, side}), w = randn({filters, channels, 3, 3});
  Tensor dy = randn({128, filters, side, side});
  Tensor dx = empty_like(x), dw = empty_like(w);
  for (auto _ : state) {
    kernels::cpu::conv2d_backward<float>(params, x.data<float>(), w.data<float>(), dy.data<float>(),
                                         weight_half ? nullptr : dx.data<float>(),
                                         weight_half ? dw.data<float>() : nullptr, nullptr);
    benchmark::ClobberMemory();
  }
  set_flops(state, 2.0 * 128 * filters * channels * 9 * side * side);
}
BENCHMARK(BM_conv2d_backward_half)
    ->ArgNames({"C", "K", "side", "weight"})
    ->Args({32, 32, 16, 0})
    ->Args({32, 32, 16, 1})
    ->Args({32, 64, 16, 0})
    ->Args({32, 64, 16, 1})
    ->Args({64, 128, 8, 0})
    ->Args({64, 128, 8, 1})
    ->Args({128, 128, 4, 0})
    ->Args({128, 128, 4, 1})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

void BM_cross_entropy(benchmark::State& state) {
  Tensor logits = randn({4096, 1000});
  Tensor target = randint(0, 1000, {4096});
  for (auto _ : state)
    benchmark::DoNotOptimize(cross_entropy(logits, target));
  set_bytes(state, static_cast<double>(logits.nbytes()));
}
BENCHMARK(BM_cross_entropy)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace ember

// BENCHMARK_MAIN, plus the OpenBLAS kernels in the report's context (matmul depends on them).
int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::AddCustomContext("openblas_kernels", ember::kernels::cpu::blas_kernels_report());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
