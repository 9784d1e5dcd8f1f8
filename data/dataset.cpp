#include "data/dataset.h"

#include <cstring>

#include "runtime/ops.h"

namespace ember::data {

void Dataset::check_index(int64_t index, const char* what) const {
  EMBER_CHECK(index >= 0 && index < size(), what, ": index ", index,
              " is out of range for a dataset of ", size(), " examples");
}

Batch Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Tensor> inputs, targets;
  for (int64_t i : indices) {
    Example e = get(i);
    inputs.push_back(e.input);
    targets.push_back(e.target);
  }
  return {stack(inputs), stack(targets)};
}

Tensor gather_rows(const Tensor& source, const std::vector<int64_t>& indices) {
  EMBER_CHECK(source.dim() >= 1 && source.is_cpu(),
              "gather_rows: expected a CPU tensor with a leading dim, got ", describe(source));
  const Tensor dense = source.contiguous();
  Shape shape = dense.sizes();
  const int64_t rows = shape[0];
  shape[0] = static_cast<int64_t>(indices.size());
  Tensor out = empty(shape, TensorOptions(dense.dtype()));
  const size_t row_bytes = rows == 0 ? 0 : dense.nbytes() / static_cast<size_t>(rows);
  const char* from = static_cast<const char*>(dense.data_ptr());
  char* to = static_cast<char*>(out.data_ptr());
  for (size_t k = 0; k < indices.size(); ++k) {
    const int64_t i = indices[k];
    EMBER_CHECK(i >= 0 && i < rows, "gather_rows: row ", i, " is out of range for ", rows, " rows");
    std::memcpy(to + k * row_bytes, from + static_cast<size_t>(i) * row_bytes, row_bytes);
  }
  return out;
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets)
    : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  EMBER_CHECK(inputs_.dim() >= 1 && targets_.dim() >= 1 && inputs_.size(0) == targets_.size(0),
              "TensorDataset: inputs and targets must have the same first dim, got ",
              describe(inputs_), " and ", describe(targets_));
  EMBER_CHECK(inputs_.is_cpu() && targets_.is_cpu(),
              "TensorDataset: expected CPU tensors (the loader moves batches to the device), got ",
              describe(inputs_), " and ", describe(targets_));
}

Example TensorDataset::get(int64_t index) const {
  check_index(index, "TensorDataset");
  return {inputs_.select(0, index), targets_.select(0, index)};
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  return {gather_rows(inputs_, indices), gather_rows(targets_, indices)};
}

}  // namespace ember::data
