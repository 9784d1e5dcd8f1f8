// Matrix products: shape rules, the BLAS layout of each operand, autograd.
#include "runtime/ops/linalg.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "runtime/autocast.h"
#include "runtime/autograd/engine.h"
#include "runtime/autograd/grad_mode.h"
#include "runtime/autograd/node.h"
#include "runtime/dispatch.h"
#include "runtime/ops.h"
#include "runtime/ops/layout.h"

#if EMBER_WITH_CUDA
#include "kernels/cuda/gemm.h"
#include "runtime/cuda/device_guard.h"
#include "runtime/cuda/stream.h"
#endif

namespace ember {

// ---- CUDA backend choice
// --------------------------------------------------------------------------

namespace {

constexpr std::array<CudaGemmBackend, 6> kCudaGemmBackends = {
    CudaGemmBackend::cublas,   CudaGemmBackend::ember,    CudaGemmBackend::ember_v1,
    CudaGemmBackend::ember_v2, CudaGemmBackend::ember_v3, CudaGemmBackend::ember_v4};

std::atomic<int> backend_override{-1};  // -1: follow EMBER_GEMM
std::atomic<bool> allow_tf32{false};

}  // namespace

const char* cuda_gemm_backend_name(CudaGemmBackend backend) {
  switch (backend) {
    case CudaGemmBackend::cublas:
      return "cublas";
    case CudaGemmBackend::ember:
      return "ember";
    case CudaGemmBackend::ember_v1:
      return "ember-v1";
    case CudaGemmBackend::ember_v2:
      return "ember-v2";
    case CudaGemmBackend::ember_v3:
      return "ember-v3";
    case CudaGemmBackend::ember_v4:
      return "ember-v4";
  }
  return "?";
}

CudaGemmBackend parse_cuda_gemm_backend(std::string_view name) {
  std::string valid;
  for (CudaGemmBackend backend : kCudaGemmBackends) {
    if (name == cuda_gemm_backend_name(backend)) return backend;
    valid += valid.empty() ? "" : ", ";
    valid += cuda_gemm_backend_name(backend);
  }
  EMBER_FAIL("EMBER_GEMM=", std::string(name), " is not a GEMM backend; expected one of ", valid,
             " (ember's own kernels cover f16 and bf16; f32 and f64 always use cuBLAS)");
}

CudaGemmBackend cuda_gemm_backend() {
  const int chosen = backend_override.load();
  if (chosen >= 0) return static_cast<CudaGemmBackend>(chosen);
  const char* env = std::getenv("EMBER_GEMM");
  return env && *env ? parse_cuda_gemm_backend(env) : CudaGemmBackend::cublas;
}

#if EMBER_WITH_CUDA
namespace {
kernels::cuda::GemmAlgo gemm_algo_of(CudaGemmBackend backend);
}
#endif

bool cuda_gemm_backend_available(CudaGemmBackend backend, int device) {
#if EMBER_WITH_CUDA
  if (device < 0 || device >= cuda_device_count()) return false;
  cuda::DeviceGuard guard(device);
  return kernels::cuda::gemm_algo_available(gemm_algo_of(backend));
#else
  static_cast<void>(backend), static_cast<void>(device);
  return false;
#endif
}

void set_cuda_gemm_backend(std::optional<CudaGemmBackend> backend) {
  backend_override.store(backend ? static_cast<int>(*backend) : -1);
}

void set_matmul_allow_tf32(bool allow) {
  allow_tf32.store(allow);
}

bool matmul_allow_tf32() {
  return allow_tf32.load();
}

namespace {

void check_operands(const Tensor& a, const Tensor& b, const char* op) {
  EMBER_CHECK(a.defined() && b.defined(), op, ": got an undefined tensor");
  EMBER_CHECK(a.device() == b.device(), op, ": expected all tensors on the same device, got ",
              describe(a), " and ", describe(b), "; move one with .to(device)");
  EMBER_CHECK(is_floating(a.dtype()) && a.dtype() == b.dtype(), op,
              ": expected two floating-point tensors of the same dtype, got ", describe(a), " and ",
              describe(b));
}

// How BLAS can read a (rows, cols) matrix with these strides without a copy: row-major
// (unit column stride) or transposed (unit row stride). Size-1 dims may have any stride.
struct MatrixLayout {
  bool readable = false;
  bool transposed = false;
  int64_t ld = 1;
};

MatrixLayout blas_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride) {
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= std::max<int64_t>(1, cols)))
    return {true, false, rows == 1 ? std::max<int64_t>(1, cols) : row_stride};
  if ((rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= std::max<int64_t>(1, rows)))
    return {true, true, cols == 1 ? std::max<int64_t>(1, rows) : col_stride};
  return {};
}

MatrixLayout matrix_layout_of(const Tensor& t) {
  return blas_layout(t.size(-2), t.size(-1), t.stride(-2), t.stride(-1));
}

// The matrix part of a GEMM (both backends' GemmShape have these fields): out (..., m, n) =
// a (..., m, k) @ b (..., k, n), each operand's transpose flag and leading dim from its layout.
template <typename GemmShape>
GemmShape matrix_shape_of(const Tensor& a, const Tensor& b, const Tensor& out) {
  const MatrixLayout la = matrix_layout_of(a), lb = matrix_layout_of(b);
  GemmShape shape;
  shape.trans_a = la.transposed;
  shape.trans_b = lb.transposed;
  shape.m = out.size(-2);
  shape.n = out.size(-1);
  shape.k = a.size(-1);
  shape.lda = la.ld;
  shape.ldb = lb.ld;
  shape.ldc = std::max<int64_t>(1, shape.n);
  return shape;
}

// `t` itself when BLAS can read its last two dims, else a dense copy.
Tensor blas_readable(const Tensor& t) {
  return matrix_layout_of(t).readable ? t : t.contiguous();
}

// Offsets (in elements) of each matrix of `t` (batch..., r, c) over its batch dims, in
// row-major batch order.
std::vector<int64_t> batch_offsets(const Tensor& t, const Shape& batch) {
  const int64_t count = shape_numel(batch);
  std::vector<int64_t> offsets(static_cast<size_t>(count), 0);
  const int64_t nbatch = static_cast<int64_t>(batch.size());
  for (int64_t i = 0; i < count; ++i) {
    int64_t rest = i, offset = 0;
    for (int64_t d = nbatch - 1; d >= 0; --d) {
      const int64_t index = rest % batch[d];
      rest /= batch[d];
      offset += index * t.stride(d);
    }
    offsets[static_cast<size_t>(i)] = offset;
  }
  return offsets;
}

#if EMBER_WITH_CUDA
// The one step between consecutive matrices of `t` over `batch` (all of its batch offsets are
// multiples of it), or -1 when the offsets are not evenly spaced (a broadcast over one batch dim
// but not the next).
int64_t uniform_batch_stride(const Tensor& t, const Shape& batch) {
  const std::vector<int64_t> offsets = batch_offsets(t, batch);
  if (offsets.size() < 2) return 0;
  const int64_t step = offsets[1] - offsets[0];
  for (size_t i = 0; i < offsets.size(); ++i)
    if (offsets[i] != static_cast<int64_t>(i) * step) return -1;
  return step;
}

kernels::cuda::GemmAlgo gemm_algo_of(CudaGemmBackend backend) {
  switch (backend) {
    case CudaGemmBackend::ember:
      return kernels::cuda::GemmAlgo::ember;
    case CudaGemmBackend::ember_v1:
      return kernels::cuda::GemmAlgo::ember_v1;
    case CudaGemmBackend::ember_v2:
      return kernels::cuda::GemmAlgo::ember_v2;
    case CudaGemmBackend::ember_v3:
      return kernels::cuda::GemmAlgo::ember_v3;
    case CudaGemmBackend::ember_v4:
      return kernels::cuda::GemmAlgo::ember_v4;
    default:
      return kernels::cuda::GemmAlgo::cublas;
  }
}

// product_into for CUDA tensors: one (strided-batched) GEMM on the device's current stream. An
// operand whose batch offsets are not evenly spaced is made dense first (one copy instead of one
// launch per matrix).
void cuda_product_into(Tensor a, Tensor b, const Tensor& out, float beta, const char* op) {
  if (out.numel() == 0) return;
  if (a.size(-1) == 0) {
    // An empty sum: out = beta * out, with beta 0 or 1 here. Done by ember rather than trusting
    // every library to write zeros (and not NaNs from the uninitialised out) when k == 0.
    Tensor target = out;  // a handle: shares out's storage
    if (beta == 0.0f) target.zero_();
    return;
  }
  const Shape batch(out.sizes().begin(), out.sizes().end() - 2);
  int64_t stride_a = uniform_batch_stride(a, batch), stride_b = uniform_batch_stride(b, batch);
  if (stride_a < 0) {
    a = a.contiguous();
    stride_a = uniform_batch_stride(a, batch);
  }
  if (stride_b < 0) {
    b = b.contiguous();
    stride_b = uniform_batch_stride(b, batch);
  }
  auto shape = matrix_shape_of<kernels::cuda::GemmShape>(a, b, out);
  shape.batch = shape_numel(batch);
  shape.stride_a = stride_a;
  shape.stride_b = stride_b;
  shape.stride_c = shape.m * shape.n;  // out is dense
  kernels::cuda::GemmOptions options;
  options.algo = gemm_algo_of(cuda_gemm_backend());
  options.allow_tf32 = matmul_allow_tf32();
  const int device = out.device().index;
  cuda::DeviceGuard guard(device);
  dispatch_floating(out.dtype(), op, [&]<typename T>() {
    kernels::cuda::gemm<T>(shape, options, 1.0f, static_cast<const T*>(a.data_ptr()),
                           static_cast<const T*>(b.data_ptr()), beta,
                           static_cast<T*>(out.data_ptr()), cuda::StreamOnDevice(device));
  });
}
#endif

// out (batch..., n, m) = a (batch..., n, k) @ b (batch..., k, m) + beta * out: a and b already
// expanded to out's batch dims and BLAS-readable in their last two dims; out dense.
void product_into(const Tensor& a, const Tensor& b, const Tensor& out, float beta, const char* op) {
  if (out.is_cuda()) {
#if EMBER_WITH_CUDA
    cuda_product_into(a, b, out, beta, op);
    return;
#endif
  }
  const auto shape = matrix_shape_of<kernels::cpu::GemmShape>(a, b, out);
  const Shape batch(out.sizes().begin(), out.sizes().end() - 2);
  dispatch_floating(out.dtype(), op, [&]<typename T>() {
    const T* a_data = static_cast<const T*>(a.data_ptr());
    const T* b_data = static_cast<const T*>(b.data_ptr());
    T* out_data = static_cast<T*>(out.data_ptr());
    if (batch.empty()) {
      kernels::cpu::gemm<T>(shape, 1.0f, a_data, b_data, beta, out_data);
      return;
    }
    const std::vector<int64_t> a_offsets = batch_offsets(a, batch);
    const std::vector<int64_t> b_offsets = batch_offsets(b, batch);
    const std::vector<int64_t> out_offsets = batch_offsets(out, batch);
    kernels::cpu::gemm_batched<T>(shape, shape_numel(batch), 1.0f, a_data, a_offsets.data(), b_data,
                                  b_offsets.data(), beta, out_data, out_offsets.data());
  });
}

Shape leading(const Tensor& t, int64_t keep) {
  return Shape(t.sizes().begin(), t.sizes().end() - keep);
}

Shape concat(Shape front, const Shape& back) {
  front.insert(front.end(), back.begin(), back.end());
  return front;
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  // Autocast first: an f16 activation meets an f32 weight inside a region, as in PyTorch. (Each
  // operand is cast once: a cast is a kernel, an allocation and an autograd node.)
  const Tensor a = autocast_lower(a_in), b = autocast_lower(b_in);
  check_operands(a, b, "matmul");
  EMBER_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1,
              "matmul: both operands need at least one dim, got shapes ", shape_str(a_in.sizes()),
              " and ", shape_str(b_in.sizes()));
  // A vector operand is a (1, k) row on the left or a (k, 1) column on the right.
  const Tensor a_mat = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor b_mat = b.dim() == 1 ? b.unsqueeze(1) : b;
  const int64_t n = a_mat.size(-2), k = a_mat.size(-1), m = b_mat.size(-1);
  EMBER_CHECK(k == b_mat.size(-2), "matmul: shapes ", shape_str(a.sizes()), " and ",
              shape_str(b.sizes()), " cannot be multiplied (", k, " != ", b_mat.size(-2), ")");
  const Shape batch = broadcast_shapes(leading(a_mat, 2), leading(b_mat, 2), "matmul");

  Shape result_shape = batch;
  if (a.dim() > 1) result_shape.push_back(n);
  if (b.dim() > 1) result_shape.push_back(m);
  Tensor out = empty(concat(batch, {n, m}), TensorOptions(a.dtype(), a.device()));
  {
    NoGradGuard no_grad;
    const Tensor a_read = blas_readable(a_mat), b_read = blas_readable(b_mat);
    if (b_read.dim() == 2 && a_read.dim() > 2 && a_read.is_contiguous() && out.numel() > 0) {
      // (batch..., n, k) @ (k, m): the batch folds into the rows of one large product.
      const int64_t rows = shape_numel(batch) * n;
      product_into(a_read.reshape({rows, k}), b_read, out.view({rows, m}), 0.0f, "matmul");
    } else {
      product_into(a_read.expand(concat(batch, {n, k})), b_read.expand(concat(batch, {k, m})), out,
                   0.0f, "matmul");
    }
  }
  out = out.view(result_shape);
  if (any_requires_grad({&a, &b})) {
    const bool grad_a = a.requires_grad(), grad_b = b.requires_grad();
    record(
        OpId::matmul, {a, b}, out, {a, b},
        [grad_a, grad_b, batch, n, m, k](const Tensor& g,
                                         const std::vector<Tensor>& s) -> std::vector<Tensor> {
          const Tensor& a = s[0];
          const Tensor& b = s[1];
          const Tensor a_mat = a.dim() == 1 ? a.unsqueeze(0) : a;
          const Tensor b_mat = b.dim() == 1 ? b.unsqueeze(1) : b;
          const Tensor g_full = g.reshape(concat(batch, {n, m}));
          Tensor da, db;
          // Broadcast batch dims are summed back by sum_to; vectors drop their added dim.
          if (grad_a) {
            da = sum_to(matmul(g_full, b_mat.transpose(-1, -2)), a_mat.sizes()).reshape(a.sizes());
          }
          if (grad_b) {
            if (b_mat.dim() == 2 && !batch.empty()) {
              // (k, m) shared by every batch: one product over all rows at once.
              const int64_t rows = shape_numel(batch) * n;
              db = matmul(a_mat.expand(concat(batch, {n, k})).reshape({rows, k}).t(),
                          g_full.reshape({rows, m}));
            } else {
              db = sum_to(matmul(a_mat.transpose(-1, -2), g_full), b_mat.sizes());
            }
            db = db.reshape(b.sizes());
          }
          return {da, db};
        });
  }
  return out;
}

Tensor bmm(const Tensor& a_in, const Tensor& b_in) {
  const Tensor a = autocast_lower(a_in), b = autocast_lower(b_in);
  check_operands(a, b, "bmm");
  EMBER_CHECK(a_in.dim() == 3 && b_in.dim() == 3, "bmm: expected two 3-D tensors, got shapes ",
              shape_str(a_in.sizes()), " and ", shape_str(b_in.sizes()));
  EMBER_CHECK(a.size(0) == b.size(0), "bmm: batch sizes differ: shapes ", shape_str(a.sizes()),
              " and ", shape_str(b.sizes()), " (", a.size(0), " != ", b.size(0), ")");
  EMBER_CHECK(a.size(2) == b.size(1), "bmm: shapes ", shape_str(a.sizes()), " and ",
              shape_str(b.sizes()), " cannot be multiplied (", a.size(2), " != ", b.size(1), ")");
  Tensor out = empty({a.size(0), a.size(1), b.size(2)}, TensorOptions(a.dtype(), a.device()));
  {
    NoGradGuard no_grad;
    product_into(blas_readable(a), blas_readable(b), out, 0.0f, "bmm");
  }
  if (any_requires_grad({&a, &b})) {
    const bool grad_a = a.requires_grad(), grad_b = b.requires_grad();
    record(OpId::bmm, {a, b}, out, {a, b},
           [grad_a, grad_b](const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             Tensor da, db;
             if (grad_a) da = bmm(g, s[1].transpose(1, 2));
             if (grad_b) db = bmm(s[0].transpose(1, 2), g);
             return {da, db};
           });
  }
  return out;
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  const Tensor x = autocast_lower(x_in), weight = autocast_lower(weight_in);
  check_operands(x, weight, "linear");
  EMBER_CHECK(weight_in.dim() == 2, "linear: expected a 2-D weight (out, in), got ",
              describe(weight_in));
  EMBER_CHECK(x_in.dim() >= 1, "linear: expected an input with at least one dim, got ",
              describe(x_in));
  EMBER_CHECK(x_in.size(-1) == weight_in.size(1), "linear: input ", shape_str(x_in.sizes()),
              " and weight ", shape_str(weight_in.sizes()), " cannot be multiplied (",
              x_in.size(-1), " != ", weight_in.size(1), ")");
  Tensor bias;
  if (bias_in.defined()) {
    bias = autocast_lower(bias_in);
    check_operands(x, bias, "linear");
    EMBER_CHECK(bias_in.dim() == 1 && bias_in.size(0) == weight_in.size(0),
                "linear: expected a bias of shape (", weight_in.size(0), "), got ",
                describe(bias_in));
  }
  const int64_t in_features = weight.size(1), out_features = weight.size(0);
  Shape out_shape = leading(x, 1);
  out_shape.push_back(out_features);
  Tensor out = empty(out_shape, TensorOptions(x.dtype(), x.device()));
  const int64_t rows = shape_numel(leading(x, 1));
  {
    NoGradGuard no_grad;
    const Tensor x_rows = blas_readable(x.reshape({rows, in_features}));
    Tensor out_rows = out.view({rows, out_features});
    // Bias first, then accumulate the product onto it (beta = 1): no second pass over out.
    if (bias.defined()) out_rows.copy_(bias);
    product_into(x_rows, blas_readable(weight).t(), out_rows, bias.defined() ? 1.0f : 0.0f,
                 "linear");
  }
  if (any_requires_grad({&x, &weight, &bias})) {
    const bool grad_x = x.requires_grad(), grad_w = weight.requires_grad();
    const bool grad_b = bias.defined() && bias.requires_grad();
    record(OpId::linear, {x, weight, bias}, out, {x, weight},
           [grad_x, grad_w, grad_b, rows, in_features, out_features](
               const Tensor& g, const std::vector<Tensor>& s) -> std::vector<Tensor> {
             const Tensor g_rows = g.reshape({rows, out_features});
             Tensor dx, dw, db;
             if (grad_x) dx = matmul(g, s[1]);  // (..., out) @ (out, in)
             if (grad_w) dw = matmul(g_rows.t(), s[0].reshape({rows, in_features}));
             if (grad_b) db = sum(g_rows, {0});
             return {dx, dw, db};
           });
  }
  return out;
}

}  // namespace ember
