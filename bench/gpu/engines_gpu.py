#!/usr/bin/env python3
"""`ember train` per engine on one GPU, beside a plain PyTorch loop on the same data (issue 6).

    python3 bench/gpu/engines_gpu.py --ember build-gpu/bin/ember --data DIR --out DIR
        [--epochs 4] [--limit 20480] [--budget 150] [--engines cuda:none,amp:bf16,...]
        [--size 64] [--batch 512] [--torch-device cuda] [--torch-compile bf16]

Every engine that one GPU can run (cuda, amp, o2, dp, which on one GPU runs the model as it is,
as PyTorch's DataParallel, and ddp as a world of one over NCCL, EMBER_DDP_WORLD_OF_ONE=1; daso
needs MPI, which the GPU machine's build lacks)
trains ResNet9 (width 64, batch 512, Adam 2e-3, seed 42) for --epochs epochs over the first
--limit training images. Its images/s is the median of metrics.csv's train_throughput over
epochs 2.. (the first pays for cuDNN's and cuBLAS's set-up, the allocator's growth and the
loader's start). The PyTorch column is torch_epochs.py at the same precision: the same model,
batch, optimizer and augmentation, timed the same way, with the data on the GPU from the start
(f32: TF32 off, as ember; PyTorch's default TF32 figure is printed under the table). After the
eager loops, the same loop under torch.compile for each --torch-compile precision that a row uses
(bf16 by default; "" for none), last, as its compilation takes the longest: a third table.
An ember run is cut at 60 s; the rows that would start past 60% of --budget seconds are skipped,
saying so, and PyTorch gets what is left.

A second table says where epoch 1's extra time goes: the first train and valid batches' host time
(metrics.csv's *_first_batch_seconds), and the sums of cuDNN's choice and first-run times, which
each ember run logs (EMBER_CUDNN_LOG=1, kept in its logdir's stderr.log), and the cudaMalloc calls
of `ember train`'s closing memory line.

Writes engines.md (the tables) and engines.json into --out, and prints the tables.
"""
import argparse
import csv
import json
import os
import re
import statistics
import subprocess
import sys
import time

# engine:precision[:benchmark|:graph]. The PyTorch loop of the same precision is each row's
# reference: o2 (a bf16 or f16 model with f32 master weights) has no plain-loop twin and is set
# beside autocast; tf32 is f32 with `ember train --tf32`, beside PyTorch's default f32 (TF32
# convolutions). :benchmark adds `--cudnn-benchmark` (cuDNN's algorithms timed, the fastest
# deterministic one taken), beside the same plain loop with PyTorch's defaults. (2026-11-28,
# H200: it doubled exact f32 and changed nothing in bf16 and fp16.) :graph sets
# EMBER_CUDNN_GRAPH=1: convolutions chosen and run through cuDNN's graph API, the path PyTorch
# takes (its heuristics, mode A), in place of the v7-style API. (2026-11-29, H200: the same
# images/s, and a first batch 4.6x (bf16) to 7.2x (fp16) faster to choose; cuda:none:graph is
# there to say whether exact f32, ember train's default, gains too.)
DEFAULT_ENGINES = ("cuda:none,cuda:tf32,amp:bf16,amp:fp16,o2:bf16,o2:fp16,dp:none,dp:bf16,ddp:none,"
                   "ddp:bf16,amp:fp16:graph,cuda:tf32:graph,amp:bf16:graph,cuda:none:graph,"
                   "cuda:tf32:benchmark,cuda:none:benchmark")
CUDNN_OPTIONS = ("benchmark", "graph")


def ember_run(ember, engine, amp, args, logdir, option=""):
    """{epochs: [{images_per_s, accuracy}], images_per_s, valid_accuracy} or {error}."""
    command = [ember, "train", "--engine", engine, "--amp", "none" if amp == "tf32" else amp,
               "--epochs", str(args.epochs),
               "--batch-size", str(args.batch), "--model-size", str(args.size), "--limit-train", str(args.limit),
               "--limit-valid", "2048", "--data", args.data, "--logdir", logdir, "--quiet"]
    if amp == "tf32":
        command.append("--tf32")
    if option == "benchmark":
        command.append("--cudnn-benchmark")
    env = dict(os.environ)
    if option == "graph":
        env["EMBER_CUDNN_GRAPH"] = "1"
    if engine.startswith("ddp"):
        env["EMBER_DDP_WORLD_OF_ONE"] = "1"  # a world of one over NCCL on cuda:0
    # Each cuDNN choice on stderr, with the time it took and its first run's (epoch 1 only).
    env["EMBER_CUDNN_LOG"] = "1"
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return {"error": "ran past 60 s"}
    os.makedirs(logdir, exist_ok=True)
    with open(os.path.join(logdir, "stderr.log"), "w") as f:
        f.write(done.stderr)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return {"error": f"exit {done.returncode}: {lines[-1] if lines else ''}"}
    with open(os.path.join(logdir, "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    epochs = [{"images_per_s": float(r["train_throughput"]),
               "accuracy": float(r["train_accuracy"]),
               "seconds": float(r.get("train_seconds") or "nan"),
               "first_batch_seconds": float(r.get("train_first_batch_seconds") or "nan"),
               "valid_first_batch_seconds": float(r.get("valid_first_batch_seconds") or "nan")}
              for r in rows]
    later = epochs[1:] or epochs
    return {"epochs": epochs, "images_per_s": statistics.median(e["images_per_s"] for e in later),
            "valid_accuracy": float(rows[-1]["valid_accuracy"]),
            "command": ("EMBER_CUDNN_GRAPH=1 " if option == "graph" else "") + " ".join(command),
            "cudnn": cudnn_set_up(done.stderr), "cuda_malloc": cuda_malloc(done.stdout)}


CUDNN_TIMES = re.compile(r"chosen in ([0-9.]+) ms, first run ([0-9.]+) ms")


CUDA_MALLOC = re.compile(r"(\d+) cudaMalloc calls took ([0-9.]+) s")


def cuda_malloc(stdout):
    """{calls, seconds} of the caching allocator's growth, from `ember train`'s memory line."""
    found = CUDA_MALLOC.search(stdout)
    return ({"calls": int(found.group(1)), "seconds": float(found.group(2))} if found
            else {"calls": 0, "seconds": 0.0})


def cudnn_set_up(stderr):
    """{choices, choice_ms, first_run_ms}: the sums over EMBER_CUDNN_LOG's lines."""
    times = [tuple(map(float, m.groups())) for m in CUDNN_TIMES.finditer(stderr)]
    return {"choices": len(times), "choice_ms": sum(t[0] for t in times),
            "first_run_ms": sum(t[1] for t in times)}


def set_up_lines(rows, runs, order):
    """A table of where ember's epoch 1 goes beyond a later epoch, and PyTorch's epoch 1."""
    lines = ["", "Epoch 1's extra time (its seconds less the median of the later epochs'). ember: "
             "the first train and valid batches' host time (metrics.csv), and cuDNN's choices and "
             "first runs (EMBER_CUDNN_LOG=1; each first run is timed between two synchronisations),"
             " and the caching allocator's cudaMalloc calls (over the whole run)."
             " Each ember row is a process of its own.", "",
             "| engine | precision | epoch 1 s | later s | extra s | first train batch s | "
             "first valid batch s | cuDNN choices | choosing ms | first runs ms | cudaMalloc calls "
             "| cudaMalloc s |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r or len(r["epochs"]) < 2:
            continue
        first = r["epochs"][0]
        later = statistics.median(e["seconds"] for e in r["epochs"][1:])
        c = r["cudnn"]
        lines.append(f"| {r['engine']} | {label(r)} | {first['seconds']:.2f} | {later:.2f} | "
                     f"{first['seconds'] - later:.2f} | {first['first_batch_seconds']:.3f} | "
                     f"{first['valid_first_batch_seconds']:.3f} | {c['choices']} | "
                     f"{c['choice_ms']:.0f} | {c['first_run_ms']:.0f} | "
                     f"{r['cuda_malloc']['calls']} | {r['cuda_malloc']['seconds']:.3f} |")
    shown = []
    for amp in order:
        epochs = runs.get(amp, {}).get("epochs") or []
        if len(epochs) >= 2:
            later = statistics.median(e["seconds"] for e in epochs[1:])
            shown.append(f"{amp} {epochs[0]['seconds']:.2f} s against {later:.2f} s")
    if shown:
        lines += ["", "PyTorch's epoch 1 against its later epochs, in the order run in one process "
                  "(only the first pays for loading cuDNN and the CUDA context's first use): "
                  + "; ".join(shown) + "."]
    return lines


def label(row):
    """The precision column: the row's precision, and how cuDNN chose (timed, or its graph API)."""
    option = row.get("option", "")
    return row["amp"] + {"benchmark": " (--cudnn-benchmark)",
                         "graph": " (EMBER_CUDNN_GRAPH=1)"}.get(option, "")


def reference_of(amp):
    """The torch_epochs.py precision a row compares with."""
    return "none-tf32" if amp == "tf32" else amp


def torch_runs(args, precisions, path, seconds):
    """torch_epochs.py's JSON for these precisions (a process of its own: its GPU memory is
    freed before nothing else needs it, and a failure there cannot end this script)."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_epochs.py")
    command = [sys.executable, script, "--data", args.data, "--amp", ",".join(precisions),
               "--epochs", str(args.epochs), "--limit", str(args.limit), "--size", str(args.size),
               "--batch", str(args.batch), "--device", args.torch_device, "--json", path]
    if os.path.exists(path):  # an earlier run's results must not stand in for this one's
        os.remove(path)
    error = None
    try:
        subprocess.run(command, timeout=seconds, check=False)
    except (subprocess.TimeoutExpired, OSError) as failure:
        error = f"{type(failure).__name__}: {failure}"
    # torch_epochs.py rewrites its JSON after each precision: what finished before a timeout counts.
    try:
        with open(path) as f:
            results = json.load(f)
    except (OSError, ValueError) as failure:
        results = {"runs": {}}
        error = error or f"{type(failure).__name__}: {failure}"
    if error:
        results["error"] = error
    return results


def rate(value):
    """images/s as a table cell: '–' for a run that gave none."""
    return f"{value:.0f}" if value else "–"


def compile_lines(rows, reference, compiled):
    """A table of PyTorch's loop under torch.compile beside its eager loop and ember's rows."""
    runs = reference.get("runs", {})
    lines = ["", "PyTorch's loop under torch.compile (default mode; its epoch 1 includes the "
             "compilation), beside the eager loop and each ember row of that precision.", "",
             "| precision | PyTorch eager images/s | torch.compile images/s | compile's epoch 1 s "
             "| ember row | ember images/s | ember / torch.compile |",
             "|---|---:|---:|---:|---|---:|---:|"]
    for amp in compiled:
        eager = runs.get(amp, {}).get("images_per_s")
        run = runs.get(f"{amp}+compile", {})
        if "images_per_s" not in run:
            shown = run.get("error") or ("not run: PyTorch's run failed" if "error" in reference
                                         else "not run")
            lines.append(f"| {amp} | {rate(eager)} | {shown[:120]} | | | | |")
            continue
        for r in rows:
            if reference_of(r["amp"]) != amp or "error" in r:
                continue
            lines.append(f"| {amp} | {rate(eager)} | {run['images_per_s']:.0f} | "
                         f"{run['epochs'][0]['seconds']:.1f} | {r['engine']} {label(r)} | "
                         f"{r['images_per_s']:.0f} | "
                         f"{r['images_per_s'] / run['images_per_s']:.2f} |")
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ember", required=True, help="the ember binary")
    parser.add_argument("--data", required=True, help="Fashion-MNIST's IDX .gz files")
    parser.add_argument("--out", required=True, help="folder for engines.md, engines.json, logs")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--limit", type=int, default=20480)
    parser.add_argument("--budget", type=float, default=150,
                        help="seconds in all: ember's rows start within 60%% of it")
    parser.add_argument("--engines", default=DEFAULT_ENGINES)
    parser.add_argument("--size", type=int, default=64, help="ResNet9 base width")
    parser.add_argument("--batch", type=int, default=512)
    parser.add_argument("--torch-device", default="cuda", help="cpu: to try the script anywhere")
    parser.add_argument("--torch-compile", default="bf16",
                        help="comma-separated precisions also run under torch.compile, when a row "
                             "uses them ('' for none)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    start = time.perf_counter()
    rows = []
    entries = []
    for entry in args.engines.split(","):
        parts = entry.split(":")
        if (len(parts) not in (2, 3) or not all(parts[:2])
                or (parts[2:] and parts[2] not in CUDNN_OPTIONS)):
            parser.error(f"--engines: {entry}: expected engine:precision[:benchmark|:graph]")
        entries.append((parts[0], parts[1], parts[2] if parts[2:] else ""))
    for amp in filter(None, args.torch_compile.split(",")):
        if amp not in ("none", "none-tf32", "bf16", "fp16"):
            parser.error(f"--torch-compile: {amp}: expected none, none-tf32, bf16 or fp16")
    for engine, amp, option in entries:
        if time.perf_counter() - start > 0.6 * args.budget:  # the rest is PyTorch's
            rows.append({"engine": engine, "amp": amp, "option": option,
                         "error": "skipped: past --budget"})
            continue
        logdir = os.path.join(args.out, f"train_{engine}_{amp}" + (f"_{option}" if option else ""))
        result = ember_run(args.ember, engine, amp, args, logdir, option)
        for ckpt in ("last.ckpt", "best.ckpt"):  # large, of no use here
            if os.path.exists(os.path.join(logdir, ckpt)):
                os.remove(os.path.join(logdir, ckpt))
        rows.append(dict(result, engine=engine, amp=amp, option=option))
        shown = (f"{result['images_per_s']:.0f} images/s" if "error" not in result
                 else result["error"])
        print(f"{'EMBER_CUDNN_GRAPH=1 ' if option == 'graph' else ''}ember train --engine {engine} "
              f"--amp {amp}{' --cudnn-benchmark' if option == 'benchmark' else ''}: {shown}",
              flush=True)

    precisions = sorted({reference_of(r["amp"]) for r in rows})
    if "none" in precisions and "none-tf32" not in precisions:  # PyTorch's default f32 too
        precisions.append("none-tf32")
    compiled = [amp for amp in args.torch_compile.split(",") if amp in precisions]
    precisions += [f"{amp}+compile" for amp in compiled]
    seconds_left = args.budget - (time.perf_counter() - start) - 5
    reference = torch_runs(args, precisions, os.path.join(args.out, "torch_epochs.json"),
                           max(20.0, seconds_left))
    runs = reference.get("runs", {})
    lines = [f"`ember train` on {reference.get('gpu', 'the GPU')}: ResNet9 width {args.size}, "
             f"batch {args.batch}, "
             f"{args.limit} training images, {args.epochs} epochs; images/s = median of epochs "
             f"2..{args.epochs}. PyTorch {reference.get('torch', '?')}: bench/gpu/torch_epochs.py "
             "at the same precision (data on the GPU, augmented there).", "",
             "| engine | precision | ember images/s | epoch 1 | valid accuracy | PyTorch loop "
             "images/s | ember / PyTorch |", "|---|---|---:|---:|---:|---:|---:|"]
    for r in rows:
        theirs = runs.get(reference_of(r["amp"]), {}).get("images_per_s")
        if "error" in r:
            lines.append(f"| {r['engine']} | {label(r)} | {r['error'][:120]} | | | "
                         f"{rate(theirs)} | – |")
            continue
        ratio = f"{r['images_per_s'] / theirs:.2f}" if theirs else "–"
        lines.append(f"| {r['engine']} | {label(r)} | {r['images_per_s']:.0f} | "
                     f"{r['epochs'][0]['images_per_s']:.0f} | {100 * r['valid_accuracy']:.2f}% | "
                     f"{rate(theirs)} | {ratio} |")
    lines += set_up_lines(rows, runs, [p for p in precisions if "+" not in p])
    if compiled:
        lines += compile_lines(rows, reference, compiled)
    tf32 = runs.get("none-tf32", {}).get("images_per_s")
    if tf32:
        lines += ["", f"PyTorch's f32 loop with its default TF32 convolutions "
                  f"(cudnn.allow_tf32 True): {tf32:.0f} images/s. The `none` rows compare with "
                  "TF32 off, as ember computes f32; the `tf32` row (`ember train --tf32`) with it."]
    if "error" in reference:
        lines += ["", f"PyTorch's run failed: {reference['error']}"]
    table = "\n".join(lines) + "\n"
    with open(os.path.join(args.out, "engines.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out, "engines.json"), "w") as f:
        json.dump({"ember": rows, "torch": reference}, f, indent=1)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
