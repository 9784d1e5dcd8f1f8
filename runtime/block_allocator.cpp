#include "runtime/block_allocator.h"

#include <cstdio>
#include <limits>

#include "runtime/error.h"

namespace ember {

std::string format_bytes(size_t bytes) {
  if (bytes < 1024) return detail::concat(bytes, " B");
  static const char* const units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  double value = static_cast<double>(bytes) / 1024.0;
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < std::size(units)) {
    value /= 1024.0;
    ++unit;
  }
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f %s", value, units[unit]);
  return text;
}

bool BlockAllocator::PoolOrder::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return a->address < b->address;
}

BlockAllocator::BlockAllocator(std::unique_ptr<MemorySource> source) : source_(std::move(source)) {
  EMBER_CHECK(source_ != nullptr, "BlockAllocator: no memory source");
}

BlockAllocator::~BlockAllocator() {
  for (auto& [event, block] : pending_) {
    source_->synchronize_event(event);
    source_->destroy_event(event);
  }
  for (auto& [address, first] : segments_) {
    source_->free(reinterpret_cast<void*>(address));
    for (Block* block = first; block != nullptr;) {
      Block* next = block->next;
      delete block;
      block = next;
    }
  }
}

BlockAllocator::Pool& BlockAllocator::pool_of(const Block* block) {
  return block->small_pool ? small_pool_ : large_pool_;
}

size_t BlockAllocator::round_size(size_t nbytes) {
  if (nbytes == 0) return kRounding;  // a unique pointer for empty tensors
  return (nbytes + kRounding - 1) / kRounding * kRounding;
}

size_t BlockAllocator::segment_size(size_t size) {
  if (size <= kSmallRequest) return kSmallSegment;
  if (size < kLargeSegment / 2) return kLargeSegment;
  return (size + kLargeRounding - 1) / kLargeRounding * kLargeRounding;
}

void* BlockAllocator::allocate(size_t nbytes) {
  return allocate(nbytes, source_->current_stream());
}

void* BlockAllocator::allocate(size_t nbytes, StreamRef stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++stats_.num_allocs;
  // Beyond this, rounding would overflow; no device has that much memory anyway.
  constexpr size_t kLargest = std::numeric_limits<size_t>::max() / 4;
  if (nbytes > kLargest) {
    ++stats_.num_ooms;
    throw_error(out_of_memory_message(nbytes));
  }
  process_events();
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallRequest;
  Block* block = take_free_block(small, stream, size);
  if (block != nullptr) {
    ++stats_.num_cache_hits;
  } else {
    block = new_segment(small, stream, size);
  }
  // Split off what the request does not need when the rest is worth keeping: any 512 B in the
  // small pool; in the large pool, more than a small request (smaller rests would only serve
  // small requests, which have their own pool).
  const size_t rest = block->size - size;
  if (small ? rest >= kRounding : rest > kSmallRequest) {
    auto* remainder = new Block();
    remainder->address = block->address + size;
    remainder->size = rest;
    remainder->stream = block->stream;
    remainder->small_pool = block->small_pool;
    remainder->prev = block;
    remainder->next = block->next;
    if (block->next != nullptr) block->next->prev = remainder;
    block->next = remainder;
    block->size = size;
    pool_of(remainder).insert(remainder);
  }
  block->allocated = true;
  void* ptr = reinterpret_cast<void*>(block->address);
  allocated_.emplace(ptr, block);
  stats_.allocated_bytes += block->size;
  if (stats_.allocated_bytes > stats_.peak_allocated_bytes)
    stats_.peak_allocated_bytes = stats_.allocated_bytes;
  if (poison_) source_->fill(ptr, block->size, 0xFF, stream);
  return ptr;
}

BlockAllocator::Block* BlockAllocator::take_free_block(bool small, StreamRef stream, size_t size) {
  Pool& pool = small ? small_pool_ : large_pool_;
  Block key;
  key.stream = stream;
  key.size = size;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* block = *it;
  pool.erase(it);
  return block;
}

BlockAllocator::Block* BlockAllocator::new_segment(bool small, StreamRef stream, size_t size) {
  const size_t bytes = segment_size(size);
  const auto from_the_source = [&] { return source_->allocate(bytes); };
  void* ptr = count_system_alloc(stats_, from_the_source);
  if (ptr == nullptr) {
    // Cached segments of other sizes or streams may be what is missing.
    release_cached();
    ptr = count_system_alloc(stats_, from_the_source);
  }
  if (ptr == nullptr) {
    ++stats_.num_ooms;
    throw_error(out_of_memory_message(size));
  }
  auto* block = new Block();
  block->address = reinterpret_cast<uintptr_t>(ptr);
  block->size = bytes;
  block->stream = stream;
  block->small_pool = small;
  segments_.emplace(block->address, block);
  stats_.reserved_bytes += bytes;
  ++stats_.num_segments;
  return block;
}

void BlockAllocator::deallocate(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_.find(ptr);
  EMBER_CHECK(it != allocated_.end() && it->second->pending_events == 0,
              "caching allocator: freeing a pointer it did not allocate, or freed already (", ptr,
              ")");
  Block* block = it->second;
  stats_.allocated_bytes -= block->size;
  ++stats_.num_frees;
  if (block->stream_uses.empty()) {
    allocated_.erase(it);
    free_block(block);
    return;
  }
  // Work on the other streams may still read or write the block: it waits for their events.
  for (const StreamRef& use : block->stream_uses) {
    void* event = source_->record_event(use);
    pending_.emplace_back(event, block);
    ++block->pending_events;
  }
  block->stream_uses.clear();
}

void BlockAllocator::free_block(Block* block) {
  block->allocated = false;
  Pool& pool = pool_of(block);
  // Merge into the block at the lower address, so a segment's first block never dies.
  if (Block* next = block->next; next != nullptr && !next->allocated) {
    pool.erase(next);
    block->size += next->size;
    block->next = next->next;
    if (block->next != nullptr) block->next->prev = block;
    delete next;
  }
  if (Block* prev = block->prev; prev != nullptr && !prev->allocated) {
    pool.erase(prev);
    prev->size += block->size;
    prev->next = block->next;
    if (prev->next != nullptr) prev->next->prev = prev;
    delete block;
    block = prev;
  }
  pool.insert(block);
}

void BlockAllocator::process_events() {
  for (size_t i = 0; i < pending_.size();) {
    auto [event, block] = pending_[i];
    if (!source_->event_completed(event)) {
      ++i;
      continue;
    }
    source_->destroy_event(event);
    pending_[i] = pending_.back();
    pending_.pop_back();
    if (--block->pending_events == 0) {
      allocated_.erase(reinterpret_cast<void*>(block->address));
      free_block(block);
    }
  }
}

void BlockAllocator::release_cached() {
  for (auto& [event, block] : pending_) {
    source_->synchronize_event(event);
    source_->destroy_event(event);
    if (--block->pending_events == 0) {
      allocated_.erase(reinterpret_cast<void*>(block->address));
      free_block(block);
    }
  }
  pending_.clear();
  for (auto it = segments_.begin(); it != segments_.end();) {
    Block* block = it->second;
    if (block->allocated || block->next != nullptr) {  // some of it is in use
      ++it;
      continue;
    }
    pool_of(block).erase(block);
    source_->free(reinterpret_cast<void*>(block->address));
    stats_.reserved_bytes -= block->size;
    --stats_.num_segments;
    delete block;
    it = segments_.erase(it);
  }
}

void BlockAllocator::record_stream(void* ptr, StreamRef stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = allocated_.find(ptr);
  EMBER_CHECK(it != allocated_.end() && it->second->pending_events == 0, "record_stream: pointer ",
              ptr,
              " is not a live block of this allocator (pass the pointer allocate returned, "
              "which is the storage's data, not a view's)");
  if (stream != it->second->stream) it->second->stream_uses.insert(stream);
}

AllocatorStats BlockAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void BlockAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

void BlockAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  release_cached();
}

void BlockAllocator::set_poison(bool poison) {
  std::lock_guard<std::mutex> lock(mutex_);
  poison_ = poison;
}

bool BlockAllocator::poison() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return poison_;
}

std::vector<SegmentSnapshot> BlockAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<SegmentSnapshot> segments;
  for (const auto& [address, first] : segments_) {
    SegmentSnapshot segment;
    segment.address = address;
    segment.stream = first->stream;
    segment.small_pool = first->small_pool;
    for (const Block* block = first; block != nullptr; block = block->next) {
      BlockSnapshot entry;
      entry.offset = block->address - address;
      entry.size = block->size;
      entry.state = block->pending_events > 0 ? BlockSnapshot::State::pending
                    : block->allocated        ? BlockSnapshot::State::allocated
                                              : BlockSnapshot::State::free;
      segment.size += block->size;
      segment.blocks.push_back(entry);
    }
    segments.push_back(std::move(segment));
  }
  return segments;
}

std::string BlockAllocator::out_of_memory_message(size_t nbytes) const {
  const auto [device_free, device_total] = source_->device_memory();
  std::string device;
  if (device_total > 0)
    device = detail::concat(", ", format_bytes(device_free), " free on the device of ",
                            format_bytes(device_total), " total");
  return detail::concat(
      source_->out_of_memory_prefix(), ": tried to allocate ", format_bytes(nbytes), " (",
      format_bytes(stats_.reserved_bytes), " reserved by ember, ",
      format_bytes(stats_.allocated_bytes), " allocated", device,
      "). Reduce the batch size, free tensors that are still referenced, or call empty_cache() "
      "if other programs need the memory ember holds cached. Allocator statistics: ",
      stats_.str());
}

}  // namespace ember
