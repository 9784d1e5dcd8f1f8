// load_checkpoint on any bytes whose checksums are first made right for what they hold, so that
// the fuzzer's changes reach the checks behind the CRCs (entries, dtypes, shapes, data offsets,
// bool bytes) as a file from a buggy writer, or edited by hand, would.
#include <zlib.h>

#include <cstring>
#include <string>

#include "runtime/io/json.h"
#include "tests/fuzz/checkpoint_load.h"

namespace {

uint32_t crc32_of(const char* data, size_t size) {
  return static_cast<uint32_t>(
      crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data), static_cast<uInt>(size)));
}

// Writes `crc` as 8 hex digits over the 8 characters after the first `key_literal`; false when
// the literal is absent or too close to the end.
bool write_crc(std::string& text, const std::string& key_literal, uint32_t crc) {
  const size_t at = text.find(key_literal);
  if (at == std::string::npos || at + key_literal.size() + 8 > text.size()) return false;
  char hex[9];
  std::snprintf(hex, sizeof(hex), "%08x", crc);
  text.replace(at + key_literal.size(), 8, hex);
  return true;
}

// The file's layout (checkpoint.h): [u64 header length][JSON header][tensor data].
std::string with_checksums_repaired(std::string bytes) {
  using namespace ember;
  if (bytes.size() < 8) return bytes;
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  if (header_length > bytes.size() - 8) return bytes;
  const size_t data_begin = 8 + header_length;
  const size_t data_size = bytes.size() - data_begin;
  json::Value header;
  try {
    header = json::parse(std::string_view(bytes).substr(8, header_length));
  } catch (const Error&) {
    return bytes;
  }
  std::string prefix_and_header = bytes.substr(0, data_begin);
  for (const auto& [name, entry] : header.members()) {
    const json::Value* offsets = entry.find("data_offsets");
    int64_t begin = 0, end = 0;
    if (offsets == nullptr || !offsets->is_array() || offsets->items().size() != 2 ||
        !offsets->items()[0].to_int64(&begin) || !offsets->items()[1].to_int64(&end) || begin < 0 ||
        end < begin || static_cast<uint64_t>(end) > data_size)
      continue;
    write_crc(prefix_and_header, json::quote("crc32/" + name) + ":\"",
              crc32_of(bytes.data() + data_begin + begin, static_cast<size_t>(end - begin)));
  }
  // The header's own checksum is over the prefix and header with its value as eight zeros.
  const std::string key = "\"ember.header_crc32\":\"";
  if (write_crc(prefix_and_header, key, 0)) {
    write_crc(prefix_and_header, key, crc32_of(prefix_and_header.data(), prefix_and_header.size()));
  }
  return prefix_and_header + bytes.substr(data_begin);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ember::fuzz::load_and_check(
      with_checksums_repaired(std::string(reinterpret_cast<const char*>(data), size)));
  return 0;
}
