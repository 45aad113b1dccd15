#!/usr/bin/env bash
# The main job on the embedded default rootfs "host" (no download): an agent skill workflow run
# through hutchd. Starts hutchd, creates a sandbox, uploads a small skill (SKILL.md and a script),
# runs the script inside, saves its JSON output as an artifact in the sandbox, validates it with
# `python3 -m json.tool`, downloads it to the host, and deletes the sandbox: always, even when a
# step fails. Prints each step with its timing. Builds first (scripts/setup.sh); the workflow
# itself is scripts/demo-workflow.sh.
# HUTCH_PREFIX=DIR runs it with an installed hutch (DIR/bin/hutch and hutchd), without setup
# (tests/install does); HUTCH_DEMO_ARTIFACTS=DIR puts the artifact there.
set -euo pipefail
cd "$(dirname "$0")/.."
[[ -n ${HUTCH_PREFIX:-} ]] || ./scripts/setup.sh
exec ./scripts/demo-workflow.sh
