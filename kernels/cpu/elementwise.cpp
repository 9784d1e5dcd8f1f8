#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/common/integer_pow.h"
#include "kernels/common/scalar_types.h"
#include "kernels/common/wrapping_arithmetic.h"
#include "kernels/cpu/convert_runs.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/vector_math.h"

namespace ember::kernels::cpu {
namespace {

// Applies f to every element: out = f(in...), arithmetic in acc_t<T>. The three branches keep the
// common cases (all dense; second operand a broadcast scalar) free of stride multiplications so
// that the compiler vectorises them.
template <typename Out, typename A, typename Fn>
void map1(const StridedLayout& layout, Out* out, const A* a, Fn fn) {
  for_each_run<2>(layout,
                  {reinterpret_cast<char*>(out), reinterpret_cast<char*>(const_cast<A*>(a))},
                  {sizeof(Out), sizeof(A)}, [&](int64_t n, char* const* p, const int64_t* s) {
                    Out* o = reinterpret_cast<Out*>(p[0]);
                    const A* x = reinterpret_cast<const A*>(p[1]);
                    if (s[0] == 1 && s[1] == 1) {
                      for (int64_t i = 0; i < n; ++i)
                        o[i] = fn(x[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i)
                        o[i * s[0]] = fn(x[i * s[1]]);
                    }
                  });
}

template <typename Out, typename A, typename B, typename Fn>
void map2(const StridedLayout& layout, Out* out, const A* a, const B* b, Fn fn) {
  for_each_run<3>(layout,
                  {reinterpret_cast<char*>(out), reinterpret_cast<char*>(const_cast<A*>(a)),
                   reinterpret_cast<char*>(const_cast<B*>(b))},
                  {sizeof(Out), sizeof(A), sizeof(B)},
                  [&](int64_t n, char* const* p, const int64_t* s) {
                    Out* o = reinterpret_cast<Out*>(p[0]);
                    const A* x = reinterpret_cast<const A*>(p[1]);
                    const B* y = reinterpret_cast<const B*>(p[2]);
                    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
                      for (int64_t i = 0; i < n; ++i)
                        o[i] = fn(x[i], y[i]);
                    } else if (s[0] == 1 && s[1] == 1 && s[2] == 0) {
                      const B y0 = y[0];
                      for (int64_t i = 0; i < n; ++i)
                        o[i] = fn(x[i], y0);
                    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
                      const A x0 = x[0];
                      for (int64_t i = 0; i < n; ++i)
                        o[i] = fn(x0, y[i]);
                    } else {
                      for (int64_t i = 0; i < n; ++i)
                        o[i * s[0]] = fn(x[i * s[1]], y[i * s[2]]);
                    }
                  });
}

// The 16-bit floats compute in f32: map1_in_f32 and map2_via_f32 below widen dense runs into f32
// chunks and narrow the results with convert_runs.h's vector loops, instead of converting element
// by element with the scalar conversions.
constexpr int64_t kChunk16 = 512;

// apply(out, in, m) on f32 (out may alias in) over every run of `in`, written to `out`: dense f32
// runs directly, anything else in f32 chunks (dense 16-bit runs widened and narrowed by
// convert_runs.h, strided runs gathered and scattered element by element).
template <typename T, typename Apply>
void map1_in_f32(const StridedLayout& layout, T* out, const T* in, Apply apply) {
  for_each_run<2>(layout,
                  {reinterpret_cast<char*>(out), reinterpret_cast<char*>(const_cast<T*>(in))},
                  {sizeof(T), sizeof(T)}, [&](int64_t n, char* const* p, const int64_t* s) {
                    T* o = reinterpret_cast<T*>(p[0]);
                    const T* x = reinterpret_cast<const T*>(p[1]);
                    const bool dense = s[0] == 1 && s[1] == 1;
                    if constexpr (std::is_same_v<T, float>) {
                      if (dense) return apply(o, x, n);
                    }
                    float chunk[kChunk16];
                    for (int64_t begin = 0; begin < n; begin += kChunk16) {
                      const int64_t m = std::min(kChunk16, n - begin);
                      if (dense) {
                        widen_to_f32(x + begin, chunk, m);
                      } else {
                        for (int64_t i = 0; i < m; ++i)
                          chunk[i] = convert<float>(x[(begin + i) * s[1]]);
                      }
                      apply(chunk, chunk, m);
                      if (dense) {
                        narrow_from_f32(chunk, o + begin, m);
                      } else {
                        for (int64_t i = 0; i < m; ++i)
                          o[(begin + i) * s[0]] = convert<T>(chunk[i]);
                      }
                    }
                  });
}

// map2 for the 16-bit floats: a dense run, alone or against a broadcast scalar, goes through f32
// chunks widened and narrowed by convert_runs.h, so that f runs as an f32 loop; anything else
// converts element by element. f takes and returns float.
template <typename T, typename Fn>
void map2_via_f32(const StridedLayout& layout, T* out, const T* a, const T* b, Fn f) {
  for_each_run<3>(
      layout,
      {reinterpret_cast<char*>(out), reinterpret_cast<char*>(const_cast<T*>(a)),
       reinterpret_cast<char*>(const_cast<T*>(b))},
      {sizeof(T), sizeof(T), sizeof(T)}, [&](int64_t n, char* const* p, const int64_t* s) {
        T* o = reinterpret_cast<T*>(p[0]);
        const T* x = reinterpret_cast<const T*>(p[1]);
        const T* y = reinterpret_cast<const T*>(p[2]);
        const bool x_run = s[1] == 1, y_run = s[2] == 1;
        if (s[0] != 1 || !(x_run || s[1] == 0) || !(y_run || s[2] == 0)) {
          for (int64_t i = 0; i < n; ++i)
            o[i * s[0]] = convert<T>(f(convert<float>(x[i * s[1]]), convert<float>(y[i * s[2]])));
          return;
        }
        float xs[kChunk16], ys[kChunk16];
        if (!x_run) std::fill_n(xs, kChunk16, convert<float>(x[0]));
        if (!y_run) std::fill_n(ys, kChunk16, convert<float>(y[0]));
        for (int64_t begin = 0; begin < n; begin += kChunk16) {
          const int64_t m = std::min(kChunk16, n - begin);
          if (x_run) widen_to_f32(x + begin, xs, m);
          if (y_run) widen_to_f32(y + begin, ys, m);
          for (int64_t i = 0; i < m; ++i)
            xs[i] = f(xs[i], ys[i]);
          narrow_from_f32(xs, o + begin, m);
          if (!x_run) std::fill_n(xs, m, convert<float>(x[0]));
        }
      });
}

template <typename Acc>
Acc sigmoid_of(Acc x) {
  return Acc(1) / (Acc(1) + std::exp(-x));
}

// Activations with a vectorisable f32 form below.
bool has_f32_activation(UnaryOp op) {
  return op == UnaryOp::relu || op == UnaryOp::tanh || op == UnaryOp::sigmoid ||
         op == UnaryOp::silu || op == UnaryOp::gelu_tanh;
}

// The f32 activations, on vectorisable exp/tanh (kernels/cpu/vector_math.h) in place of scalar
// libm calls: only this region is compiled without trapping math, so that their selects become
// vector blends; elsewhere convert<> and the loops keep the file's usual options.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#endif
EMBER_NO_TRAPPING_MATH

template <typename Fn>
[[gnu::always_inline]] inline void dense_f32(float* out, const float* in, int64_t n, Fn fn) {
  for (int64_t i = 0; i < n; ++i)
    out[i] = fn(in[i]);
}

// Dense f32 runs of a has_f32_activation op, compiled for AVX-512 and AVX2 as well as the
// baseline. out may alias in.
EMBER_CLONE_FOR_SIMD void activation_f32(UnaryOp op, float* out, const float* in, int64_t n) {
  switch (op) {
    case UnaryOp::relu:  // `x < 0 ? 0 : x` keeps NaN, as PyTorch does
      return dense_f32(out, in, n, [](float x) { return x < 0.0f ? 0.0f : x; });
    case UnaryOp::tanh:
      return dense_f32(out, in, n, [](float x) { return tanh_vectorisable(x); });
    case UnaryOp::sigmoid:
      return dense_f32(out, in, n, [](float x) { return sigmoid_vectorisable(x); });
    case UnaryOp::silu:
      return dense_f32(out, in, n, [](float x) { return x * sigmoid_vectorisable(x); });
    case UnaryOp::gelu_tanh:
      return dense_f32(out, in, n, [](float x) { return gelu_tanh_vectorisable(x); });
    default:
      return;
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

// f32, f16 and bf16 activations, on their vectorised f32 form.
template <typename T>
void activation_via_f32(UnaryOp op, const StridedLayout& layout, T* out, const T* in) {
  map1_in_f32(layout, out, in,
              [op](float* o, const float* x, int64_t n) { activation_f32(op, o, x, n); });
}

template <typename T, typename Acc>
void unary_typed(UnaryOp op, const StridedLayout& layout, T* out, const T* in, Acc p) {
  auto run = [&](auto f) {
    if constexpr (std::is_same_v<Acc, float> && !std::is_same_v<T, float>) {
      map1_in_f32(layout, out, in, [f](float* o, const float* x, int64_t n) {
        for (int64_t i = 0; i < n; ++i)
          o[i] = f(x[i]);
      });
    } else {
      map1(layout, out, in, [f](T x) { return convert<T>(f(convert<Acc>(x))); });
    }
  };
  if constexpr (std::is_same_v<Acc, float>) {
    if (has_f32_activation(op)) return activation_via_f32(op, layout, out, in);
  }
  switch (op) {
    case UnaryOp::neg:
      return run([](Acc x) { return wrapping_neg(x); });
    case UnaryOp::abs:  // abs of the most negative integer is itself, as in PyTorch
      return run([](Acc x) { return x < Acc(0) ? wrapping_neg(x) : x; });
    case UnaryOp::exp:
      return run([](Acc x) { return static_cast<Acc>(std::exp(x)); });
    case UnaryOp::log:
      return run([](Acc x) { return static_cast<Acc>(std::log(x)); });
    case UnaryOp::sqrt:
      return run([](Acc x) { return static_cast<Acc>(std::sqrt(x)); });
    case UnaryOp::rsqrt:
      return run([](Acc x) { return static_cast<Acc>(Acc(1) / std::sqrt(x)); });
    case UnaryOp::sin:
      return run([](Acc x) { return static_cast<Acc>(std::sin(x)); });
    case UnaryOp::cos:
      return run([](Acc x) { return static_cast<Acc>(std::cos(x)); });
    case UnaryOp::tanh:
      return run([](Acc x) { return static_cast<Acc>(std::tanh(x)); });
    case UnaryOp::sigmoid:
      return run([](Acc x) { return static_cast<Acc>(sigmoid_of(x)); });
    case UnaryOp::relu:
      // `x < 0 ? 0 : x` keeps NaN, as PyTorch does.
      return run([](Acc x) { return x < Acc(0) ? Acc(0) : x; });
    case UnaryOp::gelu_erf:
      // x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: 1 + erf(x / sqrt 2) would cancel to 0 in the
      // negative tail (x < -5.5 in f32), where the true values are tiny, not zero.
      return run([](Acc x) {
        return static_cast<Acc>(Acc(0.5) * x * std::erfc(x * Acc(-0.70710678118654752440)));
      });
    case UnaryOp::gelu_tanh:
      return run([](Acc x) {
        const Acc inner = Acc(0.79788456080286535588) * (x + Acc(0.044715) * x * x * x);
        return static_cast<Acc>(Acc(0.5) * x * (Acc(1) + std::tanh(inner)));
      });
    case UnaryOp::silu:
      return run([](Acc x) { return static_cast<Acc>(x * sigmoid_of(x)); });
    case UnaryOp::pow_scalar:
      if constexpr (std::is_integral_v<Acc> && !std::is_same_v<Acc, bool>) {
        return run([p](Acc x) { return integer_pow(x, p); });
      } else {
        if (p == Acc(2)) return run([](Acc x) { return static_cast<Acc>(x * x); });
        return run([p](Acc x) { return static_cast<Acc>(std::pow(x, p)); });
      }
    case UnaryOp::sign:
      return run([](Acc x) { return static_cast<Acc>((Acc(0) < x) - (x < Acc(0))); });
    case UnaryOp::reciprocal:
      return run([](Acc x) { return static_cast<Acc>(Acc(1) / x); });
    case UnaryOp::square:
      return run([](Acc x) { return wrapping_mul(x, x); });
    case UnaryOp::erf:
      return run([](Acc x) { return static_cast<Acc>(std::erf(x)); });
    case UnaryOp::log1p:
      return run([](Acc x) { return static_cast<Acc>(std::log1p(x)); });
    case UnaryOp::expm1:
      return run([](Acc x) { return static_cast<Acc>(std::expm1(x)); });
    case UnaryOp::leaky_relu:  // NaN stays NaN (p NaN)
      return run([p](Acc x) { return x > Acc(0) ? x : static_cast<Acc>(p * x); });
  }
}

template <typename T, typename Acc>
void binary_typed(BinaryOp op, const StridedLayout& layout, T* out, const T* a, const T* b,
                  Acc alpha) {
  auto run = [&](auto f) {
    if constexpr (std::is_same_v<Acc, float> && !std::is_same_v<T, float>) {
      map2_via_f32(layout, out, a, b, f);
    } else {
      map2(layout, out, a, b,
           [f](T x, T y) { return convert<T>(f(convert<Acc>(x), convert<Acc>(y))); });
    }
  };
  switch (op) {
    // Integers wrap (kernels/common/wrapping_arithmetic.h); floats are the plain operators.
    case BinaryOp::add:
      if (alpha == Acc(1)) return run([](Acc x, Acc y) { return wrapping_add(x, y); });
      return run([alpha](Acc x, Acc y) { return wrapping_add(x, wrapping_mul(alpha, y)); });
    case BinaryOp::sub:
      if (alpha == Acc(1)) return run([](Acc x, Acc y) { return wrapping_sub(x, y); });
      return run([alpha](Acc x, Acc y) { return wrapping_sub(x, wrapping_mul(alpha, y)); });
    case BinaryOp::mul:
      return run([](Acc x, Acc y) { return wrapping_mul(x, y); });
    case BinaryOp::div:
      if (alpha == Acc(1)) return run([](Acc x, Acc y) { return static_cast<Acc>(x / y); });
      return run([alpha](Acc x, Acc y) { return static_cast<Acc>(x / (alpha * y)); });
    case BinaryOp::pow:
      if constexpr (std::is_integral_v<Acc> && !std::is_same_v<Acc, bool>) {
        return run([](Acc x, Acc y) { return integer_pow(x, y); });
      } else {
        return run([](Acc x, Acc y) { return static_cast<Acc>(std::pow(x, y)); });
      }
    case BinaryOp::maximum:
      // NaN in either input gives NaN, as torch.maximum does.
      return run([](Acc x, Acc y) { return x != x ? x : (y != y ? y : (x < y ? y : x)); });
    case BinaryOp::minimum:
      return run([](Acc x, Acc y) { return x != x ? x : (y != y ? y : (y < x ? y : x)); });
  }
}

}  // namespace

template <typename T>
void unary(UnaryOp op, const StridedLayout& layout, T* out, const T* in, double scalar) {
  using Acc = acc_t<T>;
  unary_typed<T, Acc>(op, layout, out, in, static_cast<Acc>(scalar));
}

template <typename T>
void binary(BinaryOp op, const StridedLayout& layout, T* out, const T* a, const T* b,
            double alpha) {
  using Acc = acc_t<T>;
  binary_typed<T, Acc>(op, layout, out, a, b, static_cast<Acc>(alpha));
}

template <typename T>
void compare(CompareOp op, const StridedLayout& layout, bool* out, const T* a, const T* b) {
  using Acc = acc_t<T>;
  auto run = [&](auto f) {
    map2(layout, out, a, b, [f](T x, T y) { return f(convert<Acc>(x), convert<Acc>(y)); });
  };
  switch (op) {
    case CompareOp::eq:
      return run([](Acc x, Acc y) { return x == y; });
    case CompareOp::ne:
      return run([](Acc x, Acc y) { return x != y; });
    case CompareOp::lt:
      return run([](Acc x, Acc y) { return x < y; });
    case CompareOp::le:
      return run([](Acc x, Acc y) { return x <= y; });
    case CompareOp::gt:
      return run([](Acc x, Acc y) { return x > y; });
    case CompareOp::ge:
      return run([](Acc x, Acc y) { return x >= y; });
  }
}

template <typename Dst, typename Src>
void copy(const StridedLayout& layout, Dst* out, const Src* in) {
  constexpr bool widens = std::is_same_v<Dst, float> && is_reduced_float_v<Src>;
  constexpr bool narrows = is_reduced_float_v<Dst> && std::is_same_v<Src, float>;
  if constexpr (widens || narrows) {
    // Casts between f32 and the 16-bit floats (autocast's, every step): dense runs through the
    // vectorised conversions, bit for bit the same as convert<Dst>.
    for_each_run<2>(layout,
                    {reinterpret_cast<char*>(out), reinterpret_cast<char*>(const_cast<Src*>(in))},
                    {sizeof(Dst), sizeof(Src)}, [](int64_t n, char* const* p, const int64_t* s) {
                      Dst* o = reinterpret_cast<Dst*>(p[0]);
                      const Src* x = reinterpret_cast<const Src*>(p[1]);
                      if (s[0] == 1 && s[1] == 1) {
                        if constexpr (widens) widen_to_f32(x, o, n);
                        if constexpr (narrows) narrow_from_f32(x, o, n);
                      } else {
                        for (int64_t i = 0; i < n; ++i)
                          o[i * s[0]] = convert<Dst>(x[i * s[1]]);
                      }
                    });
  } else {
    map1(layout, out, in, [](Src x) { return convert<Dst>(x); });
  }
}

template <typename T>
void fill(const StridedLayout& layout, T* out, T value) {
  for_each_run<1>(layout, {reinterpret_cast<char*>(out)}, {sizeof(T)},
                  [value](int64_t n, char* const* p, const int64_t* s) {
                    T* o = reinterpret_cast<T*>(p[0]);
                    if (s[0] == 1) {
                      for (int64_t i = 0; i < n; ++i)
                        o[i] = value;
                    } else {
                      for (int64_t i = 0; i < n; ++i)
                        o[i * s[0]] = value;
                    }
                  });
}

template <typename T>
void where(const StridedLayout& layout, T* out, const bool* cond, const T* a, const T* b) {
  for_each_run<4>(
      layout,
      {reinterpret_cast<char*>(out), reinterpret_cast<char*>(const_cast<bool*>(cond)),
       reinterpret_cast<char*>(const_cast<T*>(a)), reinterpret_cast<char*>(const_cast<T*>(b))},
      {sizeof(T), sizeof(bool), sizeof(T), sizeof(T)},
      [](int64_t n, char* const* p, const int64_t* s) {
        T* o = reinterpret_cast<T*>(p[0]);
        const bool* c = reinterpret_cast<const bool*>(p[1]);
        const T* x = reinterpret_cast<const T*>(p[2]);
        const T* y = reinterpret_cast<const T*>(p[3]);
        for (int64_t i = 0; i < n; ++i)
          o[i * s[0]] = c[i * s[1]] ? x[i * s[2]] : y[i * s[3]];
      });
}

#define EMBER_INSTANTIATE_NUMERIC(T)                                                       \
  template void unary<T>(UnaryOp, const StridedLayout&, T*, const T*, double);             \
  template void binary<T>(BinaryOp, const StridedLayout&, T*, const T*, const T*, double); \
  template void compare<T>(CompareOp, const StridedLayout&, bool*, const T*, const T*);

EMBER_FOR_EACH_NUMERIC_TYPE(EMBER_INSTANTIATE_NUMERIC)
#undef EMBER_INSTANTIATE_NUMERIC

#define EMBER_INSTANTIATE_ANY(T)                                                     \
  template void fill<T>(const StridedLayout&, T*, T);                                \
  template void where<T>(const StridedLayout&, T*, const bool*, const T*, const T*); \
  template void copy<T, float>(const StridedLayout&, T*, const float*);              \
  template void copy<T, double>(const StridedLayout&, T*, const double*);            \
  template void copy<T, Half>(const StridedLayout&, T*, const Half*);                \
  template void copy<T, BFloat16>(const StridedLayout&, T*, const BFloat16*);        \
  template void copy<T, int32_t>(const StridedLayout&, T*, const int32_t*);          \
  template void copy<T, int64_t>(const StridedLayout&, T*, const int64_t*);          \
  template void copy<T, uint8_t>(const StridedLayout&, T*, const uint8_t*);          \
  template void copy<T, bool>(const StridedLayout&, T*, const bool*);

EMBER_FOR_EACH_ELEMENT_TYPE(EMBER_INSTANTIATE_ANY)
#undef EMBER_INSTANTIATE_ANY

}  // namespace ember::kernels::cpu
