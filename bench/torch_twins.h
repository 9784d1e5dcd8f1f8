// The LibTorch twins of ember's ResNet9 (nn/containers.cpp, nn/models.cpp), module for module and
// name for name, and the copies between the two libraries: what the side-by-side benchmarks need to
// run the same model on the same values in ember and in LibTorch.
//
//   TorchSequential twin = torch_resnet9(1, 10, 16);
//   copy_state(*ember::nn::resnet9(1, 10, 16), *twin);   // same initial weights
#pragma once

#include <torch/torch.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "nn/nn.h"
#include "runtime/ops.h"

namespace ember_bench {

// The LibTorch twin of an ember tensor: same shape, same values (f32 or i64).
inline torch::Tensor to_torch(const ember::Tensor& t) {
  std::vector<int64_t> sizes(t.sizes().begin(), t.sizes().end());
  if (t.dtype() == ember::DType::i64) {
    const std::vector<int64_t> values = ember::to_vector<int64_t>(t);
    return torch::from_blob(const_cast<int64_t*>(values.data()), sizes, torch::kInt64).clone();
  }
  const std::vector<float> values = ember::to_vector<float>(t.to(ember::DType::f32));
  return torch::from_blob(const_cast<float*>(values.data()), sizes, torch::kFloat32).clone();
}

// Copies every parameter and buffer of `from` into the one of the same dotted name in `to`;
// every tensor of `to` must be matched, with the same shape.
inline void copy_state(const ember::nn::Module& from, torch::nn::Module& to) {
  torch::NoGradGuard no_grad;
  auto torch_parameters = to.named_parameters();
  auto torch_buffers = to.named_buffers();
  size_t copied_parameters = 0, copied_buffers = 0;
  auto copy_into = [](const std::string& name, const ember::Tensor& source, torch::Tensor* target) {
    if (target == nullptr) {
      std::fprintf(stderr, "copy_state: LibTorch model has no tensor named %s\n", name.c_str());
      std::exit(1);
    }
    const torch::Tensor value = to_torch(source);
    if (value.sizes() != target->sizes()) {
      std::fprintf(stderr, "copy_state: %s has different shapes in ember and LibTorch\n",
                   name.c_str());
      std::exit(1);
    }
    target->copy_(value);
  };
  for (const auto& [name, tensor] : from.named_parameters()) {
    copy_into(name, tensor, torch_parameters.find(name));
    ++copied_parameters;
  }
  for (const auto& [name, tensor] : from.named_buffers()) {
    copy_into(name, tensor, torch_buffers.find(name));
    ++copied_buffers;
  }
  if (copied_parameters != torch_parameters.size() || copied_buffers != torch_buffers.size()) {
    std::fprintf(stderr,
                 "copy_state: ember has %zu parameters and %zu buffers, LibTorch %zu and %zu\n",
                 copied_parameters, copied_buffers, torch_parameters.size(), torch_buffers.size());
    std::exit(1);
  }
}

// nn::Sequential with a plain forward, so that Sequentials nest (LibTorch's own forward is a
// template, which AnyModule cannot hold). Children are named "0", "1", ... as in ember.
struct TorchSequentialImpl : torch::nn::SequentialImpl {
  using SequentialImpl::SequentialImpl;
  torch::Tensor forward(const torch::Tensor& x) { return SequentialImpl::forward(x); }
};
TORCH_MODULE(TorchSequential);

// x + block(x), the child named "block" as ember's (and Catalyst's) ResidualBlock.
struct TorchResidualImpl : torch::nn::Module {
  explicit TorchResidualImpl(TorchSequential inner)
      : block(register_module("block", std::move(inner))) {}
  torch::Tensor forward(const torch::Tensor& x) { return x + block->forward(x); }
  TorchSequential block;
};
TORCH_MODULE(TorchResidual);

inline TorchSequential torch_conv_block(int64_t in_channels, int64_t out_channels,
                                        bool pool = false) {
  TorchSequential block(
      torch::nn::Conv2d(torch::nn::Conv2dOptions(in_channels, out_channels, 3).padding(1)),
      torch::nn::BatchNorm2d(out_channels), torch::nn::ReLU());
  if (pool) block->push_back(torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2)));
  return block;
}

inline TorchSequential torch_resnet9(int64_t in_channels, int64_t num_classes, int64_t size) {
  const int64_t s1 = size, s2 = 2 * size, s4 = 4 * size, s8 = 8 * size;
  auto residual = [](int64_t channels) {
    return TorchResidual(TorchSequential(torch_conv_block(channels, channels),
                                         torch_conv_block(channels, channels)));
  };
  return TorchSequential(torch_conv_block(in_channels, s1), torch_conv_block(s1, s2, true),
                         residual(s2), torch_conv_block(s2, s4, true),
                         torch_conv_block(s4, s8, true), residual(s8),
                         torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(4)), torch::nn::Flatten(),
                         torch::nn::Dropout(0.2), torch::nn::Linear(s8, num_classes));
}

}  // namespace ember_bench
