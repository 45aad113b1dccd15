#!/usr/bin/env bash
# Sets up hutch and shows what a sandbox is, on the embedded default rootfs "host" (no download).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
hutch=build/hutch

step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "$2"; }

step "kernel features hutch uses" "hutch info"
$hutch info

step "who am I inside (root, mapped to an unprivileged host id)" \
  "hutch run -- sh -c 'id; cat /proc/self/uid_map; hostname'"
$hutch run -- sh -c 'id; cat /proc/self/uid_map; hostname'

step "locked down: no capabilities, no_new_privs, seccomp filter" \
  "hutch run -- grep -E 'CapEff|CapBnd|NoNewPrivs|Seccomp:' /proc/self/status"
$hutch run -- grep -E 'CapEff|CapBnd|NoNewPrivs|Seccomp:' /proc/self/status

step "host tools work at once; writes are copy-on-write and vanish with the sandbox" \
  "hutch run -- sh -c 'echo hi > /usr/local/bin/demo && python3 -c \"print(open(\\\"/usr/local/bin/demo\\\").read().strip())\"'"
$hutch run -- sh -c 'echo hi > /usr/local/bin/demo && python3 -c "print(open(\"/usr/local/bin/demo\").read().strip())"'
if [ -e /usr/local/bin/demo ]; then echo "host changed: /usr/local/bin/demo exists" >&2; exit 1; fi
echo "(host /usr/local/bin/demo: absent)"

step "host secrets are invisible" "hutch run -- sh -c 'ls -A /root /home; cat /etc/shadow'"
$hutch run -- sh -c 'ls -A /root /home; cat /etc/shadow' || echo "(exit $?: as expected)"

step "dangerous syscalls are refused" "hutch run -- unshare -U true"
$hutch run -- unshare -U true || echo "(exit $?: as expected)"

step "a timeout kills the whole sandbox, detached grandchildren included" \
  "hutch run --timeout 300ms --json -- sh -c 'setsid sleep 100 & sleep 100'"
$hutch run --timeout 300ms --json -- sh -c 'setsid sleep 100 & sleep 100' || echo "(exit $?: 124 = timed out)"

step "limits: a memory hog is OOM-killed at --memory and reported" \
  "hutch run --memory 64M --json -- python3 -c 'x = [bytearray(8 << 20) for _ in range(64)]'"
$hutch run --memory 64M --json -- python3 -c 'x = [bytearray(8 << 20) for _ in range(64)]' || echo "(exit $?: 137 = OOM-killed)"

step "limits: a fork bomb stops at --pids while the host stays responsive" \
  "hutch run --pids 64 --timeout 1s --json -- sh -c 'sleep 5 & (b() { b | b & }; b); wait' 2>/dev/null"
$hutch run --pids 64 --timeout 1s --json -- sh -c 'sleep 5 & (b() { b | b & }; b); wait' 2>/dev/null || echo "(exit $?: 124 = timed out, bomb contained)"
