#!/usr/bin/env python3
"""ember's and PyTorch's kernels of one training step, side by side, from Nsight Compute.

bench/gpu/run.sh's `profile` step runs ncu (gpu__time_duration.sum, --csv) on
bench/gpu/step_profile.cpp (ember) and bench/gpu/torch_train_loop.py --profile-steps (PyTorch),
both profiling the same number of steps of the same ResNet9 step, and this script reads the two
CSV logs:

    python3 bench/gpu/kernel_table.py --ember ember_fp16.csv --torch torch_fp16.csv \
        --steps 2 --title "fp16" --ember-log ember_fp16.log --torch-log torch_fp16.log

It prints markdown: the kernels' time per step by kind (convolutions, batch norm, elementwise,
...) for both libraries, then each library's costliest kernels. ncu runs kernels one at a time
(serialised, clocks and caches left alone), so the sums are the GPU's busy time per step; the step
times from the programs' own logs (no profiler) say how much of a step the GPU was idle.
"""
import argparse
import csv
import json
import re
import sys
from collections import defaultdict

# Kinds of kernel, tried in order on the demangled name (lower case). The first match wins:
# batch norm and pooling come before the convolutions, as cuDNN names its batch norm kernels too.
KINDS = [
    ("batch norm", r"batch_?norm|bn_fw|bn_bw|welford|statistics_partial|grad_sums_partial|"
                   r"(?<!tensor_)apply_kernel|grad_input_kernel"),
    ("pooling", r"pool"),
    ("grad scaler", r"unscale|non_finite|found_inf|amp_update"),
    ("optimizer", r"adam|multi_tensor|optimizer"),
    ("loss, softmax", r"softmax|cross_entropy|nll"),
    ("convolution (cuDNN)", r"conv|fprop|dgrad|wgrad|implicit|cudnn|winograd|fft|nchwtonhwc|"
                            r"nhwctonchw"),
    ("matrix product", r"gemm|gemv|cublas|xmma|cutlass|matmul|splitk"),
    ("reduction", r"reduce|sum_|mean_"),
    ("elementwise, cast, fill", r"elementwise|vector_kernel|strided_kernel|copy|fill|cast|"
                                r"unrolled|where|relu|threshold|add|mul"),
]

UNITS_TO_US = {"nsecond": 1e-3, "ns": 1e-3, "usecond": 1.0, "us": 1.0, "msecond": 1e3, "ms": 1e3,
               "second": 1e6, "s": 1e6}


def kind_of(name):
    lower = name.lower()
    for kind, pattern in KINDS:
        if re.search(pattern, lower):
            return kind
    return "other"


def short_name(name, width=96):
    name = re.sub(r"ember::kernels::cuda::|\(anonymous namespace\)::|ember::", "", name)
    name = re.sub(r"\s+", " ", name)
    return name if len(name) <= width else name[:width - 3] + "..."


def read_ncu_csv(path):
    """[(kernel name, microseconds)] in launch order, from ncu's --csv output (log file)."""
    with open(path, newline="") as file:
        lines = [line for line in file if not line.startswith("==")]
    header = next((i for i, line in enumerate(lines)
                   if "Kernel Name" in line and "Metric Value" in line), None)
    if header is None:
        raise ValueError(f"{path}: no ncu CSV header (\"Kernel Name\" ... \"Metric Value\")")
    kernels = []
    for row in csv.DictReader(lines[header:]):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        unit = (row.get("Metric Unit") or "nsecond").strip()
        value = float((row.get("Metric Value") or "0").replace(",", ""))
        kernels.append((row.get("Kernel Name", "?"), value * UNITS_TO_US.get(unit, 1e-3)))
    return kernels


def per_step(kernels, steps):
    by_kind = defaultdict(lambda: [0.0, 0.0])  # kind -> [calls, microseconds], per step
    by_name = defaultdict(lambda: [0.0, 0.0])
    for name, us in kernels:
        for table, key in ((by_kind, kind_of(name)), (by_name, name)):
            table[key][0] += 1.0 / steps
            table[key][1] += us / steps
    return by_kind, by_name


def step_times(log_path):
    """The (isolated, back-to-back) ms/step a program printed, or (None, None)."""
    if not log_path:
        return None, None
    try:
        text = open(log_path).read()
    except OSError:
        return None, None
    found = re.findall(r"([\d.]+) ms/step \((?:median|mean)", text)
    values = [float(v) for v in found[:2]]
    return (values + [None, None])[:2]


def fmt(value, digits=0):
    return "–" if value is None else f"{value:,.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ember", required=True, help="ncu CSV log of ember_step_profile")
    parser.add_argument("--torch", required=True, help="ncu CSV log of torch_train_loop.py")
    parser.add_argument("--steps", type=int, required=True, help="steps inside each profiler range")
    parser.add_argument("--title", default="", help="heading, e.g. the precision")
    parser.add_argument("--ember-log", help="ember_step_profile's stdout (its step times)")
    parser.add_argument("--torch-log", help="torch_train_loop.py's stdout (its step times)")
    parser.add_argument("--top", type=int, default=12, help="costliest kernels listed for each")
    parser.add_argument("--json", help="also write the per-step tables here")
    args = parser.parse_args()
    if args.steps < 1:
        parser.error("--steps must be at least 1")

    sides = {}
    for label, path in (("ember", args.ember), ("PyTorch", args.torch)):
        try:
            sides[label] = per_step(read_ncu_csv(path), args.steps)
        except (OSError, ValueError) as error:
            print(f"kernel_table.py: {error}", file=sys.stderr)
            sides[label] = ({}, {})
    times = {"ember": step_times(args.ember_log), "PyTorch": step_times(args.torch_log)}

    out = [f"### {args.title}" if args.title else "### one training step, kernel by kernel", ""]
    busy = {label: sum(us for _, us in kinds.values()) for label, (kinds, _) in sides.items()}
    for label in sides:
        isolated, back_to_back = times[label]
        calls = sum(c for c, _ in sides[label][0].values())
        line = f"- {label}: {fmt(calls)} kernels, {fmt(busy[label] / 1e3, 2)} ms of kernels a step"
        if isolated:
            line += (f"; the step takes {isolated:.2f} ms between two synchronisations "
                     f"(GPU busy {100 * busy[label] / 1e3 / isolated:.0f}%)")
        if back_to_back:
            line += f", {back_to_back:.2f} ms back to back"
        out.append(line)
    out += ["", "| kind | ember kernels | ember µs | PyTorch kernels | PyTorch µs "
            "| ember − PyTorch µs |", "|---|---:|---:|---:|---:|---:|"]
    kinds = sorted(set(sides["ember"][0]) | set(sides["PyTorch"][0]),
                   key=lambda k: -max(sides["ember"][0].get(k, [0, 0])[1],
                                      sides["PyTorch"][0].get(k, [0, 0])[1]))
    for kind in kinds:
        e = sides["ember"][0].get(kind, [0.0, 0.0])
        t = sides["PyTorch"][0].get(kind, [0.0, 0.0])
        out.append(f"| {kind} | {fmt(e[0])} | {fmt(e[1])} | {fmt(t[0])} | {fmt(t[1])} | "
                   f"{e[1] - t[1]:+,.0f} |")
    out.append(f"| **all** | | **{fmt(busy['ember'])}** | | **{fmt(busy['PyTorch'])}** | "
               f"**{busy['ember'] - busy['PyTorch']:+,.0f}** |")
    for label in sides:
        names = sorted(sides[label][1].items(), key=lambda item: -item[1][1])[:args.top]
        out += ["", f"{label}'s costliest kernels (per step):", "",
                "| kernel | kind | calls | µs |", "|---|---|---:|---:|"]
        for name, (calls, us) in names:
            out.append(f"| `{short_name(name)}` | {kind_of(name)} | {fmt(calls)} | {fmt(us)} |")
    print("\n".join(out))
    if args.json:
        with open(args.json, "w") as file:
            json.dump({label: {"by_kind": kinds_, "by_name": names_, "step_ms": times[label]}
                       for label, (kinds_, names_) in sides.items()}, file, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
