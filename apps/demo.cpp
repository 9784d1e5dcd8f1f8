// `ember demo`: fits y = 3x - 2 + noise with a linear model, by hand-written gradient descent on
// ember's autograd. A smoke test of the runtime that needs no dataset.
#include <iostream>

#include "apps/commands.h"
#include "apps/flags.h"
#include "runtime/ops.h"

namespace ember::apps {

int run_demo(int argc, char** argv) {
  if (asks_for_help(argc, argv)) {
    std::cout << "usage: ember demo\n  fits y = 3x - 2 with gradient descent and prints the fit\n";
    return 0;
  }
  EMBER_CHECK(argc == 1, "demo takes no arguments (got '", argv[1], "')");
  constexpr int64_t kPoints = 256;
  std::vector<float> xs(kPoints), ys(kPoints);
  for (int64_t i = 0; i < kPoints; ++i) {
    xs[i] = static_cast<float>(i) / kPoints * 4.0f - 2.0f;
    const float noise = 0.05f * static_cast<float>((i * 7919) % 13 - 6) / 6.0f;
    ys[i] = 3.0f * xs[i] - 2.0f + noise;
  }
  const Tensor x = from_vector(xs, {kPoints, 1});
  const Tensor y = from_vector(ys, {kPoints, 1});
  Tensor w = zeros({1, 1}, TensorOptions().with_requires_grad());
  Tensor b = zeros({1}, TensorOptions().with_requires_grad());
  for (int step = 0; step <= 200; ++step) {
    const Tensor prediction = x * w + b;
    const Tensor loss = mean(square(prediction - y));
    loss.backward();
    {
      NoGradGuard no_grad;
      w.sub_(w.grad(), 0.1);
      b.sub_(b.grad(), 0.1);
    }
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    if (step % 50 == 0) std::cout << "step " << step << "  loss " << loss.item<double>() << "\n";
  }
  std::cout << "w = " << w << "\nb = " << b << "\n(expected w = 3, b = -2)\n";
  return 0;
}

}  // namespace ember::apps
