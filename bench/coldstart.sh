#!/usr/bin/env bash
# Cold start of `true` under hutch and its peers, measured in one interleaved run (issue "hutch run
# must beat bubblewrap"). Usage: bench/coldstart.sh [--runs N] [--warmup N] [--json FILE]
# HUTCH=path picks the hutch binary (default build/hutch); a missing one is reported as skipped.
# HUTCH_BASELINE=path adds another hutch binary (e.g. the build of main) for an A/B in one run.
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=${HUTCH_BUILD_DIR:-build}
hutch=${HUTCH:-$build_dir/hutch}
have() { command -v "$1" >/dev/null; }

for tool in bwrap crun runc unshare busybox; do
  have "$tool" || { scripts/setup.sh; break; }
done
[[ -f $build_dir/CMakeCache.txt ]] || cmake -S . -B "$build_dir" >/dev/null
cmake --build "$build_dir" --target coldstart

tmp=$(mktemp -d /tmp/hutch-coldstart.XXXXXX)
cgroup=hutch-coldstart-$$
holder=
cleanup() {
  set +e  # best effort: one failed step must not stop the rest
  # `run` deletes each container as it exits; only an interrupted run leaves one behind.
  local id
  for id in $(runc --root "$tmp/runc" list -q 2>/dev/null); do
    runc --root "$tmp/runc" delete -f "$id"
  done
  if [[ -n $holder ]]; then
    kill "$holder" 2>/dev/null
    # Like its runs, crun's delete must not see cgroup2 (the holder may be gone: fresh namespace).
    for id in $(crun --root "$tmp/crun" list -q 2>/dev/null); do
      unshare --mount --propagation private -- sh -c 'umount /sys/fs/cgroup/unified && exec "$@"' \
        sh crun --root "$tmp/crun" delete -f "$id"
    done
  fi
  rmdir /sys/fs/cgroup/*/"$cgroup" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT

args=()
add() { args+=("$1=$2"); }
skip() { args+=(--skip "$1=$2"); }

# hutch first: the ratios printed are of the first tool's p50 to each peer's.
# "hutch" is the default (cgroup limits on); "hutch-nolim" has no cgroup, like bwrap. On a hybrid
# host the difference is the first cgroup v1 migration (an RCU grace period in the kernel).
if [[ -x $hutch ]]; then
  add hutch "$(realpath "$hutch") run -- /bin/true"
  add hutch-nolim "$(realpath "$hutch") run --no-limits -- /bin/true"
else
  skip hutch "no executable $hutch (build it or set HUTCH=)"
  skip hutch-nolim "no executable $hutch (build it or set HUTCH=)"
fi
# Egress through the network engine (hutch-egress beside hutch): what filtering costs a one-shot
# run (the namespace with its rules, the CA, the engine's threads), which no peer here does.
if [[ -x $(dirname "$hutch")/hutch-egress ]]; then
  add hutch-filtered "$(realpath "$hutch") run --net filtered -- /bin/true"
else
  skip hutch-filtered "no executable $(dirname "$hutch")/hutch-egress (build target hutch)"
fi
# A/B of a change on the start path: HUTCH_BASELINE=other/build/hutch runs beside it, interleaved.
if [[ -n ${HUTCH_BASELINE:-} ]]; then
  add hutch-base "$(realpath "$HUTCH_BASELINE") run -- /bin/true"
  add hutch-base-nolim "$(realpath "$HUTCH_BASELINE") run --no-limits -- /bin/true"
fi

if have bwrap; then
  add bwrap "$(command -v bwrap) --unshare-all --ro-bind / / --proc /proc --dev /dev /bin/true"
else
  skip bwrap "bubblewrap not installed"
fi

if have unshare; then
  add unshare "$(command -v unshare) --user --map-root-user --mount --pid --fork --net --uts --ipc \
--cgroup /bin/true"
else
  skip unshare "util-linux not installed"
fi

# crun and runc share one OCI bundle: a busybox rootfs running /bin/true, in a cgroup of our own at
# each hierarchy's root (runc's default nests it inside our memory cgroup, which is not ours).
no_bundle=
have runc || no_bundle="runc not installed (\`runc spec\` writes the bundle)"
[[ -x /bin/busybox ]] || no_bundle="busybox-static not installed"
if [[ -z $no_bundle ]]; then
  mkdir -p "$tmp/bundle/rootfs/bin"
  cp /bin/busybox "$tmp/bundle/rootfs/bin/"
  ln -s busybox "$tmp/bundle/rootfs/bin/true"
  (cd "$tmp/bundle" && runc spec)
  python3 - "$tmp/bundle/config.json" "/$cgroup" <<'EOF'
import json, sys
path, cgroup = sys.argv[1:]
with open(path) as f:
    spec = json.load(f)
spec["process"].update(args=["/bin/true"], terminal=False)  # no tty: stdio is a file here
spec["linux"]["cgroupsPath"] = cgroup
with open(path, "w") as f:
    json.dump(spec, f, indent=2)
EOF
fi

if [[ -n $no_bundle ]]; then
  skip crun "$no_bundle"
elif ! have crun; then
  skip crun "crun not installed"
else
  if mountpoint -q /sys/fs/cgroup/unified; then
    # crun 1.8 refuses hybrid cgroups while cgroup2 is visible (PLATFORM.md). Hide it in a private
    # mount namespace kept alive by a sleeping holder, and only crun's runs join it (--mntns): the
    # host's mounts and the other tools stay untouched.
    unshare --mount --propagation private -- \
      sh -c 'umount /sys/fs/cgroup/unified && exec sleep infinity' &
    holder=$!
    while grep -qs ' /sys/fs/cgroup/unified ' "/proc/$holder/mountinfo"; do sleep 0.05; done
    if ! grep -qs ' / / ' "/proc/$holder/mountinfo"; then
      echo "coldstart.sh: could not hide /sys/fs/cgroup/unified from crun" >&2
      exit 1
    fi
    args+=(--mntns "crun=/proc/$holder/ns/mnt")
  fi
  add crun "$(command -v crun) --root $tmp/crun run --bundle $tmp/bundle cs-{id}"
fi

if [[ -n $no_bundle ]]; then
  skip runc "$no_bundle"
else
  add runc "$(command -v runc) --root $tmp/runc run --bundle $tmp/bundle cs-{id}"
fi

add fork-exec /bin/true

for tool in bwrap crun runc unshare; do
  have "$tool" && "$tool" --version | head -1
done
# In the background so a signal reaches the trap at once; coldstart then finishes the run in
# flight (the runtime deletes its container) before the cleanup runs.
"$build_dir/bench/coldstart" "$@" "${args[@]}" &
bench=$!
trap 'kill -TERM "$bench" 2>/dev/null; wait "$bench"; exit 130' INT TERM
wait "$bench"
