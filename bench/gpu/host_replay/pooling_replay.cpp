// Host replay of kernels/cuda/pooling.cu's generic forward and backward kernels against the CPU
// kernels, in f64: random geometries (ceil mode, dilation, padding, divisor_override, values
// with many ties), every thread of a small grid run in turn. Built and run by run.sh, which cuts
// the kernels' source out of the .cu file into body.inc.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>
#include "kernels/cpu/pooling.h"
#define __device__
#define __global__
#define __forceinline__ inline
struct Dim {
  unsigned x = 0, y = 0, z = 0;
};
static Dim blockIdx, threadIdx, blockDim, gridDim;
#define CUDART_INF std::numeric_limits<double>::infinity()
#define CUDART_INF_F std::numeric_limits<float>::infinity()
namespace ember::kernels::cuda {
template <typename T>
using acc_t = T;
template <typename To, typename From>
To convert(From v) {
  return static_cast<To>(v);
}
namespace device_math {
template <typename T>
bool is_nan(T v) {
  return std::isnan(v);
}
}  // namespace device_math
namespace {
#include "body.inc"
}
template <typename F>
void launch(int blocks, int threads, F f) {
  gridDim.x = blocks;
  blockDim.x = threads;
  for (unsigned b = 0; b < (unsigned)blocks; ++b)
    for (unsigned t = 0; t < (unsigned)threads; ++t) {
      blockIdx.x = b;
      threadIdx.x = t;
      f();
    }
}
}  // namespace ember::kernels::cuda
using namespace ember::kernels;
int main() {
  std::mt19937 rng(7);
  long cases = 0, bad = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    cpu::Pool2dGeometry g;
    g.planes = 1 + rng() % 3;
    g.in_height = 1 + rng() % 11;
    g.in_width = 1 + rng() % 11;
    g.kernel_h = 1 + rng() % 4;
    g.kernel_w = 1 + rng() % 4;
    g.stride_h = 1 + rng() % 3;
    g.stride_w = 1 + rng() % 3;
    g.pad_h = rng() % (g.kernel_h / 2 + 1);
    g.pad_w = rng() % (g.kernel_w / 2 + 1);
    const int kind = rng() % 2;  // 0 max, 1 avg
    g.dilation_h = kind == 0 ? 1 + rng() % 3 : 1;
    g.dilation_w = kind == 0 ? 1 + rng() % 3 : 1;
    const bool ceil_mode = rng() % 2, include_pad = rng() % 2;
    g.divisor_override = kind == 1 && rng() % 3 == 0 ? 1 + rng() % 7 : 0;
    const int64_t eh = (g.kernel_h - 1) * g.dilation_h + 1,
                  ew = (g.kernel_w - 1) * g.dilation_w + 1;
    const int64_t ph = g.in_height + 2 * g.pad_h, pw = g.in_width + 2 * g.pad_w;
    if (eh > ph || ew > pw) continue;
    g.out_height = pooled_size(ph, eh, g.stride_h, g.in_height + g.pad_h, ceil_mode);
    g.out_width = pooled_size(pw, ew, g.stride_w, g.in_width + g.pad_w, ceil_mode);
    const int64_t nin = g.planes * g.in_height * g.in_width,
                  nout = g.planes * g.out_height * g.out_width;
    std::vector<double> x(nin), dy(nout);
    for (auto& v : x)
      v = double(rng() % 5) - 2.0;  // ties common
    for (auto& v : dy)
      v = double(rng() % 100) / 7.0;
    std::vector<double> y_cpu(nout, 99), y_gpu(nout, -99), dx_cpu(nin, 99), dx_gpu(nin, -99);
    std::vector<int64_t> i_cpu(nout, -5), i_gpu(nout, -7);
    using cuda::Pool;
    const Pool pool = kind == 0 ? Pool::max : Pool::average;
    const int blocks = 1 + rng() % 3, threads = 1 + rng() % 64;
    if (kind == 0) {
      cpu::max_pool2d_forward<double>(g, x.data(), y_cpu.data(), i_cpu.data());
      cpu::max_pool2d_backward<double>(g, dy.data(), i_cpu.data(), dx_cpu.data());
    } else {
      cpu::avg_pool2d_forward<double>(g, include_pad, x.data(), y_cpu.data());
      cpu::avg_pool2d_backward<double>(g, include_pad, dy.data(), dx_cpu.data());
    }
    cuda::launch(blocks, threads, [&] {
      cuda::pool_forward_kernel<double>(pool, g, include_pad, x.data(), y_gpu.data(), i_gpu.data(),
                                        nout);
    });
    cuda::launch(blocks, threads, [&] {
      cuda::pool_backward_kernel<double>(pool, g, include_pad, dy.data(), i_gpu.data(),
                                         dx_gpu.data(), nin);
    });
    ++cases;
    bool ok = true;
    for (int64_t k = 0; k < nout; ++k)
      ok = ok && y_cpu[k] == y_gpu[k] && (kind || i_cpu[k] == i_gpu[k]);
    for (int64_t k = 0; k < nin; ++k)
      ok = ok && std::abs(dx_cpu[k] - dx_gpu[k]) <= 1e-12 * (1 + std::abs(dx_cpu[k]));
    if (!ok && bad++ < 5)
      std::printf(
          "MISMATCH kind %d in %ldx%ld k %ldx%ld s %ldx%ld p %ldx%ld d %ldx%ld ceil %d pad %d div "
          "%ld\n",
          kind, g.in_height, g.in_width, g.kernel_h, g.kernel_w, g.stride_h, g.stride_w, g.pad_h,
          g.pad_w, g.dilation_h, g.dilation_w, ceil_mode, include_pad, g.divisor_override);
  }
  std::printf("%ld cases, %ld mismatches\n", cases, bad);
  return bad != 0;
}
