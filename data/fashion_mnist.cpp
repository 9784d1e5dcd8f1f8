#include "data/fashion_mnist.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/ops.h"

namespace ember::data {
namespace {

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// The whole (decompressed) file. gzopen reads plain files too.
std::string read_gz(const std::string& path) {
  EMBER_CHECK(std::filesystem::exists(path), "fashion-mnist: '", path,
              "' does not exist (install Debian's dataset-fashion-mnist, or point --data at a "
              "folder holding the four IDX .gz files)");
  gzFile file = gzopen(path.c_str(), "rb");
  EMBER_CHECK(file != nullptr, "fashion-mnist: cannot open '", path, "': ", std::strerror(errno));
  std::string bytes;
  char buffer[1 << 16];
  while (true) {
    const int n = gzread(file, buffer, sizeof(buffer));
    if (n < 0) {
      int code = 0;
      const std::string message = gzerror(file, &code);
      gzclose(file);
      EMBER_FAIL("fashion-mnist: '", path, "' is not a readable gzip file (", message, ")");
    }
    if (n == 0) break;
    bytes.append(buffer, static_cast<size_t>(n));
  }
  gzclose(file);
  return bytes;
}

}  // namespace

Tensor read_idx(const std::string& path) {
  const std::string bytes = read_gz(path);
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data());
  EMBER_CHECK(bytes.size() >= 4 && p[0] == 0 && p[1] == 0 && p[2] == 0x08 && p[3] >= 1 && p[3] <= 4,
              "fashion-mnist: '", path,
              "' is not an IDX file of unsigned bytes (expected magic 00 00 08 0N, N = dims)");
  const int dims = p[3];
  EMBER_CHECK(bytes.size() >= 4 + 4u * dims, "fashion-mnist: '", path,
              "' is truncated inside its header");
  Shape shape;
  int64_t numel = 1;
  for (int d = 0; d < dims; ++d) {
    shape.push_back(big_endian_u32(p + 4 + 4 * d));
    numel *= shape.back();
  }
  const size_t header = 4 + 4u * static_cast<size_t>(dims);
  EMBER_CHECK(bytes.size() - header == static_cast<size_t>(numel), "fashion-mnist: '", path,
              "' declares shape ", shape_str(shape), " (", numel, " bytes) but holds ",
              bytes.size() - header, " bytes of data (truncated or damaged)");
  Tensor out = empty(shape, DType::u8);
  std::memcpy(out.data_ptr(), bytes.data() + header, static_cast<size_t>(numel));
  return out;
}

FashionMnist::FashionMnist(const std::string& dir, Split split, int64_t limit) {
  const std::string prefix = split == Split::train ? "train" : "t10k";
  const std::string images_path = dir + "/" + prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = dir + "/" + prefix + "-labels-idx1-ubyte.gz";
  images_ = read_idx(images_path);
  Tensor labels = read_idx(labels_path);
  EMBER_CHECK(images_.dim() == 3 && images_.size(1) == 28 && images_.size(2) == 28,
              "fashion-mnist: '", images_path, "' holds shape ", shape_str(images_.sizes()),
              ", expected (N,28,28)");
  EMBER_CHECK(labels.dim() == 1 && labels.size(0) == images_.size(0), "fashion-mnist: '",
              labels_path, "' holds ", shape_str(labels.sizes()), " labels for ", images_.size(0),
              " images");
  labels_ = labels.to(DType::i64);
  EMBER_CHECK(limit >= 0, "fashion-mnist: limit must be non-negative, got ", limit);
  if (limit > 0 && limit < images_.size(0)) {
    images_ = images_.narrow(0, 0, limit).contiguous();
    labels_ = labels_.narrow(0, 0, limit).contiguous();
  }
  for (int64_t label : to_vector<int64_t>(labels_)) {
    EMBER_CHECK(label >= 0 && label < 10, "fashion-mnist: '", labels_path, "' holds label ", label,
                ", expected 0..9");
  }
}

Example FashionMnist::get(int64_t index) const {
  check_index(index, "FashionMnist");
  return {images_.select(0, index).unsqueeze(0).to(DType::f32) * (1.0 / 255.0),
          labels_.select(0, index)};
}

Batch FashionMnist::get_batch(const std::vector<int64_t>& indices) const {
  Tensor images = gather_rows(images_, indices).unsqueeze(1).to(DType::f32);
  return {images.mul_(1.0 / 255.0), gather_rows(labels_, indices)};
}

}  // namespace ember::data
