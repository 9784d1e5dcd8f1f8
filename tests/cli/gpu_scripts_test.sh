#!/usr/bin/env bash
# The GPU session's scripts, tried on the CPU: a session lent a GPU has 15 minutes of device time,
# and a syntax error or a crash in bench/gpu/ would spend them on nothing.
#   tests/cli/gpu_scripts_test.sh path/to/ember [python3]
# - run.sh and prepare.sh parse (bash -n);
# - every bench/gpu/*.py parses (with a Python);
# - engines_gpu.py runs end to end on the CPU with a tiny model: a `cpu` row with its images/s and
#   the first-epoch table, a `--cudnn-benchmark` row refused by ember (no GPU) and shown as an
#   error, an EMBER_CUDNN_GRAPH=1 row (amp fp16, which the CPU runs, ignoring the variable), and the torch.compile table. Where this Python has no torch (CI), PyTorch's run fails
#   and the tables say so; where it has one (torch 1.13 here: no torch.compile), the eager loops
#   run on the CPU and the compiled one is reported as failed;
# - bad --engines and --torch-compile values are refused with a message.
# Exits 77 (CTest: skipped) when neither a Python nor Fashion-MNIST is there to try the rest.
set -uo pipefail
ember=$1
python=${2:-}
here=$(cd "$(dirname "$0")/../.." && pwd)
data=${EMBER_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
source "$(dirname "$0")/checks.sh"

check "run.sh parses" bash -n "$here/bench/gpu/run.sh"
check "prepare.sh parses" bash -n "$here/bench/gpu/prepare.sh"

if [ -z "$python" ]; then
  skip_rest "no Python, so bench/gpu/*.py not tried"
fi

parse_python() {
  "$python" -c 'import ast, sys
for path in sys.argv[1:]:
    with open(path) as f:
        ast.parse(f.read(), path)' "$here"/bench/gpu/*.py
}
check "bench/gpu/*.py parse" parse_python

engines_gpu=("$python" "$here/bench/gpu/engines_gpu.py" --ember "$ember" --data "$data"
  --size 4 --limit 512 --epochs 2 --torch-device cpu)
check "--engines with a bad entry is refused" \
  fails_saying "--engines: cpu: expected engine:precision[:benchmark|:graph]" \
  "${engines_gpu[@]}" --out "$work/bad" --engines cpu
check "--torch-compile with a bad precision is refused" \
  fails_saying "--torch-compile: bf17: expected none, none-tf32, bf16 or fp16" \
  "${engines_gpu[@]}" --out "$work/bad" --torch-compile bf17

if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
  skip_rest "no Fashion-MNIST in $data, so engines_gpu.py not run"
fi

run_engines() {
  "${engines_gpu[@]}" --out "$work/engines" --engines cpu:none,amp:bf16:benchmark,amp:fp16:graph \
    --budget 240
}
check "engines_gpu.py runs on the CPU" run_engines
table=$work/engines/engines.md
echo "--- engines.md"
cat "$table" 2> /dev/null
echo "---"
# The rows: images/s, epoch 1 and a valid accuracy for cpu; ember's refusal for the benchmark row.
check "a cpu row with its figures" grep -qE '^\| cpu \| none \| [0-9]+ \| [0-9]+ \| [0-9.]+% \|' "$table"
check "the benchmark row shows ember's refusal" \
  grep -qE '^\| amp \| bf16 \(--cudnn-benchmark\) \| exit [0-9]+: .*--cudnn-benchmark' "$table"
check "the graph row is labelled, with its figures (the CPU ignores EMBER_CUDNN_GRAPH)" \
  grep -qE '^\| amp \| fp16 \(EMBER_CUDNN_GRAPH=1\) \| [0-9]+ \| [0-9]+ \| [0-9.]+% \|' "$table"
check "the first-epoch table has the cpu row" grep -qE '^\| cpu \| none \| [0-9.]+ \| [0-9.]+ \|' "$table"
check "the torch.compile table is there" grep -qF "PyTorch's loop under torch.compile" "$table"
check "engines.json is JSON" "$python" -c 'import json, sys; json.load(open(sys.argv[1]))' \
  "$work/engines/engines.json"
check "a stderr.log per ember row" test -f "$work/engines/train_cpu_none/stderr.log"

finish
