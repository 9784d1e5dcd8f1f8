// Conformance, reductions and normalization: var/std, sum/mean, norms, logsumexp, softmax,
// max/min/argmax with ties and NaN; layer_norm, batch_norm, group_norm and friends.
#include "bench/conformance/harness.h"

namespace conformance {

void reductions() {
  const ETensor x = randn64({3, 4, 5});
  for (int64_t c : {0, 1, 2}) {
    for (bool keep : {false, true}) {
      for (const ember::Dims& dims : {ember::Dims{}, ember::Dims{1}, ember::Dims{0, 2}}) {
        std::string tag = "dims" + shape_string(dims) + " correction=" + std::to_string(c) +
                          (keep ? " keepdim" : "");
        check(
            "var " + tag, {x}, [=](const EList& in) { return ember::var(in[0], dims, c, keep); },
            [=](const TList& in) {
              return dims.empty() && !keep
                         ? torch::var(in[0], c10::nullopt, c10::optional<int64_t>(c), false)
                         : torch::var(in[0],
                                      dims.empty() ? at::OptionalIntArrayRef(c10::nullopt)
                                                   : at::OptionalIntArrayRef(dims),
                                      c10::optional<int64_t>(c), keep);
            });
        if (c == 1)
          check(
              "std " + tag, {x}, [=](const EList& in) { return ember::std(in[0], dims, c, keep); },
              [=](const TList& in) {
                return torch::std(in[0],
                                  dims.empty() ? at::OptionalIntArrayRef(c10::nullopt)
                                               : at::OptionalIntArrayRef(dims),
                                  c10::optional<int64_t>(c), keep);
              });
      }
    }
  }
  check(
      "var default (unbiased)", {x}, [](const EList& in) { return ember::var(in[0]); },
      [](const TList& in) { return torch::var(in[0]); });
  check(
      "std default (unbiased)", {x}, [](const EList& in) { return ember::std(in[0]); },
      [](const TList& in) { return torch::std(in[0]); });
  check(
      "var of one element (correction 1: nan)", {randn64({1, 3})},
      [](const EList& in) { return ember::var(in[0], {0}); },
      [](const TList& in) { return torch::var(in[0], {0}); });
  check(
      "std of one element (correction 1: nan)", {randn64({1, 3})},
      [](const EList& in) { return ember::std(in[0], {0}); },
      [](const TList& in) { return torch::std(in[0], at::IntArrayRef{0}); });
  check(
      "std of a constant row (grad at 0)", {e64({2, 2, 2, 1, 2, 3}, {2, 3})},
      [](const EList& in) { return ember::std(in[0], {1}); },
      [](const TList& in) { return torch::std(in[0], at::IntArrayRef{1}); });
  for (bool keep : {false, true}) {
    check(
        std::string("sum dims(0,2)") + (keep ? " keepdim" : ""), {x},
        [=](const EList& in) {
          return ember::sum(in[0], {0, 2}, keep);
        },
        [=](const TList& in) {
          return torch::sum(in[0], at::IntArrayRef{0, 2}, keep);
        });
    check(
        std::string("mean dims(-1,0)") + (keep ? " keepdim" : ""), {x},
        [=](const EList& in) {
          return ember::mean(in[0], {-1, 0}, keep);
        },
        [=](const TList& in) {
          return torch::mean(in[0], at::IntArrayRef{-1, 0}, keep);
        });
  }
  check(
      "mean all", {x}, [](const EList& in) { return ember::mean(in[0]); },
      [](const TList& in) { return torch::mean(in[0]); });
  check(
      "sum of i64 (dtype)", {ei64({1, 2, 3, 4}, {4})},
      [](const EList& in) { return ember::sum(in[0]); },
      [](const TList& in) { return torch::sum(in[0]); });
  check(
      "mean of i64 (throws in torch)", {ei64({1, 2, 3, 4}, {4})},
      [](const EList& in) { return ember::mean(in[0]); },
      [](const TList& in) { return torch::mean(in[0]); });
  // norms
  for (double p : {1.0, 2.0, kInf, 3.0}) {
    for (const ember::Dims& dims : {ember::Dims{}, ember::Dims{1}, ember::Dims{0, 2}}) {
      check(
          "norm p=" + number(p) + " dims" + shape_string(dims), {x},
          [=](const EList& in) { return ember::norm(in[0], p, dims); },
          [=](const TList& in) {
            return torch::linalg_vector_norm(in[0], p,
                                             dims.empty() ? at::OptionalIntArrayRef(c10::nullopt)
                                                          : at::OptionalIntArrayRef(dims));
          });
    }
  }
  check(
      "norm fro (matrix, p=2 over both dims) keepdim", {randn64({4, 5})},
      [](const EList& in) {
        return ember::norm(in[0], 2.0, {0, 1}, true);
      },
      [](const TList& in) {
        return torch::frobenius_norm(in[0], {0, 1}, true);
      });
  for (double p : {1.0, 2.0, kInf}) {
    check(
        "norm p=" + number(p) + " of zeros (grad at 0)", {ember::zeros({2, 3}, DType::f64)},
        [=](const EList& in) { return ember::norm(in[0], p, {1}); },
        [=](const TList& in) { return torch::linalg_vector_norm(in[0], p, at::IntArrayRef{1}); });
  }
  check(
      "norm inf with ties (grad split)", {e64({1, -3, 3, 2, 0, -1}, {6})},
      [](const EList& in) { return ember::norm(in[0], kInf); },
      [](const TList& in) { return torch::linalg_vector_norm(in[0], kInf); });
  // logsumexp
  check(
      "logsumexp dim 1", {x}, [](const EList& in) { return ember::logsumexp(in[0], {1}); },
      [](const TList& in) { return torch::logsumexp(in[0], at::IntArrayRef{1}); });
  check(
      "logsumexp dims(0,2) keepdim", {x},
      [](const EList& in) {
        return ember::logsumexp(in[0], {0, 2}, true);
      },
      [](const TList& in) {
        return torch::logsumexp(in[0], at::IntArrayRef{0, 2}, true);
      });
  check(
      "logsumexp rows with -inf, all -inf, +inf",
      {e64({-kInf, 1, 2, -kInf, -kInf, -kInf, 1, kInf, 0, 3, 1e3, -1e3}, {4, 3})},
      [](const EList& in) { return ember::logsumexp(in[0], {1}); },
      [](const TList& in) { return torch::logsumexp(in[0], at::IntArrayRef{1}); });
  // softmax
  for (int64_t dim : {0, 1, 2, -1}) {
    check(
        "softmax dim " + std::to_string(dim), {x},
        [=](const EList& in) { return ember::softmax(in[0], dim); },
        [=](const TList& in) { return torch::softmax(in[0], dim); });
    check(
        "log_softmax dim " + std::to_string(dim), {x},
        [=](const EList& in) { return ember::log_softmax(in[0], dim); },
        [=](const TList& in) { return torch::log_softmax(in[0], dim); });
  }
  const ETensor masked = e64({0.5, -kInf, 1.0, -kInf, -kInf, -kInf, 2.0, 1e3, -1e3}, {3, 3});
  check(
      "softmax with -inf (and an all -inf row)", {masked},
      [](const EList& in) { return ember::softmax(in[0], 1); },
      [](const TList& in) { return torch::softmax(in[0], 1); });
  check(
      "log_softmax with -inf (and an all -inf row)", {masked},
      [](const EList& in) { return ember::log_softmax(in[0], 1); },
      [](const TList& in) { return torch::log_softmax(in[0], 1); });
  // amax / amin / max over everything
  const ETensor ties = e64({1, 3, 3, 2, -1, -1, 0, 5, 5, 5, 4, 4}, {3, 4});
  check(
      "max all with ties (torch.max: grad evenly split)", {ties},
      [](const EList& in) { return ember::max(in[0]); },
      [](const TList& in) { return torch::max(in[0]); });
  check(
      "min all with ties (torch.min: grad evenly split)", {ties},
      [](const EList& in) { return ember::min(in[0]); },
      [](const TList& in) { return torch::min(in[0]); });
  check(
      "max dim 1 with ties vs amax", {ties}, [](const EList& in) { return ember::max(in[0], {1}); },
      [](const TList& in) { return torch::amax(in[0], {1}); });
  check(
      "min dims(0,1) keepdim with ties vs amin", {ties},
      [](const EList& in) {
        return ember::min(in[0], {0, 1}, true);
      },
      [](const TList& in) {
        return torch::amin(in[0], {0, 1}, true);
      });
  const ETensor nans = e64({1, kNaN, 3, 2, -1, -1, 0, 5, kNaN, 5, 4, 4}, {3, 4});
  check(
      "max dim 1 with NaN", {nans}, [](const EList& in) { return ember::max(in[0], {1}); },
      [](const TList& in) { return torch::amax(in[0], {1}); });
  check(
      "min all with NaN", {nans}, [](const EList& in) { return ember::min(in[0]); },
      [](const TList& in) { return torch::min(in[0]); });
  // ember::min(x) is torch.min(x); with its dims listed it is torch.amin (runtime/ops/reduce.h).
  check(
      "min over dims {0, 1} with NaN vs amin", {nans},
      [](const EList& in) {
        return ember::min(in[0], {0, 1});
      },
      [](const TList& in) {
        return torch::amin(in[0], at::IntArrayRef{0, 1});
      });
  check(
      "max all with NaN vs torch.max", {nans}, [](const EList& in) { return ember::max(in[0]); },
      [](const TList& in) { return torch::max(in[0]); });
  check(
      "argmax with ties (first)", {ties}, [](const EList& in) { return ember::argmax(in[0], 1); },
      [](const TList& in) { return torch::argmax(in[0], 1); }, false);
  check(
      "argmax with NaN", {nans}, [](const EList& in) { return ember::argmax(in[0], 1); },
      [](const TList& in) { return torch::argmax(in[0], 1); }, false);
  check(
      "argmin flattened", {ties}, [](const EList& in) { return ember::argmin(in[0]); },
      [](const TList& in) { return torch::argmin(in[0]); }, false);
  // torch.max(x, dim) / torch.min(x, dim): the values (whose gradient goes to the one element
  // the index names, even on ties) and the indices.
  for (const bool keepdim : {false, true}) {
    const std::string kd = keepdim ? " keepdim" : "";
    check(
        "max_with_indices dim 1 with ties: values" + kd, {ties},
        [=](const EList& in) { return ember::max_with_indices(in[0], 1, keepdim).values; },
        [=](const TList& in) { return std::get<0>(torch::max(in[0], 1, keepdim)); });
    check(
        "max_with_indices dim 1 with ties: indices" + kd, {ties},
        [=](const EList& in) { return ember::max_with_indices(in[0], 1, keepdim).indices; },
        [=](const TList& in) { return std::get<1>(torch::max(in[0], 1, keepdim)); }, false);
    check(
        "min_with_indices dim 0 with ties: values" + kd, {ties},
        [=](const EList& in) { return ember::min_with_indices(in[0], 0, keepdim).values; },
        [=](const TList& in) { return std::get<0>(torch::min(in[0], 0, keepdim)); });
    check(
        "min_with_indices dim 0 with ties: indices" + kd, {ties},
        [=](const EList& in) { return ember::min_with_indices(in[0], 0, keepdim).indices; },
        [=](const TList& in) { return std::get<1>(torch::min(in[0], 0, keepdim)); }, false);
  }
  check(
      "max_with_indices dim 1 with NaN: values", {nans},
      [](const EList& in) { return ember::max_with_indices(in[0], 1).values; },
      [](const TList& in) { return std::get<0>(torch::max(in[0], 1)); });
  check(
      "min_with_indices dim -1 with NaN: indices", {nans},
      [](const EList& in) { return ember::min_with_indices(in[0], -1).indices; },
      [](const TList& in) { return std::get<1>(torch::min(in[0], -1)); }, false);
}

void normalization() {
  const ETensor x = randn64({4, 3, 5});
  const ETensor w = randn64({5}), b = randn64({5});
  check(
      "layer_norm affine eps 1e-5", {x, w, b},
      [](const EList& in) { return ember::layer_norm(in[0], {5}, in[1], in[2]); },
      [](const TList& in) { return torch::layer_norm(in[0], {5}, in[1], in[2]); });
  check(
      "layer_norm no affine eps 0.1", {x},
      [](const EList& in) { return ember::layer_norm(in[0], {5}, ETensor(), ETensor(), 0.1); },
      [](const TList& in) { return torch::layer_norm(in[0], {5}, {}, {}, 0.1); });
  check(
      "layer_norm over last two dims, weight only", {x, randn64({3, 5})},
      [](const EList& in) {
        return ember::layer_norm(in[0], {3, 5}, in[1]);
      },
      [](const TList& in) {
        return torch::layer_norm(in[0], {3, 5}, in[1]);
      });
  check(
      "layer_norm constant rows", {ember::ones({2, 4}, DType::f64)},
      [](const EList& in) { return ember::layer_norm(in[0], {4}); },
      [](const TList& in) { return torch::layer_norm(in[0], {4}); });

  // batch_norm: output, input / weight / bias gradients, and the running statistics.
  const ETensor bx = randn64({4, 3, 2, 3});
  const ETensor gamma = randn64({3}), beta = randn64({3});
  for (bool training : {true, false}) {
    for (bool affine : {true, false}) {
      const ETensor rm0 = e64({0.1, -0.2, 0.3}, {3}), rv0 = e64({1.5, 0.5, 2.0}, {3});
      ETensor erm = rm0.clone(), erv = rv0.clone();
      TTensor trm = to_torch(rm0), trv = to_torch(rv0);
      const std::string tag = std::string("batch_norm ") + (training ? "train" : "eval") +
                              (affine ? " affine" : " no affine") + " momentum 0.3 eps 1e-3";
      EList inputs = affine ? EList{bx, gamma, beta} : EList{bx};
      check(
          tag, inputs,
          [&](const EList& in) {
            return ember::batch_norm(in[0], erm, erv, affine ? in[1] : ETensor(),
                                     affine ? in[2] : ETensor(), training, 0.3, 1e-3);
          },
          [&](const TList& in) {
            return torch::batch_norm(in[0], affine ? in[1] : TTensor(), affine ? in[2] : TTensor(),
                                     trm, trv, training, 0.3, 1e-3, false);
          });
      const Diff dm = compare(erm, trm), dv = compare(erv, trv);
      Result r = named(tag + ": running stats");
      r.forward = std::max(dm.error, dv.error);
      r.status =
          r.forward > kTolerance || !dm.problem.empty() || !dv.problem.empty() ? "FAIL" : "PASS";
      if (r.status == "FAIL") r.note = "mean " + sample(erm, trm) + "; var " + sample(erv, trv);
      record(r);
    }
  }
  // 2-D input (N, C)
  {
    ETensor erm = ember::zeros({3}, DType::f64), erv = ember::ones({3}, DType::f64);
    TTensor trm = torch::zeros({3}, torch::kFloat64), trv = torch::ones({3}, torch::kFloat64);
    check(
        "batch_norm (N, C) train, default momentum", {randn64({5, 3})},
        [&](const EList& in) {
          return ember::batch_norm(in[0], erm, erv, ETensor(), ETensor(), true);
        },
        [&](const TList& in) {
          return torch::batch_norm(in[0], {}, {}, trm, trv, true, 0.1, 1e-5, false);
        });
    const Diff dv = compare(erv, trv);
    record({"batch_norm (N, C) running var", dv.error, kNaN,
            dv.error > kTolerance || !dv.problem.empty() ? "FAIL" : "PASS",
            dv.problem.empty() ? "" : dv.problem});
  }
  {
    check(
        "batch_norm train, no running stats", {bx},
        [](const EList& in) {
          return ember::batch_norm(in[0], ETensor(), ETensor(), ETensor(), ETensor(), true);
        },
        [](const TList& in) {
          return torch::batch_norm(in[0], {}, {}, {}, {}, true, 0.1, 1e-5, false);
        });
  }
}

}  // namespace conformance
