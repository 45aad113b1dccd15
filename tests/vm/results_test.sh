#!/usr/bin/env bash
# scripts/vm/results.sh on made-up guest console logs: what the VM runs count as passed and failed,
# and when the run fails. No VM, no root.
set -euo pipefail
results=${1:-$(dirname "$0")/../../scripts/vm/results.sh}
work=$(mktemp -d "${TMPDIR:-/tmp}/hutch-results-test.XXXXXX")
trap 'rm -rf "$work"' EXIT
failures=0

# expect NAME WANT_STATUS WANT_LAST_LINE QEMU_STATUS BINARY...: the console log is on stdin.
expect() {
  local name=$1 want_status=$2 want_line=$3 qemu_status=$4 out status=0 last
  shift 4
  cat >"$work/console.log"
  out=$(HUTCH_VM_NAME=t "$results" "$work/console.log" "$qemu_status" 60 1.0 "$@" 2>&1) || status=$?
  last=$(tail -n1 <<<"$out")
  if [[ $status != "$want_status" || $last != "t: $want_line" ]]; then
    printf 'FAIL %s: exit %s, last line "%s"; want exit %s, "t: %s"\n%s\n' \
      "$name" "$status" "$last" "$want_status" "$want_line" "$out"
    failures=$((failures + 1))
  else
    echo "ok   $name"
  fi
}

expect "gtest binary, all passed" 0 "3 passed, 0 failed" 0 unit_tests <<'LOG'
HUTCH-VM-BEGIN unit_tests
[==========] 3 tests from 1 test suite ran. (5 ms total)
[  PASSED  ] 3 tests.

HUTCH-VM-RESULT unit_tests 0
HUTCH-VM-DONE
LOG

expect "ctest summary counts each test" 1 "97 passed, 3 failed" 0 ctest-suite.sh <<'LOG'
HUTCH-VM-BEGIN ctest-suite.sh
100/100 Test #100: A.B ....   Passed    0.10 sec

97% tests passed, 3 tests failed out of 100

HUTCH-VM-RESULT ctest-suite.sh 8
HUTCH-VM-DONE
LOG

expect "ctest skips are not passes" 0 "4 passed, 0 failed" 0 ctest-suite.sh <<'LOG'
HUTCH-VM-BEGIN ctest-suite.sh
100% tests passed, 0 tests failed out of 5

The following tests did not run:
	  3 - A.Skips (Skipped)

HUTCH-VM-RESULT ctest-suite.sh 0
HUTCH-VM-DONE
LOG

expect "skips quoted in a failed test's output are not skips" 1 "2 passed, 1 failed" 0 \
  ctest-suite.sh <<'LOG'
HUTCH-VM-BEGIN ctest-suite.sh
  3/3 Test   #3: A.Quotes ....***Failed    0.10 sec
The following tests did not run:
	  9 - Other.Skips (Skipped)

67% tests passed, 1 tests failed out of 3

HUTCH-VM-RESULT ctest-suite.sh 8
HUTCH-VM-DONE
LOG

expect "ctest passed but exited non-zero" 1 "4 passed, 1 failed" 0 ctest-suite.sh <<'LOG'
HUTCH-VM-BEGIN ctest-suite.sh
100% tests passed, 0 tests failed out of 4

HUTCH-VM-RESULT ctest-suite.sh 8
HUTCH-VM-DONE
LOG

expect "ctest cut short by the budget: the unfinished tests fail" 1 "2 passed, 4 failed" 124 \
  ctest-suite.sh demo <<'LOG'
HUTCH-VM-BEGIN ctest-suite.sh
        Start   1: A.One
  1/5 Test   #1: A.One ....   Passed    0.10 sec
  2/5 Test   #2: A.Two ....***Failed    0.20 sec
  3/5 Test   #3: A.Three ..   Passed    0.30 sec
        Start   4: A.Four
LOG

expect "a script without a summary counts once, by its exit status" 1 "1 passed, 1 failed" 0 \
  demo other <<'LOG'
HUTCH-VM-BEGIN demo
== create a sandbox
HUTCH-VM-RESULT demo 0
HUTCH-VM-BEGIN other
HUTCH-VM-RESULT other 125
HUTCH-VM-DONE
LOG

expect "a guest that never finished fails although its tests passed" 1 "1 passed, 0 failed" 0 \
  unit_tests <<'LOG'
HUTCH-VM-BEGIN unit_tests
[==========] 1 test from 1 test suite ran. (5 ms total)
[  PASSED  ] 1 test.
HUTCH-VM-RESULT unit_tests 0
LOG

if ((failures)); then
  echo "$failures of the results cases failed"
  exit 1
fi
echo "every results case passed"
