#!/usr/bin/env bash
# ember installed (cmake --install) and found by a project of a user's own with
# find_package(ember) (consumer/), as the README says. Checks:
#   - the development component installs headers, static libraries and the package files, and
#     nothing else (no sources, no tests); the ember_cli component, bin/ember, which runs;
#   - the installed tree can be moved: it refers to neither the source nor the build folder;
#   - find_package(ember 0.1) finds it, with the packages ember's libraries link;
#   - the program compiles against the installed headers (C++20, EMBER_WITH_CUDA, none of ember's
#     warning flags), links against the installed libraries, and runs one training step;
#   - the same program built by hand with pkg-config's flags (lib/pkgconfig/ember.pc) runs too.
#
# usage: install_test.sh EMBER_ROOT EMBER_BUILD_DIR CXX_COMPILER [CMAKE_ARGS...]
#   CMAKE_ARGS: passed to the consumer's configure (tests/CMakeLists.txt: ZLIB_ROOT where set).
set -euo pipefail
root=$1
build=$2
compiler=$3
shift 3
test_name=install_test
# shellcheck source=tests/embedding/common.sh
source "$(dirname "$0")/common.sh"

cmake --install "$build" --prefix "$work/staged" --component ember_development >"$work/install.log" 2>&1 ||
  { cat "$work/install.log"; fail "cmake --install of $build failed"; }
for expected in include/ember/nn/nn.h include/ember/runtime/tensor.h lib/libember_runtime.a \
  lib/libember_kernels.a lib/cmake/ember/emberConfig.cmake lib/cmake/ember/emberConfigVersion.cmake \
  lib/pkgconfig/ember.pc; do
  [ -f "$work/staged/$expected" ] || fail "$expected was not installed"
done
stray=$(find "$work/staged" -type f ! -name '*.h' ! -name '*.cuh' ! -name '*.a' ! -name '*.cmake' \
  ! -name ember.pc)
[ -z "$stray" ] || fail "files that are not headers, libraries or package files were installed: $stray"
# The command, where this build has it (component ember_cli), goes to bin/.
if [ -x "$build/bin/ember" ]; then
  cmake --install "$build" --prefix "$work/staged" --component ember_cli >>"$work/install.log" 2>&1 ||
    { cat "$work/install.log"; fail "cmake --install --component ember_cli failed"; }
  [ -x "$work/staged/bin/ember" ] || fail "bin/ember was not installed"
fi
! find "$work/staged" -path '*/tests/*' | grep -q . || fail "test files were installed"

# Moved after installing: a tree that still pointed at $root or $build would break here.
mv "$work/staged" "$work/prefix"
if grep -rlF -e "$root/" -e "$build" "$work/prefix/lib/cmake/ember" "$work/prefix/lib/pkgconfig"; then
  fail "the package files above name the source or build folder"
fi

# CMAKE_PREFIX_PATH: the installed ember first, then what the environment names (the GPU
# machine's carried Debian libraries).
cmake -S "$root/tests/embedding/consumer" -B "$work/consumer" -G Ninja \
  -DCMAKE_PREFIX_PATH="$work/prefix${CMAKE_PREFIX_PATH:+;${CMAKE_PREFIX_PATH//:/;}}" \
  -DCMAKE_CXX_COMPILER="$compiler" -DCMAKE_BUILD_TYPE=Release -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "$@" \
  >"$work/configure.log" 2>&1 ||
  { cat "$work/configure.log"; fail "find_package(ember 0.1) did not find the installed ember"; }
consumer=$(compile_command_of "$work/consumer" /consumer/main.cpp)
[ -n "$consumer" ] || fail "no compile command for consumer/main.cpp"
echo "consumer: $consumer"
[[ " $consumer " == *" $work/prefix/include/ember "* ]] || fail "the program does not get include/ember"
[[ "$consumer" != *"$root/runtime"* && " $consumer " != *" -I$root "* ]] ||
  fail "the program reads ember's headers from the source folder"
expect_user_flags "$consumer"

ninja -C "$work/consumer" >"$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "the program did not build against the installed ember"; }
output=$(OMP_NUM_THREADS=1 "$work/consumer/consumer") || fail "the program failed: $output"
echo "$output"
[[ "$output" =~ ^consumer:\ loss\ [0-9]+\.[0-9]+\ on\ cpu$ ]] || fail "unexpected output: $output"

# The same program built by hand with pkg-config's flags, as a Makefile would.
if command -v pkg-config >/dev/null; then
  export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
  if ! pc_cflags=$(pkg-config --cflags ember) || ! pc_libs=$(pkg-config --libs ember); then
    fail "pkg-config does not read the installed ember.pc"
  fi
  echo "pkg-config: $pc_cflags $pc_libs"
  # shellcheck disable=SC2086 # the flags are words
  "$compiler" $pc_cflags "$root/tests/embedding/consumer/main.cpp" $pc_libs -o "$work/consumer_pc" \
    >"$work/build_pc.log" 2>&1 ||
    { cat "$work/build_pc.log"; fail "the program did not build with pkg-config's flags"; }
  output=$(OMP_NUM_THREADS=1 "$work/consumer_pc") || fail "the pkg-config build failed: $output"
  [[ "$output" =~ ^consumer:\ loss\ [0-9]+\.[0-9]+\ on\ cpu$ ]] ||
    fail "unexpected output of the pkg-config build: $output"
else
  echo "install_test: pkg-config is not installed here; its part was not checked"
fi
if [ -x "$work/prefix/bin/ember" ]; then
  "$work/prefix/bin/ember" --help | grep -q "^usage: ember" || fail "the installed bin/ember does not run"
fi
echo "install_test: the installed ember is found, moved, compiled against, linked and run (CMake and pkg-config)"
