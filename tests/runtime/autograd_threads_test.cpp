// Autograd across threads: grad mode is per thread, and backward passes running at once in
// several threads (as DataParallel runs them) accumulate correctly into leaves they share.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/ops.h"
#include "runtime/random.h"

namespace ember {
namespace {

TEST(AutogradThreads, GradModeIsPerThread) {
  NoGradGuard no_grad;
  bool other_thread_enabled = false;
  std::thread([&] { other_thread_enabled = grad_enabled(); }).join();
  EXPECT_TRUE(other_thread_enabled);  // a new thread starts with grad on
  EXPECT_FALSE(grad_enabled());       // and switching it there did not reach this one
  std::thread([] { set_grad_enabled(false); }).join();
  {
    GradModeGuard enable(true);
    EXPECT_TRUE(grad_enabled());
  }
}

// Every thread builds its own graph over the shared leaves `w` and `b` and runs backward at the
// same time as the others; the leaves must end with the sum of every thread's gradient.
TEST(AutogradThreads, ConcurrentBackwardPassesShareLeaves) {
  constexpr int kThreads = 4, kRounds = 25;
  Generator generator(11);
  Tensor w = randn({16, 8}, DType::f64, &generator).requires_grad_();
  Tensor b = randn({8}, DType::f64, &generator).requires_grad_();
  std::vector<Tensor> inputs;
  for (int t = 0; t < kThreads; ++t)
    inputs.push_back(randn({5, 16}, DType::f64, &generator));

  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        Tensor y = tanh(matmul(inputs[t], w) + b);
        sum(y * y).backward();
      }
    });
  }
  for (std::thread& thread : threads)
    thread.join();

  // The same gradients computed one pass at a time.
  Tensor w_ref = w.detach().clone().requires_grad_();
  Tensor b_ref = b.detach().clone().requires_grad_();
  for (int t = 0; t < kThreads; ++t) {
    Tensor y = tanh(matmul(inputs[t], w_ref) + b_ref);
    sum(y * y).backward();
  }
  EXPECT_TRUE(allclose(w.grad(), w_ref.grad() * static_cast<double>(kRounds), 1e-12, 1e-12));
  EXPECT_TRUE(allclose(b.grad(), b_ref.grad() * static_cast<double>(kRounds), 1e-12, 1e-12));
}

// A node that runs a backward pass of its own sees the outer pass's retain_graph.
TEST(AutogradThreads, NodesSeeTheRetainGraphOfTheirPass) {
  EXPECT_FALSE(backward_retains_graph());
  std::vector<bool> seen;
  Tensor x = ones({2}, DType::f64).requires_grad_();
  Tensor y = x * 2.0;
  Tensor z = empty({2}, DType::f64);
  record_custom("probe", {y}, z, {}, [&](const Tensor& grad, const std::vector<Tensor>&) {
    seen.push_back(backward_retains_graph());
    return std::vector<Tensor>{grad};
  });
  sum(z).backward(Tensor(), /*retain_graph=*/true);
  sum(z).backward(Tensor(), /*retain_graph=*/false);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_TRUE(seen[0]);
  EXPECT_FALSE(seen[1]);
  EXPECT_FALSE(backward_retains_graph());
  EXPECT_TRUE(allclose(x.grad(), full({2}, 4.0, DType::f64)));
  EXPECT_STREQ(z.grad_fn()->name(), "probe");
}

}  // namespace
}  // namespace ember
