// Op cases: cat, split, index_select, gather, scatter_add, pad, embedding.
#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

using Inputs = std::vector<Tensor>;

Tensor index_tensor(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  return from_vector(values, shape, DType::i64).to(device);
}

Tensor weighted(const Tensor& y) {
  return y * distinct_weights(y);
}

OpCase make_case(const std::string& name, OpId op,
                 std::function<Inputs(DType, Device, Generator&)> make_inputs,
                 std::function<Tensor(const Inputs&)> fn, std::vector<bool> differentiable) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.make_inputs = std::move(make_inputs);
  c.fn = [fn](const Inputs& in) { return weighted(fn(in)); };
  c.differentiable = std::move(differentiable);
  return c;
}

// Multiples of 1/8 in [-1, 1]: every partial sum of a few of them is exact in bf16 and f16, so
// the order in which CUDA's 16-bit atomic adds land cannot change a result.
Tensor eighths(const Shape& shape, DType dtype, Device device, Generator& g) {
  NoGradGuard no_grad;
  return (randint(-8, 9, shape, DType::i64, &g).to(DType::f64) * 0.125).to(dtype).to(device);
}

}  // namespace

EMBER_OP_CASES(indexing) {
  return {
      make_case(
          "cat/three_middle_dim", OpId::cat,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({2, 3, 4}, dtype, device, g),
                    random_input({2, 1, 4}, dtype, device, g),
                    random_input({2, 5, 4}, dtype, device, g)};
          },
          [](const Inputs& in) {
            return cat({in[0], in[1], in[2]}, 1);
          },
          {true, true, true}),
      make_case(
          "cat/last_dim_one_constant", OpId::cat,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 2}, dtype, device, g), random_input({3, 3}, dtype, device, g)};
          },
          [](const Inputs& in) {
            return cat({in[0], in[1]}, -1);
          },
          {true, false}),
      make_case(
          "index_select/middle_dim_repeats", OpId::index_select,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 5, 2}, dtype, device, g),
                    index_tensor({4, 0, 4, 2, 4}, {5}, device)};
          },
          [](const Inputs& in) { return index_select(in[0], 1, in[1]); }, {true, false}),
      make_case(
          "index_select/first_dim", OpId::index_select,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({4, 3}, dtype, device, g), index_tensor({3, 1, 1}, {3}, device)};
          },
          [](const Inputs& in) { return index_select(in[0], 0, in[1]); }, {true, false}),
      make_case(
          "gather/last_dim", OpId::gather,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 4}, dtype, device, g),
                    randint(0, 4, {3, 6}, DType::i64, &g).to(device)};
          },
          [](const Inputs& in) { return gather(in[0], 1, in[1]); }, {true, false}),
      // max / min with indices: the value read back through gather (distinct random values: no
      // ties, where the gradient would not be defined).
      make_case(
          "max_with_indices/dim1_keepdim", OpId::gather,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 5, 2}, dtype, device, g)};
          },
          [](const Inputs& in) { return max_with_indices(in[0], 1, true).values; }, {true}),
      make_case(
          "min_with_indices/last_dim", OpId::gather,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({4, 7}, dtype, device, g)};
          },
          [](const Inputs& in) { return min_with_indices(in[0], -1).values; }, {true}),
      make_case(
          "gather/smaller_index_dim0", OpId::gather,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({4, 5, 2}, dtype, device, g),
                    randint(0, 4, {6, 3, 2}, DType::i64, &g).to(device)};
          },
          [](const Inputs& in) { return gather(in[0], 0, in[1]); }, {true, false}),
      make_case(
          "scatter_add/dim0", OpId::scatter_add,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({4, 3}, dtype, device, g),
                    randint(0, 4, {5, 3}, DType::i64, &g).to(device),
                    random_input({5, 3}, dtype, device, g)};
          },
          [](const Inputs& in) { return scatter_add(in[0], 0, in[1], in[2]); },
          {true, false, true}),
      make_case(
          "scatter_add/src_larger_than_index", OpId::scatter_add,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 4}, dtype, device, g),
                    randint(0, 4, {2, 5}, DType::i64, &g).to(device),
                    random_input({3, 6}, dtype, device, g)};
          },
          [](const Inputs& in) { return scatter_add(in[0], 1, in[1], in[2]); },
          {true, false, true}),
      make_case(
          "pad/positive", OpId::pad,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({2, 3, 4}, dtype, device, g)};
          },
          [](const Inputs& in) {
            return pad(in[0], {1, 2, 0, 1}, 0.5);
          },
          {true}),
      make_case(
          "pad/negative_crops", OpId::pad,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 5}, dtype, device, g)};
          },
          [](const Inputs& in) {
            return pad(in[0], {-1, 2, 1, -2});
          },
          {true}),
      make_case(
          "embedding/repeated_indices", OpId::embedding,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {index_tensor({1, 4, 1, 0, 1, 3}, {2, 3}, device),
                    random_input({5, 3}, dtype, device, g)};
          },
          [](const Inputs& in) { return embedding(in[0], in[1]); }, {false, true}),
      // Odd sizes (1, 3, 1023): partial vectors and blocks in the CUDA kernels, i32 indices, and
      // many repeats for the backward's atomic adds.
      make_case(
          "embedding/1023_tokens_7_rows", OpId::embedding,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {randint(0, 7, {1023}, DType::i64, &g).to(device),
                    random_input({7, 3}, dtype, device, g)};
          },
          [](const Inputs& in) { return embedding(in[0], in[1]); }, {false, true}),
      make_case(
          "embedding/one_row_i32", OpId::embedding,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {randint(0, 1, {3, 1}, DType::i32, &g).to(device),
                    random_input({1, 3}, dtype, device, g)};
          },
          [](const Inputs& in) { return embedding(in[0], in[1]); }, {false, true}),
      make_case(
          "index_select/1023_rows_i32", OpId::index_select,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({1023, 3}, dtype, device, g),
                    randint(0, 1023, {5}, DType::i32, &g).to(device)};
          },
          [](const Inputs& in) { return index_select(in[0], 0, in[1]); }, {true, false}),
      make_case(
          "index_select/last_dim_of_a_transpose", OpId::index_select,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 17}, dtype, device, g),
                    randint(0, 3, {1023}, DType::i64, &g).to(device)};
          },
          [](const Inputs& in) { return index_select(in[0].t(), 1, in[1]); }, {true, false}),
      make_case(
          "gather/one_element", OpId::gather,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({1}, dtype, device, g), index_tensor({0, 0, 0}, {3}, device)};
          },
          [](const Inputs& in) { return gather(in[0], 0, in[1]); }, {true, false}),
      make_case(
          "gather/dim1_odd_1023", OpId::gather,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 1023}, dtype, device, g),
                    randint(0, 1023, {3, 1023}, DType::i64, &g).to(device)};
          },
          [](const Inputs& in) { return gather(in[0], 1, in[1]); }, {true, false}),
      make_case(
          "scatter_add/dim1_odd_1023_repeats", OpId::scatter_add,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            // Exact sums: CUDA's 16-bit atomic adds land in any order. With random values the
            // rounding at each add made bf16 fail under almost every order (a host replay).
            return {eighths({3, 301}, dtype, device, g),
                    randint(0, 301, {3, 1023}, DType::i32, &g).to(device),
                    eighths({3, 1023}, dtype, device, g)};
          },
          [](const Inputs& in) { return scatter_add(in[0], 1, in[1], in[2]); },
          {true, false, true}),
      make_case(
          "cat/odd_lengths_1_3_1023", OpId::cat,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({1, 3}, dtype, device, g), random_input({3, 3}, dtype, device, g),
                    random_input({1023, 3}, dtype, device, g)};
          },
          [](const Inputs& in) {
            return cat({in[0], in[1], in[2]}, 0);
          },
          {true, true, true}),
      make_case(
          "stack/middle_dim_odd", OpId::cat,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({4097}, dtype, device, g), random_input({4097}, dtype, device, g)};
          },
          [](const Inputs& in) {
            return stack({in[0], in[1]}, 1);
          },
          {true, true}),
      make_case(
          "pad/odd_1023_last_dim", OpId::pad,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 1023}, dtype, device, g)};
          },
          [](const Inputs& in) {
            return pad(in[0], {3, 1});
          },
          {true}),
      // split: one node for all pieces; its backward fills the gradient of a piece that got
      // none with zeros, and sums the gradients of a piece used twice.
      make_case(
          "split/sizes_middle_dim_one_piece_unused", OpId::split,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({3, 7, 2}, dtype, device, g)};
          },
          [](const Inputs& in) {
            const std::vector<Tensor> parts = split(in[0], std::vector<int64_t>{2, 3, 2}, 1);
            return parts[0] * parts[2] + parts[0];
          },
          {true}),
      make_case(
          "split/chunk_last_dim_every_piece", OpId::split,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({4, 10}, dtype, device, g)};
          },
          [](const Inputs& in) {
            const std::vector<Tensor> parts = chunk(in[0], 4, -1);  // 3, 3, 3, 1
            return cat({parts[3], parts[1] * parts[0], parts[2]}, -1);
          },
          {true}),
      make_case(
          "split/one_piece_alone_odd", OpId::split,
          [](DType dtype, Device device, Generator& g) -> Inputs {
            return {random_input({1023, 3}, dtype, device, g)};
          },
          [](const Inputs& in) {
            return split(in[0], 500, 0)[2];  // rows 1000..1022
          },
          {true}),
  };
}

// Row 1 is padding: picked three times, it reads its values (the forward, compared on CUDA) and
// gets no gradient, which by design is not the derivative: no finite-difference check here
// (tests/runtime/indexing_test.cpp checks that gradient).
EMBER_OP_CASES(embedding_padding) {
  OpCase c = make_case(
      "embedding/padding_idx", OpId::embedding,
      [](DType dtype, Device device, Generator& g) -> Inputs {
        return {index_tensor({1, 4, 1, 0, 1, 3}, {2, 3}, device),
                random_input({5, 3}, dtype, device, g)};
      },
      [](const Inputs& in) { return embedding(in[0], in[1], 1); }, {false, true});
  c.differentiable_op = false;
  return {c};
}

}  // namespace ember::testing
