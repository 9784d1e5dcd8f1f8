// The harness of ember_conformance_vs_libtorch: tensor conversions between ember and LibTorch,
// the comparison of two results, and the record of cases (check, check_sequence, not_in_ember).
// Every area file (bench/conformance/*.cpp) includes it; main.cpp runs the areas and sums up.
//
// Errors are max |ember - torch| / max |torch| over the finite entries (absolute when torch's are
// all 0); a case fails above 1e-9, or on any difference in shape, dtype, NaN / inf placement or
// in whether the op throws.
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "runtime/ops.h"

namespace conformance {

using ember::DType;
using ETensor = ember::Tensor;
using TTensor = torch::Tensor;
using EList = std::vector<ETensor>;
using TList = std::vector<TTensor>;

constexpr double kTolerance = 1e-9;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ---- conversions
// ---------------------------------------------------------------------------------

inline torch::ScalarType torch_dtype(DType dtype) {
  switch (dtype) {
    case DType::f64:
      return torch::kFloat64;
    case DType::f32:
      return torch::kFloat32;
    case DType::i64:
      return torch::kInt64;
    case DType::i32:
      return torch::kInt32;
    case DType::f16:
      return torch::kFloat16;
    case DType::bf16:
      return torch::kBFloat16;
    case DType::u8:
      return torch::kUInt8;
    case DType::boolean:
      return torch::kBool;
  }
  return torch::kUInt8;
}

// The LibTorch twin of an ember tensor, any dtype, bit for bit (the element layouts are the
// same: bool as 0/1 bytes, f16 and bf16 as their 16 bits).
inline TTensor to_torch(const ETensor& t) {
  const ETensor c = t.detach().contiguous();
  const std::vector<int64_t> sizes(c.sizes().begin(), c.sizes().end());
  return torch::from_blob(c.data_ptr(), sizes, torch_dtype(c.dtype())).clone();
}

// ember's name of a LibTorch dtype ("f16", "bool"), or LibTorch's name when ember has none.
inline std::string name_of(torch::ScalarType t) {
  for (DType d : ember::kAllDTypes)
    if (torch_dtype(d) == t) return ember::dtype_name(d);
  return c10::toString(t);
}

// The ember twin of a LibTorch tensor of any of ember's dtypes, bit for bit.
inline ETensor from_torch(const TTensor& t) {
  for (DType d : ember::kAllDTypes) {
    if (torch_dtype(d) != t.scalar_type()) continue;
    const TTensor c = t.detach().contiguous();
    const ember::Shape shape(c.sizes().begin(), c.sizes().end());
    return ember::from_blob(c.data_ptr(), shape, d).clone();
  }
  throw std::runtime_error(std::string("from_torch: no ember dtype for ") +
                           c10::toString(t.scalar_type()));
}

inline ETensor e64(const std::vector<double>& values, const ember::Shape& shape) {
  return ember::from_vector(values, shape, DType::f64);
}

inline ETensor ei64(const std::vector<int64_t>& values, const ember::Shape& shape) {
  return ember::from_vector(values, shape, DType::i64);
}

inline ETensor ebool(const std::vector<int64_t>& values, const ember::Shape& shape) {
  return ei64(values, shape).to(DType::boolean);
}

inline ETensor randn64(const ember::Shape& shape) {
  return ember::randn(shape, DType::f64);
}

// ---- comparison
// ----------------------------------------------------------------------------------

struct Diff {
  double error = 0.0;
  std::string problem;  // empty when shapes, dtypes and non-finite entries agree
};

inline std::string shape_string(const std::vector<int64_t>& s) {
  std::string out = "(";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.append(std::to_string(s[i]));
  }
  out.push_back(')');
  return out;
}

// Whole numbers below 1e15 as integers (300, not 3e+02); others the shortest of %.1g ... %.17g
// that reads back as v (0.2, not 0.20000000000000001).
inline std::string number(double v) {
  char buffer[64];
  if (v == std::trunc(v) && std::abs(v) < 1e15) {
    std::snprintf(buffer, sizeof buffer, "%.0f", v);
    return buffer;
  }
  for (int digits = 1; digits <= 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, v);
    if (std::strtod(buffer, nullptr) == v) break;
  }
  return buffer;
}

inline Diff compare(const ETensor& a, const TTensor& b) {
  Diff d;
  const std::vector<int64_t> as(a.sizes().begin(), a.sizes().end());
  const std::vector<int64_t> bs(b.sizes().begin(), b.sizes().end());
  if (as != bs) {
    d.problem = "shape ember " + shape_string(as) + " torch " + shape_string(bs);
    d.error = kInf;
    return d;
  }
  if (torch_dtype(a.dtype()) != b.scalar_type()) {
    d.problem = std::string("dtype ember ") + ember::dtype_name(a.dtype()) + " torch " +
                std::string(c10::toString(b.scalar_type()));
  }
  const std::vector<double> x = ember::to_vector<double>(a);
  const TTensor bd = b.detach().to(torch::kFloat64).contiguous();
  const double* y = bd.data_ptr<double>();
  double max_diff = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const bool xf = std::isfinite(x[i]), yf = std::isfinite(y[i]);
    if (!xf || !yf) {
      const bool same = (std::isnan(x[i]) && std::isnan(y[i])) || x[i] == y[i];
      if (!same && d.problem.find("non-finite") == std::string::npos) {
        d.problem.append(d.problem.empty() ? "" : "; ");
        d.problem += std::string("non-finite at [") + std::to_string(i) + "]: ember " +
                     number(x[i]) + " torch " + number(y[i]);
      }
      continue;
    }
    max_diff = std::max(max_diff, std::abs(x[i] - y[i]));
    max_abs = std::max(max_abs, std::abs(y[i]));
  }
  d.error = max_abs > 0.0 ? max_diff / max_abs : max_diff;
  return d;
}

// Up to `count` entries where the two differ most (non-finite mismatches first), for the report.
inline std::string sample(const ETensor& a, const TTensor& b, size_t count = 4) {
  const std::vector<double> x = ember::to_vector<double>(a);
  const TTensor bd = b.detach().to(torch::kFloat64).contiguous();
  const double* y = bd.data_ptr<double>();
  std::vector<std::pair<double, size_t>> order;
  for (size_t i = 0; i < std::min(x.size(), static_cast<size_t>(bd.numel())); ++i) {
    const bool same = x[i] == y[i] || (std::isnan(x[i]) && std::isnan(y[i]));
    if (same) continue;
    const double d = std::abs(x[i] - y[i]);
    order.emplace_back(std::isnan(d) || std::isinf(d) ? kInf : d, i);
  }
  std::sort(order.begin(), order.end(),
            [](const auto& l, const auto& r) { return l.first > r.first; });
  std::string out;
  for (size_t k = 0; k < std::min(count, order.size()); ++k) {
    const size_t i = order[k].second;
    if (k > 0) out.append(", ");
    out.push_back('[');
    out.append(std::to_string(i)).append("] ember ").append(number(x[i]));
    out.append(" torch ").append(number(y[i]));
  }
  return out;
}

// ---- results
// -------------------------------------------------------------------------------------

struct Result {
  std::string name;
  double forward = kNaN;
  double gradient = kNaN;
  std::string status;  // PASS, FAIL, N.A., INFO
  std::string note;
};

inline std::vector<Result> results;

inline Result named(std::string name) {
  Result r;
  r.name = std::move(name);
  return r;
}

inline std::string short_number(double v) {
  if (std::isnan(v)) return "-";
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.1e", v);
  return buffer;
}

inline void record(Result r) {
  std::printf("%-62s fwd %-8s grad %-8s %-4s %s\n", r.name.c_str(), short_number(r.forward).c_str(),
              short_number(r.gradient).c_str(), r.status.c_str(), r.note.c_str());
  std::fflush(stdout);
  results.push_back(std::move(r));
}

inline void not_in_ember(const std::string& name, const std::string& what) {
  record({name, kNaN, kNaN, "N.A.", "not in ember: " + what});
}

// Distinct weights shaped like `like`: w_i = 1 + 0.5 sin(1.3 i + 0.7) + 0.001 i.
inline ETensor weights_like(const ember::Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape)
    n *= s;
  std::vector<double> w(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    w[static_cast<size_t>(i)] =
        1.0 + 0.5 * std::sin(1.3 * static_cast<double>(i) + 0.7) + 1e-3 * static_cast<double>(i);
  return e64(w, shape);
}

using EFn = std::function<ETensor(const EList&)>;
using TFn = std::function<TTensor(const TList&)>;

// Runs fe on ember copies and ft on torch copies of `inputs`; the floating inputs require grad.
inline void check(const std::string& name, const EList& inputs, const EFn& fe, const TFn& ft,
                  bool backward = true) {
  EList ein;
  TList tin;
  for (const ETensor& x : inputs) {
    const bool floating = ember::is_floating(x.dtype());
    ETensor e = x.detach().clone();
    TTensor t = to_torch(x);
    if (floating && backward) {
      e.requires_grad_(true);
      t.requires_grad_(true);
    }
    ein.push_back(e);
    tin.push_back(t);
  }
  Result r = named(name);
  ETensor eo;
  TTensor to;
  std::string ee, te;
  try {
    eo = fe(ein);
  } catch (const std::exception& ex) {
    ee = ex.what();
  }
  try {
    to = ft(tin);
  } catch (const std::exception& ex) {
    te = ex.what();
  }
  if (!ee.empty() || !te.empty()) {
    auto first_line = [](const std::string& s) { return s.substr(0, s.find('\n')).substr(0, 90); };
    if (!ee.empty() && !te.empty()) {
      r.status = "PASS";
      r.note = "both throw";
    } else {
      r.status = "FAIL";
      r.note = !ee.empty() ? "only ember throws: " + first_line(ee)
                           : "only torch throws: " + first_line(te);
    }
    record(r);
    return;
  }
  const Diff fd = compare(eo, to);
  r.forward = fd.error;
  std::string problems = fd.problem.empty() ? "" : "fwd " + fd.problem;
  if ((fd.error > kTolerance || !fd.problem.empty()) &&
      fd.problem.find("shape") == std::string::npos)
    problems += "; fwd " + sample(eo, to);
  const bool differentiable = backward && to.requires_grad() && ember::is_floating(eo.dtype());
  if (differentiable && fd.problem.find("shape") == std::string::npos) {
    const ETensor w = weights_like(eo.sizes());
    std::string eb, tb;
    try {
      ember::sum(ember::mul(eo, w)).backward();
    } catch (const std::exception& ex) {
      eb = ex.what();
    }
    try {
      (to * to_torch(w)).sum().backward();
    } catch (const std::exception& ex) {
      tb = ex.what();
    }
    if (!eb.empty() || !tb.empty()) {
      if (eb.empty() != tb.empty())
        problems += std::string("; backward throws only in ") +
                    (eb.empty() ? "torch: " + tb.substr(0, 80) : "ember: " + eb.substr(0, 80));
    } else {
      double worst = 0.0;
      for (size_t i = 0; i < ein.size(); ++i) {
        if (!tin[i].requires_grad()) continue;
        const TTensor tg = tin[i].grad();
        const ETensor eg = ein[i].grad();
        if (!tg.defined() && !eg.defined()) continue;
        if (tg.defined() != eg.defined()) {
          // An undefined gradient is a zero gradient in PyTorch's eyes.
          const ETensor egz = eg.defined() ? eg : ember::zeros(ein[i].sizes(), DType::f64);
          const TTensor tgz = tg.defined() ? tg : torch::zeros_like(tin[i]);
          const Diff gd = compare(egz, tgz);
          worst = std::max(worst, gd.error);
          if (!gd.problem.empty()) problems += "; grad[" + std::to_string(i) + "] " + gd.problem;
          continue;
        }
        const Diff gd = compare(eg, tg);
        worst = std::max(worst, gd.error);
        if (!gd.problem.empty() || gd.error > kTolerance)
          problems += "; grad[" + std::to_string(i) + "] " + sample(eg, tg);
      }
      r.gradient = worst;
    }
  }
  const bool fail = !problems.empty();
  r.status = fail ? "FAIL" : "PASS";
  r.note = problems;
  record(r);
}

// Compares two sequences of numbers (scheduler lrs, optimizer trajectories' summaries).
inline void check_sequence(const std::string& name, const std::vector<double>& mine,
                           const std::vector<double>& reference, double tolerance = 1e-12) {
  Result r = named(name);
  double worst = 0.0;
  std::string note;
  if (mine.size() != reference.size()) {
    note = "lengths " + std::to_string(mine.size()) + " and " + std::to_string(reference.size());
    worst = kInf;
  }
  for (size_t i = 0; i < std::min(mine.size(), reference.size()); ++i) {
    const double scale = std::max(std::abs(reference[i]), 1e-300);
    const double e = mine[i] == reference[i] ? 0.0 : std::abs(mine[i] - reference[i]) / scale;
    if (std::isnan(e) || e > tolerance) {
      if (note.empty())
        note = "first at [" + std::to_string(i) + "]: ember " + number(mine[i]) + " reference " +
               number(reference[i]);
    }
    if (!std::isnan(e)) worst = std::max(worst, e);
  }
  r.forward = worst;
  r.status = note.empty() ? "PASS" : "FAIL";
  r.note = note;
  record(r);
}

// ---- the areas, one file each, run by main.cpp in this order
// ------------------------------------------------------------

void reductions();     // ops_reductions_and_norms.cpp
void normalization();  // ops_reductions_and_norms.cpp
void losses();         // ops_elementwise_and_losses.cpp
void elementwise();    // ops_elementwise_and_losses.cpp
void conv_pool();      // ops_nn.cpp
void shapes();         // ops_nn.cpp
void optimizers();     // optim.cpp
void schedulers();     // optim.cpp
void clipping();       // optim.cpp
void dtypes();         // dtypes.cpp
void dtypes_16bit();   // dtypes_16bit.cpp

}  // namespace conformance
