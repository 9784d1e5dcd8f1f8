// TensorBoard event files read back in tests: the TFRecord framing, its CRCs checked, and the
// Event fields the TensorboardLogger writes (engines/tensorboard.h has the layout).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "engines/tensorboard.h"
#include "tests/engines/fixtures.h"

namespace ember::engines::testing {

struct Event {
  double wall_time = 0;
  int64_t step = 0;
  std::string file_version;                            // the first record's "brain.Event:2"
  std::vector<std::pair<std::string, float>> scalars;  // (tag, simple_value), in file order
};

// Little-endian integer of `bytes` bytes at `at`.
inline uint64_t little_endian(const std::string& data, size_t at, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i)
    value = value << 8 | static_cast<unsigned char>(data[at + static_cast<size_t>(i)]);
  return value;
}

// A protocol-buffer reader over one message: fields (number, wire type) and their payloads.
class ProtoReader {
 public:
  explicit ProtoReader(std::string message) : message_(std::move(message)) {}
  bool done() const { return at_ >= message_.size(); }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; at_ < message_.size(); shift += 7) {
      const auto byte = static_cast<unsigned char>(message_[at_++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) break;
    }
    return value;
  }
  uint64_t fixed(int bytes) {
    const uint64_t value = little_endian(message_, at_, bytes);
    at_ += static_cast<size_t>(bytes);
    return value;
  }
  std::string bytes() {
    const size_t length = static_cast<size_t>(varint());
    std::string value = message_.substr(at_, length);
    at_ += length;
    return value;
  }

 private:
  std::string message_;
  size_t at_ = 0;
};

inline Event parse_event(const std::string& data) {
  Event event;
  ProtoReader reader(data);
  while (!reader.done()) {
    const uint64_t key = reader.varint();
    const uint64_t field = key >> 3, wire_type = key & 7;
    if (field == 1 && wire_type == 1) {
      const uint64_t bits = reader.fixed(8);
      std::memcpy(&event.wall_time, &bits, sizeof(bits));
    } else if (field == 2 && wire_type == 0) {
      event.step = static_cast<int64_t>(reader.varint());
    } else if (field == 3 && wire_type == 2) {
      event.file_version = reader.bytes();
    } else if (field == 5 && wire_type == 2) {
      // Summary { repeated Value value = 1 }, Value { string tag = 1; float simple_value = 2 }.
      ProtoReader summary(reader.bytes());
      while (!summary.done()) {
        summary.varint();  // the key of `value`
        ProtoReader value(summary.bytes());
        std::pair<std::string, float> scalar;
        while (!value.done()) {
          const uint64_t value_key = value.varint();
          if (value_key >> 3 == 1) {
            scalar.first = value.bytes();
          } else {
            const auto bits = static_cast<uint32_t>(value.fixed(4));
            std::memcpy(&scalar.second, &bits, sizeof(bits));
          }
        }
        event.scalars.push_back(scalar);
      }
    } else {
      ADD_FAILURE() << "unexpected Event field " << field << " (wire type " << wire_type << ")";
      return event;
    }
  }
  return event;
}

// Every record of the event file at `path`, in order; a bad frame or CRC fails the test.
inline std::vector<Event> read_events(const std::string& path) {
  const std::string file = read_file(path);
  std::vector<Event> events;
  size_t at = 0;
  while (at < file.size()) {
    if (at + 12 > file.size()) {
      ADD_FAILURE() << path << ": a record header is cut at byte " << at;
      break;
    }
    const auto length = static_cast<size_t>(little_endian(file, at, 8));
    EXPECT_EQ(little_endian(file, at + 8, 4), tensorboard::masked_crc32c(file.data() + at, 8));
    if (at + 12 + length + 4 > file.size()) {
      ADD_FAILURE() << path << ": a record of " << length << " bytes is cut at byte " << at;
      break;
    }
    EXPECT_EQ(little_endian(file, at + 12 + length, 4),
              tensorboard::masked_crc32c(file.data() + at + 12, length));
    events.push_back(parse_event(file.substr(at + 12, length)));
    at += 12 + length + 4;
  }
  return events;
}

// The event files under logdir/tensorboard, by name (TensorBoard's reading order).
inline std::vector<std::string> event_files(const std::string& logdir) {
  std::vector<std::string> paths;
  for (const auto& entry : std::filesystem::directory_iterator(logdir + "/tensorboard"))
    paths.push_back(entry.path().string());
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace ember::engines::testing
