// matmul, bmm and linear on CUDA against the CPU (OpenBLAS), for every GEMM backend: cuBLAS(Lt)
// and ember's kernels v1, v2, v3 (EMBER_GEMM, kernels/cuda/gemm.h). Odd sizes around the tile
// edges (1, 7, 17, 64, 127, 129, 255; k odd and over several pipeline stages), transposed and
// misaligned operands, batches with and without broadcasting, beta = 1 (linear's bias), and the
// backward passes.
//
// Tolerances: both sides accumulate in f32 (f64 for f64) and round once to the output dtype, so
// they differ by the f32 summation order (tiny next to a 16-bit ulp) plus at most one flip of the
// final rounding: one ulp, 2^-10 relative in f16 and 2^-7 in bf16, inside 2e-3 and 1e-2 of
// |cpu| + 1 (inputs are N(0, 1), so |c| grows like sqrt(k) and no extra sqrt(k) factor is needed).
// f32 outputs are the sums themselves: their tolerance grows with k (CudaGemm::tol).
//
// The backend-name tests run everywhere; the rest skip without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/ops.h"
#include "runtime/ops/linalg.h"
#include "runtime/random.h"
#include "tests/cuda/support.h"

namespace ember::testing {
namespace {

// Selects a backend for a scope (set_cuda_gemm_backend), then returns to EMBER_GEMM.
class BackendGuard {
 public:
  explicit BackendGuard(CudaGemmBackend backend) { set_cuda_gemm_backend(backend); }
  ~BackendGuard() { set_cuda_gemm_backend(std::nullopt); }
  BackendGuard(const BackendGuard&) = delete;
  BackendGuard& operator=(const BackendGuard&) = delete;
};

// mismatch(), after checking that the result is on the GPU: a GEMM that fell back to the host
// would otherwise compare equal.
std::string gpu_mismatch(const Tensor& cuda, const Tensor& cpu, double tol) {
  if (!cuda.is_cuda()) return "the result is not on the GPU: " + describe(cuda);
  return mismatch(cuda, cpu, tol);
}

// N(0, 1) values in `dtype`, on the CPU (the same values go to the GPU with .to(cuda)).
Tensor random_cpu(const Shape& shape, DType dtype, Generator& generator) {
  return randn(shape, DType::f64, &generator).to(dtype);
}

Tensor on_gpu(const Tensor& t) {
  return t.to(Device::cuda(0));
}

// The same view of the same values on both devices: `view` is applied after the move, since a
// copy to the GPU is dense and would lose the strides under test.
struct Both {
  Tensor cpu, gpu;
};
template <typename View>
Both on_both(const Tensor& stored, View view) {
  return {view(stored), view(on_gpu(stored))};
}

// A (rows, cols) operand, stored transposed when `transposed` (a .t() view of a (cols, rows)
// tensor: unit stride along its rows, read by the GEMM with its transpose flag).
Both operand(int64_t rows, int64_t cols, bool transposed, DType dtype, Generator& generator) {
  if (transposed) {
    return on_both(random_cpu({cols, rows}, dtype, generator),
                   [](const Tensor& t) { return t.t(); });
  }
  return on_both(random_cpu({rows, cols}, dtype, generator), [](const Tensor& t) { return t; });
}

struct BackendDtype {
  CudaGemmBackend backend;
  DType dtype;
};

std::string name_of(const ::testing::TestParamInfo<BackendDtype>& info) {
  std::string name =
      std::string(cuda_gemm_backend_name(info.param.backend)) + "_" + dtype_name(info.param.dtype);
  for (char& c : name)
    if (c == '-') c = '_';
  return name;
}

// Every ember version in f16 and bf16; cuBLAS in every floating dtype (f32 and f64 under an ember
// backend would only test cuBLAS again).
std::vector<BackendDtype> all_backends() {
  std::vector<BackendDtype> cases;
  for (DType dtype : {DType::f32, DType::f64, DType::f16, DType::bf16})
    cases.push_back({CudaGemmBackend::cublas, dtype});
  for (CudaGemmBackend backend :
       {CudaGemmBackend::ember, CudaGemmBackend::ember_v1, CudaGemmBackend::ember_v2,
        CudaGemmBackend::ember_v3, CudaGemmBackend::ember_v4}) {
    for (DType dtype : {DType::f16, DType::bf16})
      cases.push_back({backend, dtype});
  }
  return cases;
}

class CudaGemm : public ::testing::TestWithParam<BackendDtype> {
 protected:
  void SetUp() override {
    EMBER_SKIP_WITHOUT_GPU();
    if (!cuda_gemm_backend_available(GetParam().backend)) {
      GTEST_SKIP() << cuda_gemm_backend_name(GetParam().backend)
                   << " does not run here (v2/v3: sm_80+; v4: sm_90 and a build targeting 90)";
    }
    guard_.emplace(GetParam().backend);
  }
  DType dtype() const { return GetParam().dtype; }
  // For products summing k terms. f16/bf16: one rounding of the output, whatever k (see the top
  // of the file). f32: the output is the sum itself, whose rounding error grows with k while an
  // output near 0 gets only tol of room: about 4 k 2^-24 (OpenBLAS against f64 used 2.6 to 3.5
  // of 1e-5 at k = 520 to 1032, 2026-11-27).
  double tol(int64_t k) const {
    const double per_dtype = cuda_tolerance(GetParam().dtype);
    if (GetParam().dtype != DType::f32) return per_dtype;
    return std::max(per_dtype, 2.4e-7 * static_cast<double>(k));
  }

  std::optional<BackendGuard> guard_;
};

// ---- everywhere, GPU or not
// ----------------------------------------------------------------------

TEST(CudaGemmBackendName, EveryNameRoundTrips) {
  for (CudaGemmBackend backend :
       {CudaGemmBackend::cublas, CudaGemmBackend::ember, CudaGemmBackend::ember_v1,
        CudaGemmBackend::ember_v2, CudaGemmBackend::ember_v3, CudaGemmBackend::ember_v4}) {
    EXPECT_EQ(parse_cuda_gemm_backend(cuda_gemm_backend_name(backend)), backend);
  }
}

TEST(CudaGemmBackendName, ABadValueListsTheValidOnes) {
  for (const char* bad : {"cuBLAS", "ember-v9", "", "v3"}) {
    const std::string message = error_of([&] { parse_cuda_gemm_backend(bad); });
    EXPECT_NE(message.find("EMBER_GEMM=" + std::string(bad) + " is not a GEMM backend"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("expected one of cublas, ember, ember-v1, ember-v2, ember-v3, ember-v4"),
              std::string::npos)
        << message;
  }
}

TEST(CudaGemmBackendName, FollowsEmberGemmUnlessOverridden) {
  const char* saved = std::getenv("EMBER_GEMM");
  const std::string previous = saved ? saved : "";
  ::unsetenv("EMBER_GEMM");
  EXPECT_EQ(cuda_gemm_backend(), CudaGemmBackend::cublas);  // the default
  ::setenv("EMBER_GEMM", "ember-v2", 1);
  EXPECT_EQ(cuda_gemm_backend(), CudaGemmBackend::ember_v2);
  {
    BackendGuard guard(CudaGemmBackend::ember_v1);
    EXPECT_EQ(cuda_gemm_backend(), CudaGemmBackend::ember_v1);
  }
  EXPECT_EQ(cuda_gemm_backend(), CudaGemmBackend::ember_v2);
  ::setenv("EMBER_GEMM", "fast", 1);
  const std::string message = error_of([] { cuda_gemm_backend(); });
  EXPECT_NE(message.find("EMBER_GEMM=fast is not a GEMM backend; expected one of cublas"),
            std::string::npos)
      << message;
  if (saved) {
    ::setenv("EMBER_GEMM", previous.c_str(), 1);
  } else {
    ::unsetenv("EMBER_GEMM");
  }
}

TEST(CudaGemmBackendName, Tf32IsOffByDefault) {
  EXPECT_FALSE(matmul_allow_tf32());
  set_matmul_allow_tf32(true);
  EXPECT_TRUE(matmul_allow_tf32());
  set_matmul_allow_tf32(false);
}

// ---- with a GPU --------------------------------------------------------------------------------

TEST_P(CudaGemm, MatmulMatchesTheCpuAtOddSizesAndEveryTransposition) {
  Generator generator(1);
  struct Size {
    int64_t m, n, k;
  };
  // Around v1's 16 and v2/v3's 128 x 128 x 32 tiles; k of 1 to many 32-wide slices (v3's prologue
  // and its ring wrapping around); vectors as matrices.
  const std::vector<Size> sizes = {
      {1, 1, 1},       {7, 7, 7},       {17, 7, 33},     {64, 64, 63}, {127, 129, 65},
      {129, 127, 255}, {255, 255, 129}, {1, 255, 17},    {255, 1, 31}, {64, 17, 1},
      {128, 128, 32},  {256, 256, 97},  {300, 200, 1001}};
  for (const Size& s : sizes) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      const bool trans_a = transposes & 1, trans_b = transposes & 2;
      const Both a = operand(s.m, s.k, trans_a, dtype(), generator);
      const Both b = operand(s.k, s.n, trans_b, dtype(), generator);
      EXPECT_EQ(gpu_mismatch(matmul(a.gpu, b.gpu), matmul(a.cpu, b.cpu), tol(s.k)), "")
          << "m " << s.m << " n " << s.n << " k " << s.k << " trans_a " << trans_a << " trans_b "
          << trans_b;
    }
  }
}

// Operands laid out for v4 (wgmma + TMA: a (m, k) dense, b (n, k) dense and read transposed,
// k a multiple of 8) and for v2/v3's 16-byte cp.async path (leading dims multiples of 8), which
// the odd sizes above seldom reach: k over many 64-wide slices (v4's 4-stage ring wraps, with
// both mbarrier parities; v3's refills), m and n off the 128 tile, more than one wave of blocks,
// batches, beta = 1, and cp.async chunks cut short by an edge. The other backends run the same.
TEST_P(CudaGemm, AlignedOperandsOverManyStagesMatchTheCpu) {
  Generator generator(7);
  struct Size {
    int64_t m, n, k;
  };
  for (const Size& s :
       std::vector<Size>{{8, 8, 8}, {200, 136, 520}, {129, 255, 1032}, {2048, 512, 264}}) {
    for (int transposes = 0; transposes < 4; ++transposes) {
      const Both a = operand(s.m, s.k, transposes & 1, dtype(), generator);
      const Both b = operand(s.k, s.n, transposes & 2, dtype(), generator);
      EXPECT_EQ(gpu_mismatch(matmul(a.gpu, b.gpu), matmul(a.cpu, b.cpu), tol(s.k)), "")
          << "m " << s.m << " n " << s.n << " k " << s.k << " transposes " << transposes;
    }
  }
  // A batch (the TMA map's third coordinate) and beta = 1 (linear's bias), in v4's layout.
  const Tensor p = random_cpu({3, 130, 264}, dtype(), generator);
  const Tensor q = random_cpu({3, 200, 264}, dtype(), generator);
  EXPECT_EQ(
      gpu_mismatch(bmm(on_gpu(p), on_gpu(q).transpose(1, 2)), bmm(p, q.transpose(1, 2)), tol(264)),
      "");
  const Tensor weight = random_cpu({72, 264}, dtype(), generator);
  const Tensor bias = random_cpu({72}, dtype(), generator);
  EXPECT_EQ(gpu_mismatch(linear(on_gpu(p), on_gpu(weight), on_gpu(bias)), linear(p, weight, bias),
                         tol(264)),
            "");
  // Leading dims multiples of 8, but k = 99 and n = 45: the last 16-byte chunk of a row is partial.
  const Both a = on_both(random_cpu({67, 104}, dtype(), generator),
                         [](const Tensor& t) { return t.narrow(1, 0, 99); });
  const Both b = on_both(random_cpu({99, 48}, dtype(), generator),
                         [](const Tensor& t) { return t.narrow(1, 0, 45); });
  EXPECT_EQ(gpu_mismatch(matmul(a.gpu, b.gpu), matmul(a.cpu, b.cpu), tol(99)), "");
}

TEST_P(CudaGemm, MisalignedViewsMatchTheCpu) {
  // Views that start one element in, with odd leading dims: no 16-byte vector loads (ember), and
  // a minimum alignment of 2 bytes (cuBLASLt).
  Generator generator(2);
  const int64_t m = 67, n = 45, k = 99;
  const Both a = on_both(random_cpu({m, k + 3}, dtype(), generator),
                         [&](const Tensor& t) { return t.narrow(1, 1, k); });
  const Both b = on_both(random_cpu({k + 1, n + 1}, dtype(), generator),
                         [&](const Tensor& t) { return t.narrow(0, 1, k).narrow(1, 1, n); });
  EXPECT_EQ(gpu_mismatch(matmul(a.gpu, b.gpu), matmul(a.cpu, b.cpu), tol(k)), "");
  EXPECT_EQ(gpu_mismatch(matmul(b.gpu.t(), a.gpu.t()), matmul(b.cpu.t(), a.cpu.t()), tol(k)), "");
  // A batch of misaligned matrices: the batch stride is odd too.
  const Both x = on_both(random_cpu({3, 17, k + 1}, dtype(), generator),
                         [&](const Tensor& t) { return t.narrow(2, 1, k); });
  const Both y =
      on_both(random_cpu({3, k, 33}, dtype(), generator), [](const Tensor& t) { return t; });
  EXPECT_EQ(gpu_mismatch(bmm(x.gpu, y.gpu), bmm(x.cpu, y.cpu), tol(k)), "");
}

TEST_P(CudaGemm, EmptyInnerDimensionGivesZeros) {
  const Tensor a = zeros({5, 0}, dtype()), b = zeros({0, 3}, dtype());
  EXPECT_EQ(gpu_mismatch(matmul(on_gpu(a), on_gpu(b)), zeros({5, 3}, dtype()), 0.0), "");
  EXPECT_EQ(matmul(on_gpu(zeros({0, 4}, dtype())), on_gpu(zeros({4, 3}, dtype()))).numel(), 0);
}

TEST_P(CudaGemm, BatchedProductsMatchTheCpu) {
  Generator generator(3);
  // bmm, plain and with a transposed operand (strided batch, transpose flag).
  const Tensor a = random_cpu({3, 17, 33}, dtype(), generator);
  const Tensor b = random_cpu({3, 33, 129}, dtype(), generator);
  const Tensor bt = random_cpu({3, 129, 33}, dtype(), generator);
  EXPECT_EQ(gpu_mismatch(bmm(on_gpu(a), on_gpu(b)), bmm(a, b), tol(33)), "");
  EXPECT_EQ(
      gpu_mismatch(bmm(on_gpu(a), on_gpu(bt).transpose(1, 2)), bmm(a, bt.transpose(1, 2)), tol(33)),
      "");
  // matmul with broadcast batch dims: a (2, 1, n, k) against b (3, k, m) over (2, 3) (a's batch
  // offsets repeat unevenly: made dense first), and a batch times one shared matrix (folded into
  // one large product).
  const Tensor x = random_cpu({2, 1, 7, 33}, dtype(), generator);
  const Tensor y = random_cpu({3, 33, 65}, dtype(), generator);
  EXPECT_EQ(gpu_mismatch(matmul(on_gpu(x), on_gpu(y)), matmul(x, y), tol(33)), "");
  const Tensor w = random_cpu({33, 65}, dtype(), generator);
  EXPECT_EQ(gpu_mismatch(matmul(on_gpu(x), on_gpu(w)), matmul(x, w), tol(33)), "");
  EXPECT_EQ(gpu_mismatch(matmul(on_gpu(w).t(), on_gpu(y).transpose(1, 2).transpose(1, 2)),
                         matmul(w.t(), y), tol(33)),
            "");
  // Vectors.
  const Tensor v = random_cpu({33}, dtype(), generator);
  EXPECT_EQ(gpu_mismatch(matmul(on_gpu(v), on_gpu(y)), matmul(v, y), tol(33)), "");
  EXPECT_EQ(gpu_mismatch(matmul(on_gpu(x), on_gpu(v)), matmul(x, v), tol(33)), "");
  EXPECT_EQ(gpu_mismatch(matmul(on_gpu(v), on_gpu(v)), matmul(v, v), tol(33)), "");
}

TEST_P(CudaGemm, LinearWithBiasMatchesTheCpu) {
  Generator generator(4);
  // The bias is copied into the output first and the product accumulated onto it (beta = 1).
  for (const Shape& x_shape : {Shape{5, 127}, Shape{2, 3, 127}, Shape{127}, Shape{129, 127}}) {
    const Tensor x = random_cpu(x_shape, dtype(), generator);
    const Tensor weight = random_cpu({65, 127}, dtype(), generator);
    const Tensor bias = random_cpu({65}, dtype(), generator);
    EXPECT_EQ(gpu_mismatch(linear(on_gpu(x), on_gpu(weight), on_gpu(bias)), linear(x, weight, bias),
                           tol(127)),
              "")
        << shape_str(x_shape);
    EXPECT_EQ(gpu_mismatch(linear(on_gpu(x), on_gpu(weight)), linear(x, weight), tol(127)), "")
        << shape_str(x_shape);
  }
}

// The gradients of sum(f(inputs) * weights) on both devices: weights fixed and distinct, so
// a gradient sent to the wrong input cannot pass.
std::vector<Tensor> gradients(const std::vector<Tensor>& inputs,
                              const std::function<Tensor(const std::vector<Tensor>&)>& f,
                              const Tensor& weights) {
  std::vector<Tensor> leaves;
  for (const Tensor& input : inputs) {
    Tensor leaf = input.detach();
    leaf.requires_grad_(true);
    leaves.push_back(leaf);
  }
  const Tensor y = f(leaves);
  sum(y * weights.to(y.device())).backward();
  std::vector<Tensor> grads;
  for (const Tensor& leaf : leaves)
    grads.push_back(leaf.grad());
  return grads;
}

TEST_P(CudaGemm, BackwardMatchesTheCpu) {
  Generator generator(5);
  struct Case {
    std::string name;
    std::vector<Tensor> inputs;
    std::function<Tensor(const std::vector<Tensor>&)> f;
  };
  const std::vector<Case> cases = {
      {"matmul 2d",
       {random_cpu({17, 33}, dtype(), generator), random_cpu({33, 65}, dtype(), generator)},
       [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }},
      {"matmul transposed",
       {random_cpu({17, 33}, dtype(), generator), random_cpu({65, 33}, dtype(), generator)},
       [](const std::vector<Tensor>& in) { return matmul(in[0], in[1].t()); }},
      {"matmul broadcast batch",
       {random_cpu({2, 1, 7, 33}, dtype(), generator), random_cpu({3, 33, 9}, dtype(), generator)},
       [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }},
      {"matmul batch times matrix",
       {random_cpu({4, 7, 33}, dtype(), generator), random_cpu({33, 9}, dtype(), generator)},
       [](const std::vector<Tensor>& in) { return matmul(in[0], in[1]); }},
      {"bmm",
       {random_cpu({3, 17, 33}, dtype(), generator), random_cpu({3, 33, 9}, dtype(), generator)},
       [](const std::vector<Tensor>& in) { return bmm(in[0], in[1]); }},
      {"linear with bias",
       {random_cpu({2, 5, 127}, dtype(), generator), random_cpu({65, 127}, dtype(), generator),
        random_cpu({65}, dtype(), generator)},
       [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); }},
  };
  for (const Case& c : cases) {
    const Tensor probe = c.f(c.inputs);
    const Tensor weights = random_cpu(probe.sizes(), dtype(), generator);
    std::vector<Tensor> gpu_inputs;
    for (const Tensor& input : c.inputs)
      gpu_inputs.push_back(on_gpu(input));
    const std::vector<Tensor> cpu = gradients(c.inputs, c.f, weights);
    const std::vector<Tensor> gpu = gradients(gpu_inputs, c.f, weights);
    for (size_t i = 0; i < cpu.size(); ++i) {
      // Gradients go through one more rounded product (g @ b^T): twice the forward tolerance (for
      // the longest sum here, 127 terms).
      EXPECT_EQ(gpu_mismatch(gpu[i], cpu[i], 2 * tol(128)), "") << c.name << ", input " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, CudaGemm, ::testing::ValuesIn(all_backends()), name_of);

TEST(CudaGemmOnly, Tf32WhenAllowedStaysClose) {
  EMBER_SKIP_WITHOUT_GPU();
  Generator generator(6);
  const Tensor a = random_cpu({129, 255}, DType::f32, generator);
  const Tensor b = random_cpu({255, 127}, DType::f32, generator);
  // A process-wide switch: put back even when the product throws, or every later f32 test runs
  // with TF32.
  struct AllowTf32 {
    AllowTf32() { set_matmul_allow_tf32(true); }
    ~AllowTf32() { set_matmul_allow_tf32(false); }
  };
  Tensor tf32;
  {
    const AllowTf32 allowed;
    tf32 = matmul(on_gpu(a), on_gpu(b));
  }
  // TF32 keeps 10 mantissa bits: about 2^-11 relative per product, sqrt(k) of them adding up,
  // about 6e-3 per standard deviation at k = 255, while an output near 0 has 1 of room: 3e-2
  // (a host emulation used 0.38 to 0.43 of it; 1e-2 would have failed).
  EXPECT_EQ(gpu_mismatch(tf32, matmul(a, b), 3e-2), "");
  EXPECT_EQ(gpu_mismatch(matmul(on_gpu(a), on_gpu(b)), matmul(a, b), 2.4e-7 * 255), "");
}

TEST(CudaGemmOnly, OperandsOnDifferentDevicesAreAnError) {
  EMBER_SKIP_WITHOUT_GPU();
  const Tensor cpu = ones({2, 3});
  const Tensor gpu = on_gpu(ones({3, 4}));
  for (const std::string& message : {error_of([&] { matmul(cpu, gpu); }),
                                     error_of([&] { bmm(cpu.unsqueeze(0), gpu.unsqueeze(0)); }),
                                     error_of([&] { linear(on_gpu(cpu), gpu.t(), ones({4})); })}) {
    EXPECT_NE(message.find("expected all tensors on the same device"), std::string::npos)
        << message;
    EXPECT_NE(message.find("cuda:0"), std::string::npos) << message;
  }
}

}  // namespace
}  // namespace ember::testing
