// How the CUDA batch norm kernels share out their work, as plain C++: the walks below run in the
// kernels and, on machines without a GPU, in the tests that check them.
//
//   x (batch, channels, spatial) dense: batch * channels planes of `spatial` contiguous values.
//
// Blocks have kBatchNormThreads threads shaped (threads_x, threads_y): threads_x threads walk the
// vectors of one plane side by side (coalesced), threads_y planes are walked at once. A vector is
// 16 bytes of values when every plane starts 16-byte aligned (spatial a multiple of the vector
// width), else one value.
//
// Per-channel reductions (the statistics; backward's two sums) run on a grid of (channel_blocks,
// splits): block (b, s) handles channels b, b + channel_blocks, ... and, of each, the planes of
// every splits-th group of threads_y batch indices. Each block writes a partial result per
// channel, and a second kernel merges the `splits` partials of a channel. With resnet9's first
// layers (64 channels of 512 x 64 x 64 values) one block per channel would fill 64 of an H100's
// 132 multiprocessors, one block at a time. splits makes the grid as many blocks as the
// multiprocessors hold at once (blocks_per_sm, the kernel's occupancy), without going over: a
// grid one block past that runs a second wave, whose few blocks leave the memory system idle.
//
// Elementwise passes (y = x scale + shift; grad_x) walk the planes grid-stride.
//
// batch_norm1d's (batch, channels) input has planes of one value: threads_x is 1 and a warp reads
// 32 values `channels` apart, uncoalesced. Such tensors are small; a layout with the channels
// across the threads would be the next step if one were not.
#pragma once

#include <cstdint>

#include "kernels/common/scalar_types.h"

namespace ember::kernels::cuda {

inline constexpr int kBatchNormThreads = 256;
// A full H100 multiprocessor (8 x 256 threads), for kernels whose registers allow it: the
// launches pass their kernel's own occupancy.
inline constexpr int kBatchNormBlocksPerSm = 8;
inline constexpr int64_t kBatchNormMaxGrid = 65535;
inline constexpr int64_t kBatchNormMaxSplits = 1024;

struct BatchNormPlan {
  int64_t batch = 0, channels = 0, spatial = 0;
  int vector_width = 1;        // values per load and store
  int threads_x = 1;           // a power of two, at least the plane's vectors where it can be
  int threads_y = 1;           // kBatchNormThreads / threads_x
  int64_t channel_blocks = 1;  // reductions: grid.x
  int64_t splits = 1;          // reductions: grid.y, blocks sharing a channel
  int64_t plane_blocks = 1;    // elementwise passes: grid.x
};

inline BatchNormPlan plan_batch_norm(int64_t batch, int64_t channels, int64_t spatial,
                                     int vector_width, int multiprocessors,
                                     int blocks_per_sm = kBatchNormBlocksPerSm) {
  BatchNormPlan plan;
  plan.batch = batch;
  plan.channels = channels;
  plan.spatial = spatial;
  plan.vector_width = vector_width;
  const int64_t vectors = spatial / vector_width;
  while (plan.threads_x < vectors && plan.threads_x < kBatchNormThreads)
    plan.threads_x *= 2;
  plan.threads_y = kBatchNormThreads / plan.threads_x;

  const int64_t resident_blocks = static_cast<int64_t>(multiprocessors > 0 ? multiprocessors : 1) *
                                  (blocks_per_sm > 0 ? blocks_per_sm : 1);
  plan.channel_blocks =
      channels < kBatchNormMaxGrid ? (channels > 0 ? channels : 1) : kBatchNormMaxGrid;
  const int64_t plane_groups = (batch + plan.threads_y - 1) / plan.threads_y;
  int64_t splits = resident_blocks / plan.channel_blocks;  // rounded down: one wave
  if (splits > plane_groups) splits = plane_groups;        // every split gets planes
  if (splits > kBatchNormMaxSplits) splits = kBatchNormMaxSplits;
  plan.splits = splits > 0 ? splits : 1;

  const int64_t plane_blocks = (batch * channels + plan.threads_y - 1) / plan.threads_y;
  plan.plane_blocks = plane_blocks < 1                   ? 1
                      : plane_blocks > kBatchNormMaxGrid ? kBatchNormMaxGrid
                                                         : plane_blocks;
  return plan;
}

// Reductions: body(offset) for the first value of each vector of channel c that thread (tx, ty)
// of split `split` reads. Offsets index the whole tensor.
template <typename Body>
EMBER_HOST_DEVICE void for_each_channel_vector(const BatchNormPlan& plan, int64_t c, int64_t split,
                                               int tx, int ty, Body&& body) {
  const int64_t vectors = plan.spatial / plan.vector_width;
  const int64_t plane_step = plan.splits * plan.threads_y;
  for (int64_t n = split * plan.threads_y + ty; n < plan.batch; n += plane_step) {
    const int64_t plane = (n * plan.channels + c) * plan.spatial;
    for (int64_t k = tx; k < vectors; k += plan.threads_x)
      body(plane + k * plan.vector_width);
  }
}

// The same walk kGroup vectors at a time: body(offsets, count) gets the next `count` offsets of
// for_each_channel_vector's walk, in its order; count is kGroup in every call but the last, which
// has 1 to kGroup. A kernel loads a whole group before it folds any of it in, so each thread has
// kGroup loads in flight where the plain walk leaves it one: with one 16-byte load per thread at a
// time, a multiprocessor cannot keep enough bytes in flight to stream at HBM's rate. The folds
// keep the plain walk's order, so the results keep its bits. `offsets` is indexed by unrolled
// constants only and stays in registers.
template <int kGroup, typename Body>
EMBER_HOST_DEVICE void for_each_channel_vector_group(const BatchNormPlan& plan, int64_t c,
                                                     int64_t split, int tx, int ty, Body&& body) {
  const int64_t first = static_cast<int64_t>(tx) * plan.vector_width;  // in values
  const int64_t step = static_cast<int64_t>(plan.threads_x) * plan.vector_width;
  const int64_t end = plan.spatial / plan.vector_width * plan.vector_width;
  if (first >= end) return;
  const int64_t plane_step = plan.splits * plan.threads_y;
  const int64_t plane_stride = plane_step * plan.channels * plan.spatial;
  int64_t n = split * plan.threads_y + ty;
  int64_t plane = (n * plan.channels + c) * plan.spatial, in_plane = first;
  while (n < plan.batch) {
    int64_t offsets[kGroup];
    int count = 0;
#pragma unroll
    for (int i = 0; i < kGroup; ++i) {
      offsets[i] = plane + in_plane;
      if (n < plan.batch) {
        ++count;
        in_plane += step;
        if (in_plane >= end) {
          in_plane = first;
          n += plane_step;
          plane += plane_stride;
        }
      }
    }
    body(offsets, count);
  }
}

// Elementwise passes: body(c, offset) for each vector that thread (tx, ty) of block `block` (of
// `blocks`) handles, with c its channel.
template <typename Body>
EMBER_HOST_DEVICE void for_each_plane_vector(const BatchNormPlan& plan, int64_t block,
                                             int64_t blocks, int tx, int ty, Body&& body) {
  const int64_t vectors = plan.spatial / plan.vector_width;
  const int64_t planes = plan.batch * plan.channels;
  for (int64_t plane = block * plan.threads_y + ty; plane < planes;
       plane += blocks * plan.threads_y) {
    // A 64-bit remainder costs several times a 32-bit one on the GPU; planes fit 32 bits in
    // practice.
    const int64_t c = planes <= INT32_MAX
                          ? static_cast<int64_t>(static_cast<uint32_t>(plane) %
                                                 static_cast<uint32_t>(plan.channels))
                          : plane % plan.channels;
    for (int64_t k = tx; k < vectors; k += plan.threads_x)
      body(c, plane * plan.spatial + k * plan.vector_width);
  }
}

}  // namespace ember::kernels::cuda
