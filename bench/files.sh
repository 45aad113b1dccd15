#!/usr/bin/env bash
# File API throughput: a PUT and a GET of 512 MiB (random bytes) through hutchd's unix socket with
# curl, against baselines measured in the same run on the same data: `cp` from tmpfs to tmpfs (what
# a PUT does minus HTTP: the sandbox's writable layer is a tmpfs) and `cat` to /dev/null (a GET
# minus HTTP). Prints the median and p95 of each (MiB/s) and the ratio of the medians.
# Usage: bench/files.sh [--runs N] [--mib M]
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5
mib=512
while [[ $# -gt 0 ]]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --mib) mib=$2; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--mib M]" >&2; exit 2 ;;
  esac
done

build_dir=${HUTCH_BUILD_DIR:-build}
[[ -f $build_dir/CMakeCache.txt ]] || cmake -S . -B "$build_dir" >/dev/null
cmake --build "$build_dir" --target hutchd >/dev/null

tmp=$(mktemp -d /dev/shm/hutch-bench-files.XXXXXX)  # tmpfs, as the sandbox's writable layer
hutchd=$(realpath "$build_dir/daemon/hutchd")
state=$tmp/state
source bench/hutchd_lib.sh

head -c $((mib << 20)) /dev/urandom >"$tmp/data"
start_daemon
api() { curl -sS --fail-with-body --unix-socket "$tmp/hutchd.sock" -H 'Expect:' "$@"; }
disk=$(((mib * 2 + 64) << 20))
id=$(api -X POST -H 'Content-Type: application/json' -d "{\"limits\": {\"disk_bytes\": $disk}}" \
  http://hutchd/v1/sandboxes | jq -r .id)
url="http://hutchd/v1/sandboxes/$id/files?path=/root/bench.bin"

now() { date +%s%N; }
# Runs "$@" $runs times; prints the MiB/s of each run, one a line.
measure() {
  for _ in $(seq "$runs"); do
    local start end
    start=$(now)
    "$@" >/dev/null
    end=$(now)
    awk -v mib="$mib" -v ns=$((end - start)) 'BEGIN { printf "%.1f\n", mib / (ns / 1e9) }'
  done
}
# "median p95" of the numbers on stdin.
stats() {
  sort -n | awk '{ v[NR] = $1 } END {
    m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    # p95 of throughput: the slow tail, the run 95% of runs beat (nearest rank from below).
    i = int(NR * 0.05) + 1
    printf "%.0f %.0f\n", m, v[i] }'
}

put_api() { api -T "$tmp/data" "$url"; }
get_api() { api -o /dev/null "$url"; }
copy_host() { cp "$tmp/data" "$tmp/copy" && rm "$tmp/copy"; }
read_host() { cat "$tmp/data"; }

put_api >/dev/null
api -o "$tmp/back" "$url"
cmp "$tmp/data" "$tmp/back" || { echo "GET returned other bytes than the PUT sent" >&2; exit 1; }
rm "$tmp/back"

read -r put_med put_p95 < <(measure put_api | stats)
read -r cp_med cp_p95 < <(measure copy_host | stats)
read -r get_med get_p95 < <(measure get_api | stats)
read -r cat_med cat_p95 < <(measure read_host | stats)

echo "file API throughput, $mib MiB, $runs runs, MiB/s (median, p95 = slowest 5%):"
printf '  %-36s %8s %8s\n' "" median p95
printf '  %-36s %8s %8s\n' "PUT via hutchd (curl -T, unix socket)" "$put_med" "$put_p95"
printf '  %-36s %8s %8s\n' "baseline: cp tmpfs -> tmpfs" "$cp_med" "$cp_p95"
printf '  %-36s %8s %8s\n' "GET via hutchd (curl -o /dev/null)" "$get_med" "$get_p95"
printf '  %-36s %8s %8s\n' "baseline: cat tmpfs > /dev/null" "$cat_med" "$cat_p95"
awk -v p="$put_med" -v c="$cp_med" -v g="$get_med" -v r="$cat_med" \
  'BEGIN { printf "  PUT/cp %.2f   GET/cat %.2f\n", p / c, g / r }'
