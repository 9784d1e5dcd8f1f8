#include "kernels/cpu/conv2d_direct.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/common/convert.h"
#include "kernels/common/scalar_types.h"
#include "kernels/cpu/conv2d_small.h"
#include "kernels/cpu/conv2d_stride_one.h"
#include "kernels/cpu/convert_runs.h"
#include "kernels/cpu/float_vectors.h"

// The accumulations `acc += w * x` must become fused multiply-adds: ISO C++ mode turns off
// contraction by default.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

namespace ember::kernels::cpu {

namespace {

constexpr int64_t kBlockChannels = 8;   // output channels per packed weight block
constexpr int64_t kTilePositions = 48;  // positions per tile (3 AVX-512 vectors)

// One direct convolution, stride 1: in (Cin, H, W) -> out (Kout, P, Q), weights packed.
struct Plan : StrideOneConv {
  int64_t plane;              // the padded plane Hp Wp
  int64_t tiles;              // ceil(P Wp / kTilePositions)
  int64_t positions;          // tiles * kTilePositions: the row length of the f32 output
  int64_t blocks;             // ceil(Kout / kBlockChannels)
  int64_t input_floats;       // the padded copy, with slack for the last tiles' reads
  std::vector<int64_t> taps;  // r Wp + s for each (r, s)

  explicit Plan(const StrideOneConv& conv) : StrideOneConv(conv) {
    plane = Hp * Wp;
    tiles = (P * Wp + kTilePositions - 1) / kTilePositions;
    positions = tiles * kTilePositions;
    blocks = (Kout + kBlockChannels - 1) / kBlockChannels;
    for (int64_t i = 0; i < R; ++i)
      for (int64_t j = 0; j < S; ++j)
        taps.push_back(i * Wp + j);
    // A tile near the end reads up to positions - 1 + the last tap past its channel's start.
    input_floats = Cin * plane + positions + taps.back() + 16;
  }
};

// What one call of the micro-kernel loop needs: one block of 8 output channels, tiles
// [tile_begin, tile_end) of its positions.
struct BlockArgs {
  const float* input;    // the padded image (Cin planes)
  const float* weights;  // this block's packed weights (Cin, R S, 8)
  float* out;            // this block's first output row (8 rows of `positions`)
  const int64_t* taps;
  int64_t ntaps, channels, plane, ld, tile_begin, tile_end;
};

// acc (KB channels, NV vectors of positions) = sum over c, taps of w * x, stored to out.
// Pointers only in and out: vectors never cross a call (their ABI differs between clones).
template <typename V, int KB, int NV>
[[gnu::always_inline]] inline void micro_tile(const float* x, const float* w, float* out,
                                              const BlockArgs& a) {
  constexpr int lanes = sizeof(V) / sizeof(float);
  V acc[KB][NV];
  for (int k = 0; k < KB; ++k)
    for (int v = 0; v < NV; ++v)
      acc[k][v] = V{};
  for (int64_t c = 0; c < a.channels; ++c, x += a.plane) {
    for (int64_t t = 0; t < a.ntaps; ++t, w += kBlockChannels) {
      const float* xs = x + a.taps[t];
      V in[NV];
      for (int v = 0; v < NV; ++v)
        std::memcpy(&in[v], xs + v * lanes, sizeof(V));
      for (int k = 0; k < KB; ++k) {
        const V wk = w[k] - V{};  // a broadcast (x - 0 folds to x; x + 0 does not for -0)
        for (int v = 0; v < NV; ++v)
          acc[k][v] += wk * in[v];
      }
    }
  }
  for (int k = 0; k < KB; ++k)
    for (int v = 0; v < NV; ++v)
      std::memcpy(out + k * a.ld + v * lanes, &acc[k][v], sizeof(V));
}

// Covers each 8-channel x 48-position tile with micro-tiles of KB channels x NV vectors.
template <typename V, int KB, int NV>
[[gnu::always_inline]] inline void block_body(const BlockArgs& a) {
  constexpr int64_t span = NV * static_cast<int64_t>(sizeof(V) / sizeof(float));
  static_assert(kTilePositions % span == 0 && kBlockChannels % KB == 0);
  for (int64_t tile = a.tile_begin; tile < a.tile_end; ++tile) {
    for (int64_t k = 0; k < kBlockChannels; k += KB) {
      for (int64_t pos = tile * kTilePositions; pos < (tile + 1) * kTilePositions; pos += span)
        micro_tile<V, KB, NV>(a.input + pos, a.weights + k, a.out + k * a.ld + pos, a);
    }
  }
}

// ---- grad_weight -------------------------------------------------------------------------
// With the image stored channels last, (padded position, Cp channels), Cp = C rounded up to 16:
//   dw[k][c][r][s] = sum over positions i of dy[k][i] x[i + r Wp + s][c]
// For one k and r, the (s, c) pairs are S Cp consecutive floats at x[(i + r Wp) Cp]: a register
// tile of 4 k x NJ vectors of (s, c) accumulates over i with broadcasts of dy, no reduction
// across lanes. dy is stored in the padded row width with zeros at q >= Q, like the forward's
// output, so that the dropped positions add nothing.
constexpr int64_t kWeightChannels = 4;  // k per grad_weight tile
constexpr int64_t kChannelAlign = 16;   // Cp: the channels-last rows hold whole vectors

struct WeightArgs {
  const float* dy;               // (K4, ld_dy) padded-width rows
  const float* x;                // (positions, Cp) channels last
  float* acc;                    // (K4, R, S Cp): added to
  int64_t ld_dy;                 // the row length of dy
  int64_t count;                 // positions summed over: P Wp
  int64_t Cp, Wp, R, span;       // span = S Cp
  int64_t item_begin, item_end;  // items: (k block, r) pairs, k-block-major
};

template <typename V, int NJ>
[[gnu::always_inline]] inline void weight_tile(const WeightArgs& a, const float* dy, const float* x,
                                               float* acc_out) {
  constexpr int lanes = sizeof(V) / sizeof(float);
  constexpr int KB = kWeightChannels;
  V acc[KB][NJ];
  for (int k = 0; k < KB; ++k)
    for (int j = 0; j < NJ; ++j)
      acc[k][j] = V{};
  for (int64_t i = 0; i < a.count; ++i, x += a.Cp) {
    V in[NJ];
    for (int j = 0; j < NJ; ++j)
      std::memcpy(&in[j], x + j * lanes, sizeof(V));
    for (int k = 0; k < KB; ++k) {
      const V dk = dy[k * a.ld_dy + i] - V{};
      for (int j = 0; j < NJ; ++j)
        acc[k][j] += dk * in[j];
    }
  }
  const int64_t ld_acc = a.R * a.span;
  for (int k = 0; k < KB; ++k)
    for (int j = 0; j < NJ; ++j) {
      V old;
      std::memcpy(&old, acc_out + k * ld_acc + j * lanes, sizeof(V));
      old += acc[k][j];
      std::memcpy(acc_out + k * ld_acc + j * lanes, &old, sizeof(V));
    }
}

// The tail of a row of (s, c) pairs narrower than NJ vectors: the tile for exactly nj.
template <typename V, int NJ>
[[gnu::always_inline]] inline void weight_tile_upto(int64_t nj, const WeightArgs& a,
                                                    const float* dy, const float* x,
                                                    float* acc_out) {
  if constexpr (NJ > 0) {
    if (nj == NJ)
      weight_tile<V, NJ>(a, dy, x, acc_out);
    else
      weight_tile_upto<V, NJ - 1>(nj, a, dy, x, acc_out);
  }
}

template <typename V, int NJ>
[[gnu::always_inline]] inline void weight_body(const WeightArgs& a) {
  constexpr int64_t lanes = sizeof(V) / sizeof(float), width = NJ * lanes;
  for (int64_t item = a.item_begin; item < a.item_end; ++item) {
    const int64_t block = item / a.R, r = item % a.R;
    const float* dy = a.dy + block * kWeightChannels * a.ld_dy;
    const float* x = a.x + r * a.Wp * a.Cp;
    float* acc = a.acc + (block * kWeightChannels * a.R + r) * a.span;
    int64_t j = 0;
    for (; j + width <= a.span; j += width)
      weight_tile<V, NJ>(a, dy, x + j, acc + j);
    if (j < a.span) weight_tile_upto<V, NJ - 1>((a.span - j) / lanes, a, dy, x + j, acc + j);
  }
}

// ---- the clones -------------------------------------------------------------------------
using BlockFn = void (*)(const BlockArgs&);
using WeightFn = void (*)(const WeightArgs&);
struct KernelSet {
  BlockFn block;
  WeightFn weight;
};

void block_baseline(const BlockArgs& a) {
  block_body<v4, 4, 2>(a);  // 8 of the 16 xmm registers accumulate
}
void weight_baseline(const WeightArgs& a) {
  weight_body<v4, 2>(a);
}

#ifdef EMBER_HAS_ISA_CLONES
__attribute__((target("avx2,fma"))) void block_avx2(const BlockArgs& a) {
  block_body<v8, 4, 3>(a);  // 12 of the 16 ymm registers accumulate
}
__attribute__((target("avx2,fma"))) void weight_avx2(const WeightArgs& a) {
  weight_body<v8, 3>(a);
}
__attribute__((target("avx512f,fma"))) void block_avx512(const BlockArgs& a) {
  block_body<v16, 8, 3>(a);  // 24 of the 32 zmm registers accumulate
}
__attribute__((target("avx512f,fma"))) void weight_avx512(const WeightArgs& a) {
  weight_body<v16, 6>(a);
}
#endif

// The kernels for `isa`, or null members when this CPU cannot run them.
KernelSet kernels_for(DirectConvIsa isa) {
  const std::optional<DirectConvIsa> runnable = runnable_isa(isa);
  if (!runnable) return {};
#ifdef EMBER_HAS_ISA_CLONES
  if (*runnable == DirectConvIsa::avx512) return {block_avx512, weight_avx512};
  if (*runnable == DirectConvIsa::avx2) return {block_avx2, weight_avx2};
#endif
  return {block_baseline, weight_baseline};
}

std::atomic<BlockFn> g_block_fn{nullptr};
std::atomic<WeightFn> g_weight_fn{nullptr};

void use_kernels(const KernelSet& set) {
  g_block_fn.store(set.block, std::memory_order_relaxed);
  g_weight_fn.store(set.weight, std::memory_order_relaxed);
}

BlockFn block_fn() {
  if (g_block_fn.load(std::memory_order_relaxed) == nullptr)
    use_kernels(kernels_for(DirectConvIsa::best));
  return g_block_fn.load(std::memory_order_relaxed);
}

WeightFn weight_fn() {
  if (g_weight_fn.load(std::memory_order_relaxed) == nullptr)
    use_kernels(kernels_for(DirectConvIsa::best));
  return g_weight_fn.load(std::memory_order_relaxed);
}

// Runs `plan` on `batch` images: in (batch, Cin, H, W) -> out (batch, Kout, P, Q), with packed
// weights (blocks, Cin, R S, 8) and an f32 bias per output channel (or null).
template <typename T>
void run_plan(const Plan& plan, int64_t batch, const T* input, const float* packed,
              const float* bias, T* output) {
  const BlockFn fn = block_fn();
  const int threads = omp_get_max_threads();
  const bool image_per_thread = threads > 1 && batch >= threads;
  const int workspaces = image_per_thread ? threads : 1;
  const int64_t in_image = plan.Cin * plan.H * plan.W, out_image = plan.Kout * plan.P * plan.Q;
  const int64_t block_weights = plan.Cin * static_cast<int64_t>(plan.taps.size()) * kBlockChannels;
  struct Workspace {
    AlignedFloats padded, out;
  };
  std::vector<Workspace> spaces;
  spaces.reserve(static_cast<size_t>(workspaces));
  for (int i = 0; i < workspaces; ++i)  // the borders stay zero: only interiors are rewritten
    spaces.push_back({AlignedFloats(plan.input_floats, true),
                      AlignedFloats(plan.blocks * kBlockChannels * plan.positions, false)});

  auto load_image = [&](const Workspace& space, int64_t n) {
    const T* src = input + n * in_image;
    float* dst = space.padded.get();
    for (int64_t c = 0; c < plan.Cin; ++c)
      for (int64_t h = 0; h < plan.H; ++h) {
        const T* row = src + (c * plan.H + h) * plan.W;
        float* to = dst + c * plan.plane + (h + plan.pad_h) * plan.Wp + plan.pad_w;
        widen_to_f32(row, to, plan.W);
      }
  };
  // Work items: (block, tile) pairs, block-major, so that a range keeps its weights in L1.
  auto compute = [&](const Workspace& space, int64_t item_begin, int64_t item_end) {
    for (int64_t item = item_begin; item < item_end;) {
      const int64_t block = item / plan.tiles, tile = item % plan.tiles;
      const int64_t tile_end = std::min(plan.tiles, tile + (item_end - item));
      const BlockArgs args{space.padded.get(),
                           packed + block * block_weights,
                           space.out.get() + block * kBlockChannels * plan.positions,
                           plan.taps.data(),
                           static_cast<int64_t>(plan.taps.size()),
                           plan.Cin,
                           plan.plane,
                           plan.positions,
                           tile,
                           tile_end};
      fn(args);
      item += tile_end - tile;
    }
  };
  // The valid positions q < Q of each row, plus the bias, converted to T (the workspace is
  // rewritten for each image: store_plus_bias may add the bias in place).
  auto store_image = [&](const Workspace& space, int64_t n, int64_t k_begin, int64_t k_end) {
    T* dst = output + n * out_image;
    for (int64_t k = k_begin; k < k_end; ++k) {
      const float* b = bias != nullptr ? bias + k : nullptr;
      for (int64_t p = 0; p < plan.P; ++p) {
        float* from = space.out.get() + k * plan.positions + p * plan.Wp;
        store_plus_bias(from, b, dst + (k * plan.P + p) * plan.Q, plan.Q);
      }
    }
  };

  const int64_t items = plan.blocks * plan.tiles;
  if (image_per_thread) {
#pragma omp parallel num_threads(threads)
    {
      const Workspace& space = spaces[static_cast<size_t>(omp_get_thread_num())];
      // Images are independent: handed out as threads free up (a core shared with other work
      // does not hold the others back), with the same result whichever thread takes one.
#pragma omp for schedule(dynamic)
      for (int64_t n = 0; n < batch; ++n) {
        load_image(space, n);
        compute(space, 0, items);
        store_image(space, n, 0, plan.Kout);
      }
    }
    return;
  }
  // Fewer images than threads: the (block, tile) items of each image are shared out.
  const Workspace& space = spaces[0];
  for (int64_t n = 0; n < batch; ++n) {
    load_image(space, n);
#pragma omp parallel if (threads > 1)
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      compute(space, items * t / nt, items * (t + 1) / nt);
#pragma omp barrier
      store_image(space, n, plan.Kout * t / nt, plan.Kout * (t + 1) / nt);
    }
  }
}

}  // namespace

bool conv2d_direct_applies(const Conv2dParams& p) {
  if (!is_stride_one_single_group(p)) return false;
  const int64_t Q = p.out_width(), padded_width = p.in_width + 2 * p.pad_w;
  // Below these the dropped positions or the per-image overheads outweigh the GEMM's unfolding.
  return Q >= 8 && 2 * Q >= padded_width && p.out_height() * Q >= 64;
}

bool conv2d_direct_applies_to_grad_input(const Conv2dParams& p) {
  if (!conv2d_direct_applies(p) || !grad_input_is_a_convolution(p)) return false;
  // The gradient's convolution reads grad_output rows padded to Q + 2 (S - 1 - pad_w).
  const int64_t padded_width = p.out_width() + 2 * (p.kernel_width - 1 - p.pad_w);
  return 2 * p.in_width >= padded_width;
}

bool conv2d_direct_applies_to_grad_weight(const Conv2dParams& p) {
  // Measured on AVX-512 at 32x32: 1 or 3 channels (padded to 16) take 2 to 4 times the GEMM
  // path's time; 8 channels about the same; 16 half.
  const int64_t padded = (p.in_channels + kChannelAlign - 1) / kChannelAlign * kChannelAlign;
  return conv2d_direct_applies(p) && 2 * p.in_channels >= padded;
}

template <typename T>
void conv2d_direct_forward(const Conv2dParams& p, const T* input, const T* weight, const T* bias,
                           T* output) {
  const Plan plan(StrideOneConv::forward(p));
  // weight (K, C, R, S) -> (blocks, C, R S, 8); missing channels of the last block are zero.
  const int64_t C = plan.Cin, K = plan.Kout, taps = plan.R * plan.S;
  std::vector<float> packed(static_cast<size_t>(plan.blocks * kBlockChannels * C * taps), 0.0f);
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < taps; ++t)
        packed[static_cast<size_t>((((k / kBlockChannels) * C + c) * taps + t) * kBlockChannels +
                                   k % kBlockChannels)] =
            static_cast<float>(weight[(k * C + c) * taps + t]);
  const std::vector<float> b = bias_in_f32(bias, K);
  run_plan(plan, p.batch, input, packed.data(), bias != nullptr ? b.data() : nullptr, output);
}

template <typename T>
void conv2d_direct_grad_input(const Conv2dParams& p, const T* grad_output, const T* weight,
                              T* grad_input) {
  // The convolution of grad_output with the weights flipped and transposed
  // (StrideOneConv::grad_input): weight (K, C, R, S) -> (blocks of C, K, R S, 8), flipped in r, s.
  const Plan plan(StrideOneConv::grad_input(p));
  const int64_t C = p.in_channels, K = p.out_channels, R = plan.R, S = plan.S, taps = R * S;
  std::vector<float> packed(static_cast<size_t>(plan.blocks * kBlockChannels * K * taps), 0.0f);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t k = 0; k < K; ++k)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s)
          packed[static_cast<size_t>((((c / kBlockChannels) * K + k) * taps + r * S + s) *
                                         kBlockChannels +
                                     c % kBlockChannels)] =
              static_cast<float>(weight[((k * C + c) * R + (R - 1 - r)) * S + (S - 1 - s)]);
  run_plan(plan, p.batch, grad_output, packed.data(), nullptr, grad_input);
}

template <typename T>
void conv2d_direct_grad_weight(const Conv2dParams& p, const T* input, const T* grad_output,
                               T* grad_weight) {
  const int64_t C = p.in_channels, H = p.in_height, W = p.in_width, K = p.out_channels;
  const int64_t R = p.kernel_height, S = p.kernel_width, P = p.out_height(), Q = p.out_width();
  const int64_t Wp = W + 2 * p.pad_w, Hp = H + 2 * p.pad_h;
  const int64_t Cp = (C + kChannelAlign - 1) / kChannelAlign * kChannelAlign;
  const int64_t blocks = (K + kWeightChannels - 1) / kWeightChannels;
  const int64_t count = P * Wp, span = S * Cp, items = blocks * R;
  const int64_t acc_size = blocks * kWeightChannels * R * span;
  const WeightFn fn = weight_fn();
  const int threads = omp_get_max_threads();
  const bool image_per_thread = threads > 1 && p.batch >= threads;
  const int workspaces = image_per_thread ? threads : 1;
  struct Workspace {
    AlignedFloats x, dy;    // zero borders and padding stay zero: only interiors are rewritten
    AlignedFloats widened;  // 16-bit T: the image (C, H, W) in f32, before it is transposed
  };
  constexpr bool kWiden = !std::is_same_v<T, float>;
  std::vector<Workspace> spaces;
  spaces.reserve(static_cast<size_t>(workspaces));
  for (int i = 0; i < workspaces; ++i)  // the last tap reads up to Hp Wp + S - 2 positions
    spaces.push_back({AlignedFloats((Hp * Wp + S + 1) * Cp, true),
                      AlignedFloats(blocks * kWeightChannels * count, true),
                      AlignedFloats(kWiden ? C * H * W : 1, false)});
  // The images are summed in fixed chunks, each into its own partial sum, and the chunks are
  // handed out as threads free up: the balance follows the cores' load while the result does
  // not depend on which thread summed which chunk.
  const int64_t chunks = image_per_thread ? std::min<int64_t>(p.batch, 4 * threads) : 1;
  std::vector<AlignedFloats> sums;
  sums.reserve(static_cast<size_t>(chunks));
  for (int64_t i = 0; i < chunks; ++i)
    sums.emplace_back(acc_size, true);

  // A 16-bit image is widened in one run first (convert_runs.h), then transposed as f32.
  auto load_image = [&](const Workspace& space, int64_t n) {
    const float* x = accumulate_run(input + n * C * H * W, space.widened.get(), C * H * W);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t c = 0; c < C; ++c) {
        const float* row = x + (c * H + h) * W;
        float* to = space.x.get() + ((h + p.pad_h) * Wp + p.pad_w) * Cp + c;
        for (int64_t w = 0; w < W; ++w)
          to[w * Cp] = row[w];
      }
    const T* dy = grad_output + n * K * P * Q;
    for (int64_t k = 0; k < K; ++k)
      for (int64_t row = 0; row < P; ++row)
        widen_to_f32(dy + (k * P + row) * Q, space.dy.get() + k * count + row * Wp, Q);
  };
  auto compute = [&](const Workspace& space, float* sum, int64_t item_begin, int64_t item_end) {
    const WeightArgs args{space.dy.get(), space.x.get(), sum,     count, count, Cp, Wp, R,
                          span,           item_begin,    item_end};
    fn(args);
  };
  if (image_per_thread) {
#pragma omp parallel num_threads(threads)
    {
      const Workspace& space = spaces[static_cast<size_t>(omp_get_thread_num())];
#pragma omp for schedule(dynamic)
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        for (int64_t n = p.batch * chunk / chunks; n < p.batch * (chunk + 1) / chunks; ++n) {
          load_image(space, n);
          compute(space, sums[static_cast<size_t>(chunk)].get(), 0, items);
        }
      }
    }
  } else {
    // Fewer images than threads: the (k block, r) items write disjoint rows of one sum.
    const Workspace& space = spaces[0];
    for (int64_t n = 0; n < p.batch; ++n) {
      load_image(space, n);
#pragma omp parallel if (threads > 1)
      {
        const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        compute(space, sums[0].get(), items * t / nt, items * (t + 1) / nt);
      }
    }
  }
  // The chunks' partial sums added in chunk order.
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s) {
          float total = 0.0f;
          for (const AlignedFloats& sum : sums)
            total += sum.get()[(k * R + r) * span + s * Cp + c];
          grad_weight[((k * C + c) * R + r) * S + s] = T(total);
        }
}

bool set_conv2d_direct_isa(DirectConvIsa isa) {
  const KernelSet set = kernels_for(isa);
  if (set.block == nullptr) return false;
  use_kernels(set);
  // The small-plane kernels (conv2d_small.h) follow: both take runnable_isa's answer.
  static_cast<void>(set_conv2d_small_isa(isa));
  return true;
}

#define EMBER_INSTANTIATE_CONV2D_DIRECT(T)                                                       \
  template void conv2d_direct_forward<T>(const Conv2dParams&, const T*, const T*, const T*, T*); \
  template void conv2d_direct_grad_input<T>(const Conv2dParams&, const T*, const T*, T*);        \
  template void conv2d_direct_grad_weight<T>(const Conv2dParams&, const T*, const T*, T*);
EMBER_INSTANTIATE_CONV2D_DIRECT(float)
EMBER_INSTANTIATE_CONV2D_DIRECT(Half)
EMBER_INSTANTIATE_CONV2D_DIRECT(BFloat16)
#undef EMBER_INSTANTIATE_CONV2D_DIRECT

}  // namespace ember::kernels::cpu
