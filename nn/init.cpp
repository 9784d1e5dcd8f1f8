#include "nn/init.h"

#include <cmath>

#include "runtime/ops.h"

namespace ember::nn::init {

std::pair<int64_t, int64_t> fans(const Tensor& weight) {
  EMBER_CHECK(weight.dim() >= 2, "init: fan in and fan out need a weight of at least 2 dims, got ",
              describe(weight));
  int64_t receptive = 1;
  for (int64_t d = 2; d < weight.dim(); ++d)
    receptive *= weight.size(d);
  return {weight.size(1) * receptive, weight.size(0) * receptive};
}

void uniform_(Tensor& t, double low, double high, Generator* generator) {
  NoGradGuard no_grad;
  ember::uniform_(t, low, high, generator);
}

void normal_(Tensor& t, double mean, double std, Generator* generator) {
  NoGradGuard no_grad;
  ember::normal_(t, mean, std, generator);
}

void zeros_(Tensor& t) {
  NoGradGuard no_grad;
  t.zero_();
}

void ones_(Tensor& t) {
  NoGradGuard no_grad;
  t.fill_(1.0);
}

void kaiming_uniform_(Tensor& t, double a, Generator* generator) {
  const double gain = std::sqrt(2.0 / (1.0 + a * a));
  const double bound = gain * std::sqrt(3.0 / static_cast<double>(fans(t).first));
  init::uniform_(t, -bound, bound, generator);
}

}  // namespace ember::nn::init
