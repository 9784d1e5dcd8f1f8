# The small harness that tests/cli's scripts share (sourced, not run): a scratch folder removed at
# exit, and checks counted so that one failure does not hide the next.
#   check NAME COMMAND...         the command must succeed (its output's tail is shown if not)
#   fails_saying TEXT COMMAND...  the command must fail and print TEXT (use it inside check)
#   finish                        prints the counts; exits 0 when nothing failed, else 1
#   skip_rest WHY                 prints the counts and why the rest cannot run; exits 77 (CTest:
#                                 skipped) when nothing failed so far, else 1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
passed=0
failed=0

check() {
  local name=$1
  shift
  if "$@" > "$work/out" 2>&1; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAILED: $name"
    sed 's/^/    /' "$work/out" | tail -20
  fi
}

fails_saying() {
  local text=$1
  shift
  ! "$@" > "$work/err" 2>&1 && grep -qF -- "$text" "$work/err"
}

finish() {
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ]
  exit
}

skip_rest() {
  echo "$passed passed, $failed failed (the rest skipped: $1)"
  [ "$failed" -eq 0 ] && exit 77
  exit 1
}
