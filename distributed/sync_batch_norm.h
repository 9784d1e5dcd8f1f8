// SyncBatchNorm: batch normalisation over the batch of every rank of a process group, as
// torch.nn.SyncBatchNorm. Each rank holds a slice of the global batch; in training the
// statistics are those of the whole batch, so the model behaves as if one process ran it all.
//
//   auto model = dist::convert_sync_batchnorm(nn::resnet9(3, 10), dist::world());
//
// Training forward: each rank's per-channel sum, sum of squares and count are allreduced (one
// collective, in f64); mean and biased variance normalise, running statistics take the global
// mean and unbiased variance. Backward: the per-channel sums of dy and dy * x_hat are allreduced
// (one collective) to form the input gradient. Every rank must run the same forwards and
// backwards in the same order, as with any collective (so not inside DataParallel, whose replica
// threads would issue them in racing order; PyTorch refuses that too). Eval mode uses the running
// statistics and communicates nothing.
//
// The weight and bias gradients are each rank's own share, as PyTorch's: summed over ranks (DDP's
// allreduce) they are the whole batch's gradient.
#pragma once

#include "distributed/process_group.h"
#include "nn/layers.h"

namespace ember::dist {

// The functional form. x (N, C, ...) -> (N, C, ...); weight, bias (C) or undefined; running_mean,
// running_var (C), updated in place when training (momentum, as batch_norm). N may be 0 on some
// ranks as long as the global batch has more than one value per channel.
Tensor sync_batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight, const Tensor& bias, bool training, double momentum,
                       double eps, const ProcessGroupPtr& group);

class SyncBatchNorm : public nn::Module {
 public:
  SyncBatchNorm(int64_t num_features, ProcessGroupPtr group, double eps = 1e-5,
                double momentum = 0.1, bool affine = true);
  // Takes over `source`'s options, training mode and its very tensors (weight, bias and the
  // buffers are shared, not copied: an optimizer holding them keeps working).
  SyncBatchNorm(const nn::BatchNorm& source, ProcessGroupPtr group);

  // x (N, C, ...) -> (N, C, ...)
  Tensor forward(const Tensor& x) override;
  std::string type_name() const override { return "SyncBatchNorm"; }
  std::string extra_repr() const override;

  int64_t num_features;
  double eps, momentum;
  ProcessGroupPtr group;
  Tensor weight, bias, running_mean, running_var, num_batches_tracked;

 protected:
  std::shared_ptr<nn::Module> make_clone() const override;
};

// Replaces every batch norm (BatchNorm1d/2d) in `module`'s tree by a SyncBatchNorm over `group`
// that shares its parameters and buffers, in place, and returns the tree (a new module when
// `module` is itself a batch norm), as torch.nn.SyncBatchNorm.convert_sync_batchnorm.
nn::ModulePtr convert_sync_batchnorm(nn::ModulePtr module, ProcessGroupPtr group);

}  // namespace ember::dist
