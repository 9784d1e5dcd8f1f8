#include "nn/layers.h"

#include <atomic>
#include <cmath>
#include <sstream>
#include <typeinfo>

#include "nn/init.h"
#include "runtime/env.h"

namespace ember::nn {
namespace {

std::string size2_str(Size2 s) {
  std::ostringstream out;  // not chained std::string +: GCC 12 -O3 warns (-Wrestrict) falsely
  if (s.h == s.w) {
    out << s.h;
  } else {
    out << "(" << s.h << ", " << s.w << ")";
  }
  return out.str();
}

// PyTorch's default for Linear and Conv2d: kaiming_uniform_(a = sqrt(5)) on the weight, and the
// bias U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
void reset_linear_like(Tensor& weight, Tensor& bias) {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(init::fans(weight).first));
    init::uniform_(bias, -bound, bound);
  }
}

}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool has_bias) {
  EMBER_CHECK(in_features > 0 && out_features > 0,
              "Linear: in_features and out_features must be positive, got ", in_features, " and ",
              out_features);
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (has_bias) bias = register_parameter("bias", empty({out_features}));
  reset_linear_like(weight, bias);
}

Tensor Linear::forward(const Tensor& x) {
  return linear(x, weight, bias);
}

std::shared_ptr<Module> Linear::make_clone() const {
  return make<Linear>(weight.size(1), weight.size(0), bias.defined());
}

std::string Linear::extra_repr() const {
  std::ostringstream out;
  out << "in_features=" << weight.size(1) << ", out_features=" << weight.size(0)
      << ", bias=" << (bias.defined() ? "true" : "false");
  return out.str();
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2 kernel_size,
               Conv2dOptions conv_options, bool has_bias)
    : options(conv_options) {
  EMBER_CHECK(in_channels > 0 && out_channels > 0 && kernel_size.h > 0 && kernel_size.w > 0,
              "Conv2d: channels and kernel size must be positive");
  EMBER_CHECK(
      options.groups > 0 && in_channels % options.groups == 0 && out_channels % options.groups == 0,
      "Conv2d: groups (", options.groups, ") must divide in_channels (", in_channels,
      ") and out_channels (", out_channels, ")");
  weight = register_parameter(
      "weight", empty({out_channels, in_channels / options.groups, kernel_size.h, kernel_size.w}));
  if (has_bias) bias = register_parameter("bias", empty({out_channels}));
  reset_linear_like(weight, bias);
}

Tensor Conv2d::forward(const Tensor& x) {
  return conv2d(x, weight, bias, options);
}

std::shared_ptr<Module> Conv2d::make_clone() const {
  return make<Conv2d>(weight.size(1) * options.groups, weight.size(0),
                      Size2(weight.size(2), weight.size(3)), options, bias.defined());
}

std::string Conv2d::extra_repr() const {
  std::ostringstream out;
  out << weight.size(1) * options.groups << ", " << weight.size(0)
      << ", kernel_size=" << size2_str({weight.size(2), weight.size(3)});
  if (!(options.stride == Size2(1))) out << ", stride=" << size2_str(options.stride);
  if (!(options.padding == Size2(0))) out << ", padding=" << size2_str(options.padding);
  if (!(options.dilation == Size2(1))) out << ", dilation=" << size2_str(options.dilation);
  if (options.groups != 1) out << ", groups=" << options.groups;
  if (!bias.defined()) out << ", bias=false";
  return out.str();
}

BatchNorm::BatchNorm(int64_t features, int dims, double epsilon, double batch_momentum, bool affine)
    : num_features(features), spatial_dims(dims), eps(epsilon), momentum(batch_momentum) {
  EMBER_CHECK(features > 0, type_name(), ": num_features must be positive, got ", features);
  if (affine) {
    weight = register_parameter("weight", ones({features}));
    bias = register_parameter("bias", zeros({features}));
  }
  running_mean = register_buffer("running_mean", zeros({features}));
  running_var = register_buffer("running_var", ones({features}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
}

std::string BatchNorm::type_name() const {
  return spatial_dims == 1 ? "BatchNorm1d" : "BatchNorm2d";
}

namespace {

// BatchNorm's forward, with the ReLU after it fused when `relu`.
Tensor batch_norm_layer(BatchNorm& layer, const Tensor& x, bool relu) {
  const bool ok = layer.spatial_dims == 2 ? x.dim() == 4 : (x.dim() == 2 || x.dim() == 3);
  EMBER_CHECK(ok, layer.type_name(), ": expected ",
              layer.spatial_dims == 2 ? "(N, C, H, W)" : "(N, C) or (N, C, L)", " input, got ",
              describe(x));
  if (layer.is_training()) {
    NoGradGuard no_grad;
    layer.num_batches_tracked.add_(1);
  }
  const auto op = relu ? batch_norm_relu : batch_norm;
  return op(x, layer.running_mean, layer.running_var, layer.weight, layer.bias, layer.is_training(),
            layer.momentum, layer.eps);
}

std::atomic<bool>& batch_norm_relu_fusion() {
  static std::atomic<bool> flag{env_switch(
      "EMBER_FUSE_BN_RELU", true, "run a BatchNorm and the ReLU after it as one batch_norm_relu")};
  return flag;
}

}  // namespace

Tensor BatchNorm::forward(const Tensor& x) {
  return batch_norm_layer(*this, x, false);
}

Tensor BatchNorm::forward_relu(const Tensor& x) {
  return batch_norm_layer(*this, x, true);
}

bool fusable_with_relu(const Module& layer, const Module& next) {
  const std::type_info& type = typeid(layer);
  const bool is_batch_norm =
      type == typeid(BatchNorm) || type == typeid(BatchNorm1d) || type == typeid(BatchNorm2d);
  return is_batch_norm && typeid(next) == typeid(ReLU) && fuse_batch_norm_relu();
}

void set_fuse_batch_norm_relu(bool fuse) {
  batch_norm_relu_fusion().store(fuse);
}

bool fuse_batch_norm_relu() {
  return batch_norm_relu_fusion().load();
}

std::shared_ptr<Module> BatchNorm::make_clone() const {
  return make<BatchNorm>(num_features, spatial_dims, eps, momentum, weight.defined());
}
std::shared_ptr<Module> BatchNorm1d::make_clone() const {
  return make<BatchNorm1d>(num_features, eps, momentum, weight.defined());
}
std::shared_ptr<Module> BatchNorm2d::make_clone() const {
  return make<BatchNorm2d>(num_features, eps, momentum, weight.defined());
}

std::string BatchNorm::extra_repr() const {
  std::ostringstream out;
  out << num_features << ", eps=" << eps << ", momentum=" << momentum
      << ", affine=" << (weight.defined() ? "true" : "false");
  return out.str();
}

LayerNorm::LayerNorm(Shape normalized_shape, double epsilon, bool elementwise_affine)
    : shape(std::move(normalized_shape)), eps(epsilon) {
  EMBER_CHECK(!shape.empty(), "LayerNorm: normalized_shape must not be empty");
  if (elementwise_affine) {
    weight = register_parameter("weight", ones(shape));
    bias = register_parameter("bias", zeros(shape));
  }
}

Tensor LayerNorm::forward(const Tensor& x) {
  return layer_norm(x, shape, weight, bias, eps);
}

std::shared_ptr<Module> LayerNorm::make_clone() const {
  return make<LayerNorm>(shape, eps, weight.defined());
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream out;
  out << shape_str(shape) << ", eps=" << eps;
  return out.str();
}

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim,
                     std::optional<int64_t> padding_index, std::optional<double> max_norm_value,
                     double norm_type_value)
    : max_norm(max_norm_value), norm_type(norm_type_value) {
  EMBER_CHECK(num_embeddings > 0 && embedding_dim > 0, "Embedding: sizes must be positive, got ",
              num_embeddings, " and ", embedding_dim);
  if (padding_index) {
    EMBER_CHECK(*padding_index >= -num_embeddings && *padding_index < num_embeddings,
                "Embedding: padding_idx ", *padding_index, " is outside the table of ",
                num_embeddings, " rows (expected -", num_embeddings, " <= padding_idx < ",
                num_embeddings, ")");
    padding_idx = *padding_index < 0 ? *padding_index + num_embeddings : *padding_index;
  }
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight, 0.0, 1.0);
  if (padding_idx) {
    NoGradGuard no_grad;
    weight.select(0, *padding_idx).zero_();
  }
}

std::shared_ptr<Module> Embedding::make_clone() const {
  return make<Embedding>(weight.size(0), weight.size(1), padding_idx, max_norm, norm_type);
}

std::string Embedding::extra_repr() const {
  std::ostringstream out;
  out << weight.size(0) << ", " << weight.size(1);
  if (padding_idx) out << ", padding_idx=" << *padding_idx;
  if (max_norm) out << ", max_norm=" << *max_norm;
  if (max_norm && norm_type != 2.0) out << ", norm_type=" << norm_type;
  return out.str();
}

std::string LeakyReLU::extra_repr() const {
  std::ostringstream out;
  out << "negative_slope=" << negative_slope;
  return out.str();
}

std::string Softplus::extra_repr() const {
  std::ostringstream out;
  out << "beta=" << beta << ", threshold=" << threshold;
  return out.str();
}

Dropout::Dropout(double probability) : p(probability) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "Dropout: p must be in [0, 1], got ", p);
}

std::string Dropout::extra_repr() const {
  std::ostringstream out;
  out << "p=" << p;
  return out.str();
}

}  // namespace ember::nn
