// Op cases for the row-wise ops at the sizes where their CUDA kernels change strategy: rows of
// 1 and 3 values, 1023 (a warp per row, scalar loads), 1024 (a warp per row, 16-byte loads), 4097
// (a block per row, scalar loads) and 32768 (a block per row, 16-byte loads); strided lines
// (inner > 1); non-contiguous inputs and rows that start off a 16-byte boundary.
//
// Cases of more than ~4K values are too big for the finite-difference gradient check (its cost
// grows with the square of the size: a 2 x 4097 softmax takes ~100 s): they are compared on CUDA
// and with strided inputs only (differentiable_op = false). The backward at those sizes is
// checked against the CPU's in tests/cuda/rows_test.cpp.
#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

using Inputs = std::vector<Tensor>;

const std::vector<DType> kRowDTypes = {DType::f32, DType::f16, DType::bf16, DType::f64};

// How a case hands its input to the op: as made, transposed (a non-contiguous view), or as a
// contiguous view one element into a larger buffer (rows off a 16-byte boundary).
enum class Layout { dense, transposed, offset_by_one };

// Makes `shape` of random values laid out as `layout` says; the op sees `shape` in every case.
Tensor laid_out(const Shape& shape, Layout layout, DType dtype, Device device, Generator& g,
                double low, double high) {
  switch (layout) {
    case Layout::dense:
      return random_input(shape, dtype, device, g, low, high);
    case Layout::transposed: {
      Shape swapped = shape;
      std::swap(swapped[0], swapped[1]);
      return random_input(swapped, dtype, device, g, low, high);
    }
    case Layout::offset_by_one: {
      const Tensor flat = random_input({shape_numel(shape) + 1}, dtype, device, g, low, high);
      return flat;
    }
  }
  return Tensor();
}

// The view the op is called on (see laid_out).
Tensor as_op_input(const Tensor& t, const Shape& shape, Layout layout) {
  switch (layout) {
    case Layout::dense:
      return t;
    case Layout::transposed:
      return t.transpose(0, 1);
    case Layout::offset_by_one:
      return t.narrow(0, 1, shape_numel(shape)).reshape(shape);
  }
  return t;
}

OpCase softmax_rows_case(const std::string& name, OpId op, Shape shape, int64_t dim,
                         Layout layout = Layout::dense, bool gradcheck = true) {
  OpCase c;
  c.name = name;
  c.op = op;
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    return {laid_out(shape, layout, dtype, device, g, -4.0, 4.0)};
  };
  const bool log = op == OpId::log_softmax;
  c.fn = [=](const Inputs& in) {
    const Tensor x = as_op_input(in[0], shape, layout);
    const Tensor y = log ? log_softmax(x, dim) : softmax(x, dim);
    return y * distinct_weights(y);
  };
  c.differentiable = {true};
  c.differentiable_op = gradcheck;
  c.cuda_dtypes = kRowDTypes;
  return c;
}

// inputs: x, weight, bias (affine) or x alone. Normalised over the last dim.
OpCase layer_norm_rows_case(const std::string& name, Shape shape, bool affine,
                            Layout layout = Layout::dense, bool gradcheck = true) {
  OpCase c;
  c.name = name;
  c.op = OpId::layer_norm;
  const int64_t cols = shape.back();
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    Inputs in = {laid_out(shape, layout, dtype, device, g, -2.0, 2.0)};
    if (affine) {
      in.push_back(random_input({cols}, dtype, device, g, 0.5, 1.5));
      in.push_back(random_input({cols}, dtype, device, g));
    }
    return in;
  };
  c.fn = [=](const Inputs& in) {
    const Tensor x = as_op_input(in[0], shape, layout);
    const Tensor y =
        layer_norm(x, {cols}, affine ? in[1] : Tensor(), affine ? in[2] : Tensor(), 1e-5);
    return y * distinct_weights(y);
  };
  c.differentiable = std::vector<bool>(affine ? 3 : 1, true);
  c.differentiable_op = gradcheck;
  c.cuda_dtypes = kRowDTypes;
  return c;
}

// Targets 0, 7, 14, ... wrapped into [0, classes); every third one ignore_index (-100) when
// `with_ignored`.
Tensor class_targets(int64_t count, int64_t classes, bool with_ignored, Device device) {
  std::vector<int64_t> values(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k)
    values[k] = with_ignored && k % 3 == 1 ? -100 : (k * 7 + classes / 2) % classes;
  return from_vector(values, {count}, DType::i64).to(device);
}

OpCase cross_entropy_rows_case(const std::string& name, int64_t batch, int64_t classes,
                               CrossEntropyOptions options, bool with_ignored,
                               Layout layout = Layout::dense, bool gradcheck = true) {
  OpCase c;
  c.name = name;
  c.op = OpId::cross_entropy;
  const Shape shape = {batch, classes};
  c.make_inputs = [=](DType dtype, Device device, Generator& g) -> Inputs {
    return {laid_out(shape, layout, dtype, device, g, -3.0, 3.0),
            class_targets(batch, classes, with_ignored, device)};
  };
  c.fn = [=](const Inputs& in) {
    const Tensor y = cross_entropy(as_op_input(in[0], shape, layout), in[1], options);
    return y * distinct_weights(y);
  };
  c.differentiable = {true, false};
  c.differentiable_op = gradcheck;
  c.cuda_dtypes = kRowDTypes;
  return c;
}

CrossEntropyOptions options_of(Reduction reduction, double smoothing = 0.0) {
  CrossEntropyOptions options;
  options.reduction = reduction;
  options.label_smoothing = smoothing;
  return options;
}

}  // namespace

EMBER_OP_CASES(rows) {
  const OpId sm = OpId::softmax, lsm = OpId::log_softmax;
  const Layout dense = Layout::dense, transposed = Layout::transposed;
  const Layout off_alignment = Layout::offset_by_one;
  const bool too_big_for_gradcheck = false;
  return {
      softmax_rows_case("softmax/rows_of_1", sm, {4, 1}, -1),
      softmax_rows_case("log_softmax/rows_of_1", lsm, {4, 1}, -1),
      softmax_rows_case("softmax/rows_of_3", sm, {5, 3}, -1),
      softmax_rows_case("log_softmax/rows_of_1023", lsm, {3, 1023}, -1),
      softmax_rows_case("softmax/rows_of_1024", sm, {2, 1024}, -1),
      softmax_rows_case("log_softmax/rows_of_1024", lsm, {2, 1024}, -1),
      softmax_rows_case("softmax/rows_of_4097", sm, {2, 4097}, -1, dense, too_big_for_gradcheck),
      softmax_rows_case("log_softmax/rows_of_4097", lsm, {1, 4097}, -1, dense,
                        too_big_for_gradcheck),
      softmax_rows_case("softmax/row_of_32768", sm, {1, 32768}, -1, dense, too_big_for_gradcheck),
      softmax_rows_case("log_softmax/row_of_32768", lsm, {1, 32768}, -1, dense,
                        too_big_for_gradcheck),
      softmax_rows_case("softmax/many_short_rows", sm, {300, 7}, 1),
      softmax_rows_case("softmax/columns", sm, {2, 33, 3}, 1),
      softmax_rows_case("softmax/columns_of_1023", sm, {2, 1023, 3}, 1, dense,
                        too_big_for_gradcheck),
      softmax_rows_case("log_softmax/columns", lsm, {3, 17, 5}, 0),
      softmax_rows_case("softmax/transposed_rows", sm, {6, 40}, -1, transposed),
      softmax_rows_case("log_softmax/transposed_rows", lsm, {5, 9}, -1, transposed),
      softmax_rows_case("softmax/rows_off_alignment", sm, {2, 1024}, -1, off_alignment),
      softmax_rows_case("log_softmax/long_rows_off_alignment", lsm, {2, 4096}, -1, off_alignment,
                        too_big_for_gradcheck),

      layer_norm_rows_case("layer_norm/rows_of_1", {4, 1}, true),
      layer_norm_rows_case("layer_norm/rows_of_3", {5, 3}, true),
      layer_norm_rows_case("layer_norm/rows_of_1023", {3, 1023}, true),
      layer_norm_rows_case("layer_norm/rows_of_1024_plain", {2, 1024}, false),
      layer_norm_rows_case("layer_norm/rows_of_4097", {2, 4097}, true, dense,
                           too_big_for_gradcheck),
      layer_norm_rows_case("layer_norm/row_of_32768", {2, 32768}, true, dense,
                           too_big_for_gradcheck),
      layer_norm_rows_case("layer_norm/many_rows", {150, 8}, true),
      layer_norm_rows_case("layer_norm/transposed_rows", {6, 40}, true, transposed),
      layer_norm_rows_case("layer_norm/rows_off_alignment", {2, 512}, true, off_alignment),
      layer_norm_rows_case("layer_norm/long_rows_off_alignment", {2, 2048}, true, off_alignment,
                           too_big_for_gradcheck),

      cross_entropy_rows_case("cross_entropy/one_class", 4, 1, options_of(Reduction::mean), false),
      cross_entropy_rows_case("cross_entropy/classes_3_none", 5, 3, options_of(Reduction::none),
                              true),
      cross_entropy_rows_case("cross_entropy/classes_1023_smoothing", 3, 1023,
                              options_of(Reduction::mean, 0.1), true),
      cross_entropy_rows_case("cross_entropy/classes_1024_sum", 2, 1024, options_of(Reduction::sum),
                              false),
      cross_entropy_rows_case("cross_entropy/classes_4097", 2, 4097,
                              options_of(Reduction::mean, 0.05), false, dense,
                              too_big_for_gradcheck),
      cross_entropy_rows_case("cross_entropy/classes_32768", 2, 32768,
                              options_of(Reduction::none, 0.1), false, dense,
                              too_big_for_gradcheck),
      cross_entropy_rows_case("cross_entropy/many_rows_ignored", 150, 10,
                              options_of(Reduction::mean), true),
      cross_entropy_rows_case("cross_entropy/transposed_logits", 6, 9,
                              options_of(Reduction::sum, 0.2), true, transposed),
      cross_entropy_rows_case("cross_entropy/rows_off_alignment", 2, 1024,
                              options_of(Reduction::none), false, off_alignment),
  };
}

}  // namespace ember::testing
