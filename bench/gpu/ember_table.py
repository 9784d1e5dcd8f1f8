#!/usr/bin/env python3
"""ember_gpu_bench's results as a markdown table, without PyTorch (run.sh's summary).

    python3 bench/gpu/ember_table.py gpu_bench.json [gpu_bench_skipped.json]

One row per case: median ms, GB/s and % of the device-to-device copy bandwidth measured in the
same run (memory-bound cases), TFLOP/s or images/s (the others), or the reason it was skipped.
"""
import json
import sys


def rows(bench_path, skipped_path=None):
    with open(bench_path) as f:
        data = json.load(f)
    cases = {}
    for run in data.get("benchmarks", []):
        name = run.get("run_name", run["name"]).split("/")[0]
        if run.get("error_occurred"):
            cases.setdefault(name, {"error": run.get("error_message", "error")})
        elif run.get("run_type") != "aggregate" or run.get("aggregate_name") == "median":
            if cases.get(name, {}).get("median") and run.get("run_type") != "aggregate":
                continue
            cases[name] = dict(run, median=run.get("aggregate_name") == "median")
    if skipped_path:
        try:
            with open(skipped_path) as f:
                for name, reason in json.load(f).items():
                    cases.setdefault(name, {"error": reason})
        except (OSError, ValueError):
            pass
    return data.get("context", {}), cases


def main():
    if len(sys.argv) < 2:
        print(__doc__)
        return 2
    context, cases = rows(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else None)
    print(f"ember_gpu_bench on {context.get('gpu', '?')}: device-to-device copy "
          f"{float(context.get('copy_GBps', 0) or 0):.0f} GB/s (256 MB, read + write); medians\n")
    print("| case | ms | GB/s | % of copy | floor ms | TFLOP/s or images/s |")
    print("|---|---:|---:|---:|---:|---:|")
    for name, c in cases.items():
        if "error" in c:
            print(f"| {name} | skipped: {c['error'][:100].replace('|', '/')} | | | | |")
            continue

        def get(key, digits):
            return f"{c[key]:.{digits}f}" if key in c else ""

        other = get("TFLOP/s", 1) or get("images/s", 0)
        print(f"| {name} | {get('ms', 3)} | {get('GB/s', 0)} | {get('pct_of_copy', 1)} | "
              f"{get('floor_ms', 3)} | {other} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
