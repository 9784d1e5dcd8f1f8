// Forward values of cat, stack, split, chunk, index_select, gather, scatter_add, pad and embedding
// against plain loops, their views, dtypes and error messages.
#include <gtest/gtest.h>

#include <limits>

#include <string>

#include "nn/layers.h"
#include "runtime/ops.h"
#include "tests/common/expect_error.h"

namespace ember {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, DType dtype = DType::f64) {
  Generator g(seed);
  return uniform(shape, -1.0, 1.0, DType::f64, &g).to(dtype);
}

// Element at a multi-index of a (possibly strided) tensor, read through to_vector of its clone.
double at(const std::vector<double>& values, const Shape& shape, const Shape& index) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d)
    flat = flat * shape[d] + index[d];
  return values[static_cast<size_t>(flat)];
}

TEST(Split, BySizeGivesViewsOfTheRequestedSizes) {
  Tensor x = random_tensor({7, 3}, 1);
  const std::vector<Tensor> pieces = split(x, 3, 0);
  ASSERT_EQ(pieces.size(), 3u);
  EXPECT_EQ(pieces[0].sizes(), (Shape{3, 3}));
  EXPECT_EQ(pieces[1].sizes(), (Shape{3, 3}));
  EXPECT_EQ(pieces[2].sizes(), (Shape{1, 3}));
  for (const Tensor& p : pieces)
    EXPECT_EQ(p.storage(), x.storage());
  EXPECT_EQ(pieces[2].storage_offset(), 6 * 3);
  // A write through a piece is seen by the base.
  Tensor last = pieces[2];
  last.fill_(5.0);
  EXPECT_EQ(to_vector<double>(x.select(0, 6)), std::vector<double>(3, 5.0));
}

TEST(Split, BySizesAndChunkFollowTorch) {
  Tensor x = random_tensor({2, 10}, 2);
  const std::vector<Tensor> by_sizes = split(x, std::vector<int64_t>{4, 0, 6}, 1);
  ASSERT_EQ(by_sizes.size(), 3u);
  EXPECT_EQ(by_sizes[0].sizes(), (Shape{2, 4}));
  EXPECT_EQ(by_sizes[1].sizes(), (Shape{2, 0}));
  EXPECT_EQ(by_sizes[2].sizes(), (Shape{2, 6}));
  EXPECT_TRUE(allclose(by_sizes[2], x.slice(1, 4, 10)));
  EXPECT_EQ(by_sizes[2].storage(), x.storage());

  auto sizes_of = [](const std::vector<Tensor>& pieces) {
    std::vector<int64_t> sizes;
    for (const Tensor& p : pieces)
      sizes.push_back(p.size(-1));
    return sizes;
  };
  EXPECT_EQ(sizes_of(chunk(x, 4, 1)), (std::vector<int64_t>{3, 3, 3, 1}));
  EXPECT_EQ(sizes_of(chunk(x, 3, -1)), (std::vector<int64_t>{4, 4, 2}));
  EXPECT_EQ(sizes_of(chunk(x.slice(1, 0, 5), 4, 1)), (std::vector<int64_t>{2, 2, 1}));
  EXPECT_EQ(sizes_of(chunk(x, 20, 1)), std::vector<int64_t>(10, 1));
  for (const Tensor& p : chunk(x, 4, 1))
    EXPECT_EQ(p.storage(), x.storage());

  EXPECT_ERROR_WITH(split(x, std::vector<int64_t>{4, 5}, 1), "split", "sum to 9", "size 10");
  EXPECT_ERROR_WITH(split(x, 0, 1), "split_size must be positive");
  EXPECT_ERROR_WITH(chunk(x, 0, 1), "chunk", "positive");
}

TEST(Split, GradientsFlowThroughTheViews) {
  Tensor x = random_tensor({6}, 3).requires_grad_();
  const std::vector<Tensor> pieces = split(x, 4);
  (sum(pieces[0]) * 2.0 + sum(pieces[1]) * 3.0).backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{2, 2, 2, 2, 3, 3}));
}

TEST(Cat, MatchesNaiveLoopsOnNonContiguousInputs) {
  // a is a transposed view, b a strided slice: neither is contiguous.
  const Tensor a = random_tensor({4, 2}, 4).t();                // (2, 4)
  const Tensor b = random_tensor({2, 6}, 5).slice(1, 0, 6, 2);  // (2, 3)
  const Tensor c = random_tensor({2, 1}, 6);                    // (2, 1)
  ASSERT_FALSE(a.is_contiguous());
  ASSERT_FALSE(b.is_contiguous());
  const Tensor out = cat({a, b, c}, 1);
  ASSERT_EQ(out.sizes(), (Shape{2, 8}));
  const std::vector<double> va = to_vector<double>(a), vb = to_vector<double>(b),
                            vc = to_vector<double>(c), vo = to_vector<double>(out);
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 8; ++j) {
      const double expected = j < 4   ? at(va, {2, 4}, {i, j})
                              : j < 7 ? at(vb, {2, 3}, {i, j - 4})
                                      : at(vc, {2, 1}, {i, 0});
      EXPECT_EQ(at(vo, {2, 8}, {i, j}), expected) << i << "," << j;
    }
  }
  // Along dim 0, and skipping a legacy empty 1-D tensor.
  const Tensor rows = cat({a, empty({0}, DType::f64), a}, 0);
  EXPECT_EQ(rows.sizes(), (Shape{4, 4}));
  EXPECT_TRUE(allclose(rows.slice(0, 2, 4), a));
}

TEST(Cat, PromotesDtypesAndWorksForEveryDtype) {
  const Tensor ints = from_vector(std::vector<int64_t>{1, 2}, {2}, DType::i64).to(DType::i32);
  const Tensor floats = from_vector(std::vector<float>{0.5f}, {1});
  const Tensor joined = cat({ints, floats});
  EXPECT_EQ(joined.dtype(), DType::f32);
  EXPECT_EQ(to_vector<float>(joined), (std::vector<float>{1.f, 2.f, 0.5f}));
  EXPECT_EQ(cat({ints, ints.to(DType::i64)}).dtype(), DType::i64);
  const Tensor flags = ones({2}, DType::boolean);
  EXPECT_EQ(cat({flags, zeros({1}, DType::boolean)}).dtype(), DType::boolean);
  for (DType dtype : {DType::f16, DType::bf16, DType::u8}) {
    const Tensor x = random_tensor({2, 3}, 7).to(dtype);
    EXPECT_TRUE(allclose(cat({x, x}, 1).slice(1, 3, 6), x, 0, 0)) << dtype;
  }
  {
    AutocastGuard autocast(DType::f16);
    const Tensor half = random_tensor({2}, 8, DType::f16),
                 single = random_tensor({2}, 9, DType::f32);
    EXPECT_EQ(cat({half, single}).dtype(), DType::f32);
  }
}

TEST(Cat, ErrorsNameTheOffendingTensor) {
  const Tensor a = zeros({2, 3}), b = zeros({2, 4}), c = zeros({2, 3, 1});
  EXPECT_ERROR_WITH(cat({a, c}, 0), "cat", "tensor 1", "(2,3,1)", "(2,3)");
  EXPECT_ERROR_WITH(cat({a, a, b}, 0), "cat", "tensor 2", "(2,4)", "dim 1");
  EXPECT_ERROR_WITH(cat({zeros({})}, 0), "zero-dimensional");
  EXPECT_ERROR_WITH(cat({}, 0), "non-empty");
  EXPECT_ERROR_WITH(cat({a, a}, 2), "cat");
}

TEST(Cat, BackwardGivesEachInputItsSlice) {
  Tensor a = random_tensor({2, 2}, 10).requires_grad_();
  Tensor b = random_tensor({2, 3}, 11).requires_grad_();
  const Tensor weights =
      from_vector(std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {2, 5}, DType::f64);
  sum(cat({a, b}, 1) * weights).backward();
  EXPECT_EQ(to_vector<double>(a.grad()), (std::vector<double>{1, 2, 6, 7}));
  EXPECT_EQ(to_vector<double>(b.grad()), (std::vector<double>{3, 4, 5, 8, 9, 10}));
}

TEST(Stack, JoinsAlongANewDim) {
  const Tensor a = random_tensor({2, 3}, 12), b = random_tensor({2, 3}, 13);
  const Tensor middle = stack({a, b}, 1);
  ASSERT_EQ(middle.sizes(), (Shape{2, 2, 3}));
  EXPECT_TRUE(allclose(middle.select(1, 0), a, 0, 0));
  EXPECT_TRUE(allclose(middle.select(1, 1), b, 0, 0));
  EXPECT_EQ(stack({a, b, a}, -1).sizes(), (Shape{2, 3, 3}));
  EXPECT_TRUE(allclose(stack({a, b}, -1).select(2, 1), b, 0, 0));
  EXPECT_ERROR_WITH(stack({a, random_tensor({3, 2}, 1)}), "stack", "tensor 1", "(3,2)");
}

TEST(IndexSelect, MatchesNaiveLoopsForEveryIndexDtypeAndLayout) {
  const Tensor x = random_tensor({5, 3, 4}, 14).permute({1, 0, 2});  // (3, 5, 4), strided
  const std::vector<int64_t> picks = {4, 0, 4, 2};
  for (DType index_dtype : {DType::i64, DType::i32}) {
    const Tensor index = from_vector(picks, {4}, DType::i64).to(index_dtype);
    const Tensor out = index_select(x, 1, index);
    ASSERT_EQ(out.sizes(), (Shape{3, 4, 4}));
    const std::vector<double> vx = to_vector<double>(x), vo = to_vector<double>(out);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t k = 0; k < 4; ++k)
          EXPECT_EQ(at(vo, {3, 4, 4}, {i, j, k}), at(vx, {3, 5, 4}, {i, picks[j], k}));
  }
  // Every dtype is a plain copy: exact.
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::u8, DType::boolean}) {
    const Tensor xd = random_tensor({4, 3}, 15).to(dtype);
    const Tensor index = from_vector(std::vector<int64_t>{2, 2, 0}, {3}, DType::i64);
    const Tensor got = index_select(xd, 0, index);
    EXPECT_TRUE(allclose(got.select(0, 0), xd.select(0, 2), 0, 0)) << dtype;
    EXPECT_TRUE(allclose(got.select(0, 2), xd.select(0, 0), 0, 0)) << dtype;
  }
}

TEST(IndexSelect, BackwardAddsRepeatedRows) {
  Tensor x = random_tensor({3, 2}, 16).requires_grad_();
  const Tensor index = from_vector(std::vector<int64_t>{2, 0, 2}, {3}, DType::i64);
  sum(index_select(x, 0, index)).backward();
  EXPECT_EQ(to_vector<double>(x.grad()), (std::vector<double>{1, 1, 0, 0, 2, 2}));
}

TEST(Gather, MatchesNaiveLoops) {
  const Tensor x = random_tensor({4, 5}, 17).t();  // (5, 4), strided
  Generator g(3);
  const Tensor index = randint(0, 4, {3, 6}, DType::i64, &g);
  const Tensor out = gather(x, 1, index);
  ASSERT_EQ(out.sizes(), (Shape{3, 6}));
  const std::vector<double> vx = to_vector<double>(x), vo = to_vector<double>(out);
  const std::vector<int64_t> vi = to_vector<int64_t>(index);
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 6; ++j)
      EXPECT_EQ(at(vo, {3, 6}, {i, j}), at(vx, {5, 4}, {i, vi[i * 6 + j]}));
  for (DType dtype : {DType::f16, DType::bf16, DType::i64, DType::boolean}) {
    const Tensor xd = x.to(dtype);
    EXPECT_TRUE(allclose(gather(xd, 1, index), out.to(dtype), 0, 0)) << dtype;
  }
}

TEST(ScatterAdd, MatchesNaiveLoopsWithDuplicates) {
  const Tensor x = random_tensor({4, 3}, 18);
  const Tensor src = random_tensor({3, 5}, 19).t();  // (5, 3), strided
  const std::vector<int64_t> vi = {0, 1, 3, 0, 0, 3, 2, 1, 3, 0, 0, 0, 1, 1, 1};
  const Tensor index = from_vector(vi, {5, 3}, DType::i64);
  const Tensor out = scatter_add(x, 0, index, src);
  std::vector<double> expected = to_vector<double>(x);
  const std::vector<double> vs = to_vector<double>(src);
  for (int64_t i = 0; i < 5; ++i)
    for (int64_t j = 0; j < 3; ++j)
      expected[vi[i * 3 + j] * 3 + j] += vs[i * 3 + j];
  const std::vector<double> got = to_vector<double>(out);
  for (size_t k = 0; k < got.size(); ++k)
    EXPECT_NEAR(got[k], expected[k], 1e-12) << k;
  // x itself is untouched.
  EXPECT_TRUE(allclose(x, random_tensor({4, 3}, 18), 0, 0));
  // Integers add exactly; f16/bf16 within their precision.
  const Tensor ints = scatter_add(zeros({4, 3}, DType::i64), 0, index, ones({5, 3}, DType::i64));
  EXPECT_EQ(sum(ints).item<int64_t>(), 15);
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Tensor low = scatter_add(x.to(dtype), 0, index, src.to(dtype));
    EXPECT_TRUE(allclose(low.to(DType::f64), out, dtype == DType::bf16 ? 2e-2 : 4e-3, 1e-2))
        << dtype;
  }
}

TEST(Indexing, OutOfRangeIndicesAreErrorsNamingTheOpValueAndRange) {
  const Tensor x = zeros({4, 3});
  const Tensor bad = from_vector(std::vector<int64_t>{0, 5}, {2}, DType::i64);
  EXPECT_ERROR_WITH(index_select(x, 0, bad), "index_select", "index 5", "[0, 4)");
  const Tensor negative = from_vector(std::vector<int64_t>{-1, 0}, {1, 2}, DType::i64);
  EXPECT_ERROR_WITH(gather(x, 1, negative), "gather", "index -1", "[0, 3)");
  const Tensor big = from_vector(std::vector<int64_t>{7, 0}, {2, 1}, DType::i64);
  EXPECT_ERROR_WITH(scatter_add(x, 0, big, ones({2, 1})), "scatter_add", "index 7", "[0, 4)");
  EXPECT_ERROR_WITH(index_select(x, 0, zeros({2})), "index_select", "i64 or i32");
  EXPECT_ERROR_WITH(gather(x, 1, zeros({4}, DType::i64)), "gather", "as many dims");
  EXPECT_ERROR_WITH(gather(x, 1, zeros({5, 3}, DType::i64)), "gather", "dim 0");
  EXPECT_ERROR_WITH(scatter_add(x, 0, zeros({2, 1}, DType::i64), ones({2, 1}, DType::f64)),
                    "scatter_add", "dtype");
}

TEST(Pad, MatchesNaiveLoopsForPaddingAndCropping) {
  const Tensor x = random_tensor({3, 5}, 20).t();  // (5, 3), strided
  const std::vector<double> vx = to_vector<double>(x);
  struct Case {
    std::vector<int64_t> padding;
    double value;
  };
  for (const Case& c : {Case{{1, 2}, 0.0}, Case{{1, 2, 0, 1}, -3.0}, Case{{-1, 2, 1, -2}, 0.5},
                        Case{{0, -3, -4, 0}, 1.0}}) {
    const Tensor out = pad(x, c.padding, c.value);
    const int64_t left = c.padding[0], right = c.padding[1];
    const int64_t top = c.padding.size() > 2 ? c.padding[2] : 0;
    const int64_t bottom = c.padding.size() > 2 ? c.padding[3] : 0;
    const Shape shape = {5 + top + bottom, 3 + left + right};
    ASSERT_EQ(out.sizes(), shape);
    const std::vector<double> vo = to_vector<double>(out);
    for (int64_t i = 0; i < shape[0]; ++i) {
      for (int64_t j = 0; j < shape[1]; ++j) {
        const int64_t si = i - top, sj = j - left;
        const bool inside = si >= 0 && si < 5 && sj >= 0 && sj < 3;
        EXPECT_EQ(at(vo, shape, {i, j}), inside ? at(vx, {5, 3}, {si, sj}) : c.value)
            << shape_str(c.padding) << " at " << i << "," << j;
      }
    }
  }
  const Tensor ints = pad(ones({2}, DType::i32), {1, 1}, 7);
  EXPECT_EQ(to_vector<int32_t>(ints), (std::vector<int32_t>{7, 1, 1, 7}));
  EXPECT_ERROR_WITH(pad(x, {1}), "pad", "even");
  EXPECT_ERROR_WITH(pad(x, {1, 1, 1, 1, 1, 1}), "pad", "covers 3 dims");
  EXPECT_ERROR_WITH(pad(x, {-2, -2}), "pad", "negative size");
  // Sums past int64 (undefined behaviour before, and a result of some size).
  const int64_t most = std::numeric_limits<int64_t>::max();
  EXPECT_ERROR_WITH(pad(x, {std::numeric_limits<int64_t>::min(), most}), "crops more than");
  EXPECT_ERROR_WITH(pad(x, {most, 1}), "overflows int64");
  EXPECT_ERROR_WITH(split(x, {most, most, 1}, 0), "sum within int64");
  EXPECT_EQ(chunk(x, most, 0).size(), 5u);  // pieces of one row: (5 + chunks - 1) overflowed
}

TEST(Embedding, MatchesNaiveLookupAndSumsGradientsOfRepeatedRows) {
  Tensor weight = random_tensor({5, 3}, 21).requires_grad_();
  const std::vector<int64_t> picks = {1, 4, 1, 0, 1, 3};
  const Tensor indices = from_vector(picks, {2, 3}, DType::i64).to(DType::i32);
  const Tensor out = embedding(indices, weight);
  ASSERT_EQ(out.sizes(), (Shape{2, 3, 3}));
  const std::vector<double> vw = to_vector<double>(weight), vo = to_vector<double>(out);
  for (size_t k = 0; k < picks.size(); ++k)
    for (int64_t d = 0; d < 3; ++d)
      EXPECT_EQ(vo[k * 3 + d], vw[picks[k] * 3 + d]);
  sum(out).backward();
  EXPECT_EQ(to_vector<double>(weight.grad()),
            (std::vector<double>{1, 1, 1, 3, 3, 3, 0, 0, 0, 1, 1, 1, 1, 1, 1}));
  const Tensor bad = from_vector(std::vector<int64_t>{2, 5}, {2}, DType::i64);
  EXPECT_ERROR_WITH(embedding(bad, weight), "embedding", "index 5", "[0, 5)");
  EXPECT_ERROR_WITH(embedding(bad, zeros({5})), "embedding", "num_embeddings");
  EXPECT_ERROR_WITH(embedding(zeros({2}), weight), "embedding", "i64 or i32");
}

TEST(Embedding, PaddingPositionsReadTheirRowButSendItNoGradient) {
  Tensor weight = random_tensor({5, 2}, 22).requires_grad_();
  const Tensor indices = from_vector(std::vector<int64_t>{1, 4, 1, 0}, {4}, DType::i64);
  for (int64_t padding : {1, -4}) {  // -4: row 5 - 4 = 1
    weight.set_grad(Tensor());
    const Tensor out = embedding(indices, weight, padding);
    EXPECT_EQ(to_vector<double>(out.select(0, 0)), to_vector<double>(weight.select(0, 1)));
    // An inf cotangent at a padding position adds nothing, not inf * 0 = NaN.
    const double inf = std::numeric_limits<double>::infinity();
    const Tensor cotangent =
        from_vector(std::vector<double>{inf, 1, 2, 3, 4, 5, 6, 7}, {4, 2}, DType::f64)
            .to(weight.dtype());
    sum(out * cotangent).backward();
    EXPECT_EQ(to_vector<double>(weight.grad()), (std::vector<double>{6, 7, 0, 0, 0, 0, 0, 0, 2, 3}))
        << "padding_idx " << padding;
  }
  EXPECT_ERROR_WITH(embedding(indices, weight, 5), "embedding", "padding_idx 5",
                    "-5 <= padding_idx < 5");
  EXPECT_ERROR_WITH(embedding(indices, weight, -6), "padding_idx -6");
}

// max_norm (torch.embedding_renorm_): the named rows longer than max_norm are scaled in place by
// max_norm / (norm + 1e-7) before the lookup; other rows, and rows within the bound, keep their
// bits. Autograd still sees a lookup of the (renormalised) table.
TEST(Embedding, MaxNormRenormalisesTheNamedRowsInPlace) {
  // Rows of length 5, 0.5, 10, 3 (2-norm); 1-norm 7, 0.7, 14, 3.
  const std::vector<double> table = {3, 4, 0.3, -0.4, 6, -8, 0, 3};
  Tensor weight = from_vector(table, {4, 2}, DType::f64).requires_grad_();
  const Tensor indices = from_vector(std::vector<int64_t>{1, 2, 2, 3}, {2, 2}, DType::i64);
  const Tensor out = embedding(indices, weight, std::nullopt, 4.0);
  const double scale = 4.0 / (10.0 + 1e-7);
  const std::vector<double> renormed = {3, 4, 0.3, -0.4, 6 * scale, -8 * scale, 0, 3};
  EXPECT_EQ(to_vector<double>(weight.detach()), renormed);  // row 0 (length 5) is not named
  EXPECT_EQ(to_vector<double>(out),
            (std::vector<double>{0.3, -0.4, 6 * scale, -8 * scale, 6 * scale, -8 * scale, 0, 3}));
  sum(out).backward();
  EXPECT_EQ(to_vector<double>(weight.grad()), (std::vector<double>{0, 0, 1, 1, 2, 2, 1, 1}));

  Tensor l1 = from_vector(table, {4, 2}, DType::f64);
  embedding_renorm_(l1, from_vector(std::vector<int64_t>{0, 3}, {2}, DType::i64), 2.0, 1.0);
  const double l1_scale = 2.0 / (7.0 + 1e-7), l1_scale_3 = 2.0 / (3.0 + 1e-7);
  EXPECT_EQ(to_vector<double>(l1),
            (std::vector<double>{3 * l1_scale, 4 * l1_scale, 0.3, -0.4, 6, -8, 0, 3 * l1_scale_3}));

  nn::Embedding module(6, 3, std::nullopt, 1.0);
  (void)module(from_vector(std::vector<int64_t>{0, 5}, {2}, DType::i64));
  const Tensor norms = norm(module.weight.detach(), 2.0, {1});
  EXPECT_LE(norms.select(0, 0).item<float>(), 1.0f + 1e-6f);
  EXPECT_LE(norms.select(0, 5).item<float>(), 1.0f + 1e-6f);
  EXPECT_NE(module.extra_repr().find("max_norm=1"), std::string::npos) << module.extra_repr();
  EXPECT_ERROR_WITH(embedding(indices, weight, std::nullopt, -1.0), "embedding_renorm_",
                    "max_norm must be a finite number >= 0, got -1");
  EXPECT_ERROR_WITH(
      embedding(from_vector(std::vector<int64_t>{4}, {1}, DType::i64), weight, std::nullopt, 1.0),
      "embedding_renorm_", "4");
}

}  // namespace
}  // namespace ember
