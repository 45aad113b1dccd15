#!/usr/bin/env bash
# Recipe figures (issue 5): bake time against upper-dir size; snapshot capture of a live
# sandbox against upper-dir size; create-from-recipe against create-from-base, by `hutch run` and
# through hutchd, with and without a warm pool.
#
#   bench/recipes.sh [--runs N] [--sizes "1 16 128"]
#
# Bake: setup.sh writes SIZE MiB of random 1 MiB files and reports its own duration on stderr;
# the rest of the build's wall time is the bake's overhead: the sandbox's start and end, and the
# capture (moving the upper dir into the store, digesting it, writing the erofs image). Create:
# p50/p95 of `hutch run -- true` on the host rootfs vs from each recipe, interleaved, by
# bench/coldstart. HUTCH=path picks the hutch binary (default $HUTCH_BUILD_DIR/hutch, build/).
set -euo pipefail
cd "$(dirname "$0")/.."

runs=100
sizes="1 16 128"
while (($#)); do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --sizes) sizes=$2; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--sizes \"1 16 128\"]" >&2; exit 2 ;;
  esac
done

build_dir=${HUTCH_BUILD_DIR:-build}
[[ -f $build_dir/CMakeCache.txt ]] || cmake -S . -B "$build_dir" >/dev/null
cmake --build "$build_dir" --target hutch hutchd coldstart daemon_bench >/dev/null
hutch=$(realpath "${HUTCH:-$build_dir/hutch}")
coldstart=$(realpath "$build_dir/bench/coldstart")
daemon_bench=$(realpath "$build_dir/bench/daemon_bench")
hutchd=$(realpath "$build_dir/daemon/hutchd")

tmp=$(mktemp -d /tmp/hutch-bench-recipes.XXXXXX)
chmod 755 "$tmp"  # the sandbox's root reads the recipe dir
state=$tmp/state
source bench/hutchd_lib.sh

now_ns() { date +%s%N; }
ms() { awk -v ns="$1" 'BEGIN { printf "%.1f", ns / 1e6 }'; }

mkdir -p "$tmp/recipe"
cat >"$tmp/recipe/setup.sh" <<'EOF'
start=$(date +%s%N)
mkdir -p /opt/data
for i in $(seq 1 "$SIZE_MIB"); do head -c 1M /dev/urandom >/opt/data/f$i; done
sync -f /opt/data
echo "setup_ns=$(($(date +%s%N) - start))" >&2
EOF

echo "== bake: wall time of \`hutch recipe build\` by upper-dir size"
printf '%-10s %12s %12s %14s %12s\n' size bake_ms setup_ms overhead_ms layer_MiB
for size in $sizes; do
  start=$(now_ns)
  "$hutch" --state-dir "$state" recipe build "$tmp/recipe" --name "r$size" \
    --env "SIZE_MIB=$size" --disk 1G >"$tmp/out" 2>"$tmp/err" || {
    cat "$tmp/err" >&2
    exit 1
  }
  wall=$(($(now_ns) - start))
  setup=$(sed -n 's/^setup_ns=//p' "$tmp/err")
  digest=$(tail -n 1 "$tmp/out" | awk '{print $2}')
  layer_bytes=$(du -sb "$state/layers/${digest#sha256:}" | cut -f1)
  printf '%-10s %12s %12s %14s %12s\n' "${size}MiB" "$(ms "$wall")" "$(ms "$setup")" \
    "$(ms $((wall - setup)))" "$(awk -v b="$layer_bytes" 'BEGIN { printf "%.1f", b / 1048576 }')"
  # The recipe dir is the same for every size (SIZE_MIB is bake env, outside the cache key), so
  # the next build would be a cache hit: make it a new recipe.
  echo "# $size" >>"$tmp/recipe/setup.sh"
done
echo "(layer_MiB: tree + erofs image in the store; overhead = bake - setup.sh's own time:"
echo " sandbox start/stop and capture of the upper dir as a layer)"
echo

echo "== create: \`hutch run -- true\` from the host rootfs vs from a recipe, interleaved"
tools=("base=$hutch run -- /bin/true")
for size in $sizes; do
  tools+=("recipe-${size}m=$hutch --state-dir $state run --rootfs recipe:r$size -- /bin/true")
done
"$coldstart" --runs "$runs" --warmup 5 "${tools[@]}"
echo

echo "== snapshot: a live sandbox's upper dir captured as a layer, by size (hutchd)"
start_daemon
"$daemon_bench" --socket "$tmp/hutchd.sock" --snapshot-mib "${sizes// /,}" --runs 5
echo "(frozen: the sandbox's processes are paused for the copy; capture adds the layer's digest"
echo " and erofs image; request is the client's round trip)"
echo

first=${sizes%% *}
echo "== create through hutchd: from the host rootfs, then from recipe r$first (no warm pool)"
"$daemon_bench" --socket "$tmp/hutchd.sock" --lifecycle-only --runs "$runs"
"$daemon_bench" --socket "$tmp/hutchd.sock" --lifecycle-only --runs "$runs" \
  --create-body "{\"recipe\":\"r$first\"}"
stop_daemon
echo

echo "== create through hutchd from recipe r$first with a warm pool of 4"
start_daemon --warm-pool "recipe:r$first=4"
"$daemon_bench" --socket "$tmp/hutchd.sock" --lifecycle-only --warm-pool --runs "$runs" \
  --create-body "{\"recipe\":\"r$first\"}"
stop_daemon
