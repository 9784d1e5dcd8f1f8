// BlockAllocator: the bookkeeping of a CUDA caching allocator in the spirit of PyTorch's, kept
// apart from CUDA so that it can be tested on any machine with a fake memory source.
//
// - Requests round up to 512 B. Requests up to 1 MiB come from the small pool, larger ones from
//   the large pool.
// - Memory is taken from the source in segments (2 MiB for small requests, 20 MiB for large ones
//   below 10 MiB, else the request rounded up to 2 MiB) and split into blocks; a freed block
//   merges with its free neighbours, so a segment whose blocks are all free is one block again.
// - Pools are per stream: a block freed on stream S is reused at once by the next request on S
//   (ops on S are ordered after the last use), never by another stream. record_stream(ptr, T)
//   says the block is also used on stream T: when freed, an event is recorded on T and the block
//   returns to its pool only once the event has completed.
// - When the source has no memory left, the cached unused segments are given back and the
//   request is tried once more before it fails with an error that names the request, the
//   allocator's statistics and the device's free and total memory.
#pragma once

#include <compare>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/allocator.h"

namespace ember {

// A stream as the allocator sees it: an opaque handle (a cudaStream_t; 0 is the legacy default
// stream) and the device it belongs to (-1 for host memory, which has no stream of its own).
struct StreamRef {
  uintptr_t handle = 0;
  int device = -1;
  auto operator<=>(const StreamRef&) const = default;
};

// Where the memory and the events come from (cudaMalloc and CUDA events; a fake in tests).
class MemorySource {
 public:
  virtual ~MemorySource() = default;
  // The start of the out-of-memory error, e.g. "CUDA out of memory on cuda:0".
  virtual std::string out_of_memory_prefix() const = 0;
  // Exactly `size` bytes, or nullptr when there is no memory left (not an exception: the
  // allocator then frees its cache and tries again).
  virtual void* allocate(size_t size) = 0;
  virtual void free(void* ptr) = 0;
  // The stream a request without one is served on (the calling thread's current stream).
  virtual StreamRef current_stream() const = 0;
  // An event marking the work queued on `stream` so far; query it, wait for it, destroy it.
  virtual void* record_event(StreamRef stream) = 0;
  virtual bool event_completed(void* event) = 0;
  virtual void synchronize_event(void* event) = 0;
  virtual void destroy_event(void* event) = 0;
  // Sets `size` bytes at `ptr` to `value`, ordered on `stream` (for poisoning new blocks).
  virtual void fill(void* ptr, size_t size, unsigned char value, StreamRef stream) = 0;
  // Free and total bytes of the device, {0, 0} when unknown.
  virtual std::pair<size_t, size_t> device_memory() const = 0;
};

// What the allocator holds, for tests and for debugging fragmentation.
struct BlockSnapshot {
  size_t offset = 0;  // from the start of the segment
  size_t size = 0;
  enum class State { free, allocated, pending } state = State::free;  // pending: waiting on events
};
struct SegmentSnapshot {
  uintptr_t address = 0;
  size_t size = 0;
  StreamRef stream;
  bool small_pool = false;
  std::vector<BlockSnapshot> blocks;  // in address order, covering the segment
};

// "512 B", "2.00 MiB", "1.00 PiB".
std::string format_bytes(size_t bytes);

class BlockAllocator : public Allocator {
 public:
  static constexpr size_t kRounding = 512;                   // every block is a multiple
  static constexpr size_t kSmallRequest = size_t{1} << 20;   // <= 1 MiB: the small pool
  static constexpr size_t kSmallSegment = size_t{2} << 20;   // a small pool segment
  static constexpr size_t kLargeSegment = size_t{20} << 20;  // for large requests below 10 MiB
  static constexpr size_t kLargeRounding = size_t{2} << 20;  // larger requests round up to this

  explicit BlockAllocator(std::unique_ptr<MemorySource> source);
  ~BlockAllocator() override;  // gives every segment back (after waiting for pending events)
  BlockAllocator(const BlockAllocator&) = delete;
  BlockAllocator& operator=(const BlockAllocator&) = delete;

  // On the source's current stream.
  void* allocate(size_t nbytes) override;
  void* allocate(size_t nbytes, StreamRef stream);
  void deallocate(void* ptr) override;
  // Marks the block at `ptr` (a pointer allocate returned) as used by work queued on `stream`:
  // once freed, it is not reused before that work has completed.
  void record_stream(void* ptr, StreamRef stream);
  AllocatorStats stats() const override;
  void reset_peak() override;
  // Waits for the pending events, then gives every segment that holds no allocated block back.
  void empty_cache() override;
  // Every new block is filled with `value` bytes (0xFF: NaN in every floating dtype) on its
  // stream, so that a kernel that forgets to write its output is caught.
  void set_poison(bool poison);
  bool poison() const;
  std::vector<SegmentSnapshot> snapshot() const;

 private:
  struct Block;
  // Ordered by stream, then size, then address: the best fit on a stream is a lower_bound.
  struct PoolOrder {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, PoolOrder>;

  static size_t round_size(size_t nbytes);
  static size_t segment_size(size_t size);
  Pool& pool_of(const Block* block);
  Block* take_free_block(bool small, StreamRef stream, size_t size);
  Block* new_segment(bool small, StreamRef stream, size_t size);
  void free_block(Block* block);
  void process_events();
  void release_cached();
  std::string out_of_memory_message(size_t nbytes) const;

  const std::unique_ptr<MemorySource> source_;
  mutable std::mutex mutex_;
  Pool small_pool_;
  Pool large_pool_;
  std::map<uintptr_t, Block*> segments_;           // first block of each segment, by address
  std::unordered_map<void*, Block*> allocated_;    // handed out (or pending), by address
  std::vector<std::pair<void*, Block*>> pending_;  // events a freed block waits for
  AllocatorStats stats_;
  bool poison_ = false;

  struct Block {
    uintptr_t address = 0;
    size_t size = 0;
    StreamRef stream;
    bool small_pool = false;
    bool allocated = false;  // handed out, or freed but waiting for events
    Block* prev = nullptr;   // neighbours in the same segment
    Block* next = nullptr;
    std::set<StreamRef> stream_uses;  // other streams it was used on (record_stream)
    int pending_events = 0;
  };
};

}  // namespace ember
