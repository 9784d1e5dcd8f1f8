# shellcheck shell=bash
# Sourced by embedding_test.sh and install_test.sh after they set `test_name`: a scratch folder
# ($work, removed on exit), `fail`, and what both check of the consumer program's compile command.

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

fail() {
  echo "${test_name:?set by the script that sources this file}: $*" >&2
  exit 1
}

# compile_command_of BUILD_FOLDER FILE_SUFFIX: the compile command of one source file, from the
# folder's compile_commands.json (CMake writes one `"command": "... -c FILE"` line per file).
compile_command_of() {
  grep -m1 "\"command\": .* -c [^ ]*$2\"" "$1/compile_commands.json" |
    sed 's/^ *"command": "//; s/",\{0,1\}$//' || true
}

# expect_user_flags COMMAND: what ember::ember gives a program of a user's own (C++20 and
# EMBER_WITH_CUDA) and what it must not (ember's warning flags).
expect_user_flags() {
  [[ "$1" =~ -std=(c|gnu)\+\+(20|2a) ]] || fail "the program is not compiled as C++20"
  [[ "$1" == *"-DEMBER_WITH_CUDA="[01]* ]] || fail "the program does not get EMBER_WITH_CUDA"
  local flag
  for flag in -Wall -Wextra -Werror; do
    [[ " $1 " != *" $flag "* ]] || fail "ember's $flag reached the program: $1"
  done
}
