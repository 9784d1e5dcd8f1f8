#!/usr/bin/env bash
# One call on the GPU machine (see ../shared/GPU.md): unpack the Debian libraries carried in .debs,
# build for sm_90 with CUDA on, run every test (the GPU tests run there instead of skipping), and
# write logs under $OUT.
#
#   here, once:  echo /.debs/ >> .git/info/exclude; mkdir -p .debs && (cd .debs && apt-get download \
#                  libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev libgtest-dev \
#                  libbenchmark-dev libbenchmark1debian googletest zlib1g-dev)
#   device tool: run(command="bash bench/gpu/run.sh", carry=[".debs"])
#
# Not yet run on a GPU: the first session with one should fix what this gets wrong.
set -uo pipefail
OUT=${OUT:-/tmp/ember-gpu-out}
mkdir -p "$OUT" /tmp/deb
for f in .debs/*.deb; do dpkg -x "$f" /tmp/deb; done
export CMAKE_PREFIX_PATH=/tmp/deb/usr
export LD_LIBRARY_PATH=/tmp/deb/usr/lib/x86_64-linux-gnu/openblas-pthread:/tmp/deb/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1

cudnn_root=$(python3 -c "import nvidia.cudnn, os; print(os.path.dirname(nvidia.cudnn.__file__))" 2>/dev/null || true)
{
  cmake -S . -B build-gpu -G Ninja -DEMBER_CUDA=ON -DEMBER_MPI=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
    ${cudnn_root:+-DCUDNN_ROOT=$cudnn_root} &&
    cmake --build build-gpu --parallel 16
} > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }

(cd build-gpu && OMP_NUM_THREADS=8 ctest --output-on-failure --timeout 600 -j8) > "$OUT/ctest.log" 2>&1
status=$?
./build-gpu/bin/ember_cuda_tests --gtest_output=json:"$OUT/cuda_tests.json" > "$OUT/cuda_tests.log" 2>&1
grep -E "tests passed|tests failed|FAILED|PASSED|SKIPPED" "$OUT/ctest.log" "$OUT/cuda_tests.log" | tail -20
exit $status
