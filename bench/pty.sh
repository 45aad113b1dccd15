#!/usr/bin/env bash
# PTY keystroke -> echo latency through hutchd over its unix socket (goal: p50 <= 2 ms): one byte
# posted to .../ptys/{pid}/input, timed until the terminal's echo comes back on the followed
# output stream (bench/pty_latency.py, python3's standard library).
# Usage: bench/pty.sh [--keystrokes N]   (N >= 200; default 300)
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${HUTCH_BUILD_DIR:-build}
[[ -f $build_dir/CMakeCache.txt ]] || cmake -S . -B "$build_dir" >/dev/null
cmake --build "$build_dir" --target hutchd >/dev/null

tmp=$(mktemp -d /tmp/hutch-bench-pty.XXXXXX)
hutchd=$(realpath "$build_dir/daemon/hutchd")
state=$tmp/state
source bench/hutchd_lib.sh

start_daemon
/usr/bin/python3 bench/pty_latency.py --socket "$tmp/hutchd.sock" "$@"
stop_daemon
