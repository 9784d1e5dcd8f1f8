// ember's numerical semantics next to LibTorch's (CPU, f64 unless a case says otherwise): the same
// inputs through both, and for each differentiable op the forward result and the gradient of
// sum(out * W) with respect to every input (W a fixed tensor of distinct values shaped like the
// output). Also optimizer trajectories, learning-rate schedulers, gradient clipping, and dtypes:
// type promotion, integer ops, casts and 16-bit values. One line per case, a summary, exit status
// 1 if any case fails.
//
//   ember_conformance_vs_libtorch
//
// The harness is bench/conformance/harness.h; each area is one file of this folder.
#include "bench/conformance/harness.h"

int main() {
  using namespace conformance;
  torch::set_num_threads(1);
  ember::manual_seed(1234);
  std::printf("ember vs LibTorch %s: numerical semantics, f64 unless stated; tolerance %.0e\n\n",
              TORCH_VERSION, kTolerance);
  reductions();
  normalization();
  losses();
  elementwise();
  conv_pool();
  shapes();
  optimizers();
  schedulers();
  clipping();
  dtypes();
  dtypes_16bit();
  int pass = 0, fail = 0, na = 0, info = 0;
  for (const Result& r : results) {
    if (r.status == "PASS") ++pass;
    if (r.status == "FAIL") ++fail;
    if (r.status == "N.A.") ++na;
    if (r.status == "INFO") ++info;
  }
  std::printf("\nSummary: %zu cases: %d PASS, %d FAIL, %d N.A. (not in ember), %d INFO\n",
              results.size(), pass, fail, na, info);
  for (const Result& r : results)
    if (r.status == "FAIL") std::printf("  FAIL %s: %s\n", r.name.c_str(), r.note.c_str());
  return fail > 0 ? 1 : 0;
}
