// data::read_idx (Fashion-MNIST's files) on any bytes, plain or gzipped: a tensor of the declared
// shape holding exactly the data, or an ember::Error.
#include <cstring>

#include "data/fashion_mnist.h"
#include "runtime/error.h"
#include "tests/fuzz/fuzz_target.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ember;
  const std::string path = fuzz::scratch_file("input.idx", data, size);
  Tensor images;
  try {
    images = data::read_idx(path);
  } catch (const Error&) {
    return 0;
  }
  // A plain file (gzip's magic is 1f 8b): the tensor is the bytes after the header.
  const size_t header = 4 + 4 * static_cast<size_t>(images.dim());
  if (size >= 2 && !(data[0] == 0x1f && data[1] == 0x8b) &&
      (images.nbytes() != size - header ||
       std::memcmp(images.data_ptr(), data + header, images.nbytes()) != 0))
    fuzz::property_failed("read_idx's tensor is not the file's data");
  return 0;
}
