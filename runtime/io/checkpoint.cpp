#include "runtime/io/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>

#include "runtime/autograd/grad_mode.h"
#include "runtime/io/json.h"
#include "runtime/io/read_file.h"

namespace ember {

static_assert(std::endian::native == std::endian::little,
              "checkpoint files are little-endian; a big-endian port must byte-swap");

namespace {

constexpr const char* kHeaderCrcKey = "ember.header_crc32";
constexpr const char* kCrcPrefix = "crc32/";
constexpr uint64_t kMaxHeaderBytes = 100u << 20;  // safetensors' own limit

struct DTypeCode {
  DType dtype;
  const char* code;
};
constexpr DTypeCode kDTypeCodes[] = {
    {DType::f32, "F32"}, {DType::f64, "F64"}, {DType::f16, "F16"}, {DType::bf16, "BF16"},
    {DType::i64, "I64"}, {DType::i32, "I32"}, {DType::u8, "U8"},   {DType::boolean, "BOOL"},
};

bool dtype_from_code(const std::string& code, DType* out) {
  for (const DTypeCode& entry : kDTypeCodes) {
    if (code == entry.code) {
      *out = entry.dtype;
      return true;
    }
  }
  return false;
}

uint32_t crc32_of(const void* data, size_t nbytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  const auto* bytes = static_cast<const Bytef*>(data);
  while (nbytes > 0) {  // zlib takes 32-bit lengths
    const uInt chunk = static_cast<uInt>(std::min<size_t>(nbytes, 1u << 30));
    crc = crc32(crc, bytes, chunk);
    bytes += chunk;
    nbytes -= chunk;
  }
  return static_cast<uint32_t>(crc);
}

std::string hex8(uint32_t value) {
  char buffer[9];
  std::snprintf(buffer, sizeof(buffer), "%08x", value);
  return buffer;
}

// The header's checksum covers the length prefix and the header text with the checksum's own
// value written as eight zeros.
uint32_t header_crc(const std::string& prefix_and_header, size_t value_pos) {
  std::string copy = prefix_and_header;
  copy.replace(value_pos, 8, "00000000");
  return crc32_of(copy.data(), copy.size());
}

// Where the 8 hex digits of the header checksum sit in prefix + header; npos when absent.
size_t header_crc_position(const std::string& prefix_and_header) {
  const std::string needle = std::string("\"") + kHeaderCrcKey + "\":\"";
  const size_t at = prefix_and_header.find(needle);
  if (at == std::string::npos) return at;
  return at + needle.size();
}

bool is_reserved_metadata_key(const std::string& key) {
  return key == "format" || key == "format_version" || key.rfind(kCrcPrefix, 0) == 0 ||
         key.rfind("ember.", 0) == 0;
}

// Writes all of `data` to fd, retrying short writes and EINTR.
void write_all(int fd, const char* data, size_t nbytes, const std::string& path) {
  while (nbytes > 0) {
    const ssize_t written = ::write(fd, data, nbytes);
    if (written < 0 && errno == EINTR) continue;
    EMBER_CHECK(written > 0, "save_checkpoint: cannot write '", path, "': ", std::strerror(errno),
                " (is the disk full?)");
    data += written;
    nbytes -= static_cast<size_t>(written);
  }
}

void fsync_directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::absolute(path).parent_path();
  const int fd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0) return;  // the rename is done; a directory we cannot open cannot be synced
  ::fsync(fd);
  ::close(fd);
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  EMBER_FAIL("load_checkpoint: '", path, "' ", why, "; the file is refused, nothing was loaded");
}

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  int64_t begin = 0;
  int64_t end = 0;
};

}  // namespace

const char* safetensors_dtype(DType dtype) {
  for (const DTypeCode& entry : kDTypeCodes) {
    if (entry.dtype == dtype) return entry.code;
  }
  EMBER_FAIL("checkpoint: dtype ", dtype, " has no safetensors code");
}

bool Checkpoint::contains(const std::string& name) const {
  return std::any_of(tensors.begin(), tensors.end(),
                     [&](const auto& t) { return t.first == name; });
}

const Tensor& Checkpoint::at(const std::string& name) const {
  for (const auto& [tensor_name, tensor] : tensors) {
    if (tensor_name == name) return tensor;
  }
  std::string names;
  for (const auto& entry : tensors)
    names += (names.empty() ? "" : ", ") + entry.first;
  EMBER_FAIL("checkpoint: no tensor named '", name, "' (it holds: ", names, ")");
}

const std::string& Checkpoint::meta(const std::string& key) const {
  auto it = metadata.find(key);
  EMBER_CHECK(it != metadata.end(), "checkpoint: no metadata key '", key, "'");
  return it->second;
}

void save_checkpoint(const std::string& path, const NamedTensors& tensors,
                     const Metadata& metadata) {
  NoGradGuard no_grad;
  std::set<std::string> names;
  std::vector<Tensor> dense;
  dense.reserve(tensors.size());
  for (const auto& [name, tensor] : tensors) {
    EMBER_CHECK(!name.empty() && name.rfind("__", 0) != 0, "save_checkpoint: tensor name '", name,
                "' is not allowed (names must be non-empty and not start with \"__\")");
    EMBER_CHECK(names.insert(name).second, "save_checkpoint: tensor name '", name,
                "' appears twice");
    EMBER_CHECK(tensor.defined(), "save_checkpoint: tensor '", name, "' is undefined");
    dense.push_back(tensor.to(Device::cpu()).contiguous());
  }
  for (const auto& [key, value] : metadata) {
    EMBER_CHECK(!is_reserved_metadata_key(key), "save_checkpoint: metadata key '", key,
                "' is reserved by ember (format, format_version, crc32/..., ember.*)");
  }

  json::Value header = json::Value::object();
  json::Value meta = json::Value::object();
  for (const auto& [key, value] : metadata)
    meta.members()[key] = json::Value::string(value);
  meta.members()["format"] = json::Value::string("ember");
  meta.members()["format_version"] = json::Value::string(kCheckpointFormatVersion);
  meta.members()[kHeaderCrcKey] = json::Value::string("00000000");
  int64_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = dense[i];
    const int64_t nbytes = static_cast<int64_t>(t.nbytes());
    std::vector<json::Value> shape;
    for (int64_t s : t.sizes())
      shape.push_back(json::Value::integer(s));
    header.members()[tensors[i].first] = json::Value::object({
        {"dtype", json::Value::string(safetensors_dtype(t.dtype()))},
        {"shape", json::Value::array(std::move(shape))},
        {"data_offsets",
         json::Value::array({json::Value::integer(offset), json::Value::integer(offset + nbytes)})},
    });
    meta.members()[kCrcPrefix + tensors[i].first] =
        json::Value::string(hex8(crc32_of(t.data_ptr(), t.nbytes())));
    offset += nbytes;
  }
  header.members()["__metadata__"] = std::move(meta);

  // Pad the header with spaces so that the data section starts on an 8-byte boundary.
  std::string text = json::write(header);
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string prefix_and_header(8, '\0');
  const uint64_t header_length = text.size();
  std::memcpy(prefix_and_header.data(), &header_length, 8);
  prefix_and_header += text;
  const size_t crc_pos = header_crc_position(prefix_and_header);
  const std::string crc = hex8(header_crc(prefix_and_header, crc_pos));
  prefix_and_header.replace(crc_pos, 8, crc);

  const std::string temporary = path + ".tmp-" + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  EMBER_CHECK(fd >= 0, "save_checkpoint: cannot create '", temporary, "': ", std::strerror(errno),
              " (does the directory exist and is it writable?)");
  try {
    write_all(fd, prefix_and_header.data(), prefix_and_header.size(), temporary);
    for (const Tensor& t : dense)
      write_all(fd, static_cast<const char*>(t.data_ptr()), t.nbytes(), temporary);
    EMBER_CHECK(::fsync(fd) == 0, "save_checkpoint: fsync of '", temporary,
                "' failed: ", std::strerror(errno));
  } catch (...) {
    ::close(fd);
    ::unlink(temporary.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temporary.c_str(), path.c_str()) != 0) {
    const int error = errno;
    ::unlink(temporary.c_str());
    EMBER_FAIL("save_checkpoint: cannot rename '", temporary, "' to '", path,
               "': ", std::strerror(error));
  }
  fsync_directory_of(path);
}

Checkpoint load_checkpoint(const std::string& path) {
  const std::string bytes = read_whole_file(path, "load_checkpoint");
  if (bytes.size() < 8) {
    refuse(path, "is " + std::to_string(bytes.size()) +
                     " bytes long, too short to hold a header length (truncated?)");
  }
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), 8);
  if (header_length > kMaxHeaderBytes || header_length > bytes.size() - 8) {
    refuse(path, "declares a header of " + std::to_string(header_length) + " bytes but is " +
                     std::to_string(bytes.size()) + " bytes long (truncated or not a checkpoint)");
  }
  const std::string prefix_and_header = bytes.substr(0, 8 + header_length);
  json::Value header;
  try {
    header = json::parse(std::string_view(prefix_and_header).substr(8));
  } catch (const Error& e) {
    refuse(path, std::string("has a malformed header (") + e.what() + ")");
  }
  if (!header.is_object()) refuse(path, "has a header that is not a JSON object");
  const json::Value* meta = header.find("__metadata__");
  if (meta == nullptr || !meta->is_object()) refuse(path, "has no __metadata__ map");
  Metadata strings;
  for (const auto& [key, value] : meta->members()) {
    if (!value.is_string()) refuse(path, "has a non-string metadata value for '" + key + "'");
    strings[key] = value.as_string();
  }
  if (strings["format"] != "ember") {
    refuse(path, "is not an ember checkpoint (its __metadata__ has no \"format\": \"ember\")");
  }
  if (strings["format_version"] != kCheckpointFormatVersion) {
    refuse(path, "has format version '" + strings["format_version"] +
                     "', but this build of ember reads version " + kCheckpointFormatVersion);
  }
  const size_t crc_pos = header_crc_position(prefix_and_header);
  if (crc_pos == std::string::npos || crc_pos + 8 > prefix_and_header.size())
    refuse(path, "has no header checksum");
  if (prefix_and_header.substr(crc_pos, 8) != strings[kHeaderCrcKey] ||
      hex8(header_crc(prefix_and_header, crc_pos)) != strings[kHeaderCrcKey]) {
    refuse(path, "has a corrupted header (its CRC32 does not match)");
  }

  std::vector<Entry> entries;
  for (const auto& [name, value] : header.members()) {
    if (name == "__metadata__") continue;
    const std::string what = "tensor '" + name + "'";
    const json::Value* dtype = value.find("dtype");
    const json::Value* shape = value.find("shape");
    const json::Value* offsets = value.find("data_offsets");
    if (dtype == nullptr || shape == nullptr || offsets == nullptr || !dtype->is_string() ||
        !shape->is_array() || !offsets->is_array() || offsets->items().size() != 2) {
      refuse(path,
             "has a malformed entry for " + what + " (expected dtype, shape and two data_offsets)");
    }
    Entry entry;
    entry.name = name;
    if (!dtype_from_code(dtype->as_string(), &entry.dtype)) {
      refuse(path, "has " + what + " of unknown dtype '" + dtype->as_string() +
                       "' (ember reads F32, F64, F16, BF16, I64, I32, U8, BOOL)");
    }
    int64_t numel = 1;
    for (const json::Value& s : shape->items()) {
      int64_t size = 0;
      if (!s.to_int64(&size) || size < 0 || (size > 0 && numel > (int64_t{1} << 50) / size))
        refuse(path, "has " + what + " with an invalid shape");
      entry.shape.push_back(size);
      numel *= size;
    }
    if (!offsets->items()[0].to_int64(&entry.begin) || !offsets->items()[1].to_int64(&entry.end) ||
        entry.begin < 0 || entry.end < entry.begin) {
      refuse(path, "has " + what + " with invalid data_offsets");
    }
    const int64_t expected = numel * static_cast<int64_t>(element_size(entry.dtype));
    if (entry.end - entry.begin != expected) {
      refuse(path, "has " + what + " of shape " + shape_str(entry.shape) + " whose data is " +
                       std::to_string(entry.end - entry.begin) + " bytes, expected " +
                       std::to_string(expected));
    }
    if (strings.find(kCrcPrefix + name) == strings.end()) {
      refuse(path, "has no checksum for " + what);
    }
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  const int64_t data_size = static_cast<int64_t>(bytes.size() - 8 - header_length);
  int64_t expected_begin = 0;
  for (const Entry& entry : entries) {
    if (entry.begin != expected_begin) {
      refuse(path, "has tensor '" + entry.name + "' at data offset " + std::to_string(entry.begin) +
                       ", expected " + std::to_string(expected_begin) + " (gap or overlap)");
    }
    expected_begin = entry.end;
  }
  if (expected_begin != data_size) {
    refuse(path, "has " + std::to_string(data_size) +
                     " bytes of tensor data, the header describes " +
                     std::to_string(expected_begin) +
                     (expected_begin > data_size ? " (truncated)" : " (trailing bytes)"));
  }
  const char* data = bytes.data() + 8 + header_length;
  for (const Entry& entry : entries) {
    const uint32_t crc = crc32_of(data + entry.begin, static_cast<size_t>(entry.end - entry.begin));
    if (hex8(crc) != strings[kCrcPrefix + entry.name]) {
      refuse(path, "has corrupted data in tensor '" + entry.name + "' (CRC32 " + hex8(crc) +
                       ", expected " + strings[kCrcPrefix + entry.name] + ")");
    }
  }

  for (const Entry& entry : entries) {
    if (entry.dtype != DType::boolean) continue;
    for (int64_t i = entry.begin; i < entry.end; ++i) {
      if (static_cast<unsigned char>(data[i]) > 1)
        refuse(path, "has bool tensor '" + entry.name + "' holding a byte other than 0 or 1");
    }
  }

  // Everything checked: only now are tensors made.
  Checkpoint checkpoint;
  for (const Entry& entry : entries) {
    Tensor t = empty(entry.shape, entry.dtype);
    if (t.nbytes() > 0) std::memcpy(t.data_ptr(), data + entry.begin, t.nbytes());
    checkpoint.tensors.emplace_back(entry.name, std::move(t));
  }
  for (const auto& [key, value] : strings) {
    if (!is_reserved_metadata_key(key)) checkpoint.metadata[key] = value;
  }
  return checkpoint;
}

}  // namespace ember
