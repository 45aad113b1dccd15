#!/usr/bin/env bash
# hutchd latency and throughput, with per-command peers (bubblewrap, `hutch run`, fork/exec) in the
# same run; create latency with and without a warm pool.
# Usage: bench/daemon.sh [--runs N] [--seconds S] [--clients 1,2,4,8]
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${HUTCH_BUILD_DIR:-build}
[[ -f $build_dir/CMakeCache.txt ]] || cmake -S . -B "$build_dir" >/dev/null
cmake --build "$build_dir" --target hutchd hutch daemon_bench >/dev/null

tmp=$(mktemp -d /tmp/hutch-bench-daemon.XXXXXX)
hutchd=$(realpath "$build_dir/daemon/hutchd")
state=$tmp/state
source bench/hutchd_lib.sh

peers=(--peer "fork-exec=/bin/true")
peers+=(--peer "hutch-run=$(realpath "$build_dir/hutch") run --no-limits -- /bin/true")
if command -v bwrap >/dev/null; then
  peers+=(--peer "bwrap=$(command -v bwrap) --unshare-all --ro-bind / / --proc /proc --dev /dev /bin/true")
else
  echo "bwrap: not installed, skipped (scripts/setup.sh installs it)"
fi
# A warm pool first (create served from idle sandboxes made ahead), then none.
start_daemon --warm-pool host=4
"$build_dir/bench/daemon_bench" --socket "$tmp/hutchd.sock" --warm-pool --lifecycle-only "$@"
stop_daemon
start_daemon
"$build_dir/bench/daemon_bench" --socket "$tmp/hutchd.sock" "${peers[@]}" "$@"
# Creates as an agent makes them, apart: the machine idles between them. Measured on this kind of
# 2-core VM with each delete awaited (daemon_bench --delete-wait), loopback creates 50 ms apart
# took p50 ~4.2 ms against ~3.1 ms back to back: the idle cores' wake-up is part of a real create.
"$build_dir/bench/daemon_bench" --socket "$tmp/hutchd.sock" --lifecycle-only --spaced-ms 50 "$@"
