// The README's "C++ API in 20 lines", compiled and run by the test suite so it stays true.
#include <iostream>

#include "nn/nn.h"
#include "optim/optim.h"
using namespace ember;

int main() {
  manual_seed(0);
  Tensor x = randn({64, 3});                                       // (64,3) f32 on the CPU
  Tensor y = matmul(x, from_vector({1.f, -2.f, .5f}, {3, 1}));     // (64,1) targets
  Tensor w = zeros({3, 1}, TensorOptions().with_requires_grad());  // a leaf that wants a gradient
  for (int step = 0; step < 100; ++step) {
    Tensor loss = mse_loss(matmul(x, w), y);
    loss.backward();      // fills w.grad()
    NoGradGuard no_grad;  // updates are not recorded
    w.sub_(w.grad(), 0.1);
    w.set_grad({});
  }
  std::cout << w.t() << "\n";

  auto model = nn::resnet9(/*in_channels=*/1, /*num_classes=*/10);  // a shared handle
  optim::Adam adam(model->named_parameters(), {.lr = 1e-3});
  Tensor logits = model->forward(randn({8, 1, 32, 32}));  // (8,10)
  std::cout << shape_str(logits.sizes()) << "\n";
}
