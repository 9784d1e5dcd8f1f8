// Conformance, dtypes: type promotion of every binary op over every pair of ember's dtypes
// (tensor-tensor, with a 0-d tensor, with a bare number), and integer ops' values (true division,
// negative powers, overflow wrap, reductions of integers and bools, abs / neg / clamp). The inputs
// are made by LibTorch and copied into ember bit for bit. Casts and 16-bit values:
// dtypes_16bit.cpp.
#include "bench/conformance/harness.h"

namespace conformance {

namespace {

// ---- helpers
// ------------------------------------------------------------------------------------

// The result's dtype, or "throws".
std::string outcome(const std::function<ETensor()>& f, ETensor* out = nullptr) {
  try {
    ETensor r = f();
    if (out != nullptr) *out = r;
    return ember::dtype_name(r.dtype());
  } catch (const std::exception&) {
    return "throws";
  }
}

std::string outcome(const std::function<TTensor()>& f, TTensor* out = nullptr) {
  try {
    TTensor r = f();
    if (out != nullptr) *out = r;
    return name_of(r.scalar_type());
  } catch (const std::exception&) {
    return "throws";
  }
}

// 1, 2, 0, 3 (or the given values) in `dtype`, made by LibTorch; `dim0` makes a 0-d tensor.
TTensor values_in(DType dtype, std::vector<double> v, bool dim0 = false) {
  TTensor t = torch::tensor(v, torch::kFloat64).to(torch_dtype(dtype));
  return dim0 ? t[0].clone() : t;
}

// Value agreement of two results of the same dtype: exact for integers and bools, a few units in
// the last place for floats (pow's libm may differ by an ulp).
bool same_values(const ETensor& e, const TTensor& t) {
  const Diff d = compare(e, t);
  if (!d.problem.empty()) return false;
  const double tol = e.dtype() == DType::f64    ? 1e-14
                     : e.dtype() == DType::f32  ? 1e-6
                     : e.dtype() == DType::f16  ? 2e-3
                     : e.dtype() == DType::bf16 ? 1.6e-2
                                                : 0.0;
  return d.error <= tol;
}

// Collects the disagreements of many sub-cases into one recorded case.
struct Tally {
  int total = 0;
  int bad = 0;
  std::string note;
  void add(const std::string& what, bool ok) {
    ++total;
    if (ok) return;
    ++bad;
    if (bad <= 6) note += (note.empty() ? "" : "; ") + what;
  }
  void record_as(const std::string& name, const char* bad_status = "FAIL") {
    std::string n = std::to_string(total - bad) + "/" + std::to_string(total) + " agree";
    if (bad > 0) n += ": " + note + (bad > 6 ? "; ..." : "");
    record({name, kNaN, kNaN, bad > 0 ? bad_status : "PASS", n});
  }
};

// ---- 1. type promotion
// -----------------------------------------------------------------------------

struct BinaryOp {
  const char* name;
  std::function<ETensor(const ETensor&, const ETensor&)> e;
  std::function<TTensor(const TTensor&, const TTensor&)> t;
};

std::vector<BinaryOp> binary_ops() {
  const ETensor ec = ebool({1, 0, 1, 0}, {4});
  const TTensor tc = to_torch(ec);
  return {
      {"add", [](auto& a, auto& b) { return ember::add(a, b); },
       [](auto& a, auto& b) { return torch::add(a, b); }},
      {"sub", [](auto& a, auto& b) { return ember::sub(a, b); },
       [](auto& a, auto& b) { return torch::sub(a, b); }},
      {"mul", [](auto& a, auto& b) { return ember::mul(a, b); },
       [](auto& a, auto& b) { return torch::mul(a, b); }},
      {"div", [](auto& a, auto& b) { return ember::div(a, b); },
       [](auto& a, auto& b) { return torch::div(a, b); }},
      {"pow", [](auto& a, auto& b) { return ember::pow(a, b); },
       [](auto& a, auto& b) { return torch::pow(a, b); }},
      {"maximum", [](auto& a, auto& b) { return ember::maximum(a, b); },
       [](auto& a, auto& b) { return torch::maximum(a, b); }},
      {"minimum", [](auto& a, auto& b) { return ember::minimum(a, b); },
       [](auto& a, auto& b) { return torch::minimum(a, b); }},
      {"eq", [](auto& a, auto& b) { return ember::eq(a, b); },
       [](auto& a, auto& b) { return torch::eq(a, b); }},
      {"ne", [](auto& a, auto& b) { return ember::ne(a, b); },
       [](auto& a, auto& b) { return torch::ne(a, b); }},
      {"lt", [](auto& a, auto& b) { return ember::lt(a, b); },
       [](auto& a, auto& b) { return torch::lt(a, b); }},
      {"le", [](auto& a, auto& b) { return ember::le(a, b); },
       [](auto& a, auto& b) { return torch::le(a, b); }},
      {"gt", [](auto& a, auto& b) { return ember::gt(a, b); },
       [](auto& a, auto& b) { return torch::gt(a, b); }},
      {"ge", [](auto& a, auto& b) { return ember::ge(a, b); },
       [](auto& a, auto& b) { return torch::ge(a, b); }},
      {"where", [ec](auto& a, auto& b) { return ember::where(ec, a, b); },
       [tc](auto& a, auto& b) { return torch::where(tc, a, b); }},
  };
}

// One case per op and form: the result dtype (or a throw) and the values for all 64 pairs.
void promotion_tensor_tensor() {
  const char* forms[] = {"tensor-tensor", "tensor-0d", "0d-tensor"};
  for (const BinaryOp& op : binary_ops()) {
    for (int form = 0; form < 3; ++form) {
      Tally tally;
      for (DType da : ember::kAllDTypes) {
        for (DType db : ember::kAllDTypes) {
          const TTensor ta = values_in(da, {1, 2, 0, 3}, form == 2);
          const TTensor tb = values_in(db, {2, 1, 3, 0}, form == 1);
          const ETensor ea = from_torch(ta), eb = from_torch(tb);
          ETensor er;
          TTensor tr;
          const std::string e = outcome([&] { return op.e(ea, eb); }, &er);
          const std::string t = outcome([&] { return op.t(ta, tb); }, &tr);
          const std::string pair =
              std::string(ember::dtype_name(da)) + "," + ember::dtype_name(db) + ": ";
          if (e != t) {
            tally.add(pair + "ember " + e + " torch " + t, false);
          } else if (e != "throws" && !same_values(er, tr)) {
            tally.add(pair + "values " + sample(er, tr, 2), false);
          } else {
            tally.add("", true);
          }
        }
      }
      tally.record_as(std::string("promotion ") + op.name + " " + forms[form]);
    }
  }
}

// The condition of where's cases with a number: {1, 0, 1, 0}.
TTensor torch_mask() {
  return torch::tensor({true, false, true, false});
}
ETensor ember_mask() {
  return ebool({1, 0, 1, 0}, {4});
}

ember::Scalar ember_scalar(int kind) {
  return kind == 0 ? ember::Scalar(2) : kind == 1 ? ember::Scalar(2.5) : ember::Scalar(true);
}

c10::Scalar torch_scalar(int kind) {
  return kind == 0 ? c10::Scalar(int64_t{2}) : kind == 1 ? c10::Scalar(2.5) : c10::Scalar(true);
}

// op(tensor, number) for the ops with a Scalar overload in ember, and number op tensor for the
// operators (LibTorch's side is Python's: 2 - t is rsub, 2 / t is reciprocal(t) * 2).
void promotion_with_numbers() {
  using ES = ember::Scalar;
  using CS = c10::Scalar;
  struct ScalarOp {
    std::string name;
    std::function<ETensor(const ETensor&, const ES&)> e;
    std::function<TTensor(const TTensor&, const CS&)> t;
  };
  const std::vector<ScalarOp> ops = {
      {"add(t, n)", [](auto& a, auto& s) { return ember::add(a, s); },
       [](auto& a, auto& s) { return torch::add(a, s); }},
      {"sub(t, n)", [](auto& a, auto& s) { return ember::sub(a, s); },
       [](auto& a, auto& s) { return torch::sub(a, s); }},
      {"mul(t, n)", [](auto& a, auto& s) { return ember::mul(a, s); },
       [](auto& a, auto& s) { return torch::mul(a, s); }},
      {"div(t, n)", [](auto& a, auto& s) { return ember::div(a, s); },
       [](auto& a, auto& s) { return torch::div(a, s); }},
      {"pow(t, n)", [](auto& a, auto& s) { return ember::pow(a, s); },
       [](auto& a, auto& s) { return torch::pow(a, s); }},
      {"eq(t, n)", [](auto& a, auto& s) { return ember::eq(a, s); },
       [](auto& a, auto& s) { return torch::eq(a, s); }},
      {"ne(t, n)", [](auto& a, auto& s) { return ember::ne(a, s); },
       [](auto& a, auto& s) { return torch::ne(a, s); }},
      {"lt(t, n)", [](auto& a, auto& s) { return ember::lt(a, s); },
       [](auto& a, auto& s) { return torch::lt(a, s); }},
      {"le(t, n)", [](auto& a, auto& s) { return ember::le(a, s); },
       [](auto& a, auto& s) { return torch::le(a, s); }},
      {"gt(t, n)", [](auto& a, auto& s) { return ember::gt(a, s); },
       [](auto& a, auto& s) { return torch::gt(a, s); }},
      {"ge(t, n)", [](auto& a, auto& s) { return ember::ge(a, s); },
       [](auto& a, auto& s) { return torch::ge(a, s); }},
      {"n + t", [](auto& a, auto& s) { return s + a; },
       [](auto& a, auto& s) { return torch::add(a, s); }},
      {"n - t", [](auto& a, auto& s) { return s - a; },
       [](auto& a, auto& s) { return torch::rsub(a, s); }},
      {"n * t", [](auto& a, auto& s) { return s * a; },
       [](auto& a, auto& s) { return torch::mul(a, s); }},
      {"n / t", [](auto& a, auto& s) { return s / a; },
       [](auto& a, auto& s) { return torch::mul(torch::reciprocal(a), s); }},
      // where with a number on either side, under the mask {1, 0, 1, 0} (t has 4 elements).
      {"where(mask, t, n)", [](auto& a, auto& s) { return ember::where(ember_mask(), a, s); },
       [](auto& a, auto& s) { return torch::where(torch_mask(), a, s); }},
      {"where(mask, n, t)", [](auto& a, auto& s) { return ember::where(ember_mask(), s, a); },
       [](auto& a, auto& s) { return torch::where(torch_mask(), s, a); }},
  };
  const char* kinds[] = {"int 2", "float 2.5", "bool true"};
  for (const ScalarOp& op : ops) {
    Tally tally;
    for (DType d : ember::kAllDTypes) {
      for (int kind = 0; kind < 3; ++kind) {
        const TTensor ta = values_in(d, {1, 2, 0, 3});
        const ETensor ea = from_torch(ta);
        ETensor er;
        TTensor tr;
        const std::string e = outcome([&] { return op.e(ea, ember_scalar(kind)); }, &er);
        const std::string t = outcome([&] { return op.t(ta, torch_scalar(kind)); }, &tr);
        const std::string what = std::string(ember::dtype_name(d)) + " with " + kinds[kind] + ": ";
        if (e != t)
          tally.add(what + "ember " + e + " torch " + t, false);
        else if (e != "throws" && !same_values(er, tr))
          tally.add(what + "values " + sample(er, tr, 2), false);
        else
          tally.add("", true);
      }
    }
    tally.record_as("promotion " + op.name + ", n int/float/bool");
  }
  // result_type itself.
  Tally tt, ts;
  for (DType da : ember::kAllDTypes) {
    for (DType db : ember::kAllDTypes) {
      for (int form = 0; form < 3; ++form) {
        const TTensor ta = values_in(da, {1, 2}, form == 2), tb = values_in(db, {1, 2}, form == 1);
        const std::string e = ember::dtype_name(ember::result_type(from_torch(ta), from_torch(tb)));
        const std::string t = name_of(at::result_type(ta, tb));
        tt.add(std::string(ember::dtype_name(da)) + "," + ember::dtype_name(db) + " form " +
                   std::to_string(form) + ": ember " + e + " torch " + t,
               e == t);
      }
    }
    for (int kind = 0; kind < 3; ++kind) {
      const TTensor ta = values_in(da, {1, 2});
      const std::string e =
          ember::dtype_name(ember::result_type(from_torch(ta), ember_scalar(kind)));
      const std::string t = name_of(at::result_type(ta, torch_scalar(kind)));
      ts.add(std::string(ember::dtype_name(da)) + " with " + kinds[kind] + ": ember " + e +
                 " torch " + t,
             e == t);
    }
  }
  tt.record_as("result_type(tensor, tensor) vs at::result_type, 3 forms");
  ts.record_as("result_type(tensor, number) vs at::result_type");
}

// ---- 2. integer ops' values
// ------------------------------------------------------------------------

ETensor eint(const std::vector<int64_t>& v, DType d) {
  return ei64(v, {static_cast<int64_t>(v.size())}).to(d);
}

void integer_ops() {
  auto op2 = [](const std::string& name, const ETensor& a, const ETensor& b,
                std::function<ETensor(const ETensor&, const ETensor&)> fe,
                std::function<TTensor(const TTensor&, const TTensor&)> ft) {
    check(
        name, {a, b}, [=](const EList& in) { return fe(in[0], in[1]); },
        [=](const TList& in) { return ft(in[0], in[1]); }, false);
  };
  auto op1 = [](const std::string& name, const ETensor& a,
                std::function<ETensor(const ETensor&)> fe,
                std::function<TTensor(const TTensor&)> ft) {
    check(
        name, {a}, [=](const EList& in) { return fe(in[0]); },
        [=](const TList& in) { return ft(in[0]); }, false);
  };
  const auto ediv = [](const ETensor& a, const ETensor& b) { return ember::div(a, b); };
  const auto tdiv = [](const TTensor& a, const TTensor& b) { return torch::div(a, b); };
  for (DType d : {DType::i64, DType::i32, DType::u8}) {
    const std::string n = ember::dtype_name(d);
    const std::vector<int64_t> num = d == DType::u8 ? std::vector<int64_t>{7, 200, 1, 0, 3}
                                                    : std::vector<int64_t>{7, -7, 1, 0, -3};
    op2("div " + n + " / " + n + " (true division, x/0, 0/0)", eint(num, d),
        eint({2, 2, 0, 0, 2}, d), ediv, tdiv);
  }
  op2("div bool / bool", ebool({1, 0, 1, 0}, {4}), ebool({1, 1, 0, 0}, {4}), ediv, tdiv);
  const auto epow = [](const ETensor& a, const ETensor& b) { return ember::pow(a, b); };
  const auto tpow = [](const TTensor& a, const TTensor& b) { return torch::pow(a, b); };
  op2("pow i64 ^ i64 (non-negative)", eint({2, -3, 0, 5, 10}, DType::i64),
      eint({3, 3, 0, 2, 18}, DType::i64), epow, tpow);
  op2("pow i64 ^ i64 with a negative exponent (throws)", eint({2, 1, -1}, DType::i64),
      eint({-1, -2, -3}, DType::i64), epow, tpow);
  op2("pow i32 ^ i32 overflow wrap", eint({3, 7}, DType::i32), eint({21, 12}, DType::i32), epow,
      tpow);
  op1(
      "pow i64 ^ int -1 (throws)", eint({2, 1, -1}, DType::i64),
      [](const ETensor& a) { return ember::pow(a, -1); },
      [](const TTensor& a) { return torch::pow(a, -1); });
  op1(
      "pow i32 ^ float 0.5 (f32)", eint({4, 2, 0}, DType::i32),
      [](const ETensor& a) { return ember::pow(a, 0.5); },
      [](const TTensor& a) { return torch::pow(a, 0.5); });
  op1(
      "pow u8 ^ int 2 (wraps)", eint({3, 16, 255}, DType::u8),
      [](const ETensor& a) { return ember::pow(a, 2); },
      [](const TTensor& a) { return torch::pow(a, 2); });
  const auto eadd = [](const ETensor& a, const ETensor& b) { return ember::add(a, b); };
  const auto tadd = [](const TTensor& a, const TTensor& b) { return torch::add(a, b); };
  const auto emul = [](const ETensor& a, const ETensor& b) { return ember::mul(a, b); };
  const auto tmul = [](const TTensor& a, const TTensor& b) { return torch::mul(a, b); };
  const auto esub = [](const ETensor& a, const ETensor& b) { return ember::sub(a, b); };
  const auto tsub = [](const TTensor& a, const TTensor& b) { return torch::sub(a, b); };
  op2("add i32 overflow wrap", eint({2147483647, -2147483648}, DType::i32),
      eint({1, -1}, DType::i32), eadd, tadd);
  op2("mul i32 overflow wrap", eint({65536, 46341, -65536}, DType::i32),
      eint({65536, 46341, 32768}, DType::i32), emul, tmul);
  op2("add i64 overflow wrap", eint({std::numeric_limits<int64_t>::max()}, DType::i64),
      eint({1}, DType::i64), eadd, tadd);
  op2("add u8 wrap", eint({250, 255}, DType::u8), eint({10, 1}, DType::u8), eadd, tadd);
  op2("sub u8 wrap", eint({0, 5}, DType::u8), eint({1, 10}, DType::u8), esub, tsub);
  op2("mul u8 wrap", eint({16, 255}, DType::u8), eint({17, 255}, DType::u8), emul, tmul);
  op2("add bool + bool", ebool({1, 1, 0}, {3}), ebool({1, 0, 0}, {3}), eadd, tadd);
  op2("mul bool * bool", ebool({1, 1, 0}, {3}), ebool({1, 0, 0}, {3}), emul, tmul);
  // Reductions of integers and bools.
  const std::vector<std::pair<std::string, ETensor>> ints = {
      {"i32", eint({2147483647, 1, -5, 7}, DType::i32)},
      {"u8", eint({255, 255, 3, 0}, DType::u8)},
      {"i64", eint({std::numeric_limits<int64_t>::max(), 1, -5, 7}, DType::i64)},
      {"bool", ebool({1, 0, 1, 1}, {4})}};
  for (const auto& [n, x] : ints) {
    op1(
        "sum of " + n + " (i64, no wrap below i64)", x,
        [](const ETensor& a) { return ember::sum(a); },
        [](const TTensor& a) { return torch::sum(a); });
    op1(
        "mean of " + n + " (throws in torch)", x, [](const ETensor& a) { return ember::mean(a); },
        [](const TTensor& a) { return torch::mean(a); });
    op1(
        "max of " + n, x, [](const ETensor& a) { return ember::max(a); },
        [](const TTensor& a) { return torch::max(a); });
    op1(
        "min of " + n + " dim 0", x, [](const ETensor& a) { return ember::min(a, {0}); },
        [](const TTensor& a) { return torch::amin(a, {0}); });
    op1(
        "argmax of " + n, x, [](const ETensor& a) { return ember::argmax(a); },
        [](const TTensor& a) { return torch::argmax(a); });
    op1(
        "argmin of " + n + " dim 0", x, [](const ETensor& a) { return ember::argmin(a, 0); },
        [](const TTensor& a) { return torch::argmin(a, 0); });
  }
  // abs / neg / clamp.
  const ETensor u = eint({0, 1, 128, 255}, DType::u8);
  op1(
      "neg u8 (wraps)", u, [](const ETensor& a) { return ember::neg(a); },
      [](const TTensor& a) { return torch::neg(a); });
  op1(
      "abs u8 (identity)", u, [](const ETensor& a) { return ember::abs(a); },
      [](const TTensor& a) { return torch::abs(a); });
  op1(
      "abs i32 of INT_MIN (stays INT_MIN)", eint({-2147483648, -3, 4}, DType::i32),
      [](const ETensor& a) { return ember::abs(a); },
      [](const TTensor& a) { return torch::abs(a); });
  op1(
      "neg bool (throws in torch)", ebool({1, 0}, {2}),
      [](const ETensor& a) { return ember::neg(a); },
      [](const TTensor& a) { return torch::neg(a); });
  op1(
      "abs bool", ebool({1, 0}, {2}), [](const ETensor& a) { return ember::abs(a); },
      [](const TTensor& a) { return torch::abs(a); });
  for (DType d : {DType::i64, DType::i32, DType::u8}) {
    const std::string n = ember::dtype_name(d);
    const ETensor x = d == DType::u8 ? eint({0, 1, 2, 3, 200}, d) : eint({-5, -1, 0, 2, 9}, d);
    op1(
        "clamp " + n + " [-1, 2] (integer bounds)", x,
        [](const ETensor& a) { return ember::clamp(a, -1, 2); },
        [](const TTensor& a) { return torch::clamp(a, int64_t{-1}, int64_t{2}); });
    op1(
        "clamp " + n + " [-1.5, 2.5] (float bounds)", x,
        [](const ETensor& a) { return ember::clamp(a, -1.5, 2.5); },
        [](const TTensor& a) { return torch::clamp(a, -1.5, 2.5); });
    op1(
        "clamp " + n + " min 1 only", x,
        [](const ETensor& a) { return ember::clamp(a, 1, std::nullopt); },
        [](const TTensor& a) { return torch::clamp(a, int64_t{1}); });
  }
}

}  // namespace

void dtypes() {
  promotion_tensor_tensor();
  promotion_with_numbers();
  integer_ops();
}

}  // namespace conformance
