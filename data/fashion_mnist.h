// Fashion-MNIST from its IDX files (Debian's dataset-fashion-mnist installs them, gzipped, under
// /usr/share/datasets/fashion-mnist).
//
//   train-images-idx3-ubyte.gz  (60000, 28, 28) u8    train-labels-idx1-ubyte.gz  (60000) u8
//   t10k-images-idx3-ubyte.gz   (10000, 28, 28) u8    t10k-labels-idx1-ubyte.gz   (10000) u8
#pragma once

#include <string>

#include "data/dataset.h"

namespace ember::data {

inline constexpr const char* kFashionMnistDefaultDir = "/usr/share/datasets/fashion-mnist";
inline constexpr const char* kFashionMnistClasses[10] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
    "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

// Reads an IDX file (gzipped or not) into a u8 tensor of the shape its header declares.
// A missing, truncated or malformed file is an error naming the path and what is wrong.
Tensor read_idx(const std::string& path);

enum class Split { train, test };

// Examples: input (1, 28, 28) f32 in [0, 1], target i64 class in [0, 10).
class FashionMnist : public Dataset {
 public:
  // `limit` > 0 keeps only the first `limit` examples (quick runs and tests).
  FashionMnist(const std::string& dir, Split split, int64_t limit = 0);
  int64_t size() const override { return labels_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;

 private:
  Tensor images_;  // (N, 28, 28) u8: a quarter of the memory of f32, converted per batch
  Tensor labels_;  // (N) i64
};

}  // namespace ember::data
