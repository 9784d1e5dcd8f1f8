#include "kernels/cuda/activation_backward.h"

#include <cstdint>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/common/scalar_types.h"
#include "kernels/cuda/convert_values.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/strided_loop.cuh"

namespace ember::kernels::cuda {
namespace {

namespace dm = device_math;

// f'(v) times g, for v the saved x or y: the formulas of kernels/cpu/activation_backward.cpp (the
// ember-op backward's, with gelu_tanh's f32 form rewritten as the CPU's), on the CUDA math
// library. One switch per element rather than one kernel per op: the branch is uniform
// across the grid, and it keeps one instantiation per dtype.
template <typename Acc>
__device__ __forceinline__ Acc grad_times(ActivationGrad op, Acc g, Acc v) {
  switch (op) {
    case ActivationGrad::relu:
      return v <= Acc(0) ? Acc(0) : g;  // NaN passes g on, as PyTorch's threshold_backward
    case ActivationGrad::sigmoid:
      return g * (v * (Acc(1) - v));
    case ActivationGrad::tanh:
      return g * (Acc(1) - v * v);
    case ActivationGrad::silu: {
      const Acc s = Acc(1) / (Acc(1) + dm::exp(-v));
      return g * (s * (v * (Acc(1) - s) + Acc(1)));
    }
    case ActivationGrad::gelu_erf: {
      // d/dx x Phi(x) = Phi(x) + x phi(x)
      const Acc cdf = dm::erfc(v * Acc(-0.70710678118654752440)) * Acc(0.5);  // no cancellation
      const Acc pdf = dm::exp(v * v * Acc(-0.5)) * Acc(0.39894228040143267794);
      return g * (cdf + v * pdf);
    }
    case ActivationGrad::gelu_tanh: {
      const Acc k = Acc(0.79788456080286535588), c = Acc(0.044715);
      const Acc x2 = v * v;
      const Acc dinner = (x2 * (Acc(3) * c) + Acc(1)) * k;
      if constexpr (std::is_same_v<Acc, float>) {
        // As the CPU's f32 form: 0.5 (1 + tanh z) = s and 0.5 (1 - tanh^2 z) = 2 s (1 - s) with
        // s = sigmoid(2z); 1 + tanh z would cancel for negative x.
        const Acc s = Acc(1) / (Acc(1) + dm::exp(Acc(-2) * k * (v + c * x2 * v)));
        return g * (s + Acc(2) * (v * (s * (Acc(1) - s))) * dinner);
      } else {
        const Acc t = dm::tanh((v + v * x2 * c) * k);
        return g * ((t + Acc(1)) * Acc(0.5) + v * (Acc(1) - t * t) * dinner * Acc(0.5));
      }
    }
  }
  return g;
}

// operands {grad_in, grad_out, saved}
template <typename T>
struct ActivationBackwardBody {
  using Acc = acc_t<T>;
  static constexpr int kVector = vector_width<T>();
  ActivationGrad op;
  T* grad_in;
  const T* grad_out;
  const T* saved;
  __device__ T one(T g, T v) const {
    return convert<T>(grad_times<Acc>(op, convert<Acc>(g), convert<Acc>(v)));
  }
  __device__ void operator()(const int64_t (&offset)[3]) const {
    grad_in[offset[0]] = one(grad_out[offset[1]], saved[offset[2]]);
  }
  // Both packets are loaded before the store: grad_in may alias grad_out or saved.
  __device__ void vector(int64_t first) const {
    Acc g[kVector], v[kVector];
    convert_values(load_packet<kVector>(grad_out, first).values, g);
    convert_values(load_packet<kVector>(saved, first).values, v);
#pragma unroll
    for (int j = 0; j < kVector; ++j)
      g[j] = grad_times<Acc>(op, g[j], v[j]);
    Packet<T, kVector> out;
    convert_values(g, out.values);
    store_packet<kVector>(grad_in, first, out);
  }
  bool vector_aligned() const {
    return packet_aligned<kVector>(grad_in) && packet_aligned<kVector>(grad_out) &&
           packet_aligned<kVector>(saved);
  }
};

}  // namespace

template <typename T>
void activation_backward(ActivationGrad op, const StridedLayout& layout, T* grad_in,
                         const T* grad_out, const T* saved, cudaStream_t stream) {
  const ActivationBackwardBody<T> body{op, grad_in, grad_out, saved};
  launch_strided<3>("activation_backward<<<>>>", layout, body, stream);
}

#define EMBER_INSTANTIATE(T)                                                               \
  template void activation_backward<T>(ActivationGrad, const StridedLayout&, T*, const T*, \
                                       const T*, cudaStream_t);
EMBER_INSTANTIATE(float)
EMBER_INSTANTIATE(double)
EMBER_INSTANTIATE(Half)
EMBER_INSTANTIATE(BFloat16)
#undef EMBER_INSTANTIATE

}  // namespace ember::kernels::cuda
