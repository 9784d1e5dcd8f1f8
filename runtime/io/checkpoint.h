// ember's checkpoint files: named tensors plus string metadata, laid out as safetensors.
//
//   [8 bytes: header length N, little-endian u64]
//   [N bytes: JSON header, space-padded so the data starts on an 8-byte boundary]
//       {"__metadata__": {"format": "ember", "format_version": "1",
//                         "crc32/<name>": "<8 hex digits>", ..., "ember.header_crc32": "...",
//                         <user keys>},
//        "<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ...}
//   [data: each tensor's bytes, row-major, little-endian, back to back in offset order]
//
// Any safetensors reader can load the tensors. ember also checks a CRC32 per tensor and one over
// the header, so a truncated file, a flipped byte or a bad header is refused with an error that
// says what is wrong, before any tensor is handed out: nothing is ever half-loaded.
//
// Saving writes `<path>.tmp-<pid>`, fsyncs it, renames it over `path` and fsyncs the directory:
// a crash at any moment leaves either the old file or the new one under the real name.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor.h"

namespace ember {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using Metadata = std::map<std::string, std::string>;

struct Checkpoint {
  NamedTensors tensors;  // in file order (by data offset)
  Metadata metadata;     // the user's keys only (format, checksums removed)

  bool contains(const std::string& name) const;
  // The tensor called `name`; an error listing the available names when there is none.
  const Tensor& at(const std::string& name) const;
  // The metadata value for `key`; an error when there is none.
  const std::string& meta(const std::string& key) const;
};

inline constexpr const char* kCheckpointFormatVersion = "1";

// Tensors on any device and in any layout are saved (copied to the CPU, made dense).
// Names must be unique and non-empty, and must not start with "__"; metadata keys must not
// start with "crc32/", "ember.", or be "format" / "format_version" (ember's own keys).
void save_checkpoint(const std::string& path, const NamedTensors& tensors,
                     const Metadata& metadata = {});
// Loads every tensor onto the CPU. Throws ember::Error naming the path and the problem.
Checkpoint load_checkpoint(const std::string& path);

// The file's safetensors dtype code: "F32", "F64", "F16", "BF16", "I64", "I32", "U8", "BOOL".
const char* safetensors_dtype(DType dtype);

}  // namespace ember
