// TensorBoard event files, written by hand: TFRecord framing around Event protocol buffers.
//
//   record = u64 length (little-endian) | u32 masked_crc32c(length bytes) | data
//            | u32 masked_crc32c(data)
//   Event   { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5; }
//   Summary { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
//
// The first record of a file is an Event with file_version "brain.Event:2"; TensorBoard reads
// every file named events.out.tfevents.* in a directory (its writers add .<host>.<pid>.<counter>
// after the seconds so that names never repeat).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ember::engines::tensorboard {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord uses.
uint32_t crc32c(const void* data, size_t size);
// TFRecord's masking: ((crc >> 15) | (crc << 17)) + 0xa282ead8.
uint32_t masked_crc32c(const void* data, size_t size);
// One framed record holding `data`.
std::string frame_record(const std::string& data);

// Serialized Event protocol buffers.
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step,
                          const std::vector<std::pair<std::string, float>>& scalars);

}  // namespace ember::engines::tensorboard
