#include "kernels/cpu/activation_backward.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/common/scalar_types.h"
#include "kernels/cpu/convert_runs.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vector_math.h"

// Vector selects in the f32 loops (see kernels/cpu/vector_math.h). convert<> is defined before
// this point and so is not inlined below: only the strided 16-bit buffer fills call it (dense
// runs convert through convert_runs.h).
EMBER_NO_TRAPPING_MATH

namespace ember::kernels::cpu {
namespace {

constexpr double kInvSqrt2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)

// f'(v) times g, for v the saved x or y. The f32 forms are the vectorisable ones; the f64 forms
// are the formulas the ember-op backward used, on libm.
template <ActivationGrad op, typename Acc>
[[gnu::always_inline]] inline Acc grad_times(Acc g, Acc v) {
  if constexpr (op == ActivationGrad::relu) {
    return v <= Acc(0) ? Acc(0) : g;  // NaN passes g on, as PyTorch's threshold_backward
  } else if constexpr (op == ActivationGrad::sigmoid) {
    return g * (v * (Acc(1) - v));
  } else if constexpr (op == ActivationGrad::tanh) {
    return g * (Acc(1) - v * v);
  } else if constexpr (op == ActivationGrad::silu) {
    const Acc s = sigmoid_vectorisable(v);
    return g * (s * (v * (Acc(1) - s) + Acc(1)));
  } else if constexpr (op == ActivationGrad::gelu_erf) {
    // d/dx x Phi(x) = Phi(x) + x phi(x)
    const Acc cdf = std::erfc(v * Acc(-kInvSqrt2)) * Acc(0.5);  // no cancellation in the tail
    const Acc pdf = exp_vectorisable(v * v * Acc(-0.5)) * Acc(kInvSqrt2Pi);
    return g * (cdf + v * pdf);
  } else {
    const Acc k = Acc(kGeluTanhScale), c = Acc(kGeluTanhCubic);
    const Acc x2 = v * v;
    const Acc dinner = (x2 * (Acc(3) * c) + Acc(1)) * k;
    if constexpr (std::is_same_v<Acc, float>) {
      // 0.5 (1 + tanh z) = s and 0.5 (1 - tanh^2 z) = 2 s (1 - s), with s = sigmoid(2z).
      const Acc s = sigmoid_vectorisable(Acc(2) * k * (v + c * x2 * v));
      return g * (s + Acc(2) * (v * (s * (Acc(1) - s))) * dinner);
    } else {
      const Acc t = std::tanh((v + v * x2 * c) * k);
      return g * ((t + Acc(1)) * Acc(0.5) + v * (Acc(1) - t * t) * dinner * Acc(0.5));
    }
  }
}

template <ActivationGrad op>
[[gnu::always_inline]] inline void dense_f32(float* grad_in, const float* g, const float* v,
                                             int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    grad_in[i] = grad_times<op>(g[i], v[i]);
}

// Dense f32 runs, compiled for AVX-512 and AVX2 as well as the baseline (the exp polynomial
// dominates). grad_in may alias g or v.
EMBER_CLONE_FOR_SIMD void activation_backward_f32(ActivationGrad op, float* grad_in, const float* g,
                                                  const float* v, int64_t n) {
  switch (op) {
    case ActivationGrad::relu:
      return dense_f32<ActivationGrad::relu>(grad_in, g, v, n);
    case ActivationGrad::gelu_erf:
      return dense_f32<ActivationGrad::gelu_erf>(grad_in, g, v, n);
    case ActivationGrad::gelu_tanh:
      return dense_f32<ActivationGrad::gelu_tanh>(grad_in, g, v, n);
    case ActivationGrad::silu:
      return dense_f32<ActivationGrad::silu>(grad_in, g, v, n);
    case ActivationGrad::sigmoid:
      return dense_f32<ActivationGrad::sigmoid>(grad_in, g, v, n);
    case ActivationGrad::tanh:
      return dense_f32<ActivationGrad::tanh>(grad_in, g, v, n);
  }
}

// f64 runs of any stride, on libm.
template <ActivationGrad op>
void strided_f64(int64_t n, double* grad_in, const double* g, const double* v, const int64_t* s) {
  for (int64_t i = 0; i < n; ++i)
    grad_in[i * s[0]] = grad_times<op, double>(g[i * s[1]], v[i * s[2]]);
}

void activation_backward_f64(ActivationGrad op, int64_t n, double* grad_in, const double* g,
                             const double* v, const int64_t* s) {
  switch (op) {
    case ActivationGrad::relu:
      return strided_f64<ActivationGrad::relu>(n, grad_in, g, v, s);
    case ActivationGrad::gelu_erf:
      return strided_f64<ActivationGrad::gelu_erf>(n, grad_in, g, v, s);
    case ActivationGrad::gelu_tanh:
      return strided_f64<ActivationGrad::gelu_tanh>(n, grad_in, g, v, s);
    case ActivationGrad::silu:
      return strided_f64<ActivationGrad::silu>(n, grad_in, g, v, s);
    case ActivationGrad::sigmoid:
      return strided_f64<ActivationGrad::sigmoid>(n, grad_in, g, v, s);
    case ActivationGrad::tanh:
      return strided_f64<ActivationGrad::tanh>(n, grad_in, g, v, s);
  }
}

// Strided f32 and 16-bit runs go through f32 chunks on the stack, then the dense loop.
constexpr int64_t kChunk = 512;

template <typename T>
void chunked_f32(ActivationGrad op, int64_t n, T* grad_in, const T* g, const T* v,
                 const int64_t* s) {
  float g_chunk[kChunk], v_chunk[kChunk];
  const bool dense = s[0] == 1 && s[1] == 1 && s[2] == 1;  // the usual case: loops that vectorise
  for (int64_t begin = 0; begin < n; begin += kChunk) {
    const int64_t m = std::min(kChunk, n - begin);
    if (dense) {
      widen_to_f32(g + begin, g_chunk, m);
      widen_to_f32(v + begin, v_chunk, m);
    } else {
      for (int64_t i = 0; i < m; ++i) {
        g_chunk[i] = convert<float>(g[(begin + i) * s[1]]);
        v_chunk[i] = convert<float>(v[(begin + i) * s[2]]);
      }
    }
    activation_backward_f32(op, g_chunk, g_chunk, v_chunk, m);
    if (dense) {
      narrow_from_f32(g_chunk, grad_in + begin, m);
    } else {
      for (int64_t i = 0; i < m; ++i)
        grad_in[(begin + i) * s[0]] = convert<T>(g_chunk[i]);
    }
  }
}

}  // namespace

template <typename T>
void activation_backward(ActivationGrad op, const StridedLayout& layout, T* grad_in,
                         const T* grad_out, const T* saved) {
  for_each_run<3>(
      layout,
      {reinterpret_cast<char*>(grad_in), reinterpret_cast<char*>(const_cast<T*>(grad_out)),
       reinterpret_cast<char*>(const_cast<T*>(saved))},
      {sizeof(T), sizeof(T), sizeof(T)}, [op](int64_t n, char* const* p, const int64_t* s) {
        T* out = reinterpret_cast<T*>(p[0]);
        const T* g = reinterpret_cast<const T*>(p[1]);
        const T* v = reinterpret_cast<const T*>(p[2]);
        if constexpr (std::is_same_v<T, double>) {
          activation_backward_f64(op, n, out, g, v, s);
        } else {
          if constexpr (std::is_same_v<T, float>) {
            if (s[0] == 1 && s[1] == 1 && s[2] == 1)
              return activation_backward_f32(op, out, g, v, n);
          }
          chunked_f32(op, n, out, g, v, s);
        }
      });
}

template void activation_backward<float>(ActivationGrad, const StridedLayout&, float*, const float*,
                                         const float*);
template void activation_backward<double>(ActivationGrad, const StridedLayout&, double*,
                                          const double*, const double*);
template void activation_backward<Half>(ActivationGrad, const StridedLayout&, Half*, const Half*,
                                        const Half*);
template void activation_backward<BFloat16>(ActivationGrad, const StridedLayout&, BFloat16*,
                                            const BFloat16*, const BFloat16*);

}  // namespace ember::kernels::cpu
