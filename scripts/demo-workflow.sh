#!/usr/bin/env bash
# The demo's workflow (scripts/demo.sh builds first, then runs this) against binaries already built
# in ${HUTCH_BUILD_DIR:-build}: an agent skill workflow run through hutchd on the embedded default
# rootfs "host". Starts hutchd, creates a sandbox, uploads a small skill (SKILL.md and a script),
# runs the script inside, saves its JSON output as an artifact in the sandbox, validates it with
# `python3 -m json.tool`, downloads it to the host, and deletes the sandbox: always, even when a
# step fails. Prints each step with its timing. scripts/test-vm.sh runs it inside Linux 6.1.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${HUTCH_BUILD_DIR:-build}
[[ $build == /* ]] || build=$PWD/$build

if [[ -n ${HUTCH_PREFIX:-} ]]; then  # an installed hutch (tests/install)
  hutch=$HUTCH_PREFIX/bin/hutch
  hutchd=$HUTCH_PREFIX/bin/hutchd
else
  hutch=$build/hutch
  hutchd=$build/daemon/hutchd
fi
work=$(mktemp -d /tmp/hutch-demo.XXXXXX)
artifacts=${HUTCH_DEMO_ARTIFACTS:-$build/demo-artifacts}
export HUTCH_SOCKET=$work/hutchd.sock
daemon=
sandbox=

cleanup() {
  local status=$?
  set +e
  if [[ -n $sandbox ]]; then
    step "delete the sandbox (always, even after a failure)" "hutch rm $sandbox"
    timed "$hutch" rm "$sandbox"
  fi
  if [[ -n $daemon ]]; then
    kill -TERM "$daemon" && wait "$daemon"
  fi
  rm -rf "$work"
  ((status == 0)) && printf '\n\033[1mdone\033[0m: artifact at %s\n' "$artifacts/report.json"
  exit "$status"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n$ %s\n' "$1" "$2"; }
now_us() { echo "${EPOCHREALTIME/./}"; }
print_ms() { local us=$(($(now_us) - $1)); printf '(%d.%d ms)\n' $((us / 1000)) $((us % 1000 / 100)); }
# Runs a command and prints its wall time.
timed() {
  local start status=0
  start=$(now_us)
  "$@" || status=$?
  print_ms "$start"
  return "$status"
}

step "start hutchd (unix socket, state dir in a temp dir)" \
  "$hutchd --socket $HUTCH_SOCKET --state-dir $work/state --destroy-on-exit"
"$hutchd" --socket "$HUTCH_SOCKET" --state-dir "$work/state" --destroy-on-exit \
  2>"$work/hutchd.log" &
daemon=$!
for _ in $(seq 200); do [[ -S $HUTCH_SOCKET ]] && break; sleep 0.01; done
[[ -S $HUTCH_SOCKET ]] || { cat "$work/hutchd.log" >&2; exit 1; }
echo "hutchd pid $daemon"

step "create a sandbox (host rootfs, 512M memory, 256 pids)" \
  "hutch create --memory 512M --pids 256 --label demo=skill"
start=$(now_us)
sandbox=$("$hutch" create --memory 512M --pids 256 --label demo=skill)
echo "$sandbox"
print_ms "$start"

# The skill: a SKILL.md (frontmatter name + description, as Deep Agents reads it) and a script.
mkdir -p "$work/skill"
cat >"$work/skill/SKILL.md" <<'SKILL'
---
name: word-stats
description: Counts words and lines of a text file and reports the most frequent words as JSON.
---
Run `python3 /skills/word-stats/stats.py FILE OUT.json`.
SKILL
cat >"$work/skill/stats.py" <<'SCRIPT'
import collections, json, os, pathlib, sys

text = pathlib.Path(sys.argv[1]).read_text()
words = [w.strip(".,;:!?\"'()").lower() for w in text.split()]
words = [w for w in words if w]
report = {
    "file": sys.argv[1],
    "lines": text.count("\n"),
    "words": len(words),
    "top": collections.Counter(words).most_common(5),
    "ran_as_uid": os.getuid(),
    "hostname": os.uname().nodename,
}
out = pathlib.Path(sys.argv[2])
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(json.dumps(report))
print(f"wrote {out}: {report['words']} words")
SCRIPT
cp README.md "$work/input.md"

step "upload the skill and its input" \
  "hutch cp SKILL.md $sandbox:/skills/word-stats/SKILL.md; hutch cp stats.py ...; hutch cp README.md ..."
timed "$hutch" cp "$work/skill/SKILL.md" "$sandbox:/skills/word-stats/SKILL.md"
timed "$hutch" cp "$work/skill/stats.py" "$sandbox:/skills/word-stats/stats.py"
timed "$hutch" cp "$work/input.md" "$sandbox:/workspace/input.md"

step "read the skill's frontmatter inside" "hutch exec $sandbox -- head -4 /skills/word-stats/SKILL.md"
timed "$hutch" exec "$sandbox" -- head -4 /skills/word-stats/SKILL.md

step "run the skill's script: its JSON output is saved as an artifact in the sandbox" \
  "hutch exec $sandbox -- python3 /skills/word-stats/stats.py /workspace/input.md /workspace/out/report.json"
timed "$hutch" exec "$sandbox" --timeout 60s -- \
  python3 /skills/word-stats/stats.py /workspace/input.md /workspace/out/report.json

step "validate the artifact inside" "hutch exec $sandbox -- python3 -m json.tool /workspace/out/report.json"
timed "$hutch" exec "$sandbox" -- python3 -m json.tool /workspace/out/report.json

step "download the artifact to the host" "hutch cp $sandbox:/workspace/out/report.json $artifacts/"
mkdir -p "$artifacts"
timed "$hutch" cp "$sandbox:/workspace/out/report.json" "$artifacts/report.json"
python3 -m json.tool "$artifacts/report.json" >/dev/null
echo "host copy is valid JSON ($(wc -c <"$artifacts/report.json") bytes)"

step "the sandbox is isolated: its root is an unprivileged host id, no capabilities, seccomp" \
  "hutch exec $sandbox -- sh -c 'cat /proc/self/uid_map; grep -E \"CapEff|Seccomp:\" /proc/self/status'"
timed "$hutch" exec "$sandbox" -- sh -c 'cat /proc/self/uid_map; grep -E "CapEff|Seccomp:" /proc/self/status'
