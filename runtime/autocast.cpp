#include "runtime/autocast.h"

#include "runtime/ops.h"

namespace ember {
namespace {
thread_local bool t_enabled = false;
thread_local DType t_dtype = DType::bf16;

bool castable(const Tensor& t) {
  return t.defined() && (t.dtype() == DType::f32 || is_reduced_float(t.dtype()));
}
}  // namespace

bool autocast_enabled() {
  return t_enabled;
}
DType autocast_dtype() {
  return t_dtype;
}

AutocastGuard::AutocastGuard(DType dtype, bool enabled)
    : previous_enabled_(t_enabled), previous_dtype_(t_dtype) {
  EMBER_CHECK(is_reduced_float(dtype), "autocast: the dtype must be f16 or bf16, got ", dtype);
  t_enabled = enabled;
  t_dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  t_enabled = previous_enabled_;
  t_dtype = previous_dtype_;
}

Tensor autocast_lower(const Tensor& t) {
  if (!t_enabled || !castable(t)) return t;
  return t.to(t_dtype);
}

Tensor autocast_fp32(const Tensor& t) {
  if (!t_enabled || !castable(t)) return t;
  return t.to(DType::f32);
}

std::vector<Tensor> autocast_promote(const std::vector<Tensor>& tensors) {
  if (!t_enabled) return tensors;
  bool any = false;
  DType widest = DType::f16;
  for (const Tensor& t : tensors) {
    if (!castable(t)) continue;
    widest = any ? promote_types(widest, t.dtype()) : t.dtype();
    any = true;
  }
  std::vector<Tensor> out;
  out.reserve(tensors.size());
  for (const Tensor& t : tensors)
    out.push_back(castable(t) ? t.to(widest) : t);
  return out;
}

}  // namespace ember
