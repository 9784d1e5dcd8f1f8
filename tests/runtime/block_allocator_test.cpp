// The caching allocator's bookkeeping (runtime/block_allocator.h) on a fake memory source, so that
// splitting, merging, per-stream pools, record_stream events and the out-of-memory retry are
// proven on any machine; tests/cuda/allocator_test.cpp runs the same allocator on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/block_allocator.h"
#include "runtime/error.h"

namespace ember {
namespace {

// What the fake source did, shared with the test after the allocator owns the source.
struct FakeDevice {
  size_t capacity = size_t{1} << 30;
  size_t used = 0;
  int mallocs = 0;
  int frees = 0;
  int event_syncs = 0;
  std::map<void*, size_t> live;
  std::vector<std::unique_ptr<bool>> events;  // each event's "completed" flag
  StreamRef current{1, 0};
  std::chrono::milliseconds delay{0};  // how long each allocation takes
};

class FakeSource final : public MemorySource {
 public:
  explicit FakeSource(std::shared_ptr<FakeDevice> device) : device_(std::move(device)) {}
  std::string out_of_memory_prefix() const override { return "fake out of memory on fake:0"; }
  void* allocate(size_t size) override {
    std::this_thread::sleep_for(device_->delay);
    if (device_->used + size > device_->capacity) return nullptr;
    void* ptr = std::aligned_alloc(BlockAllocator::kRounding, size);
    device_->used += size;
    device_->live[ptr] = size;
    ++device_->mallocs;
    return ptr;
  }
  void free(void* ptr) override {
    device_->used -= device_->live.at(ptr);
    device_->live.erase(ptr);
    ++device_->frees;
    std::free(ptr);
  }
  StreamRef current_stream() const override { return device_->current; }
  void* record_event(StreamRef) override {
    device_->events.push_back(std::make_unique<bool>(false));
    return device_->events.back().get();
  }
  bool event_completed(void* event) override { return *static_cast<bool*>(event); }
  void synchronize_event(void* event) override {
    *static_cast<bool*>(event) = true;
    ++device_->event_syncs;
  }
  void destroy_event(void* event) override {
    auto& events = device_->events;
    events.erase(std::find_if(events.begin(), events.end(),
                              [&](const std::unique_ptr<bool>& e) { return e.get() == event; }));
  }
  void fill(void* ptr, size_t size, unsigned char value, StreamRef) override {
    std::memset(ptr, value, size);
  }
  std::pair<size_t, size_t> device_memory() const override {
    return {device_->capacity - device_->used, device_->capacity};
  }

 private:
  std::shared_ptr<FakeDevice> device_;
};

constexpr StreamRef kStreamA{1, 0};
constexpr StreamRef kStreamB{2, 0};
constexpr size_t kMiB = size_t{1} << 20;

struct Fixture {
  std::shared_ptr<FakeDevice> device = std::make_shared<FakeDevice>();
  BlockAllocator allocator{std::make_unique<FakeSource>(device)};
};

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an ember::Error";
  return "";
}

uintptr_t address(void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr);
}

// Every segment is covered by its blocks, and no two neighbours are both free (they merge).
void expect_consistent(const BlockAllocator& allocator) {
  for (const SegmentSnapshot& segment : allocator.snapshot()) {
    size_t offset = 0;
    for (size_t i = 0; i < segment.blocks.size(); ++i) {
      EXPECT_EQ(segment.blocks[i].offset, offset);
      offset += segment.blocks[i].size;
      if (i > 0) {
        EXPECT_FALSE(segment.blocks[i].state == BlockSnapshot::State::free &&
                     segment.blocks[i - 1].state == BlockSnapshot::State::free)
            << "free neighbours at block " << i;
      }
    }
    EXPECT_EQ(offset, segment.size);
  }
}

TEST(BlockAllocator, SmallRequestsSplitOneSegmentAndMergeBackInAnyFreeOrder) {
  const std::vector<size_t> requests = {1000, 3000, 512, 70000};
  std::vector<size_t> order = {0, 1, 2, 3};
  do {
    Fixture f;
    std::vector<void*> ptrs;
    for (size_t bytes : requests)
      ptrs.push_back(f.allocator.allocate(bytes, kStreamA));
    // One 2 MiB segment, the blocks back to back: 1024, 3072, 512, 70144 bytes.
    EXPECT_EQ(f.device->mallocs, 1);
    EXPECT_EQ(address(ptrs[1]), address(ptrs[0]) + 1024);
    EXPECT_EQ(address(ptrs[2]), address(ptrs[1]) + 3072);
    EXPECT_EQ(address(ptrs[3]), address(ptrs[2]) + 512);
    AllocatorStats stats = f.allocator.stats();
    EXPECT_EQ(stats.allocated_bytes, 1024u + 3072 + 512 + 70144);
    EXPECT_EQ(stats.reserved_bytes, 2 * kMiB);
    EXPECT_EQ(stats.num_segments, 1u);
    ASSERT_EQ(f.allocator.snapshot().size(), 1u);
    EXPECT_EQ(f.allocator.snapshot()[0].blocks.size(), 5u);  // four blocks and the rest
    for (size_t index : order) {
      f.allocator.deallocate(ptrs[index]);
      expect_consistent(f.allocator);
      EXPECT_EQ(f.allocator.stats().reserved_bytes, 2 * kMiB);
    }
    const std::vector<SegmentSnapshot> segments = f.allocator.snapshot();
    ASSERT_EQ(segments.size(), 1u);
    ASSERT_EQ(segments[0].blocks.size(), 1u);
    EXPECT_EQ(segments[0].blocks[0].size, 2 * kMiB);
    EXPECT_EQ(segments[0].blocks[0].state, BlockSnapshot::State::free);
    stats = f.allocator.stats();
    EXPECT_EQ(stats.allocated_bytes, 0u);
    EXPECT_EQ(stats.num_frees, 4u);
    EXPECT_EQ(f.device->frees, 0);  // cached, not given back
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST(BlockAllocator, AFreedHoleIsReusedByTheBestFittingRequest) {
  Fixture f;
  void* a = f.allocator.allocate(4096, kStreamA);
  void* b = f.allocator.allocate(8192, kStreamA);
  void* c = f.allocator.allocate(4096, kStreamA);
  f.allocator.deallocate(b);  // an 8 KiB hole between a and c
  void* d = f.allocator.allocate(5000, kStreamA);
  EXPECT_EQ(d, b);  // the hole fits best: the big rest of the segment stays whole
  void* e = f.allocator.allocate(3000, kStreamA);
  EXPECT_EQ(address(e), address(b) + 5120);  // what is left of the hole
  EXPECT_EQ(f.device->mallocs, 1);
  for (void* p : {a, c, d, e})
    f.allocator.deallocate(p);
  expect_consistent(f.allocator);
  EXPECT_EQ(f.allocator.snapshot()[0].blocks.size(), 1u);
}

TEST(BlockAllocator, SegmentSizesFollowThePools) {
  Fixture f;
  void* small = f.allocator.allocate(kMiB, kStreamA);           // the largest small request
  void* medium = f.allocator.allocate(5 * kMiB, kStreamA);      // a 20 MiB segment, split
  void* nearly = f.allocator.allocate(9 * kMiB + 1, kStreamB);  // 20 MiB, rest of ~11 MiB split
  void* big = f.allocator.allocate(50 * kMiB + 1, kStreamA);    // rounded up to 2 MiB steps
  std::map<uintptr_t, SegmentSnapshot> by_address;
  for (const SegmentSnapshot& s : f.allocator.snapshot())
    by_address[s.address] = s;
  ASSERT_EQ(by_address.size(), 4u);
  EXPECT_EQ(by_address.at(address(small)).size, 2 * kMiB);
  EXPECT_TRUE(by_address.at(address(small)).small_pool);
  EXPECT_EQ(by_address.at(address(medium)).size, 20 * kMiB);
  EXPECT_FALSE(by_address.at(address(medium)).small_pool);
  EXPECT_EQ(by_address.at(address(medium)).blocks.size(), 2u);
  EXPECT_EQ(by_address.at(address(nearly)).size, 20 * kMiB);
  EXPECT_EQ(by_address.at(address(big)).size, 52 * kMiB);
  // A large block whose rest would be a small request's size is not split: the block is whole.
  void* whole = f.allocator.allocate(51 * kMiB + 512, kStreamA);
  EXPECT_EQ(f.allocator.stats().reserved_bytes, (2 + 20 + 20 + 52 + 52) * kMiB);
  const size_t allocated = f.allocator.stats().allocated_bytes;
  f.allocator.deallocate(whole);
  EXPECT_EQ(allocated - f.allocator.stats().allocated_bytes, 52 * kMiB);
  for (void* p : {small, medium, nearly, big})
    f.allocator.deallocate(p);
  f.allocator.empty_cache();
  EXPECT_EQ(f.allocator.stats().reserved_bytes, 0u);
  EXPECT_EQ(f.device->used, 0u);
}

TEST(BlockAllocator, AFreedBlockIsReusedOnItsOwnStreamOnly) {
  Fixture f;
  void* a = f.allocator.allocate(1000, kStreamA);
  f.allocator.deallocate(a);
  const AllocatorStats before = f.allocator.stats();
  void* again = f.allocator.allocate(900, kStreamA);
  EXPECT_EQ(again, a);  // at once: ops on stream A are ordered after the last use
  EXPECT_EQ(f.allocator.stats().num_cache_hits, before.num_cache_hits + 1);
  f.allocator.deallocate(again);
  void* other = f.allocator.allocate(1000, kStreamB);
  EXPECT_NE(other, a);  // stream B may still be running work queued before the free
  EXPECT_EQ(f.device->mallocs, 2);
  EXPECT_EQ(f.allocator.stats().num_segments, 2u);
  f.allocator.deallocate(other);
  // A request without a stream goes to the source's current stream.
  f.device->current = kStreamB;
  EXPECT_EQ(f.allocator.allocate(1000), other);
}

TEST(BlockAllocator, RecordStreamDefersReuseUntilTheEventCompletes) {
  Fixture f;
  void* a = f.allocator.allocate(4 * kMiB, kStreamA);
  f.allocator.record_stream(a, kStreamA);  // its own stream: nothing to wait for
  f.allocator.record_stream(a, kStreamB);
  f.allocator.record_stream(a, kStreamB);  // once per stream
  f.allocator.deallocate(a);
  ASSERT_EQ(f.device->events.size(), 1u);
  EXPECT_EQ(f.allocator.stats().allocated_bytes, 0u);  // the user gave it back
  EXPECT_EQ(f.allocator.snapshot()[0].blocks[0].state, BlockSnapshot::State::pending);
  EXPECT_NE(error_of([&] { f.allocator.deallocate(a); }).find("freed already"), std::string::npos);

  void* b = f.allocator.allocate(4 * kMiB, kStreamA);
  EXPECT_NE(b, a);  // stream B may still use it
  f.allocator.deallocate(b);
  *f.device->events[0] = true;  // stream B's work is done
  void* c = f.allocator.allocate(4 * kMiB, kStreamA);
  EXPECT_EQ(c, a);
  EXPECT_TRUE(f.device->events.empty());
  f.allocator.deallocate(c);
  expect_consistent(f.allocator);
  EXPECT_EQ(f.allocator.snapshot()[0].blocks.size(), 1u);
  EXPECT_NE(error_of([&] { f.allocator.record_stream(&f, kStreamB); }).find("not a live block"),
            std::string::npos);
}

TEST(BlockAllocator, EmptyCacheWaitsForPendingBlocksAndKeepsSegmentsInUse) {
  Fixture f;
  void* pending = f.allocator.allocate(1000, kStreamA);
  void* held = f.allocator.allocate(3 * kMiB, kStreamA);
  void* cached = f.allocator.allocate(30 * kMiB, kStreamA);
  f.allocator.record_stream(pending, kStreamB);
  f.allocator.deallocate(pending);
  f.allocator.deallocate(cached);
  f.allocator.empty_cache();
  EXPECT_EQ(f.device->event_syncs, 1);
  EXPECT_TRUE(f.device->events.empty());
  EXPECT_EQ(f.allocator.stats().num_segments, 1u);  // only the segment of `held`
  EXPECT_EQ(f.allocator.stats().reserved_bytes, 20 * kMiB);
  EXPECT_EQ(f.device->frees, 2);
  f.allocator.deallocate(held);
  f.allocator.empty_cache();
  EXPECT_EQ(f.allocator.stats().reserved_bytes, 0u);
  EXPECT_EQ(f.device->live.size(), 0u);
}

TEST(BlockAllocator, OutOfMemoryGivesTheCacheBackAndRetriesOnce) {
  Fixture f;
  f.device->capacity = 22 * kMiB;
  void* cached = f.allocator.allocate(1000, kStreamA);
  f.allocator.deallocate(cached);                          // 2 MiB cached on stream A
  void* held = f.allocator.allocate(1000, kStreamB);       // 2 MiB in use on stream B
  void* large = f.allocator.allocate(5 * kMiB, kStreamA);  // 20 MiB: only once the cache is freed
  EXPECT_EQ(f.device->frees, 1);
  EXPECT_EQ(f.allocator.stats().num_ooms, 0u);
  EXPECT_EQ(f.allocator.stats().reserved_bytes, 22 * kMiB);

  const std::string message = error_of([&] { f.allocator.allocate(30 * kMiB, kStreamA); });
  for (const char* part :
       {"fake out of memory on fake:0: tried to allocate 30.00 MiB", "22.00 MiB reserved",
        "5.00 MiB allocated", "0 B free on the device of 22.00 MiB total", "batch size",
        "empty_cache()", "Allocator statistics: "}) {
    EXPECT_NE(message.find(part), std::string::npos) << part << " in: " << message;
  }
  EXPECT_EQ(f.allocator.stats().num_ooms, 1u);
  // An absurd request fails the same way instead of overflowing.
  EXPECT_NE(error_of([&] {
              f.allocator.allocate(size_t{1} << 50, kStreamA);
            }).find("tried to allocate 1.00 PiB"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              f.allocator.allocate(std::numeric_limits<size_t>::max());
            }).find("fake out of memory"),
            std::string::npos);
  EXPECT_EQ(f.allocator.stats().num_ooms, 3u);
  // The allocator still works after the failures.
  f.allocator.deallocate(large);
  void* after = f.allocator.allocate(5 * kMiB, kStreamA);
  EXPECT_EQ(after, large);
  f.allocator.deallocate(after);
  f.allocator.deallocate(held);
}

TEST(BlockAllocator, PoisonFillsNewBlocksWithNaN) {
  Fixture f;
  EXPECT_FALSE(f.allocator.poison());
  f.allocator.set_poison(true);
  for (size_t bytes : {size_t{4}, size_t{1000}, 3 * kMiB}) {
    auto* values = static_cast<float*>(f.allocator.allocate(bytes, kStreamA));
    for (size_t i = 0; i < bytes / sizeof(float); ++i)
      ASSERT_TRUE(std::isnan(values[i])) << i;
    values[0] = 1.0f;
    f.allocator.deallocate(values);
    // A reused block is poisoned again.
    values = static_cast<float*>(f.allocator.allocate(bytes, kStreamA));
    EXPECT_TRUE(std::isnan(values[0]));
    f.allocator.deallocate(values);
  }
}

TEST(BlockAllocator, CountsRequestsAndResetsThePeak) {
  Fixture f;
  void* empty_a = f.allocator.allocate(0, kStreamA);
  void* empty_b = f.allocator.allocate(0, kStreamA);
  EXPECT_NE(empty_a, nullptr);
  EXPECT_NE(empty_a, empty_b);
  void* big = f.allocator.allocate(8 * kMiB, kStreamA);
  AllocatorStats stats = f.allocator.stats();
  EXPECT_EQ(stats.num_allocs, 3u);
  EXPECT_EQ(stats.num_cache_hits, 1u);  // the second empty block came from the first segment
  EXPECT_EQ(stats.peak_allocated_bytes, 8 * kMiB + 1024);
  f.allocator.deallocate(big);
  f.allocator.deallocate(empty_a);
  stats = f.allocator.stats();
  EXPECT_EQ(stats.peak_allocated_bytes, 8 * kMiB + 1024);
  EXPECT_EQ(stats.num_frees, 2u);
  f.allocator.reset_peak();
  EXPECT_EQ(f.allocator.stats().peak_allocated_bytes, 512u);
  EXPECT_NE(stats.str().find("2 frees"), std::string::npos) << stats.str();
  EXPECT_NE(error_of([&] { f.allocator.deallocate(&f); }).find("did not allocate"),
            std::string::npos);
  f.allocator.deallocate(nullptr);  // a no-op
  f.allocator.deallocate(empty_b);
}

// Each call for a new segment is counted and timed, failed ones and the retry after an
// out-of-memory included; a request the cache serves costs no call.
TEST(BlockAllocator, CountsAndTimesTheCallsForNewSegments) {
  Fixture f;
  f.device->delay = std::chrono::milliseconds(20);
  void* big = f.allocator.allocate(8 * kMiB, kStreamA);
  AllocatorStats stats = f.allocator.stats();
  EXPECT_EQ(stats.num_system_allocs, 1u);
  EXPECT_GE(stats.system_alloc_seconds, 0.02);
  f.allocator.deallocate(big);
  big = f.allocator.allocate(8 * kMiB, kStreamA);  // the cached segment
  EXPECT_EQ(f.allocator.stats().num_system_allocs, 1u);
  f.device->capacity = f.device->used;  // nothing more to give
  EXPECT_NE(error_of([&] { f.allocator.allocate(64 * kMiB, kStreamA); }).find("out of memory"),
            std::string::npos);
  stats = f.allocator.stats();
  EXPECT_EQ(stats.num_system_allocs, 3u) << "the failed call and its retry";
  EXPECT_GE(stats.system_alloc_seconds, 0.06);
  EXPECT_NE(stats.str().find("3 allocations from the system"), std::string::npos) << stats.str();
  f.allocator.deallocate(big);
}

TEST(BlockAllocator, FormatsByteCounts) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(1023), "1023 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(20 * kMiB), "20.00 MiB");
  EXPECT_EQ(format_bytes(size_t{1} << 50), "1.00 PiB");
}

}  // namespace
}  // namespace ember
