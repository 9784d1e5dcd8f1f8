// The losses' PyTorch options beyond class indices: cross_entropy with class-probability targets,
// binary_cross_entropy_with_logits with weight and pos_weight, against hand-written f64 formulas.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "nn/loss.h"
#include "runtime/ops.h"
#include "tests/common/expect_error.h"

namespace ember {
namespace {

Tensor random_tensor(const Shape& shape, uint64_t seed, double low, double high) {
  Generator g(seed);
  return uniform(shape, low, high, DType::f64, &g);
}

// PyTorch's loss with probability targets, per row of (N, C): -sum_c w_c q_c log_softmax(x)_c,
// q = (1 - s) t + s / C.
std::vector<double> reference_probability_losses(const std::vector<double>& x,
                                                 const std::vector<double>& t,
                                                 const std::vector<double>& w, int64_t n, int64_t c,
                                                 double smoothing) {
  std::vector<double> losses(static_cast<size_t>(n), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double largest = -INFINITY, total = 0.0;
    for (int64_t j = 0; j < c; ++j)
      largest = std::max(largest, x[i * c + j]);
    for (int64_t j = 0; j < c; ++j)
      total += std::exp(x[i * c + j] - largest);
    for (int64_t j = 0; j < c; ++j) {
      const double log_p = x[i * c + j] - largest - std::log(total);
      const double q = (1.0 - smoothing) * t[i * c + j] + smoothing / static_cast<double>(c);
      losses[i] -= w[j] * q * log_p;
    }
  }
  return losses;
}

TEST(CrossEntropyProbabilities, MatchesTheFormulaForEveryReduction) {
  const int64_t n = 4, c = 5;
  const Tensor x = random_tensor({n, c}, 1, -3.0, 3.0);
  Tensor t = random_tensor({n, c}, 2, 0.0, 1.0);
  t = t / sum(t, {1}, true);  // rows of probabilities (not required, as in PyTorch)
  const Tensor w = random_tensor({c}, 3, 0.5, 2.0);
  const std::vector<double> ones_w(c, 1.0);
  for (const double smoothing : {0.0, 0.3}) {
    for (const bool weighted : {false, true}) {
      const std::vector<double> expected =
          reference_probability_losses(to_vector<double>(x), to_vector<double>(t),
                                       weighted ? to_vector<double>(w) : ones_w, n, c, smoothing);
      CrossEntropyOptions options;
      options.label_smoothing = smoothing;
      if (weighted) options.weight = w;
      options.reduction = Reduction::none;
      const std::vector<double> got = to_vector<double>(cross_entropy(x, t, options));
      ASSERT_EQ(got.size(), expected.size());
      double total = 0.0;
      for (size_t i = 0; i < got.size(); ++i) {
        EXPECT_NEAR(got[i], expected[i], 1e-12) << i;
        total += expected[i];
      }
      options.reduction = Reduction::sum;
      EXPECT_NEAR(cross_entropy(x, t, options).item<double>(), total, 1e-12);
      // mean divides by the number of rows, weighted or not (PyTorch's prob-target mean).
      options.reduction = Reduction::mean;
      EXPECT_NEAR(cross_entropy(x, t, options).item<double>(), total / n, 1e-12);
    }
  }
}

// A one-hot probability target is the class-index loss; the gradient of the logits is
// softmax - target, and the target's own gradient is -log_softmax.
TEST(CrossEntropyProbabilities, OneHotEqualsClassIndicesAndGradientsAreTheFormula) {
  const Tensor x = random_tensor({3, 4, 2}, 4, -2.0, 2.0);  // (N, C, d)
  const Tensor index = from_vector(std::vector<int64_t>{0, 3, 2, 2, 1, 0}, {3, 2}, DType::i64);
  const Tensor one_hot =
      eq(arange(0, 4, 1, DType::i64).reshape({1, 4, 1}), index.unsqueeze(1)).to(DType::f64);
  EXPECT_NEAR(cross_entropy(x, one_hot).item<double>(), cross_entropy(x, index).item<double>(),
              1e-12);

  Tensor logits = x.detach().requires_grad_();
  Tensor target = one_hot.detach().requires_grad_();
  cross_entropy(logits, target, {.reduction = Reduction::sum}).backward();
  EXPECT_TRUE(allclose(logits.grad(), softmax(x, 1) - one_hot, 1e-12, 1e-12));
  EXPECT_TRUE(allclose(target.grad(), -log_softmax(x, 1), 1e-12, 1e-12));
}

// The result's dtype promotes as PyTorch's log_softmax(x) * target: f32 with f64 gives f64; bf16
// logits with an f32 target give f32; bf16 with bf16 stays bf16 (computed in f32).
TEST(CrossEntropyProbabilities, ResultDtypePromotesLikePyTorch) {
  const Tensor x = random_tensor({2, 3}, 10, -1.0, 1.0), t = random_tensor({2, 3}, 11, 0.0, 1.0);
  EXPECT_EQ(cross_entropy(x.to(DType::f32), t).dtype(), DType::f64);
  EXPECT_EQ(cross_entropy(x.to(DType::bf16), t.to(DType::f32)).dtype(), DType::f32);
  const Tensor narrow = cross_entropy(x.to(DType::bf16), t.to(DType::bf16));
  EXPECT_EQ(narrow.dtype(), DType::bf16);
  EXPECT_NEAR(narrow.to(DType::f64).item<double>(),
              cross_entropy(x.to(DType::bf16).to(DType::f64), t.to(DType::bf16).to(DType::f64))
                  .item<double>(),
              1e-2);
}

TEST(CrossEntropyProbabilities, UnbatchedAndBadTargets) {
  const Tensor x = random_tensor({4}, 5, -1.0, 1.0);
  const Tensor t = from_vector(std::vector<double>{0.1, 0.2, 0.3, 0.4}, {4}, DType::f64);
  const Tensor batched =
      cross_entropy(x.unsqueeze(0), t.unsqueeze(0), {.reduction = Reduction::none});
  const Tensor unbatched = cross_entropy(x, t, {.reduction = Reduction::none});
  EXPECT_EQ(unbatched.dim(), 0);
  EXPECT_NEAR(unbatched.item<double>(), batched.item<double>(), 0.0);
  EXPECT_ERROR_WITH(cross_entropy(random_tensor({2, 3}, 6, 0, 1), random_tensor({2, 4}, 7, 0, 1)),
                    "cross_entropy", "class probabilities", "logits' shape (2,3)", "got (2,4)");
  EXPECT_ERROR_WITH(cross_entropy(random_tensor({2, 3}, 6, 0, 1), ones({2}, DType::u8)),
                    "class indices", "class probabilities are a floating-point target");
  CrossEntropyOptions ignoring;
  ignoring.ignore_index = 2;
  EXPECT_ERROR_WITH(
      cross_entropy(random_tensor({2, 3}, 6, 0, 1), random_tensor({2, 3}, 7, 0, 1), ignoring),
      "cross_entropy", "ignore_index (2) is for class-index targets");
  CrossEntropyOptions bad_weight;
  bad_weight.weight = ones({4}, DType::f64);
  EXPECT_ERROR_WITH(
      cross_entropy(random_tensor({2, 3}, 6, 0, 1), random_tensor({2, 3}, 7, 0, 1), bad_weight),
      "cross_entropy", "expected a weight of shape (3)");
}

// PyTorch's binary_cross_entropy_with_logits with weight w and pos_weight p:
// w [(1 - t) x + (1 + (p - 1) t) log(1 + exp(-x))].
TEST(BinaryCrossEntropyWeights, MatchTheFormulaAndStayFinite) {
  const Tensor x = from_vector(std::vector<double>{-200.0, -3.0, -0.5, 0.0, 0.7, 2.5, 100.0, 40.0},
                               {2, 4}, DType::f64);
  const Tensor t =
      from_vector(std::vector<double>{0.0, 1.0, 0.5, 0.2, 1.0, 0.0, 1.0, 0.3}, {2, 4}, DType::f64);
  const Tensor w = from_vector(std::vector<double>{0.5, 2.0}, {2, 1}, DType::f64);
  const Tensor p = from_vector(std::vector<double>{1.0, 3.0, 0.25, 2.0}, {4}, DType::f64);
  const std::vector<double> vx = to_vector<double>(x), vt = to_vector<double>(t);
  std::vector<double> expected;
  double total = 0.0;
  for (size_t i = 0; i < vx.size(); ++i) {
    const double weight = i < 4 ? 0.5 : 2.0, pos = to_vector<double>(p)[i % 4];
    const double softplus_neg = std::max(-vx[i], 0.0) + std::log1p(std::exp(-std::abs(vx[i])));
    expected.push_back(weight *
                       ((1.0 - vt[i]) * vx[i] + (1.0 + (pos - 1.0) * vt[i]) * softplus_neg));
    total += expected.back();
  }
  const std::vector<double> got =
      to_vector<double>(binary_cross_entropy_with_logits(x, t, Reduction::none, w, p));
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], expected[i], 1e-12 * std::max(1.0, std::abs(expected[i]))) << i;
  EXPECT_NEAR(binary_cross_entropy_with_logits(x, t, Reduction::mean, w, p).item<double>(),
              total / 8, 1e-12 * total);
  // pos_weight of ones and a weight of ones are the plain loss.
  EXPECT_TRUE(allclose(binary_cross_entropy_with_logits(
                           x, t, Reduction::none, ones({2, 4}, DType::f64), ones({4}, DType::f64)),
                       binary_cross_entropy_with_logits(x, t, Reduction::none), 1e-14, 1e-14));
}

// Gradients by the closed forms: d/dx = w [(1 - t) - (1 + (p - 1) t) sigmoid(-x)],
// d/dt = w [(p - 1) log(1 + exp(-x)) - x]; at x = 0 the kink of max(-x, 0) must not leak in.
TEST(BinaryCrossEntropyWeights, GradientsAreTheClosedForms) {
  const Tensor x0 = from_vector(std::vector<double>{-2.0, 0.0, 0.5, 3.0}, {4}, DType::f64);
  const Tensor t0 = from_vector(std::vector<double>{0.2, 1.0, 0.0, 0.7}, {4}, DType::f64);
  const Tensor w = from_vector(std::vector<double>{1.5, 0.5, 2.0, 1.0}, {4}, DType::f64);
  const Tensor p = from_vector(std::vector<double>{2.0, 4.0, 0.5, 1.0}, {4}, DType::f64);
  Tensor x = x0.detach().requires_grad_(), t = t0.detach().requires_grad_();
  binary_cross_entropy_with_logits(x, t, Reduction::sum, w, p).backward();
  const std::vector<double> vx = to_vector<double>(x0), vt = to_vector<double>(t0),
                            vw = to_vector<double>(w), vp = to_vector<double>(p);
  const std::vector<double> gx = to_vector<double>(x.grad()), gt = to_vector<double>(t.grad());
  for (size_t i = 0; i < 4; ++i) {
    const double sigmoid_neg = 1.0 / (1.0 + std::exp(vx[i]));
    const double softplus_neg = std::log1p(std::exp(-vx[i]));
    EXPECT_NEAR(gx[i], vw[i] * ((1.0 - vt[i]) - (1.0 + (vp[i] - 1.0) * vt[i]) * sigmoid_neg), 1e-12)
        << i;
    EXPECT_NEAR(gt[i], vw[i] * ((vp[i] - 1.0) * softplus_neg - vx[i]), 1e-12) << i;
  }
  // At x = 0, t = 1, p = 4, w = 0.5: 0.5 (0 - 4 / 2) = -1.
  EXPECT_NEAR(gx[1], -1.0, 1e-15);
}

TEST(BinaryCrossEntropyWeights, ModuleKeepsThemAsBuffersAndBadShapesAreRefused) {
  const Tensor p = from_vector(std::vector<double>{1.0, 3.0, 0.5}, {3}, DType::f64);
  nn::BCEWithLogitsLoss loss(Reduction::mean, Tensor(), p);
  const NamedTensors state = loss.state_dict();
  ASSERT_EQ(state.size(), 1u);
  EXPECT_EQ(state[0].first, "pos_weight");
  const Tensor x = random_tensor({2, 3}, 8, -2.0, 2.0), t = random_tensor({2, 3}, 9, 0.0, 1.0);
  EXPECT_NEAR(loss(x, t).item<double>(),
              binary_cross_entropy_with_logits(x, t, Reduction::mean, Tensor(), p).item<double>(),
              0.0);
  EXPECT_ERROR_WITH(binary_cross_entropy_with_logits(x, t, Reduction::mean, ones({1, 1, 3})),
                    "binary_cross_entropy_with_logits", "weight of shape (1,1,3)",
                    "does not broadcast to the logits' shape (2,3)");
  EXPECT_ERROR_WITH(
      binary_cross_entropy_with_logits(x, t, Reduction::mean, Tensor(), ones({3}, DType::i64)),
      "expected a floating-point pos_weight");
}

}  // namespace
}  // namespace ember
