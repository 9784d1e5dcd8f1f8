#!/usr/bin/env python3
"""The cases of bench/gpu/kernels_bench.cpp in PyTorch on the same GPU, next to ember's numbers.

Timed as ember's bench times them: CUDA events around each call, a warm-up, the L2 cache flushed
before every timed call (a write over 2x the L2 size), the median over the timed calls. Each case
runs eagerly, and through torch.compile where that works (a failure is reported, not fatal): each
compiled case starts from a reset Dynamo cache with static shapes (dynamic=False), so that no case
runs a graph compiled for another case's shapes, or falls back to eager past the recompile limit.
The table and torch_bench.json are rewritten after every case, and SIGTERM (run.sh's `timeout`)
stops the run and writes them with what was measured so far.

Reads ember's Google Benchmark JSON (ember_gpu_bench --benchmark_out=FILE
--benchmark_out_format=json, with --benchmark_repetitions and aggregates) and prints a markdown
table: case, ember GB/s (ms, TFLOP/s or images/s where the case is not memory-bound), % of the copy
bandwidth, PyTorch eager and compiled, and ember / PyTorch (> 1: ember is faster). The table also
goes to OUT/side_by_side.md, PyTorch's own numbers to OUT/torch_bench.json.

    python3 bench/gpu/torch_side_by_side.py --ember-json $OUT/gpu_bench.json --out $OUT
"""
import argparse
import json
import math
import os
import signal
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ember_table  # noqa: E402  (the same reading of ember's JSON as run.sh's summary)

MB = 1 << 20
N256 = 256 * MB // 4  # f32 elements in 256 MB
ROWS = [(1024, "1K"), (4096, "4K"), (32768, "32K")]


class Timer:
    """CUDA-event timing with an L2 flush before each call (as ember's EventPair)."""

    def __init__(self):
        props = torch.cuda.get_device_properties(0)
        l2 = getattr(props, "L2_cache_size", 0) or 64 * MB
        self.flush_buffer = torch.empty(2 * l2, dtype=torch.uint8, device="cuda")
        self.start = torch.cuda.Event(enable_timing=True)
        self.stop = torch.cuda.Event(enable_timing=True)
        self.flips = 0

    def once(self, fn, setup=None):
        if setup:
            setup()
        self.flips ^= 1
        self.flush_buffer.fill_(self.flips)
        self.start.record()
        fn()
        self.stop.record()
        self.stop.synchronize()
        return self.start.elapsed_time(self.stop) / 1e3

    def median(self, fn, calls, setup=None, warmup=3, warmup_s=0.0):
        """Median seconds of `calls` timed calls, after `warmup` calls and at least `warmup_s`."""
        warm_until = time.perf_counter() + warmup_s
        done = 0
        while done < warmup or time.perf_counter() < warm_until:
            if setup:
                setup()
            fn()
            done += 1
            if done >= warmup:
                torch.cuda.synchronize()
        torch.cuda.synchronize()
        seconds = sorted(self.once(fn, setup) for _ in range(calls))
        return seconds[len(seconds) // 2]


def copy_bandwidth(timer):
    """As kernels_bench.cpp's: 200 ms of copies first (the GPU leaves its idle clocks)."""
    src = torch.randn(N256, device="cuda")
    dst = torch.empty_like(src)
    seconds = timer.median(lambda: dst.copy_(src), 21, warmup_s=0.2)
    return 2 * 256 * MB / seconds / 1e9


# ---- the cases: name -> (kind, amount, make) ---------------------------------------------------
# kind "bytes": amount is the bytes one call must move (as kernels_bench.cpp counts them);
# "flops": floating-point operations; "images": images per training step.
# make(compiled) returns (fn, setup); compiled=True wraps the op in torch.compile.


def maybe_compile(fn, compiled):
    """fn itself, or torch.compile of it with static shapes. Always a Python function: some
    versions let torch.compile(torch.add) bypass Dynamo (no Python frame) and run eagerly."""
    if not compiled:
        return fn
    return torch.compile(lambda *args: fn(*args), dynamic=False)


def case_binary(op, dtype, misaligned=False):
    """misaligned: views one element into their buffers, as kernels_bench.cpp's _misaligned."""
    def make(compiled):
        n = 256 * MB // torch.tensor([], dtype=dtype).element_size()
        first = 1 if misaligned else 0
        a = torch.randn(n + first, device="cuda").to(dtype)[first:]
        b = torch.randn(n + first, device="cuda").to(dtype)[first:]
        f = maybe_compile(op, compiled)
        return (lambda: f(a, b)), None

    return ("bytes", 3 * 256 * MB, make)


def case_bias_add(dtype=torch.bfloat16, channels=64, side=32):
    """conv2d's bias over resnet9's activations (512, channels, side, side), broadcast
    (kernels_bench.cpp's)."""
    def make(compiled):
        x = torch.randn(512, channels, side, side, device="cuda").to(dtype)
        bias = torch.randn(channels, device="cuda").to(dtype).reshape(1, channels, 1, 1)
        f = maybe_compile(torch.add, compiled)
        return (lambda: f(x, bias)), None

    element = torch.tensor([], dtype=dtype).element_size()
    return ("bytes", 2 * element * 512 * channels * side * side, make)


def case_sum_channels():
    """A per-channel sum over resnet9's first activations, bf16 (kernels_bench.cpp's)."""
    def make(compiled):
        x = torch.randn(512, 64, 32, 32, device="cuda").to(torch.bfloat16)
        f = maybe_compile(lambda t: t.sum((0, 2, 3)), compiled)
        return (lambda: f(x)), None

    return ("bytes", 2 * 512 * 64 * 32 * 32, make)


def case_cast(dtype=torch.bfloat16):
    def make(compiled):
        x = torch.randn(N256, device="cuda")
        f = maybe_compile(lambda t: t.to(dtype), compiled)
        return (lambda: f(x)), None

    return ("bytes", 6 * N256, make)


def case_softmax(row):
    def make(compiled):
        x = torch.randn(N256 // row, row, device="cuda")
        f = maybe_compile(lambda t: torch.softmax(t, -1), compiled)
        return (lambda: f(x)), None

    return ("bytes", 2 * 4 * N256, make)


def case_layer_norm(row, backward):
    def make(compiled):
        x = torch.randn(N256 // row, row, device="cuda", requires_grad=backward)
        w = torch.randn(row, device="cuda", requires_grad=backward)
        b = torch.randn(row, device="cuda", requires_grad=backward)
        dy = torch.randn(N256 // row, row, device="cuda")
        f = maybe_compile(lambda t, w_, b_: F.layer_norm(t, (row,), w_, b_), compiled)

        def call():
            y = f(x, w, b)
            if backward:
                y.backward(dy)

        def drop_grads():
            x.grad = w.grad = b.grad = None

        return call, (drop_grads if backward else None)

    return ("bytes", (5 if backward else 2) * 4 * N256, make)


def case_cross_entropy(classes, backward):
    def make(compiled):
        logits = torch.randn(N256 // classes, classes, device="cuda", requires_grad=backward)
        target = torch.randint(0, classes, (N256 // classes,), device="cuda")
        f = maybe_compile(F.cross_entropy, compiled)

        def call():
            loss = f(logits, target)
            if backward:
                loss.backward()

        def drop_grads():
            logits.grad = None

        return call, drop_grads

    return ("bytes", (3 if backward else 1) * 4 * N256, make)


def case_batch_norm(dtype=torch.bfloat16, relu=False):
    """Training-mode batch norm over resnet9's first activations, bf16 (or f16) with f32
    parameters; relu: with F.relu after it (ember fuses the two)."""
    shape = (512, 64, 32, 32)

    def make(compiled):
        x = torch.randn(shape, device="cuda").to(dtype).requires_grad_()
        w = torch.ones(64, device="cuda", requires_grad=True)
        b = torch.zeros(64, device="cuda", requires_grad=True)
        mean, var = torch.zeros(64, device="cuda"), torch.ones(64, device="cuda")
        dy = torch.randn(shape, device="cuda").to(dtype)
        def batch_norm(t, w_, b_):
            y = F.batch_norm(t, mean, var, w_, b_, True, 0.1, 1e-5)
            return F.relu(y) if relu else y

        f = maybe_compile(batch_norm, compiled)

        def call():
            f(x, w, b).backward(dy)

        def drop_grads():
            x.grad = w.grad = b.grad = None

        return call, drop_grads

    return ("bytes", 5 * 2 * 512 * 64 * 32 * 32, make)


def case_adamw():
    tensors, size = 25, 4_000_000

    def make(compiled):
        if compiled:
            raise NotApplicable("torch's fused AdamW is already fused")
        params = [torch.randn(size, device="cuda", requires_grad=True) for _ in range(tensors)]
        for p in params:
            p.grad = torch.randn_like(p)
        # ember's optim::AdamWOptions: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 1e-2.
        opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8,
                                weight_decay=1e-2, fused=True)
        return opt.step, None

    return ("bytes", 28 * tensors * size, make)


def case_matmul(size, dtype):
    def make(compiled):
        a = torch.randn(size, size, device="cuda").to(dtype)
        b = torch.randn(size, size, device="cuda").to(dtype)
        f = maybe_compile(torch.matmul, compiled)
        return (lambda: f(a, b)), None

    return ("flops", 2 * size**3, make)


def case_resnet9(amp="bf16"):
    """ember's resnet9 step: bf16 or fp16 autocast (fp16 with a GradScaler), f32 with cuDNN's
    TF32 off (ember's f32 convolutions are exact f32; PyTorch's default would use TF32), or tf32:
    f32 with TF32 convolutions and matmuls (PyTorch's default convolutions; ember --tf32)."""
    def make(compiled):
        if compiled:  # a minute of compiling: torch_train_loop.py --compile measures it
            raise NotApplicable("see torch_train_loop.py --compile")
        import torch_train_loop

        # Set for each case as it is made; the tf32 case's switches are put back after its step.
        torch.backends.cudnn.allow_tf32 = amp != "none"
        if amp != "tf32":
            step, _ = torch_train_loop.make_step(64, 512, amp, compile_model=compiled)
            return step, None
        inner, _ = torch_train_loop.make_step(64, 512, "none", compile_model=compiled)

        def step():
            matmul_before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = True
            try:
                inner()
            finally:
                torch.backends.cuda.matmul.allow_tf32 = matmul_before
        return step, None

    return ("images", 512, make)


def all_cases():
    cases = {
        "copy_d2d_256MB": ("bytes", 2 * 256 * MB, None),
        "add_f32_256MB": case_binary(torch.add, torch.float32),
        "add_bf16_256MB": case_binary(torch.add, torch.bfloat16),
        "add_f16_256MB": case_binary(torch.add, torch.float16),
        "add_f32_256MB_misaligned": case_binary(torch.add, torch.float32, misaligned=True),
        "add_bf16_256MB_misaligned": case_binary(torch.add, torch.bfloat16, misaligned=True),
        "mul_f32_256MB": case_binary(torch.mul, torch.float32),
        "bias_add_bf16_r9": case_bias_add(),
        "bias_add_f32_r9": case_bias_add(torch.float32),
        "bias_add_bf16_r9_4x4": case_bias_add(channels=512, side=4),
        "sum_channels_bf16_r9": case_sum_channels(),
        "cast_f32_bf16_256MB": case_cast(),
        "cast_f32_f16_256MB": case_cast(torch.float16),
    }
    for row, label in ROWS:
        cases[f"softmax_row{label}"] = case_softmax(row)
        cases[f"layer_norm_fwd_row{label}"] = case_layer_norm(row, False)
        cases[f"layer_norm_fwdbwd_row{label}"] = case_layer_norm(row, True)
        cases[f"cross_entropy_fwd_row{label}"] = case_cross_entropy(row, False)
        cases[f"cross_entropy_fwdbwd_row{label}"] = case_cross_entropy(row, True)
    cases["batch_norm_fwdbwd_bf16_r9"] = case_batch_norm()
    cases["batch_norm_fwdbwd_f16_r9"] = case_batch_norm(torch.float16)
    cases["batch_norm_relu_fwdbwd_bf16_r9"] = case_batch_norm(relu=True)
    cases["batch_norm_relu_fwdbwd_f16_r9"] = case_batch_norm(torch.float16, relu=True)
    cases["adamw_fused_100M"] = case_adamw()
    cases["matmul_bf16_8192"] = case_matmul(8192, torch.bfloat16)
    cases["matmul_f32_4096"] = case_matmul(4096, torch.float32)
    cases["resnet9_s64_b512_bf16_step"] = case_resnet9("bf16")
    cases["resnet9_s64_b512_fp16_step"] = case_resnet9("fp16")
    cases["resnet9_s64_b512_f32_step"] = case_resnet9("none")
    cases["resnet9_s64_b512_tf32_step"] = case_resnet9("tf32")
    return cases


def rate(kind, amount, seconds):
    """GB/s, TFLOP/s or images/s of one call taking `seconds`."""
    if kind == "bytes":
        return amount / seconds / 1e9
    if kind == "flops":
        return amount / seconds / 1e12
    return amount / seconds


UNITS = {"bytes": "GB/s", "flops": "TFLOP/s", "images": "images/s"}


class NotApplicable(Exception):
    """A variant that does not apply to a case (shown as "–")."""


class Stopped(BaseException):
    """SIGTERM: a BaseException, so that no `except Exception` (ours or torch.compile's) eats it."""


def on_sigterm(signum, frame):
    raise Stopped()


def run_torch(cases, calls, use_compile, budget_s, progress=None):
    """Every case eagerly first, then through torch.compile while within budget_s seconds of the
    start (compiling takes seconds per case; a slow machine still gets the eager table).
    progress(results), if given, runs after each case (to write the table so far)."""
    timer = Timer()
    copy_gbps = copy_bandwidth(timer)
    results = {"copy_GBps": copy_gbps, "cases": {name: {} for name in cases}}
    started = time.perf_counter()
    try:
        for variant in ["eager"] + (["compile"] if use_compile else []):
            compiled = variant == "compile"
            for name, (kind, amount, make) in cases.items():
                entry = results["cases"][name]
                if make is None:  # the copy: timed above, as the ceiling
                    entry[variant] = None if compiled else {"ms": 2 * 256 * MB / copy_gbps / 1e6,
                                                            "rate": copy_gbps}
                    continue
                if compiled and time.perf_counter() - started > budget_s:
                    entry[variant] = {"error": f"skipped: past the {budget_s:.0f} s budget"}
                    continue
                fn = setup = None
                try:
                    if compiled:
                        torch._dynamo.reset()  # nothing compiled for another case is reused
                    case_started = time.perf_counter()
                    fn, setup = make(compiled)
                    seconds = timer.median(fn, calls, setup)
                    entry[variant] = {"ms": seconds * 1e3, "rate": rate(kind, amount, seconds)}
                    if compiled:  # the compile happened in the warm-up calls
                        entry[variant]["wall_s"] = round(time.perf_counter() - case_started, 1)
                except NotApplicable:
                    entry[variant] = None
                except Exception as error:  # an unsupported compile, out of memory: report, go on
                    entry[variant] = {"error": f"{type(error).__name__}: {str(error)[:200]}"}
                fn = setup = None
                torch.cuda.empty_cache()
                print(f"torch {variant} {name}: {json.dumps(entry[variant])}", flush=True)
                if progress:
                    progress(results)
    except Stopped:
        results["stopped"] = f"SIGTERM after {time.perf_counter() - started:.0f} s: cases left out"
        print(f"torch_side_by_side.py: {results['stopped']}", flush=True)
    return results


def read_ember(path, skipped_path=None):
    """({case: {"ms", "GB/s", ..., or "error"}}, context) from Google Benchmark's JSON (medians,
    a cut-short file up to its last complete case) and the --skipped_out reasons."""
    if not path or not os.path.exists(path):
        cases = {}
        if skipped_path and os.path.exists(skipped_path):
            cases = ember_table.rows(None, skipped_path)[1]
        return cases, {}
    try:
        context, cases = ember_table.rows(path, skipped_path)
    except (OSError, ValueError) as error:
        print(f"torch_side_by_side.py: cannot read {path}: {error}", file=sys.stderr)
        return {}, {}
    return cases, context


def fmt(value, digits=0):
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}"


def table(cases, ember, torch_results, ember_copy_gbps):
    lines = [
        "| case | ember | % of copy | PyTorch eager | PyTorch compile | ember / PyTorch eager "
        "| ember / best PyTorch |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, (kind, amount, _) in cases.items():
        unit = UNITS[kind]
        e = ember.get(name, {})
        t = torch_results["cases"].get(name, {})
        if "error" in e:
            ember_text, ember_rate, pct = "skipped: " + e["error"][:80].replace("|", "/"), None, None
        elif "ms" in e:
            ember_rate = rate(kind, amount, e["ms"] / 1e3)
            ember_text = f"{fmt(ember_rate, 1 if kind != 'bytes' else 0)} {unit} ({fmt(e['ms'], 3)} ms)"
            pct = 100 * ember_rate / ember_copy_gbps if kind == "bytes" and ember_copy_gbps else None
        else:
            ember_text, ember_rate, pct = "not run", None, None

        def torch_text(variant):
            v = t.get(variant)
            if not v:
                return "–"
            if "error" in v:
                return "failed: " + v["error"][:60].replace("|", "/")
            return f"{fmt(v['rate'], 1 if kind != 'bytes' else 0)} {unit} ({fmt(v['ms'], 3)} ms)"

        eager_rate = (t.get("eager") or {}).get("rate")
        best_rate = max([(t.get(v) or {}).get("rate") or 0 for v in ("eager", "compile")])
        ratio = ember_rate / eager_rate if ember_rate and eager_rate else None
        best_ratio = ember_rate / best_rate if ember_rate and best_rate else None
        lines.append(f"| {name} | {ember_text} | {fmt(pct, 1)} | {torch_text('eager')} | "
                     f"{torch_text('compile')} | {fmt(ratio, 2)} | {fmt(best_ratio, 2)} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ember-json", help="ember_gpu_bench's --benchmark_out JSON")
    parser.add_argument("--ember-skipped", help="ember_gpu_bench's --skipped_out JSON (reasons)")
    parser.add_argument("--out", default=os.environ.get("OUT", "."), help="folder for the table")
    parser.add_argument("--calls", type=int, default=20, help="timed calls per case (median)")
    parser.add_argument("--no-compile", action="store_true", help="eager only")
    parser.add_argument("--compile-budget", type=float, default=240.0,
                        help="seconds after which the torch.compile variants are skipped")
    parser.add_argument("--only", help="comma-separated case names")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        print("torch_side_by_side.py: no CUDA device visible", file=sys.stderr)
        return 1

    cases = all_cases()
    if args.only:
        keep = set(args.only.split(","))
        cases = {k: v for k, v in cases.items() if k in keep}
    ember, context = read_ember(args.ember_json, args.ember_skipped)
    ember_copy = float(context.get("copy_GBps", 0) or 0) or None
    gpu = torch.cuda.get_device_name(0)
    get_precision = getattr(torch, "get_float32_matmul_precision", lambda: "?")
    matmul_precision = get_precision()
    header = (f"GPU: {gpu}; torch {torch.__version__}; device-to-device copy (256 MB, read + write): "
              f"ember's run {fmt(ember_copy)} GB/s, PyTorch's run {{torch_copy}} GB/s. Medians; L2 "
              f"flushed before each call; ember/PyTorch > 1 means ember is faster (a ratio of "
              f"throughputs); \"best PyTorch\": the faster of eager and compile. f32 matmul: "
              f"float32_matmul_precision {matmul_precision!r} ('highest': no TF32, as ember's "
              f"default). resnet9: random data, batch 512, width 64, bf16 or fp16 autocast (fp16 with a "
              f"GradScaler) or f32 (cuDNN's TF32 off, as ember), Adam (fused in "
              f"both), cuDNN's heuristic algorithm choice in both (cudnn.benchmark "
              f"{torch.backends.cudnn.benchmark}).")
    if context.get("truncated"):
        header += " ember's JSON was cut short (ember_gpu_bench killed): its later cases are missing."
    footnote = ("Bytes counted (the fewest one call must move; 256 MB = 64M f32): add, mul 3 x 256 MB; "
                "cast f32->bf16 256 MB read + 128 MB written; softmax, layer_norm forward 2 x 256 MB; "
                "layer_norm forward+backward 5 x 256 MB; cross-entropy forward 256 MB, "
                "forward+backward 3 x 256 MB; AdamW 28 B per f32 parameter (read p, g, m, v: 16 B; "
                "write p, m, v: 12 B) x 100M = 2.8 GB.")
    os.makedirs(args.out, exist_ok=True)

    def write(results, final=False):
        text = (header.replace("{torch_copy}", fmt(results["copy_GBps"])) + "\n\n"
                + table(cases, ember, results, ember_copy) + "\n\n" + footnote + "\n")
        if results.get("stopped"):
            text += f"\nPyTorch's run was stopped ({results['stopped']}).\n"
        elif not final:
            text += "\n(partial: written while the PyTorch run went on)\n"
        with open(os.path.join(args.out, "side_by_side.md"), "w") as f:
            f.write(text)
        with open(os.path.join(args.out, "torch_bench.json"), "w") as f:
            json.dump(dict(results, gpu=gpu, torch=torch.__version__), f, indent=1)
        return text

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        torch_results = run_torch(cases, args.calls, not args.no_compile, args.compile_budget,
                                  write)
    except Stopped:  # before the first case (the copy ceiling): nothing to write
        print("torch_side_by_side.py: stopped by SIGTERM before any case ran", file=sys.stderr)
        return 1
    print(write(torch_results, final=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
