#!/usr/bin/env bash
# Builds the benchmarks and runs them on this machine, writing a dated markdown report to
# bench/results/ (the side-by-side tables against LibTorch, then the Google Benchmark suite).
#   bench/run_cpu.sh [threads]        (default 2; run on a quiet machine)
set -euo pipefail
cd "$(dirname "$0")/.."
threads=${1:-2}
cmake -S . -B build-bench -G Ninja -DEMBER_BENCH=ON -DEMBER_TESTS=OFF -DEMBER_CUDA=OFF >/dev/null
cmake --build build-bench --parallel "$(nproc)" --target ember_bench ember_vs_libtorch ember_vs_libtorch_models
report=bench/results/cpu-$(date +%Y-%m-%d).md
{
  echo "# CPU benchmarks, $(date +%Y-%m-%d)"
  echo
  echo "Machine: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $threads threads;"
  echo "command: \`bench/run_cpu.sh $threads\` (OMP_WAIT_POLICY=PASSIVE for the model steps)."
  echo
  ./build-bench/bin/ember_vs_libtorch "$threads"
  echo
  OMP_WAIT_POLICY=PASSIVE ./build-bench/bin/ember_vs_libtorch_models "$threads"
  echo
  echo '```'
  OMP_NUM_THREADS=$threads ./build-bench/bin/ember_bench --benchmark_repetitions=3 \
    --benchmark_report_aggregates_only=true 2>/dev/null | grep -E "median|Benchmark|---"
  echo '```'
} | tee "$report"
echo "wrote $report"
