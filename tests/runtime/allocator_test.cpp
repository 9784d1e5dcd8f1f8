// The CPU caching allocator: alignment, reuse of freed blocks, statistics, empty_cache.
#include <gtest/gtest.h>

#include <cstdint>

#include "runtime/allocator.h"
#include "runtime/ops.h"

namespace ember {
namespace {

TEST(CpuAllocator, BlocksAre64ByteAligned) {
  Allocator& allocator = cpu_allocator();
  for (size_t n : {1u, 3u, 64u, 1000u, 12345u}) {
    void* p = allocator.allocate(n);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << n;
    allocator.deallocate(p);
  }
  Tensor t = zeros({17}, DType::f16);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
}

TEST(CpuAllocator, AFreedBlockIsReusedForTheSameSize) {
  Allocator& allocator = cpu_allocator();
  const size_t bytes = 3 * 1024 * 1024 + 17;
  void* first = allocator.allocate(bytes);
  allocator.deallocate(first);
  const AllocatorStats before = allocator.stats();
  void* second = allocator.allocate(bytes);
  const AllocatorStats after = allocator.stats();
  EXPECT_EQ(second, first);
  EXPECT_EQ(after.num_cache_hits, before.num_cache_hits + 1);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  allocator.deallocate(second);
}

TEST(CpuAllocator, StatisticsTrackAllocatedReservedAndPeak) {
  Allocator& allocator = cpu_allocator();
  allocator.empty_cache();
  allocator.reset_peak();
  const AllocatorStats start = allocator.stats();
  void* a = allocator.allocate(1 << 20);
  void* b = allocator.allocate(1 << 20);
  const AllocatorStats busy = allocator.stats();
  EXPECT_GE(busy.allocated_bytes, start.allocated_bytes + (2u << 20));
  EXPECT_GE(busy.reserved_bytes, busy.allocated_bytes);
  EXPECT_EQ(busy.num_system_allocs, start.num_system_allocs + 2) << "the cache was empty";
  EXPECT_GE(busy.system_alloc_seconds, start.system_alloc_seconds);
  allocator.deallocate(a);
  allocator.deallocate(b);
  allocator.deallocate(allocator.allocate(1 << 20));  // from the cache: no call to the system
  EXPECT_EQ(allocator.stats().num_system_allocs, busy.num_system_allocs);
  const AllocatorStats idle = allocator.stats();
  EXPECT_EQ(idle.allocated_bytes, start.allocated_bytes);
  EXPECT_GE(idle.peak_allocated_bytes, start.allocated_bytes + (2u << 20));
  EXPECT_GT(idle.reserved_bytes, idle.allocated_bytes);  // the freed blocks stay cached
  allocator.empty_cache();
  EXPECT_EQ(allocator.stats().reserved_bytes, allocator.stats().allocated_bytes);
  EXPECT_FALSE(idle.str().empty());
}

TEST(CpuAllocator, ZeroBytesGiveDistinctValidPointers) {
  Allocator& allocator = cpu_allocator();
  void* a = allocator.allocate(0);
  void* b = allocator.allocate(0);
  EXPECT_NE(a, nullptr);
  EXPECT_NE(a, b);
  allocator.deallocate(a);
  allocator.deallocate(b);
}

TEST(CpuAllocator, TensorsReturnTheirMemoryWhenTheLastHandleGoes) {
  Allocator& allocator = cpu_allocator();
  const size_t before = allocator.stats().allocated_bytes;
  {
    Tensor t = zeros({1024, 1024});
    Tensor view = t.slice(0, 0, 10);
    t = Tensor();
    EXPECT_GE(allocator.stats().allocated_bytes, before + 4u * 1024 * 1024);  // the view holds it
  }
  EXPECT_EQ(allocator.stats().allocated_bytes, before);
}

}  // namespace
}  // namespace ember
