// kernels/common/pool_windows.h against brute force: the window geometry that both the CPU and the
// CUDA pooling kernels use, and the output ranges the CUDA backward walks (one thread per input
// element, gathering from every output whose window reads it: a missed window would lose a
// gradient). Runs on the host, so CI checks the CUDA kernels' index arithmetic without a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "kernels/common/pool_windows.h"

namespace ember::kernels {
namespace {

// Random geometries as the runtime builds them: padding at most half the kernel, the dilated
// kernel no larger than the padded input, output sizes by pooled_size (floor or ceil mode).
std::vector<Pool2dGeometry> random_geometries(int count) {
  std::mt19937 rng(2027);
  std::vector<Pool2dGeometry> out;
  while (static_cast<int>(out.size()) < count) {
    Pool2dGeometry g;
    g.planes = 1;
    g.in_height = 1 + rng() % 12;
    g.in_width = 1 + rng() % 12;
    g.kernel_h = 1 + rng() % 4;
    g.kernel_w = 1 + rng() % 4;
    g.stride_h = 1 + rng() % 3;
    g.stride_w = 1 + rng() % 3;
    g.pad_h = rng() % (g.kernel_h / 2 + 1);
    g.pad_w = rng() % (g.kernel_w / 2 + 1);
    g.dilation_h = 1 + rng() % 3;
    g.dilation_w = 1 + rng() % 3;
    const bool ceil_mode = rng() % 2 == 0;
    const int64_t extent_h = (g.kernel_h - 1) * g.dilation_h + 1;
    const int64_t extent_w = (g.kernel_w - 1) * g.dilation_w + 1;
    const int64_t padded_h = g.in_height + 2 * g.pad_h, padded_w = g.in_width + 2 * g.pad_w;
    if (extent_h > padded_h || extent_w > padded_w) continue;
    g.out_height = pooled_size(padded_h, extent_h, g.stride_h, g.in_height + g.pad_h, ceil_mode);
    g.out_width = pooled_size(padded_w, extent_w, g.stride_w, g.in_width + g.pad_w, ceil_mode);
    out.push_back(g);
  }
  return out;
}

// Rows of output p by the definition: p stride - pad + i dilation for i < kernel, inside [0, in).
std::set<int64_t> rows_by_definition(int64_t p, int64_t in, int64_t kernel, int64_t stride,
                                     int64_t pad, int64_t dilation) {
  std::set<int64_t> rows;
  for (int64_t i = 0; i < kernel; ++i) {
    const int64_t r = p * stride - pad + i * dilation;
    if (r >= 0 && r < in) rows.insert(r);
  }
  return rows;
}

std::set<int64_t> rows_walked(int64_t begin, int64_t end, int64_t step) {
  std::set<int64_t> rows;
  for (int64_t r = begin; r < end; r += step)
    rows.insert(r);
  return rows;
}

std::string describe(const Pool2dGeometry& g) {
  return "in " + std::to_string(g.in_height) + "x" + std::to_string(g.in_width) + " kernel " +
         std::to_string(g.kernel_h) + "x" + std::to_string(g.kernel_w) + " stride " +
         std::to_string(g.stride_h) + "x" + std::to_string(g.stride_w) + " pad " +
         std::to_string(g.pad_h) + "x" + std::to_string(g.pad_w) + " dilation " +
         std::to_string(g.dilation_h) + "x" + std::to_string(g.dilation_w) + " out " +
         std::to_string(g.out_height) + "x" + std::to_string(g.out_width);
}

TEST(PoolWindows, EveryWindowWalksExactlyTheRowsAndColumnsOfItsDefinition) {
  for (const Pool2dGeometry& g : random_geometries(3000)) {
    for (int64_t p = 0; p < g.out_height; ++p) {
      for (int64_t q = 0; q < g.out_width; ++q) {
        const PoolWindow w = pool_window(g, p, q);
        ASSERT_EQ(rows_walked(w.h_begin, w.h_end, g.dilation_h),
                  rows_by_definition(p, g.in_height, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h))
            << describe(g) << " output row " << p;
        ASSERT_EQ(rows_walked(w.w_begin, w.w_end, g.dilation_w),
                  rows_by_definition(q, g.in_width, g.kernel_w, g.stride_w, g.pad_w, g.dilation_w))
            << describe(g) << " output column " << q;
      }
    }
  }
}

// Without dilation (average pooling): the padded size counts the window's positions inside the
// padded input, PyTorch's count_include_pad divisor; a ceil-mode window past it counts less.
TEST(PoolWindows, PaddedSizeCountsThePositionsInsideThePaddedInput) {
  for (Pool2dGeometry g : random_geometries(3000)) {
    if (g.dilation_h != 1 || g.dilation_w != 1) continue;
    for (int64_t p = 0; p < g.out_height; ++p) {
      for (int64_t q = 0; q < g.out_width; ++q) {
        int64_t inside = 0;
        for (int64_t i = 0; i < g.kernel_h; ++i)
          for (int64_t j = 0; j < g.kernel_w; ++j)
            inside += (p * g.stride_h - g.pad_h + i < g.in_height + g.pad_h &&
                       q * g.stride_w - g.pad_w + j < g.in_width + g.pad_w);
        const PoolWindow w = pool_window(g, p, q);
        ASSERT_EQ(w.padded_size, inside) << describe(g) << " output " << p << "," << q;
        ASSERT_EQ(average_divisor(g, w, true), inside);
        ASSERT_EQ(average_divisor(g, w, false), (w.h_end - w.h_begin) * (w.w_end - w.w_begin));
        g.divisor_override = 7;
        ASSERT_EQ(average_divisor(g, w, true), 7);
        g.divisor_override = 0;
      }
    }
  }
}

// The CUDA backward's range for input row i must hold every output whose window reads row i.
TEST(PoolWindows, OutputsTouchingHoldsEveryWindowThatReadsAnInput) {
  for (const Pool2dGeometry& g : random_geometries(3000)) {
    const int64_t extent = (g.kernel_h - 1) * g.dilation_h + 1;
    for (int64_t i = 0; i < g.in_height; ++i) {
      const OutputRange range = outputs_touching(i, g.out_height, extent, g.stride_h, g.pad_h);
      ASSERT_GE(range.begin, 0) << describe(g);
      ASSERT_LE(range.end, g.out_height) << describe(g);
      for (int64_t p = 0; p < g.out_height; ++p) {
        if (rows_by_definition(p, g.in_height, g.kernel_h, g.stride_h, g.pad_h, g.dilation_h)
                .count(i) == 0)
          continue;
        ASSERT_TRUE(p >= range.begin && p < range.end)
            << describe(g) << ": input row " << i << " is read by output row " << p << " outside ["
            << range.begin << ", " << range.end << ")";
      }
    }
  }
}

// Adaptive bins [floor(o in / out), ceil((o + 1) in / out)) cover the input, and the range for
// input i is exactly the bins holding it.
TEST(PoolWindows, AdaptiveBinsAndTheirRanges) {
  for (int64_t in = 1; in <= 20; ++in) {
    for (int64_t out = 1; out <= 20; ++out) {
      std::vector<int> covered(static_cast<size_t>(in), 0);
      for (int64_t o = 0; o < out; ++o) {
        const int64_t begin = adaptive_bin_start(o, in, out), end = adaptive_bin_end(o, in, out);
        ASSERT_LT(begin, end) << in << " -> " << out;
        for (int64_t i = begin; i < end; ++i)
          ++covered[static_cast<size_t>(i)];
      }
      for (int64_t i = 0; i < in; ++i) {
        ASSERT_GE(covered[static_cast<size_t>(i)], 1) << in << " -> " << out;
        const OutputRange range = adaptive_outputs_touching(i, in, out);
        int64_t holding = 0;
        for (int64_t o = 0; o < out; ++o) {
          const bool holds =
              adaptive_bin_start(o, in, out) <= i && i < adaptive_bin_end(o, in, out);
          holding += holds;
          if (holds) {
            ASSERT_TRUE(o >= range.begin && o < range.end) << in << " -> " << out;
          }
        }
        ASSERT_EQ(range.end - range.begin, holding) << in << " -> " << out << " input " << i;
      }
    }
  }
}

}  // namespace
}  // namespace ember::kernels
