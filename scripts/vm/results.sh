#!/usr/bin/env bash
# The host side's reading of a guest console log (scripts/test-cgroupv2-vm.sh calls it once qemu
# has ended; tests/vm/results_test.sh feeds it made-up logs):
#
#   scripts/vm/results.sh CONSOLE_LOG QEMU_STATUS BUDGET VM_TIME NAME...
#
# For each NAME (in the order run) prints its output (between the HUTCH-VM-BEGIN and
# HUTCH-VM-RESULT markers that scripts/vm/init.sh writes; not with HUTCH_VM_VERBOSE=1, which
# streamed the console already), then the guest's kernel messages if any, one result line per
# NAME, the VM wall time and, last, "$HUTCH_VM_NAME: N passed, M failed". N and M count gtest
# tests (its summary), ctest tests (its summary, or for a run cut short its finished tests, every
# other one failed), else 1 per NAME by exit status. QEMU_STATUS is timeout(1)'s: 124/137 mean
# the VM ran out of its BUDGET seconds. Exit status: 0 every test passed and the guest finished;
# 1 otherwise.
set -euo pipefail

prog=${HUTCH_VM_NAME:-cgroupv2-vm}
say() { printf '%s: %s\n' "$prog" "$*"; }
(($# >= 4)) || {
  echo "usage: $0 CONSOLE_LOG QEMU_STATUS BUDGET VM_TIME NAME..." >&2
  exit 2
}
raw=$1 vm_rc=$2 budget=$3 vm_time=$4
shift 4
names=("$@")
verbose=${HUTCH_VM_VERBOSE:-0}
text=$(mktemp "${TMPDIR:-/tmp}/hutch-vm-results.XXXXXX")
trap 'rm -f "$text"' EXIT
# Plain text: no CRs, no terminal escapes (SeaBIOS clears the screen).
tr -d '\r' <"$raw" | sed -E $'s/\e\\[[0-9;?]*[A-Za-z]//g; s/\ec//g' >"$text"
timed_out=0
if ((vm_rc == 124 || vm_rc == 137)); then timed_out=1; fi
problems=0
print_tail() {
  echo "----- last 60 console lines -----"
  tail -n 60 "$text" | awk '{ print }' # ends the last line, even if the guest did not
  echo "---------------------------------"
}

total_pass=0 total_fail=0 total_skip=0
declare -a lines=()
for name in "${names[@]}"; do
  # The binary's output: from its BEGIN marker to its RESULT marker (or the end of the log).
  # Markers may follow output that lacked a final newline: match them at the end of a line.
  section=$(awk -v b="HUTCH-VM-BEGIN $name" -v r="HUTCH-VM-RESULT $name " '
    !on && substr($0, length($0) - length(b) + 1) == b { on = 1; next }
    on && (i = index($0, r)) && substr($0, i + length(r)) ~ /^[0-9]+$/ { exit }
    on { print }' "$text")
  rc=$(awk -v r="HUTCH-VM-RESULT $name " '
    (i = index($0, r)) && substr($0, i + length(r)) ~ /^[0-9]+$/ { rc = substr($0, i + length(r)) }
    END { print rc }' "$text")
  if [[ $verbose != 1 ]]; then
    echo "===== $name ====="
    [[ -z $section ]] || printf '%s\n' "$section"
  fi
  # gtest: "[==========] 7 tests from 2 test suites ran." "[  PASSED  ] 6 tests." "[  SKIPPED ] 1 test"
  ran=$(sed -nE 's/^\[==========\] ([0-9]+) tests? from .* ran\..*/\1/p' <<<"$section" | tail -n1)
  pass=$(sed -nE 's/^\[  PASSED  \] ([0-9]+) tests?\..*/\1/p' <<<"$section" | tail -n1)
  skip=$(sed -nE 's/^\[  SKIPPED \] ([0-9]+) tests?.*/\1/p' <<<"$section" | tail -n1)
  skip=${skip:-0}
  # ctest: "95% tests passed, 20 tests failed out of 411" (skips count as passed there).
  ct_fail="" ct_total=""
  read -r ct_fail ct_total < <(sed -nE \
    's/^[0-9]+% tests passed, ([0-9]+) tests? failed out of ([0-9]+)$/\1 \2/p' <<<"$section" |
    tail -n1) || true
  if [[ -n ${ct_total:-} ]]; then
    # ctest lists them after its summary (a test's own output may quote such lines).
    skip=$(awk '/^[0-9]+% tests passed, / { n = 0 } /^[[:space:]]*[0-9]+ - .* \(Skipped\)$/ { n++ }
      END { print n + 0 }' <<<"$section")
    ran=$ct_total pass=$((ct_total - ct_fail - skip))
  fi
  if [[ -z $rc ]]; then
    if [[ -n $section ]]; then what="started but left no result"; else what="never ran"; fi
    p=0 f=1 s=0
    why="VM ended early"
    ((timed_out == 0)) || why="VM timed out"
    # A ctest run cut short: its finished tests count, every other one is a failure.
    ct_total=$(sed -nE 's|^ *[0-9]+/([0-9]+) Test +#[0-9]+: .*|\1|p' <<<"$section" | tail -n1)
    if [[ -n $ct_total ]]; then
      p=$(grep -cE '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .* Passed +[0-9.]+ sec$' <<<"$section" || true)
      f=$((ct_total - p))
      lines+=("$name: $what ($why): $p of $ct_total ctest tests passed, the other $f counted as failed")
    else
      lines+=("$name: $what ($why), counted as 1 failed")
    fi
    problems=1
  elif [[ -n $ran && -n $pass ]]; then
    p=$pass s=$skip f=$((ran - pass - skip))
    note=""
    if ((rc != 0 && f == 0)); then
      f=1
      note=" (exit $rc after its tests passed: counted as 1 failed)"
    elif ((ran == 0)); then
      f=1
      note=" (it ran no tests: counted as 1 failed)"
    fi
    ((s == 0)) || note=", $s skipped$note"
    lines+=("$name: exit $rc, $p passed, $f failed$note")
  else
    s=0
    if ((rc == 0)); then p=1 f=0 what=passed; else p=0 f=1 what=failed; fi
    lines+=("$name: exit $rc (no gtest or ctest summary: counted as 1 $what)")
  fi
  total_pass=$((total_pass + p)) total_fail=$((total_fail + f)) total_skip=$((total_skip + s))
done

kmsg=$(sed -n '/^HUTCH-VM-DMESG-BEGIN/,/^HUTCH-VM-DMESG-END/{/^HUTCH-VM-DMESG-/d;p}' "$text")
if [[ -n $kmsg ]]; then
  echo "===== guest kernel messages while the tests ran ====="
  printf '%s\n' "$kmsg"
fi
if grep -q '^hutch-vm: FATAL' "$text"; then
  say "guest setup failed: $(grep -m1 '^hutch-vm: FATAL' "$text")"
  problems=1
fi
if ((timed_out)); then
  say "VM TIMED OUT: no poweroff within the ${budget} s budget (HUTCH_VM_TIMEOUT)"
  problems=1
elif ((vm_rc != 0)); then
  say "qemu exited with status $vm_rc"
  problems=1
elif ! grep -q '^HUTCH-VM-DONE' "$text"; then
  say "the guest did not finish its run (kernel panic or init died?)"
  problems=1
fi
((problems == 0 || verbose == 1)) || print_tail

echo "===== results ====="
for l in "${lines[@]}"; do say "$l"; done
((total_skip == 0)) || say "note: $total_skip tests skipped although HUTCH_MUST_WORK=1"
guest_up=$(sed -nE 's/^hutch-vm: done, up ([0-9.]+) s$/\1/p' "$text")
# The guest's first line may follow SeaBIOS's "Booting from ROM.." on the same line.
guest_boot=$(sed -nE 's/^.*hutch-vm: kernel .*; up ([0-9.]+) s$/\1/p' "$text")
times="budget ${budget} s"
[[ -z $guest_boot ]] || times+="; tests started at guest uptime $guest_boot s"
[[ -z $guest_up ]] || times+="; guest uptime at poweroff $guest_up s"
say "VM wall time ${vm_time} s ($times)"
say "$total_pass passed, $total_fail failed"
((total_fail == 0 && problems == 0))
