#!/usr/bin/env bash
# ctest's client_js: builds @hutch/client (tsc) and runs its node --test suites against the hutchd
# of the build tree given as $1. Needs Node.js >= 20 and `npm ci` (scripts/setup.sh does both); a
# missing piece is a loud skip (77), a failure under HUTCH_MUST_WORK=1.
set -euo pipefail
cd "$(dirname "$0")"
build_dir=$(realpath "$1")

skip() {
  echo "SKIP client_js: $1" >&2
  [[ ${HUTCH_MUST_WORK:-} == 1 ]] && { echo "HUTCH_MUST_WORK=1: a skip is a failure" >&2; exit 1; }
  exit 77
}
command -v node >/dev/null || skip "node is not installed"
major=$(node -p 'process.versions.node.split(".")[0]')
((major >= 20)) || skip "node $(node --version) is older than 20"
[[ -d node_modules/deepagents ]] || skip "node_modules missing: run scripts/setup.sh (npm ci)"
HUTCH_BUILD_DIR=$build_dir npm test --silent
