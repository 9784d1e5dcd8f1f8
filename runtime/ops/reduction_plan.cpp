#include "runtime/ops/reduction_plan.h"

#include "runtime/autograd/grad_mode.h"

namespace ember {
namespace {

// The product of x's sizes over dims [begin, end).
int64_t size_product(const Tensor& x, int64_t begin, int64_t end) {
  int64_t product = 1;
  for (int64_t d = begin; d < end; ++d)
    product *= x.sizes()[d];
  return product;
}

}  // namespace

ReductionPlan plan_reduction(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                             const char* op, bool leading_allowed) {
  ReductionPlan plan;
  const int64_t nd = x.dim();
  plan.reduced.assign(nd, dims.empty());
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, nd, op);
    if (nd == 0) continue;
    EMBER_CHECK(!plan.reduced[w], op, ": dim ", w, " appears more than once in the reduced dims");
    plan.reduced[w] = true;
  }
  for (int64_t d = 0; d < nd; ++d) {
    plan.keepdim_shape.push_back(plan.reduced[d] ? 1 : x.sizes()[d]);
    if (!plan.reduced[d])
      plan.out_shape.push_back(x.sizes()[d]);
    else if (keepdim)
      plan.out_shape.push_back(1);
  }
  // Reduced dims adjacent in a contiguous input: no copy needed.
  int64_t first = -1, last = -1;
  for (int64_t d = 0; d < nd; ++d) {
    if (!plan.reduced[d]) continue;
    if (first < 0) first = d;
    last = d;
  }
  bool adjacent = true;
  for (int64_t d = first; d >= 0 && d <= last; ++d)
    adjacent = adjacent && plan.reduced[d];
  NoGradGuard no_grad;
  if (first < 0) {  // nothing to reduce (0-d input)
    plan.input = x.contiguous();
    plan.outer = x.numel();
    return plan;
  }
  if (adjacent && x.is_contiguous()) {
    plan.input = x;
    plan.outer = size_product(x, 0, first);
    plan.reduce = size_product(x, first, last + 1);
    plan.inner = size_product(x, last + 1, nd);
    return plan;
  }
  // A leading run of reduced dims [0, kept_begin), kept dims to kept_end, the last reduced run
  // [kept_end, last]: (leading, outer, reduce, inner) without a copy.
  int64_t kept_begin = 0;
  while (kept_begin < nd && plan.reduced[kept_begin])
    ++kept_begin;
  int64_t kept_end = kept_begin;
  while (kept_end < nd && !plan.reduced[kept_end])
    ++kept_end;
  bool one_more_run = kept_begin > 0 && kept_end < nd;
  for (int64_t d = kept_end; d <= last; ++d)
    one_more_run = one_more_run && plan.reduced[d];
  if (leading_allowed && one_more_run && x.is_contiguous()) {
    plan.input = x;
    plan.leading = size_product(x, 0, kept_begin);
    plan.outer = size_product(x, kept_begin, kept_end);
    plan.reduce = size_product(x, kept_end, last + 1);
    plan.inner = size_product(x, last + 1, nd);
    return plan;
  }
  std::vector<int64_t> order;
  for (int64_t d = 0; d < nd; ++d) {
    if (!plan.reduced[d]) {
      order.push_back(d);
      plan.outer *= x.sizes()[d];
    }
  }
  for (int64_t d = 0; d < nd; ++d) {
    if (plan.reduced[d]) {
      order.push_back(d);
      plan.reduce *= x.sizes()[d];
    }
  }
  plan.input = x.permute(order).contiguous();
  return plan;
}

}  // namespace ember
