// Broadcasting and type promotion edge cases: size-0 and size-1 dims, 0-d tensors, bare numbers.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/ops.h"
#include "runtime/ops/layout.h"

namespace ember {
namespace {

TEST(Broadcast, ShapesFollowNumPyRules) {
  EXPECT_EQ(broadcast_shapes({3, 1}, {1, 4}, "t"), (Shape{3, 4}));
  EXPECT_EQ(broadcast_shapes({5, 3, 1}, {4}, "t"), (Shape{5, 3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {2, 2}, "t"), (Shape{2, 2}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 3}, "t"), (Shape{0, 3}));
  EXPECT_EQ(broadcast_shapes({1}, {0}, "t"), (Shape{0}));
}

TEST(Broadcast, MismatchNamesTheOpAndBothShapes) {
  try {
    add(zeros({2, 3}), zeros({4}));
    FAIL();
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("add"), std::string::npos) << message;
    EXPECT_NE(message.find("(2,3)"), std::string::npos) << message;
    EXPECT_NE(message.find("(4)"), std::string::npos) << message;
  }
  EXPECT_THROW(mul(zeros({0}), zeros({2})), Error);  // 0 and 2 do not broadcast
}

TEST(Broadcast, SizeZeroDimsGiveEmptyResults) {
  Tensor a = zeros({0, 3});
  Tensor r = a + ones({1, 3});
  EXPECT_EQ(r.sizes(), (Shape{0, 3}));
  EXPECT_EQ(sum(r).item<float>(), 0.0f);
  EXPECT_EQ(sum(a, {0}).sizes(), (Shape{3}));
  EXPECT_EQ(to_vector<float>(sum(a, {0})), (std::vector<float>{0, 0, 0}));
}

TEST(Broadcast, ZeroDimTensorsBroadcastEverywhere) {
  Tensor s = full({}, 2.0);
  EXPECT_EQ((s * ones({2, 3})).sizes(), (Shape{2, 3}));
  EXPECT_EQ((s * s).dim(), 0);
  EXPECT_FLOAT_EQ((s * s).item<float>(), 4.0f);
  EXPECT_EQ(sum(s).dim(), 0);
}

TEST(Broadcast, ResultsMatchExplicitExpansion) {
  manual_seed(3);
  Tensor a = randn({4, 1, 5}), b = randn({3, 1});
  Tensor direct = a * b + a;
  Tensor expanded = a.expand({4, 3, 5}).contiguous() * b.expand({4, 3, 5}).contiguous() +
                    a.expand({4, 3, 5}).contiguous();
  EXPECT_TRUE(allclose(direct, expanded, 0, 0));
}

TEST(Broadcast, NonContiguousAndExpandedOperandsInEveryPosition) {
  manual_seed(4);
  Tensor base = randn({6, 8});
  Tensor transposed = base.t();                        // (8,6), strides (1,8)
  Tensor stepped = randn({8, 12}).slice(1, 0, 12, 2);  // (8,6), strides (12,2)
  Tensor expected = transposed.contiguous() - stepped.contiguous();
  EXPECT_TRUE(allclose(transposed - stepped, expected, 0, 0));
  EXPECT_TRUE(allclose(stepped.contiguous() * transposed, stepped * transposed.contiguous(), 0, 0));
  Tensor out = zeros({8, 6});
  Tensor view = out.t();  // write through a transposed view
  view.copy_(transposed.t());
  EXPECT_TRUE(allclose(out, transposed, 0, 0));
}

TEST(Promotion, ZeroDimTensorsAndNumbersOnlyChangeTheCategory) {
  Tensor i = arange(4);                                            // i64
  EXPECT_EQ((i + 2).dtype(), DType::i64);                          // integer number keeps i64
  EXPECT_EQ((i + 2.5).dtype(), DType::f32);                        // float number: default float
  EXPECT_EQ((i + full({}, 1.0, DType::f64)).dtype(), DType::f64);  // 0-d float decides
  Tensor h = zeros({2}, DType::f16);
  EXPECT_EQ((h + 2.5).dtype(), DType::f16);  // same category: the tensor wins
  EXPECT_EQ((h + full({}, 1.0, DType::f64)).dtype(), DType::f16);
  EXPECT_EQ((h + zeros({2}, DType::f32)).dtype(), DType::f32);  // both with dims: promote
  EXPECT_EQ((zeros({2}, DType::f16) + zeros({2}, DType::bf16)).dtype(), DType::f32);
  EXPECT_EQ(div(arange(4), 2).dtype(), DType::f32);  // true division
  EXPECT_EQ(sum(arange(4)).dtype(), DType::i64);
  EXPECT_EQ(sum(zeros({2}, DType::boolean)).dtype(), DType::i64);
}

TEST(Promotion, ComparisonsGiveBool) {
  Tensor r = gt(arange(4), 1.5);
  EXPECT_EQ(r.dtype(), DType::boolean);
  EXPECT_EQ(to_vector<bool>(r), (std::vector<bool>{false, false, true, true}));
}

TEST(InPlace, ResultMustFitTheTarget) {
  Tensor a = zeros({3});
  EXPECT_THROW(a.add_(zeros({2, 3})), Error);  // would need a bigger target
  Tensor i = arange(3);
  EXPECT_THROW(i.mul_(1.5), Error);  // a float result cannot go into i64
  a.add_(ones({1}));
  EXPECT_EQ(to_vector<float>(a), (std::vector<float>{1, 1, 1}));
}

// An operand that shares memory with the in-place target is read as it was before the write
// (copy_ and NumPy do the same; PyTorch refuses), in every dtype: the 16-bit kernels go through f32
// chunks, the others run element by element, and neither order may show through.
TEST(InPlace, AnOverlappingOperandIsReadAsItWasBeforeTheWrite) {
  constexpr int64_t n = 1100;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i)
    values[i] = static_cast<float>(i % 7);
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    Tensor a = from_vector(values, {n}).to(dtype);
    a.slice(0, 1, n).add_(a.slice(0, 0, n - 1));  // a[1:] += a[:-1]
    const std::vector<float> got = to_vector<float>(a.to(DType::f32));
    EXPECT_EQ(got[0], values[0]);
    for (int64_t i = 1; i < n; ++i)
      ASSERT_EQ(got[i], values[i] + values[i - 1]) << "element " << i;

    Tensor m = from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}).to(dtype);
    m.mul_(m.slice(0, 0, 1));  // every row times the first row, the first row included
    EXPECT_EQ(to_vector<float>(m.to(DType::f32)), (std::vector<float>{1, 4, 3, 8, 5, 12}));
  }
}

}  // namespace
}  // namespace ember
