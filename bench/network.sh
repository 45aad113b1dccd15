#!/usr/bin/env bash
# Filtered egress against a direct connection, in the same run: per-connection latency, HTTP
# request latency, HTTPS requests on terminated (injected) connections over HTTP/1.1 and over h2,
# bulk throughput, DNS stub latency, the per-sandbox cost of the path made ahead and the engine's
# memory per idle sandbox (bench/network.cc); then hutchd's create with
# "network":"filtered" against "loopback", alternated (bench/daemon.cc), with and without
# namespaces made ahead, back to back and with the pools refilled before each create.
# Usage: bench/network.sh [--runs N] [--bulk-mib N] [--sandboxes N]   (as root)
# On a shared machine the bulk rate is mostly the CPU share the run gets (the engine's path has
# three busy threads, the direct one two): `bulk cpu` (CPU time per GiB) is steadier, and
# `chrt -f 10 bench/network.sh` keeps the machine's other processes from deciding the figures.
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

# hutchd: create cost of a filtered sandbox over a loopback one, A/B in this run: with no
# namespaces made ahead (--net-ahead 0: the path is installed and the listeners bound before the
# create returns) and with hutchd's default pool (the create joins a namespace made ahead), the
# latter twice: creates back to back (the pool's refill of the previous create's namespace, ~2 ms
# of CPU, shares the 2 cores with the next create) and creates that find the pool refilled
# (--wait-made-ahead, untimed, as the warm pool's bench waits for its refill).
# Rounds alternate the modes; each figure is the median over rounds of the round's p50 / p95.
# Each delete waits for its teardown (--delete-wait): a filtered sandbox's teardown (the engine's
# detach, the kernel freeing a namespace with a veth and a table) would otherwise run during the
# next create on this 2-core machine and be counted as create cost (+0.5 ms measured).
rounds=3
for setup in "0:back to back" "4:back to back" "4:the pools refilled before each create"; do
  ahead=${setup%%:*}
  how=${setup#*:}
  wait_flag=
  [[ $how == "back to back" ]] || wait_flag=--wait-made-ahead
  start_daemon --net-ahead "$ahead"
  : >"$tmp/create"
  for round in $(seq "$rounds"); do
    for mode in loopback filtered; do
      "$build_dir/bench/daemon_bench" --socket "$tmp/hutchd.sock" --lifecycle-only --delete-wait \
        $wait_flag --runs 100 --create-body "{\"network\":\"$mode\"}" |
        awk -v mode="$mode" '$1 == "create" { print mode, $3, $6 }' >>"$tmp/create"
    done
  done
  stop_daemon
  echo "hutchd create, --net-ahead $ahead, $how ($rounds rounds of 25 creates, median of rounds):"
  awk '
    function median(list, n,   i, j, t) {
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (list[j] < list[i]) {
        t = list[i]; list[i] = list[j]; list[j] = t }
      return n % 2 ? list[(n + 1) / 2] : (list[n / 2] + list[n / 2 + 1]) / 2
    }
    { n[$1]++; p50[$1, n[$1]] = $2; p95[$1, n[$1]] = $3 }
    END {
      for (m in n) {
        for (i = 1; i <= n[m]; i++) { a[i] = p50[m, i]; b[i] = p95[m, i] }
        mid[m] = median(a, n[m]); tail[m] = median(b, n[m])
        printf "  %-9s p50 %7.3f ms   p95 %7.3f ms\n", m, mid[m], tail[m]
      }
      printf "  filtered - loopback p50 %+.3f ms, ratio %.2f (p95 ratio %.2f)\n",
        mid["filtered"] - mid["loopback"], mid["filtered"] / mid["loopback"],
        tail["filtered"] / tail["loopback"]
    }' "$tmp/create"
done
