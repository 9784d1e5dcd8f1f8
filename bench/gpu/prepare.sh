#!/usr/bin/env bash
# Here (the machine without a GPU), once, in the repository root: fetch what bench/gpu/run.sh needs
# on the GPU machine into .debs/ (git-ignored), which the device call carries:
#   - Debian's OpenBLAS, GoogleTest, Google Benchmark and zlib headers, and OpenBLAS's runtime
#     needs (libgfortran5, libquadmath0), as .debs that run.sh unpacks into /tmp/deb (never /);
#   - Fashion-MNIST's four IDX .gz files (30 MB) in .debs/fashion-mnist, for `ember train`
#     (leave them out with --no-data: run.sh then skips `ember train` and says so).
#   - with --mpi, also OpenMPI 4.1 (runtime, headers, compiler wrappers) in .debs/mpi, for
#     run.sh's opt-in `mpi` step (bench/gpu/NOTES.md, "MPI on the GPU machine"): the ten
#     packages below, 4.9 MB. run.sh unpacks .debs/*.deb only, so without that step they lie unused.
# About 15 MB of packages, 45 MB with the data, 50 MB with --mpi too; the device call carries
# 64 MiB at most in all (working tree included, about 2.4 MB).
#
#   bash bench/gpu/prepare.sh [--no-data] [--mpi]
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
with_data=yes with_mpi=no
for arg in "$@"; do
  case $arg in
    --no-data) with_data=no ;;
    --mpi) with_mpi=yes ;;
    *) echo "prepare.sh: unknown option $arg (expected --no-data, --mpi)" >&2 && exit 2 ;;
  esac
done
git check-ignore -q .debs/x || echo /.debs/ >> "$(git rev-parse --git-path info/exclude)"
mkdir -p .debs
# A later run after a Debian point release would otherwise leave two versions of a package side by
# side, both unpacked by run.sh into the same prefix (the last in glob order winning).
rm -f .debs/*.deb
(cd .debs && apt-get download libopenblas0-pthread libopenblas-pthread-dev libopenblas-dev \
  libgtest-dev googletest libbenchmark-dev libbenchmark1debian zlib1g-dev libgfortran5 \
  libquadmath0)
if [[ $with_data == yes ]]; then
  data=/usr/share/datasets/fashion-mnist
  if [[ -f $data/train-images-idx3-ubyte.gz ]]; then
    mkdir -p .debs/fashion-mnist && cp "$data"/*.gz .debs/fashion-mnist/
  else
    echo "prepare.sh: no Fashion-MNIST in $data: run.sh will skip ember train" >&2
  fi
fi
if [[ $with_mpi == yes ]]; then
  # What OpenMPI needs to start 2-4 ranks on one machine over shared memory, and no more (checked
  # with readelf's NEEDED lists and by running in isolation from the system's OpenMPI, NOTES.md):
  # libpmix2 needs libmunge2 and libhwloc15 needs libudev1, which the GPU machine may lack. Left
  # out: libfabric1, libucx0, libpsm2-2, libibverbs1, librdmacm1, libnl-3-200 only serve the
  # InfiniBand/Omni-Path/UCX components (and their own needs, ibverbs-providers, libnuma1...),
  # which a single machine does not use; libevent-2.1-7 is needed by nothing here.
  rm -rf .debs/mpi && mkdir -p .debs/mpi
  (cd .debs/mpi && apt-get download libopenmpi3 openmpi-bin openmpi-common libopenmpi-dev \
    libpmix2 libhwloc15 libevent-core-2.1-7 libevent-pthreads-2.1-7 libmunge2 libudev1)
  du -sh .debs/mpi
fi
du -sh .debs
echo "now: device tool run(command=\"bash bench/gpu/run.sh\", carry=[\".debs\"], timeout_s=600)"
echo "(15 minutes of device time a session: bench/gpu/run.sh's header has the plan that fits)"
if [[ $with_mpi == yes ]]; then
  echo "and for MPI: run(command=\"bash bench/gpu/run.sh mpi\", carry=[\".debs\"], timeout_s=600)"
fi
