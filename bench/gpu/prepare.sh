#!/usr/bin/env bash
# Here (the machine without a GPU), once, in the repository root: fetch what bench/gpu/run.sh needs
# on the GPU machine into .debs/ (git-ignored), which the device call carries:
#   - Debian's OpenBLAS, GoogleTest, Google Benchmark and zlib headers, and OpenBLAS's runtime
#     needs (libgfortran5, libquadmath0), as .debs that run.sh unpacks into /tmp/deb (never /);
#   - Fashion-MNIST's four IDX .gz files (30 MB) in .debs/fashion-mnist, for `ember train`
#     (leave them out with --no-data: run.sh then skips `ember train` and says so).
# About 15 MB of packages, 45 MB with the data; the device call carries 64 MiB at most in all
# (working tree included).
#
#   bash bench/gpu/prepare.sh [--no-data]
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
git check-ignore -q .debs/x || echo /.debs/ >> "$(git rev-parse --git-path info/exclude)"
mkdir -p .debs
(cd .debs && apt-get download libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev \
  libgtest-dev googletest libbenchmark-dev libbenchmark1debian zlib1g-dev libgfortran5 \
  libquadmath0)
if [[ "${1:-}" != "--no-data" ]]; then
  data=/usr/share/datasets/fashion-mnist
  if [[ -f $data/train-images-idx3-ubyte.gz ]]; then
    mkdir -p .debs/fashion-mnist && cp "$data"/*.gz .debs/fashion-mnist/
  else
    echo "prepare.sh: no Fashion-MNIST in $data: run.sh will skip ember train" >&2
  fi
fi
du -sh .debs
echo "now: device tool run(command=\"bash bench/gpu/run.sh\", carry=[\".debs\"], timeout_s=600)"
