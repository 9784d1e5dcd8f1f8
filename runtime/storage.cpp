#include "runtime/storage.h"

#include "runtime/allocator.h"
#include "runtime/cuda_hooks.h"

namespace ember {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  data_ = allocator_for(device).allocate(nbytes);
  owns_allocation_ = true;
}

Storage::Storage(size_t nbytes, Pinned) : nbytes_(nbytes), device_(Device::cpu()) {
  data_ = cuda_hooks::pinned_allocator().allocate(nbytes);
  owns_allocation_ = true;
  pinned_ = true;
}

Storage::Storage(void* data, size_t nbytes, Device device, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), device_(device), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (pinned_) {
    cuda_hooks::pinned_allocator().deallocate(data_);
  } else if (owns_allocation_) {
    allocator_for(device_).deallocate(data_);
  } else if (deleter_) {
    deleter_(data_);
  }
}

}  // namespace ember
