#!/usr/bin/env bash
# DASO against DDP when the nodes are joined by a slow link: 4 ranks posing as 2 nodes x 2
# (EMBER_LOCAL_SIZE=2), with EMBER_SIMULATE_GLOBAL_LINK delaying what crosses between the nodes
# (DDP: every bucket of every step; DASO: its global averages only). Trains resnet9 on a slice of
# Fashion-MNIST with `ember train` and prints, per engine, the median train seconds per epoch, the
# whole run's time and the final and best validation accuracy.
#   bench/daso_vs_ddp.sh [link "latency_us,GBps"] [epochs] [train images] [build dir]
set -euo pipefail
cd "$(dirname "$0")/.."
link=${1:-1000,0.02}
epochs=${2:-10}
images=${3:-6000}
build=${4:-build}
cmake --build "$build" --target ember_cli >/dev/null
echo "# DASO vs DDP, 4 ranks as 2 nodes x 2, EMBER_SIMULATE_GLOBAL_LINK=$link, $epochs epochs of $images images"
echo
echo "| engine | median train s / epoch | run time s | last valid acc | best valid acc |"
echo "|---|---:|---:|---:|---:|"
for engine in ddp daso; do
  logdir=$(mktemp -d)
  start=$(date +%s.%N)
  OMP_NUM_THREADS=1 EMBER_LOCAL_SIZE=2 EMBER_SIMULATE_GLOBAL_LINK=$link \
    mpirun --allow-run-as-root --oversubscribe -np 4 "$build/bin/ember" train --engine "$engine" \
    --epochs "$epochs" --limit-train "$images" --limit-valid 2000 --logdir "$logdir" --quiet >/dev/null
  end=$(date +%s.%N)
  python3 - "$logdir/metrics.csv" "$engine" "$start" "$end" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
seconds = statistics.median(float(r["train_seconds"]) for r in rows)
accuracies = [float(r["valid_accuracy"]) for r in rows]
print(f"| {sys.argv[2]} | {seconds:.1f} | {float(sys.argv[4]) - float(sys.argv[3]):.0f} | "
      f"{accuracies[-1] * 100:.2f}% | {max(accuracies) * 100:.2f}% |")
PY
  rm -rf "$logdir"
done
