// A user's program on ember's public headers: a model, an optimizer step and an engine.
#include <iostream>

#include "engines/factory.h"
#include "nn/nn.h"
#include "optim/optim.h"
using namespace ember;

int main() {
  manual_seed(0);
  auto model = nn::resnet9(/*in_channels=*/1, /*num_classes=*/10);
  optim::SGD sgd(model->named_parameters(), {.lr = 0.1});
  Tensor images = randn({2, 1, 32, 32});                        // (2,1,32,32)
  Tensor labels = from_vector({1.f, 3.f}, {2}).to(DType::i64);  // (2)
  Tensor loss = cross_entropy(model->forward(images), labels);  // ()
  loss.backward();
  sgd.step();
  auto engine = engines::make_engine("cpu");
  std::cout << "consumer: loss " << loss.item<float>() << " on " << engine->device().str() << "\n";
}
