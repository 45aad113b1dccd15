# A hutchd for a benchmark, sourced by bench/daemon.sh and bench/recipes.sh: start_daemon runs
# $hutchd on $tmp/hutchd.sock with its state in $state (extra hutchd flags as arguments) and sets
# $daemon; stop_daemon stops it, as does the caller's EXIT trap through stop_daemon_if_running.
daemon=

start_daemon() {
  rm -f "$tmp/hutchd.sock"
  "$hutchd" --socket "$tmp/hutchd.sock" --state-dir "$state" --destroy-on-exit "$@" \
    2>>"$tmp/hutchd.log" &
  daemon=$!
  for _ in $(seq 100); do [[ -S $tmp/hutchd.sock ]] && break; sleep 0.05; done
  [[ -S $tmp/hutchd.sock ]] || { cat "$tmp/hutchd.log" >&2; exit 1; }
}

stop_daemon() {
  kill -TERM "$daemon" && wait "$daemon"
  daemon=
}

# hutchd destroys its sandboxes as it exits: after this, nothing of the run is left but $tmp.
stop_daemon_if_running() {
  if [[ -n $daemon ]]; then
    kill -TERM "$daemon" && wait "$daemon"
  fi
}
