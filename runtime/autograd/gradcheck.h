// Finite-difference gradient checking in f64.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace ember {

struct GradcheckOptions {
  double eps = 1e-6;  // central-difference step
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool ok = true;
  std::string message;  // the first mismatch: input, element, analytic vs numeric
};

// `fn` maps the inputs to one output tensor. Inputs with requires_grad are checked: the analytic
// Jacobian-vector product (backward of a random cotangent) against central differences.
// All inputs that require grad must be f64.
GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options = {});

}  // namespace ember
