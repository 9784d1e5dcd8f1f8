// One function run on the CPU and on CUDA from the same host inputs, forward and backward: its
// outputs and the gradients of the inputs it differentiates must agree.
//
//   expect_same_forward_and_backward("softmax of " + describe(x),
//                                    [](const Inputs& in) { return softmax(in[0], -1); }, {x},
//                                    {true});
//
// Header-only; compiles in every build (with or without CUDA). Callers skip without a GPU first.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/ops.h"
#include "tests/common/op_cases.h"
#include "tests/cuda/support.h"

namespace ember::testing {

using Inputs = std::vector<Tensor>;
using Fn = std::function<Tensor(const Inputs&)>;

// fn's output and the gradients of the inputs marked in `wants_grad`, with the host inputs
// copied to `device` and distinct_weights(out) as the cotangent (no backward when the output
// needs no gradient).
struct Run {
  Tensor out;
  std::vector<Tensor> grads;
};

// The cotangent for an output: distinct_weights unless a test passes its own (made on the host,
// from the output's shape and dtype, so that both devices get the same values).
using Cotangent = std::function<Tensor(const Tensor& out)>;

inline Run run_on(Device device, const Fn& fn, const Inputs& host_inputs,
                  const std::vector<bool>& wants_grad, const Cotangent& cotangent = {}) {
  Inputs inputs;
  for (size_t i = 0; i < host_inputs.size(); ++i) {
    // A fresh leaf on each device (to() returns the same tensor when it is already there).
    Tensor t = host_inputs[i].to(device).clone();
    if (wants_grad[i]) t.requires_grad_(true);
    inputs.push_back(t);
  }
  Run run;
  run.out = fn(inputs);
  if (run.out.requires_grad())
    run.out.backward(cotangent ? cotangent(run.out).to(device) : distinct_weights(run.out));
  for (size_t i = 0; i < inputs.size(); ++i)
    run.grads.push_back(wants_grad[i] ? inputs[i].grad() : Tensor());
  return run;
}

// fn on the CPU and on CUDA: the outputs, and each wanted gradient, agree within
// cuda_tolerance(dtype of the output) x tolerance_scale. `cotangent` as in run_on.
inline void expect_same_forward_and_backward(const std::string& what, const Fn& fn,
                                             const Inputs& host_inputs,
                                             const std::vector<bool>& wants_grad,
                                             double tolerance_scale = 1.0,
                                             const Cotangent& cotangent = {}) {
  const Run cpu = run_on(Device::cpu(), fn, host_inputs, wants_grad, cotangent);
  const Run cuda = run_on(Device::cuda(0), fn, host_inputs, wants_grad, cotangent);
  ASSERT_TRUE(cuda.out.is_cuda()) << what;
  const double tol = cuda_tolerance(cpu.out.dtype()) * tolerance_scale;
  std::string error = mismatch(cuda.out, cpu.out, tol);
  EXPECT_TRUE(error.empty()) << what << ", forward: " << error;
  for (size_t i = 0; i < host_inputs.size(); ++i) {
    if (!wants_grad[i]) continue;
    ASSERT_TRUE(cpu.grads[i].defined()) << what << ": no CPU gradient for input " << i;
    ASSERT_TRUE(cuda.grads[i].defined()) << what << ": no CUDA gradient for input " << i;
    EXPECT_TRUE(cuda.grads[i].is_cuda()) << what << ": gradient " << i << " on the host";
    error = mismatch(cuda.grads[i], cpu.grads[i], tol);
    EXPECT_TRUE(error.empty()) << what << ", gradient of input " << i << ": " << error;
  }
}

}  // namespace ember::testing
