// The f32 activations (vectorisable tanh/exp) against f64 libm over a dense sweep with the special
// values, and the fused activation backward kernels against the ember-op formulas they replace.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "runtime/ops.h"
#include "tests/common/op_cases.h"

namespace ember::testing {
namespace {

struct ForwardCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> reference;  // f64, on libm
};

double sigmoid_ref(double x) {
  return 1.0 / (1.0 + std::exp(-x));
}

// 0.5 x (1 + tanh z) written as x sigmoid(2z): the same function, without the f64 cancellation
// of 1 + tanh(z) for very negative x, so that the reference stays relatively accurate there.
double gelu_tanh_ref(double x) {
  const double z = 0.79788456080286535588 * (x + 0.044715 * x * x * x);
  return x * sigmoid_ref(2.0 * z);
}

std::vector<ForwardCase> forward_cases() {
  return {
      {"tanh", [](const Tensor& x) { return tanh(x); }, [](double x) { return std::tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); }, sigmoid_ref},
      {"silu", [](const Tensor& x) { return silu(x); },
       [](double x) { return x * sigmoid_ref(x); }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); },
       gelu_tanh_ref},
      // x Phi(x), Phi by erfc: accurate in the negative tail, where 1 + erf cancels.
      {"gelu_erf", [](const Tensor& x) { return gelu(x); },
       [](double x) { return 0.5 * x * std::erfc(-x * 0.70710678118654752440); }},
  };
}

// -100 .. 100 in steps of 1/512, a log sweep of tiny and huge magnitudes, and the specials.
std::vector<float> sweep_values() {
  std::vector<float> values;
  for (int i = -51200; i <= 51200; ++i)
    values.push_back(static_cast<float>(i) / 512.0f);
  for (double m = 1e-30; m < 1e30; m *= 1.7) {
    values.push_back(static_cast<float>(m));
    values.push_back(static_cast<float>(-m));
  }
  for (float special :
       {0.0f, -0.0f, 1e-45f, -1e-45f, 3e38f, -3e38f, 88.5f, -88.5f, 87.4f, -87.4f,
        std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
        std::numeric_limits<float>::quiet_NaN()})
    values.push_back(special);
  return values;
}

// got matches the f64 value within `relative` of it (below 1e-30 in magnitude: within 1e-30, the
// flush-to-zero region of the f32 exp), with NaN and infinities matched exactly.
bool close_to(double got, double want, double relative) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= relative * std::abs(want) + 1e-30;
}

TEST(Activations, F32ForwardMatchesLibmOverDenseSweep) {
  const std::vector<float> values = sweep_values();
  const Tensor x = from_vector(values, {static_cast<int64_t>(values.size())});
  for (const ForwardCase& c : forward_cases()) {
    const std::vector<float> got = to_vector<float>(c.op(x));
    int failures = 0;
    for (size_t i = 0; i < values.size(); ++i) {
      const double want = c.reference(static_cast<double>(values[i]));
      // gelu's exp argument 2z is rounded in f32: in the far negative tail (|gelu| < 1e-20) that
      // costs ~|2z| ulp, still far better than 1 + tanh(z), which cancels to 0 there. Likewise
      // erfc's argument z = -x / sqrt 2: erfc'(z) / erfc(z) ~ -2z, so half an ulp of z costs
      // ~x^2 / 2 ulp of the result (x = -10: 50 ulp, where 1 + erf gives 0).
      const double x = values[i];
      double tail = 0;
      if (c.name == "gelu_tanh") tail = 2e-7 * std::abs(1.6 * (x + 0.045 * x * x * x));
      if (c.name == "gelu_erf") tail = 1.2e-7 * x * x;
      if (close_to(got[i], want, 1e-6 + tail)) continue;
      if (++failures <= 10)
        ADD_FAILURE() << c.name << "(" << values[i] << "): got " << got[i] << ", want " << want;
    }
    EXPECT_EQ(failures, 0) << c.name;
  }
}

TEST(Activations, SaturationAndSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = from_vector(std::vector<float>{-inf, inf, -1e4f, 1e4f, 0.0f}, {5});
  EXPECT_EQ(to_vector<float>(tanh(x)), (std::vector<float>{-1, 1, -1, 1, 0}));
  EXPECT_EQ(to_vector<float>(sigmoid(x)), (std::vector<float>{0, 1, 0, 1, 0.5f}));
  const std::vector<float> gelu_values = to_vector<float>(gelu(x, GeluApproximation::tanh));
  EXPECT_EQ(gelu_values[1], inf);
  EXPECT_EQ(gelu_values[2], 0.0f);
  EXPECT_EQ(gelu_values[3], 1e4f);
  const std::vector<float> silu_values = to_vector<float>(silu(x));
  EXPECT_EQ(silu_values[1], inf);
  EXPECT_EQ(silu_values[3], 1e4f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor n = from_vector(std::vector<float>{nan}, {1});
  for (const ForwardCase& c : forward_cases())
    EXPECT_TRUE(std::isnan(to_vector<float>(c.op(n))[0])) << c.name;
}

TEST(Activations, F64ForwardIsLibm) {
  const Tensor x = linspace(-20.0, 20.0, 4001, TensorOptions(DType::f64));
  const std::vector<double> xs = to_vector<double>(x);
  const std::vector<double> t = to_vector<double>(tanh(x));
  const std::vector<double> s = to_vector<double>(sigmoid(x));
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_EQ(t[i], std::tanh(xs[i]));
    EXPECT_EQ(s[i], 1.0 / (1.0 + std::exp(-xs[i])));
  }
}

TEST(Activations, SixteenBitAndStridedForwardMatchF32) {
  Generator generator(7);
  const Tensor base = uniform({33, 70}, -8.0, 8.0, TensorOptions(DType::f32), &generator);
  for (const ForwardCase& c : forward_cases()) {
    // Strided f32 (a transpose) goes through the chunked path: the same values.
    const Tensor strided = base.transpose(0, 1);
    EXPECT_EQ(to_vector<float>(c.op(strided)), to_vector<float>(c.op(strided.contiguous())))
        << c.name;
    for (DType dtype : {DType::f16, DType::bf16}) {
      const Tensor x = base.to(dtype);
      const std::vector<double> xs = to_vector<double>(x);
      const std::vector<double> got = to_vector<double>(c.op(x).to(DType::f64));
      const double tolerance = dtype == DType::bf16 ? 1e-2 : 2e-3;
      for (size_t i = 0; i < xs.size(); ++i) {
        const double want = c.reference(xs[i]);
        ASSERT_LE(std::abs(got[i] - want), tolerance * std::abs(want) + 1e-4)
            << c.name << " " << dtype_name(dtype) << " at " << xs[i];
      }
    }
  }
}

// The backward formulas the fused kernels replace, in ember ops (as runtime/ops/elementwise.cpp
// writes them for CUDA tensors).
struct BackwardCase {
  std::string name;
  std::function<Tensor(const Tensor&)> op;
  std::function<Tensor(const Tensor& g, const Tensor& x, const Tensor& y)> formula;
};

std::vector<BackwardCase> backward_cases() {
  return {
      {"relu", [](const Tensor& x) { return relu(x); },
       [](const Tensor& g, const Tensor&, const Tensor& y) { return g * gt(y, 0).to(g.dtype()); }},
      {"gelu_erf", [](const Tensor& x) { return gelu(x); },
       [](const Tensor& g, const Tensor& in, const Tensor&) {
         const Tensor cdf = (erf(in * 0.70710678118654752440) + 1.0) * 0.5;
         const Tensor pdf = exp(in * in * (-0.5)) * 0.39894228040143267794;
         return g * (cdf + in * pdf);
       }},
      {"gelu_tanh", [](const Tensor& x) { return gelu(x, GeluApproximation::tanh); },
       [](const Tensor& g, const Tensor& in, const Tensor&) {
         constexpr double k = 0.79788456080286535588, c = 0.044715;
         const Tensor x2 = in * in;
         const Tensor t = tanh((in + in * x2 * c) * k);
         const Tensor dinner = (x2 * (3.0 * c) + 1.0) * k;
         return g * ((t + 1.0) * 0.5 + in * (1.0 - t * t) * dinner * 0.5);
       }},
      {"silu", [](const Tensor& x) { return silu(x); },
       [](const Tensor& g, const Tensor& in, const Tensor&) {
         const Tensor s = sigmoid(in);
         return g * s * (in * (1.0 - s) + 1.0);
       }},
      {"sigmoid", [](const Tensor& x) { return sigmoid(x); },
       [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y * (1.0 - y); }},
      {"tanh", [](const Tensor& x) { return tanh(x); },
       [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (1.0 - y * y); }},
  };
}

double tolerance_for(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return 1e-12;
    case DType::f32:
      return 2e-6;
    case DType::f16:
      return 4e-3;
    default:
      return 3e-2;
  }
}

// x.grad of sum(op(x) * g) from autograd (the fused kernel), against the ember-op formula in f64
// on the same (dtype-rounded) values. The error bound grows with the largest gradient: the sigmoid
// and tanh kernels read the rounded y, whose 1 - y loses digits next to 1, as PyTorch's do.
void check_backward(const BackwardCase& c, const Tensor& x_in, const Tensor& g,
                    const std::string& what) {
  Tensor x = x_in.detach().requires_grad_();
  const Tensor y = c.op(x);
  y.backward(g);
  const std::vector<double> got = to_vector<double>(x.grad().to(DType::f64));
  const Tensor x64 = x_in.detach().to(DType::f64);
  const Tensor want_t = c.formula(g.to(DType::f64), x64, c.op(x64));
  const std::vector<double> want = to_vector<double>(want_t);
  ASSERT_EQ(got.size(), want.size());
  double scale = 0;
  for (double w : want)
    scale = std::max(scale, std::abs(w));
  const double tolerance = tolerance_for(x_in.dtype());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_LE(std::abs(got[i] - want[i]), tolerance * (std::abs(want[i]) + scale))
        << what << " at " << i << ": got " << got[i] << ", want " << want[i];
}

TEST(Activations, FusedBackwardMatchesOpFormula) {
  for (const BackwardCase& c : backward_cases()) {
    for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16}) {
      Generator generator(11);
      const Tensor x =
          uniform({37, 29}, -5.0, 5.0, TensorOptions(DType::f64), &generator).to(dtype);
      const Tensor g =
          uniform({37, 29}, -2.0, 2.0, TensorOptions(DType::f64), &generator).to(dtype);
      const std::string what = c.name + " " + dtype_name(dtype);
      check_backward(c, x, g, what + " dense");
      // Strided x (a transpose) and strided g (every other element of a wider buffer).
      const Tensor xt =
          uniform({29, 37}, -5.0, 5.0, TensorOptions(DType::f64), &generator).to(dtype);
      check_backward(c, xt.transpose(0, 1), strided_copy(g), what + " strided");
      // A broadcast gradient (stride 0), as sum's backward hands over.
      check_backward(c, x, scalar_tensor(1.5, TensorOptions(dtype)).expand({37, 29}),
                     what + " broadcast");
    }
  }
}

// Also the f32 gradient itself is accurate, not only close to the f32 op chain.
TEST(Activations, F32FusedBackwardOverWideRange) {
  for (const BackwardCase& c : backward_cases()) {
    const Tensor x = linspace(-30.0, 30.0, 6001, TensorOptions(DType::f32));
    const Tensor g = full({6001}, 1.0, TensorOptions(DType::f32));
    check_backward(c, x, g, c.name + " wide");
  }
}

}  // namespace
}  // namespace ember::testing
