#include "data/fashion_mnist.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "runtime/ops.h"

namespace ember::data {
namespace {

uint32_t big_endian_u32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// IDX files of u8 hold images and labels; the largest of the MNIST family is far below this. A
// header that declares more is refused before anything is allocated or read (a damaged header,
// or a small gzip file that would inflate without end).
constexpr int64_t kMaxIdxBytes = int64_t{1} << 34;

// An open IDX file, plain or gzipped (gzopen reads both).
class GzReader {
 public:
  explicit GzReader(const std::string& path) : path_(path) {
    EMBER_CHECK(std::filesystem::exists(path), "fashion-mnist: '", path,
                "' does not exist (install Debian's dataset-fashion-mnist, or point --data at a "
                "folder holding the four IDX .gz files)");
    file_ = gzopen(path.c_str(), "rb");
    EMBER_CHECK(file_ != nullptr, "fashion-mnist: cannot open '", path,
                "': ", std::strerror(errno));
  }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
  ~GzReader() { gzclose(file_); }

  // Reads up to `size` bytes into `out`; fewer only at the end of the file.
  size_t read(void* out, size_t size) {
    auto* bytes = static_cast<char*>(out);
    size_t done = 0;
    while (done < size) {
      const unsigned chunk = static_cast<unsigned>(std::min<size_t>(size - done, 1u << 30));
      const int n = gzread(file_, bytes + done, chunk);
      if (n < 0) {
        int code = 0;
        EMBER_FAIL("fashion-mnist: '", path_, "' is not a readable gzip file (",
                   gzerror(file_, &code), ")");
      }
      if (n == 0) break;
      done += static_cast<size_t>(n);
    }
    return done;
  }

 private:
  std::string path_;
  gzFile file_ = nullptr;
};

}  // namespace

Tensor read_idx(const std::string& path) {
  GzReader file(path);
  unsigned char magic[4] = {};
  EMBER_CHECK(file.read(magic, 4) == 4 && magic[0] == 0 && magic[1] == 0 && magic[2] == 0x08 &&
                  magic[3] >= 1 && magic[3] <= 4,
              "fashion-mnist: '", path,
              "' is not an IDX file of unsigned bytes (expected magic 00 00 08 0N, N = dims)");
  const int dims = magic[3];
  unsigned char sizes[16] = {};
  EMBER_CHECK(file.read(sizes, 4u * dims) == 4u * dims, "fashion-mnist: '", path,
              "' is truncated inside its header");
  Shape shape;
  int64_t numel = 1;
  for (int d = 0; d < dims; ++d) {
    const int64_t size = big_endian_u32(sizes + 4 * d);
    shape.push_back(size);
    // Once past the limit, it stays past it: no product can overflow.
    numel = size != 0 && numel > kMaxIdxBytes / size ? kMaxIdxBytes + 1 : numel * size;
  }
  EMBER_CHECK(numel <= kMaxIdxBytes, "fashion-mnist: '", path, "' declares shape ",
              shape_str(shape), ", more than ", kMaxIdxBytes, " bytes (a damaged header?)");
  // Read in chunks, so that a header declaring gigabytes in front of a short file costs no more
  // memory than the file holds; the tensor is made once the data is all there.
  std::string data;
  constexpr size_t kChunk = size_t{1} << 24;
  while (data.size() < static_cast<size_t>(numel)) {
    const size_t want = std::min(kChunk, static_cast<size_t>(numel) - data.size());
    const size_t before = data.size();
    data.resize(before + want);
    const size_t got = file.read(data.data() + before, want);
    data.resize(before + got);
    if (got < want) break;
  }
  EMBER_CHECK(data.size() == static_cast<size_t>(numel), "fashion-mnist: '", path,
              "' declares shape ", shape_str(shape), " (", numel, " bytes) but holds ", data.size(),
              " bytes of data (truncated or damaged)");
  char extra = 0;
  EMBER_CHECK(file.read(&extra, 1) == 0, "fashion-mnist: '", path, "' declares shape ",
              shape_str(shape), " (", numel, " bytes) but holds more data (damaged?)");
  Tensor out = empty(shape, DType::u8);
  if (numel > 0) std::memcpy(out.data_ptr(), data.data(), data.size());
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
