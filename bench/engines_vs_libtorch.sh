#!/usr/bin/env bash
# Images per second of `ember train` per engine on this CPU (1, 2 and 4 processes), side by side
# with the plain LibTorch loop of bench/libtorch_train_loop.cpp on the same model, batch, optimizer
# and input pipeline. The runs alternate (ember, LibTorch, ember, ...) so that a noisy machine
# slows both alike; each figure is the median of REPS runs of one epoch over LIMIT images.
#
#   bench/engines_vs_libtorch.sh [REPS=3] [LIMIT=4096]     (needs EMBER_BENCH=ON and LibTorch)
#
# Writes a markdown table to stdout. One process gets 2 threads (both cores), 2 and 4 processes
# one thread each (4 processes oversubscribe the 2 cores, for both libraries alike). Every run uses
# OMP_WAIT_POLICY=PASSIVE: both libraries share libgomp, whose spinning threads otherwise take the
# time slices their team needs on a loaded machine.
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
limit=${2:-4096}
build=${BUILD:-build-cpu}
ember=$build/bin/ember
loop=$build/bin/ember_libtorch_train_loop
mpiexec=$(readlink -f "$(command -v mpirun)")
for binary in "$ember" "$loop"; do
  [ -x "$binary" ] || { echo "missing $binary: cmake -DEMBER_BENCH=ON, build ember_cli and ember_libtorch_train_loop" >&2; exit 1; }
done
# The same OpenBLAS kernels for both: `ember` overrules OpenBLAS's pre-AVX2 choice on a CPU with
# AVX2 or AVX-512 (kernels/cpu/blas_kernels_advice.h), the LibTorch loop would not.
if [[ -z ${OPENBLAS_CORETYPE+set} ]]; then
  kernels=$("$ember" version | sed -n 's/^  OpenBLAS kernels: \([A-Za-z0-9_]*\).*/\1/p')
  [[ -n $kernels ]] && export OPENBLAS_CORETYPE=$kernels
fi
common=(--epochs 1 --batch-size 128 --model-size 16 --limit-train "$limit")
logdir=$(mktemp -d)
trap 'rm -rf "$logdir"' EXIT

# launch NP [ENV=VALUE...] -- COMMAND...: runs COMMAND alone (NP=1) or under mpirun.
launch() {
  local np=$1
  shift
  local env=()
  while [ "$1" != "--" ]; do env+=("$1"); shift; done
  shift
  local threads=$((np == 1 ? 2 : 1))
  if [ "$np" -eq 1 ]; then
    env OMP_WAIT_POLICY=PASSIVE OMP_NUM_THREADS=$threads "${env[@]}" "$@"
  else
    local exported=()
    for e in "${env[@]}"; do exported+=(-x "$e"); done
    env OMP_WAIT_POLICY=PASSIVE "$mpiexec" --allow-run-as-root --oversubscribe \
      -x OMP_WAIT_POLICY -x OMP_NUM_THREADS=$threads "${exported[@]}" -np "$np" "$@"
  fi
}

# ember_images_per_second NP ENGINE[:AMP] [ENV...]: the train loader's throughput of one epoch
# (amp:fp16 runs `--engine amp --amp fp16`; without :AMP the engine's default precision).
ember_images_per_second() {
  local np=$1 engine=${2%%:*} precision=()
  [[ $2 == *:* ]] && precision=(--amp "${2#*:}")
  shift 2
  rm -rf "$logdir/run"
  launch "$np" "$@" -- "$ember" train --engine "$engine" "${precision[@]}" "${common[@]}" \
    --limit-valid 256 --quiet --logdir "$logdir/run" >/dev/null
  python3 -c "import csv,sys; r=list(csv.DictReader(open(sys.argv[1]))); print(r[-1]['train_throughput'])" \
    "$logdir/run/metrics.csv"
}

libtorch_images_per_second() {
  local np=$1
  shift
  launch "$np" -- "$loop" "${common[@]}" "$@" | sed -n 's/^throughput //p'
}

median() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }

# case: NP ENGINE [ENV...]  (the LibTorch run of the same NP goes alongside each ember run)
# (dp-o2 has no `ember train` flag: the library's engine table has it.)
cases=(
  "1 cpu"
  "1 amp"
  "1 amp:fp16"
  "1 o2"
  "1 dp"
  "1 dp:bf16"
  "2 ddp"
  "2 ddp-amp"
  "2 ddp-amp:fp16"
  "2 ddp-o2"
  "2 daso EMBER_LOCAL_SIZE=1"
  "4 ddp"
  "4 ddp-amp"
  "4 daso EMBER_LOCAL_SIZE=2"
)
declare -A torch_runs
echo "| processes | engine | ember images/s | LibTorch loop images/s | ember / LibTorch |"
echo "|---|---|---|---|---|"
for c in "${cases[@]}"; do
  read -r np engine env <<<"$c"
  ember_runs=()
  for ((r = 0; r < reps; ++r)); do
    ember_runs+=("$(ember_images_per_second "$np" "$engine" $env)")
    torch_runs[$np]+="$(libtorch_images_per_second "$np") "
  done
  mine=$(median "${ember_runs[@]}")
  # shellcheck disable=SC2086
  theirs=$(median ${torch_runs[$np]})
  printf '| %s | %s | %.0f | %.0f | %.2f |\n' "$np" "$engine${env:+ ($env)}" "$mine" "$theirs" \
    "$(python3 -c "print($mine / $theirs)")"
done
echo
echo "ember: \`ember train --engine E ${common[*]}\`; LibTorch: \`ember_libtorch_train_loop ${common[*]}\`"
echo "(f32, plain MPI_Allreduce of all gradients after backward under mpirun); $reps runs each, medians;"
echo "the LibTorch column is the median of every LibTorch run at that process count so far."
echo "OpenBLAS kernels for both: ${OPENBLAS_CORETYPE:-as OpenBLAS picks them} (OPENBLAS_CORETYPE)."
