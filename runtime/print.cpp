// Printing tensors the way PyTorch's repr does:
//   tensor([[ 1.0000, -2.5000],
//           [ 3.0000,  4.0000]], dtype=f64, requires_grad=True)
// Floats print as integers ("1.") when all are, in scientific form when their range is wide,
// else with four decimals; every element is padded to one width; more than 1,000 elements are
// summarised with "..." keeping three at each edge.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "runtime/autograd/node.h"
#include "runtime/ops.h"

namespace ember {
namespace {

constexpr int64_t kSummariseAbove = 1000;
constexpr int64_t kEdgeItems = 3;

enum class FloatStyle { integer, fixed, scientific };

struct Formatter {
  bool floating = false;
  bool boolean = false;
  FloatStyle style = FloatStyle::fixed;
  size_t width = 0;

  std::string format(double v) const {
    char buffer[64];
    if (boolean) return v != 0 ? "True" : "False";
    if (!floating) {
      std::snprintf(buffer, sizeof(buffer), "%lld", static_cast<long long>(v));
      return buffer;
    }
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    switch (style) {
      case FloatStyle::integer:
        std::snprintf(buffer, sizeof(buffer), "%.0f.", v);
        break;
      case FloatStyle::fixed:
        std::snprintf(buffer, sizeof(buffer), "%.4f", v);
        break;
      case FloatStyle::scientific:
        std::snprintf(buffer, sizeof(buffer), "%.4e", v);
        break;
    }
    return buffer;
  }
};

// Indices printed along a dim of size n (all, or the edges when summarising); -1 marks "...".
std::vector<int64_t> shown(int64_t n, bool summarise) {
  std::vector<int64_t> idx;
  if (!summarise || n <= 2 * kEdgeItems) {
    for (int64_t i = 0; i < n; ++i)
      idx.push_back(i);
    return idx;
  }
  for (int64_t i = 0; i < kEdgeItems; ++i)
    idx.push_back(i);
  idx.push_back(-1);
  for (int64_t i = n - kEdgeItems; i < n; ++i)
    idx.push_back(i);
  return idx;
}

void collect(const std::vector<double>& values, const Shape& shape, const Shape& strides, int dim,
             int64_t offset, bool summarise, std::vector<double>& out) {
  if (dim == static_cast<int>(shape.size())) {
    out.push_back(values[offset]);
    return;
  }
  for (int64_t i : shown(shape[dim], summarise)) {
    if (i >= 0) collect(values, shape, strides, dim + 1, offset + i * strides[dim], summarise, out);
  }
}

void render(std::ostringstream& os, const std::vector<double>& values, const Shape& shape,
            const Shape& strides, int dim, int64_t offset, bool summarise, const Formatter& f,
            size_t indent) {
  const int ndim = static_cast<int>(shape.size());
  if (dim == ndim) {
    const std::string s = f.format(values[offset]);
    os << std::string(f.width > s.size() ? f.width - s.size() : 0, ' ') << s;
    return;
  }
  os << "[";
  const std::vector<int64_t> idx = shown(shape[dim], summarise);
  for (size_t k = 0; k < idx.size(); ++k) {
    if (k > 0) {
      if (dim == ndim - 1) {
        os << ", ";
      } else {
        os << "," << std::string(ndim - dim - 1, '\n') << std::string(indent + dim + 1, ' ');
      }
    }
    if (idx[k] < 0) {
      os << "...";
      continue;
    }
    render(os, values, shape, strides, dim + 1, offset + idx[k] * strides[dim], summarise, f,
           indent);
  }
  os << "]";
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const Tensor host = to(Device::cpu()).contiguous();
  const std::vector<double> values = to_vector<double>(host);
  std::ostringstream os;
  os << "tensor(";
  Formatter f;
  f.floating = is_floating(dtype());
  f.boolean = dtype() == DType::boolean;
  const bool summarise = numel() > kSummariseAbove;
  if (numel() == 0) {
    os << "[]";
  } else {
    std::vector<double> visible;
    collect(values, host.sizes(), host.strides(), 0, 0, summarise, visible);
    if (f.floating) {
      double max_abs = 0, min_abs = INFINITY;
      bool all_integer = true;
      for (double v : visible) {
        if (!std::isfinite(v)) continue;
        all_integer = all_integer && v == std::floor(v);
        const double a = std::fabs(v);
        max_abs = std::max(max_abs, a);
        if (a > 0) min_abs = std::min(min_abs, a);
      }
      if (all_integer && max_abs < 1e8) {
        f.style = FloatStyle::integer;
      } else if (max_abs > 1e8 ||
                 (min_abs != INFINITY && (min_abs < 1e-4 || max_abs / min_abs > 1000))) {
        f.style = FloatStyle::scientific;
      }
    }
    for (double v : visible)
      f.width = std::max(f.width, f.format(v).size());
    render(os, values, host.sizes(), host.strides(), 0, 0, summarise, f, 7);
  }
  if (numel() == 0 && dim() != 1) os << ", size=" << shape_str(sizes());
  if (!is_cpu()) os << ", device='" << device() << "'";
  if (dtype() != DType::f32 && dtype() != DType::i64 && dtype() != DType::boolean) {
    os << ", dtype=" << dtype();
  }
  if (grad_fn()) {
    os << ", grad_fn=<" << grad_fn()->name() << "_backward>";
  } else if (requires_grad()) {
    os << ", requires_grad=True";
  }
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& tensor) {
  return os << tensor.str();
}

}  // namespace ember
