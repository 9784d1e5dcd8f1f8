// Losses and dropout: checks, the fused class-index kernels of kernels/cpu/loss.h (and
// kernels/cuda/loss.h for CUDA tensors), autograd. Under autocast the losses run in f32. mse_loss,
// binary_cross_entropy_with_logits and dropout are composed of ember ops, so they run wherever
// those do (dropout's mask comes from bernoulli, whose CUDA numbers equal the CPU's bit for bit).
#include "runtime/ops/loss.h"

#include <string_view>

#include "kernels/cpu/loss.h"
#include "runtime/autocast.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"
#include "runtime/ops/layout.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/loss.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {
namespace {

// scores (N, C, d...) seen as (N, C, inner) with target (N, d...) of class indices.
struct ClassLayout {
  int64_t batch = 0, classes = 0, inner = 1;
  int64_t counted = 0;  // targets that are not ignore_index
};

ClassLayout check_class_inputs(const char* op, const Tensor& scores, const Tensor& target,
                               int64_t ignore_index) {
  EMBER_CHECK(scores.device() == target.device(), op, ": expected scores and target on the same ",
              "device, got ", describe(scores), " and ", describe(target),
              "; move the target with .to(", scores.device().str(), ")");
  EMBER_CHECK(is_floating(scores.dtype()), op, ": expected floating-point scores, got ",
              describe(scores));
  EMBER_CHECK(target.dtype() == DType::i64 || target.dtype() == DType::i32, op,
              ": expected target of dtype i64 (or i32) holding class indices, got ",
              describe(target),
              std::string_view(op) == "cross_entropy"
                  ? " (class probabilities are a floating-point target of the logits' shape)"
                  : "");
  EMBER_CHECK(scores.dim() >= 2, op, ": expected scores of shape (N, C) or (N, C, d1, ...), got ",
              describe(scores));
  Shape expected = scores.sizes();
  expected.erase(expected.begin() + 1);
  EMBER_CHECK(target.sizes() == expected, op, ": scores of shape ", shape_str(scores.sizes()),
              " need a target of shape ", shape_str(expected), ", got ", shape_str(target.sizes()));
  ClassLayout layout;
  layout.batch = scores.size(0);
  layout.classes = scores.size(1);
  layout.inner = shape_numel(Shape(scores.sizes().begin() + 2, scores.sizes().end()));
  // Targets are checked on the host: a CUDA target is copied there first (this waits for the
  // GPU, the price of an error that names the bad value and of the count that mean divides by).
  const Tensor host_target = target.is_cuda() ? target.to(Device::cpu()) : target;
  dispatch_index(host_target.dtype(), op, [&]<typename I>() {
    const I* values = static_cast<const I*>(host_target.data_ptr());
    const kernels::cpu::TargetCheck check =
        kernels::cpu::check_targets<I>(values, target.numel(), layout.classes, ignore_index);
    EMBER_CHECK(check.first_invalid < 0, op, ": target value ",
                static_cast<int64_t>(values[check.first_invalid < 0 ? 0 : check.first_invalid]),
                " (at position ", check.first_invalid, ") is out of range for C = ", layout.classes,
                " classes; expected values in [0, ", layout.classes, ") or ignore_index (",
                ignore_index, ")");
    layout.counted = check.counted;
  });
  return layout;
}

// The target as the kernels of its device read it: the CUDA kernels take i64 only.
Tensor kernel_target(const Tensor& target) {
  return target.is_cuda() ? target.to(DType::i64) : target;
}

#if EMBER_WITH_CUDA
// The stream of t's device, that device current while the call it is passed to runs.
cuda::StreamOnDevice stream_of(const Tensor& t) {
  return cuda::StreamOnDevice(t.device().index);
}
#endif

// Per-position losses (acc dtype, target's shape) -> the reduced result in `dtype`. mean divides
// by `count` (the non-ignored targets, or every element).
Tensor reduce_loss(const Tensor& losses, Reduction reduction, double count, DType dtype) {
  switch (reduction) {
    case Reduction::none:
      return losses.to(dtype);
    case Reduction::sum:
      return sum(losses).to(dtype);
    case Reduction::mean:
      return (sum(losses) / count).to(dtype);
  }
  EMBER_FAIL("loss: unknown reduction ", static_cast<int>(reduction),
             " (expected Reduction::none, sum or mean)");
}

// The upstream gradient as the kernels take it: dense acc-dtype values, one per position (none)
// or one for all (sum, mean), and the factor mean applies.
struct UpstreamGrad {
  Tensor values;
  int64_t step = 0;
  double multiplier = 1.0;
};

UpstreamGrad upstream_grad(const Tensor& g, Reduction reduction, DType acc, double count) {
  UpstreamGrad u;
  u.values = g.to(acc).contiguous();
  u.step = reduction == Reduction::none ? 1 : 0;
  u.multiplier = reduction == Reduction::mean ? 1.0 / count : 1.0;
  return u;
}

// A loss defined elementwise on same-shape floating inputs: the shared checks.
void check_elementwise_loss(const char* op, const Tensor& input, const Tensor& target) {
  EMBER_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), op,
              ": expected floating-point input and target, got ", describe(input), " and ",
              describe(target));
  EMBER_CHECK(input.sizes() == target.sizes(), op, ": input of shape ", shape_str(input.sizes()),
              " and target of shape ", shape_str(target.sizes()), " must have the same shape");
  EMBER_CHECK(input.device() == target.device(), op, ": expected input and target on the ",
              "same device, got ", describe(input), " and ", describe(target));
}

// d(reduced loss)/d(per-element loss), shaped to broadcast against the elements.
Tensor elementwise_upstream(const Tensor& g, Reduction reduction, int64_t numel) {
  if (reduction == Reduction::mean) return g * (1.0 / static_cast<double>(numel));
  return g;
}

// The loss with a class weight (C), composed of ember ops so that it runs and differentiates on
// any device. PyTorch's nll_loss with weight, and the label-smoothing term of its cross_entropy
// (cross_entropy_loss_label_smoothing), per position i with target t_i (0 where ignored):
//   nll_i = -w[t_i] log_probs[i, t_i]      smooth_i = -sum_c w[c] log_probs[i, c]
//   loss = (1 - s) reduce(nll) + s / C reduce(smooth)
// where mean divides both sums by the sum of w[t_i] over the targets that are not ignored.
// log_probs (N, C, d...) in the accumulation dtype; the result in `dtype`.
Tensor class_weighted_loss(const char* op, const Tensor& log_probs, const Tensor& target,
                           const Tensor& weight_in, const ClassLayout& layout, int64_t ignore_index,
                           double smoothing, Reduction reduction, DType dtype) {
  EMBER_CHECK(weight_in.dim() == 1 && weight_in.size(0) == layout.classes, op,
              ": expected a weight of shape (", layout.classes, "), one per class, got ",
              describe(weight_in));
  EMBER_CHECK(is_floating(weight_in.dtype()), op, ": expected a floating-point weight, got ",
              describe(weight_in));
  EMBER_CHECK(weight_in.device() == log_probs.device(), op, ": expected the weight on ",
              log_probs.device().str(), " with the scores, got ", describe(weight_in));
  const Tensor weight = weight_in.to(log_probs.dtype());
  const Tensor index = target.to(DType::i64);
  const Tensor counted = ne(index, ignore_index);            // (N, d...)
  const Tensor safe_index = index * counted.to(DType::i64);  // ignored -> class 0, masked below
  const Tensor zeros_at = zeros(index.sizes(), TensorOptions(log_probs.dtype(), index.device()));
  const Tensor target_weight = where(
      counted, index_select(weight, 0, safe_index.reshape({index.numel()})).reshape(index.sizes()),
      zeros_at);
  const Tensor picked = gather(log_probs, 1, safe_index.unsqueeze(1)).squeeze(1);
  // where, not a product: an ignored position's -inf log-probability must not give NaN.
  const Tensor nll = where(counted, -picked * target_weight, zeros_at);
  const auto reduce = [&](const Tensor& per_position) {
    switch (reduction) {
      case Reduction::none:
        return per_position;
      case Reduction::sum:
        return sum(per_position);
      case Reduction::mean:
        return sum(per_position) / sum(target_weight);
    }
    return Tensor();
  };
  Tensor loss = reduce(nll);
  if (smoothing > 0.0) {
    Shape class_shape(static_cast<size_t>(log_probs.dim()), 1);
    class_shape[1] = layout.classes;  // weight (C) -> (1, C, 1...)
    const Tensor smooth = -sum(log_probs * weight.reshape(class_shape), {1});
    loss = loss * (1.0 - smoothing) + reduce(where(counted, smooth, zeros_at)) *
                                          (smoothing / static_cast<double>(layout.classes));
  }
  return loss.to(dtype);
}

// cross_entropy with a target of class probabilities, as PyTorch's (a floating target of the
// logits' shape): per position, -sum_c w[c] q[c] log_softmax(x)[c], where q is the target mixed
// with the uniform distribution by label_smoothing (q = (1 - s) t + s / C). mean divides by the
// number of positions (N d...), weighted or not; a non-negative ignore_index is refused, as
// PyTorch does. Composed of ember ops, so it runs and differentiates (the target too) on any
// device.
Tensor probability_target_loss(const char* op, const Tensor& logits, const Tensor& target,
                               const CrossEntropyOptions& options) {
  EMBER_CHECK(logits.device() == target.device(), op, ": expected logits and target on the same ",
              "device, got ", describe(logits), " and ", describe(target));
  EMBER_CHECK(is_floating(logits.dtype()), op, ": expected floating-point logits, got ",
              describe(logits));
  EMBER_CHECK(logits.dim() >= 2, op, ": expected logits of shape (N, C) or (N, C, d1, ...), got ",
              describe(logits));
  EMBER_CHECK(target.sizes() == logits.sizes(), op, ": a floating-point target holds class ",
              "probabilities and must have the logits' shape ", shape_str(logits.sizes()), ", got ",
              shape_str(target.sizes()), " (class indices are an i64 target of shape ",
              "(N, d...))");
  EMBER_CHECK(options.ignore_index < 0, op, ": ignore_index (", options.ignore_index,
              ") is for class-index targets; a target of class probabilities has no class to "
              "ignore (as in PyTorch)");
  // The result promotes as PyTorch's log_softmax(logits) * target does (f32 logits with an f64
  // target give f64); 16-bit results are computed in f32.
  const DType dtype = promote_types(logits.dtype(), target.dtype()), acc = accumulate_dtype(dtype);
  const int64_t classes = logits.size(1);
  const Tensor log_probs = log_softmax(logits.to(acc), 1);
  Tensor q = target.to(acc);
  if (options.label_smoothing > 0.0)
    q = q * (1.0 - options.label_smoothing) +
        options.label_smoothing / static_cast<double>(classes);
  if (options.weight.defined()) {
    const Tensor& w = options.weight;
    EMBER_CHECK(w.dim() == 1 && w.size(0) == classes, op, ": expected a weight of shape (", classes,
                "), one per class, got ", describe(w));
    EMBER_CHECK(is_floating(w.dtype()) && w.device() == logits.device(), op,
                ": expected a floating-point weight on ", logits.device().str(), ", got ",
                describe(w));
    Shape class_shape(static_cast<size_t>(logits.dim()), 1);
    class_shape[1] = classes;  // (C) -> (1, C, 1...)
    q = q * w.to(acc).reshape(class_shape);
  }
  const Tensor per_position = -sum(log_probs * q, {1});  // (N, d...)
  switch (options.reduction) {
    case Reduction::none:
      return per_position.to(dtype);
    case Reduction::sum:
      return sum(per_position).to(dtype);
    case Reduction::mean:
      return (sum(per_position) / static_cast<double>(per_position.numel())).to(dtype);
  }
  return Tensor();
}

// An optional weight of binary_cross_entropy_with_logits, checked and in the loss's dtype.
Tensor element_weight(const char* op, const char* name, const Tensor& weight, const Tensor& logits,
                      DType dtype) {
  if (!weight.defined()) return Tensor();
  EMBER_CHECK(is_floating(weight.dtype()), op, ": expected a floating-point ", name, ", got ",
              describe(weight));
  EMBER_CHECK(weight.device() == logits.device(), op, ": expected the ", name, " on ",
              logits.device().str(), " with the logits, got ", describe(weight));
  EMBER_CHECK(broadcast_shapes(logits.sizes(), weight.sizes(), op) == logits.sizes(), op, ": ",
              name, " of shape ", shape_str(weight.sizes()),
              " does not broadcast to the logits' shape ", shape_str(logits.sizes()));
  return weight.detach().to(dtype);
}

// log(1 + exp(-x)), without overflow: max(-x, 0) + log(1 + exp(-|x|)).
Tensor softplus_of_negative(const Tensor& x) {
  return relu(-x) + log(exp(-abs(x)) + 1.0);
}

}  // namespace

Tensor cross_entropy(const Tensor& logits_in, const Tensor& target_in,
                     const CrossEntropyOptions& options) {
  const char* op = "cross_entropy";
  if (logits_in.defined() && logits_in.dim() == 1) {
    // Unbatched: logits (C), target ().
    Tensor out = cross_entropy(logits_in.unsqueeze(0), target_in.unsqueeze(0), options);
    return options.reduction == Reduction::none ? out.squeeze(0) : out;
  }
  EMBER_CHECK(options.label_smoothing >= 0.0 && options.label_smoothing <= 1.0, op,
              ": label_smoothing must be in [0, 1], got ", options.label_smoothing);
  if (target_in.defined() && is_floating(target_in.dtype()))
    return probability_target_loss(op, autocast_fp32(logits_in), target_in, options);
  const Tensor logits = autocast_fp32(logits_in).contiguous();
  const Tensor target_dense = target_in.contiguous();
  const ClassLayout layout = check_class_inputs(op, logits, target_dense, options.ignore_index);
  const Tensor target = kernel_target(target_dense);
  const DType dtype = logits.dtype(), acc = accumulate_dtype(dtype);
  if (options.weight.defined()) {
    return class_weighted_loss(op, log_softmax(logits.to(acc), 1), target, options.weight, layout,
                               options.ignore_index, options.label_smoothing, options.reduction,
                               dtype);
  }
  Tensor losses = empty(target.sizes(), TensorOptions(acc, logits.device()));
  Tensor lse = empty(target.sizes(), TensorOptions(acc, logits.device()));
  dispatch_floating(dtype, op, [&]<typename T>() {
    if (logits.is_cuda()) {
#if EMBER_WITH_CUDA
      kernels::cuda::cross_entropy_forward<T>(
          static_cast<const T*>(logits.data_ptr()), target.data<int64_t>(), layout.batch,
          layout.classes, layout.inner, options.ignore_index, options.label_smoothing,
          static_cast<acc_t<T>*>(losses.data_ptr()), static_cast<acc_t<T>*>(lse.data_ptr()),
          stream_of(logits));
#endif
      return;
    }
    dispatch_index(target.dtype(), op, [&]<typename I>() {
      kernels::cpu::cross_entropy_forward<T, I>(
          static_cast<const T*>(logits.data_ptr()), static_cast<const I*>(target.data_ptr()),
          layout.batch, layout.classes, layout.inner, options.ignore_index, options.label_smoothing,
          static_cast<acc_t<T>*>(losses.data_ptr()), static_cast<acc_t<T>*>(lse.data_ptr()));
    });
  });
  const double count = static_cast<double>(layout.counted);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = reduce_loss(losses, options.reduction, count, dtype);
  }
  if (any_requires_grad({&logits})) {
    record(OpId::cross_entropy, {logits}, out, {logits, target, lse},
           [layout, options, count](const Tensor& g,
                                    const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor& x = s[0];
             const Tensor& t = s[1];
             const UpstreamGrad u = upstream_grad(g, options.reduction, s[2].dtype(), count);
             Tensor grad = empty(x.sizes(), TensorOptions(x.dtype(), x.device()));
             dispatch_floating(x.dtype(), "cross_entropy backward", [&]<typename T>() {
               if (x.is_cuda()) {
#if EMBER_WITH_CUDA
                 kernels::cuda::cross_entropy_backward<T>(
                     static_cast<const T*>(x.data_ptr()), t.data<int64_t>(),
                     static_cast<const acc_t<T>*>(s[2].data_ptr()),
                     static_cast<const acc_t<T>*>(u.values.data_ptr()), u.step, u.multiplier,
                     layout.batch, layout.classes, layout.inner, options.ignore_index,
                     options.label_smoothing, static_cast<T*>(grad.data_ptr()), stream_of(x));
#endif
                 return;
               }
               dispatch_index(t.dtype(), "cross_entropy backward", [&]<typename I>() {
                 kernels::cpu::cross_entropy_backward<T, I>(
                     static_cast<const T*>(x.data_ptr()), static_cast<const I*>(t.data_ptr()),
                     static_cast<const acc_t<T>*>(s[2].data_ptr()),
                     static_cast<const acc_t<T>*>(u.values.data_ptr()), u.step, u.multiplier,
                     layout.batch, layout.classes, layout.inner, options.ignore_index,
                     options.label_smoothing, static_cast<T*>(grad.data_ptr()));
               });
             });
             return {grad};
           });
  }
  return out;
}

Tensor nll_loss(const Tensor& log_probs_in, const Tensor& target_in, int64_t ignore_index,
                Reduction reduction, const Tensor& weight) {
  const char* op = "nll_loss";
  if (log_probs_in.defined() && log_probs_in.dim() == 1) {
    Tensor out = nll_loss(log_probs_in.unsqueeze(0), target_in.unsqueeze(0), ignore_index,
                          reduction, weight);
    return reduction == Reduction::none ? out.squeeze(0) : out;
  }
  const Tensor log_probs = autocast_fp32(log_probs_in).contiguous();
  const Tensor target_dense = target_in.contiguous();
  const ClassLayout layout = check_class_inputs(op, log_probs, target_dense, ignore_index);
  const Tensor target = kernel_target(target_dense);
  const DType dtype = log_probs.dtype(), acc = accumulate_dtype(dtype);
  if (weight.defined()) {
    return class_weighted_loss(op, log_probs.to(acc), target, weight, layout, ignore_index, 0.0,
                               reduction, dtype);
  }
  Tensor losses = empty(target.sizes(), TensorOptions(acc, log_probs.device()));
  dispatch_floating(dtype, op, [&]<typename T>() {
    if (log_probs.is_cuda()) {
#if EMBER_WITH_CUDA
      kernels::cuda::nll_forward<T>(
          static_cast<const T*>(log_probs.data_ptr()), target.data<int64_t>(), layout.batch,
          layout.classes, layout.inner, ignore_index, static_cast<acc_t<T>*>(losses.data_ptr()),
          stream_of(log_probs));
#endif
      return;
    }
    dispatch_index(target.dtype(), op, [&]<typename I>() {
      kernels::cpu::nll_forward<T, I>(static_cast<const T*>(log_probs.data_ptr()),
                                      static_cast<const I*>(target.data_ptr()), layout.batch,
                                      layout.classes, layout.inner, ignore_index,
                                      static_cast<acc_t<T>*>(losses.data_ptr()));
    });
  });
  const double count = static_cast<double>(layout.counted);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = reduce_loss(losses, reduction, count, dtype);
  }
  if (any_requires_grad({&log_probs})) {
    const Shape shape = log_probs.sizes();
    record(OpId::nll_loss, {log_probs}, out, {target},
           [layout, shape, dtype, acc, ignore_index, reduction, count](
               const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor& t = s[0];
             const UpstreamGrad u = upstream_grad(g, reduction, acc, count);
             Tensor grad = empty(shape, TensorOptions(dtype, g.device()));
             dispatch_floating(dtype, "nll_loss backward", [&]<typename T>() {
               if (t.is_cuda()) {
#if EMBER_WITH_CUDA
                 kernels::cuda::nll_backward<T>(
                     t.data<int64_t>(), static_cast<const acc_t<T>*>(u.values.data_ptr()), u.step,
                     u.multiplier, layout.batch, layout.classes, layout.inner, ignore_index,
                     static_cast<T*>(grad.data_ptr()), stream_of(t));
#endif
                 return;
               }
               dispatch_index(t.dtype(), "nll_loss backward", [&]<typename I>() {
                 kernels::cpu::nll_backward<T, I>(static_cast<const I*>(t.data_ptr()),
                                                  static_cast<const acc_t<T>*>(u.values.data_ptr()),
                                                  u.step, u.multiplier, layout.batch,
                                                  layout.classes, layout.inner, ignore_index,
                                                  static_cast<T*>(grad.data_ptr()));
               });
             });
             return {grad};
           });
  }
  return out;
}

Tensor mse_loss(const Tensor& input_in, const Tensor& target_in, Reduction reduction) {
  const char* op = "mse_loss";
  check_elementwise_loss(op, input_in, target_in);
  const std::vector<Tensor> both =
      autocast_promote({autocast_fp32(input_in), autocast_fp32(target_in)});
  const DType dtype = promote_types(both[0].dtype(), both[1].dtype());
  const Tensor input = both[0].to(dtype), target = both[1].to(dtype);
  Tensor out, difference;
  {
    NoGradGuard no_grad;
    difference = input - target;
    const Tensor squared = difference * difference;
    out = reduce_loss(squared, reduction, static_cast<double>(input.numel()), dtype);
  }
  if (any_requires_grad({&input, &target})) {
    const int64_t numel = input.numel();
    record(
        OpId::mse_loss, {input, target}, out, {difference},
        [reduction, numel](const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
          // d/dinput (input - target)^2 = 2 (input - target); the target takes the opposite.
          const Tensor grad = s[0] * elementwise_upstream(g, reduction, numel) * 2.0;
          return {grad, -grad};
        });
  }
  return out;
}

Tensor binary_cross_entropy_with_logits(const Tensor& logits_in, const Tensor& target_in,
                                        Reduction reduction, const Tensor& weight_in,
                                        const Tensor& pos_weight_in) {
  const char* op = "binary_cross_entropy_with_logits";
  check_elementwise_loss(op, logits_in, target_in);
  const std::vector<Tensor> both =
      autocast_promote({autocast_fp32(logits_in), autocast_fp32(target_in)});
  const DType dtype = promote_types(both[0].dtype(), both[1].dtype());
  const Tensor logits = both[0].to(dtype), target = both[1].to(dtype);
  const Tensor weight = element_weight(op, "weight", weight_in, logits, dtype);
  const Tensor pos_weight = element_weight(op, "pos_weight", pos_weight_in, logits, dtype);
  Tensor out;
  {
    NoGradGuard no_grad;
    Tensor losses;
    if (pos_weight.defined()) {
      // (1 - t) x + (1 + (p - 1) t) log(1 + exp(-x)): a positive target's term scaled by p.
      losses = (1.0 - target) * logits +
               ((pos_weight - 1.0) * target + 1.0) * softplus_of_negative(logits);
    } else {
      // max(x, 0) - x t + log(1 + exp(-|x|)): exp never overflows.
      losses = relu(logits) - logits * target + log(exp(-abs(logits)) + 1.0);
    }
    if (weight.defined()) losses = losses * weight;
    out = reduce_loss(losses, reduction, static_cast<double>(logits.numel()), dtype);
  }
  if (any_requires_grad({&logits, &target})) {
    const int64_t numel = logits.numel();
    record(OpId::binary_cross_entropy_with_logits, {logits, target}, out, {logits, target},
           [reduction, numel, weight, pos_weight](
               const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor& x = s[0];
             const Tensor& t = s[1];
             Tensor upstream = elementwise_upstream(g, reduction, numel);
             if (weight.defined()) upstream = upstream * weight;
             if (!pos_weight.defined()) return {(sigmoid(x) - t) * upstream, -x * upstream};
             // d/dx: (1 - t) - (1 + (p - 1) t) sigmoid(-x); d/dt: -x + (p - 1) log(1 + exp(-x)).
             const Tensor positive_scale = (pos_weight - 1.0) * t + 1.0;
             return {((1.0 - t) - positive_scale * sigmoid(-x)) * upstream,
                     ((pos_weight - 1.0) * softplus_of_negative(x) - x) * upstream};
           });
  }
  return out;
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* generator) {
  EMBER_CHECK(p >= 0.0 && p <= 1.0, "dropout: probability p must be in [0, 1], got ", p);
  if (!training || p == 0.0) return x;
  EMBER_CHECK(is_floating(x.dtype()), "dropout: expected a floating-point tensor, got ",
              describe(x));
  // Kept elements are scaled by 1 / (1 - p) so the expectation is unchanged; p == 1 keeps none.
  const double scale = p == 1.0 ? 0.0 : 1.0 / (1.0 - p);
  Tensor scaled_mask, out;
  {
    NoGradGuard no_grad;
    const Tensor keep =
        bernoulli(x.sizes(), 1.0 - p, TensorOptions(x.dtype(), x.device()), generator);
    scaled_mask = keep * scale;
    out = x * scaled_mask;
  }
  if (any_requires_grad({&x})) {
    record(OpId::dropout, {x}, out, {scaled_mask},
           [](const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             return {g * s[0]};
           });
  }
  return out;
}

}  // namespace ember
