#include <cstdint>
#include <type_traits>

#include "kernels/common/convert.h"
#include "kernels/common/integer_pow.h"
#include "kernels/common/scalar_types.h"
#include "kernels/common/wrapping_arithmetic.h"
#include "kernels/cuda/convert_values.cuh"
#include "kernels/cuda/device_math.cuh"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/strided_loop.cuh"

namespace ember::kernels::cuda {
namespace {

namespace dm = device_math;

// One switch per element rather than one kernel per op: the branch is uniform across the grid,
// so it costs next to nothing, and it keeps the number of instantiations (and compile time) small.
template <typename Acc>
__device__ __forceinline__ Acc apply_unary(UnaryOp op, Acc x, Acc p) {
  switch (op) {
    case UnaryOp::neg:
      return wrapping_neg(x);
    case UnaryOp::abs:  // abs of the most negative integer is itself, as in PyTorch
      return dm::is_negative(x) ? wrapping_neg(x) : x;
    case UnaryOp::exp:
      return dm::exp(x);
    case UnaryOp::log:
      return dm::log(x);
    case UnaryOp::sqrt:
      return dm::sqrt(x);
    case UnaryOp::rsqrt:
      return static_cast<Acc>(Acc(1) / dm::sqrt(x));
    case UnaryOp::sin:
      return dm::sin(x);
    case UnaryOp::cos:
      return dm::cos(x);
    case UnaryOp::tanh:
      return dm::tanh(x);
    case UnaryOp::sigmoid:
      return static_cast<Acc>(Acc(1) / (Acc(1) + dm::exp(static_cast<Acc>(-x))));
    case UnaryOp::relu:
      // `x < 0 ? 0 : x` keeps NaN, as PyTorch does.
      return dm::is_negative(x) ? Acc(0) : x;
    case UnaryOp::gelu_erf:
      // x Phi(x) with Phi(x) = erfc(-x / sqrt 2) / 2: 1 + erf(x / sqrt 2) would cancel to 0 in the
      // negative tail (x < -5.5 in f32), where the true values are tiny, not zero.
      return static_cast<Acc>(Acc(0.5) * x *
                              dm::erfc(static_cast<Acc>(-(x * Acc(0.70710678118654752440)))));
    case UnaryOp::gelu_tanh: {
      const Acc inner = Acc(0.79788456080286535588) * (x + Acc(0.044715) * x * x * x);
      return static_cast<Acc>(Acc(0.5) * x * (Acc(1) + dm::tanh(inner)));
    }
    case UnaryOp::silu:
      return static_cast<Acc>(x * (Acc(1) / (Acc(1) + dm::exp(static_cast<Acc>(-x)))));
    case UnaryOp::pow_scalar:
      if constexpr (std::is_integral_v<Acc> && !std::is_same_v<Acc, bool>) {
        return integer_pow(x, p);
      } else {
        return p == Acc(2) ? static_cast<Acc>(x * x) : dm::pow(x, p);
      }
    case UnaryOp::sign:
      return static_cast<Acc>((Acc(0) < x) - dm::is_negative(x));
    case UnaryOp::reciprocal:
      return static_cast<Acc>(Acc(1) / x);
    case UnaryOp::square:
      return wrapping_mul(x, x);
    case UnaryOp::erf:
      return dm::erf(x);
    case UnaryOp::log1p:
      return dm::log1p(x);
    case UnaryOp::expm1:
      return dm::expm1(x);
    case UnaryOp::leaky_relu:  // NaN stays NaN (p NaN)
      return x > Acc(0) ? x : static_cast<Acc>(p * x);
  }
  return x;
}

template <typename Acc>
__device__ __forceinline__ Acc apply_binary(BinaryOp op, Acc x, Acc y, Acc alpha) {
  switch (op) {
    // Integers wrap (kernels/common/wrapping_arithmetic.h); floats are the plain operators.
    case BinaryOp::add:
      return alpha == Acc(1) ? wrapping_add(x, y) : wrapping_add(x, wrapping_mul(alpha, y));
    case BinaryOp::sub:
      return alpha == Acc(1) ? wrapping_sub(x, y) : wrapping_sub(x, wrapping_mul(alpha, y));
    case BinaryOp::mul:
      return wrapping_mul(x, y);
    case BinaryOp::div:
      return alpha == Acc(1) ? static_cast<Acc>(x / y) : static_cast<Acc>(x / (alpha * y));
    case BinaryOp::pow:
      if constexpr (std::is_integral_v<Acc> && !std::is_same_v<Acc, bool>) {
        return integer_pow(x, y);
      } else {
        return dm::pow(x, y);
      }
    case BinaryOp::maximum:
      // NaN in either input gives NaN, as torch.maximum does.
      return dm::is_nan(x) ? x : (dm::is_nan(y) ? y : (x < y ? y : x));
    case BinaryOp::minimum:
      return dm::is_nan(x) ? x : (dm::is_nan(y) ? y : (y < x ? y : x));
  }
  return x;
}

template <typename Acc>
__device__ __forceinline__ bool apply_compare(CompareOp op, Acc x, Acc y) {
  switch (op) {
    case CompareOp::eq:
      return x == y;
    case CompareOp::ne:
      return x != y;
    case CompareOp::lt:
      return x < y;
    case CompareOp::le:
      return x <= y;
    case CompareOp::gt:
      return x > y;
    case CompareOp::ge:
      return x >= y;
  }
  return false;
}

// Each body handles one element through operator()(offsets); on the vectorised paths
// (strided_loop.cuh) kVector elements with one packet load or store per operand: at `first` for
// every operand (vector, the flat path), or at each operand's own offset, broadcast operands
// repeating one element (vector_row, the row path). Both go through the body's `apply`, the
// arithmetic of one() on a packet.

// operands {out, in}
template <typename T>
struct UnaryBody {
  using Acc = acc_t<T>;
  static constexpr int kVector = vector_width<T>();
  UnaryOp op;
  Acc scalar;
  T* out;
  const T* in;
  __device__ T one(T x) const { return convert<T>(apply_unary<Acc>(op, convert<Acc>(x), scalar)); }
  __device__ void operator()(const int64_t (&offset)[2]) const {
    out[offset[0]] = one(in[offset[1]]);
  }
  __device__ Packet<T, kVector> apply(const Packet<T, kVector>& in_values) const {
    Acc x[kVector];
    convert_values(in_values.values, x);
#pragma unroll
    for (int j = 0; j < kVector; ++j)
      x[j] = apply_unary<Acc>(op, x[j], scalar);
    Packet<T, kVector> y;
    convert_values(x, y.values);
    return y;
  }
  __device__ void vector(int64_t first) const {
    store_packet<kVector>(out, first, apply(load_packet<kVector>(in, first)));
  }
  __device__ void vector_row(const RowPacket<2>& at) const {
    store_packet<kVector>(out, at.first[0], apply(load_row_packet<kVector>(in, at, 1)));
  }
  bool vector_aligned() const {
    return packet_aligned<kVector>(out) && packet_aligned<kVector>(in);
  }
  uint32_t aligned_operands() const {
    return packet_aligned_operands<kVector>(out, in);
  }
};

// operands {out, a, b}
template <typename T>
struct BinaryBody {
  using Acc = acc_t<T>;
  static constexpr int kVector = vector_width<T>();
  BinaryOp op;
  Acc alpha;
  T* out;
  const T* a;
  const T* b;
  __device__ T one(T x, T y) const {
    return convert<T>(apply_binary<Acc>(op, convert<Acc>(x), convert<Acc>(y), alpha));
  }
  __device__ void operator()(const int64_t (&offset)[3]) const {
    out[offset[0]] = one(a[offset[1]], b[offset[2]]);
  }
  __device__ Packet<T, kVector> apply(const Packet<T, kVector>& a_values,
                                      const Packet<T, kVector>& b_values) const {
    Acc x[kVector], y[kVector];
    convert_values(a_values.values, x);
    convert_values(b_values.values, y);
#pragma unroll
    for (int j = 0; j < kVector; ++j)
      x[j] = apply_binary<Acc>(op, x[j], y[j], alpha);
    Packet<T, kVector> z;
    convert_values(x, z.values);
    return z;
  }
  __device__ void vector(int64_t first) const {
    store_packet<kVector>(out, first,
                          apply(load_packet<kVector>(a, first), load_packet<kVector>(b, first)));
  }
  // conv2d's bias add: out and x dense along the row, the bias broadcast along it.
  __device__ void vector_row(const RowPacket<3>& at) const {
    store_packet<kVector>(
        out, at.first[0],
        apply(load_row_packet<kVector>(a, at, 1), load_row_packet<kVector>(b, at, 2)));
  }
  bool vector_aligned() const {
    return packet_aligned<kVector>(out) && packet_aligned<kVector>(a) && packet_aligned<kVector>(b);
  }
  uint32_t aligned_operands() const {
    return packet_aligned_operands<kVector>(out, a, b);
  }
};

// operands {out, a, b}
template <typename T>
struct CompareBody {
  using Acc = acc_t<T>;
  static constexpr int kVector = vector_width<T>();
  CompareOp op;
  bool* out;
  const T* a;
  const T* b;
  __device__ bool one(T x, T y) const {
    return apply_compare<Acc>(op, convert<Acc>(x), convert<Acc>(y));
  }
  __device__ void operator()(const int64_t (&offset)[3]) const {
    out[offset[0]] = one(a[offset[1]], b[offset[2]]);
  }
  __device__ Packet<bool, kVector> apply(const Packet<T, kVector>& a_values,
                                         const Packet<T, kVector>& b_values) const {
    Acc x[kVector], y[kVector];
    convert_values(a_values.values, x);
    convert_values(b_values.values, y);
    Packet<bool, kVector> z;
#pragma unroll
    for (int j = 0; j < kVector; ++j)
      z.values[j] = apply_compare<Acc>(op, x[j], y[j]);
    return z;
  }
  __device__ void vector(int64_t first) const {
    store_packet<kVector>(out, first,
                          apply(load_packet<kVector>(a, first), load_packet<kVector>(b, first)));
  }
  __device__ void vector_row(const RowPacket<3>& at) const {
    store_packet<kVector>(
        out, at.first[0],
        apply(load_row_packet<kVector>(a, at, 1), load_row_packet<kVector>(b, at, 2)));
  }
  bool vector_aligned() const {
    return packet_aligned<kVector>(out) && packet_aligned<kVector>(a) && packet_aligned<kVector>(b);
  }
  uint32_t aligned_operands() const {
    return packet_aligned_operands<kVector>(out, a, b);
  }
};

// operands {out, in}
template <typename Dst, typename Src>
struct CopyBody {
  static constexpr int kVector = vector_width<Dst, Src>();
  Dst* out;
  const Src* in;
  __device__ void operator()(const int64_t (&offset)[2]) const {
    out[offset[0]] = convert<Dst>(in[offset[1]]);
  }
  __device__ Packet<Dst, kVector> apply(const Packet<Src, kVector>& in_values) const {
    Packet<Dst, kVector> y;
    convert_values(in_values.values, y.values);
    return y;
  }
  __device__ void vector(int64_t first) const {
    store_packet<kVector>(out, first, apply(load_packet<kVector>(in, first)));
  }
  // bias.expand(N, C, H, W).contiguous(); a view whose rows are padded, made dense.
  __device__ void vector_row(const RowPacket<2>& at) const {
    store_packet<kVector>(out, at.first[0], apply(load_row_packet<kVector>(in, at, 1)));
  }
  bool vector_aligned() const {
    return packet_aligned<kVector>(out) && packet_aligned<kVector>(in);
  }
  uint32_t aligned_operands() const { return packet_aligned_operands<kVector>(out, in); }
};

// operands {out}
template <typename T>
struct FillBody {
  static constexpr int kVector = vector_width<T>();
  T* out;
  T value;
  __device__ void operator()(const int64_t (&offset)[1]) const { out[offset[0]] = value; }
  __device__ Packet<T, kVector> values() const {
    Packet<T, kVector> y;
#pragma unroll
    for (int j = 0; j < kVector; ++j)
      y.values[j] = value;
    return y;
  }
  __device__ void vector(int64_t first) const {
    store_packet<kVector>(out, first, values());
  }
  __device__ void vector_row(const RowPacket<1>& at) const {
    store_packet<kVector>(out, at.first[0], values());
  }
  bool vector_aligned() const {
    return packet_aligned<kVector>(out);
  }
  uint32_t aligned_operands() const {
    return packet_aligned_operands<kVector>(out);
  }
};

// operands {out, cond, a, b}
template <typename T>
struct WhereBody {
  static constexpr int kVector = vector_width<T>();
  T* out;
  const bool* cond;
  const T* a;
  const T* b;
  __device__ void operator()(const int64_t (&offset)[4]) const {
    out[offset[0]] = cond[offset[1]] ? a[offset[2]] : b[offset[3]];
  }
  __device__ Packet<T, kVector> apply(const Packet<bool, kVector>& c, const Packet<T, kVector>& x,
                                      const Packet<T, kVector>& y) const {
    Packet<T, kVector> z;
#pragma unroll
    for (int j = 0; j < kVector; ++j)
      z.values[j] = c.values[j] ? x.values[j] : y.values[j];
    return z;
  }
  __device__ void vector(int64_t first) const {
    store_packet<kVector>(out, first,
                          apply(load_packet<kVector>(cond, first), load_packet<kVector>(a, first),
                                load_packet<kVector>(b, first)));
  }
  __device__ void vector_row(const RowPacket<4>& at) const {
    store_packet<kVector>(
        out, at.first[0],
        apply(load_row_packet<kVector>(cond, at, 1), load_row_packet<kVector>(a, at, 2),
              load_row_packet<kVector>(b, at, 3)));
  }
  bool vector_aligned() const {
    return packet_aligned<kVector>(out) && packet_aligned<kVector>(cond) &&
           packet_aligned<kVector>(a) && packet_aligned<kVector>(b);
  }
  uint32_t aligned_operands() const {
    return packet_aligned_operands<kVector>(out, cond, a, b);
  }
};

}  // namespace

template <typename T>
void unary(UnaryOp op, const StridedLayout& layout, T* out, const T* in, double scalar,
           cudaStream_t stream) {
  const UnaryBody<T> body{op, static_cast<acc_t<T>>(scalar), out, in};
  launch_strided<2>("unary<<<>>>", layout, body, stream);
}

template <typename T>
void binary(BinaryOp op, const StridedLayout& layout, T* out, const T* a, const T* b, double alpha,
            cudaStream_t stream) {
  const BinaryBody<T> body{op, static_cast<acc_t<T>>(alpha), out, a, b};
  launch_strided<3>("binary<<<>>>", layout, body, stream);
}

template <typename T>
void compare(CompareOp op, const StridedLayout& layout, bool* out, const T* a, const T* b,
             cudaStream_t stream) {
  const CompareBody<T> body{op, out, a, b};
  launch_strided<3>("compare<<<>>>", layout, body, stream);
}

template <typename Dst, typename Src>
void copy(const StridedLayout& layout, Dst* out, const Src* in, cudaStream_t stream) {
  const CopyBody<Dst, Src> body{out, in};
  launch_strided<2>("copy<<<>>>", layout, body, stream);
}

template <typename T>
void fill(const StridedLayout& layout, T* out, T value, cudaStream_t stream) {
  const FillBody<T> body{out, value};
  launch_strided<1>("fill<<<>>>", layout, body, stream);
}

template <typename T>
void where(const StridedLayout& layout, T* out, const bool* cond, const T* a, const T* b,
           cudaStream_t stream) {
  const WhereBody<T> body{out, cond, a, b};
  launch_strided<4>("where<<<>>>", layout, body, stream);
}

// The dtypes runtime/dispatch.h dispatches to: dispatch_numeric for the arithmetic, dispatch_all
// (bool too) for copy, fill and where.
#define EMBER_INSTANTIATE_NUMERIC(T)                                                         \
  template void unary<T>(UnaryOp, const StridedLayout&, T*, const T*, double, cudaStream_t); \
  template void binary<T>(BinaryOp, const StridedLayout&, T*, const T*, const T*, double,    \
                          cudaStream_t);                                                     \
  template void compare<T>(CompareOp, const StridedLayout&, bool*, const T*, const T*,       \
                           cudaStream_t);

EMBER_FOR_EACH_NUMERIC_TYPE(EMBER_INSTANTIATE_NUMERIC)
#undef EMBER_INSTANTIATE_NUMERIC

#define EMBER_INSTANTIATE_ANY(T)                                                                   \
  template void fill<T>(const StridedLayout&, T*, T, cudaStream_t);                                \
  template void where<T>(const StridedLayout&, T*, const bool*, const T*, const T*, cudaStream_t); \
  template void copy<T, float>(const StridedLayout&, T*, const float*, cudaStream_t);              \
  template void copy<T, double>(const StridedLayout&, T*, const double*, cudaStream_t);            \
  template void copy<T, Half>(const StridedLayout&, T*, const Half*, cudaStream_t);                \
  template void copy<T, BFloat16>(const StridedLayout&, T*, const BFloat16*, cudaStream_t);        \
  template void copy<T, int32_t>(const StridedLayout&, T*, const int32_t*, cudaStream_t);          \
  template void copy<T, int64_t>(const StridedLayout&, T*, const int64_t*, cudaStream_t);          \
  template void copy<T, uint8_t>(const StridedLayout&, T*, const uint8_t*, cudaStream_t);          \
  template void copy<T, bool>(const StridedLayout&, T*, const bool*, cudaStream_t);

EMBER_FOR_EACH_ELEMENT_TYPE(EMBER_INSTANTIATE_ANY)
#undef EMBER_INSTANTIATE_ANY

}  // namespace ember::kernels::cuda
