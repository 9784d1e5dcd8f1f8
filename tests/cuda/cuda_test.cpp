// The CUDA backend against the CPU one: every op case of tests/common on both devices, Philox
// streams bit for bit, the caching allocator, host <-> device copies, and the errors a user gets
// when there is no GPU (or no CUDA in the build).
//
// Compiles in every build. Without a visible GPU the GPU tests skip, saying why; the device-name
// and error-message tests run everywhere.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/op_cases.h"
#include "tests/cuda/support.h"

#if EMBER_WITH_CUDA
#include <chrono>
#include <thread>

#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/stream.h"
#include "tests/cuda/stream_blocker.h"
#endif

namespace ember::testing {
namespace {

#if EMBER_WITH_CUDA
// Every CUDA allocation of this test program is filled with 0xFF bytes (NaN in every floating
// dtype), so that a kernel that leaves part of its output unwritten fails the comparison with the
// CPU instead of passing on memory that happened to hold the right values.
class PoisonCudaAllocations : public ::testing::Environment {
 public:
  void SetUp() override { cuda::set_poison_allocations(true); }
};
[[maybe_unused]] const ::testing::Environment* const poison_environment =
    ::testing::AddGlobalTestEnvironment(new PoisonCudaAllocations);
#endif

// ---- everywhere, GPU or not --------------------------------------------------------------------

TEST(CudaDevice, ParsesDeviceNames) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(1).str(), "cuda:1");
  for (const char* bad : {"gpu", "cuda:", "cuda:x", "cuda:-1", "CUDA:0"}) {
    const std::string message = error_of([&] { Device::parse(bad); });
    EXPECT_NE(message.find("expected 'cpu', 'cuda' or 'cuda:N'"), std::string::npos) << message;
  }
}

TEST(CudaDevice, ReportsWhetherTheBuildHasCuda) {
  EXPECT_EQ(cuda_compiled(), EMBER_WITH_CUDA != 0);
  EXPECT_GE(cuda_device_count(), 0);  // never throws, even without a driver
  if (!cuda_compiled()) {
    EXPECT_EQ(cuda_device_count(), 0);
  }
}

TEST(CudaDevice, AskingForCudaWithoutAGpuSaysWhy) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  const std::vector<std::string> messages = {
      error_of([] { check_device_available(Device::cuda(0)); }),
      error_of([] {
        zeros({2, 3}, TensorOptions(DType::f32, Device::cuda(0)));
      }),
      error_of([] { ones({4}).to(Device::parse("cuda:0")); }),
  };
  for (const std::string& message : messages) {
    EXPECT_NE(message.find("device cuda:0 requested"), std::string::npos) << message;
    if (cuda_compiled()) {
      EXPECT_NE(message.find("no CUDA GPU is visible"), std::string::npos) << message;
      EXPECT_NE(message.find("CUDA_VISIBLE_DEVICES="), std::string::npos) << message;
    } else {
      EXPECT_NE(message.find("no CUDA support"), std::string::npos) << message;
      EXPECT_NE(message.find("-DEMBER_CUDA=ON"), std::string::npos) << message;
    }
    EXPECT_NE(message.find("use the cpu device"), std::string::npos) << message;
  }
}

#if EMBER_WITH_CUDA
TEST(CudaDevice, CheckMacroNamesTheCallAndGivesAHint) {
  const std::string message = error_of([] { EMBER_CUDA_CHECK(cudaErrorInvalidValue); });
  EXPECT_NE(message.find("CUDA error: cudaErrorInvalidValue failed at"), std::string::npos)
      << message;
  EXPECT_NE(message.find("cuda_test.cpp:"), std::string::npos) << message;
  EXPECT_NE(message.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << message;
  EXPECT_NE(message.find("is a GPU visible? check nvidia-smi and CUDA_VISIBLE_DEVICES"),
            std::string::npos)
      << message;
}

TEST(CudaDevice, CurrentStreamIsPerThreadAndScoped) {
  // No stream is used here, only remembered: this runs without a GPU.
  const cudaStream_t fake = reinterpret_cast<cudaStream_t>(0x1234);
  EXPECT_EQ(cuda::current_stream(0), nullptr);  // the legacy default stream
  {
    cuda::StreamGuard guard(1, fake);
    EXPECT_EQ(cuda::current_stream(1), fake);
    EXPECT_EQ(cuda::current_stream(0), nullptr);
    cudaStream_t seen_by_other_thread = fake;
    std::thread([&] { seen_by_other_thread = cuda::current_stream(1); }).join();
    EXPECT_EQ(seen_by_other_thread, nullptr);
  }
  EXPECT_EQ(cuda::current_stream(1), nullptr);
  EXPECT_NE(error_of([] { cuda::current_stream(-1); }).find("out of range"), std::string::npos);
}
#endif

// ---- with a GPU --------------------------------------------------------------------------------

TEST(Cuda, AskingForAMissingDeviceIndexListsTheVisibleOnes) {
  EMBER_SKIP_WITHOUT_GPU();
  const int count = cuda_device_count();
  const std::string message = error_of([&] { check_device_available(Device::cuda(count)); });
  EXPECT_NE(message.find("only " + std::to_string(count) + " CUDA device(s) are visible"),
            std::string::npos)
      << message;
}

TEST(Cuda, HostDeviceRoundTripKeepsEveryByte) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(7);
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : {Shape{}, Shape{0}, Shape{1}, Shape{3, 5}, Shape{1000, 37}}) {
      // Non-negative: a negative float converted to u8 is undefined behaviour in C++.
      const Tensor host = uniform(shape, 0.0, 200.0, DType::f64, &generator).to(dtype);
      const Tensor device = host.to(Device::cuda(0));
      EXPECT_EQ(device.device(), Device::cuda(0));
      EXPECT_EQ(bytes_of(device), bytes_of(host)) << dtype << " " << describe(host);
      // Device to device, and a non-contiguous source.
      EXPECT_EQ(bytes_of(device.clone()), bytes_of(host)) << dtype;
      if (host.dim() == 2) {
        EXPECT_EQ(bytes_of(device.transpose(0, 1)), bytes_of(host.transpose(0, 1))) << dtype;
      }
    }
  }
}

TEST(Cuda, ConversionsBetweenEveryDtypePairMatchTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(11);
  // Negative and positive values, so that every conversion rounds or wraps somewhere; but only
  // values that fit when a float becomes u8 (out of range, that conversion is undefined behaviour
  // in C++, and x86 wraps where the GPU saturates).
  const Tensor any_sign = uniform({257}, -300.0, 300.0, DType::f64, &generator);
  const Tensor fits_u8 = uniform({257}, 0.0, 255.0, DType::f64, &generator);
  for (DType from : kAllDTypes) {
    for (DType to : kAllDTypes) {
      const Tensor values = to == DType::u8 && is_floating(from) ? fits_u8 : any_sign;
      const Tensor source = values.to(from);
      const Tensor cpu = source.to(to);
      const Tensor cuda = source.to(Device::cuda(0)).to(to);
      EXPECT_EQ(bytes_of(cuda), bytes_of(cpu)) << from << " -> " << to;
    }
  }
}

// The device converts binary16 with the hardware's cvt instruction and the host with the portable
// code of kernels/common/scalar_types.h (or x86's F16C): every one of the 65,536 binary16 patterns,
// every bfloat16 one, and every float pattern where rounding to a 16-bit format decides something,
// must come out the same. The float patterns: each exponent (zero, subnormal, Inf and NaN ones
// included) and sign, with the dropped bits just below, at and above the halfway point of each
// rounding position a binary16 result can have (bit 13 for normal results, bits 14 to 24 for
// subnormal ones; bit 16, bfloat16's, among them), under upper mantissa bits that are zero, all
// ones, or random, so that ties go to even both ways.
// Each list goes three ways: in order from an aligned tensor (the kernels' packets, which test 4
// or 8 values for NaN together: kernels/cuda/convert_values.cuh), shuffled (so that NaNs share
// packets with other values in every lane), and through a view one element in (the
// element-by-element path).
namespace {

// "" when the two results hold the same bits; else how many differ, and the first.
std::string first_difference(const Tensor& cuda, const Tensor& cpu, const Tensor& input) {
  const std::vector<unsigned char> a = bytes_of(cuda), e = bytes_of(cpu), in = bytes_of(input);
  const size_t n = static_cast<size_t>(input.numel());
  if (a.size() != e.size() || n == 0) return "sizes differ";
  const size_t width = a.size() / n, in_width = in.size() / n;
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::memcmp(&a[i * width], &e[i * width], width) == 0) continue;
    if (mismatches++ == 0) first = i;
  }
  if (mismatches == 0) return "";
  uint32_t got = 0, want = 0, from = 0;
  std::memcpy(&got, &a[first * width], width);
  std::memcpy(&want, &e[first * width], width);
  std::memcpy(&from, &in[first * in_width], in_width);
  std::ostringstream out;
  out << mismatches << " of " << n << " differ; the first: input 0x" << std::hex << from
      << ", cuda 0x" << got << ", cpu 0x" << want;
  return out.str();
}

// The patterns as a tensor of `dtype` (its element size: 2 or 4 bytes each).
Tensor tensor_of_patterns(const std::vector<uint32_t>& patterns, DType dtype) {
  const int64_t n = static_cast<int64_t>(patterns.size());
  if (dtype == DType::f32)
    return from_blob(const_cast<uint32_t*>(patterns.data()), {n}, DType::f32).clone();
  std::vector<uint16_t> narrow(patterns.begin(), patterns.end());
  return from_blob(narrow.data(), {n}, dtype).clone();
}

std::vector<uint32_t> every_pattern_of_16_bits() {
  std::vector<uint32_t> patterns(65536);
  for (uint32_t i = 0; i < 65536; ++i)
    patterns[i] = i;
  return patterns;
}

std::vector<uint32_t> shuffled(std::vector<uint32_t> patterns, std::mt19937& random) {
  std::shuffle(patterns.begin(), patterns.end(), random);
  return patterns;
}

// The three ways above, for patterns of `from` converted to `to`.
void expect_conversion_matches_the_cpu(const std::vector<uint32_t>& patterns, DType from, DType to,
                                       std::mt19937& random) {
  const Tensor in_order = tensor_of_patterns(patterns, from);
  const Tensor mixed = tensor_of_patterns(shuffled(patterns, random), from);
  for (const auto& [host, order] : {std::pair{in_order, "in order"}, {mixed, "shuffled"}}) {
    EXPECT_EQ(first_difference(host.to(Device::cuda(0)).to(to), host.to(to), host), "")
        << from << " -> " << to << ", " << order;
  }
  const int64_t n = in_order.numel();
  const Tensor one_in = in_order.slice(0, 1, n);
  EXPECT_EQ(
      first_difference(in_order.to(Device::cuda(0)).slice(0, 1, n).to(to), one_in.to(to), one_in),
      "")
      << from << " -> " << to << ", one element in";
}

}  // namespace

TEST(Cuda, SixteenBitConversionsMatchTheCpuOnEveryPatternThatDecides) {
  EMBER_SKIP_WITHOUT_GPU();
  std::mt19937 random(17);
  const std::vector<uint32_t> every_16_bit_pattern = every_pattern_of_16_bits();
  for (const auto& [from, to] : {std::pair{DType::f16, DType::f32},
                                 {DType::f16, DType::bf16},
                                 {DType::bf16, DType::f32},
                                 {DType::bf16, DType::f16}}) {
    expect_conversion_matches_the_cpu(every_16_bit_pattern, from, to, random);
  }

  std::vector<uint32_t> floats;
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (uint32_t shift = 13; shift <= 24; ++shift) {
        const uint32_t half_way = 1u << (shift - 1);
        const uint32_t lows[] = {0u, 1u, half_way - 1, half_way, half_way + 1, 2 * half_way - 1};
        for (int u = 0; u < 64; ++u) {
          const uint32_t upper = u == 0 ? 0u : u == 1 ? ~0u : static_cast<uint32_t>(random());
          for (uint32_t low : lows) {
            const uint32_t mantissa = ((upper << shift) | low) & 0x7fffffu;
            floats.push_back((sign << 31) | (exponent << 23) | mantissa);
          }
        }
      }
    }
  }
  for (int i = 0; i < (1 << 20); ++i)
    floats.push_back(static_cast<uint32_t>(random()));
  for (DType to : {DType::f16, DType::bf16})
    expect_conversion_matches_the_cpu(floats, DType::f32, to, random);
}

namespace {

// "" when the two 16-bit results hold the same bits element by element, or both a NaN there (a
// NaN that arithmetic made may have other bits on the GPU); else how many differ, and the first.
std::string bits_differ_unless_both_nan(const Tensor& cuda, const Tensor& cpu) {
  const Tensor actual = cuda.to(Device::cpu());
  const std::vector<unsigned char> a = bytes_of(actual), e = bytes_of(cpu);
  const std::vector<double> a_values = to_vector<double>(actual), e_values = to_vector<double>(cpu);
  if (a.size() != e.size() || a.size() != 2 * e_values.size()) return "sizes differ";
  size_t mismatches = 0, first = 0;
  for (size_t i = 0; i < e_values.size(); ++i) {
    if (std::memcmp(&a[2 * i], &e[2 * i], 2) == 0) continue;
    if (std::isnan(a_values[i]) && std::isnan(e_values[i])) continue;
    if (mismatches++ == 0) first = i;
  }
  if (mismatches == 0) return "";
  return std::to_string(mismatches) + " of " + std::to_string(e_values.size()) +
         " differ; the first, element " + std::to_string(first) + ": cuda " +
         std::to_string(a_values[first]) + ", cpu " + std::to_string(e_values[first]);
}

}  // namespace

// The elementwise kernels convert whole packets at once, and a packet with a NaN in it takes the
// element-by-element conversions: every 16-bit pattern, shuffled so that NaNs share packets with
// other values, through a binary op, a unary op and a comparison. Results must have the CPU's
// bits (signed zeros included) but where both are NaN, and the comparisons exactly. relu passes
// its input on by a select on both devices, so its NaNs keep their payloads: its bits must be the
// CPU's everywhere, which they would not be if a NaN's packet took the paired conversion (its
// NaN would come out as the canonical 0x7fff).
TEST(Cuda, SixteenBitKernelsKeepTheOtherValuesOfAPacketWithANaN) {
  EMBER_SKIP_WITHOUT_GPU();
  std::mt19937 random(23);
  const std::vector<uint32_t> every_16_bit_pattern = every_pattern_of_16_bits();
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Tensor a = tensor_of_patterns(shuffled(every_16_bit_pattern, random), dtype);
    const Tensor b = tensor_of_patterns(shuffled(every_16_bit_pattern, random), dtype);
    const Tensor a_gpu = a.to(Device::cuda(0)), b_gpu = b.to(Device::cuda(0));
    EXPECT_EQ(bits_differ_unless_both_nan(add(a_gpu, b_gpu), add(a, b)), "") << dtype << " add";
    EXPECT_EQ(bits_differ_unless_both_nan(neg(a_gpu), neg(a)), "") << dtype << " neg";
    EXPECT_EQ(bytes_of(relu(a_gpu).to(Device::cpu())), bytes_of(relu(a))) << dtype << " relu";
    EXPECT_EQ(bytes_of(lt(a_gpu, b_gpu)), bytes_of(lt(a, b))) << dtype << " lt";
  }
}

TEST(Cuda, SumMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(5);
  struct Case {
    Shape shape;
    Dims dims;
  };
  // Row sums (inner == 1), few long rows (two passes through partial sums), column sums
  // (inner > 1), few columns over many rows (two passes through chunks of rows: {70000, 40},
  // {1000, 3, 7} in chunks of 250), empty reductions, and grids bigger than the 65535-block cap
  // (row and column kernels both walk the rest grid-stride).
  const std::vector<Case> cases = {
      {{7, 1000}, {1}}, {{1, 100003}, {}},  {{9, 5, 33}, {1}},  {{3, 4, 5}, {0, 2}},
      {{6, 0}, {1}},    {{70000, 3}, {1}},  {{70000, 40}, {0}}, {{2, 70000, 33}, {0}},
      {{33, 1}, {0}},   {{3, 200001}, {1}}, {{4, 17, 65}, {1}}, {{1000, 3, 7}, {0}},
  };
  for (const Case& c : cases) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64,
                        DType::u8, DType::boolean}) {
      const Tensor host = uniform(c.shape, 0.0, 3.0, DType::f64, &generator).to(dtype);
      const Tensor cpu = sum(host, c.dims);
      const Tensor cuda = sum(host.to(Device::cuda(0)), c.dims);
      // The summation order differs: f32 rounding error grows with the length of a thread's
      // slice. A wrong index would be off by O(1), far beyond this.
      const double tol = dtype == DType::f32 ? 1e-4 : cuda_tolerance(dtype);
      const std::string error = mismatch(cuda.to(Device::cpu()), cpu, tol);
      EXPECT_TRUE(error.empty()) << "sum of " << describe(host) << ": " << error;
    }
  }
}

TEST(Cuda, PhiloxStreamsMatchTheCpuBitForBit) {
  EMBER_SKIP_WITHOUT_GPU();
  for (uint64_t seed : {uint64_t{0}, uint64_t{42}, uint64_t{0xdeadbeefcafeULL}}) {
    for (const Shape& shape : {Shape{1}, Shape{3}, Shape{1001}, Shape{257, 129}}) {
      // A generator that has already drawn, so the offset is not 0.
      Generator cpu_generator(seed), cuda_generator(seed);
      rand({5}, DType::f32, &cpu_generator);
      rand({5}, DType::f32, &cuda_generator);
      auto both = [&](auto draw, DType dtype, const char* what) {
        const Tensor expected = draw(TensorOptions(dtype, Device::cpu()), cpu_generator);
        const Tensor actual = draw(TensorOptions(dtype, Device::cuda(0)), cuda_generator);
        EXPECT_EQ(bytes_of(actual), bytes_of(expected))
            << what << " in " << dtype << ", seed " << seed << ", shape " << shape_str(shape);
        EXPECT_EQ(cpu_generator.state().offset, cuda_generator.state().offset);
      };
      for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
        both([&](TensorOptions o, Generator& g) { return uniform(shape, -2.0, 3.0, o, &g); }, dtype,
             "uniform");
      }
      for (DType dtype : kAllDTypes) {
        both([&](TensorOptions o, Generator& g) { return bernoulli(shape, 0.3, o, &g); }, dtype,
             "bernoulli");
      }
      for (DType dtype : {DType::i64, DType::i32, DType::f32}) {
        both([&](TensorOptions o, Generator& g) { return randint(-50, 1000, shape, o, &g); }, dtype,
             "randint");
      }
      // 2^32 as the range gives the raw 32-bit Philox words themselves.
      both(
          [&](TensorOptions o, Generator& g) { return randint(0, int64_t{1} << 32, shape, o, &g); },
          DType::i64, "randint over 2^32 (raw words)");
    }
  }
}

TEST(Cuda, NormalMatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  // Box-Muller goes through log, sin and cos, which CUDA computes to within an ulp or two of the
  // host's libm: the same up to the last bit of f64.
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    Generator cpu_generator(3), cuda_generator(3);
    const Tensor expected =
        normal({1001}, 1.5, 2.0, TensorOptions(dtype, Device::cpu()), &cpu_generator);
    const Tensor actual =
        normal({1001}, 1.5, 2.0, TensorOptions(dtype, Device::cuda(0)), &cuda_generator);
    const double tol = dtype == DType::f64 ? 1e-14 : dtype == DType::f32 ? 2e-7 : 1e-2;
    const std::string error = mismatch(actual.to(Device::cpu()), expected, tol);
    EXPECT_TRUE(error.empty()) << "normal in " << dtype << ": " << error;
  }
}

TEST(Cuda, AllocatorReusesFreedBlocksAndCountsBytes) {
  EMBER_SKIP_WITHOUT_GPU();
  Allocator& allocator = allocator_for(Device::cuda(0));
  allocator.empty_cache();
  const AllocatorStats before = allocator.stats();
  void* first = allocator.allocate(1000);
  const AllocatorStats holding = allocator.stats();
  EXPECT_GE(holding.allocated_bytes, before.allocated_bytes + 1000);
  EXPECT_GE(holding.reserved_bytes, holding.allocated_bytes);
  EXPECT_GE(holding.peak_allocated_bytes, holding.allocated_bytes);
  allocator.deallocate(first);
  EXPECT_EQ(allocator.stats().allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(allocator.stats().reserved_bytes, holding.reserved_bytes);  // cached, not returned

  // The same size class comes back from the cache: same block, no new memory.
  void* second = allocator.allocate(900);
  EXPECT_EQ(second, first);
  EXPECT_EQ(allocator.stats().num_cache_hits, holding.num_cache_hits + 1);
  EXPECT_EQ(allocator.stats().reserved_bytes, holding.reserved_bytes);
  EXPECT_EQ(allocator.stats().num_system_allocs, holding.num_system_allocs);  // no cudaMalloc
  allocator.deallocate(second);
  // A large block: a new segment (one cudaMalloc, counted and timed) unless a segment still in
  // use had room for it.
  const AllocatorStats before_large = allocator.stats();
  void* large = allocator.allocate(size_t{96} << 20);
  const AllocatorStats after_large = allocator.stats();
  const bool new_segment = after_large.reserved_bytes > before_large.reserved_bytes;
  EXPECT_EQ(after_large.num_system_allocs, before_large.num_system_allocs + (new_segment ? 1 : 0));
  if (new_segment) {
    EXPECT_GT(after_large.system_alloc_seconds, before_large.system_alloc_seconds);
  }
  allocator.deallocate(large);

  // Zero bytes still gives a unique, valid pointer.
  void* empty_a = allocator.allocate(0);
  void* empty_b = allocator.allocate(0);
  EXPECT_NE(empty_a, nullptr);
  EXPECT_NE(empty_a, empty_b);
  allocator.deallocate(empty_a);
  allocator.deallocate(empty_b);

  allocator.reset_peak();
  EXPECT_EQ(allocator.stats().peak_allocated_bytes, allocator.stats().allocated_bytes);
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats().reserved_bytes, allocator.stats().allocated_bytes);

  // Through tensors: a freed tensor's block serves the next tensor of the same size.
  const size_t hits = allocator.stats().num_cache_hits;
  { const Tensor t = zeros({256, 256}, TensorOptions(DType::f32, Device::cuda(0))); }
  { const Tensor t = zeros({256, 256}, TensorOptions(DType::f32, Device::cuda(0))); }
  EXPECT_GE(allocator.stats().num_cache_hits, hits + 1);
  EXPECT_NE(error_of([&] { allocator.deallocate(&allocator); }).find("did not allocate"),
            std::string::npos);
}

#if EMBER_WITH_CUDA
TEST(Cuda, OpsRunOnTheCurrentStream) {
  EMBER_SKIP_WITHOUT_GPU();
  cudaStream_t stream = nullptr;
  EMBER_CUDA_CHECK(cudaStreamCreate(&stream));
  const Tensor x = ones({100000}, TensorOptions(DType::f32, Device::cuda(0)));
  Tensor y;
  {
    cuda::StreamGuard guard(0, stream);
    y = sum(x * 2.0);
  }
  // Copies to the host go through the default stream, which waits for `stream` (a blocking one).
  EXPECT_EQ(y.item<double>(), 200000.0);
  EMBER_CUDA_CHECK(cudaStreamSynchronize(stream));
  EMBER_CUDA_CHECK(cudaStreamDestroy(stream));
}
// Ops make their tensors' device current while they launch (cuda::StreamOnDevice), whatever device
// the calling thread has selected, and give the thread its device back. Needs two GPUs for the
// device switch itself; on one, the stream and the restored device are still checked.
TEST(Cuda, OpsRunOnTheirTensorsDeviceWhateverTheThreadSelected) {
  EMBER_SKIP_WITHOUT_GPU();
  {
    const cuda::StreamOnDevice stream(0);
    EXPECT_EQ(stream.get(), cuda::current_stream(0));
    int during = -1;
    EMBER_CUDA_CHECK(cudaGetDevice(&during));
    EXPECT_EQ(during, 0);
  }
  if (cuda_device_count() < 2) GTEST_SKIP() << "one GPU: the switch to another device needs two";
  EMBER_CUDA_CHECK(cudaSetDevice(0));
  {
    const cuda::StreamOnDevice stream(1);
    int during = -1;
    EMBER_CUDA_CHECK(cudaGetDevice(&during));
    EXPECT_EQ(during, 1);
  }
  int after = -1;
  EMBER_CUDA_CHECK(cudaGetDevice(&after));
  EXPECT_EQ(after, 0);
  {
    const cuda::DeviceGuard guard(0);    // nothing to switch...
    EMBER_CUDA_CHECK(cudaSetDevice(1));  // ...but the scope selects another device
  }
  EMBER_CUDA_CHECK(cudaGetDevice(&after));
  EXPECT_EQ(after, 0) << "a guard restores the caller's device whatever its scope selected";
  // An op, its backward and a reduction on cuda:1 from a thread on cuda:0.
  Generator generator(5);
  const Tensor x_cpu = uniform({37, 53}, -1.0, 1.0, DType::f32, &generator);
  Tensor x = x_cpu.to(Device::cuda(1)).detach();
  x.requires_grad_();
  const Tensor loss = sum(softmax(x * 3.0, 1) * x);
  loss.backward();
  Tensor x_ref = x_cpu.detach();
  x_ref.requires_grad_();
  const Tensor loss_ref = sum(softmax(x_ref * 3.0, 1) * x_ref);
  loss_ref.backward();
  EXPECT_NEAR(loss.item<double>(), loss_ref.item<double>(), 1e-4);
  EXPECT_EQ(mismatch(x.grad(), x_ref.grad(), 1e-5), "");
  EMBER_CUDA_CHECK(cudaGetDevice(&after));
  EXPECT_EQ(after, 0);
}

// Streams of two GPUs are not ordered with each other. A copy to cuda:1 of a tensor that cuda:0
// is still computing must wait for cuda:0's stream (copied on cuda:1's stream alone, it read the
// source before it was written: here, x instead of 2x), and must not make the host wait.
TEST(Cuda, ACopyToAnotherGpuWaitsForTheWorkThatWritesItsSource) {
  EMBER_SKIP_WITHOUT_GPU();
  if (cuda_device_count() < 2) GTEST_SKIP() << "one GPU: a copy between GPUs needs two";
  const Tensor x = arange(0, 1 << 20, 1, TensorOptions(DType::f32, Device::cuda(0)));
  Tensor y = x.clone();
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  // A stream of its own, not ordered with the legacy default stream, so that nothing else (a
  // copy the driver stages, say) waits for the held work by accident.
  const cuda::Stream stream(0, cuda::Stream::Kind::non_blocking);
  const cuda::StreamGuard on_stream(0, stream.get());
  StreamBlocker blocker(stream.get());  // released at the latest before `stream` waits for it
  y.mul_(2.0);  // queued behind the held host function: y still holds x's values
  const auto start = std::chrono::steady_clock::now();
  const Tensor moved = y.to(Device::cuda(1));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5))
      << "the copy waited on the host";
  blocker.release();
  EXPECT_EQ(moved.device(), Device::cuda(1));
  EXPECT_EQ(mismatch(moved.to(Device::cpu()), x.to(Device::cpu()) * 2.0, 0.0), "");
}
#endif

// ---- every op case: CUDA against CPU -----------------------------------------------------------

class CudaOpCaseTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CudaOpCaseTest, MatchesTheCpu) {
  EMBER_SKIP_WITHOUT_GPU();
  const OpCase& c = find_op_case(GetParam());
  if (!c.compare_on_cuda) GTEST_SKIP() << c.name << " is not compared on CUDA (compare_on_cuda)";
  for (DType dtype : c.cuda_dtypes) {
    Generator cpu_generator(1234), cuda_generator(1234);
    const std::vector<Tensor> cpu_inputs = c.make_inputs(dtype, Device::cpu(), cpu_generator);
    const std::vector<Tensor> cuda_inputs = c.make_inputs(dtype, Device::cuda(0), cuda_generator);
    NoGradGuard no_grad;
    const Tensor expected = c.fn(cpu_inputs);
    Tensor actual;
    try {
      actual = c.fn(cuda_inputs);
    } catch (const Error& e) {
      FAIL() << c.name << " in " << dtype << " threw on CUDA: " << e.what();
    } catch (const std::exception& e) {  // a kernel launch's CudaError, say
      FAIL() << c.name << " in " << dtype << " threw on CUDA: " << e.what();
    }
    ASSERT_TRUE(actual.is_cuda()) << c.name << ": result on " << actual.device();
    const std::string error =
        mismatch(actual.to(Device::cpu()), expected, cuda_tolerance(dtype) * c.tolerance_scale);
    EXPECT_TRUE(error.empty()) << c.name << " in " << dtype << ": " << error;
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, CudaOpCaseTest, ::testing::ValuesIn(op_case_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return test_name_of(info.param);
                         });

}  // namespace
}  // namespace ember::testing
