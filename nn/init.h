// Parameter initialisation, as torch.nn.init. Every function fills `t` in place, without autograd.
#pragma once

#include "runtime/random.h"
#include "runtime/tensor.h"

namespace ember::nn::init {

// (fan_in, fan_out) of a weight: (out, in) for linear, (K, C, R, S) for conv (times R*S).
std::pair<int64_t, int64_t> fans(const Tensor& weight);

void uniform_(Tensor& t, double low, double high, Generator* generator = nullptr);
void normal_(Tensor& t, double mean, double std, Generator* generator = nullptr);
void zeros_(Tensor& t);
void ones_(Tensor& t);
// U(-b, b) with b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)): PyTorch's
// kaiming_uniform_ (leaky_relu). nn.Linear and nn.Conv2d use a = sqrt(5), so b = 1/sqrt(fan_in).
void kaiming_uniform_(Tensor& t, double a = 0.0, Generator* generator = nullptr);

}  // namespace ember::nn::init
