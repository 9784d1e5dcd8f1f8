// Tensors as handles: views share storage and see each other's writes, copies do not; creation
// functions; conversions; printing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "runtime/allocator.h"
#include "runtime/ops.h"
#include "runtime/random.h"
#include "tests/common/expect_error.h"

namespace ember {
namespace {

std::vector<float> values_of(const Tensor& t) {
  return to_vector<float>(t);
}

Tensor iota(const Shape& shape) {
  return arange(0, shape_numel(shape), 1, DType::f32).reshape(shape);
}

TEST(Tensor, CopyingAHandleNeverCopiesData) {
  Tensor a = zeros({3});
  Tensor b = a;
  b.fill_(2.0);
  EXPECT_EQ(values_of(a), (std::vector<float>{2, 2, 2}));
  EXPECT_TRUE(a.is_same(b));
}

TEST(Tensor, WritesThroughEveryKindOfViewReachTheBase) {
  Tensor base = iota({4, 6});
  base.slice(1, 1, 5, 2).fill_(-1.0);   // columns 1 and 3
  base.select(0, 2).fill_(7.0);         // row 2
  base.t().narrow(0, 5, 1).fill_(9.0);  // column 5, through a transpose
  base.view({24}).narrow(0, 0, 1).fill_(100.0);
  base.unsqueeze(0).squeeze(0).permute({1, 0}).select(0, 0).select(0, 1).fill_(55.0);  // [1][0]
  const std::vector<float> expected = {100, -1, 2, -1, 4, 9, 55, -1, 8,  -1, 10, 9,
                                       7,   7,  7, 7,  7, 9, 18, -1, 20, -1, 22, 9};
  EXPECT_EQ(values_of(base), expected);
}

TEST(Tensor, ViewsShareTheVersionCounter) {
  Tensor base = zeros({4});
  Tensor view = base.slice(0, 1, 3);
  const uint32_t before = base.version();
  view.add_(1.0);
  EXPECT_EQ(base.version(), before + 1);
  EXPECT_EQ(view.version(), base.version());
}

TEST(Tensor, CloneAndContiguousCopiesAreIndependent) {
  Tensor base = iota({2, 3});
  Tensor copy = base.clone();
  Tensor transposed = base.t().contiguous();
  base.fill_(0.0);
  EXPECT_EQ(values_of(copy), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(values_of(transposed), (std::vector<float>{0, 3, 1, 4, 2, 5}));
  EXPECT_TRUE(transposed.is_contiguous());
}

TEST(Tensor, ContiguousReturnsItselfWhenAlreadyDense) {
  Tensor a = zeros({2, 3});
  EXPECT_TRUE(a.contiguous().is_same(a));
  EXPECT_FALSE(a.t().is_contiguous());
}

TEST(Tensor, ReshapeIsAViewWhenStridesAllowAndACopyOtherwise) {
  Tensor a = iota({2, 3, 4});
  Tensor v = a.reshape({6, 4});
  EXPECT_EQ(v.storage(), a.storage());
  Tensor c = a.transpose(0, 2).reshape({24});
  EXPECT_NE(c.storage(), a.storage());
  EXPECT_EQ(values_of(c)[1], 12.0f);  // element (1,0,0) of the transpose is a[0][0][1]... -> 12
}

TEST(Tensor, ViewOfNonContiguousInputIsAnErrorThatSuggestsReshape) {
  Tensor a = iota({3, 4}).t();
  try {
    a.view({12});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("view: shape (12)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("reshape"), std::string::npos) << e.what();
  }
}

TEST(Tensor, ExpandGivesStrideZeroViews) {
  Tensor a = from_vector({1.f, 2.f, 3.f}, {3, 1});
  Tensor e = a.expand({2, 3, 4});
  EXPECT_EQ(e.sizes(), (Shape{2, 3, 4}));
  EXPECT_EQ(e.stride(0), 0);
  EXPECT_EQ(e.stride(2), 0);
  EXPECT_EQ(sum(e).item<float>(), 2 * 4 * 6.0f);
  EXPECT_EQ(a.expand({-1, 5}).sizes(), (Shape{3, 5}));
}

TEST(Tensor, SliceClampsLikePython) {
  Tensor a = iota({10});
  EXPECT_EQ(values_of(a.slice(0, -3, 100)), (std::vector<float>{7, 8, 9}));
  EXPECT_EQ(a.slice(0, 8, 2).numel(), 0);
  EXPECT_EQ(values_of(a.slice(0, 1, 10, 4)), (std::vector<float>{1, 5, 9}));
}

TEST(Tensor, FlattenSqueezeUnsqueeze) {
  Tensor a = zeros({2, 1, 3, 1});
  EXPECT_EQ(a.squeeze().sizes(), (Shape{2, 3}));
  EXPECT_EQ(a.squeeze(1).sizes(), (Shape{2, 3, 1}));
  EXPECT_EQ(a.squeeze(0).sizes(), (Shape{2, 1, 3, 1}));  // size 2: unchanged, as PyTorch
  EXPECT_EQ(a.unsqueeze(-1).sizes(), (Shape{2, 1, 3, 1, 1}));
  EXPECT_EQ(a.flatten().sizes(), (Shape{6}));
  EXPECT_EQ(a.flatten(1).sizes(), (Shape{2, 3}));
  EXPECT_EQ(a.flatten(1, 2).sizes(), (Shape{2, 3, 1}));
}

TEST(Tensor, ItemConvertsAndRejectsManyElements) {
  EXPECT_EQ(full({1, 1}, 2.5).item<double>(), 2.5);
  EXPECT_EQ(full({}, 7, DType::i64).item<int64_t>(), 7);
  EXPECT_EQ(full({}, 1.5, DType::bf16).item<float>(), 1.5f);
  EXPECT_THROW(zeros({2}).item<float>(), Error);
}

TEST(Tensor, ToDtypeRoundsToNearestEvenAndKeepsSpecials) {
  const float inf = std::numeric_limits<float>::infinity();
  Tensor a = from_vector({1.0f + 1.0f / 2048, -inf, inf, 65520.0f, 1e-7f}, {5});
  const std::vector<float> h = values_of(a.to(DType::f16));
  EXPECT_EQ(h[0], 1.0f);  // a tie rounds to even
  EXPECT_EQ(h[1], -inf);
  EXPECT_EQ(h[2], inf);
  EXPECT_EQ(h[3], inf);   // above the largest half rounds to infinity
  EXPECT_GT(h[4], 0.0f);  // a subnormal half, not zero
  Tensor nan = full({1}, std::nan("")).to(DType::bf16).to(DType::f32);
  EXPECT_TRUE(std::isnan(nan.item<float>()));
  EXPECT_EQ(to_vector<int64_t>(from_vector({2.7f, -2.7f}, {2}).to(DType::i64)),
            (std::vector<int64_t>{2, -2}));  // truncation, as a C cast and PyTorch
}

// Dense runs go through the vectorised conversions (kernels/cpu/convert_runs.h), strided ones
// element by element: both give the scalar conversion's bits, values at rounding ties included.
template <typename Half16>
void expect_casts_match_the_scalar_conversion() {
  // (37, 29): a dense run of 1073 (vector tails) and, transposed, runs of one element.
  Tensor wide = randn({37, 29});
  wide.mul_(1000.0);
  float* values = wide.data<float>();
  values[0] = 1.0f + 1.0f / 2048;  // ties for binary16 and bfloat16
  values[1] = 1.0f + 1.0f / 256;
  values[2] = 70000.0f;  // Inf in binary16
  values[3] = std::nanf("");
  for (const Tensor& input : {wide, wide.t()}) {
    const Tensor narrow = input.to(dtype_of<Half16>);
    const Tensor strided_input = input.contiguous();
    const Half16* bits = narrow.data<Half16>();
    const float* expected = strided_input.data<float>();
    for (int64_t i = 0; i < narrow.numel(); ++i)
      ASSERT_EQ(bits[i].bits, Half16(expected[i]).bits) << "element " << i;
    const Tensor back = narrow.t().to(DType::f32);  // a transposed 16-bit input
    const Tensor back_expected = narrow.t().contiguous();
    for (int64_t i = 0; i < back.numel(); ++i) {
      const float want = back_expected.data<Half16>()[i];
      ASSERT_EQ(std::memcmp(back.data<float>() + i, &want, sizeof(float)), 0) << "element " << i;
    }
  }
}

TEST(Tensor, CastsToAndFromHalfMatchTheScalarConversionOnEveryLayout) {
  expect_casts_match_the_scalar_conversion<Half>();
}

TEST(Tensor, CastsToAndFromBFloat16MatchTheScalarConversionOnEveryLayout) {
  expect_casts_match_the_scalar_conversion<BFloat16>();
}

TEST(Tensor, CopyBroadcastsAndConverts) {
  Tensor dst = zeros({2, 3}, DType::f64);
  dst.copy_(from_vector({1.f, 2.f, 3.f}, {3}));
  EXPECT_EQ(to_vector<double>(dst), (std::vector<double>{1, 2, 3, 1, 2, 3}));
  EXPECT_THROW(dst.copy_(zeros({4})), Error);
}

TEST(Tensor, CopyBetweenOverlappingViewsOfOneStorage) {
  Tensor a = iota({5});
  Tensor head = a.slice(0, 0, 4), tail = a.slice(0, 1, 5);
  tail.copy_(head);
  EXPECT_EQ(values_of(a), (std::vector<float>{0, 0, 1, 2, 3}));
}

TEST(Creation, ArangeFollowsPyTorchDtypes) {
  EXPECT_EQ(arange(5).dtype(), DType::i64);
  EXPECT_EQ(to_vector<int64_t>(arange(2, 11, 3)), (std::vector<int64_t>{2, 5, 8}));
  EXPECT_EQ(arange(0.0, 1.0, 0.25).dtype(), DType::f32);
  EXPECT_EQ(values_of(arange(0.0, 1.0, 0.25)), (std::vector<float>{0, 0.25f, 0.5f, 0.75f}));
  EXPECT_EQ(to_vector<int64_t>(arange(3, 0, -1)), (std::vector<int64_t>{3, 2, 1}));
  EXPECT_THROW(arange(0, 5, 0), Error);
  EXPECT_THROW(arange(5, 0, 1), Error);
}

TEST(Creation, LinspaceEndsExactly) {
  const std::vector<double> v = to_vector<double>(linspace(-1.0, 2.0, 7, DType::f64));
  ASSERT_EQ(v.size(), 7u);
  EXPECT_EQ(v.front(), -1.0);
  EXPECT_EQ(v.back(), 2.0);
  EXPECT_DOUBLE_EQ(v[3], 0.5);
  EXPECT_EQ(linspace(0, 1, 0).numel(), 0);
  EXPECT_EQ(values_of(linspace(3, 9, 1)), (std::vector<float>{3}));
}

TEST(Creation, EyeAndFull) {
  EXPECT_EQ(values_of(eye(2, 3)), (std::vector<float>{1, 0, 0, 0, 1, 0}));
  EXPECT_EQ(to_vector<int64_t>(eye(2, std::nullopt, DType::i64)),
            (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(values_of(full({2}, 3.5)), (std::vector<float>{3.5, 3.5}));
  EXPECT_THROW(zeros({2, -1}), Error);
}

TEST(Creation, FromBlobWrapsWithoutCopying) {
  float buffer[4] = {1, 2, 3, 4};
  Tensor t = from_blob(buffer, {2, 2}, DType::f32);
  t.mul_(2.0);
  EXPECT_EQ(buffer[3], 8.0f);
}

TEST(Printing, LooksLikePyTorch) {
  EXPECT_EQ(from_vector({1.f, 2.f, 3.f, 4.f}, {2, 2}).str(),
            "tensor([[1., 2.],\n        [3., 4.]])");
  EXPECT_EQ(arange(3).str(), "tensor([0, 1, 2])");
  EXPECT_EQ(full({}, 0.5, DType::f64).str(), "tensor(0.5000, dtype=f64)");
  Tensor w = ones({2}).requires_grad_();
  EXPECT_EQ(w.str(), "tensor([1., 1.], requires_grad=True)");
}

TEST(Errors, OutOfRangeIndicesAndDimsNameTheOpAndTheRange) {
  Tensor a = zeros({3, 4});
  try {
    a.select(1, 4);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("select: index 4 is out of range"), std::string::npos)
        << e.what();
  }
  try {
    a.transpose(0, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("dim 2 is out of range"), std::string::npos) << e.what();
  }
  EXPECT_THROW(a.narrow(0, 2, 2), Error);
  EXPECT_THROW(a.permute({0, 0}), Error);
  EXPECT_THROW(a.reshape({5, -1}), Error);
  EXPECT_THROW(a.expand({2, 4}), Error);
}

// A 0-d tensor has no dim to read a size or stride of, or to cut: each is an error that says so
// (size, stride and narrow read past an empty shape before).
TEST(Errors, AZeroDimTensorHasNoDimToSizeStrideOrCut) {
  const Tensor scalar = full({}, 2.0);
  for (int64_t d : {0, -1}) {
    EXPECT_ERROR_WITH(scalar.size(d), "size: dim", "0-d tensor");
    EXPECT_ERROR_WITH(scalar.stride(d), "stride: dim", "0-d tensor");
    EXPECT_ERROR_WITH(scalar.narrow(d, 0, 1), "narrow: cannot narrow a 0-d tensor");
    EXPECT_ERROR_WITH(scalar.slice(d, 0, 1), "slice: cannot slice a 0-d tensor");
    EXPECT_ERROR_WITH(scalar.select(d, 0), "select: cannot select from a 0-d tensor");
  }
  // Steps and lengths near int64's end (their sums overflowed): a slice of one value, an error.
  const int64_t most = std::numeric_limits<int64_t>::max();
  const Tensor six = arange(6);
  EXPECT_EQ(six.slice(0, 0, 2, most).sizes(), Shape{1});
  EXPECT_EQ(six.slice(0, 3, most, most).item<int64_t>(), 3);
  EXPECT_ERROR_WITH(six.narrow(0, 2, most), "narrow: start 2 and length");
  EXPECT_ERROR_WITH(six.reshape({most, 2, -1}), "is invalid for input of shape (6)");
  // What a 0-d tensor does have: its dims through reductions and reshapes, as in PyTorch.
  EXPECT_EQ(sum(scalar, {0}).item<double>(), 2.0);
  EXPECT_EQ(scalar.reshape({-1}).sizes(), Shape{1});
}

TEST(Errors, BadReshapeSaysWhatDoesNotFit) {
  try {
    zeros({3, 4}).reshape({5, 2});
    FAIL();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("(5,2)"), std::string::npos) << message;
    EXPECT_NE(message.find("12"), std::string::npos) << message;
  }
}

// Found by tests/fuzz (an IDX header): a shape whose element count, or whose strides (a size-0
// dimension beside huge ones), overflow int64 was undefined behaviour; it is an error.
TEST(Errors, AShapeTooLargeToCountIsAnError) {
  const int64_t huge = int64_t{1} << 40;
  EXPECT_ERROR_WITH(empty({huge, huge}, DType::u8), "shape (1099511627776,1099511627776)",
                    "more elements than an int64 counts");
  EXPECT_ERROR_WITH(empty({huge, huge, 0}, DType::u8), "strides overflow");
  EXPECT_EQ(empty({huge, 0}, DType::u8).numel(), 0);  // strides (1, 1): nothing overflows
  // Elements an int64 counts, but bytes that no allocation holds: the byte count wrapped around
  // (2^62 f32 values are 2^64 bytes, 0 in size_t), and the tensor got a few bytes.
  for (const Shape& shape : {Shape{int64_t{1} << 62}, Shape{huge, int64_t{1} << 22}}) {
    EXPECT_ERROR_WITH(empty(shape, DType::f32), "empty: shape", "more than any allocation");
    EXPECT_ERROR_WITH(zeros(shape, DType::f32), "more than any allocation");
  }
  EXPECT_ERROR_WITH(empty_strided({2, 2}, {int64_t{1} << 61, 1}, DType::f64),
                    "empty_strided: shape", "more than any allocation");
  // A span past int64 wrapped negative, which the byte check then let through.
  EXPECT_ERROR_WITH(empty_strided({3, 3}, {(int64_t{1} << 62) + 1, 1}, DType::f16),
                    "reaches past what an int64 counts");
  // The allocator itself refuses such a size (its size classes would loop or wrap past it).
  EXPECT_ERROR_WITH(cpu_allocator().allocate(size_t{1} << 62), "more than any allocation");
}

TEST(Errors, CudaRequestsExplainWhyTheyCannotWork) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a CUDA device is visible";
  try {
    zeros({2}, Device::cuda(0));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Device::parse("gpu"), Error);
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
}

TEST(Errors, UndefinedTensorIsAnErrorNotACrash) {
  Tensor undefined;
  EXPECT_FALSE(undefined.defined());
  EXPECT_THROW(undefined.sizes(), Error);
  EXPECT_THROW(add(undefined, zeros({1})), Error);
}

}  // namespace
}  // namespace ember
