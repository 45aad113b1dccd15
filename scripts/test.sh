#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite through ctest, the cgroup tests again
# on a pure cgroup-v2 kernel under qemu, the ctest suite in the ASan/UBSan build, then the whole
# suite and the demo's workflow inside Debian's Linux 6.1 under qemu (scripts/test-vm.sh: ext4
# root, pure cgroup v2; last, as the slowest step).
# Run as root: integration tests build real sandboxes.
# HUTCH_MUST_WORK=1 (set by CI) turns every "cannot run here" skip into a failure.
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/setup.sh

jobs=$(nproc)
echo "== tests (RelWithDebInfo) =="
ctest --test-dir build --output-on-failure -j"$jobs"
./scripts/check-docs.sh build  # cited tests exist, sources clang-formatted

echo "== cgroup tests on a pure cgroup-v2 kernel (qemu) =="
HUTCH_VM_FILES="$PWD/build/hutch" ./scripts/test-cgroupv2-vm.sh \
  build/tests/cgroup/cgroup_integration_tests build/tests/cgroup/cgroup_unit_tests \
  build/tests/integration/limits_e2e_tests

echo "== tests (ASan/UBSan) =="
HUTCH_BUILD_DIR=build-asan HUTCH_BUILD_TYPE=Debug HUTCH_CMAKE_ARGS=-DHUTCH_SANITIZE=ON ./scripts/setup.sh
ctest --test-dir build-asan --output-on-failure -j"$jobs"

echo "== whole suite and demo inside Linux 6.1 (qemu) =="
./scripts/test-vm.sh build

echo "== fuzzers (libFuzzer, 60 s each) =="
./scripts/fuzz.sh 60
