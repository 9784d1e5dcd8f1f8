// SyncBatchNorm: global batch statistics through two allreduces (one forward, one backward).
#include "distributed/sync_batch_norm.h"

#include <sstream>

#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/ops.h"

namespace ember::dist {
namespace {

// The dims a channel's statistics run over: all of (N, C, ...) but C.
Dims statistics_dims(int64_t ndim) {
  Dims dims = {0};
  for (int64_t d = 2; d < ndim; ++d)
    dims.push_back(d);
  return dims;
}

// (C) -> (1, C, 1, ...): broadcasts over an input of `ndim` dims.
Tensor per_channel(const Tensor& t, int64_t ndim) {
  Shape shape(static_cast<size_t>(ndim), 1);
  shape[1] = t.size(0);
  return t.reshape(shape);
}

// In place; a group of one has nothing to add.
void allreduce_sum(const ProcessGroupPtr& group, const Tensor& t) {
  if (group->size() > 1) group->allreduce(t, ReduceOp::sum)->wait();
}

}  // namespace

Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, const ProcessGroupPtr& group) {
  EMBER_CHECK(group != nullptr, "sync_batch_norm: the process group is empty");
  EMBER_CHECK(x.dim() >= 2, "sync_batch_norm: expected an input (N, C, ...), got ", describe(x));
  EMBER_CHECK(is_floating(x.dtype()), "sync_batch_norm: expected a floating-point input, got ",
              describe(x));
  const int64_t channels = x.size(1), ndim = x.dim();
  for (const auto& [t, what] :
       {std::pair{&running_mean, "running_mean"}, std::pair{&running_var, "running_var"},
        std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    EMBER_CHECK(!t->defined() || (t->dim() == 1 && t->size(0) == channels),
                "sync_batch_norm: ", what, " has shape ", shape_str(t->sizes()), " but the input ",
                describe(x), " has ", channels, " channels; expected (", channels, ")");
  }
  // Eval normalises with the running statistics: nothing to share.
  if (!training) {
    return batch_norm(x, running_mean, running_var, weight, bias, false, momentum, eps);
  }

  // f16/bf16 normalise in f32; the statistics are summed in f64 so that the one-pass variance
  // E[x^2] - E[x]^2 loses nothing that matters.
  const DType compute = x.dtype() == DType::f64 ? DType::f64 : DType::f32;
  const Dims dims = statistics_dims(ndim);
  Tensor mean, invstd, out;
  double count = 0;
  {
    NoGradGuard no_grad;
    const Tensor x64 = x.detach().to(DType::f64);
    const double local_count = static_cast<double>(channels == 0 ? 0 : x.numel() / channels);
    // stats (2C + 1): per-channel sum, per-channel sum of squares, count: one collective.
    Tensor stats = cat({sum(x64, dims), sum(x64 * x64, dims),
                        full({1}, local_count, TensorOptions(DType::f64, x.device()))},
                       0)
                       .contiguous();
    allreduce_sum(group, stats);
    count = stats.narrow(0, 2 * channels, 1).item<double>();
    EMBER_CHECK(count > 1, "sync_batch_norm: expected more than 1 value per channel over the ",
                group->size(), " ranks of group ", group->name(), " when training, got ", count,
                " (this rank's input: ", describe(x), ")");
    const Tensor mean64 = stats.narrow(0, 0, channels) / count;
    const Tensor var64 =
        clamp(stats.narrow(0, channels, channels) / count - mean64 * mean64, 0.0, std::nullopt);
    if (running_mean.defined()) {
      // As batch_norm: the running variance takes the unbiased variance of the global batch.
      Tensor running_mean_ref = running_mean, running_var_ref = running_var;
      running_mean_ref.mul_(1.0 - momentum).add_(mean64.to(running_mean.dtype()), momentum);
      running_var_ref.mul_(1.0 - momentum)
          .add_((var64 * (count / (count - 1))).to(running_var.dtype()), momentum);
    }
    mean = mean64.to(compute);
    invstd = rsqrt(var64 + eps).to(compute);
    Tensor y = (x.detach().to(compute) - per_channel(mean, ndim)) * per_channel(invstd, ndim);
    if (weight.defined()) y = y * per_channel(weight.detach().to(compute), ndim);
    if (bias.defined()) y = y + per_channel(bias.detach().to(compute), ndim);
    out = y.to(x.dtype());
  }

  if (any_requires_grad({&x, &weight, &bias})) {
    const bool has_weight = weight.defined(), has_bias = bias.defined();
    const bool input_gradient = x.requires_grad();
    record_custom(
        "sync_batch_norm", {x, weight, bias}, out, {x, weight, mean, invstd},
        [=](const Tensor& grad_output, const std::vector<Tensor>& s) -> std::vector<Tensor> {
          const Tensor& input = s[0];
          const Tensor& mean_saved = s[2];
          const Tensor& invstd_saved = s[3];
          // dy, x_hat (N, C, ...); sums (C)
          const Tensor dy = grad_output.to(compute);
          const Tensor x_hat =
              (input.to(compute) - per_channel(mean_saved, ndim)) * per_channel(invstd_saved, ndim);
          const Tensor sum_dy = sum(dy, dims);
          const Tensor sum_dy_x_hat = sum(dy * x_hat, dims);
          Tensor grad_input;
          if (input_gradient) {
            // Every rank's dy reaches every input through the global mean and variance.
            Tensor global = cat({sum_dy, sum_dy_x_hat}, 0).contiguous();
            allreduce_sum(group, global);
            const Tensor mean_dy = global.narrow(0, 0, channels) / count;
            const Tensor mean_dy_x_hat = global.narrow(0, channels, channels) / count;
            const Tensor scale =
                has_weight ? invstd_saved * s[1].to(compute) : invstd_saved;  // (C)
            grad_input =
                ((dy - per_channel(mean_dy, ndim)) - x_hat * per_channel(mean_dy_x_hat, ndim)) *
                per_channel(scale, ndim);
          }
          // The weight and bias gradients stay this rank's share (DDP sums them), as PyTorch's.
          return {grad_input, has_weight ? sum_dy_x_hat : Tensor(), has_bias ? sum_dy : Tensor()};
        });
  }
  return out;
}

SyncBatchNorm::SyncBatchNorm(int64_t features, ProcessGroupPtr process_group, double epsilon,
                             double batch_momentum, bool affine)
    : num_features(features),
      eps(epsilon),
      momentum(batch_momentum),
      group(std::move(process_group)) {
  EMBER_CHECK(group != nullptr,
              "SyncBatchNorm: the process group is empty (pass dist::world() or a subgroup)");
  EMBER_CHECK(features > 0, "SyncBatchNorm: num_features must be positive, got ", features);
  if (affine) {
    weight = register_parameter("weight", ones({features}));
    bias = register_parameter("bias", zeros({features}));
  }
  running_mean = register_buffer("running_mean", zeros({features}));
  running_var = register_buffer("running_var", ones({features}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
}

SyncBatchNorm::SyncBatchNorm(const nn::BatchNorm& source, ProcessGroupPtr process_group)
    : num_features(source.num_features),
      eps(source.eps),
      momentum(source.momentum),
      group(std::move(process_group)) {
  EMBER_CHECK(group != nullptr,
              "SyncBatchNorm: the process group is empty (pass dist::world() or a subgroup)");
  // The same names in the same order as BatchNorm's: state dicts carry over.
  if (source.weight.defined())
    weight = register_parameter("weight", source.weight, source.weight.requires_grad());
  if (source.bias.defined())
    bias = register_parameter("bias", source.bias, source.bias.requires_grad());
  running_mean = register_buffer("running_mean", source.running_mean);
  running_var = register_buffer("running_var", source.running_var);
  num_batches_tracked = register_buffer("num_batches_tracked", source.num_batches_tracked);
  train(source.is_training());
}

Tensor SyncBatchNorm::forward(const Tensor& x) {
  EMBER_CHECK(x.dim() >= 2, "SyncBatchNorm: expected an input (N, C, ...), got ", describe(x));
  if (is_training()) {
    NoGradGuard no_grad;
    num_batches_tracked.add_(1);
  }
  return sync_batch_norm(x, running_mean, running_var, weight, bias, is_training(), momentum, eps,
                         group);
}

std::string SyncBatchNorm::extra_repr() const {
  std::ostringstream out;
  out << num_features << ", eps=" << eps << ", momentum=" << momentum
      << ", affine=" << (weight.defined() ? "true" : "false") << ", group=" << group->name() << " ("
      << group->size() << " ranks)";
  return out.str();
}

std::shared_ptr<nn::Module> SyncBatchNorm::make_clone() const {
  return nn::make<SyncBatchNorm>(num_features, group, eps, momentum, weight.defined());
}

nn::ModulePtr convert_sync_batchnorm(nn::ModulePtr module, ProcessGroupPtr group) {
  EMBER_CHECK(module != nullptr, "convert_sync_batchnorm: the module handle is empty");
  EMBER_CHECK(group != nullptr, "convert_sync_batchnorm: the process group is empty");
  if (const auto* batch_norm = dynamic_cast<const nn::BatchNorm*>(module.get()))
    return nn::make<SyncBatchNorm>(*batch_norm, group);
  for (const auto& [name, child] : module->named_children()) {
    nn::ModulePtr converted = convert_sync_batchnorm(child, group);
    if (converted != child) module->replace_child(name, converted);
  }
  return module;
}

}  // namespace ember::dist
