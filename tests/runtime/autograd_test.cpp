// The autograd engine itself: ordering, accumulation, modes, hooks, saved-tensor checks, depth.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runtime/autograd/node.h"
#include "runtime/ops.h"

namespace ember {
namespace {

Tensor leaf(std::vector<float> values, Shape shape) {
  return from_vector(values, shape).requires_grad_();
}

std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Autograd, GradientsOfASharedInputAccumulate) {
  Tensor x = leaf({2.f}, {1});
  Tensor y = x * x + x * 3.0;  // dy/dx = 2x + 3 = 7
  y.backward();
  EXPECT_FLOAT_EQ(x.grad().item<float>(), 7.0f);
  // A second backward adds to .grad, as in PyTorch.
  (x * 4.0).backward();
  EXPECT_FLOAT_EQ(x.grad().item<float>(), 11.0f);
}

TEST(Autograd, BroadcastGradientIsSummedBackToTheInputShape) {
  Tensor row = leaf({1.f, 2.f, 3.f}, {3});
  Tensor column = leaf({1.f, 1.f}, {2, 1});
  Tensor scalar = full({}, 2.0).requires_grad_();
  sum((row * column) * scalar).backward();
  EXPECT_EQ(row.grad().sizes(), (Shape{3}));
  EXPECT_EQ(to_vector<float>(row.grad()), (std::vector<float>{4, 4, 4}));
  EXPECT_EQ(to_vector<float>(column.grad()), (std::vector<float>{12, 12}));
  EXPECT_EQ(scalar.grad().dim(), 0);
  EXPECT_FLOAT_EQ(scalar.grad().item<float>(), 12.0f);
}

TEST(Autograd, NoGradGuardRecordsNothingAndRestoresTheMode) {
  Tensor x = leaf({1.f}, {1});
  {
    NoGradGuard no_grad;
    Tensor y = x * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      GradModeGuard enable(true);
      EXPECT_TRUE((x * 2.0).requires_grad());
    }
    EXPECT_FALSE(grad_enabled());
  }
  EXPECT_TRUE(grad_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Autograd, DetachCutsTheGraphButSharesData) {
  Tensor x = leaf({3.f}, {1});
  Tensor y = x * 2.0;
  Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_EQ(d.storage(), y.storage());
  (x * d).backward();  // d is a constant 6
  EXPECT_FLOAT_EQ(x.grad().item<float>(), 6.0f);
}

TEST(Autograd, RequiresGradOnlyOnFloatingLeaves) {
  EXPECT_THROW(zeros({2}, DType::i64).requires_grad_(), Error);
  Tensor x = leaf({1.f}, {1});
  Tensor y = x * 2.0;
  EXPECT_FALSE(y.is_leaf());
  EXPECT_THROW(y.requires_grad_(false), Error);
}

TEST(Autograd, BackwardTwiceNeedsRetainGraph) {
  Tensor x = leaf({1.f, 2.f}, {2});
  Tensor y = sum(exp(x));  // exp saves its output
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();
  EXPECT_NEAR(to_vector<float>(x.grad())[1], 2 * std::exp(2.0f), 1e-5);
  const std::string message = message_of([&] { y.backward(); });
  EXPECT_NE(message.find("retain_graph"), std::string::npos) << message;
}

TEST(Autograd, BackwardOfANonScalarNeedsAGradient) {
  Tensor x = leaf({1.f, 2.f}, {2});
  Tensor y = x * 3.0;
  EXPECT_THROW(y.backward(), Error);
  y.backward(from_vector({1.f, 10.f}, {2}));
  EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{3, 30}));
  Tensor z = x * 1.0;
  EXPECT_THROW(z.backward(zeros({3})), Error);
}

TEST(Autograd, BackwardOfATensorWithoutGraphIsAnError) {
  EXPECT_THROW(zeros({1}).backward(), Error);
}

TEST(Autograd, InPlaceChangeOfASavedTensorIsReportedNamingTheOp) {
  Tensor x = leaf({1.f, 2.f}, {2});
  Tensor y = x * 1.0;
  Tensor z = sum(y * y);  // mul saves y
  y.add_(1.0);
  const std::string message = message_of([&] { z.backward(); });
  EXPECT_NE(message.find("mul"), std::string::npos) << message;
  EXPECT_NE(message.find("modified by an in-place operation"), std::string::npos) << message;
}

TEST(Autograd, InPlaceOpsOnNonLeavesAreDifferentiated) {
  Tensor x = leaf({1.f, 2.f}, {2});
  Tensor y = x * 2.0;
  y.mul_(x);  // y = 2 x^2: dy/dx = 4x
  y.add_(x);  // + x: 4x + 1
  sum(y).backward();
  EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{5, 9}));
}

TEST(Autograd, InPlaceOnALeafThatRequiresGradIsAnError) {
  Tensor x = leaf({1.f}, {1});
  const std::string message = message_of([&] { x.add_(1.0); });
  EXPECT_NE(message.find("leaf"), std::string::npos) << message;
  NoGradGuard no_grad;
  x.add_(1.0);  // optimizer-style updates are fine without grad mode
  EXPECT_FLOAT_EQ(x.item<float>(), 2.0f);
}

TEST(Autograd, PostAccumulateHookFiresOnceAfterTheFullGradient) {
  Tensor x = leaf({1.f, 2.f}, {2});
  std::vector<std::vector<float>> seen;
  x.register_post_accumulate_grad_hook(
      [&](const Tensor& t) { seen.push_back(to_vector<float>(t.grad())); });
  // x reaches the loss along three paths; the hook must see their sum, once.
  Tensor loss = sum(x * 2.0) + sum(x * x) + sum(exp(x) * 0.0);
  loss.backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<float>{4, 6}));
  sum(x).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<float>{5, 7}));
}

TEST(Autograd, HooksFireInReverseOrderOfUseLikeDdpExpects) {
  // Parameters used early in the forward get their gradient last.
  Tensor first = leaf({1.f}, {1}), second = leaf({1.f}, {1});
  std::vector<int> order;
  first.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(1); });
  second.register_post_accumulate_grad_hook([&](const Tensor&) { order.push_back(2); });
  Tensor h = tanh(full({1}, 0.5) * first);
  Tensor out = tanh(h * second);
  sum(out).backward();
  EXPECT_EQ(order, (std::vector<int>{2, 1}));
}

TEST(Autograd, AChainOfTenThousandOpsNeitherOverflowsNorLosesPrecision) {
  Tensor x = leaf({1.f}, {1});
  Tensor y = x;
  for (int i = 0; i < 10000; ++i)
    y = y * 1.0001 - 0.0001;
  y.backward();
  EXPECT_NEAR(x.grad().item<double>(), std::pow(1.0001, 10000), 1e-2);
}

TEST(Autograd, AHundredThousandNodeGraphIsFreedWithoutRecursion) {
  Tensor x = leaf({1.f}, {1});
  Tensor y = x;
  for (int i = 0; i < 100000; ++i)
    y = y + 1.0;
  y = Tensor();  // the destructor of the chain must not recurse
  SUCCEED();
}

TEST(Autograd, UnusedInputsGetNoGradient) {
  Tensor a = leaf({1.f}, {1}), b = leaf({1.f}, {1});
  (a * 2.0).backward();
  EXPECT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(Autograd, GradientsFlowThroughDtypeConversions) {
  Tensor x = leaf({1.5f, -2.f}, {2});
  Tensor y = sum(x.to(DType::f64) * 2.0);
  y.backward();
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  EXPECT_EQ(to_vector<float>(x.grad()), (std::vector<float>{2, 2}));
}

// split's pieces share one node with an output each (PyTorch's SplitBackward): its backward
// writes the pieces' gradients into one gradient of the input, zeros where a piece got none.
TEST(Autograd, SplitPiecesShareOneNodeWhoseBackwardFillsTheUnusedPiecesWithZeros) {
  Tensor x = randn({10, 100}).requires_grad_();
  const std::vector<Tensor> pieces = split(x, std::vector<int64_t>{3, 4, 3}, 0);
  ASSERT_EQ(pieces.size(), 3u);
  for (const Tensor& piece : pieces) {
    EXPECT_EQ(piece.grad_fn(), pieces[0].grad_fn());
    EXPECT_TRUE(piece.is_view());
  }
  EXPECT_STREQ(pieces[0].grad_fn()->name(), "split");
  EXPECT_EQ(pieces[0].grad_fn()->num_outputs(), 3u);
  Tensor loss = sum(pieces[2] * 3.0) + sum(pieces[0]);  // the middle piece is not used
  {
    // Freed blocks of the gradient's size, full of NaN: an unfilled place would show them.
    std::vector<Tensor> poison;
    for (int k = 0; k < 8; ++k)
      poison.push_back(full({10, 100}, std::nan("")));
  }
  loss.backward(Tensor(), /*retain_graph=*/true);
  std::vector<float> expected(1000, 0.f);
  std::fill(expected.begin(), expected.begin() + 300, 1.f);
  std::fill(expected.begin() + 700, expected.end(), 3.f);
  EXPECT_EQ(to_vector<float>(x.grad()), expected);

  // Backward from a piece itself (a root that is one of several outputs), and a second pass
  // through the same node, accumulate as PyTorch does.
  x.set_grad({});
  pieces[1].backward(full({4, 100}, 2.0));
  loss.backward();
  std::fill(expected.begin() + 300, expected.begin() + 700, 2.f);
  EXPECT_EQ(to_vector<float>(x.grad()), expected);
}

}  // namespace
}  // namespace ember
