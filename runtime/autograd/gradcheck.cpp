// Gradient checking: the backward of a random cotangent v (analytic v^T J) against central
// differences of <v, f(x)> for every element of every input that requires grad.
#include "runtime/autograd/gradcheck.h"

#include <cmath>
#include <sstream>

#include "runtime/autograd/grad_mode.h"
#include "runtime/ops.h"

namespace ember {
namespace {

// Deterministic cotangent values in [-1, 1): gradcheck must not depend on the global RNG.
std::vector<double> cotangent_values(int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  uint64_t state = 0x9E3779B97F4A7C15ull;
  for (auto& x : v) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<double>(state >> 11) * (1.0 / 9007199254740992.0) * 2.0 - 1.0;
  }
  return v;
}

// The address of flat element `index` (row-major over the sizes) of a strided f64 tensor.
double* element(const Tensor& t, int64_t index) {
  int64_t offset = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    const int64_t size = t.sizes()[d];
    offset += (index % size) * t.strides()[d];
    index /= size;
  }
  return static_cast<double*>(t.data_ptr()) + offset;
}

double dot(const Tensor& output, const Tensor& v) {
  return sum(mul(output.to(DType::f64), v)).item<double>();
}

}  // namespace

GradcheckResult gradcheck(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                          const std::vector<Tensor>& inputs, GradcheckOptions options) {
  GradcheckResult result;
  for (const Tensor& input : inputs) {
    if (input.defined() && input.requires_grad()) {
      EMBER_CHECK(input.dtype() == DType::f64 && input.is_cpu() && input.is_leaf(),
                  "gradcheck: inputs that require grad must be f64 CPU leaves, got ",
                  describe(input));
    }
  }
  // Analytic: backward of v.
  for (const Tensor& input : inputs) {
    if (input.defined() && input.requires_grad()) input.set_grad(Tensor());
  }
  Tensor output = fn(inputs);
  EMBER_CHECK(output.requires_grad(), "gradcheck: the output does not require grad");
  const Tensor v = from_vector(cotangent_values(output.numel()), output.sizes(), DType::f64);
  output.backward(v.to(output.dtype()));

  NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (!input.defined() || !input.requires_grad()) continue;
    const Tensor analytic = input.grad().defined() ? input.grad() : zeros_like(input);
    for (int64_t j = 0; j < input.numel(); ++j) {
      double* x = element(input, j);
      const double original = *x;
      *x = original + options.eps;
      const double plus = dot(fn(inputs), v);
      *x = original - options.eps;
      const double minus = dot(fn(inputs), v);
      *x = original;
      const double numeric = (plus - minus) / (2 * options.eps);
      const double exact = *element(analytic, j);
      if (!(std::fabs(exact - numeric) <= options.atol + options.rtol * std::fabs(numeric))) {
        std::ostringstream message;
        message.precision(10);
        message << "input " << i << " " << describe(input) << ", element " << j
                << ": analytic gradient " << exact << " vs numeric " << numeric;
        result.ok = false;
        result.message = message.str();
        return result;
      }
    }
  }
  return result;
}

}  // namespace ember
