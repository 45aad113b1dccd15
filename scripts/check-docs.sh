#!/usr/bin/env bash
# Keeps the docs and the code in step (scripts/test.sh runs it after the native ctest):
# 1. every test the docs cite exists: `Suite.Test` (or a `Suite.*` pattern) in backticks anywhere
#    in README.md and docs/*.md, and in the test column of docs/security.md's tables also a bare
#    `Test` (of the suite cited before it in the cell; not in parentheses) or a bare `Suite`,
#    against what the built gtest binaries list (--gtest_list_tests), VM-only tests included;
# 2. every tracked .cc/.h file is as clang-format (the repo's .clang-format) would write it.
# Usage: scripts/check-docs.sh [BUILD_DIR] (default build). Exit status 1 names every mismatch.
set -euo pipefail
cd "$(dirname "$0")/.."
build_dir=${1:-build}
failures=0

fail() {
  echo "check-docs: $*" >&2
  failures=$((failures + 1))
}

# --- 1. cited tests -------------------------------------------------------------------------
# The gtest binaries are the commands of ctest's gtest entries (the scripts among its tests take
# no --gtest_list_tests).
mapfile -t binaries < <(ctest --test-dir "$build_dir" -N -V 2>/dev/null |
  sed -n 's/^.*Test command: \([^ ]*\) .*--gtest_filter.*$/\1/p' | sort -u)
if ((${#binaries[@]} == 0)); then
  echo "check-docs: FAILED: no gtest binary in $build_dir (build it first)" >&2
  exit 1
fi
# Every test as Suite.Test; a parameterized one also without its instantiation prefix and
# parameter ("Freezers/KillFallbackTest.Kills/0" is cited as "KillFallbackTest.Kills").
tests=()
for binary in "${binaries[@]}"; do
  listing=$("$binary" --gtest_list_tests) || {
    fail "FAILED: $binary --gtest_list_tests"
    continue
  }
  while IFS= read -r line; do
    if [[ $line =~ ^([^[:space:]]+\.)([[:space:]].*)?$ ]]; then
      suite=${BASH_REMATCH[1]}
    elif [[ $line =~ ^[[:space:]]+([^[:space:]]+) ]]; then
      full=$suite${BASH_REMATCH[1]}
      suite_part=${full%%.*}
      test_part=${full#*.}
      tests+=("$full" "${suite_part##*/}.${test_part%%/*}")
    fi
  done <<<"$listing"
done
mapfile -t tests < <(printf '%s\n' "${tests[@]}" | sort -u)
suites=$(printf '%s\n' "${tests[@]}" | sed 's/\..*//' | sort -u)

# Whether a cited name or pattern (shell glob: `RecoveryTest.*Ends*`) matches a test.
exists() {
  local cited=$1 test
  for test in "${tests[@]}"; do
    # shellcheck disable=SC2053 # $cited is a pattern on purpose
    [[ $test == $cited ]] && return 0
  done
  return 1
}

cited=0
# Qualified names in backticks, in every doc: file:line:name.
while IFS=: read -r file line name; do
  cited=$((cited + 1))
  exists "$name" || fail "$file:$line: \`$name\` is no test of the build"
done < <(grep -noE '`[A-Z][A-Za-z0-9_]*(/[A-Za-z0-9_]+)?\.[A-Za-z0-9_*]+`' README.md docs/*.md |
  tr -d '`')

# Bare names in the test column (the last cell) of docs/security.md's tables whose last header
# cell starts with "test".
line_number=0
header=""
test_table=false
while IFS= read -r row; do
  line_number=$((line_number + 1))
  if [[ $row != \|*\| ]]; then
    test_table=false
    continue
  fi
  cell=${row%|}
  cell=${cell##*|}
  if [[ $row =~ ^\|[-:|\ ]+\|$ ]]; then
    [[ $header =~ ^[[:space:]]*test ]] && test_table=true
    continue
  fi
  header=$cell
  $test_table || continue
  # A parenthesis explains (what a test checks: `CapEff` 0); it cites no test by a bare name.
  cell=$(sed 's/([^)]*)//g' <<<"$cell")
  suite=""
  while IFS= read -r token; do
    if [[ $token == *.* ]]; then
      [[ $token =~ ^[A-Z][A-Za-z0-9_]*(/[A-Za-z0-9_]+)?\. ]] && suite=${token%%.*}
    elif [[ $token =~ ^[A-Z][A-Za-z0-9_]*$ ]]; then
      cited=$((cited + 1))
      if grep -qx "$token" <<<"$suites"; then
        continue
      elif [[ -z $suite ]]; then
        fail "docs/security.md:$line_number: \`$token\` is no suite (and no suite precedes it)"
      elif ! exists "$suite.$token"; then
        fail "docs/security.md:$line_number: \`$token\` is no test of $suite"
      fi
    fi
  done < <(grep -oE '`[^`]+`' <<<"$cell" | tr -d '`')
done <docs/security.md
echo "check-docs: $cited test citations checked against ${#tests[@]} test names"

# --- 2. formatting --------------------------------------------------------------------------
if ! command -v clang-format >/dev/null; then
  echo "check-docs: FAILED: clang-format is not installed (scripts/setup.sh installs it)" >&2
  exit 1
fi
# Without it clang-format would silently check against LLVM's style.
[[ -f .clang-format ]] || fail "FAILED: no .clang-format at the top of the tree"
mapfile -t sources < <(git ls-files '*.cc' '*.h')
# One run over every file; each violation is reported as "path:line:col: error: ...".
format_rc=0
format_log=$(clang-format --style=file --dry-run -Werror "${sources[@]}" 2>&1) || format_rc=$?
unformatted=$(sed -n 's/^\([^: ]*\):[0-9]*:[0-9]*: error: .*/\1/p' <<<"$format_log" | sort -u)
if ((format_rc != 0)) && [[ -z $unformatted ]]; then
  fail "FAILED: clang-format exited $format_rc: ${format_log:0:2000}"
elif [[ -n $unformatted ]]; then
  while IFS= read -r source; do
    fail "$source is not clang-formatted (clang-format -i $source)"
  done <<<"$unformatted"
fi
echo "check-docs: ${#sources[@]} sources checked with $(clang-format --version)"

if ((failures)); then
  echo "check-docs: FAILED: $failures mismatch(es) above" >&2
  exit 1
fi
echo "check-docs: OK"
