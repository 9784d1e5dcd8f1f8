#!/usr/bin/env bash
# Host replay of kernels/cuda/pooling.cu's generic kernels (pool_forward_kernel and
# pool_backward_kernel): their source is cut out of the .cu file, compiled for the host with the
# CUDA keywords defined away, and every thread of small grids is run in turn against the CPU
# kernels, under ASan and UBSan. No GPU needed; prints "N cases, M mismatches", exit 1 on any.
#   bash bench/gpu/host_replay/run.sh
set -euo pipefail
root=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
source_file=$root/kernels/cuda/pooling.cu
start=$(grep -n '^enum class Pool' "$source_file" | cut -d: -f1)
end=$(grep -n '^// ---- max pooling over 2x2' "$source_file" | cut -d: -f1)
sed -n "${start},$((end - 1))p" "$source_file" > "$work/body.inc"
g++ -std=c++20 -O1 -g -fsanitize=address,undefined -fopenmp -I"$root" -I"$work" \
  "$(dirname "$0")/pooling_replay.cpp" "$root/kernels/cpu/pooling.cpp" \
  "$root/kernels/cpu/convert_runs.cpp" -o "$work/pooling_replay"
"$work/pooling_replay"
