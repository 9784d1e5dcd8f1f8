#!/usr/bin/env bash
# The `ember` program as a user runs it: help, flag errors, training, byte-exact resume,
# checkpoint inspection and refusal of a damaged checkpoint.
#   tests/cli/cli_test.sh path/to/ember
# Exits 77 (CTest: skipped) when Fashion-MNIST is not installed.
set -uo pipefail
ember=$1
data=${EMBER_FASHION_MNIST:-/usr/share/datasets/fashion-mnist}
source "$(dirname "$0")/checks.sh"

same_checkpoints() {  # same_checkpoints A B: byte-identical, or say which tensors differ
  cmp "$1" "$2" && return 0
  "$ember" ckpt diff "$1" "$2"
  return 1
}

diff_names_what_differs() {  # after one epoch and after two: exit 1, the epoch and a weight named
  "$ember" ckpt diff "$work/epoch1.ckpt" "$work/straight/last.ckpt" >"$work/diff"
  [ $? -eq 1 ] && cat "$work/diff" && grep -q "metadata checkpoint.epoch: '1' in a, '2' in b" "$work/diff" &&
    grep -q "tensor model.0.0.weight  F32 (4,1,3,3): [0-9]* of 36 elements differ" "$work/diff"
}

check "ember --help" "$ember" --help
check "ember train --help" bash -c "'$ember' train --help | grep -q -- --resume"
check "unknown command" fails_saying "unknown command 'trian'" "$ember" trian
check "unknown flag" fails_saying "unknown flag --epoch" "$ember" train --epoch 2
check "a path after --resume" fails_saying "--resume takes no value: it continues from DIR/last.ckpt" \
  "$ember" train --resume "$work/last.ckpt"
check "bad integer" fails_saying "--epochs expects an integer, got 'two'" "$ember" train --epochs two
check "bad choice" fails_saying "--amp must be one of {none, fp16, bf16}" "$ember" train --amp fp8
check "missing data" fails_saying "does not exist" "$ember" train --data "$work/nowhere"
check "bad engine" fails_saying "--engine must be one of {auto, cpu, cuda, amp, o2, dp, dp-amp, dp-o2, ddp" \
  "$ember" train --engine tpu
if "$ember" version 2>&1 | grep -q "CUDA devices visible: 0"; then
  check "cuda engine without a GPU" fails_saying "engine 'cuda'" "$ember" train --engine cuda --data "$work/nowhere"
fi
check "ddp engine without a launcher" fails_saying "start it under a launcher, e.g. mpirun -np 2" \
  "$ember" train --engine ddp --data "$work/nowhere"
check "--sync-bn without ddp is refused" fails_saying "--sync-bn goes with the ddp engines" \
  "$ember" train --engine cpu --sync-bn --data "$work/nowhere"
check "--tf32 on the CPU is refused" fails_saying "runs on the CPU, where it would change nothing" \
  "$ember" train --engine cpu --tf32 --data "$work/nowhere"
check "--cudnn-benchmark on the CPU is refused" fails_saying "where there is nothing to choose" \
  "$ember" train --engine cpu --cudnn-benchmark --data "$work/nowhere"
check "device contradicts engine" fails_saying "contradicts --engine" \
  "$ember" train --engine cpu --device cuda --data "$work/nowhere"
check "--help after other flags" bash -c "'$ember' train --epochs 2 --help | grep -q -- --resume"
check "a text flag does not take the next flag as its value" \
  fails_saying "--logdir needs a value, got the flag --quiet" "$ember" train --logdir --quiet
check "an integer past int64 is out of range" \
  fails_saying "--epochs must be in [1, 1000], got 9999999999999999999" \
  "$ember" train --epochs 9999999999999999999
check "a number is shown as given" fails_saying "--lr must be in [1e-08, 10], got 10.000001" \
  "$ember" train --lr 10.000001
check "a number past double's range is out of range" \
  fails_saying "--lr must be in [1e-08, 10], got 1e-400" "$ember" train --lr 1e-400
check "version takes no arguments" fails_saying "version: takes no arguments, got '--bogus'" \
  "$ember" version --bogus
# OpenBLAS's kernels (kernels/cpu/blas_kernels_advice.h): a user's OPENBLAS_CORETYPE is kept, and
# on a CPU with AVX2 ember never runs OpenBLAS's pre-AVX2 kernels (Debian 12's OpenBLAS takes its
# Prescott kernels on Intel's Emerald Rapids; ember then starts itself again with better ones).
check "version names OpenBLAS's kernels" bash -c "'$ember' version | grep -q 'OpenBLAS kernels: '"
check "a user's OPENBLAS_CORETYPE is kept" \
  bash -c "OPENBLAS_CORETYPE=Prescott '$ember' version | grep -q 'OpenBLAS kernels: Prescott (OPENBLAS_CORETYPE)'"
if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
  check "on a CPU with AVX2, no pre-AVX2 OpenBLAS kernels" bash -c "env -u OPENBLAS_CORETYPE \
    '$ember' version | grep 'OpenBLAS kernels: ' | grep -vqiE 'kernels: (Unknown|Katmai|Coppermine|Northwood|Prescott|Banias|Atom|Core2|Penryn|Dunnington|Nehalem|Athlon|Opteron|Opteron_SSE3|Barcelona|Nano|Sandybridge|Bobcat|Bulldozer|Piledriver) '"
fi
check "a checkpoint that is no file is refused" \
  fails_saying "'/dev/zero' is not a regular file" timeout 20 "$ember" ckpt inspect /dev/zero
check "report --help" bash -c "'$ember' report --help | grep -q LOGDIR"
check "report without logs" fails_saying "no metrics.csv or metrics.jsonl" "$ember" report "$work"
check "resume without checkpoint" fails_saying "no checkpoint at" \
  "$ember" train --data "$work/nowhere" --resume --logdir "$work/empty"

if [ ! -f "$data/train-images-idx3-ubyte.gz" ]; then
  skip_rest "no Fashion-MNIST at $data, so no training"
fi

# On the CPU, GPU or not (byte-identical resumes; a GPU's engines are the section below).
few=(--data "$data" --limit-train 192 --limit-valid 64 --batch-size 32 --model-size 4 --quiet)
small=("${few[@]}" --device cpu)
check "train 2 epochs" "$ember" train "${small[@]}" --epochs 2 --logdir "$work/straight"
check "train 1 of 2 epochs" "$ember" train "${small[@]}" --epochs 2 --stop-after 1 --logdir "$work/resumed"
cp "$work/resumed/last.ckpt" "$work/epoch1.ckpt"  # (for ckpt diff below)
check "resume" "$ember" train "${small[@]}" --epochs 2 --resume --logdir "$work/resumed"
check "resumed run is byte-identical" \
  same_checkpoints "$work/straight/last.ckpt" "$work/resumed/last.ckpt"
check "metrics have a header and two epochs" \
  bash -c "[ \$(wc -l < '$work/resumed/metrics.csv') -eq 3 ] && head -1 '$work/resumed/metrics.csv' | grep -q valid_accuracy"
check "resume with other flags is refused" fails_saying "resume with the same flags" \
  "$ember" train "${small[@]}" --epochs 2 --model-size 8 --resume --logdir "$work/resumed"
check "metrics.jsonl has two epochs" bash -c "[ \$(wc -l < '$work/resumed/metrics.jsonl') -eq 2 ]"
cp "$work/straight/metrics.csv" "$work/straight_metrics.csv"
check "a new run into a logdir that holds one is refused" \
  fails_saying "holds an earlier run (last.ckpt, best.ckpt, metrics.csv, metrics.jsonl): pass --resume" \
  "$ember" train "${small[@]}" --epochs 1 --logdir "$work/straight"
check "... and leaves the earlier run as it was" cmp "$work/straight/metrics.csv" "$work/straight_metrics.csv"
check "--resume with --overwrite is refused" fails_saying "pass one of them" \
  "$ember" train "${small[@]}" --epochs 1 --resume --overwrite --logdir "$work/resumed"
check "--overwrite replaces the run" bash -c "'$ember' train ${small[*]} --epochs 1 --overwrite \
  --logdir '$work/overwritten' && '$ember' train ${small[*]} --epochs 1 --seed 7 --overwrite \
  --logdir '$work/overwritten' && [ \$(wc -l < '$work/overwritten/metrics.csv') -eq 2 ]"
check "resume with another --lr is refused" fails_saying "was made with lr = 0.002, this run asks for 0.5" \
  "$ember" train "${small[@]}" --epochs 2 --lr 0.5 --resume --logdir "$work/resumed"
check "resume of an f32 run on --engine amp is refused" \
  fails_saying "was made with amp = none, this run asks for bf16" \
  "$ember" train "${small[@]}" --epochs 2 --engine amp --resume --logdir "$work/resumed"
mkdir -p "$work/edited"
cp "$work/epoch1.ckpt" "$work/edited/last.ckpt"
{ printf 'garbage,header\n'; tail -n +2 "$work/resumed/metrics.csv"; } > "$work/edited/metrics.csv"
cp "$work/edited/metrics.csv" "$work/edited_metrics.csv"
check "resume refuses a metrics.csv whose header it did not write" \
  fails_saying "metrics.csv's header does not start with epoch" \
  "$ember" train "${small[@]}" --epochs 2 --resume --logdir "$work/edited"
check "... and leaves it as it was" cmp "$work/edited/metrics.csv" "$work/edited_metrics.csv"
mkdir -p "$work/report_dir"
check "report --out an existing directory is refused" fails_saying "is a directory; expected a file name" \
  "$ember" report "$work/straight" --out "$work/report_dir"
check "tensorboard events written" bash -c "ls '$work/straight/tensorboard/' | grep -q '^events.out.tfevents.'"
check "report draws the curves" bash -c "'$ember' report '$work/straight' && grep -q valid_accuracy '$work/straight/report.svg' && grep -q '</svg>' '$work/straight/report.svg'"
check "--amp fp16 runs the AMP engine" bash -c "'$ember' train ${small[*]} --epochs 1 --amp fp16 --logdir '$work/amp' | grep -q 'engine amp-fp16 cpu'"
check "o2 train 2 epochs" "$ember" train "${small[@]}" --epochs 2 --engine o2 --logdir "$work/o2_straight"
check "o2 train 1 of 2 epochs" "$ember" train "${small[@]}" --epochs 2 --engine o2 --stop-after 1 --logdir "$work/o2_resumed"
check "o2 resume" "$ember" train "${small[@]}" --epochs 2 --engine o2 --resume --logdir "$work/o2_resumed"
check "o2 resumed run is byte-identical" \
  same_checkpoints "$work/o2_straight/last.ckpt" "$work/o2_resumed/last.ckpt"
# dp picks the GPUs when there are some (cuDNN's backward may then differ between runs).
if "$ember" version 2>&1 | grep -q "CUDA devices visible: 0"; then
  check "dp fp16 train 2 epochs" "$ember" train "${few[@]}" --epochs 2 --engine dp --amp fp16 \
    --logdir "$work/dp_straight"
  check "dp fp16 train 1 of 2 epochs" "$ember" train "${few[@]}" --epochs 2 --engine dp --amp fp16 \
    --stop-after 1 --logdir "$work/dp_resumed"
  check "dp fp16 resume" "$ember" train "${few[@]}" --epochs 2 --engine dp --amp fp16 --resume \
    --logdir "$work/dp_resumed"
  check "dp fp16 resumed run is byte-identical" \
    same_checkpoints "$work/dp_straight/last.ckpt" "$work/dp_resumed/last.ckpt"
fi
check "--engine dp-o2 trains O2 in DataParallel" bash -c "'$ember' train ${few[*]} --epochs 1 \
  --engine dp-o2 --amp bf16 --logdir '$work/dp_o2' | grep -q 'on dp-o2-bf16'"
check "--engine dp-amp without --amp is bf16 on the CPU" bash -c "'$ember' train ${few[*]} \
  --epochs 1 --engine dp-amp --logdir '$work/dp_amp' | grep -q 'on dp-amp-bf16'"
check "dp: 1 of 2 epochs" "$ember" train "${few[@]}" --epochs 2 --engine dp --stop-after 1 \
  --logdir "$work/dp_to_cpu"
check "a dp run resumes on the cpu engine" "$ember" train "${small[@]}" --epochs 2 --resume \
  --logdir "$work/dp_to_cpu"
check "--engine o2 --device cpu runs O2 on the CPU" bash -c "'$ember' train ${small[*]} --epochs 1 --engine o2 --device cpu --amp bf16 --logdir '$work/o2_cpu' | grep -q 'engine o2-bf16 cpu'"
check "--engine amp --device cpu without --amp is bf16" bash -c "'$ember' train ${small[*]} --epochs 1 --engine amp --device cpu --logdir '$work/amp_cpu' | grep -q 'engine amp-bf16 cpu'"
if "$ember" version 2>&1 | grep -q "CUDA devices visible: 0"; then
  check "amp on a missing GPU says so" fails_saying "engine 'amp' on --device cuda" \
    "$ember" train --engine amp --device cuda --data "$work/nowhere"
fi
check "ckpt diff of a file with itself matches" bash -c \
  "'$ember' ckpt diff '$work/straight/last.ckpt' '$work/straight/last.ckpt' | grep -q 'the checkpoints match'"
check "ckpt diff names what differs" diff_names_what_differs
check "ckpt diff of a missing file exits 2" bash -c \
  "'$ember' ckpt diff '$work/nowhere.ckpt' '$work/straight/last.ckpt'; [ \$? -eq 2 ]"
check "ckpt inspect" bash -c "'$ember' ckpt inspect '$work/straight/best.ckpt' | grep -q 'model.0.0.weight  F32 (4,1,3,3)'"
cp "$work/straight/last.ckpt" "$work/damaged.ckpt"
printf '\x7f' | dd of="$work/damaged.ckpt" bs=1 seek=5000 conv=notrunc status=none
check "damaged checkpoint refused" fails_saying "refused" "$ember" ckpt inspect "$work/damaged.ckpt"

# Under mpirun (OpenMPI installed): a one-process engine is refused; an error on rank 0 alone
# ends the job at once, not after EMBER_COLLECTIVE_TIMEOUT (600 s: `timeout 120` would cut a hang);
# a one-process run resumes on two ranks, saying so; DASO says when a run is too short to skip.
# Only when ember has its MPI backend: the GPU machine has an mpirun but builds ember without MPI,
# and each process would then be a world of one.
if command -v mpirun >/dev/null && "$ember" version | grep -q "MPI backend: built"; then
  mpi=(env OMP_NUM_THREADS=1 mpirun --allow-run-as-root --oversubscribe -np 2)
  check "one-process engine under mpirun refused" \
    fails_saying "trains in one process, but a launcher started several" \
    "${mpi[@]}" "$ember" train "${few[@]}" --epochs 1 --engine cpu --logdir "$work/mpi_cpu"
  mkdir -p "$work/mpi_badlog/metrics.csv"
  check "an error on rank 0 alone ends the job" fails_saying "ending the other 1 processes" \
    timeout 120 "${mpi[@]}" "$ember" train "${few[@]}" --epochs 1 --engine ddp --overwrite \
    --logdir "$work/mpi_badlog"
  check "one process, 1 of 2 epochs" "$ember" train "${few[@]}" --epochs 2 --stop-after 1 --engine cpu \
    --logdir "$work/mpi_grow"
  check "resumed on 2 ranks, saying so" bash -c "${mpi[*]} '$ember' train ${few[*]} --epochs 2 --resume \
    --engine ddp --logdir '$work/mpi_grow' | grep -q 'resuming a run of 1 process (engine cpu) with 2'"
  check "the resumed run logged both epochs" bash -c "[ \$(wc -l < '$work/mpi_grow/metrics.csv') -eq 3 ]"
  if "$ember" version 2>&1 | grep -q "CUDA devices visible: 0"; then  # byte-identical on the CPU
    check "ddp-amp fp16 train 2 epochs" "${mpi[@]}" "$ember" train "${few[@]}" --epochs 2 --engine ddp-amp \
      --amp fp16 --logdir "$work/mpi_amp_straight"
    check "ddp-amp fp16 train 1 of 2 epochs" "${mpi[@]}" "$ember" train "${few[@]}" --epochs 2 \
      --engine ddp-amp --amp fp16 --stop-after 1 --logdir "$work/mpi_amp_resumed"
    check "ddp-amp fp16 resume" "${mpi[@]}" "$ember" train "${few[@]}" --epochs 2 --engine ddp-amp \
      --amp fp16 --resume --logdir "$work/mpi_amp_resumed"
    check "ddp-amp fp16 resumed run is byte-identical" \
      same_checkpoints "$work/mpi_amp_straight/last.ckpt" "$work/mpi_amp_resumed/last.ckpt"
  fi
  check "a bad EMBER_MPI_CUDA_AWARE is refused" fails_saying "EMBER_MPI_CUDA_AWARE must be 0" \
    env EMBER_MPI_CUDA_AWARE=yes "${mpi[@]}" "$ember" train "${few[@]}" --epochs 1 --engine ddp \
    --logdir "$work/mpi_cuda_aware"
  check "ddp --sync-bn trains with SyncBatchNorm" bash -c "${mpi[*]} '$ember' train ${few[*]} --epochs 1 \
    --engine ddp --sync-bn --logdir '$work/mpi_syncbn' | grep -q 'parameters, SyncBatchNorm) on ddp-cpu'"
  check "a batch that 3 ranks cannot share evenly is said as it is used" bash -c "${mpi[*]:0:5} -np 3 \
    '$ember' train ${few[*]} --epochs 1 --engine ddp --logdir '$work/mpi_three' \
    | grep -qF 'batch 30 (10 per rank x 3; 32 does not divide among the ranks)'"
  # Two nodes of one rank: each node's optimizer state differs and the checkpoint must hold both.
  daso2=(env EMBER_LOCAL_SIZE=1 "${mpi[@]}" "$ember" train "${few[@]}" --epochs 2 --engine daso)
  check "daso on 2 nodes, 2 epochs" "${daso2[@]}" --logdir "$work/daso_straight"
  check "daso on 2 nodes, 1 of 2 epochs" "${daso2[@]}" --stop-after 1 --logdir "$work/daso_resumed"
  cp -r "$work/daso_resumed" "$work/daso_one_node"
  check "daso on 2 nodes, resume" "${daso2[@]}" --resume --logdir "$work/daso_resumed"
  check "daso on 2 nodes: the resumed run is byte-identical" \
    same_checkpoints "$work/daso_straight/last.ckpt" "$work/daso_resumed/last.ckpt"
  check "daso on 2 nodes resumed on 1 says whose optimizer state it takes" bash -c "${mpi[*]} \
    '$ember' train ${few[*]} --epochs 2 --engine daso --resume --logdir '$work/daso_one_node' \
    | grep -qF 'resuming DASO on 1 node from a checkpoint of 2 nodes'"
  check "daso says a short run never skips" bash -c "${mpi[*]} '$ember' train ${few[*]} --epochs 2 \
    --engine daso --logdir '$work/mpi_daso' | grep -q 'averages every batch, blocking, for the whole run'"
fi

# On a GPU: each single-GPU engine trains an epoch, stops, and resumes for a second one from a
# checkpoint whose tensors went through the host (saved) and back to the device (loaded). cuDNN's
# backward may sum with atomics, so a resumed GPU run is not compared byte for byte with a
# straight one; the resume must run, log both epochs and name the same engine.
if "$ember" version 2>&1 | grep -qE "CUDA devices visible: [1-9]"; then
  gpu=(--data "$data" --limit-train 256 --limit-valid 64 --batch-size 32 --model-size 4 --quiet)
  # One epoch of 256 images first: what it printed is shown when it fails.
  "$ember" train "${gpu[@]}" --device cuda --epochs 1 --logdir "$work/gpu_one" >"$work/gpu_probe" 2>&1
  probe_status=$?
  check "gpu: one epoch of 256 images" test "$probe_status" -eq 0
  [ "$probe_status" -eq 0 ] || sed 's/^/    /' "$work/gpu_probe" | tail -20
  run_gpu() {  # run_gpu NAME ENGINE_NAME FLAGS...: 1 of 2 epochs, resume, both epochs logged
    local name=$1 engine_name=$2
    shift 2
    local dir="$work/gpu_$name"
    check "gpu $name: 1 of 2 epochs" bash -c "'$ember' train ${gpu[*]} $* --epochs 2 --stop-after 1 --logdir '$dir' | grep -q 'engine $engine_name'"
    check "gpu $name: resume" "$ember" train "${gpu[@]}" "$@" --epochs 2 --resume --logdir "$dir"
    check "gpu $name: two epochs logged" bash -c "[ \$(wc -l < '$dir/metrics.csv') -eq 3 ]"
    check "gpu $name: finite losses" bash -c "! grep -qiE 'nan|inf' '$dir/metrics.csv'"
    check "gpu $name: checkpoint names the engine" bash -c "'$ember' ckpt inspect '$dir/last.ckpt' | grep -q '$engine_name'"
  }
  run_gpu cuda "cuda:0" --device cuda
  run_gpu engine_cuda "cuda:0" --engine cuda
  run_gpu amp_bf16 "amp-bf16 cuda:0" --device cuda --amp bf16
  run_gpu amp_fp16 "amp-fp16 cuda:0" --device cuda --amp fp16
  run_gpu engine_amp_fp16 "amp-fp16 cuda:0" --engine amp --amp fp16
  run_gpu o2_bf16 "o2-bf16 cuda:0" --engine o2 --device cuda --amp bf16
  run_gpu o2_fp16 "o2-fp16 cuda:0" --engine o2 --amp fp16
fi

finish
