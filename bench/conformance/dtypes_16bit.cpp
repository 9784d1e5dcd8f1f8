// Conformance, casts and 16-bit values: to(dtype) between all dtypes on edge values, f32 -> f16 /
// bf16 rounding bit for bit, 16-bit elementwise ops (every bit pattern for the unary ones) and
// 16-bit reductions, ulp by ulp. The inputs are made by LibTorch and copied into ember bit for bit.
#include <cstring>

#include "bench/conformance/harness.h"

namespace conformance {

namespace {

// ---- 3. casts
// ------------------------------------------------------------------------------------

// The bytes of element i of a contiguous tensor.
uint64_t bits_at(const void* data, size_t size, size_t i) {
  uint64_t v = 0;
  std::memcpy(&v, static_cast<const char*>(data) + i * size, size);
  return v;
}

// Source values for casts from `d`, made in LibTorch from f64 (floats) or i64 (integers).
TTensor cast_sources(DType d) {
  if (ember::is_floating(d)) {
    const std::vector<double> v = {
        kNaN,  kInf,   -kInf,        -0.0,         0.0,           0.5,    1.5,     2.5,
        -0.5,  -1.5,   -2.5,         0.3,          -1.0,          127.5,  255.5,   256.0,
        300.0, -129.0, 65504.0,      65519.0,      65520.0,       1e-8,   1e-40,   3e38,
        1e10,  -1e10,  2147483647.0, 2147483648.0, -2147483649.0, 9.3e18, -9.3e18, 1e30};
    return torch::tensor(v, torch::kFloat64).to(torch_dtype(d));
  }
  if (d == DType::boolean) return torch::tensor(std::vector<int64_t>{0, 1, 1}).to(torch::kBool);
  const int64_t lo = d == DType::u8 ? 0 : d == DType::i32 ? -2147483648LL : INT64_MIN;
  const int64_t hi = d == DType::u8 ? 255 : d == DType::i32 ? 2147483647LL : INT64_MAX;
  std::vector<int64_t> v;
  for (int64_t x : {int64_t{0}, int64_t{1}, int64_t{-1}, int64_t{2}, int64_t{127}, int64_t{128},
                    int64_t{255}, int64_t{-129}, int64_t{65504}, int64_t{65520}, int64_t{16777217},
                    int64_t{2147483647}, int64_t{-2147483648LL}, int64_t{2147483649LL},
                    int64_t{9007199254740993LL}, INT64_MAX, INT64_MIN})
    if (x >= lo && x <= hi) v.push_back(x);
  return torch::tensor(v).to(torch_dtype(d));
}

// Whether casting float `v` to integer dtype `d` is undefined in C++ (NaN, inf, out of range).
bool undefined_cast(double v, DType d) {
  if (!ember::is_integral(d, false)) return false;
  if (!std::isfinite(v)) return true;
  const double t = std::trunc(v);
  const double lo = d == DType::u8 ? 0.0 : d == DType::i32 ? -2147483648.0 : -9223372036854775808.0;
  const double hi = d == DType::u8 ? 255.0 : d == DType::i32 ? 2147483647.0 : 9223372036854775807.0;
  return t < lo || t >= hi + 1.0;
}

void casts() {
  for (DType src : ember::kAllDTypes) {
    const TTensor ts = cast_sources(src);
    const ETensor es = from_torch(ts);
    const TTensor src64 = ts.to(torch::kFloat64);
    for (DType dst : ember::kAllDTypes) {
      if (src == dst) continue;
      const TTensor tr = ts.to(torch_dtype(dst)).contiguous();
      const ETensor er = es.to(dst).contiguous();
      const size_t size = ember::element_size(dst);
      std::string defined_bad, undefined_note;
      int undefined = 0;
      const std::vector<double> ev = ember::to_vector<double>(er);
      const TTensor tv = tr.to(torch::kFloat64).contiguous();
      const TTensor sv = src64.contiguous();
      for (size_t i = 0; i < ev.size(); ++i) {
        const uint64_t a = bits_at(er.data_ptr(), size, i), b = bits_at(tr.data_ptr(), size, i);
        const double v = sv.data_ptr<double>()[i], t = tv.data_ptr<double>()[i];
        const bool both_nan = std::isnan(ev[i]) && std::isnan(t);
        const std::string what = number(v) + " -> ember " + number(ev[i]) + " torch " + number(t);
        if (ember::is_floating(src) && undefined_cast(v, dst)) {
          ++undefined;
          if (undefined_note.size() < 400)
            undefined_note +=
                (undefined_note.empty() ? "" : "; ") + what + (a == b ? "" : " (differ)");
        } else if (a != b && !both_nan && defined_bad.size() < 300) {
          defined_bad += (defined_bad.empty() ? "" : "; ") + what;
        }
      }
      const std::string name =
          std::string("cast ") + ember::dtype_name(src) + " -> " + ember::dtype_name(dst);
      record({name, kNaN, kNaN, defined_bad.empty() ? "PASS" : "FAIL",
              defined_bad.empty() ? std::to_string(tr.numel() - undefined) + " values bit-identical"
                                  : defined_bad});
      if (undefined > 0)
        record({name + " out of range (UB in C++)", kNaN, kNaN, "INFO", undefined_note});
    }
  }
}

// f32 -> f16 / bf16 rounding bit for bit: a sweep over f32 bit patterns, every tie between
// neighbouring 16-bit values and its f32 neighbours; and every 16-bit pattern back to f32.
void rounding_16bit() {
  for (DType d : {DType::f16, DType::bf16}) {
    const TTensor all16 = torch::arange(0, 65536, torch::kInt32).to(torch::kInt16);
    const TTensor as16 = all16.view(torch_dtype(d));  // every bit pattern
    const TTensor widened = as16.to(torch::kFloat32);
    const ETensor e_widened = from_torch(as16).to(DType::f32);
    const int64_t same_wide =
        (torch::eq(to_torch(e_widened).view(torch::kInt32), widened.view(torch::kInt32)) |
         (torch::isnan(widened) & torch::isnan(to_torch(e_widened))))
            .sum()
            .item<int64_t>();
    record({std::string(ember::dtype_name(d)) + " -> f32, all 65536 patterns", kNaN, kNaN,
            same_wide == 65536 ? "PASS" : "FAIL",
            std::to_string(same_wide) + "/65536 bit-identical (NaN: both NaN)"});
    // Ties and their neighbours: the midpoint of each finite pattern and the next one up.
    const TTensor next = (all16.to(torch::kInt32) + 1).to(torch::kInt16).view(torch_dtype(d));
    TTensor mid = (widened + next.to(torch::kFloat32)) * 0.5f;
    mid = mid.masked_select(torch::isfinite(mid));
    const TTensor up = torch::nextafter(mid, torch::full_like(mid, INFINITY));
    const TTensor down = torch::nextafter(mid, torch::full_like(mid, -INFINITY));
    const TTensor sweep =
        torch::arange(int64_t{0}, int64_t{4294967296}, int64_t{4093}, torch::kInt64)
            .to(torch::kInt32)
            .view(torch::kFloat32);
    const TTensor special =
        torch::tensor({65504.f, 65519.99f, 65520.f, 3.3895314e38f, 3.4028235e38f, 5.9604645e-8f,
                       2.9802322e-8f, 2.9802326e-8f, 1e-45f},
                      torch::kFloat32);
    const TTensor all = torch::cat({mid, up, down, sweep, special, -special});
    const TTensor t = all.to(torch_dtype(d)).view(torch::kInt16);
    const TTensor e = to_torch(from_torch(all).to(d)).view(torch::kInt16);
    const TTensor nan = torch::isnan(all);
    const TTensor differ = torch::ne(t, e) & ~nan;
    const int64_t bad = differ.sum().item<int64_t>();
    const int64_t nan_bits = (torch::ne(t, e) & nan).sum().item<int64_t>();
    std::string note = std::to_string(all.numel() - bad) + "/" + std::to_string(all.numel()) +
                       " non-NaN values bit-identical";
    if (bad > 0) {
      const int64_t i = torch::nonzero(differ)[0][0].item<int64_t>();
      char buf[160];
      std::snprintf(buf, sizeof buf, "; first: f32 %.9g -> ember 0x%04x torch 0x%04x",
                    all[i].item<float>(), static_cast<unsigned>(e[i].item<int16_t>()) & 0xffffu,
                    static_cast<unsigned>(t[i].item<int16_t>()) & 0xffffu);
      note += buf;
    }
    record({std::string("f32 -> ") + ember::dtype_name(d) +
                " rounding (ties to even, subnormals, overflow)",
            kNaN, kNaN, bad == 0 ? "PASS" : "FAIL", note});
    record({std::string("f32 NaN -> ") + ember::dtype_name(d) + " payload bits", kNaN, kNaN, "INFO",
            std::to_string(nan_bits) + " of " + std::to_string(nan.sum().item<int64_t>()) +
                " NaN inputs give other NaN bits than LibTorch (both stay NaN)"});
  }
}

// ---- 4. 16-bit elementwise ops, ulp by ulp; 5. 16-bit reductions
// ---------------------------------------

// Ordered integer of a 16-bit float's bits: consecutive values differ by 1.
TTensor ordered(const TTensor& bits16) {
  const TTensor b = bits16.to(torch::kInt32) & 0xffff;
  return torch::where(b >= 0x8000, 0x8000 - b, b);
}

// |ulp difference| per element of two 16-bit results (NaN against non-NaN: 65536).
TTensor ulps(const TTensor& x, const TTensor& y) {
  const TTensor a = x.contiguous().reshape({-1}), b = y.contiguous().reshape({-1});
  const TTensor na = torch::isnan(a), nb = torch::isnan(b);
  TTensor ulp = (ordered(a.view(torch::kInt16)) - ordered(b.view(torch::kInt16))).abs();
  ulp = torch::where(na & nb, torch::zeros_like(ulp), ulp);
  return torch::where(na ^ nb, torch::full_like(ulp, 65536), ulp);
}

// Count of differing elements and the max ulp difference; PASS within `max_ulp`. `rounded`: the
// f32 op's result rounded once (reported next to LibTorch's); `input`: for the worst element.
void ulp_case(const std::string& name, const ETensor& e, const TTensor& t, int64_t max_ulp,
              const std::string& extra = "", const TTensor& rounded = {},
              const TTensor& input = {}) {
  if (torch_dtype(e.dtype()) != t.scalar_type()) {
    record({name, kNaN, kNaN, "FAIL",
            std::string("dtype ember ") + ember::dtype_name(e.dtype()) + " torch " +
                name_of(t.scalar_type())});
    return;
  }
  const TTensor te = to_torch(e).reshape({-1}), tt = t.contiguous().reshape({-1});
  const TTensor ulp = ulps(te, tt);
  const int64_t differing = (ulp > 0).sum().item<int64_t>();
  const int64_t worst = ulp.numel() > 0 ? ulp.max().item<int64_t>() : 0;
  std::string note = std::to_string(differing) + "/" + std::to_string(ulp.numel()) +
                     " differ, max " + std::to_string(worst) + " ulp" + extra;
  if (worst > max_ulp) {
    const int64_t i = torch::argmax(ulp).item<int64_t>();
    note += "; worst:";
    if (input.defined()) note += " x " + number(input.reshape({-1})[i].item<double>());
    note += " ember " + number(te[i].item<double>()) + " torch " + number(tt[i].item<double>());
  }
  if (rounded.defined() && !extra.empty()) {
    // LibTorch's result already is the f32 result rounded.
  } else if (rounded.defined()) {
    const TTensor r = ulps(te, rounded);
    note +=
        "; vs torch's f32 result rounded once: " + std::to_string((r > 0).sum().item<int64_t>()) +
        " differ, max " + std::to_string(r.max().item<int64_t>()) + " ulp";
  }
  record({name, static_cast<double>(worst), kNaN, worst > max_ulp ? "FAIL" : "PASS", note});
}

// Where the two libraries round or approximate differently (transcendental ops, normalisation),
// bit-identity with LibTorch is the wrong yardstick: both are judged against the truth, the op in
// f64 rounded once to the 16-bit dtype. PASS when ember's largest distance from the truth is at
// most max(1, LibTorch's largest distance) ulp. Elements whose true value is below 2^-126 (a
// subnormal in f32 and bf16) are counted apart and reported: ember's f32 exp flushes such results
// (kernels/cpu/vector_math.h), so a sigmoid far out on the negative side gives 0 or 2^-127 there.
void accuracy_case(const std::string& name, const ETensor& e, const TTensor& t,
                   const TTensor& truth, const TTensor& input, const std::string& extra) {
  const TTensor te = to_torch(e).reshape({-1}), tt = t.contiguous().reshape({-1});
  const TTensor exact = truth.contiguous().reshape({-1});
  const TTensor ember_ulp = ulps(te, exact), torch_ulp = ulps(tt, exact);
  const TTensor subnormal =
      (torch::abs(exact.to(torch::kFloat64)) < 1.1754943508222875e-38) & torch::ne(exact, 0);
  const TTensor normal_ember = torch::where(subnormal, torch::zeros_like(ember_ulp), ember_ulp);
  const TTensor normal_torch = torch::where(subnormal, torch::zeros_like(torch_ulp), torch_ulp);
  const int64_t allowed_max = std::max<int64_t>(1, normal_torch.max().item<int64_t>());
  const TTensor allowed = torch::clamp_min(torch_ulp, 1);
  const TTensor worse = (normal_ember > allowed_max);
  const int64_t bad = worse.sum().item<int64_t>();
  std::string note = "vs f64 rounded once: ember max " +
                     std::to_string(normal_ember.max().item<int64_t>()) + " ulp, LibTorch max " +
                     std::to_string(normal_torch.max().item<int64_t>()) + " ulp" + extra;
  const int64_t subnormal_off = ((ember_ulp > allowed) & subnormal).sum().item<int64_t>();
  if (subnormal_off > 0)
    note += "; " + std::to_string(subnormal_off) + " subnormal true values flushed or off in ember";
  if (bad > 0) {
    const int64_t i = torch::argmax(worse.to(torch::kInt32) * ember_ulp).item<int64_t>();
    note += "; worst: x " + number(input.reshape({-1})[i].item<double>()) + " ember " +
            number(te[i].item<double>()) + " torch " + number(tt[i].item<double>()) + " exact " +
            number(exact[i].item<double>());
  }
  record({name, static_cast<double>(normal_ember.max().item<int64_t>()), kNaN,
          bad > 0 ? "FAIL" : "PASS", note});
}

// torch's op, or when LibTorch 1.13 has no CPU kernel for the dtype, torch's op in f32 rounded.
TTensor torch_16(const std::function<TTensor(const TTensor&)>& f, const TTensor& x,
                 std::string* extra) {
  try {
    return f(x);
  } catch (const std::exception&) {
    *extra = " (LibTorch has no CPU kernel: vs its f32 result rounded)";
    return f(x.to(torch::kFloat32)).to(x.scalar_type());
  }
}

// torch's op in f32, rounded once to x's dtype.
TTensor rounded_f32(const std::function<TTensor(const TTensor&)>& f, const TTensor& x) {
  return f(x.to(torch::kFloat32)).to(x.scalar_type());
}

void elementwise_16bit() {
  torch::manual_seed(1234);
  using EU = std::function<ETensor(const ETensor&)>;
  using TU = std::function<TTensor(const TTensor&)>;
  struct Unary {
    const char* name;
    EU e;
    TU t;
  };
  const std::vector<Unary> unary = {
      {"exp", [](auto& x) { return ember::exp(x); }, [](auto& x) { return torch::exp(x); }},
      {"log", [](auto& x) { return ember::log(x); }, [](auto& x) { return torch::log(x); }},
      {"sqrt", [](auto& x) { return ember::sqrt(x); }, [](auto& x) { return torch::sqrt(x); }},
      {"tanh", [](auto& x) { return ember::tanh(x); }, [](auto& x) { return torch::tanh(x); }},
      {"sigmoid", [](auto& x) { return ember::sigmoid(x); },
       [](auto& x) { return torch::sigmoid(x); }},
      {"gelu", [](auto& x) { return ember::gelu(x); }, [](auto& x) { return torch::gelu(x); }},
      {"gelu tanh", [](auto& x) { return ember::gelu(x, ember::GeluApproximation::tanh); },
       [](auto& x) { return torch::gelu(x, "tanh"); }},
  };
  for (DType d : {DType::f16, DType::bf16}) {
    const std::string dn = ember::dtype_name(d);
    // Unary: every one of the 65536 bit patterns.
    const TTensor all =
        torch::arange(0, 65536, torch::kInt32).to(torch::kInt16).view(torch_dtype(d));
    const ETensor eall = from_torch(all);
    for (const Unary& op : unary) {
      std::string extra;
      const TTensor t = torch_16(op.t, all, &extra);
      ETensor e;
      try {
        e = op.e(eall);
      } catch (const std::exception& ex) {
        record(
            {op.name + (" " + dn), kNaN, kNaN, "FAIL", std::string("ember throws: ") + ex.what()});
        continue;
      }
      // exp, log, sqrt and tanh are compared bit for bit (within 1 ulp) with LibTorch; the
      // others against the truth, where the libraries' formulas differ (gelu's erf, the tanh
      // form, sigmoid's far tail).
      const std::string name = std::string(op.name) + " " + dn + ", all 65536 patterns";
      if (std::string(op.name) == "sigmoid" || std::string(op.name).rfind("gelu", 0) == 0) {
        // The truths of gelu in f64 in forms that do not cancel: x sigmoid(2 z) for the tanh
        // form and 0.5 x erfc(-x / sqrt 2) for the exact one. The textbook 0.5 x (1 + tanh z)
        // and 0.5 x (1 + erf(x / sqrt 2)) cancel in f64 too for x below about -6, where the
        // value is near 1e-16.
        const TTensor x64 = all.to(torch::kFloat64);
        const std::string op_name = op.name;
        TTensor truth = op.t(x64);
        if (op_name == "gelu tanh")
          truth = x64 *
                  torch::sigmoid(2.0 * 0.79788456080286535588 * (x64 + 0.044715 * x64 * x64 * x64));
        if (op_name == "gelu") truth = 0.5 * x64 * torch::erfc(-x64 * 0.70710678118654752440);
        accuracy_case(name, e, t, truth.to(torch_dtype(d)), all, extra);
      } else {
        ulp_case(name, e, t, 1, extra, rounded_f32(op.t, all), all);
      }
    }
    // Binary: random pairs, some of them large.
    const TTensor a = (torch::randn({1 << 18}) * 8).to(torch_dtype(d));
    const TTensor b = (torch::randn({1 << 18}) * 8).to(torch_dtype(d));
    const ETensor ea = from_torch(a), eb = from_torch(b);
    ulp_case("add " + dn + " random", ember::add(ea, eb), torch::add(a, b), 0);
    ulp_case("sub " + dn + " random", ember::sub(ea, eb), torch::sub(a, b), 0);
    ulp_case("mul " + dn + " random", ember::mul(ea, eb), torch::mul(a, b), 0);
    ulp_case("div " + dn + " random", ember::div(ea, eb), torch::div(a, b), 0);
    // A number the dtype cannot hold. ember's add and sub round it to the dtype first, as
    // LibTorch does. Its mul and div keep it in f32 and round once, as PyTorch 2.x's mul and div
    // kernels read it (original_scalar_value<opmath_t>); LibTorch 1.13 rounds it to the dtype
    // first there too, so those rows are INFO: the values where the two rules part.
    for (const double s : {1.0 / 3.0, 0.1}) {
      const std::string sn = number(s);
      ulp_case("add " + dn + " + " + sn, ember::add(ea, s), torch::add(a, s), 0);
      ulp_case("sub " + dn + " - " + sn, ember::sub(ea, s), torch::sub(a, s), 0);
      const float s32 = static_cast<float>(s);
      const struct {
        const char* name;
        ETensor mine;
        TTensor once, theirs;
      } scaled[] = {
          {"mul", ember::mul(ea, s), (a.to(torch::kFloat32) * s32).to(torch_dtype(d)), a * s},
          {"div", ember::div(ea, s), (a.to(torch::kFloat32) / s32).to(torch_dtype(d)), a / s},
      };
      for (const auto& op : scaled) {
        const TTensor mine = to_torch(op.mine).to(torch::kFloat32);
        const int64_t off_once = mine.ne(op.once.to(torch::kFloat32)).sum().item<int64_t>();
        const int64_t off_libtorch = mine.ne(op.theirs.to(torch::kFloat32)).sum().item<int64_t>();
        record({std::string(op.name) + " " + dn + " by " + sn, kNaN, kNaN,
                off_once == 0 ? "INFO" : "FAIL",
                "ember is f32(x) " + std::string(op.name == std::string("mul") ? "*" : "/") +
                    " f32(s) rounded once (" + std::to_string(off_once) +
                    " values off that); LibTorch 1.13, s rounded first: " +
                    std::to_string(off_libtorch) + " of " + std::to_string(a.numel()) +
                    " values differ"});
      }
    }
    // In place with a wider operand: computed in f32 and rounded once into the 16-bit tensor.
    const TTensor wide = torch::randn({1 << 18}) * 0.01;
    const ETensor ewide = from_torch(wide);
    {
      TTensor t = a.clone();
      ETensor e = from_torch(a);
      t.add_(wide, -0.3);
      e.add_(ewide, -0.3);
      ulp_case("add_ " + dn + " += f32 * -0.3 (in place)", e, t, 0);
      TTensor tm = a.clone();
      ETensor em = from_torch(a);
      tm.mul_(wide);
      em.mul_(ewide);
      ulp_case("mul_ " + dn + " *= f32 (in place)", em, tm, 0);
    }
    // softmax and layer_norm on rows of 64.
    const TTensor x = (torch::randn({512, 64}) * 3).to(torch_dtype(d));
    const ETensor ex = from_torch(x);
    std::string extra;
    const auto softmax = [](const TTensor& v) { return torch::softmax(v, -1); };
    ulp_case("softmax " + dn + " (512, 64) dim -1", ember::softmax(ex, -1),
             torch_16(softmax, x, &extra), 1, extra, rounded_f32(softmax, x));
    const TTensor w = torch::randn({64}).to(torch_dtype(d)),
                  bias = torch::randn({64}).to(torch_dtype(d));
    const auto layer_norm = [&](const TTensor& v) {
      return torch::layer_norm(v, {64}, w.to(v.scalar_type()), bias.to(v.scalar_type()));
    };
    extra.clear();
    accuracy_case("layer_norm " + dn + " (512, 64) weight, bias",
                  ember::layer_norm(ex, {64}, from_torch(w), from_torch(bias)),
                  torch_16(layer_norm, x, &extra),
                  layer_norm(x.to(torch::kFloat64)).to(torch_dtype(d)), x, extra);
    // 5. reductions: f32 accumulation, the input's dtype back.
    const TTensor r = (torch::randn({64, 100}) + 0.5).to(torch_dtype(d));
    const ETensor er = from_torch(r);
    ulp_case("sum " + dn + " all", ember::sum(er), torch::sum(r), 1);
    ulp_case("sum " + dn + " dim 1", ember::sum(er, {1}), torch::sum(r, 1), 1);
    ulp_case("mean " + dn + " all", ember::mean(er), torch::mean(r), 1);
    ulp_case("mean " + dn + " dim 0", ember::mean(er, {0}), torch::mean(r, 0), 1);
    extra.clear();
    ulp_case("var " + dn + " dim 1", ember::var(er, {1}),
             torch_16([](const TTensor& v) { return torch::var(v, 1); }, r, &extra), 1, extra);
    ulp_case("max " + dn + " all", ember::max(er), torch::max(r), 0);
    ulp_case("max " + dn + " dim 1", ember::max(er, {1}), torch::amax(r, 1), 0);
    const TTensor ones = torch::ones({10000}, torch_dtype(d));
    ulp_case("sum " + dn + " of 10000 ones (f32 accumulation)", ember::sum(from_torch(ones)),
             torch::sum(ones), 0);
  }
}

}  // namespace

void dtypes_16bit() {
  casts();
  rounding_16bit();
  elementwise_16bit();
}

}  // namespace conformance
