# A hutchd for a benchmark, sourced by bench/daemon.sh and bench/recipes.sh once they have set
# $hutchd (the binary), $tmp (their scratch dir) and $state (hutchd's state dir). start_daemon runs
# hutchd on $tmp/hutchd.sock (extra hutchd flags as arguments) and sets $daemon; stop_daemon stops
# it. On exit, a running hutchd is stopped (it destroys its sandboxes, so no loop device holds a
# layer any more) and $tmp removed.
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

cleanup() {
  set +e
  if [[ -n $daemon ]]; then
    kill -TERM "$daemon" && wait "$daemon"
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT
