// Datasets: indexable collections of (input, target) examples, fetched one by one or as batches.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor.h"

namespace ember::data {

struct Example {
  Tensor input;
  Tensor target;
};

// inputs (B, ...) and targets (B, ...): examples stacked along a new first dim.
struct Batch {
  Tensor inputs;
  Tensor targets;
  int64_t size() const { return inputs.defined() ? inputs.size(0) : 0; }
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example `index` in [0, size()); out of range is an error.
  virtual Example get(int64_t index) const = 0;
  // The examples at `indices`, stacked. The default stacks get(i); datasets held as tensors
  // override it with one gather.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;

 protected:
  void check_index(int64_t index, const char* what) const;
};

// Copies rows `indices` of a dense (N, ...) tensor into a new (indices.size(), ...) tensor.
Tensor gather_rows(const Tensor& source, const std::vector<int64_t>& indices);

// inputs (N, ...) and targets (N, ...) on the CPU; example i is (inputs[i], targets[i]).
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_;
  Tensor targets_;
};

}  // namespace ember::data
