#!/usr/bin/env bash
# ember built into a project of a user's own with add_subdirectory (consumer/), as the README
# says to embed it. Checks what that project gets:
#   - its program compiles against ember's headers (C++20, EMBER_WITH_CUDA, the include folder);
#   - ember's warning flags (-Wall, -Werror) stay on ember's own code and never reach the program;
#   - ember's own warnings are not errors there, no tests or programs of ember are built, and
#     ember adds no install rules.
# Linking the program would build all of ember a second time, so only its compile is run.
#
# usage: embedding_test.sh EMBER_ROOT CXX_COMPILER [CMAKE_ARGS...]
#   CMAKE_ARGS: what the build running the test was configured with and the consumer needs too
#   (tests/CMakeLists.txt passes EMBER_MPI, and ZLIB_ROOT where set: the GPU machine has no MPI).
set -euo pipefail
root=$1
compiler=$2
shift 2
test_name=embedding_test
# shellcheck source=tests/embedding/common.sh
source "$(dirname "$0")/common.sh"

if ! cmake -S "$root/tests/embedding/consumer" -B "$work" -G Ninja -DEMBER_ROOT="$root" \
  -DCMAKE_CXX_COMPILER="$compiler" -DEMBER_CUDA=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON "$@" \
  >"$work/configure.log" 2>&1; then
  cat "$work/configure.log"
  fail "the consumer project did not configure"
fi

consumer=$(compile_command_of "$work" /consumer/main.cpp)
ember_source=$(compile_command_of "$work" /runtime/tensor.cpp)
[ -n "$consumer" ] || fail "no compile command for consumer/main.cpp"
[ -n "$ember_source" ] || fail "no compile command for ember's runtime/tensor.cpp"
echo "consumer: $consumer"

[[ " $consumer " == *" -I$root "* ]] || fail "the program does not get ember's include folder ($root)"
expect_user_flags "$consumer"
[[ " $ember_source " == *" -Wall "* ]] || fail "ember's own code lost its warnings: $ember_source"
[[ " $ember_source " != *" -Werror "* ]] || fail "ember's warnings are errors inside another project"

targets=$(ninja -C "$work" -t targets all)
for target in ember_runtime_tests ember_cli ember_api_tour; do
  ! grep -q "^$target:" <<<"$targets" || fail "$target is built inside another project"
done

# EMBER_INSTALL is off there: installing the user's project installs nothing of ember's.
! grep -rqs "emberTargets\|libember_" "$work/ember/cmake_install.cmake" ||
  fail "ember's install rules are on inside another project"

ninja -C "$work" CMakeFiles/consumer.dir/main.cpp.o >"$work/build.log" 2>&1 ||
  { cat "$work/build.log"; fail "the program did not compile against ember's headers"; }
echo "embedding_test: the program compiles against ember's headers with its own flags"
