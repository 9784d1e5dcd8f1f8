// The everyday layers: linear, convolution, pooling, normalisation, activations, embedding.
// Shapes follow PyTorch (NCHW images); initialisation follows PyTorch's defaults.
#pragma once

#include "nn/module.h"
#include "runtime/ops.h"

namespace ember::nn {

// x (..., in) -> (..., out); weight (out, in), bias (out).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Linear"; }
  std::string extra_repr() const override;
  Tensor weight, bias;

 protected:
  std::shared_ptr<Module> make_clone() const override;
};

// x (N, C, H, W) -> (N, K, P, Q); weight (K, C / groups, R, S), bias (K).
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size, Conv2dOptions options = {},
         bool bias = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "Conv2d"; }
  std::string extra_repr() const override;
  Conv2dOptions options;
  Tensor weight, bias;

 protected:
  std::shared_ptr<Module> make_clone() const override;
};

class MaxPool2d : public Module {
 public:
  explicit MaxPool2d(Pool2dOptions options) : options(options) {}
  explicit MaxPool2d(int64_t kernel_size) : options{.kernel_size = kernel_size} {}
  Tensor forward(const Tensor& x) override { return max_pool2d(x, options); }
  std::string type_name() const override { return "MaxPool2d"; }
  Pool2dOptions options;

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<MaxPool2d>(options); }
};

class AvgPool2d : public Module {
 public:
  explicit AvgPool2d(Pool2dOptions options) : options(options) {}
  explicit AvgPool2d(int64_t kernel_size) : options{.kernel_size = kernel_size} {}
  Tensor forward(const Tensor& x) override { return avg_pool2d(x, options); }
  std::string type_name() const override { return "AvgPool2d"; }
  Pool2dOptions options;

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<AvgPool2d>(options); }
};

class AdaptiveAvgPool2d : public Module {
 public:
  explicit AdaptiveAvgPool2d(Size2 output_size) : output_size(output_size) {}
  Tensor forward(const Tensor& x) override { return adaptive_avg_pool2d(x, output_size); }
  std::string type_name() const override { return "AdaptiveAvgPool2d"; }
  Size2 output_size;

 protected:
  std::shared_ptr<Module> make_clone() const override {
    return make<AdaptiveAvgPool2d>(output_size);
  }
};

// Batch normalisation over C of (N, C) / (N, C, L) (1d) or (N, C, H, W) (2d). In training the
// batch statistics normalise and the running ones are updated (momentum); in eval the running
// ones normalise. Buffers: running_mean, running_var, num_batches_tracked (as PyTorch).
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t num_features, int spatial_dims, double eps = 1e-5, double momentum = 0.1,
            bool affine = true);
  Tensor forward(const Tensor& x) override;
  // relu(forward(x)) as one batch_norm_relu: what Sequential runs for this layer and a ReLU after
  // it (fusable_with_relu).
  Tensor forward_relu(const Tensor& x);
  std::string type_name() const override;
  std::string extra_repr() const override;
  int64_t num_features;
  int spatial_dims;
  double eps, momentum;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 protected:
  std::shared_ptr<Module> make_clone() const override;
};
// True when Sequential may run `layer` and a `next` after it as layer.forward_relu: the switch
// below is on, layer is a BatchNorm, BatchNorm1d or BatchNorm2d (a subclass may override forward)
// and next a ReLU.
bool fusable_with_relu(const Module& layer, const Module& next);
// Whether Sequential fuses a batch norm with the ReLU after it (on by default; EMBER_FUSE_BN_RELU=0
// starts a process with it off). The values are the same either way (batch_norm_relu).
void set_fuse_batch_norm_relu(bool fuse);
bool fuse_batch_norm_relu();

class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true)
      : BatchNorm(num_features, 1, eps, momentum, affine) {}

 protected:
  std::shared_ptr<Module> make_clone() const override;
};
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true)
      : BatchNorm(num_features, 2, eps, momentum, affine) {}

 protected:
  std::shared_ptr<Module> make_clone() const override;
};

// Normalises the trailing `shape` dims of x (..., *shape).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape shape, double eps = 1e-5, bool elementwise_affine = true);
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "LayerNorm"; }
  std::string extra_repr() const override;
  Shape shape;
  double eps;
  Tensor weight, bias;

 protected:
  std::shared_ptr<Module> make_clone() const override;
};

// indices (...) -> (..., dim); weight (num, dim) ~ N(0, 1). With padding_idx (negative: counted
// from num), that row starts at zeros and takes no gradient (torch.nn.Embedding's padding_idx).
// With max_norm, each forward first renormalises the rows it reads (embedding_renorm_).
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt,
            std::optional<double> max_norm = std::nullopt, double norm_type = 2.0);
  Tensor forward(const Tensor& indices) override {
    return embedding(indices, weight, padding_idx, max_norm, norm_type);
  }
  std::string type_name() const override { return "Embedding"; }
  std::string extra_repr() const override;
  Tensor weight;
  std::optional<int64_t> padding_idx;  // in [0, num) once constructed
  std::optional<double> max_norm;
  double norm_type = 2.0;

 protected:
  std::shared_ptr<Module> make_clone() const override;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) override { return dropout(x, p, is_training()); }
  std::string type_name() const override { return "Dropout"; }
  std::string extra_repr() const override;
  double p;

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<Dropout>(p); }
};

// Stateless layers.
class ReLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return relu(x); }
  std::string type_name() const override { return "ReLU"; }

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<ReLU>(); }
};
class GELU : public Module {
 public:
  explicit GELU(GeluApproximation approximation = GeluApproximation::none)
      : approximation(approximation) {}
  Tensor forward(const Tensor& x) override { return gelu(x, approximation); }
  std::string type_name() const override { return "GELU"; }
  GeluApproximation approximation;

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<GELU>(approximation); }
};
class SiLU : public Module {
 public:
  Tensor forward(const Tensor& x) override { return silu(x); }
  std::string type_name() const override { return "SiLU"; }

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<SiLU>(); }
};
class LeakyReLU : public Module {
 public:
  explicit LeakyReLU(double slope = 0.01) : negative_slope(slope) {}
  Tensor forward(const Tensor& x) override { return leaky_relu(x, negative_slope); }
  std::string type_name() const override { return "LeakyReLU"; }
  std::string extra_repr() const override;
  double negative_slope;

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<LeakyReLU>(negative_slope); }
};
class Softplus : public Module {
 public:
  explicit Softplus(double beta_value = 1.0, double threshold_value = 20.0)
      : beta(beta_value), threshold(threshold_value) {}
  Tensor forward(const Tensor& x) override { return softplus(x, beta, threshold); }
  std::string type_name() const override { return "Softplus"; }
  std::string extra_repr() const override;
  double beta, threshold;

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<Softplus>(beta, threshold); }
};
class Tanh : public Module {
 public:
  Tensor forward(const Tensor& x) override { return tanh(x); }
  std::string type_name() const override { return "Tanh"; }

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<Tanh>(); }
};
class Sigmoid : public Module {
 public:
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
  std::string type_name() const override { return "Sigmoid"; }

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<Sigmoid>(); }
};
class Identity : public Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  std::string type_name() const override { return "Identity"; }

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<Identity>(); }
};
// x (N, ...) -> (N, prod(...)) with the defaults, as torch.nn.Flatten.
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1)
      : start_dim(start_dim), end_dim(end_dim) {}
  Tensor forward(const Tensor& x) override { return x.flatten(start_dim, end_dim); }
  std::string type_name() const override { return "Flatten"; }
  int64_t start_dim, end_dim;

 protected:
  std::shared_ptr<Module> make_clone() const override { return make<Flatten>(start_dim, end_dim); }
};

}  // namespace ember::nn
