// One training step of `ember train`'s model and batch on random data, for the GPU benchmarks
// (kernels_bench.cpp times it; step_profile.cpp hands it to Nsight Compute):
//
//   Resnet9Step step(DType::f16);   // autocast dtype, or std::nullopt for f32
//   step();                         // zero_grad, forward + loss, backward, Adam step
//
// nn::resnet9 (width 64, 1 input channel, 10 classes) on a batch of 512 random 32x32 images:
// zero_grad, forward and cross-entropy under autocast, backward, Adam (lr 2e-3, as `ember train`
// uses). fp16 goes through a GradScaler, whose step reads its non-finite flag on the host. f32
// convolutions are exact f32 unless the caller allowed TF32 (set_conv_allow_tf32).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "nn/models.h"
#include "optim/adam.h"
#include "optim/grad_scaler.h"
#include "runtime/autocast.h"
#include "runtime/ops.h"

namespace ember::bench {

class Resnet9Step {
 public:
  static constexpr int64_t kBatch = 512;

  explicit Resnet9Step(std::optional<DType> autocast_dtype, int device = 0)
      : autocast_dtype_(autocast_dtype),
        model_(make_model(device)),
        adam_(model_->named_parameters(), adam_options()),
        scaler_(optim::GradScalerOptions{.enabled = autocast_dtype == DType::f16}) {
    Generator generator(7);
    const TensorOptions on_gpu(DType::f32, Device::cuda(device));
    images_ = randn({kBatch, 1, 32, 32}, on_gpu, &generator);
    labels_ = randint(0, 10, {kBatch}, TensorOptions(DType::i64, Device::cuda(device)), &generator);
  }

  void operator()() {
    adam_.zero_grad();
    Tensor loss;
    {
      std::optional<AutocastGuard> autocast;
      if (autocast_dtype_) autocast.emplace(*autocast_dtype_);
      loss = cross_entropy((*model_)(images_), labels_);
    }
    scaler_.scale(loss).backward();
    scaler_.step(adam_);
    scaler_.update();
  }

 private:
  static std::shared_ptr<nn::Sequential> make_model(int device) {
    auto model = nn::resnet9(1, 10, 64);
    model->to(Device::cuda(device));
    model->train();
    return model;
  }
  static optim::AdamOptions adam_options() {
    optim::AdamOptions options;
    options.lr = 2e-3;
    return options;
  }

  std::optional<DType> autocast_dtype_;
  std::shared_ptr<nn::Sequential> model_;
  optim::Adam adam_;
  optim::GradScaler scaler_;
  Tensor images_, labels_;
};

}  // namespace ember::bench
