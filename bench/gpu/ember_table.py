#!/usr/bin/env python3
"""ember_gpu_bench's results as a markdown table, without PyTorch (run.sh's summary).

    python3 bench/gpu/ember_table.py gpu_bench.json [gpu_bench_skipped.json] [--torch torch_bench.json]

One row per case: median ms, GB/s and % of the device-to-device copy bandwidth measured in the
same run (memory-bound cases), TFLOP/s or images/s (the others), or the reason it was skipped.
A JSON cut short (the program killed before Google Benchmark closed it) is read up to its last
complete case. bench/gpu/torch_side_by_side.py reads ember's results through rows() too.
With --torch (the torch_bench.json of torch_side_by_side.py, from another call on the same GPU),
the table gains PyTorch's eager and compile rates and the ratio ember / best PyTorch: the merge
for runs whose two halves did not meet in one call.
"""
import json
import sys


def load_json(path):
    """Google Benchmark's JSON; when it was cut short, everything up to its last complete case."""
    with open(path) as f:
        text = f.read()
    try:
        return json.loads(text)
    except ValueError:
        pass
    # The benchmarks list holds objects indented by 4 spaces: close the list after the last one
    # that parses.
    end = text.rfind("\n    }")
    while end > 0:
        try:
            data = json.loads(text[:end + 6] + "\n  ]\n}\n")
            data.setdefault("context", {})["truncated"] = "yes"
            return data
        except ValueError:
            end = text.rfind("\n    }", 0, end)
    head = text.find('"benchmarks"')
    try:  # not even one case: the context alone
        data = json.loads(text[:head].rstrip().rstrip(",") + "\n}\n") if head > 0 else {}
    except ValueError:
        data = {}
    data.setdefault("context", {})["truncated"] = "yes"
    return data


def rows(bench_path, skipped_path=None):
    """(context, {case: the median run's fields, or {"error": reason}}) in the JSON's order."""
    data = load_json(bench_path) if bench_path else {}
    cases = {}
    for run in data.get("benchmarks", []):
        name = run.get("run_name", run["name"]).split("/")[0]
        if run.get("error_occurred") or run.get("skipped"):
            message = run.get("error_message") or run.get("skip_message") or "error"
            cases.setdefault(name, {"error": message})
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


def torch_rates(path):
    """{case: (eager rate or None, compile rate or None)} from torch_side_by_side.py's JSON."""
    with open(path) as f:
        data = json.load(f)
    rates = {}
    for name, case in data.get("cases", {}).items():
        rates[name] = tuple((case.get(mode) or {}).get("rate") for mode in ("eager", "compile"))
    return rates


def main():
    args = sys.argv[1:]
    torch_path = None
    if "--torch" in args:
        at = args.index("--torch")
        torch_path = args[at + 1] if at + 1 < len(args) else None
        del args[at:at + 2]
    if not args or ("--torch" in sys.argv and torch_path is None):
        print(__doc__)
        return 2
    try:
        context, cases = rows(args[0], args[1] if len(args) > 1 else None)
        torch = torch_rates(torch_path) if torch_path else None
    except (OSError, ValueError) as error:
        print(f"ember_gpu_bench: no results ({error})")
        return 1
    truncated = " (JSON cut short: the run was killed)" if context.get("truncated") else ""
    print(f"ember_gpu_bench on {context.get('gpu', '?')}: device-to-device copy "
          f"{float(context.get('copy_GBps', 0) or 0):.0f} GB/s (256 MB, read + write); "
          f"medians{truncated}\n")
    head = "| case | ms | GB/s | % of copy | floor ms | TFLOP/s or images/s |"
    rule = "|---|---:|---:|---:|---:|---:|"
    if torch is not None:
        head += " PyTorch eager | PyTorch compile | ember / PyTorch eager | ember / best PyTorch |"
        rule += "---:|---:|---:|---:|"
    print(head)
    print(rule)
    for name, c in cases.items():
        if "error" in c:
            print(f"| {name} | skipped: {c['error'][:100].replace('|', '/')} | | | | |"
                  + (" | | | |" if torch is not None else ""))
            continue

        def get(key, digits):
            return f"{c[key]:.{digits}f}" if key in c else ""

        other = get("TFLOP/s", 1) or get("images/s", 0)
        line = (f"| {name} | {get('ms', 3)} | {get('GB/s', 0)} | {get('pct_of_copy', 1)} | "
                f"{get('floor_ms', 3)} | {other} |")
        if torch is not None:
            # The same unit on both sides: GB/s, TFLOP/s or images/s, whichever the case reports.
            mine = next((c[k] for k in ("GB/s", "TFLOP/s", "images/s") if k in c), None)
            eager, compiled = torch.get(name, (None, None))
            best = max((r for r in (eager, compiled) if r), default=None)
            ratio = lambda ref: f"{mine / ref:.2f}" if mine and ref else "–"
            rate = lambda r: f"{r:.1f}" if r else "–"
            line += f" {rate(eager)} | {rate(compiled)} | {ratio(eager)} | {ratio(best)} |"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
