// Every op that records an autograd node, in one list.
//
// A node can only be created with an OpId from this list, and tests/runtime/gradcheck_test.cpp
// walks the list: an op added here without a finite-difference gradient check fails the suite.
#pragma once

#include <cstddef>

// X(name): the op's name as users see it in errors ("saved by mul").
#define EMBER_DIFFERENTIABLE_OPS(X)     \
  /* elementwise, unary */              \
  X(neg)                                \
  X(abs)                                \
  X(sign)                               \
  X(exp)                                \
  X(log)                                \
  X(sqrt)                               \
  X(rsqrt)                              \
  X(sin)                                \
  X(cos)                                \
  X(tanh)                               \
  X(sigmoid)                            \
  X(relu)                               \
  X(gelu)                               \
  X(silu)                               \
  X(pow_scalar)                         \
  X(clamp)                              \
  X(erf)                                \
  X(log1p)                              \
  X(expm1)                              \
  X(leaky_relu)                         \
  X(reciprocal)                         \
  /* elementwise, binary */             \
  X(add)                                \
  X(sub)                                \
  X(mul)                                \
  X(div)                                \
  X(pow)                                \
  X(maximum)                            \
  X(minimum)                            \
  X(where)                              \
  X(masked_fill)                        \
  /* reductions */                      \
  X(sum)                                \
  X(mean)                               \
  X(max)                                \
  X(min)                                \
  X(var)                                \
  X(std)                                \
  X(logsumexp)                          \
  X(norm)                               \
  /* normalisation and activations */   \
  X(softmax)                            \
  X(log_softmax)                        \
  X(layer_norm)                         \
  X(batch_norm)                         \
  X(batch_norm_relu)                    \
  X(dropout)                            \
  /* linear algebra and convolution */  \
  X(matmul)                             \
  X(bmm)                                \
  X(linear)                             \
  X(conv2d)                             \
  X(max_pool2d)                         \
  X(avg_pool2d)                         \
  X(adaptive_avg_pool2d)                \
  /* losses */                          \
  X(cross_entropy)                      \
  X(nll_loss)                           \
  X(mse_loss)                           \
  X(binary_cross_entropy_with_logits)   \
  X(embedding)                          \
  /* shapes, views, indexing, copies */ \
  X(reshape)                            \
  X(permute)                            \
  X(expand)                             \
  X(slice)                              \
  X(select)                             \
  X(split)                              \
  X(cat)                                \
  X(index_select)                       \
  X(gather)                             \
  X(scatter_add)                        \
  X(pad)                                \
  X(to_dtype)                           \
  X(to_device)                          \
  X(clone)

namespace ember {

enum class OpId {
#define EMBER_OP_ENUM(name) name,
  EMBER_DIFFERENTIABLE_OPS(EMBER_OP_ENUM)
#undef EMBER_OP_ENUM
      accumulate_grad,  // the leaf sink, not an op: not gradient-checked
  custom,               // a node defined above runtime/ (DataParallel, SyncBatchNorm), named by
                        // its maker and gradient-checked by its own tests
};

inline constexpr const char* kOpNames[] = {
#define EMBER_OP_NAME(name) #name,
    EMBER_DIFFERENTIABLE_OPS(EMBER_OP_NAME)
#undef EMBER_OP_NAME
        "accumulate_grad",
    "custom",
};

inline constexpr size_t kNumDifferentiableOps = static_cast<size_t>(OpId::accumulate_grad);

inline const char* op_name(OpId op) {
  return kOpNames[static_cast<size_t>(op)];
}

}  // namespace ember
