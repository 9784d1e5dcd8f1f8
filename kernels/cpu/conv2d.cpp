#include "kernels/cpu/conv2d.h"

#include <omp.h>

#include <algorithm>
#include <climits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/common/convert.h"
#include "kernels/common/scalar_types.h"
#include "kernels/cpu/conv2d_direct.h"
#include "kernels/cpu/conv2d_small.h"
#include "kernels/cpu/convert_runs.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/run_sums.h"

namespace ember::kernels::cpu {

namespace {

// The type the columns and the GEMM use: f32 for the 16-bit floats.
template <typename T>
using compute_t = std::conditional_t<is_reduced_float_v<T>, float, T>;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Sizes derived once from the parameters.
struct Geometry {
  int64_t C, H, W, K, R, S, P, Q, G;
  int64_t group_channels;  // C / G
  int64_t group_filters;   // K / G
  int64_t group_cols;      // C / G * R * S: the rows of one group's columns
  int64_t plane;           // P Q
  int64_t image;           // C H W
  int64_t image_out;       // K P Q
  bool columns_are_input;  // 1x1, stride 1, no padding: the image is its own columns

  explicit Geometry(const Conv2dParams& p)
      : C(p.in_channels),
        H(p.in_height),
        W(p.in_width),
        K(p.out_channels),
        R(p.kernel_height),
        S(p.kernel_width),
        P(p.out_height()),
        Q(p.out_width()),
        G(p.groups) {
    group_channels = C / G;
    group_filters = K / G;
    group_cols = group_channels * R * S;
    plane = P * Q;
    image = C * H * W;
    image_out = K * plane;
    columns_are_input =
        R == 1 && S == 1 && p.stride_h == 1 && p.stride_w == 1 && p.pad_h == 0 && p.pad_w == 0;
    for (int64_t size : {plane, group_cols, group_filters}) {
      if (size > INT_MAX)
        throw std::invalid_argument("conv2d: a GEMM dimension exceeds OpenBLAS's 32-bit sizes");
    }
  }
};

// For row r (kernel column s) of the columns: the output columns q whose input column
// q stride - pad + s dilation lies inside [0, W): [q_begin, q_end).
struct ColumnRange {
  int64_t offset;  // input column of q = 0
  int64_t q_begin, q_end;
};

ColumnRange valid_columns(const Conv2dParams& p, const Geometry& g, int64_t s) {
  const int64_t offset = s * p.dilation_w - p.pad_w;
  const int64_t begin = std::min(g.Q, offset >= 0 ? 0 : ceil_div(-offset, p.stride_w));
  const int64_t end = std::clamp(ceil_div(g.W - offset, p.stride_w), begin, g.Q);
  return {offset, begin, end};
}

// A band of output rows [row_begin, row_end): the columns are unfolded one band at a time so
// that they stay in the core's L2 cache between the unfolding and the GEMM that reads them.
struct RowBand {
  int64_t row_begin, row_end;
  int64_t pixels(int64_t Q) const { return (row_end - row_begin) * Q; }
};

// Output rows per band: the band's columns (C R S, rows Q) should take about kBandBytes.
constexpr int64_t kBandBytes = 256 * 1024;
template <typename Acc>
int64_t rows_per_band(const Geometry& g, bool whole_image) {
  if (whole_image) return std::max<int64_t>(1, g.P);
  const int64_t row_bytes = g.C * g.R * g.S * g.Q * static_cast<int64_t>(sizeof(Acc));
  return std::clamp<int64_t>(kBandBytes / std::max<int64_t>(1, row_bytes), 1, g.P);
}

// image (C, H, W), channels [c_begin, c_end) -> their rows of cols (C R S, band pixels).
// `ld`: the row length of cols (the band's pixels, or more when images sit side by side).
template <typename T, typename Acc>
void im2col(const Conv2dParams& p, const Geometry& g, const T* image, Acc* cols, int64_t ld,
            RowBand band, int64_t c_begin, int64_t c_end) {
  for (int64_t c = c_begin; c < c_end; ++c) {
    for (int64_t r = 0; r < g.R; ++r) {
      for (int64_t s = 0; s < g.S; ++s) {
        Acc* row = cols + ((c * g.R + r) * g.S + s) * ld;
        const ColumnRange range = valid_columns(p, g, s);
        for (int64_t out_h = band.row_begin; out_h < band.row_end; ++out_h) {
          Acc* dst = row + (out_h - band.row_begin) * g.Q;
          const int64_t in_h = out_h * p.stride_h - p.pad_h + r * p.dilation_h;
          if (in_h < 0 || in_h >= g.H) {
            std::fill(dst, dst + g.Q, Acc(0));
            continue;
          }
          const T* src = image + (c * g.H + in_h) * g.W;
          std::fill(dst, dst + range.q_begin, Acc(0));
          if (p.stride_w == 1) {
            const T* shifted = src + range.offset + range.q_begin;
            Acc* out = dst + range.q_begin;
            for (int64_t i = 0; i < range.q_end - range.q_begin; ++i)
              out[i] = static_cast<Acc>(shifted[i]);
          } else {
            for (int64_t q = range.q_begin; q < range.q_end; ++q)
              dst[q] = static_cast<Acc>(src[range.offset + q * p.stride_w]);
          }
          std::fill(dst + range.q_end, dst + g.Q, Acc(0));
        }
      }
    }
  }
}

// The adjoint of im2col: adds the band's cols (C R S, band pixels), channels [c_begin, c_end),
// into image (C, H, W). Channels own disjoint planes: safe to split by channel.
template <typename Acc>
void col2im(const Conv2dParams& p, const Geometry& g, const Acc* cols, int64_t ld, Acc* image,
            RowBand band, int64_t c_begin, int64_t c_end) {
  for (int64_t c = c_begin; c < c_end; ++c) {
    for (int64_t r = 0; r < g.R; ++r) {
      for (int64_t s = 0; s < g.S; ++s) {
        const Acc* row = cols + ((c * g.R + r) * g.S + s) * ld;
        const ColumnRange range = valid_columns(p, g, s);
        for (int64_t out_h = band.row_begin; out_h < band.row_end; ++out_h) {
          const int64_t in_h = out_h * p.stride_h - p.pad_h + r * p.dilation_h;
          if (in_h < 0 || in_h >= g.H) continue;
          const Acc* src = row + (out_h - band.row_begin) * g.Q;
          Acc* dst = image + (c * g.H + in_h) * g.W;
          if (p.stride_w == 1) {
            Acc* shifted = dst + range.offset + range.q_begin;
            const Acc* from = src + range.q_begin;
            for (int64_t i = 0; i < range.q_end - range.q_begin; ++i)
              shifted[i] += from[i];
          } else {
            for (int64_t q = range.q_begin; q < range.q_end; ++q)
              dst[range.offset + q * p.stride_w] += src[q];
          }
        }
      }
    }
  }
}

// Runs body(c_begin, c_end) over channels: split across threads when `parallel`.
template <typename Body>
void over_channels(int64_t channels, bool parallel, Body body) {
  if (!parallel) {
    body(0, channels);
    return;
  }
#pragma omp parallel
  {
    const int64_t t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t chunk = ceil_div(channels, nt);
    const int64_t begin = std::min(channels, t * chunk), end = std::min(channels, begin + chunk);
    if (begin < end) body(begin, end);
  }
}

// Whole images to threads when there are enough of them (single-threaded GEMMs, see the
// header); otherwise one image after another with parallel unfolding and threaded GEMMs.
// body(n, workspace_index, parallel_inside) ; returns the number of workspaces used.
template <typename Body>
int over_images(int64_t batch, Body body) {
  const int threads = omp_get_max_threads();
  if (threads > 1 && batch >= threads) {
#pragma omp parallel num_threads(threads)
    {
      const int t = omp_get_thread_num();
#pragma omp for schedule(static)
      for (int64_t n = 0; n < batch; ++n)
        body(n, t, false);
    }
    return threads;
  }
  for (int64_t n = 0; n < batch; ++n)
    body(n, 0, threads > 1);
  return 1;
}

int workspaces_for(int64_t batch) {
  const int threads = omp_get_max_threads();
  return threads > 1 && batch >= threads ? threads : 1;
}

// grad_weight[0 .. size) = the sum of the workspaces' partial grad_weight, added in workspace
// (thread) order: the result does not depend on timing.
template <typename Workspace, typename T>
void write_grad_weight(const std::vector<Workspace>& spaces, T* grad_weight, int64_t size) {
  using Acc = typename decltype(Workspace::grad_weight)::value_type;
  for (int64_t i = 0; i < size; ++i) {
    Acc total = 0;
    for (const Workspace& space : spaces)
      total += space.grad_weight[static_cast<size_t>(i)];
    grad_weight[i] = T(total);
  }
}

template <typename T, typename Acc>
const Acc* weights_in_compute_type(const T* weight, int64_t count, std::vector<Acc>& storage) {
  if constexpr (std::is_same_v<T, Acc>) {
    return weight;
  } else {
    storage.resize(static_cast<size_t>(count));
    for (int64_t i = 0; i < count; ++i)
      storage[static_cast<size_t>(i)] = static_cast<Acc>(weight[i]);
    return storage.data();
  }
}

// ---- small images: several images per GEMM ------------------------------------------------
// An image of P Q = 16 or 64 pixels makes a GEMM with 16 or 64 columns, which OpenBLAS runs far
// below peak (it packs the whole weight matrix for each call). Below kGroupPixels pixels the
// images are taken B at a time: their columns sit side by side in cols (C R S, B P Q), one GEMM
// per group of images gives out (K, B P Q), scattered back into NCHW. Each thread takes whole
// image groups with single-threaded GEMMs, as with whole images.
constexpr int64_t kGroupPixels = 512;         // columns per GEMM aimed at
constexpr int64_t kGroupBytes = 1024 * 1024;  // the unfolded columns should stay near L2

// Images per group: 1 (the per-image path) when an image is wide enough on its own.
template <typename Acc>
int64_t images_per_group(const Conv2dParams& p, const Geometry& g) {
  // (The tap table holds input offsets as int32.)
  if (g.plane * 2 > kGroupPixels || p.batch < 2 || g.H * g.W > INT32_MAX) return 1;
  const int64_t image_bytes = g.group_cols * g.G * g.plane * static_cast<int64_t>(sizeof(Acc));
  const int64_t by_bytes = kGroupBytes / std::max<int64_t>(1, image_bytes);
  const int64_t by_pixels = ceil_div(kGroupPixels, std::max<int64_t>(1, g.plane));
  // At least one group per thread, so that no thread idles.
  const int64_t per_thread = ceil_div(p.batch, omp_get_max_threads());
  return std::clamp<int64_t>(std::min({by_bytes, by_pixels, per_thread}), 1, p.batch);
}

// Runs body(first_image, images, thread) over the groups of `per_group` images, whole groups
// to each thread in a fixed (static) order.
template <typename Body>
void over_image_groups(int64_t batch, int64_t per_group, Body body) {
  const int64_t groups = ceil_div(batch, per_group);
  const int threads = static_cast<int>(std::min<int64_t>(omp_get_max_threads(), groups));
#pragma omp parallel num_threads(threads) if (threads > 1)
  {
    const int t = omp_get_thread_num();
#pragma omp for schedule(static)
    for (int64_t group = 0; group < groups; ++group) {
      const int64_t first = group * per_group;
      body(first, std::min(per_group, batch - first), t);
    }
  }
}

int threads_for_groups(int64_t batch, int64_t per_group) {
  return static_cast<int>(std::min<int64_t>(omp_get_max_threads(), ceil_div(batch, per_group)));
}

// For small images: the input each entry of one channel's columns (R S, P Q) reads, as an
// offset into the channel's (H, W) plane, or -1 for padding. Built once per call, it replaces
// the per-row range arithmetic of im2col, which dominates at a few pixels per row.
std::vector<int32_t> tap_sources(const Conv2dParams& p, const Geometry& g) {
  std::vector<int32_t> sources(static_cast<size_t>(g.R * g.S * g.plane));
  int32_t* to = sources.data();
  for (int64_t r = 0; r < g.R; ++r)
    for (int64_t s = 0; s < g.S; ++s)
      for (int64_t out_h = 0; out_h < g.P; ++out_h)
        for (int64_t out_w = 0; out_w < g.Q; ++out_w) {
          const int64_t in_h = out_h * p.stride_h - p.pad_h + r * p.dilation_h;
          const int64_t in_w = out_w * p.stride_w - p.pad_w + s * p.dilation_w;
          const bool inside = in_h >= 0 && in_h < g.H && in_w >= 0 && in_w < g.W;
          *to++ = inside ? static_cast<int32_t>(in_h * g.W + in_w) : -1;
        }
  return sources;
}

// Where stride and dilation are 1 along the rows and the output rows are as wide as the input's
// ("same" padding, resnet9's 3x3 pad 1), every tap's columns are the plane moved by one offset:
// sources[t][i] is -1 (padding) or i + shift[t]. im2col then reads a copy of the plane with
// zeros around it, `bordered`, at one contiguous offset per tap and selects, which vectorises;
// the general path gathers one element at a time (16% of the 4x4 weight gradient's time).
struct TapShifts {
  std::vector<int64_t> shift;  // per tap; empty when some tap is not a shift
  int64_t before = 0;          // zeros in front of the plane in `bordered`
  int64_t size = 0;            // of `bordered`: zeros, the plane (H W), zeros
};

TapShifts tap_shifts(const Geometry& g, const std::vector<int32_t>& sources) {
  TapShifts taps;
  const int64_t rows = g.R * g.S;
  taps.shift.assign(static_cast<size_t>(rows), 0);
  int64_t lowest = 0, highest = g.H * g.W;  // the indices read: [lowest, highest)
  for (int64_t t = 0; t < rows; ++t) {
    const int32_t* from = sources.data() + t * g.plane;
    const int32_t* first = std::find_if(from, from + g.plane, [](int32_t i) { return i >= 0; });
    const int64_t shift = first == from + g.plane ? 0 : *first - (first - from);
    for (int64_t i = 0; i < g.plane; ++i)
      if (from[i] >= 0 && from[i] != i + shift) return {};
    taps.shift[static_cast<size_t>(t)] = shift;
    lowest = std::min(lowest, shift);
    highest = std::max(highest, g.plane + shift);
  }
  taps.before = -lowest;
  taps.size = highest - lowest;
  return taps;
}

// The images [first, first + count) unfolded side by side: cols (C R S, count P Q). A 16-bit
// plane is widened once (into a buffer of H W) rather than at each of its R S taps.
template <typename T, typename Acc>
void im2col_images(const Geometry& g, const int32_t* sources, const TapShifts& taps, const T* input,
                   int64_t first, int64_t count, Acc* cols) {
  const int64_t ld = count * g.plane, rows = g.R * g.S, channel = g.H * g.W;
  if (!taps.shift.empty()) {
    std::vector<Acc> bordered(static_cast<size_t>(taps.size), Acc(0));
    Acc* plane = bordered.data() + taps.before;
    for (int64_t b = 0; b < count; ++b) {
      const T* image = input + (first + b) * g.image;
      for (int64_t c = 0; c < g.C; ++c) {
        if constexpr (std::is_same_v<T, Acc>) {
          std::copy(image + c * channel, image + (c + 1) * channel, plane);
        } else {
          widen_to_f32(image + c * channel, plane, channel);
        }
        for (int64_t t = 0; t < rows; ++t) {
          const int32_t* keep = sources + t * g.plane;
          const Acc* from = plane + taps.shift[static_cast<size_t>(t)];
          Acc* to = cols + (c * rows + t) * ld + b * g.plane;
          for (int64_t i = 0; i < g.plane; ++i) {
            const Acc value = from[i];  // read whether kept or not: the select vectorises
            to[i] = keep[i] >= 0 ? value : Acc(0);
          }
        }
      }
    }
    return;
  }
  std::vector<Acc> widened(std::is_same_v<T, Acc> ? 0 : static_cast<size_t>(channel));
  for (int64_t b = 0; b < count; ++b) {
    const T* image = input + (first + b) * g.image;
    for (int64_t c = 0; c < g.C; ++c) {
      const Acc* plane = accumulate_run(image + c * channel, widened.data(), channel);
      for (int64_t t = 0; t < rows; ++t) {
        const int32_t* from = sources + t * g.plane;
        Acc* to = cols + (c * rows + t) * ld + b * g.plane;
        for (int64_t i = 0; i < g.plane; ++i)
          to[i] = from[i] >= 0 ? plane[from[i]] : Acc(0);
      }
    }
  }
}

// The adjoint for image b of the group: adds its columns into dx (C, H, W).
template <typename Acc>
void col2im_image(const Geometry& g, const int32_t* sources, const Acc* cols, int64_t ld, Acc* dx) {
  const int64_t rows = g.R * g.S, channel = g.H * g.W;
  for (int64_t c = 0; c < g.C; ++c) {
    Acc* plane = dx + c * channel;
    for (int64_t t = 0; t < rows; ++t) {
      const int32_t* to = sources + t * g.plane;
      const Acc* from = cols + (c * rows + t) * ld;
      for (int64_t i = 0; i < g.plane; ++i)
        if (to[i] >= 0) plane[to[i]] += from[i];
    }
  }
}

template <typename T, typename Acc>
void forward_image_groups(const Conv2dParams& p, const Geometry& g, int64_t per_group,
                          const T* input, const Acc* w, const T* bias, T* output) {
  const int threads = threads_for_groups(p.batch, per_group);
  const int64_t max_width = per_group * g.plane;
  const std::vector<int32_t> sources = tap_sources(p, g);
  const TapShifts taps = tap_shifts(g, sources);
  struct Workspace {
    std::vector<Acc> cols, out;
  };
  std::vector<Workspace> spaces(static_cast<size_t>(threads));
  for (Workspace& space : spaces) {
    space.cols.resize(static_cast<size_t>(g.group_cols * g.G * max_width));
    space.out.resize(static_cast<size_t>(g.K * max_width));
  }
  over_image_groups(p.batch, per_group, [&](int64_t first, int64_t count, int t) {
    Workspace& space = spaces[static_cast<size_t>(t)];
    const int64_t width = count * g.plane;
    im2col_images(g, sources.data(), taps, input, first, count, space.cols.data());
    for (int64_t group = 0; group < g.G; ++group) {
      // (K/G, C/G R S) @ (C/G R S, B P Q) -> out (K/G, B P Q)
      const GemmShape shape{false,        false,        g.group_filters, width,
                            g.group_cols, g.group_cols, width,           width};
      gemm<Acc>(shape, 1.0f, w + group * g.group_filters * g.group_cols,
                space.cols.data() + group * g.group_cols * width, 0.0f,
                space.out.data() + group * g.group_filters * width);
    }
    // out (K, B, P Q) -> output (B, K, P Q), plus the bias.
    for (int64_t b = 0; b < count; ++b) {
      T* dst = output + (first + b) * g.image_out;
      for (int64_t k = 0; k < g.K; ++k) {
        const Acc add = bias != nullptr ? static_cast<Acc>(bias[k]) : Acc(0);
        store_plus_bias(space.out.data() + k * width + b * g.plane,
                        bias != nullptr ? &add : nullptr, dst + k * g.plane, g.plane);
      }
    }
  });
}

template <typename T, typename Acc>
void backward_image_groups(const Conv2dParams& p, const Geometry& g, int64_t per_group,
                           const T* input, const Acc* w, const T* grad_output, T* grad_input,
                           T* grad_weight) {
  const int threads = threads_for_groups(p.batch, per_group);
  const int64_t max_width = per_group * g.plane, cols_size = g.group_cols * g.G * max_width;
  const int64_t weight_size = g.K * g.group_cols;
  const std::vector<int32_t> sources = tap_sources(p, g);
  const TapShifts taps = tap_shifts(g, sources);
  struct Workspace {
    std::vector<Acc> cols, grad_cols, grad_image, dy, grad_weight;
  };
  std::vector<Workspace> spaces(static_cast<size_t>(threads));
  for (Workspace& space : spaces) {
    space.dy.resize(static_cast<size_t>(g.K * max_width));
    if (grad_weight != nullptr) {
      space.cols.resize(static_cast<size_t>(cols_size));
      space.grad_weight.assign(static_cast<size_t>(weight_size), Acc(0));
    }
    if (grad_input != nullptr) {
      space.grad_cols.resize(static_cast<size_t>(cols_size));
      if constexpr (!std::is_same_v<T, Acc>) space.grad_image.resize(static_cast<size_t>(g.image));
    }
  }
  over_image_groups(p.batch, per_group, [&](int64_t first, int64_t count, int t) {
    Workspace& space = spaces[static_cast<size_t>(t)];
    const int64_t width = count * g.plane;
    // grad_output (B, K, P Q) -> dy (K, B P Q)
    for (int64_t b = 0; b < count; ++b) {
      const T* src = grad_output + (first + b) * g.image_out;
      for (int64_t k = 0; k < g.K; ++k) {
        Acc* to = space.dy.data() + k * width + b * g.plane;
        if constexpr (is_reduced_float_v<T>) {
          widen_to_f32(src + k * g.plane, to, g.plane);
        } else {
          std::copy(src + k * g.plane, src + (k + 1) * g.plane, to);
        }
      }
    }
    if (grad_weight != nullptr) {
      im2col_images(g, sources.data(), taps, input, first, count, space.cols.data());
      for (int64_t group = 0; group < g.G; ++group) {
        // grad_weight_g (K/G, C/G R S) += dy_g (K/G, B P Q) @ cols_g^T (B P Q, C/G R S)
        const GemmShape shape{false, true,  g.group_filters, g.group_cols,
                              width, width, width,           g.group_cols};
        gemm<Acc>(shape, 1.0f, space.dy.data() + group * g.group_filters * width,
                  space.cols.data() + group * g.group_cols * width, 1.0f,
                  space.grad_weight.data() + group * g.group_filters * g.group_cols);
      }
    }
    if (grad_input != nullptr) {
      for (int64_t group = 0; group < g.G; ++group) {
        // grad_cols_g (C/G R S, B P Q) = W_g^T (C/G R S, K/G) @ dy_g (K/G, B P Q)
        const GemmShape shape{true,         false, g.group_cols, width, g.group_filters,
                              g.group_cols, width, width};
        gemm<Acc>(shape, 1.0f, w + group * g.group_filters * g.group_cols,
                  space.dy.data() + group * g.group_filters * width, 0.0f,
                  space.grad_cols.data() + group * g.group_cols * width);
      }
      for (int64_t b = 0; b < count; ++b) {
        T* dst = grad_input + (first + b) * g.image;
        Acc* dx;
        if constexpr (std::is_same_v<T, Acc>) {
          dx = dst;
        } else {
          dx = space.grad_image.data();
        }
        std::fill(dx, dx + g.image, Acc(0));
        col2im_image(g, sources.data(), space.grad_cols.data() + b * g.plane, width, dx);
        if constexpr (!std::is_same_v<T, Acc>) narrow_from_f32(dx, dst, g.image);
      }
    }
  });
  if (grad_weight != nullptr) write_grad_weight(spaces, grad_weight, weight_size);
}

}  // namespace

template <typename T>
void conv2d_forward(const Conv2dParams& p, const T* input, const T* weight, const T* bias,
                    T* output) {
  using Acc = compute_t<T>;
  constexpr bool direct = std::is_same_v<T, Acc>;
  const Geometry g(p);
  if (p.batch == 0 || g.image_out == 0) return;
  if constexpr (!std::is_same_v<T, double>) {  // f64 is the reference precision: kept on BLAS
    if (conv2d_small_applies(p)) {
      conv2d_small_forward(p, input, weight, bias, output);
      return;
    }
    if (conv2d_direct_applies(p)) {
      conv2d_direct_forward(p, input, weight, bias, output);
      return;
    }
  }
  std::vector<Acc> weight_storage;
  const Acc* w = weights_in_compute_type(weight, g.K * g.group_cols, weight_storage);
  if (const int64_t per_group = images_per_group<Acc>(p, g); per_group > 1) {
    forward_image_groups(p, g, per_group, input, w, bias, output);
    return;
  }

  const int workspaces = workspaces_for(p.batch);
  const bool image_per_thread = workspaces > 1;
  const int64_t band_rows = rows_per_band<Acc>(g, !image_per_thread);
  const bool unfold = !(direct && g.columns_are_input);
  struct Workspace {
    std::vector<Acc> cols, out;
  };
  std::vector<Workspace> spaces(static_cast<size_t>(workspaces));
  for (Workspace& space : spaces) {
    if (unfold) space.cols.resize(static_cast<size_t>(g.group_cols * g.G * band_rows * g.Q));
    if (!direct) space.out.resize(static_cast<size_t>(g.image_out));
  }

  over_images(p.batch, [&](int64_t n, int t, bool parallel_inside) {
    Workspace& space = spaces[static_cast<size_t>(t)];
    const T* image = input + n * g.image;
    Acc* out = direct ? reinterpret_cast<Acc*>(output + n * g.image_out) : space.out.data();
    if (bias != nullptr) {
      // Start from the bias and let the GEMM accumulate onto it (beta = 1).
      for (int64_t k = 0; k < g.K; ++k)
        std::fill(out + k * g.plane, out + (k + 1) * g.plane, static_cast<Acc>(bias[k]));
    }
    for (int64_t row = 0; row < g.P; row += band_rows) {
      const RowBand band{row, std::min(g.P, row + band_rows)};
      const int64_t width = band.pixels(g.Q);
      const Acc* cols;
      if (unfold) {
        over_channels(g.C, parallel_inside, [&](int64_t begin, int64_t end) {
          im2col(p, g, image, space.cols.data(), width, band, begin, end);
        });
        cols = space.cols.data();
      } else {
        cols = reinterpret_cast<const Acc*>(image) + band.row_begin * g.Q;  // 1x1: ld = P Q
      }
      const int64_t ld_cols = unfold ? width : g.plane;
      for (int64_t group = 0; group < g.G; ++group) {
        // (K/G, C/G R S) @ (C/G R S, band) -> the band's columns of out (K/G, P Q)
        const GemmShape shape{false,        false,        g.group_filters, width,
                              g.group_cols, g.group_cols, ld_cols,         g.plane};
        gemm<Acc>(shape, 1.0f, w + group * g.group_filters * g.group_cols,
                  cols + group * g.group_cols * ld_cols, bias != nullptr ? 1.0f : 0.0f,
                  out + group * g.group_filters * g.plane + band.row_begin * g.Q);
      }
    }
    if constexpr (!direct) {
      narrow_from_f32(out, output + n * g.image_out, g.image_out);
    }
  });
}

template <typename T>
void conv2d_backward(const Conv2dParams& p, const T* input, const T* weight, const T* grad_output,
                     T* grad_input, T* grad_weight, T* grad_bias) {
  using Acc = compute_t<T>;
  constexpr bool direct = std::is_same_v<T, Acc>;
  const Geometry g(p);
  const int64_t weight_size = g.K * g.group_cols;

  if (grad_bias != nullptr) {
    // grad_bias[k] = sum over n, p, q of grad_output: summed in f64 (N P Q terms).
#pragma omp parallel for schedule(static)
    for (int64_t k = 0; k < g.K; ++k) {
      double total = 0.0;
      for (int64_t n = 0; n < p.batch; ++n) {
        total += static_cast<double>(sum_run(grad_output + n * g.image_out + k * g.plane, g.plane));
      }
      grad_bias[k] = convert<T>(total);
    }
  }
  if (grad_input == nullptr && grad_weight == nullptr) return;
  if (p.batch == 0 || g.image_out == 0) {
    if (grad_input != nullptr) std::fill(grad_input, grad_input + p.batch * g.image, T(0));
    if (grad_weight != nullptr) std::fill(grad_weight, grad_weight + weight_size, T(0));
    return;
  }
  if constexpr (!std::is_same_v<T, double>) {
    if (grad_input != nullptr && conv2d_small_applies_to_grad_input(p)) {
      conv2d_small_grad_input(p, grad_output, weight, grad_input);
      grad_input = nullptr;  // the paths below compute grad_weight alone
    } else if (grad_input != nullptr && conv2d_direct_applies_to_grad_input(p)) {
      conv2d_direct_grad_input(p, grad_output, weight, grad_input);
      grad_input = nullptr;
    }
    if (grad_weight != nullptr && conv2d_small_applies_to_grad_weight(p)) {
      conv2d_small_grad_weight(p, input, grad_output, grad_weight);
      grad_weight = nullptr;
    } else if (grad_weight != nullptr && conv2d_direct_applies_to_grad_weight(p)) {
      conv2d_direct_grad_weight(p, input, grad_output, grad_weight);
      grad_weight = nullptr;
    }
    if (grad_input == nullptr && grad_weight == nullptr) return;
  }
  std::vector<Acc> weight_storage;
  const Acc* w = weights_in_compute_type(weight, weight_size, weight_storage);
  if (const int64_t per_group = images_per_group<Acc>(p, g); per_group > 1) {
    backward_image_groups(p, g, per_group, input, w, grad_output, grad_input, grad_weight);
    return;
  }

  const int workspaces = workspaces_for(p.batch);
  const bool image_per_thread = workspaces > 1;
  const int64_t band_rows = rows_per_band<Acc>(g, !image_per_thread);
  const int64_t band_cols_size = g.group_cols * g.G * band_rows * g.Q;
  struct Workspace {
    std::vector<Acc> cols, grad_cols, grad_image, grad_out, grad_weight;
  };
  std::vector<Workspace> spaces(static_cast<size_t>(workspaces));
  for (Workspace& space : spaces) {
    if (grad_weight != nullptr) {
      space.cols.resize(static_cast<size_t>(band_cols_size));
      space.grad_weight.assign(static_cast<size_t>(weight_size), Acc(0));
    }
    if (grad_input != nullptr) {
      space.grad_cols.resize(static_cast<size_t>(band_cols_size));
      if (!direct) space.grad_image.resize(static_cast<size_t>(g.image));
    }
    if (!direct) space.grad_out.resize(static_cast<size_t>(g.image_out));
  }

  over_images(p.batch, [&](int64_t n, int t, bool parallel_inside) {
    Workspace& space = spaces[static_cast<size_t>(t)];
    const Acc* dy;  // this image's grad_output (K, P Q)
    if constexpr (direct) {
      dy = grad_output + n * g.image_out;
    } else {
      widen_to_f32(grad_output + n * g.image_out, space.grad_out.data(), g.image_out);
      dy = space.grad_out.data();
    }
    Acc* dx = nullptr;
    if (grad_input != nullptr) {
      dx = direct ? reinterpret_cast<Acc*>(grad_input + n * g.image) : space.grad_image.data();
      over_channels(g.C, parallel_inside, [&](int64_t begin, int64_t end) {
        std::fill(dx + begin * g.H * g.W, dx + end * g.H * g.W, Acc(0));
      });
    }
    for (int64_t row = 0; row < g.P; row += band_rows) {
      const RowBand band{row, std::min(g.P, row + band_rows)};
      const int64_t width = band.pixels(g.Q);
      const Acc* dy_band = dy + band.row_begin * g.Q;  // (K, band) with ld = P Q
      if (grad_weight != nullptr) {
        over_channels(g.C, parallel_inside, [&](int64_t begin, int64_t end) {
          im2col(p, g, input + n * g.image, space.cols.data(), width, band, begin, end);
        });
        for (int64_t group = 0; group < g.G; ++group) {
          // grad_weight_g (K/G, C/G R S) += dy_g (K/G, band) @ cols_g^T (band, C/G R S)
          const GemmShape shape{false, true,    g.group_filters, g.group_cols,
                                width, g.plane, width,           g.group_cols};
          gemm<Acc>(shape, 1.0f, dy_band + group * g.group_filters * g.plane,
                    space.cols.data() + group * g.group_cols * width, 1.0f,
                    space.grad_weight.data() + group * g.group_filters * g.group_cols);
        }
      }
      if (grad_input != nullptr) {
        for (int64_t group = 0; group < g.G; ++group) {
          // grad_cols_g (C/G R S, band) = W_g^T (C/G R S, K/G) @ dy_g (K/G, band)
          const GemmShape shape{true,         false,   g.group_cols, width, g.group_filters,
                                g.group_cols, g.plane, width};
          gemm<Acc>(shape, 1.0f, w + group * g.group_filters * g.group_cols,
                    dy_band + group * g.group_filters * g.plane, 0.0f,
                    space.grad_cols.data() + group * g.group_cols * width);
        }
        over_channels(g.C, parallel_inside, [&](int64_t begin, int64_t end) {
          col2im(p, g, space.grad_cols.data(), width, dx, band, begin, end);
        });
      }
    }
    if constexpr (!direct) {
      if (grad_input != nullptr) {
        narrow_from_f32(dx, grad_input + n * g.image, g.image);
      }
    }
  });

  if (grad_weight != nullptr) write_grad_weight(spaces, grad_weight, weight_size);
}

int64_t conv2d_images_per_gemm(const Conv2dParams& params) {
  return images_per_group<float>(params, Geometry(params));
}

#define EMBER_INSTANTIATE_CONV2D(T)                                                       \
  template void conv2d_forward<T>(const Conv2dParams&, const T*, const T*, const T*, T*); \
  template void conv2d_backward<T>(const Conv2dParams&, const T*, const T*, const T*, T*, T*, T*);
EMBER_INSTANTIATE_CONV2D(float)
EMBER_INSTANTIATE_CONV2D(double)
EMBER_INSTANTIATE_CONV2D(Half)
EMBER_INSTANTIATE_CONV2D(BFloat16)
#undef EMBER_INSTANTIATE_CONV2D

}  // namespace ember::kernels::cpu
