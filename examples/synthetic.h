// What the examples train on: a synthetic 4-class problem small enough for the test suite (the
// tutorial trains ResNet9 on CIFAR10; swap in data::fashion_mnist and nn::resnet9 for the real
// thing). Every process builds the same data from the same seed.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <string>

#include "data/dataset.h"
#include "data/loader.h"
#include "nn/nn.h"
#include "runtime/ops.h"

namespace ember::examples {

inline constexpr int64_t kFeatures = 8;
inline constexpr int64_t kClasses = 4;

// (n, kFeatures) features; labels from a fixed linear rule (the same rule for every split), so
// the problem can be learned.
inline std::shared_ptr<data::TensorDataset> synthetic_dataset(int64_t n, uint64_t seed) {
  Generator rule_generator(1234);
  const Tensor rule = randn({kFeatures, kClasses}, {}, &rule_generator);
  Generator generator(seed);
  const Tensor features = randn({n, kFeatures}, {}, &generator);
  return std::make_shared<data::TensorDataset>(features, argmax(matmul(features, rule), 1));
}

inline std::shared_ptr<data::TensorDataset> train_dataset() {
  return synthetic_dataset(512, 1);
}
inline std::shared_ptr<data::TensorDataset> valid_dataset() {
  return synthetic_dataset(256, 2);
}

// A small MLP in place of the tutorial's ResNet9.
inline nn::ModulePtr small_mlp() {
  return nn::make<nn::Sequential>(std::initializer_list<nn::ModulePtr>{
      nn::make<nn::Linear>(kFeatures, 32), nn::make<nn::ReLU>(), nn::make<nn::Dropout>(0.1),
      nn::make<nn::Linear>(32, kClasses)});
}

// The criterion (nn::CrossEntropyLoss is a module, not copyable into engines::Criterion).
inline Tensor cross_entropy_loss(const Tensor& logits, const Tensor& targets) {
  return cross_entropy(logits, targets);
}

// A logdir under the system's temp directory (the tutorial writes ./logdir), one per run (the
// process id: rank 0's is the one that writes), so that runs side by side do not mix.
inline std::string temp_logdir(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          ("ember_example_" + name + "_" + std::to_string(::getpid())))
      .string();
}

}  // namespace ember::examples
