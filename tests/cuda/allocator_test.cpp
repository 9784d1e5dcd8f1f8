// The CUDA runtime on a GPU: the caching allocator (splitting, merging, per-stream pools,
// record_stream, out of memory, poisoning), pinned memory and asynchronous copies, streams,
// events, device properties and the device guard. The allocator's bookkeeping is also proven
// without a GPU on a fake memory source (tests/runtime/block_allocator_test.cpp).
//
// Every GPU test skips without a visible GPU; the pinned-memory error test runs everywhere else.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/cuda/support.h"

#if EMBER_WITH_CUDA
#include "runtime/cuda/allocator.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/event.h"
#include "runtime/cuda/stream.h"
#include "tests/cuda/stream_blocker.h"
#endif

namespace ember::testing {
namespace {

TEST(CudaPinned, PinningWithoutAGpuSaysWhy) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  const std::string message = error_of([] { ones({4}).pin_memory(); });
  EXPECT_NE(message.find("pinned (page-locked) host memory needs"), std::string::npos) << message;
  EXPECT_NE(message.find(cuda_compiled() ? "none is visible" : "no CUDA support"),
            std::string::npos)
      << message;
}

TEST(CudaDevice, WithoutAGpuEveryEntryPointSaysWhy) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  const char* expected = cuda_compiled() ? "no CUDA GPU is visible" : "no CUDA support";
  std::vector<std::string> messages = {
      error_of([] { cuda::device_properties(0); }),
      error_of([] { cuda::memory_info(0); }),
      error_of([] { cuda::set_device(0); }),
      error_of([] { allocator_for(Device::cuda(0)); }),
  };
#if EMBER_WITH_CUDA
  messages.push_back(error_of([] { cuda::Stream stream(0); }));
  messages.push_back(error_of([] { cuda::stream_from_pool(0); }));
  messages.push_back(error_of([] { cuda::Event().record(0); }));
  messages.push_back(error_of([] { cuda::device_allocator(0); }));
  cuda::empty_cache();  // nothing to give back: not an error
#endif
  for (const std::string& message : messages)
    EXPECT_NE(message.find(expected), std::string::npos) << message;
  EXPECT_EQ(cuda::current_device(), -1);  // not an error: no GPU is current
}

#if EMBER_WITH_CUDA

StreamRef ref_of(const cuda::Stream& stream) {
  return StreamRef{reinterpret_cast<uintptr_t>(stream.get()), stream.device_index()};
}

// The segment of the device allocator that holds `ptr`.
SegmentSnapshot segment_of(const BlockAllocator& allocator, void* ptr) {
  const auto address = reinterpret_cast<uintptr_t>(ptr);
  for (const SegmentSnapshot& segment : allocator.snapshot()) {
    if (address >= segment.address && address < segment.address + segment.size) return segment;
  }
  ADD_FAILURE() << "no segment holds " << ptr;
  return {};
}

TEST(CudaAllocator, SplitsASegmentAndMergesTheFreedBlocks) {
  EMBER_SKIP_WITHOUT_GPU();
  BlockAllocator& allocator = cuda::device_allocator(0);
  allocator.empty_cache();       // a new stream may have the handle of one destroyed earlier
  const cuda::Stream stream(0);  // a fresh pool: no other test's blocks
  void* a = allocator.allocate(1000, ref_of(stream));
  void* b = allocator.allocate(3000, ref_of(stream));
  void* c = allocator.allocate(512, ref_of(stream));
  EXPECT_EQ(static_cast<char*>(b), static_cast<char*>(a) + 1024);
  EXPECT_EQ(static_cast<char*>(c), static_cast<char*>(b) + 3072);
  const size_t reserved = allocator.stats().reserved_bytes;
  SegmentSnapshot segment = segment_of(allocator, a);
  EXPECT_EQ(segment.size, BlockAllocator::kSmallSegment);
  EXPECT_EQ(segment.blocks.size(), 4u);
  allocator.deallocate(b);
  allocator.deallocate(c);  // merges with b's block and the rest
  EXPECT_EQ(segment_of(allocator, a).blocks.size(), 2u);
  allocator.deallocate(a);
  segment = segment_of(allocator, a);
  ASSERT_EQ(segment.blocks.size(), 1u);
  EXPECT_EQ(segment.blocks[0].state, BlockSnapshot::State::free);
  EXPECT_EQ(allocator.stats().reserved_bytes, reserved);  // cached
  // The whole segment serves the next request on the stream.
  void* again = allocator.allocate(4096, ref_of(stream));
  EXPECT_EQ(again, a);
  allocator.deallocate(again);
}

TEST(CudaAllocator, ReusesAFreedBlockOnItsStreamAndWaitsForRecordedStreams) {
  EMBER_SKIP_WITHOUT_GPU();
  BlockAllocator& allocator = cuda::device_allocator(0);
  const cuda::Stream mine(0), other(0);
  void* first = allocator.allocate(4 << 20, ref_of(mine));
  allocator.deallocate(first);
  void* same_stream = allocator.allocate(4 << 20, ref_of(mine));
  EXPECT_EQ(same_stream, first);
  void* other_stream = allocator.allocate(4 << 20, ref_of(other));
  EXPECT_NE(other_stream, first);
  allocator.deallocate(other_stream);

  // `other` uses the block, and is held back: the block must wait for it.
  {
    StreamBlocker blocker(other.get());
    allocator.record_stream(same_stream, ref_of(other));
    allocator.deallocate(same_stream);
    void* while_busy = allocator.allocate(4 << 20, ref_of(mine));
    EXPECT_NE(while_busy, first);
    allocator.deallocate(while_busy);
    blocker.release();
    other.synchronize();
  }
  void* after = allocator.allocate(4 << 20, ref_of(mine));
  EXPECT_EQ(after, first);
  allocator.deallocate(after);

  // Through tensors: record_stream on a tensor's storage.
  const Tensor t = ones({1024}, TensorOptions(DType::f32, Device::cuda(0)));
  cuda::record_stream(t, other.get(), 0);
  EXPECT_NE(error_of([&] {
              cuda::record_stream(ones({3}), other.get(), 0);
            }).find("neither a CUDA tensor nor pinned"),
            std::string::npos);
}

TEST(CudaAllocator, OutOfMemorySaysWhatWasAskedAndWhatIsHeld) {
  EMBER_SKIP_WITHOUT_GPU();
  Allocator& allocator = allocator_for(Device::cuda(0));
  const size_t ooms = allocator.stats().num_ooms;
  const std::string message = error_of([] {
    empty({int64_t{1} << 48}, TensorOptions(DType::f32, Device::cuda(0)));  // 1 PiB
  });
  for (const char* part : {"CUDA out of memory on cuda:0: tried to allocate 1.00 PiB",
                           "reserved by ember", "allocated", "free on the device of", "GiB total",
                           "batch size", "empty_cache()", "Allocator statistics"}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  }
  EXPECT_EQ(allocator.stats().num_ooms, ooms + 1);
  // The device still works.
  EXPECT_EQ(sum(ones({10}, TensorOptions(DType::f32, Device::cuda(0)))).item<double>(), 10.0);
}

TEST(CudaAllocator, NewTensorsArePoisonedWithNaN) {
  EMBER_SKIP_WITHOUT_GPU();
  // tests/cuda/cuda_test.cpp turns poisoning on for this whole binary.
  ASSERT_TRUE(cuda::poison_allocations());
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::f64}) {
    const Tensor fresh = empty({1000}, TensorOptions(dtype, Device::cuda(0)));
    const Tensor host = fresh.to(Device::cpu()).to(DType::f64);
    for (int64_t i = 0; i < 1000; ++i)
      ASSERT_TRUE(std::isnan(host.data<double>()[i])) << dtype << " element " << i;
  }
  cuda::set_poison_allocations(false);
  EXPECT_FALSE(cuda::device_allocator(0).poison());
  cuda::set_poison_allocations(true);
  EXPECT_TRUE(cuda::device_allocator(0).poison());
}

TEST(CudaAllocator, EmptyCacheGivesTheUnusedSegmentsBack) {
  EMBER_SKIP_WITHOUT_GPU();
  Allocator& allocator = allocator_for(Device::cuda(0));
  { const Tensor t = empty({64 << 20}, TensorOptions(DType::f32, Device::cuda(0))); }
  EXPECT_GE(allocator.stats().reserved_bytes, allocator.stats().allocated_bytes + (256u << 20));
  cuda::empty_cache();
  for (const SegmentSnapshot& segment : cuda::device_allocator(0).snapshot()) {
    bool used = false;
    for (const BlockSnapshot& block : segment.blocks)
      used = used || block.state != BlockSnapshot::State::free;
    EXPECT_TRUE(used) << "an unused segment of " << segment.size << " bytes stayed";
  }
}

TEST(CudaPinned, NonBlockingCopiesRoundTrip) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(3);
  const Tensor source = uniform({1000, 37}, -1.0, 1.0, DType::f32, &generator);
  EXPECT_FALSE(source.is_pinned());
  const Tensor pinned = source.pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_TRUE(pinned.is_cpu());
  EXPECT_TRUE(pinned.pin_memory().is_same(pinned));
  const Tensor device = pinned.to(Device::cuda(0), /*non_blocking=*/true);
  const Tensor back = (device * 2.0).to(Device::cpu(), /*non_blocking=*/true);
  EXPECT_TRUE(back.is_pinned());  // an asynchronous copy to the host lands in pinned memory
  EMBER_CUDA_CHECK(cudaDeviceSynchronize());
  const Tensor expected = source * 2.0;
  EXPECT_EQ(std::memcmp(back.data_ptr(), expected.data_ptr(), expected.nbytes()), 0);
  // Unpinned memory with non_blocking: a synchronous copy, as without it.
  const Tensor plain = source.to(Device::cuda(0), true).to(Device::cpu(), false);
  EXPECT_FALSE(plain.is_pinned());
  EXPECT_EQ(std::memcmp(plain.data_ptr(), source.data_ptr(), source.nbytes()), 0);
  EXPECT_NE(error_of([&] { device.pin_memory(); }).find("only CPU tensors"), std::string::npos);
}

TEST(CudaPinned, APinnedBlockIsNotReusedWhileACopyFromItRuns) {
  EMBER_SKIP_WITHOUT_GPU();
  cuda::pinned_host_allocator().empty_cache();  // ours is then the only large pinned segment
  const cuda::Stream stream(0);
  const cuda::StreamGuard guard(0, stream.get());
  Tensor pinned = full({1 << 20}, 3.0).pin_memory();
  void* block = pinned.storage()->data();
  // The device memory of the copy is cached first: no cudaMalloc while the stream is held back.
  { const Tensor warm = empty({1 << 20}, TensorOptions(DType::f32, Device::cuda(0))); }
  Tensor device;
  {
    StreamBlocker blocker(stream.get());
    device = pinned.to(Device::cuda(0), /*non_blocking=*/true);  // queued behind the blocker
    pinned = Tensor();                                           // freed while the copy waits
    Tensor next = empty_pinned({1 << 20});
    EXPECT_NE(next.storage()->data(), block);
    next.fill_(-1.0);
    blocker.release();
  }
  stream.synchronize();
  EXPECT_EQ(sum(device).item<double>(), 3.0 * (1 << 20));
  // Once the copy is done the block is free again.
  const Tensor later = empty_pinned({1 << 20});
  EXPECT_EQ(later.storage()->data(), block);
}

TEST(CudaEvent, TimesWorkAndOrdersStreams) {
  EMBER_SKIP_WITHOUT_GPU();
  cuda::Event start(/*enable_timing=*/true), stop(/*enable_timing=*/true);
  EXPECT_FALSE(start.recorded());
  EXPECT_TRUE(start.query());
  const Tensor x = ones({1 << 24}, TensorOptions(DType::f32, Device::cuda(0)));
  start.record(0);
  Tensor y = x;
  for (int i = 0; i < 10; ++i)
    y = y * 1.0001;
  stop.record(0);
  stop.synchronize();
  EXPECT_TRUE(stop.query());
  EXPECT_GT(start.elapsed_ms(stop), 0.0f);

  // Another stream waits for the event instead of the host.
  const cuda::Stream consumer(0, cuda::Stream::Kind::non_blocking);
  cuda::Event produced;
  Tensor z;
  z = x * 2.0;
  produced.record(0);
  produced.wait(consumer.get());
  Tensor total;
  {
    const cuda::StreamGuard guard(0, consumer.get());
    total = sum(z);
  }
  consumer.synchronize();
  EXPECT_EQ(total.item<double>(), 2.0 * (1 << 24));
  EXPECT_NE(error_of([&] { produced.elapsed_ms(stop); }).find("need timing"), std::string::npos);
  cuda::Event never(true);
  EXPECT_NE(error_of([&] { never.elapsed_ms(stop); }).find("recorded first"), std::string::npos);
}

TEST(CudaStream, PoolAndOwnedStreamsRunOps) {
  EMBER_SKIP_WITHOUT_GPU();
  std::vector<cudaStream_t> seen;
  for (int i = 0; i < cuda::kStreamPoolSize; ++i)
    seen.push_back(cuda::stream_from_pool(0));
  for (size_t i = 1; i < seen.size(); ++i)
    EXPECT_NE(seen[i], seen[0]);
  EXPECT_EQ(cuda::stream_from_pool(0), seen[0]);  // round robin
  cuda::Stream owned(0);
  cuda::Stream moved = std::move(owned);
  EXPECT_EQ(owned.get(), nullptr);
  const Tensor x = ones({4096}, TensorOptions(DType::f32, Device::cuda(0)));
  Tensor y;
  {
    const cuda::StreamGuard guard(0, moved.get());
    y = sum(x * 3.0);
  }
  moved.synchronize();
  EXPECT_TRUE(moved.query());
  EXPECT_EQ(y.item<double>(), 3.0 * 4096);
}

TEST(CudaDevice, PropertiesDescribeEveryGpu) {
  EMBER_SKIP_WITHOUT_GPU();
  for (int i = 0; i < cuda_device_count(); ++i) {
    const cuda::DeviceProperties properties = cuda::device_properties(i);
    EXPECT_FALSE(properties.name.empty());
    EXPECT_GT(properties.total_memory, size_t{1} << 30);
    EXPECT_GE(properties.major, 8);  // ember is built for sm_80 and up
    EXPECT_GT(properties.multiprocessor_count, 0);
    EXPECT_NE(properties.str().find("sm_"), std::string::npos) << properties.str();
    const auto [free, total] = cuda::memory_info(i);
    EXPECT_LE(free, total);
    EXPECT_GT(total, 0u);
  }
  EXPECT_NE(error_of([] { cuda::device_properties(cuda_device_count()); }).find("only"),
            std::string::npos);
}

TEST(CudaDevice, GuardRestoresTheDeviceWhenAnErrorUnwinds) {
  EMBER_SKIP_WITHOUT_GPU();
  int before = -1;
  EMBER_CUDA_CHECK(cudaGetDevice(&before));
  const int last = cuda_device_count() - 1;
  try {
    const cuda::DeviceGuard guard(last);
    int inside = -1;
    EMBER_CUDA_CHECK(cudaGetDevice(&inside));
    EXPECT_EQ(inside, last);
    EMBER_FAIL("thrown inside the guard");
  } catch (const Error&) {
  }
  int after = -1;
  EMBER_CUDA_CHECK(cudaGetDevice(&after));
  EXPECT_EQ(after, before);
  // A guard for a device that does not exist throws and leaves the device as it was.
  EXPECT_FALSE(error_of([&] { const cuda::DeviceGuard guard(last + 1); }).empty());
  EMBER_CUDA_CHECK(cudaGetDevice(&after));
  EXPECT_EQ(after, before);
  // set_device makes a GPU current and refuses one that is not there, naming it.
  cuda::set_device(last);
  EMBER_CUDA_CHECK(cudaGetDevice(&after));
  EXPECT_EQ(after, last);
  EXPECT_EQ(cuda::current_device(), last);
  EXPECT_NE(error_of([&] { cuda::set_device(last + 1); }).find("cuda:" + std::to_string(last + 1)),
            std::string::npos);
  cuda::set_device(before);
  // ... and leaves no error behind for the next kernel launch's check to report as its own.
  EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
  EXPECT_EQ(sum(ones({4}, TensorOptions(DType::f32, Device::cuda(before)))).item<double>(), 4.0);
}

#endif  // EMBER_WITH_CUDA

}  // namespace
}  // namespace ember::testing
