// Conformance, optimization: optimizer trajectories (fused and reference paths), learning-rate
// schedulers (LibTorch's StepLR, PyTorch's documented forms for the others), gradient clipping.
#include "bench/conformance/harness.h"

#include <numbers>

#include "optim/optim.h"

namespace conformance {

namespace {

// ---- 3. optimizers
// -------------------------------------------------------------------------------

// The gradient of step t (0-based) for parameter k, element i.
std::vector<double> fixed_grad(int t, int k, int64_t n) {
  std::vector<double> g(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    g[static_cast<size_t>(i)] =
        std::sin(0.7 * t + 1.1 * static_cast<double>(i) + 0.3 * k) * (1.0 + 0.1 * t) +
        (i == 0 ? 1e-3 : 0.0);
  return g;
}

template <typename MakeEmber, typename MakeTorch>
void trajectory(const std::string& name, DType dtype, MakeEmber make_ember, MakeTorch make_torch,
                int steps = 20) {
  const std::vector<ember::Shape> shapes = {{3, 4}, {5}};
  std::vector<ETensor> ep;
  std::vector<TTensor> tp;
  for (size_t k = 0; k < shapes.size(); ++k) {
    ETensor p = ember::randn(shapes[k], dtype);
    TTensor q = to_torch(p);
    p.requires_grad_(true);
    q.requires_grad_(true);
    ep.push_back(p);
    tp.push_back(q);
  }
  auto eopt = make_ember(ep);
  auto topt = make_torch(tp);
  double worst = 0.0;
  std::string note;
  for (int t = 0; t < steps; ++t) {
    for (size_t k = 0; k < ep.size(); ++k) {
      const std::vector<double> g = fixed_grad(t, static_cast<int>(k), ep[k].numel());
      const ETensor eg = e64(g, ep[k].sizes()).to(dtype);
      ep[k].set_grad(eg);
      tp[k].mutable_grad() = to_torch(eg);
    }
    eopt->step();
    topt->step();
    for (size_t k = 0; k < ep.size(); ++k) {
      const Diff d = compare(ep[k].detach(), tp[k].detach());
      worst = std::max(worst, d.error);
      if ((!d.problem.empty() || d.error > (dtype == DType::f64 ? kTolerance : 1e-5)) &&
          note.empty())
        note = "step " + std::to_string(t + 1) + " param " + std::to_string(k) + ": " + d.problem +
               " " + sample(ep[k].detach(), tp[k].detach(), 3);
    }
  }
  record({name, worst, kNaN, note.empty() ? "PASS" : "FAIL", note});
}

// ---- 4. schedulers
// -------------------------------------------------------------------------------

struct EmberSchedulerRig {
  ETensor p = ember::zeros({2}, DType::f64).requires_grad_(true);
  ember::optim::SGD sgd{std::vector<ETensor>{p},
                        ember::optim::SGDOptions{.lr = 0.5, .momentum = 0.9}};
};

// lr after construction (epoch 0) and after each of `steps` steps.
template <typename Scheduler>
std::vector<double> ember_lrs(ember::optim::Optimizer& opt, Scheduler& s, int steps) {
  std::vector<double> lrs{opt.param_groups()[0].lr};
  for (int i = 0; i < steps; ++i) {
    s.step();
    lrs.push_back(opt.param_groups()[0].lr);
  }
  return lrs;
}

}  // namespace

void optimizers() {
  namespace eo = ember::optim;
  namespace to = torch::optim;
  struct SgdCase {
    double momentum, dampening, weight_decay;
    bool nesterov;
  };
  for (const SgdCase& c : std::vector<SgdCase>{{0, 0, 0, false},
                                               {0.9, 0, 0, false},
                                               {0.9, 0.3, 0, false},
                                               {0.9, 0, 0.05, true},
                                               {0.8, 0.2, 0.1, false},
                                               {0, 0, 0.1, false}}) {
    for (bool fused : {true, false}) {
      for (DType dtype : {DType::f64, DType::f32}) {
        const std::string name = "SGD lr 0.05 momentum " + number(c.momentum) + " dampening " +
                                 number(c.dampening) + " wd " + number(c.weight_decay) +
                                 (c.nesterov ? " nesterov" : "") + (fused ? " fused" : " ref") +
                                 (dtype == DType::f64 ? " f64" : " f32");
        trajectory(
            name, dtype,
            [&](std::vector<ETensor> p) {
              return std::make_unique<eo::SGD>(p, eo::SGDOptions{.lr = 0.05,
                                                                 .momentum = c.momentum,
                                                                 .dampening = c.dampening,
                                                                 .weight_decay = c.weight_decay,
                                                                 .nesterov = c.nesterov,
                                                                 .fused = fused});
            },
            [&](std::vector<TTensor> p) {
              return std::make_unique<to::SGD>(p, to::SGDOptions(0.05)
                                                      .momentum(c.momentum)
                                                      .dampening(c.dampening)
                                                      .weight_decay(c.weight_decay)
                                                      .nesterov(c.nesterov));
            });
      }
    }
  }
  struct AdamCase {
    double weight_decay;
    bool amsgrad;
  };
  for (bool decoupled : {false, true}) {
    for (const AdamCase& c :
         std::vector<AdamCase>{{0, false}, {0.1, false}, {0, true}, {0.1, true}}) {
      for (bool fused : {true, false}) {
        for (DType dtype : {DType::f64, DType::f32}) {
          const std::string name =
              std::string(decoupled ? "AdamW" : "Adam") + " lr 0.01 betas (0.8,0.99) eps 1e-6 wd " +
              number(c.weight_decay) + (c.amsgrad ? " amsgrad" : "") + (fused ? " fused" : " ref") +
              (dtype == DType::f64 ? " f64" : " f32");
          eo::AdamOptions o;
          o.lr = 0.01;
          o.beta1 = 0.8;
          o.beta2 = 0.99;
          o.eps = 1e-6;
          o.weight_decay = c.weight_decay;
          o.amsgrad = c.amsgrad;
          o.fused = fused;
          if (decoupled) {
            eo::AdamWOptions w;
            static_cast<eo::AdamOptions&>(w) = o;
            trajectory(
                name, dtype,
                [&](std::vector<ETensor> p) -> std::unique_ptr<eo::Optimizer> {
                  return std::make_unique<eo::AdamW>(p, w);
                },
                [&](std::vector<TTensor> p) -> std::unique_ptr<to::Optimizer> {
                  return std::make_unique<to::AdamW>(p, to::AdamWOptions(0.01)
                                                            .betas({0.8, 0.99})
                                                            .eps(1e-6)
                                                            .weight_decay(c.weight_decay)
                                                            .amsgrad(c.amsgrad));
                });
          } else {
            trajectory(
                name, dtype,
                [&](std::vector<ETensor> p) -> std::unique_ptr<eo::Optimizer> {
                  return std::make_unique<eo::Adam>(p, o);
                },
                [&](std::vector<TTensor> p) -> std::unique_ptr<to::Optimizer> {
                  return std::make_unique<to::Adam>(p, to::AdamOptions(0.01)
                                                           .betas({0.8, 0.99})
                                                           .eps(1e-6)
                                                           .weight_decay(c.weight_decay)
                                                           .amsgrad(c.amsgrad));
                });
          }
        }
      }
    }
  }
  // Defaults: AdamW's weight decay 1e-2 in both.
  trajectory(
      "AdamW default options (wd 1e-2) f64", DType::f64,
      [](std::vector<ETensor> p) { return std::make_unique<eo::AdamW>(p); },
      [](std::vector<TTensor> p) { return std::make_unique<to::AdamW>(p); });
  trajectory(
      "Adam default options f64", DType::f64,
      [](std::vector<ETensor> p) { return std::make_unique<eo::Adam>(p); },
      [](std::vector<TTensor> p) { return std::make_unique<to::Adam>(p); });
}

void schedulers() {
  namespace eo = ember::optim;
  constexpr double kPi = std::numbers::pi;
  const double base = 0.5;
  // StepLR against LibTorch.
  {
    EmberSchedulerRig rig;
    eo::StepLR s(rig.sgd, 3, 0.5);
    const std::vector<double> mine = ember_lrs(rig.sgd, s, 12);
    TTensor q = torch::zeros({2}, torch::kFloat64).requires_grad_(true);
    torch::optim::SGD topt({q}, torch::optim::SGDOptions(base).momentum(0.9));
    torch::optim::StepLR ts(topt, 3, 0.5);
    std::vector<double> same_calls, one_more;
    auto lr_of = [&] {
      return static_cast<torch::optim::SGDOptions&>(topt.param_groups()[0].options()).lr();
    };
    std::vector<double> torch_lrs{lr_of()};
    for (int i = 0; i < 13; ++i) {
      ts.step();
      torch_lrs.push_back(lr_of());
    }
    same_calls.assign(torch_lrs.begin(), torch_lrs.begin() + 13);
    one_more.push_back(base);  // LibTorch's constructor takes no step: epoch e = e + 1 calls
    one_more.insert(one_more.end(), torch_lrs.begin() + 2, torch_lrs.end());
    std::vector<double> closed;
    for (int e = 0; e <= 12; ++e)
      closed.push_back(base * std::pow(0.5, e / 3));
    check_sequence("StepLR(3, 0.5) vs PyTorch closed form lr0 gamma^(e // step)", mine, closed);
    check_sequence("StepLR vs LibTorch C++ StepLR, aligned (torch: one more step)", mine, one_more);
    Result info = named("StepLR vs LibTorch C++ StepLR, same number of step() calls");
    bool equal = same_calls == mine;
    info.status = "INFO";
    info.note = equal ? "equal"
                      : "differ: LibTorch's C++ StepLR decays one step later than "
                        "Python's (its constructor does not step); ember follows Python";
    record(info);
  }
  // MultiStepLR: lr0 * gamma ^ bisect_right(milestones, e) (PyTorch docs, _get_closed_form_lr).
  {
    EmberSchedulerRig rig;
    const std::vector<int64_t> milestones = {2, 5, 5, 9};
    eo::MultiStepLR s(rig.sgd, milestones, 0.1);
    const std::vector<double> mine = ember_lrs(rig.sgd, s, 12);
    std::vector<double> closed;
    for (int64_t e = 0; e <= 12; ++e)
      closed.push_back(base *
                       std::pow(0.1, static_cast<double>(
                                         std::upper_bound(milestones.begin(), milestones.end(), e) -
                                         milestones.begin())));
    check_sequence("MultiStepLR({2,5,5,9}, 0.1) vs lr0 gamma^bisect_right", mine, closed, 1e-12);
  }
  {
    EmberSchedulerRig rig;
    eo::ExponentialLR s(rig.sgd, 0.9);
    const std::vector<double> mine = ember_lrs(rig.sgd, s, 30);
    std::vector<double> closed;
    for (int e = 0; e <= 30; ++e)
      closed.push_back(base * std::pow(0.9, e));
    check_sequence("ExponentialLR(0.9) vs lr0 gamma^e", mine, closed, 1e-12);
  }
  for (double eta_min : {0.0, 0.05}) {
    EmberSchedulerRig rig;
    eo::CosineAnnealingLR s(rig.sgd, 7, eta_min);
    const std::vector<double> mine = ember_lrs(rig.sgd, s, 30);
    // PyTorch docs: eta_t = eta_min + (eta_max - eta_min) (1 + cos(pi T_cur / T_max)) / 2.
    std::vector<double> closed;
    for (int e = 0; e <= 30; ++e)
      closed.push_back(eta_min + (base - eta_min) * (1 + std::cos(kPi * e / 7.0)) / 2);
    check_sequence("CosineAnnealingLR(T_max 7, eta_min " + number(eta_min) + ") 30 steps", mine,
                   closed, 1e-9);
  }
  for (auto [start, end, total] : std::vector<std::tuple<double, double, int64_t>>{
           {1.0 / 3.0, 1.0, 5}, {0.5, 0.1, 4}, {1.0, 0.0, 6}}) {
    EmberSchedulerRig rig;
    eo::LinearLR s(rig.sgd, start, end, total);
    const std::vector<double> mine = ember_lrs(rig.sgd, s, 10);
    // PyTorch docs (_get_closed_form_lr): lr0 (start + (end - start) min(total, e) / total).
    std::vector<double> closed;
    for (int64_t e = 0; e <= 10; ++e)
      closed.push_back(base * (start + (end - start) * static_cast<double>(std::min(total, e)) /
                                           static_cast<double>(total)));
    check_sequence("LinearLR(" + number(start).substr(0, 6) + ", " + number(end) + ", " +
                       std::to_string(total) + ")",
                   mine, closed, 1e-12);
  }
  // OneCycleLR (cos, two phases): PyTorch's OneCycleLR.get_lr.
  for (bool adam : {false, true}) {
    for (auto [total, pct] :
         std::vector<std::pair<int64_t, double>>{{20, 0.3}, {17, 0.25}, {10, 0.5}}) {
      ETensor p = ember::zeros({2}, DType::f64).requires_grad_(true);
      std::unique_ptr<eo::Optimizer> opt;
      if (adam)
        opt = std::make_unique<eo::Adam>(std::vector<ETensor>{p}, eo::AdamOptions{.lr = 0.5});
      else
        opt = std::make_unique<eo::SGD>(std::vector<ETensor>{p},
                                        eo::SGDOptions{.lr = 0.5, .momentum = 0.9});
      const double max_lr = 2.0;
      eo::OneCycleOptions options;
      options.pct_start = pct;
      eo::OneCycleLR s(*opt, max_lr, total, options);
      std::vector<double> lrs, moms;
      auto momentum = [&] {
        return adam ? opt->param_groups()[0].beta1 : opt->param_groups()[0].momentum;
      };
      lrs.push_back(opt->param_groups()[0].lr);
      moms.push_back(momentum());
      for (int64_t i = 1; i < total; ++i) {
        s.step();
        lrs.push_back(opt->param_groups()[0].lr);
        moms.push_back(momentum());
      }
      // Reference: torch/optim/lr_scheduler.py OneCycleLR (1.13), anneal_strategy 'cos',
      // three_phase False: phases end at pct_start * total - 1 and total - 1;
      // _annealing_cos(start, end, pct) = end + (start - end) / 2 * (cos(pi pct) + 1).
      const double initial = max_lr / 25.0, min_lr = initial / 1e4;
      auto cos_anneal = [&](double a, double b, double t) {
        return b + (a - b) / 2.0 * (std::cos(kPi * t) + 1);
      };
      std::vector<double> ref_lr, ref_mom;
      const double e1 = pct * static_cast<double>(total) - 1, e2 = static_cast<double>(total) - 1;
      for (int64_t step = 0; step < total; ++step) {
        const double s_ = static_cast<double>(step);
        if (s_ <= e1) {
          ref_lr.push_back(cos_anneal(initial, max_lr, s_ / e1));
          ref_mom.push_back(cos_anneal(0.95, 0.85, s_ / e1));
        } else {
          ref_lr.push_back(cos_anneal(max_lr, min_lr, (s_ - e1) / (e2 - e1)));
          ref_mom.push_back(cos_anneal(0.85, 0.95, (s_ - e1) / (e2 - e1)));
        }
      }
      const std::string tag = "OneCycleLR(max 2, total " + std::to_string(total) + ", pct " +
                              number(pct) + ") " + (adam ? "Adam" : "SGD");
      check_sequence(tag + " lr", lrs, ref_lr, 1e-12);
      check_sequence(tag + (adam ? " beta1" : " momentum"), moms, ref_mom, 1e-12);
      std::string thrown;
      try {
        s.step();
        s.step();
      } catch (const std::exception& ex) {
        thrown = ex.what();
      }
      // PyTorch raises once step_num > total_steps: the (total+1)-th step() after construction.
      record({tag + " stepping past total_steps throws", kNaN, kNaN,
              thrown.empty() ? "FAIL" : "PASS", thrown.empty() ? "no error" : ""});
    }
  }
  // OneCycleLR, three phases and/or linear annealing: PyTorch 1.13's _schedule_phases and
  // get_lr, written out: phase ends pct * total - 1, 2 pct * total - 2 (three phases), total - 1;
  // the phase of a step is the first whose end it has not passed (the last one past the end);
  // _annealing_linear(start, end, pct) = (end - start) * pct + start.
  for (bool three_phase : {false, true}) {
    for (bool linear : {false, true}) {
      if (!three_phase && !linear) continue;  // the two-phase cosine case is above
      const int64_t total = 23;
      const double pct = 0.3, max_lr = 2.0, initial = max_lr / 25.0, min_lr = initial / 1e4;
      ETensor p = ember::zeros({2}, DType::f64).requires_grad_(true);
      eo::SGD sgd(std::vector<ETensor>{p}, eo::SGDOptions{.lr = 0.5, .momentum = 0.9});
      eo::OneCycleOptions options;
      options.pct_start = pct;
      options.three_phase = three_phase;
      options.anneal_strategy =
          linear ? eo::OneCycleOptions::Anneal::linear : eo::OneCycleOptions::Anneal::cos;
      eo::OneCycleLR s(sgd, max_lr, total, options);
      struct RefPhase {
        double end, lr0, lr1, m0, m1;
      };
      const double t = static_cast<double>(total);
      std::vector<RefPhase> phases;
      if (three_phase) {
        phases = {{pct * t - 1, initial, max_lr, 0.95, 0.85},
                  {2 * pct * t - 2, max_lr, initial, 0.85, 0.95},
                  {t - 1, initial, min_lr, 0.95, 0.95}};
      } else {
        phases = {{pct * t - 1, initial, max_lr, 0.95, 0.85}, {t - 1, max_lr, min_lr, 0.85, 0.95}};
      }
      auto anneal = [&](double a, double b, double f) {
        return linear ? (b - a) * f + a : b + (a - b) / 2.0 * (std::cos(kPi * f) + 1);
      };
      std::vector<double> lrs, moms, ref_lr, ref_mom;
      for (int64_t step = 0; step <= total; ++step) {
        if (step > 0) s.step();
        lrs.push_back(sgd.param_groups()[0].lr);
        moms.push_back(sgd.param_groups()[0].momentum);
        double start = 0;
        for (size_t i = 0; i < phases.size(); ++i) {
          if (static_cast<double>(step) <= phases[i].end || i + 1 == phases.size()) {
            const double f = (static_cast<double>(step) - start) / (phases[i].end - start);
            ref_lr.push_back(anneal(phases[i].lr0, phases[i].lr1, f));
            ref_mom.push_back(anneal(phases[i].m0, phases[i].m1, f));
            break;
          }
          start = phases[i].end;
        }
      }
      const std::string tag = std::string("OneCycleLR ") + (three_phase ? "three_phase " : "") +
                              (linear ? "linear" : "cos") + " (total 23, pct 0.3)";
      check_sequence(tag + " lr", lrs, ref_lr, 1e-12);
      check_sequence(tag + " momentum", moms, ref_mom, 1e-12);
    }
  }
  // ReduceLROnPlateau: torch/optim/lr_scheduler.py (1.13) step / is_better / _reduce_lr.
  struct PlateauCase {
    std::string name;
    eo::ReduceLROnPlateauOptions options;
    std::vector<double> metrics;
  };
  using Mode = eo::ReduceLROnPlateauOptions::Mode;
  using TM = eo::ReduceLROnPlateauOptions::ThresholdMode;
  const std::vector<double> falling_then_flat = {5, 4, 3, 3, 3, 3, 2.9999, 3, 3, 3, 3, 3,
                                                 3, 3, 3, 3, 3, 3, 3,      3, 3, 3, 3, 3};
  const std::vector<double> rising_then_flat = {-1,  0,   1,   1.05, 1.05, 1.05, 1.2, 1.2, 1.2,
                                                1.2, 1.2, 1.2, 1.2,  1.2,  1.2,  1.2, 1.2, 1.2};
  std::vector<PlateauCase> plateau = {
      {"min rel patience 2", {.factor = 0.5, .patience = 2}, falling_then_flat},
      {"min rel threshold 0.1 patience 1 cooldown 2",
       {.factor = 0.5, .patience = 1, .threshold = 0.1, .cooldown = 2},
       falling_then_flat},
      {"min abs threshold 0.5 patience 0",
       {.factor = 0.3, .patience = 0, .threshold = 0.5, .threshold_mode = TM::abs},
       falling_then_flat},
      {"min rel min_lr 0.02 patience 1",
       {.factor = 0.2, .patience = 1, .min_lr = 0.02},
       falling_then_flat},
      {"min rel eps 0.01 min_lr 0.045",
       {.factor = 0.9, .patience = 0, .min_lr = 0.045, .eps = 0.01},
       falling_then_flat},
      {"max rel threshold 0.1 patience 1",
       {.mode = Mode::max, .factor = 0.5, .patience = 1, .threshold = 0.1},
       rising_then_flat},
      {"max abs threshold 0.1 patience 1 cooldown 1",
       {.mode = Mode::max,
        .factor = 0.5,
        .patience = 1,
        .threshold = 0.1,
        .threshold_mode = TM::abs,
        .cooldown = 1},
       rising_then_flat},
      {"min rel with negative metrics",
       {.factor = 0.5, .patience = 1, .threshold = 0.1},
       {-1, -1.05, -1.2, -1.25, -1.3, -1.3, -1.3, -1.3, -1.3, -1.3}},
      {"defaults (patience 10)", {}, falling_then_flat},
  };
  for (const PlateauCase& c : plateau) {
    EmberSchedulerRig rig;
    eo::ReduceLROnPlateau s(rig.sgd, c.options);
    std::vector<double> mine;
    for (double m : c.metrics) {
      s.step(m);
      mine.push_back(rig.sgd.param_groups()[0].lr);
    }
    // Reference, transcribed from PyTorch 1.13.
    const auto& o = c.options;
    double lr = base, best = o.mode == Mode::min ? kInf : -kInf;
    int64_t bad = 0, cooldown_counter = 0;
    std::vector<double> ref;
    for (double m : c.metrics) {
      bool better;
      if (o.mode == Mode::min && o.threshold_mode == TM::rel)
        better = m < best * (1.0 - o.threshold);
      else if (o.mode == Mode::min)
        better = m < best - o.threshold;
      else if (o.threshold_mode == TM::rel)
        better = m > best * (o.threshold + 1.0);
      else
        better = m > best + o.threshold;
      if (better) {
        best = m;
        bad = 0;
      } else {
        ++bad;
      }
      if (cooldown_counter > 0) {
        --cooldown_counter;
        bad = 0;
      }
      if (bad > o.patience) {
        const double new_lr = std::max(lr * o.factor, o.min_lr);
        if (lr - new_lr > o.eps) lr = new_lr;
        cooldown_counter = o.cooldown;
        bad = 0;
      }
      ref.push_back(lr);
    }
    check_sequence("ReduceLROnPlateau " + c.name, mine, ref, 0.0);
  }
}

// ---- 5. clipping
// ---------------------------------------------------------------------------------

void clipping() {
  for (DType dtype : {DType::f64, DType::f32}) {
    for (double norm_type : {2.0, kInf, 1.0, 3.0}) {
      for (double max_norm : {0.5, 1e3}) {
        std::vector<ETensor> ep;
        std::vector<TTensor> tp;
        const std::vector<ember::Shape> shapes = {{3, 4}, {5}, {2, 2}};
        for (size_t k = 0; k < shapes.size(); ++k) {
          ETensor p = ember::zeros(shapes[k], dtype).requires_grad_(true);
          TTensor q = to_torch(p).requires_grad_(true);
          const ETensor g = ember::randn(shapes[k], dtype);
          p.set_grad(g.clone());
          q.mutable_grad() = to_torch(g);
          ep.push_back(p);
          tp.push_back(q);
        }
        // A parameter without a gradient is skipped by both.
        ep.push_back(ember::zeros({2}, dtype).requires_grad_(true));
        tp.push_back(torch::zeros({2}, torch_dtype(dtype)).requires_grad_(true));
        const ETensor total = ember::optim::clip_grad_norm_(ep, max_norm, norm_type);
        const double ttotal = torch::nn::utils::clip_grad_norm_(tp, max_norm, norm_type);
        const double tol = dtype == DType::f64 ? kTolerance : 1e-6;
        const std::string tag = std::string("clip_grad_norm_ ") +
                                (dtype == DType::f64 ? "f64" : "f32") + " norm " +
                                number(norm_type) + " max_norm " + number(max_norm);
        const double total_error = std::abs(total.item_double() - ttotal) / ttotal;
        double grad_error = 0.0;
        for (size_t k = 0; k < shapes.size(); ++k)
          grad_error = std::max(grad_error, compare(ep[k].grad(), tp[k].grad()).error);
        std::string note;
        if (total_error > tol || grad_error > tol)
          note = "total ember " + number(total.item_double()) + " torch " + number(ttotal) +
                 " (ember's total is " + ember::dtype_name(total.dtype()) + ")";
        record({tag + " (total; grads)", total_error, grad_error, note.empty() ? "PASS" : "FAIL",
                note});
      }
    }
    // clip_grad_value_
    ETensor p = ember::zeros({6}, dtype).requires_grad_(true);
    TTensor q = to_torch(p).requires_grad_(true);
    const ETensor g =
        ember::from_vector(std::vector<double>{-3, -1, -0.5, 0.5, 1, 3}, {6}, DType::f64).to(dtype);
    p.set_grad(g.clone());
    q.mutable_grad() = to_torch(g);
    ember::optim::clip_grad_value_({p}, 1.0);
    torch::nn::utils::clip_grad_value_({q}, 1.0);
    const Diff d = compare(p.grad(), q.grad());
    record({std::string("clip_grad_value_ 1.0 ") + (dtype == DType::f64 ? "f64" : "f32"), d.error,
            kNaN, d.error > 0 || !d.problem.empty() ? "FAIL" : "PASS", d.problem});
  }
}
}  // namespace conformance
