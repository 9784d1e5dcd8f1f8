#include "kernels/cpu/conv2d_small.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "kernels/common/scalar_types.h"
#include "kernels/cpu/conv2d_stride_one.h"
#include "kernels/cpu/convert_runs.h"
#include "kernels/cpu/float_vectors.h"

// The accumulations `acc += x * w` must become fused multiply-adds: ISO C++ mode turns off
// contraction by default.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=fast")
#endif

namespace ember::kernels::cpu {

namespace {

constexpr int kTilePixels = 6;  // output pixels per register tile
// Images are processed in chunks whose copies (input channels last, output pixels x channels)
// hold about this many floats, so that a large batch does not need a batch-sized workspace.
constexpr int64_t kChunkFloats = int64_t{4} << 20;

// What one call of a kernel needs: the work items [item_begin, item_end) of a chunk, an item
// being one (channel block, pixel tile) pair, block-major.
struct TileArgs {
  const float* xp;      // (images, Hp, Wp, Cin): the chunk's images, zero-bordered
  const float* packed;  // (R S, Cin, Kp)
  float* out;           // (pixels, Kp)
  const int64_t* taps;  // (r Wp + s) Cin for each (r, s)
  int64_t ntaps, Cin, Kp;
  int64_t pixels;        // the chunk's output pixels: images x P Q
  int64_t image_pixels;  // P Q
  int64_t Q, Hp, Wp;     // the output rows' width; xp's padded planes
  int64_t item_begin, item_end;
};

// One item: acc (6 pixels from pixel `first`, KV vectors of channels from block `block`) = sum
// over taps and c of x * w, stored to out.
template <typename V, int KV>
[[gnu::always_inline]] inline void tile(const TileArgs& a, int64_t block, int64_t first) {
  constexpr int lanes = sizeof(V) / sizeof(float);
  int64_t corner[kTilePixels];  // each pixel's window corner in xp
  for (int p = 0; p < kTilePixels; ++p) {
    const int64_t pixel = std::min(first + p, a.pixels - 1);  // a short last tile repeats one
    const int64_t image = pixel / a.image_pixels, within = pixel % a.image_pixels;
    corner[p] = ((image * a.Hp + within / a.Q) * a.Wp + within % a.Q) * a.Cin;
  }
  V acc[kTilePixels][KV];
  for (int p = 0; p < kTilePixels; ++p)
    for (int v = 0; v < KV; ++v)
      acc[p][v] = V{};
  const float* w = a.packed + block * KV * lanes;
  for (int64_t t = 0; t < a.ntaps; ++t) {
    const float* x = a.xp + a.taps[t];
    const float* wt = w + t * a.Cin * a.Kp;
    for (int64_t c = 0; c < a.Cin; ++c) {
      V wv[KV];
      for (int v = 0; v < KV; ++v)
        std::memcpy(&wv[v], wt + c * a.Kp + v * lanes, sizeof(V));
      for (int p = 0; p < kTilePixels; ++p) {
        const V xb = x[corner[p] + c] - V{};  // a broadcast (x - 0 folds to x; x + 0 not for -0)
        for (int v = 0; v < KV; ++v)
          acc[p][v] += xb * wv[v];
      }
    }
  }
  for (int p = 0; p < kTilePixels && first + p < a.pixels; ++p)
    for (int v = 0; v < KV; ++v)
      std::memcpy(a.out + (first + p) * a.Kp + (block * KV + v) * lanes, &acc[p][v], sizeof(V));
}

template <typename V, int KV>
[[gnu::always_inline]] inline void body(const TileArgs& a) {
  const int64_t tiles = (a.pixels + kTilePixels - 1) / kTilePixels;
  for (int64_t item = a.item_begin; item < a.item_end; ++item)
    tile<V, KV>(a, item / tiles, item % tiles * kTilePixels);
}

// ---- grad_weight -------------------------------------------------------------------------
// With a chunk of images channels last, xp (images, Hp, Wp, Cin) as above, and grad_output
// channels last in panels of one block of output channels each, dy (blocks, pixels, KV lanes)
// (channels past K zero):
//   dw[k][c][r][s] = sum over pixels i of xp[corner(i) + r Wp Cin + (s Cin + c)] dy[i][k]
// For one r, the (s, c) pairs of a pixel are S Cin consecutive floats of xp from
// corner(i) + r Wp Cin. A register tile of 6 pairs (broadcasts) x one block of output channels
// accumulates over the pixels of a chunk of images, span by span: the mirror of the forward's
// tile, with the pixels as the sum and dy's panel as the stream of vectors. The pairs of a row are
// rounded up to a whole number of tiles; the pairs past S Cin read the next pixel's channels (xp
// has slack at its end) into sums that are dropped.
constexpr int kWeightPairs = 6;  // (s, c) pairs per grad_weight tile
// The tiles sum a chunk's pixels in spans of this many: a block's panel of dy over a span (256 x
// 64 floats with AVX-512: 64 KiB) stays in L2 while the tiles of every pair read it again.
constexpr int64_t kWeightSpanPixels = 256;

struct WeightArgs {
  const float* xp;         // (images, Hp, Wp, Cin), then slack
  const float* dy;         // (blocks, pixels, block channels)
  float* acc;              // (R, pairs, Kp): added to
  const int64_t* corners;  // (pixels): each pixel's window corner in xp
  int64_t pixels, Kp;
  int64_t row;                   // Wp Cin: the step from r to r + 1 in xp
  int64_t pairs;                 // S Cin rounded up to whole tiles
  int64_t item_begin, item_end;  // items (r, block, tile of pairs), tile fastest
};

// acc[pairs first_pair.., block's channels] += the sum over pixels [begin, end).
template <typename V, int KV>
[[gnu::always_inline]] inline void weight_tile(const WeightArgs& a, int64_t r, int64_t block,
                                               int64_t first_pair, int64_t begin, int64_t end) {
  constexpr int lanes = sizeof(V) / sizeof(float);
  V acc[kWeightPairs][KV];
  for (int e = 0; e < kWeightPairs; ++e)
    for (int v = 0; v < KV; ++v)
      acc[e][v] = V{};
  const float* x = a.xp + r * a.row + first_pair;
  const float* dy = a.dy + (block * a.pixels + begin) * KV * lanes;
  for (int64_t i = begin; i < end; ++i, dy += KV * lanes) {
    V dv[KV];
    for (int v = 0; v < KV; ++v)
      std::memcpy(&dv[v], dy + v * lanes, sizeof(V));
    const float* xi = x + a.corners[i];
    for (int e = 0; e < kWeightPairs; ++e) {
      const V xb = xi[e] - V{};  // a broadcast
      for (int v = 0; v < KV; ++v)
        acc[e][v] += xb * dv[v];
    }
  }
  float* out = a.acc + (r * a.pairs + first_pair) * a.Kp + block * KV * lanes;
  for (int e = 0; e < kWeightPairs; ++e)
    for (int v = 0; v < KV; ++v) {
      V old;
      std::memcpy(&old, out + e * a.Kp + v * lanes, sizeof(V));
      old += acc[e][v];
      std::memcpy(out + e * a.Kp + v * lanes, &old, sizeof(V));
    }
}

template <typename V, int KV>
[[gnu::always_inline]] inline void weight_body(const WeightArgs& a) {
  constexpr int64_t lanes = sizeof(V) / sizeof(float);
  const int64_t tiles = a.pairs / kWeightPairs, blocks = a.Kp / (KV * lanes);
  for (int64_t begin = 0; begin < a.pixels; begin += kWeightSpanPixels) {
    const int64_t end = std::min(begin + kWeightSpanPixels, a.pixels);
    for (int64_t item = a.item_begin; item < a.item_end; ++item) {
      const int64_t tile = item % tiles, rest = item / tiles;
      weight_tile<V, KV>(a, rest / blocks, rest % blocks, tile * kWeightPairs, begin, end);
    }
  }
}

// ---- the clones -------------------------------------------------------------------------
using TileFn = void (*)(const TileArgs&);
using WeightFn = void (*)(const WeightArgs&);
struct KernelSet {
  TileFn fn;
  WeightFn weight_fn;
  int64_t block_channels;  // KV x lanes: output channels per item
};

void tiles_baseline(const TileArgs& a) {
  body<v4, 2>(a);  // 12 of the 16 xmm registers accumulate
}
void weight_tiles_baseline(const WeightArgs& a) {
  weight_body<v4, 2>(a);
}
constexpr KernelSet kBaseline{tiles_baseline, weight_tiles_baseline, 8};

#ifdef EMBER_HAS_ISA_CLONES
__attribute__((target("avx2,fma"))) void tiles_avx2(const TileArgs& a) {
  body<v8, 2>(a);  // 12 of the 16 ymm registers accumulate
}
__attribute__((target("avx2,fma"))) void weight_tiles_avx2(const WeightArgs& a) {
  weight_body<v8, 2>(a);
}
__attribute__((target("avx512f,fma"))) void tiles_avx512(const TileArgs& a) {
  body<v16, 4>(a);  // 24 of the 32 zmm registers accumulate
}
__attribute__((target("avx512f,fma"))) void weight_tiles_avx512(const WeightArgs& a) {
  weight_body<v16, 4>(a);
}
constexpr KernelSet kAvx2{tiles_avx2, weight_tiles_avx2, 16};
constexpr KernelSet kAvx512{tiles_avx512, weight_tiles_avx512, 64};
#endif

// The kernels for `isa`; null when this CPU cannot run them.
const KernelSet* kernels_for(DirectConvIsa isa) {
  const std::optional<DirectConvIsa> runnable = runnable_isa(isa);
  if (!runnable) return nullptr;
#ifdef EMBER_HAS_ISA_CLONES
  if (*runnable == DirectConvIsa::avx512) return &kAvx512;
  if (*runnable == DirectConvIsa::avx2) return &kAvx2;
#endif
  return &kBaseline;
}

std::atomic<const KernelSet*> g_kernels{nullptr};

const KernelSet& kernels() {
  if (g_kernels.load(std::memory_order_relaxed) == nullptr)
    set_conv2d_small_isa(DirectConvIsa::best);
  return *g_kernels.load(std::memory_order_relaxed);
}

int64_t round_up(int64_t value, int64_t multiple) {
  return (value + multiple - 1) / multiple * multiple;
}

// The images (images, Cin, H, W) -> xp (images, Hp, Wp, Cin) in f32, zero-bordered: each pixel's
// channels gathered from the image (in L1 or L2) and written in one contiguous run.
template <typename T>
void copy_channels_last(const StrideOneConv& g, int64_t images, const T* input, float* xp) {
  const int64_t in_image = g.Cin * g.H * g.W, padded_image = g.Hp * g.Wp * g.Cin;
  const int threads = omp_get_max_threads();
#pragma omp parallel num_threads(threads) if (threads > 1 && images > 1)
  {
    std::vector<float> widened(std::is_same_v<T, float> ? 0 : static_cast<size_t>(in_image));
#pragma omp for schedule(static)
    for (int64_t n = 0; n < images; ++n) {
      float* dst = xp + n * padded_image;
      std::fill(dst, dst + padded_image, 0.0f);
      const float* image = accumulate_run(input + n * in_image, widened.data(), in_image);
      for (int64_t h = 0; h < g.H; ++h)
        for (int64_t w = 0; w < g.W; ++w) {
          const float* from = image + h * g.W + w;
          float* to = dst + ((h + g.pad_h) * g.Wp + w + g.pad_w) * g.Cin;
          for (int64_t c = 0; c < g.Cin; ++c)
            to[c] = from[c * g.H * g.W];
        }
    }
  }
}

// Runs `g` on `batch` images: in (batch, Cin, H, W) -> out (batch, Kout, P, Q), with the weights
// packed (R S, Cin, Kp) for `set` and an f32 bias per output channel (or null).
template <typename T>
void run(const StrideOneConv& g, const KernelSet& set, int64_t batch, const T* input,
         const float* packed, int64_t Kp, const float* bias, T* output) {
  if (batch == 0) return;  // (std::clamp below needs batch >= 1)
  const int64_t image_pixels = g.P * g.Q, padded_image = g.Hp * g.Wp * g.Cin;
  const int64_t in_image = g.Cin * g.H * g.W, out_image = g.Kout * image_pixels;
  const int64_t chunk =
      std::clamp<int64_t>(kChunkFloats / (padded_image + image_pixels * Kp), 1, batch);
  std::vector<float> xp(static_cast<size_t>(chunk * padded_image));
  std::vector<float> out(static_cast<size_t>(chunk * image_pixels * Kp));
  std::vector<int64_t> taps;
  for (int64_t r = 0; r < g.R; ++r)
    for (int64_t s = 0; s < g.S; ++s)
      taps.push_back((r * g.Wp + s) * g.Cin);
  const int threads = omp_get_max_threads();

  for (int64_t first_image = 0; first_image < batch; first_image += chunk) {
    const int64_t images = std::min(chunk, batch - first_image);
    copy_channels_last(g, images, input + first_image * in_image, xp.data());
    // The tiles: each thread a fixed range of (block, tile) items, so the result does not depend
    // on timing (every output is computed by one thread, in one order, whatever the count).
    const int64_t pixels = images * image_pixels;
    const int64_t items = Kp / set.block_channels * ((pixels + kTilePixels - 1) / kTilePixels);
#pragma omp parallel num_threads(threads) if (threads > 1)
    {
      const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
      const TileArgs args{.xp = xp.data(),
                          .packed = packed,
                          .out = out.data(),
                          .taps = taps.data(),
                          .ntaps = g.R * g.S,
                          .Cin = g.Cin,
                          .Kp = Kp,
                          .pixels = pixels,
                          .image_pixels = image_pixels,
                          .Q = g.Q,
                          .Hp = g.Hp,
                          .Wp = g.Wp,
                          .item_begin = items * t / nt,
                          .item_end = items * (t + 1) / nt};
      set.fn(args);
    }
    // out (images, P Q, Kp) -> output (images, Kout, P Q), plus the bias, converted to T: each
    // image transposed in a buffer that stays in L1 or L2, then stored a channel at a time.
#pragma omp parallel num_threads(threads) if (threads > 1 && images > 1)
    {
      std::vector<float> planes(static_cast<size_t>(out_image));
#pragma omp for schedule(static)
      for (int64_t n = 0; n < images; ++n) {
        const float* from = out.data() + n * image_pixels * Kp;
        for (int64_t i = 0; i < image_pixels; ++i)
          for (int64_t k = 0; k < g.Kout; ++k)
            planes[static_cast<size_t>(k * image_pixels + i)] = from[i * Kp + k];
        T* dst = output + (first_image + n) * out_image;
        for (int64_t k = 0; k < g.Kout; ++k)
          store_plus_bias(planes.data() + k * image_pixels, bias != nullptr ? bias + k : nullptr,
                          dst + k * image_pixels, image_pixels);
      }
    }
  }
}

}  // namespace

bool conv2d_small_applies(const Conv2dParams& p) {
  return is_stride_one_single_group(p) && p.out_height() * p.out_width() <= 64 &&
         p.out_channels >= 32;
}

bool conv2d_small_applies_to_grad_weight(const Conv2dParams& p) {
  return is_stride_one_single_group(p) && p.out_height() * p.out_width() <= 64 &&
         p.in_channels >= 32;
}

bool conv2d_small_applies_to_grad_input(const Conv2dParams& p) {
  return is_stride_one_single_group(p) && grad_input_is_a_convolution(p) &&
         p.in_height * p.in_width <= 64 && p.in_channels >= 32;
}

template <typename T>
void conv2d_small_forward(const Conv2dParams& p, const T* input, const T* weight, const T* bias,
                          T* output) {
  const StrideOneConv g = StrideOneConv::forward(p);
  const KernelSet& set = kernels();
  // weight (K, C, R, S) -> (R S, C, Kp); the channels past K are zero.
  const int64_t C = g.Cin, K = g.Kout, taps = g.R * g.S, Kp = round_up(K, set.block_channels);
  std::vector<float> packed(static_cast<size_t>(taps * C * Kp), 0.0f);
#pragma omp parallel for schedule(static) if (taps * C * K >= 16384)
  for (int64_t c = 0; c < C; ++c)
    for (int64_t t = 0; t < taps; ++t)
      for (int64_t k = 0; k < K; ++k)
        packed[static_cast<size_t>((t * C + c) * Kp + k)] =
            static_cast<float>(weight[(k * C + c) * taps + t]);
  const std::vector<float> b = bias_in_f32(bias, K);
  run(g, set, p.batch, input, packed.data(), Kp, bias != nullptr ? b.data() : nullptr, output);
}

template <typename T>
void conv2d_small_grad_input(const Conv2dParams& p, const T* grad_output, const T* weight,
                             T* grad_input) {
  // The convolution of grad_output with the weights flipped and transposed
  // (StrideOneConv::grad_input): weight (K, C, R, S) -> (R S, K, Cp), flipped in r and s; the
  // channels past C are zero.
  const StrideOneConv g = StrideOneConv::grad_input(p);
  const KernelSet& set = kernels();
  const int64_t C = p.in_channels, K = p.out_channels, R = g.R, S = g.S;
  const int64_t Cp = round_up(C, set.block_channels);
  std::vector<float> packed(static_cast<size_t>(R * S * K * Cp), 0.0f);
#pragma omp parallel for schedule(static) if (R * S * K * C >= 16384)
  for (int64_t k = 0; k < K; ++k)
    for (int64_t r = 0; r < R; ++r)
      for (int64_t s = 0; s < S; ++s)
        for (int64_t c = 0; c < C; ++c)
          packed[static_cast<size_t>(((r * S + s) * K + k) * Cp + c)] =
              static_cast<float>(weight[((k * C + c) * R + (R - 1 - r)) * S + (S - 1 - s)]);
  run(g, set, p.batch, grad_output, packed.data(), Cp, nullptr, grad_input);
}

template <typename T>
void conv2d_small_grad_weight(const Conv2dParams& p, const T* input, const T* grad_output,
                              T* grad_weight) {
  const StrideOneConv g = StrideOneConv::forward(p);
  const KernelSet& set = kernels();
  const int64_t C = g.Cin, K = g.Kout, R = g.R, S = g.S, block = set.block_channels;
  const int64_t Kp = round_up(K, block), blocks = Kp / block;
  const int64_t pairs = round_up(S * C, kWeightPairs);
  const int64_t image_pixels = g.P * g.Q, padded_image = g.Hp * g.Wp * C;
  const int64_t in_image = C * g.H * g.W, out_image = K * image_pixels;
  const AlignedFloats acc(R * pairs * Kp, true);  // (R, pairs, Kp)
  if (p.batch > 0) {
    const int64_t chunk =
        std::clamp<int64_t>(kChunkFloats / (padded_image + image_pixels * Kp), 1, p.batch);
    const int64_t chunk_pixels = chunk * image_pixels;
    // xp (chunk, Hp, Wp, C) and zeroed slack for the pairs past S C; dy (blocks, chunk P Q,
    // block), the channels past K zero. Both are written before they are read.
    const AlignedFloats xp(chunk * padded_image + kWeightPairs, false);
    std::fill(xp.get() + chunk * padded_image, xp.get() + chunk * padded_image + kWeightPairs,
              0.0f);
    const AlignedFloats dy(chunk_pixels * Kp, false);
    std::vector<int64_t> corners(static_cast<size_t>(chunk_pixels));
    for (int64_t i = 0; i < chunk_pixels; ++i) {
      const int64_t image = i / image_pixels, within = i % image_pixels;
      corners[static_cast<size_t>(i)] = ((image * g.Hp + within / g.Q) * g.Wp + within % g.Q) * C;
    }
    const int threads = omp_get_max_threads();
    const int64_t items = R * blocks * (pairs / kWeightPairs);
    for (int64_t first_image = 0; first_image < p.batch; first_image += chunk) {
      const int64_t images = std::min(chunk, p.batch - first_image), pixels = images * image_pixels;
      copy_channels_last(g, images, input + first_image * in_image, xp.get());
      // grad_output (images, K, P Q) -> dy (blocks, pixels, block)
#pragma omp parallel num_threads(threads) if (threads > 1 && images > 1)
      {
        std::vector<float> widened(std::is_same_v<T, float> ? 0 : static_cast<size_t>(out_image));
#pragma omp for schedule(static)
        for (int64_t n = 0; n < images; ++n) {
          const float* planes = accumulate_run(grad_output + (first_image + n) * out_image,
                                               widened.data(), out_image);
          for (int64_t k = 0; k < Kp; ++k) {
            float* to = dy.get() + ((k / block) * pixels + n * image_pixels) * block + k % block;
            for (int64_t i = 0; i < image_pixels; ++i)
              to[i * block] = k < K ? planes[k * image_pixels + i] : 0.0f;
          }
        }
      }
      // Each thread a fixed range of items, each summed over the chunk's pixels in order: every
      // sum has one order whatever the thread count.
#pragma omp parallel num_threads(threads) if (threads > 1)
      {
        const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
        const WeightArgs args{.xp = xp.get(),
                              .dy = dy.get(),
                              .acc = acc.get(),
                              .corners = corners.data(),
                              .pixels = pixels,
                              .Kp = Kp,
                              .row = g.Wp * C,
                              .pairs = pairs,
                              .item_begin = items * t / nt,
                              .item_end = items * (t + 1) / nt};
        set.weight_fn(args);
      }
    }
  }
  // acc (R, pairs, Kp) -> grad_weight (K, C, R, S)
#pragma omp parallel for schedule(static) if (K * C * R * S >= 16384)
  for (int64_t k = 0; k < K; ++k)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t r = 0; r < R; ++r)
        for (int64_t s = 0; s < S; ++s)
          grad_weight[((k * C + c) * R + r) * S + s] =
              T(acc.get()[(r * pairs + s * C + c) * Kp + k]);
}

bool set_conv2d_small_isa(DirectConvIsa isa) {
  const KernelSet* set = kernels_for(isa);
  if (set == nullptr) return false;
  g_kernels.store(set, std::memory_order_relaxed);
  return true;
}

#define EMBER_INSTANTIATE_CONV2D_SMALL(T)                                                       \
  template void conv2d_small_forward<T>(const Conv2dParams&, const T*, const T*, const T*, T*); \
  template void conv2d_small_grad_input<T>(const Conv2dParams&, const T*, const T*, T*);        \
  template void conv2d_small_grad_weight<T>(const Conv2dParams&, const T*, const T*, T*);
EMBER_INSTANTIATE_CONV2D_SMALL(float)
EMBER_INSTANTIATE_CONV2D_SMALL(Half)
EMBER_INSTANTIATE_CONV2D_SMALL(BFloat16)
#undef EMBER_INSTANTIATE_CONV2D_SMALL

}  // namespace ember::kernels::cpu
