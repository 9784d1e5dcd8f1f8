// Losses, dropout. Under autocast the losses run in f32.
#pragma once

#include <cstdint>

#include "runtime/random.h"
#include "runtime/tensor.h"

namespace ember {

enum class Reduction { none, mean, sum };

struct CrossEntropyOptions {
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
  Reduction reduction = Reduction::mean;
  Tensor weight{};  // optional (C): each class's loss scaled by its weight, as PyTorch's weight
};

// One fused log-softmax + NLL. logits (N, C) or (N, C, d...), target (N) or (N, d...) of class
// indices (i64/i32). mean: over the targets that are not ignore_index, as PyTorch; with a class
// weight, divided by the sum of the targets' weights instead (and composed of ember ops, not
// fused). A floating-point target of the logits' shape holds class probabilities instead, as in
// PyTorch: -sum_c weight[c] target[c] log_softmax(logits)[c] per position, mean over positions;
// composed of ember ops, and the target gets a gradient too.
Tensor cross_entropy(const Tensor& logits, const Tensor& target,
                     const CrossEntropyOptions& options = {});
// log_probs (N, C) or (N, C, d...), target as above; weight (C) optional, as for cross_entropy.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index = -100,
                Reduction reduction = Reduction::mean, const Tensor& weight = Tensor());
Tensor mse_loss(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::mean);
// Numerically stable: max(x, 0) - x t + log(1 + exp(-|x|)). weight and pos_weight are optional
// and broadcast to the logits' shape (pos_weight (C) for logits (N, C): one per class), as
// PyTorch's: loss = weight [(1 - t) x + (1 + (pos_weight - 1) t) log(1 + exp(-x))]. mean averages
// over every element. Neither weight gets a gradient.
Tensor binary_cross_entropy_with_logits(const Tensor& logits, const Tensor& target,
                                        Reduction reduction = Reduction::mean,
                                        const Tensor& weight = Tensor(),
                                        const Tensor& pos_weight = Tensor());

// Zeroes each element with probability p and scales the rest by 1 / (1 - p); identity when not
// training or p == 0. The mask comes from `generator` (the default generator when null).
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* generator = nullptr);

}  // namespace ember
