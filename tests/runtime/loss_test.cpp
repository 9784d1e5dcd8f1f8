// Forward values (and the fused backward) of the losses against hand-written f64 formulas, and
// dropout's statistics and determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "runtime/ops.h"
#include "tests/common/expect_error.h"

namespace ember {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, double low = -2.0, double high = 2.0) {
  Generator g(seed);
  return uniform(shape, low, high, DType::f64, &g);
}

Tensor class_targets(const std::vector<int64_t>& values, DType dtype = DType::i64) {
  return from_vector(values, {static_cast<int64_t>(values.size())}, DType::i64).to(dtype);
}

// log_softmax of each row of an (N, C) array, by hand in f64.
std::vector<std::vector<double>> log_softmax_rows(const std::vector<double>& x, int64_t n,
                                                  int64_t c) {
  std::vector<std::vector<double>> rows(n, std::vector<double>(c));
  for (int64_t i = 0; i < n; ++i) {
    double largest = -INFINITY;
    for (int64_t j = 0; j < c; ++j)
      largest = std::max(largest, x[i * c + j]);
    double total = 0;
    for (int64_t j = 0; j < c; ++j)
      total += std::exp(x[i * c + j] - largest);
    for (int64_t j = 0; j < c; ++j)
      rows[i][j] = x[i * c + j] - largest - std::log(total);
  }
  return rows;
}

// PyTorch's per-row loss: (1 - eps) * nll + eps * mean_c(-logp); 0 for ignored rows.
std::vector<double> reference_losses(const Tensor& logits, const std::vector<int64_t>& target,
                                     double eps, int64_t ignore_index = -100) {
  const int64_t n = logits.size(0), c = logits.size(1);
  const auto logp = log_softmax_rows(to_vector<double>(logits), n, c);
  std::vector<double> losses(n, 0.0);
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == ignore_index) continue;
    double mean_neg = 0;
    for (int64_t j = 0; j < c; ++j)
      mean_neg -= logp[i][j] / static_cast<double>(c);
    losses[i] = (1 - eps) * -logp[i][target[i]] + eps * mean_neg;
  }
  return losses;
}

CrossEntropyOptions options_of(Reduction reduction, double smoothing = 0.0,
                               int64_t ignore_index = -100) {
  CrossEntropyOptions options;
  options.reduction = reduction;
  options.label_smoothing = smoothing;
  options.ignore_index = ignore_index;
  return options;
}

TEST(CrossEntropy, MatchesLogSoftmaxPlusNllByHand) {
  const Tensor logits = random_tensor({6, 5}, 1);
  const std::vector<int64_t> target = {0, 4, 2, 2, 1, 3};
  const std::vector<double> expected = reference_losses(logits, target, 0.0);
  double total = 0;
  for (double v : expected)
    total += v;
  for (DType target_dtype : {DType::i64, DType::i32}) {
    const Tensor t = class_targets(target, target_dtype);
    const Tensor none = cross_entropy(logits, t, options_of(Reduction::none));
    ASSERT_EQ(none.sizes(), (Shape{6}));
    const std::vector<double> got = to_vector<double>(none);
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], expected[i], 1e-12);
    EXPECT_NEAR(cross_entropy(logits, t, options_of(Reduction::sum)).item<double>(), total, 1e-12);
    EXPECT_NEAR(cross_entropy(logits, t).item<double>(), total / 6, 1e-12);
  }
  // Large logits do not overflow.
  const Tensor big = logits * 1000.0;
  EXPECT_TRUE(std::isfinite(cross_entropy(big, class_targets(target)).item<double>()));
}

TEST(CrossEntropy, LabelSmoothingFollowsTheHandFormula) {
  const Tensor logits = random_tensor({4, 3}, 2);
  const std::vector<int64_t> target = {2, 0, 1, 1};
  for (double eps : {0.1, 0.25, 1.0}) {
    const std::vector<double> expected = reference_losses(logits, target, eps);
    double mean = 0;
    for (double v : expected)
      mean += v / 4;
    EXPECT_NEAR(cross_entropy(logits, class_targets(target), options_of(Reduction::mean, eps))
                    .item<double>(),
                mean, 1e-12)
        << eps;
  }
  EXPECT_ERROR_WITH(cross_entropy(logits, class_targets(target), options_of(Reduction::mean, 1.5)),
                    "label_smoothing", "[0, 1]");
}

TEST(CrossEntropy, MeanDividesByTheTargetsThatAreNotIgnored) {
  const Tensor logits = random_tensor({5, 4}, 3);
  const std::vector<int64_t> target = {1, -100, 3, -100, 0};
  for (double eps : {0.0, 0.1}) {
    const std::vector<double> expected = reference_losses(logits, target, eps);
    EXPECT_EQ(expected[1], 0.0);
    const double mean = (expected[0] + expected[2] + expected[4]) / 3;
    EXPECT_NEAR(cross_entropy(logits, class_targets(target), options_of(Reduction::mean, eps))
                    .item<double>(),
                mean, 1e-12);
    const std::vector<double> none = to_vector<double>(
        cross_entropy(logits, class_targets(target), options_of(Reduction::none, eps)));
    EXPECT_EQ(none[1], 0.0);
    EXPECT_EQ(none[3], 0.0);
  }
  // A custom ignore_index.
  const std::vector<int64_t> custom = {1, 2, 3, 2, 0};
  const double with_custom =
      cross_entropy(logits, class_targets(custom), options_of(Reduction::sum, 0.0, 2))
          .item<double>();
  const std::vector<double> expected = reference_losses(logits, custom, 0.0, 2);
  EXPECT_NEAR(with_custom, expected[0] + expected[2] + expected[4], 1e-12);
  // Every target ignored: mean is 0 / 0, as in PyTorch.
  EXPECT_TRUE(std::isnan(
      cross_entropy(logits, class_targets({-100, -100, -100, -100, -100})).item<double>()));
}

TEST(CrossEntropy, SpatialLayoutMatchesTheFlattenedRows) {
  // (N, C, H, W) logits against the same positions laid out as (N*H*W, C) rows.
  const Tensor logits = random_tensor({2, 3, 2, 4}, 4);
  Generator g(5);
  Tensor target = randint(0, 3, {2, 2, 4}, DType::i64, &g);
  {
    std::vector<int64_t> values = to_vector<int64_t>(target);
    values[5] = -100;
    target = from_vector(values, {2, 2, 4}, DType::i64);
  }
  const Tensor rows = logits.permute({0, 2, 3, 1}).reshape({16, 3});
  const Tensor flat_target = target.reshape({16});
  for (Reduction reduction : {Reduction::none, Reduction::mean, Reduction::sum}) {
    const Tensor spatial = cross_entropy(logits, target, options_of(reduction, 0.1));
    const Tensor flat = cross_entropy(rows, flat_target, options_of(reduction, 0.1));
    EXPECT_TRUE(
        allclose(spatial.reshape({spatial.numel()}), flat.reshape({flat.numel()}), 1e-12, 1e-12));
  }
  EXPECT_EQ(cross_entropy(logits, target, options_of(Reduction::none)).sizes(), (Shape{2, 2, 4}));
}

TEST(CrossEntropy, UnbatchedLogitsAreOneRow) {
  const Tensor logits = random_tensor({2, 5}, 15);
  const Tensor target = class_targets({3, 1});
  const Tensor batched = cross_entropy(logits, target, options_of(Reduction::none, 0.1));
  const Tensor single =
      cross_entropy(logits.select(0, 1), target.select(0, 1), options_of(Reduction::none, 0.1));
  EXPECT_EQ(single.dim(), 0);
  EXPECT_NEAR(single.item<double>(), batched.select(0, 1).item<double>(), 1e-12);
}

TEST(CrossEntropy, BackwardIsSoftmaxMinusSmoothedOneHot) {
  Tensor logits = random_tensor({3, 4}, 6).requires_grad_();
  const std::vector<int64_t> target = {3, -100, 1};
  const double eps = 0.2;
  cross_entropy(logits, class_targets(target), options_of(Reduction::mean, eps)).backward();
  const auto logp = log_softmax_rows(to_vector<double>(logits), 3, 4);
  const std::vector<double> grad = to_vector<double>(logits.grad());
  for (int64_t i = 0; i < 3; ++i) {
    for (int64_t j = 0; j < 4; ++j) {
      double expected = 0;
      if (target[i] != -100) {
        const double onehot = j == target[i] ? 1.0 : 0.0;
        expected = (std::exp(logp[i][j]) - (1 - eps) * onehot - eps / 4) / 2;  // 2 counted
      }
      EXPECT_NEAR(grad[i * 4 + j], expected, 1e-12) << i << "," << j;
    }
  }
}

TEST(CrossEntropy, ReducedPrecisionAndAutocast) {
  const Tensor logits = random_tensor({8, 10}, 7).to(DType::f32);
  Generator g(8);
  const Tensor target = randint(0, 10, {8}, DType::i64, &g);
  const Tensor reference = cross_entropy(logits, target, options_of(Reduction::none));
  for (DType dtype : {DType::f16, DType::bf16}) {
    const Tensor low = cross_entropy(logits.to(dtype), target, options_of(Reduction::none));
    EXPECT_EQ(low.dtype(), dtype);
    // The inputs round to dtype: compare with tolerances of the dtype.
    EXPECT_TRUE(allclose(low.to(DType::f32), reference, dtype == DType::bf16 ? 3e-2 : 4e-3, 3e-2))
        << dtype;
  }
  AutocastGuard autocast(DType::f16);
  const Tensor under = cross_entropy(logits.to(DType::f16), target);
  EXPECT_EQ(under.dtype(), DType::f32);
}

TEST(CrossEntropy, BadTargetsAreClearErrors) {
  const Tensor logits = random_tensor({3, 4}, 9);
  // A floating target is read as class probabilities: the message names both forms.
  EXPECT_ERROR_WITH(cross_entropy(logits, zeros({3})), "cross_entropy", "class probabilities",
                    "the logits' shape (3,4), got (3)", "class indices are an i64 target");
  EXPECT_ERROR_WITH(cross_entropy(logits, zeros({3}, DType::u8)), "cross_entropy",
                    "expected target of dtype i64");
  EXPECT_ERROR_WITH(cross_entropy(logits, class_targets({0, 7, 1})), "cross_entropy",
                    "target value 7", "C = 4");
  EXPECT_ERROR_WITH(cross_entropy(logits, class_targets({0, -1, 1})), "target value -1");
  EXPECT_ERROR_WITH(cross_entropy(logits, class_targets({0, 1})), "cross_entropy", "(3)", "(2)");
  EXPECT_ERROR_WITH(nll_loss(logits, class_targets({0, 4, 1})), "nll_loss", "target value 4");
  // A Reduction outside the enum (a cast) gave an undefined loss, which autograd dereferenced.
  const Tensor requiring = random_tensor({3, 4}, 9).requires_grad_();
  const auto unknown = static_cast<Reduction>(9);
  EXPECT_ERROR_WITH(cross_entropy(requiring, class_targets({0, 3, 1}), {.reduction = unknown}),
                    "unknown reduction 9");
  EXPECT_ERROR_WITH(mse_loss(requiring, zeros({3, 4}), unknown), "unknown reduction 9");
}

// PyTorch's class weights: nll_i = -w[t_i] logp[i, t_i], smooth_i = -sum_c w[c] logp[i, c] (0 at
// ignored positions); loss = (1 - s) nll + s / C smooth, mean dividing by sum of w[t_i] counted.
TEST(CrossEntropy, ClassWeightsFollowPyTorchsFormula) {
  const int64_t n = 5, c = 4;
  const Tensor logits = random_tensor({n, c}, 31);
  const std::vector<int64_t> target = {2, -100, 0, 3, 2};
  const std::vector<double> w = {0.5, 2.0, 1.5, 0.25};
  const Tensor weight = from_vector(w, {c}, DType::f64);
  const auto logp = log_softmax_rows(to_vector<double>(logits), n, c);
  for (double smoothing : {0.0, 0.2}) {
    std::vector<double> per(n, 0.0);
    double nll_sum = 0, smooth_sum = 0, weight_sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (target[i] == -100) continue;
      const double nll = -w[target[i]] * logp[i][target[i]];
      double smooth = 0;
      for (int64_t j = 0; j < c; ++j)
        smooth -= w[j] * logp[i][j];
      per[i] = (1 - smoothing) * nll + smoothing / c * smooth;
      nll_sum += nll;
      smooth_sum += smooth;
      weight_sum += w[target[i]];
    }
    const double mean = ((1 - smoothing) * nll_sum + smoothing / c * smooth_sum) / weight_sum;
    double total = 0;
    for (double v : per)
      total += v;
    CrossEntropyOptions options{.label_smoothing = smoothing, .weight = weight};
    EXPECT_NEAR(cross_entropy(logits, class_targets(target), options).item<double>(), mean, 1e-14);
    options.reduction = Reduction::sum;
    EXPECT_NEAR(cross_entropy(logits, class_targets(target), options).item<double>(), total, 1e-14);
    options.reduction = Reduction::none;
    const std::vector<double> none =
        to_vector<double>(cross_entropy(logits, class_targets(target), options));
    for (int64_t i = 0; i < n; ++i)
      EXPECT_NEAR(none[i], per[i], 1e-14) << "smoothing " << smoothing << ", position " << i;
  }
  // nll_loss with the same weight: the smoothing-free part, on log-probabilities.
  const Tensor log_probs = log_softmax(logits, 1);
  double nll_sum = 0, weight_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (target[i] == -100) continue;
    nll_sum -= w[target[i]] * logp[i][target[i]];
    weight_sum += w[target[i]];
  }
  EXPECT_NEAR(
      nll_loss(log_probs, class_targets(target), -100, Reduction::mean, weight).item<double>(),
      nll_sum / weight_sum, 1e-14);
  // Every target ignored: 0 / 0, NaN, as in PyTorch.
  EXPECT_TRUE(std::isnan(
      cross_entropy(logits, class_targets(std::vector<int64_t>(n, -100)), {.weight = weight})
          .item<double>()));
  EXPECT_ERROR_WITH(cross_entropy(logits, class_targets(target), {.weight = ones({3})}),
                    "cross_entropy", "weight of shape (4)");
  EXPECT_ERROR_WITH(
      nll_loss(log_probs, class_targets(target), -100, Reduction::mean, ones({4}, DType::i64)),
      "nll_loss", "floating-point weight");
}

TEST(NllLoss, MatchesNaiveLoops) {
  const Tensor log_probs = random_tensor({4, 3}, 10);
  const std::vector<int64_t> target = {2, -100, 0, 1};
  const std::vector<double> lp = to_vector<double>(log_probs);
  const double expected = -(lp[0 * 3 + 2] + lp[2 * 3 + 0] + lp[3 * 3 + 1]);
  EXPECT_NEAR(nll_loss(log_probs, class_targets(target)).item<double>(), expected / 3, 1e-12);
  EXPECT_NEAR(nll_loss(log_probs, class_targets(target), -100, Reduction::sum).item<double>(),
              expected, 1e-12);
  const std::vector<double> none =
      to_vector<double>(nll_loss(log_probs, class_targets(target), -100, Reduction::none));
  EXPECT_EQ(none, (std::vector<double>{-lp[2], 0.0, -lp[6], -lp[10]}));
}

TEST(MseLoss, MatchesNaiveLoops) {
  const Tensor a = random_tensor({3, 5}, 11), b = random_tensor({5, 3}, 12).t();
  const std::vector<double> va = to_vector<double>(a), vb = to_vector<double>(b);
  double total = 0;
  for (size_t i = 0; i < va.size(); ++i)
    total += (va[i] - vb[i]) * (va[i] - vb[i]);
  EXPECT_NEAR(mse_loss(a, b).item<double>(), total / 15, 1e-12);
  EXPECT_NEAR(mse_loss(a, b, Reduction::sum).item<double>(), total, 1e-12);
  EXPECT_EQ(mse_loss(a, b, Reduction::none).sizes(), (Shape{3, 5}));
  EXPECT_ERROR_WITH(mse_loss(a, zeros({5, 3}, DType::f64)), "mse_loss", "(3,5)", "(5,3)");
  AutocastGuard autocast(DType::bf16);
  EXPECT_EQ(mse_loss(a.to(DType::bf16), b.to(DType::bf16)).dtype(), DType::f32);
}

TEST(BinaryCrossEntropyWithLogits, MatchesTheStableFormulaAndStaysFinite) {
  const Tensor x =
      from_vector(std::vector<double>{-3.0, -0.5, 0.0, 0.7, 2.5, 100.0, -100.0}, {7}, DType::f64);
  const Tensor t =
      from_vector(std::vector<double>{0.0, 1.0, 0.5, 0.2, 1.0, 0.0, 1.0}, {7}, DType::f64);
  const std::vector<double> vx = to_vector<double>(x), vt = to_vector<double>(t);
  const std::vector<double> got =
      to_vector<double>(binary_cross_entropy_with_logits(x, t, Reduction::none));
  double total = 0;
  for (size_t i = 0; i < vx.size(); ++i) {
    const double expected =
        std::max(vx[i], 0.0) - vx[i] * vt[i] + std::log1p(std::exp(-std::abs(vx[i])));
    EXPECT_NEAR(got[i], expected, 1e-12) << i;
    total += expected;
  }
  EXPECT_NEAR(got[5], 100.0, 1e-9);  // -log(1 - sigmoid(100)), no overflow
  EXPECT_NEAR(binary_cross_entropy_with_logits(x, t).item<double>(), total / 7, 1e-12);
  EXPECT_ERROR_WITH(binary_cross_entropy_with_logits(x, zeros({7}, DType::i64)),
                    "binary_cross_entropy_with_logits", "floating-point");
}

TEST(Dropout, ZeroesAboutPAndScalesTheRest) {
  const Tensor x = ones({100000});
  for (double p : {0.1, 0.5, 0.8}) {
    Generator g(42);
    const Tensor y = dropout(x, p, true, &g);
    const std::vector<float> values = to_vector<float>(y);
    int64_t zeros_count = 0;
    for (float v : values) {
      if (v == 0.0f) {
        ++zeros_count;
      } else {
        EXPECT_NEAR(v, 1.0 / (1.0 - p), 1e-5);
      }
    }
    // 100k Bernoulli draws: the standard deviation of the fraction is below 0.0016.
    EXPECT_NEAR(static_cast<double>(zeros_count) / 100000.0, p, 0.01) << p;
  }
}

TEST(Dropout, SameSeedSameMaskAndTheBackwardUsesIt) {
  const Tensor x = random_tensor({50, 20}, 13);
  Generator first(5), second(5), other(6);
  const Tensor a = dropout(x, 0.4, true, &first);
  const Tensor b = dropout(x, 0.4, true, &second);
  const Tensor c = dropout(x, 0.4, true, &other);
  EXPECT_TRUE(allclose(a, b, 0, 0));
  EXPECT_FALSE(allclose(a, c, 0, 0));
  // The generator advanced: a second draw gives a new mask.
  EXPECT_FALSE(allclose(dropout(x, 0.4, true, &first), a, 0, 0));

  Tensor leaf = random_tensor({50, 20}, 13).requires_grad_();
  Generator g(5);
  const Tensor y = dropout(leaf, 0.4, true, &g);
  sum(y).backward();
  // Where the mask kept an element the gradient is 1 / (1 - p); elsewhere 0.
  const std::vector<double> grad = to_vector<double>(leaf.grad()), va = to_vector<double>(a);
  for (size_t i = 0; i < grad.size(); ++i)
    EXPECT_NEAR(grad[i], va[i] == 0.0 ? 0.0 : 1.0 / 0.6, 1e-12) << i;
}

TEST(Dropout, IdentityZerosAndErrors) {
  const Tensor x = random_tensor({4, 4}, 14);
  EXPECT_TRUE(dropout(x, 0.5, false).is_same(x));
  EXPECT_TRUE(dropout(x, 0.0, true).is_same(x));
  EXPECT_EQ(sum(abs(dropout(x, 1.0, true))).item<double>(), 0.0);
  EXPECT_ERROR_WITH(dropout(x, 1.5), "dropout", "[0, 1]", "1.5");
  EXPECT_ERROR_WITH(dropout(x, -0.1), "dropout", "[0, 1]");
  EXPECT_ERROR_WITH(dropout(zeros({3}, DType::i64), 0.5), "dropout", "floating-point");
}

}  // namespace
}  // namespace ember
