#!/usr/bin/env bash
# Filtered egress against a direct connection, in the same run: per-connection latency, HTTP
# request latency, bulk throughput, DNS stub latency, the per-sandbox cost of the path made ahead
# and the engine's memory per idle sandbox (bench/network.cc); then hutchd's create->exec->delete
# with "network":"filtered" against "loopback", alternated (bench/daemon.cc).
# Usage: bench/network.sh [--runs N] [--bulk-mib N] [--sandboxes N]   (as root)
#
# Nothing leaves this machine: the upstream is a network namespace U made here (198.51.100.10 on
# a veth end), the direct client a namespace D on the veth's other end; the engine dials from U.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ $(id -u) == 0 ]] || { echo "bench/network.sh: needs root (network namespaces)" >&2; exit 1; }

build_dir=${HUTCH_BUILD_DIR:-build}
[[ -f $build_dir/CMakeCache.txt ]] || cmake -S . -B "$build_dir" >/dev/null
cmake --build "$build_dir" --target network_bench hutchd daemon_bench >/dev/null

tmp=$(mktemp -d /tmp/hutch-bench-network.XXXXXX)
hutchd=$(realpath "$build_dir/daemon/hutchd")
state=$tmp/state
source bench/hutchd_lib.sh
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; cleanup' EXIT

# A process holding a new network namespace; its pid in $held.
hold_netns() {
  unshare -n sleep infinity </dev/null >/dev/null 2>&1 &
  held=$!
  pids+=("$held")
  for _ in $(seq 100); do
    [[ $(readlink "/proc/$held/ns/net") != $(readlink /proc/self/ns/net) ]] && return
    sleep 0.01
  done
  echo "bench/network.sh: unshare -n did not make a network namespace" >&2
  exit 1
}
hold_netns
upstream=$held
hold_netns
direct=$held
nsenter -t "$direct" -n ip link add d0 type veth peer name u0 netns "$upstream"
nsenter -t "$direct" -n sh -c 'ip link set lo up; ip addr add 198.51.100.1/24 dev d0; ip link set d0 up'
nsenter -t "$upstream" -n sh -c 'ip link set lo up; ip addr add 198.51.100.10/24 dev u0; ip link set u0 up'

"$build_dir/bench/network_bench" --upstream-netns "/proc/$upstream/ns/net" \
  --direct-netns "/proc/$direct/ns/net" "$@"

# hutchd: create cost of a filtered sandbox over a loopback one (the path is installed and the
# listeners bound before the create returns).
start_daemon
for round in 1 2 3; do
  for mode in loopback filtered; do
    echo "hutchd create->exec->delete, network $mode (round $round):"
    "$build_dir/bench/daemon_bench" --socket "$tmp/hutchd.sock" --lifecycle-only --runs 100 \
      --create-body "{\"network\":\"$mode\"}" | grep -E "create"
  done
done
stop_daemon
