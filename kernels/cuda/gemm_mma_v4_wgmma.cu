// ember GEMM v4, Hopper (sm_90a) only: warpgroup MMA (wgmma) fed by the Tensor Memory Accelerator
// (TMA) through a 4-stage shared-memory ring guarded by mbarriers.
//
//   c (m, n) = alpha * a (m, k) @ b (n, k)^T + beta * c     f16/bf16 in, f32 accumulate
//
// What changes from v3:
// - wgmma.mma_async: the 4 warps of a warpgroup (128 threads) multiply together a 64 x 16 tile
//   of a by a 16 x 128 tile of b, reading BOTH operands straight from shared memory (no ldmatrix,
//   no fragments in registers for a and b), asynchronously: the instruction is issued, and the
//   warpgroup waits for it (wgmma.wait_group) only when it needs the result or the buffer back.
//   Operands are named by 64-bit shared-memory matrix descriptors (make_descriptor below).
// - TMA (cp.async.bulk.tensor): ONE thread asks the copy engine for a whole 128 x 64 tile. The
//   engine computes the addresses, zero-fills what lies outside the matrix (no edge code at all),
//   writes the tile in the 128-byte swizzled layout wgmma reads without bank conflicts, and
//   signals an mbarrier with the number of bytes it delivered. The other 127 threads never touch
//   global memory for a and b.
// - mbarriers replace cp.async groups: full[s] completes once stage s holds its tiles. It flips
//   phase each time it completes, so the i-th use of a stage waits for parity i % 2.
//
// The 128-byte swizzle: a tile row of 64 elements is 128 bytes, i.e. 8 chunks of 16 bytes. Row r
// of each 8-row, 1024-byte atom stores its chunk j at chunk position j XOR r. The 8 rows a core
// matrix read touches then sit in 8 different 16-byte bank groups: conflict-free, like v2's
// padding, but without wasting shared memory, and it is the layout TMA writes and wgmma expects
// (descriptor swizzle mode 1). Stages must be 1024-byte aligned for the XOR pattern to line up.
//
// Scope of this version (the launcher falls back to v3 for the rest): a not transposed (stored
// (m, k), K-major) and b transposed (stored (n, k), K-major), which is linear's x @ W^T; both
// 16-byte aligned with leading dims and batch strides multiples of 8 elements (TMA's rules).
//
// Block: one warpgroup (128 threads), a 128 x 128 tile of c as two m64n128 accumulators (128
// f32 per thread), k walked 64 at a time through 4 stages of 32 KiB.
//
// NEVER RUN on a GPU when written (no GPU in that session). A GPU run must check, before
// GemmAlgo::ember is allowed to pick v4: tests/cuda/gemm_test.cpp with ember-v4 (every size,
// k of 1 to many stages), then bench/gpu/gemm_bench.cpp.
#include <cuda.h>
#include <cudaTypedefs.h>

#include <stdexcept>
#include <string>
#include <type_traits>

#include "kernels/cuda/gemm_mma.h"
#include "kernels/cuda/gemm_mma_common.cuh"

namespace ember::kernels::cuda {
namespace {

using mma::GemmParams;

inline constexpr int kV4TileM = 128;
inline constexpr int kV4TileN = 128;
inline constexpr int kV4TileK = 64;  // 64 x 2 bytes = one 128-byte swizzle row
inline constexpr int kV4Stages = 4;
inline constexpr int kV4Threads = 128;
inline constexpr int kV4TileBytes = kV4TileM * kV4TileK * 2;  // a's; b's is the same size
inline constexpr int kV4StageBytes = 2 * kV4TileBytes;
inline constexpr size_t kV4SharedBytes = size_t{kV4Stages} * kV4StageBytes + 1024;  // + alignment
static_assert(kV4TileM == kV4TileN, "a's and b's tiles share one tensor-map box");

// Compiling device code for sm_90a, where the Hopper instructions exist (this file is built for
// sm_90a alone: CMakeLists.txt; the guards keep any other target from failing to assemble it).
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define EMBER_V4_DEVICE 1
#else
#define EMBER_V4_DEVICE 0
#endif

__device__ __forceinline__ unsigned shared_address(const void* pointer) {
  return static_cast<unsigned>(__cvta_generic_to_shared(pointer));
}

// Shared-memory matrix descriptor of a K-major, 128-byte-swizzled tile starting at `tile`:
//   bits  0-13  start address >> 4
//   bits 16-29  leading-dimension byte offset >> 4 (unused by swizzled K-major layouts: 1)
//   bits 32-45  stride byte offset >> 4: from one 8-row group to the next, 8 x 128 = 1024 bytes
//   bits 62-63  swizzle mode: 1 = 128-byte
// Stepping k by 16 inside the 64-wide tile moves the start address by 32 bytes: the hardware
// applies the XOR swizzle to the final address, so the tile's base must be 1024-byte aligned.
__device__ __forceinline__ uint64_t make_descriptor(const void* tile) {
  const uint64_t address = shared_address(tile);
  uint64_t descriptor = (address & 0x3FFFF) >> 4;
  descriptor |= uint64_t{16 >> 4} << 16;
  descriptor |= uint64_t{1024 >> 4} << 32;
  descriptor |= uint64_t{1} << 62;
  return descriptor;
}

__device__ __forceinline__ void mbarrier_init(uint64_t* barrier, unsigned count) {
#if EMBER_V4_DEVICE
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(shared_address(barrier)),
               "r"(count));
#endif
}

// Arrives on `barrier` and tells it `bytes` more will be delivered by TMA before it completes.
__device__ __forceinline__ void mbarrier_expect_bytes(uint64_t* barrier, unsigned bytes) {
#if EMBER_V4_DEVICE
  asm volatile(
      "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(shared_address(barrier)),
      "r"(bytes));
#endif
}

// Spins until the barrier's phase with this parity has completed. A phase that never completes
// (a transaction count or parity that is wrong, a TMA that never lands) traps after about
// 2^33 clocks (seconds), so that a broken kernel fails its launch instead of hanging the process.
__device__ __forceinline__ void mbarrier_wait(uint64_t* barrier, unsigned parity) {
#if EMBER_V4_DEVICE
  const long long start = clock64();
  for (;;) {
    unsigned done = 0;
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n"
        "}\n"
        : "=r"(done)
        : "r"(shared_address(barrier)), "r"(parity)
        : "memory");
    if (done) return;
    if (clock64() - start > (1LL << 33)) __trap();
  }
#endif
}

// TMA: box (kV4TileK x kV4TileM x 1) at (column, row, batch) of the map -> shared memory.
__device__ __forceinline__ void tma_load(void* shared_dst, const CUtensorMap* map, int column,
                                         int row, int batch, uint64_t* barrier) {
#if EMBER_V4_DEVICE
  asm volatile(
      "cp.async.bulk.tensor.3d.shared::cluster.global.mbarrier::complete_tx::bytes "
      "[%0], [%1, {%2, %3, %4}], [%5];\n" ::"r"(shared_address(shared_dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(column), "r"(row), "r"(batch),
      "r"(shared_address(barrier))
      : "memory");
#endif
}

// d (64 x 128, f32, accumulator layout below) += a (64 x 16) @ b (16 x 128), both from shared
// memory through descriptors; scale-d 1 (accumulate), no negation, no transposition (K-major).
// The instruction names its input type, and an asm string must be a literal: the macro writes the
// one statement for "f16" and "bf16".
#define EMBER_WGMMA_M64N128K16(INPUT_TYPE)                                                         \
  asm volatile(                                                                                    \
      "{\n"                                                                                        \
      ".reg .pred accumulate;\n"                                                                   \
      "setp.ne.b32 accumulate, %66, 0;\n"                                                          \
      "wgmma.mma_async.sync.aligned.m64n128k16.f32." INPUT_TYPE "." INPUT_TYPE                     \
      " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, "         \
      "%18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "      \
      "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, "      \
      "%52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "                              \
      "%64, %65, accumulate, 1, 1, 0, 0;\n"                                                        \
      "}\n"                                                                                        \
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]),        \
        "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]),    \
        "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), \
        "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), \
        "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), \
        "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), \
        "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), \
        "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), \
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), \
        "+f"(d[63])                                                                                \
      : "l"(a_descriptor), "l"(b_descriptor), "r"(1))

template <typename T>
__device__ __forceinline__ void wgmma_m64n128k16(float (&d)[64], uint64_t a_descriptor,
                                                 uint64_t b_descriptor) {
#if EMBER_V4_DEVICE
  if constexpr (std::is_same_v<T, Half>) {
    EMBER_WGMMA_M64N128K16("f16");
  } else {
    EMBER_WGMMA_M64N128K16("bf16");
  }
#endif
}

#undef EMBER_WGMMA_M64N128K16

__device__ __forceinline__ void wgmma_fence() {
#if EMBER_V4_DEVICE
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_commit() {
#if EMBER_V4_DEVICE
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void wgmma_wait_all() {
#if EMBER_V4_DEVICE
  asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory");
#endif
}

// grid (row tiles, column tiles, batch), kV4Threads threads, kV4SharedBytes dynamic shared
// memory.
template <typename T>
__global__ void __launch_bounds__(kV4Threads)
    gemm_mma_v4_kernel(const __grid_constant__ CUtensorMap a_map,
                       const __grid_constant__ CUtensorMap b_map, GemmParams p) {
  extern __shared__ uint8_t shared_raw[];
  // Round up to 1024 bytes: the 128-byte swizzle repeats every 8 rows of 128 bytes.
  uint8_t* ring = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(shared_raw) + 1023) &
                                             ~uintptr_t{1023});
  __shared__ __align__(8) uint64_t full[kV4Stages];
  const int batch = static_cast<int>(blockIdx.z);
  const int block_m = static_cast<int>(blockIdx.x) * kV4TileM;
  const int block_n = static_cast<int>(blockIdx.y) * kV4TileN;
  const int slices = static_cast<int>((p.k + kV4TileK - 1) / kV4TileK);

  if (threadIdx.x == 0) {
    for (int s = 0; s < kV4Stages; ++s)
      mbarrier_init(&full[s], 1);
      // Make the initialised barriers visible to the TMA unit (the "async proxy").
#if EMBER_V4_DEVICE
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
  }
  __syncthreads();

  auto issue = [&](int slice) {  // thread 0 only
    uint8_t* stage = ring + (slice % kV4Stages) * kV4StageBytes;
    uint64_t* barrier = &full[slice % kV4Stages];
    mbarrier_expect_bytes(barrier, kV4StageBytes);
    tma_load(stage, &a_map, slice * kV4TileK, block_m, batch, barrier);
    tma_load(stage + kV4TileBytes, &b_map, slice * kV4TileK, block_n, batch, barrier);
  };
  if (threadIdx.x == 0) {
    for (int s = 0; s < kV4Stages && s < slices; ++s)
      issue(s);
  }

  // Accumulator layout of m64nNk16 (f32): warp w of the warpgroup owns rows 16w .. 16w + 15;
  // register 4j + r (j = 0 .. N/8 - 1) holds row 16w + g + 8 (r / 2), column 8j + 2t + r % 2,
  // with g = lane / 4 and t = lane % 4: mma.m16n8's c layout repeated along n.
  float acc[2][64] = {};
  for (int slice = 0; slice < slices; ++slice) {
    const int s = slice % kV4Stages;
    mbarrier_wait(&full[s], static_cast<unsigned>((slice / kV4Stages) & 1));
    const uint8_t* a_tile = ring + s * kV4StageBytes;
    const uint8_t* b_tile = a_tile + kV4TileBytes;
    wgmma_fence();
#pragma unroll
    for (int k16 = 0; k16 < kV4TileK / 16; ++k16) {
      const uint64_t b_descriptor = make_descriptor(b_tile + k16 * 32);
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        // Rows 64 * half: 64 rows x 128 bytes further, a multiple of 1024.
        wgmma_m64n128k16<T>(acc[half], make_descriptor(a_tile + half * 64 * 128 + k16 * 32),
                            b_descriptor);
      }
    }
    wgmma_commit();
    wgmma_wait_all();  // the stage's tiles are no longer read: it may be refilled
    __syncthreads();
    if (threadIdx.x == 0 && slice + kV4Stages < slices) issue(slice + kV4Stages);
  }

  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4, t = lane % 4;
  uint16_t* c = p.c + static_cast<int64_t>(batch) * p.stride_c;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
#pragma unroll
    for (int i = 0; i < 64; ++i) {
      const int64_t row = block_m + half * 64 + warp * 16 + g + 8 * ((i % 4) / 2);
      const int64_t col = block_n + 8 * (i / 4) + 2 * t + (i % 2);
      if (row >= p.m || col >= p.n) continue;
      uint16_t* out = c + row * p.ldc + col;
      float value = p.alpha * acc[half][i];
      if (p.beta != 0.0f) value += p.beta * mma::from_bits<T>(*out);
      *out = mma::to_bits<T>(value);
    }
  }
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 function = [] {
    void* pointer = nullptr;
    cudaDriverEntryPointQueryResult found{};
    EMBER_CUDA_KERNEL_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &pointer,
                                                             12000, cudaEnableDefault, &found));
    if (found != cudaDriverEntryPointSuccess || pointer == nullptr) {
      throw CudaError("gemm_mma_v4: the CUDA driver has no cuTensorMapEncodeTiled (needs 12.0+)");
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(pointer);
  }();
  return function;
}

// A 3-D map (columns, rows, batch) over a K-major operand with a (kV4TileK x 128 x 1) box,
// 128-byte swizzle, zeros outside the matrix.
template <typename T>
CUtensorMap make_map(const T* base, int64_t rows, int64_t k, int64_t ld, int64_t batch,
                     int64_t stride) {
  CUtensorMap map{};
  const cuuint64_t dims[3] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows),
                              static_cast<cuuint64_t>(batch)};
  // Byte strides of dims 1 and 2; a batch of one still needs a legal (16-byte multiple)
  // stride.
  const int64_t batch_stride = batch > 1 ? stride : ((ld * rows + 7) / 8) * 8;
  const cuuint64_t strides[2] = {static_cast<cuuint64_t>(ld * 2),
                                 static_cast<cuuint64_t>(batch_stride * 2)};
  const cuuint32_t box[3] = {kV4TileK, kV4TileM, 1};
  const cuuint32_t element_strides[3] = {1, 1, 1};
  const CUresult result = encode_tiled()(
      &map,
      std::is_same_v<T, Half> ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
      3, const_cast<T*>(base), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (result != CUDA_SUCCESS) {
    throw CudaError("gemm_mma_v4: cuTensorMapEncodeTiled failed with CUresult " +
                    std::to_string(static_cast<int>(result)));
  }
  return map;
}

}  // namespace

bool gemm_mma_v4_handles(const GemmShape& s, const void* a, const void* b) {
  // TMA: 16-byte aligned base, byte strides multiples of 16 (and not 0: no broadcast batch);
  // int coordinates.
  const bool aligned = mma::vector_loads_ok(a, s.lda, s.batch, s.stride_a) &&
                       mma::vector_loads_ok(b, s.ldb, s.batch, s.stride_b) &&
                       (s.batch <= 1 || (s.stride_a > 0 && s.stride_b > 0));
  const bool small = s.m < (int64_t{1} << 31) && s.n < (int64_t{1} << 31) &&
                     s.k < (int64_t{1} << 31) && s.batch <= 65535;
  // A TMA map's batch stride spans a whole matrix: overlapping batches (a stride below rows x
  // ld, from an expanded view) go to v3.
  const bool separate = s.batch <= 1 || (s.stride_a >= s.m * s.lda && s.stride_b >= s.n * s.ldb);
  return !s.trans_a && s.trans_b && s.k > 0 && aligned && separate && small;
}

template <typename T>
void gemm_mma_v4(const GemmShape& shape, float alpha, const T* a, const T* b, float beta, T* c,
                 cudaStream_t stream) {
  if (shape.m == 0 || shape.n == 0 || shape.batch == 0) return;
  if (!gemm_mma_v4_handles(shape, a, b)) {
    gemm_mma_v3<T>(shape, alpha, a, b, beta, c, stream);
    return;
  }
  const CUtensorMap a_map = make_map(a, shape.m, shape.k, shape.lda, shape.batch, shape.stride_a);
  const CUtensorMap b_map = make_map(b, shape.n, shape.k, shape.ldb, shape.batch, shape.stride_b);
  EMBER_CUDA_KERNEL_CHECK(cudaFuncSetAttribute(gemm_mma_v4_kernel<T>,
                                               cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(kV4SharedBytes)));
  const GemmParams p = mma::make_params(shape, alpha, a, b, beta, c);
  const dim3 grid(static_cast<unsigned>((shape.m + kV4TileM - 1) / kV4TileM),
                  static_cast<unsigned>((shape.n + kV4TileN - 1) / kV4TileN),
                  static_cast<unsigned>(shape.batch));
  if (grid.y > 65535) {
    throw std::invalid_argument("gemm_mma_v4: an output with " + std::to_string(shape.n) +
                                " columns is too wide for its grid");
  }
  gemm_mma_v4_kernel<T><<<grid, kV4Threads, kV4SharedBytes, stream>>>(a_map, b_map, p);
  EMBER_CUDA_CHECK_LAUNCH("gemm_mma_v4_kernel<<<>>>");
}

template void gemm_mma_v4<Half>(const GemmShape&, float, const Half*, const Half*, float, Half*,
                                cudaStream_t);
template void gemm_mma_v4<BFloat16>(const GemmShape&, float, const BFloat16*, const BFloat16*,
                                    float, BFloat16*, cudaStream_t);

}  // namespace ember::kernels::cuda
