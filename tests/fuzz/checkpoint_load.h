// The check both checkpoint targets make: the bytes, as a file, either load or are refused with an
// ember::Error; a checkpoint that loads saves and loads again to the same tensors and metadata.
#pragma once

#include <cstring>
#include <string>

#include "runtime/error.h"
#include "runtime/io/checkpoint.h"
#include "tests/fuzz/fuzz_target.h"

namespace ember::fuzz {

inline bool same_checkpoint(const Checkpoint& a, const Checkpoint& b) {
  if (a.metadata != b.metadata || a.tensors.size() != b.tensors.size()) return false;
  for (size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& [name_a, tensor_a] = a.tensors[i];
    const auto& [name_b, tensor_b] = b.tensors[i];
    if (name_a != name_b || tensor_a.dtype() != tensor_b.dtype() ||
        tensor_a.sizes() != tensor_b.sizes() ||
        std::memcmp(tensor_a.data_ptr(), tensor_b.data_ptr(), tensor_a.nbytes()) != 0)
      return false;
  }
  return true;
}

// save_checkpoint refuses what ember itself never writes; another writer's file may hold it.
inline bool saveable(const Checkpoint& checkpoint) {
  for (const auto& [name, tensor] : checkpoint.tensors)
    if (name.empty() || name.rfind("__", 0) == 0) return false;
  return true;
}

inline void load_and_check(const std::string& bytes) {
  const std::string path = scratch_file("input.ckpt", bytes.data(), bytes.size());
  Checkpoint loaded;
  try {
    loaded = load_checkpoint(path);
  } catch (const Error&) {
    return;  // refused, with a message
  }
  if (!saveable(loaded)) return;
  const std::string again = scratch_file("again.ckpt", "", 0);
  save_checkpoint(again, loaded.tensors, loaded.metadata);
  if (!same_checkpoint(loaded, load_checkpoint(again)))
    property_failed("a loaded checkpoint saved and loaded again differs");
}

}  // namespace ember::fuzz
