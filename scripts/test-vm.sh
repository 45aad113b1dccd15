#!/usr/bin/env bash
# Runs the whole ctest suite and the demo's workflow inside Debian's own Linux 6.1 (the bookworm
# cloud kernel) under qemu (TCG), on a pure cgroup-v2 machine whose / and /tmp are ext4:
#
#   scripts/test-vm.sh [BUILD_DIR]      (default: build, a RelWithDebInfo tree already built)
#
# The guest boots from an ext4 disk image made for this run by scripts/test-cgroupv2-vm.sh's disk
# mode: the files of the Debian packages below (with their installed dependencies), the host's /etc,
# this source tree and BUILD_DIR (ELF files without debug info) at their own paths. hutch's "host"
# rootfs idmaps the guest's /, which 6.1 can do on ext4 but not on tmpfs, 9p or virtiofs.
# Inside: HUTCH_MUST_WORK=1 HUTCH_IN_VM=1, cgroup2 with +memory +pids +cpu, then
#   ctest --test-dir BUILD_DIR --output-on-failure -j2 --timeout $HUTCH_VM_CTEST_TIMEOUT
# (all but install_units and install_deb, packaging checks that need dpkg's database, and client_js
# and python_client: the clients speak HTTP to hutchd and need no particular kernel, and the guest
# has neither Node.js nor pytest)
# and scripts/demo-workflow.sh, both printed on the console. Last line:
#   vm-6.1: N passed, M failed
# counting individual ctest tests, plus 1 for the demo. Exit status: 0 all passed; 1 a failure,
# a missing result or a timeout; 2 setup error.
#
# Environment (all optional; the rest of test-cgroupv2-vm.sh's HUTCH_VM_* apply too):
#   HUTCH_VM_TIMEOUT        wall-clock budget for the VM in seconds (default 1800)
#   HUTCH_VM_MEMORY         guest memory in MiB (default 3072)
#   HUTCH_VM_CTEST_TIMEOUT  per-test timeout in the guest in seconds (default 240;
#                           the slowest test took 75 s in a first run on a loaded host)
#   HUTCH_VM_DISK_FREE      MiB of free space on the guest's disk (default 4096)
# Needs (Debian): qemu-system-x86 busybox-static cpio e2fsprogs, and the packages listed below.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/.." && pwd)
build=$(realpath "${1:-$src/build}")
if [[ ! -f $build/CTestTestfile.cmake || ! -x $build/hutch ]]; then
  echo "vm-6.1: error: $build is not a built hutch tree (run scripts/setup.sh)" >&2
  exit 2
fi

# What the suite and the demo run, besides hutch itself: every Essential package (sh, hostname,
# coreutils, ... in sandboxes), Debian's python3 (tests and the demo's skill), busybox-static (the
# probe's peers), mount tools, ctest, mkfs.erofs (layer images), the tools tests call on the
# host side, libnftables/libmnl/libnghttp2 (the engine's shared libraries: copy_with_libs brings
# every `ldd` library of the build tree's executables too, this keeps their packages whole), and
# the clients the network tests run inside sandboxes and namespaces: curl, dig (dnsutils), nft
# (nftables), git, pip, apt with dpkg-dev (the package tree tests/daemon/network_clients_test.cc
# builds), and Node.js when this host has it (not a Debian 12 package: setup.sh does not install
# it, and without it the Node tests skip here as they do natively).
essential=$(dpkg-query -W -f='${Essential} ${db:Status-Status} ${Package}\n' |
  awk '$1 == "yes" && $2 == "installed" { print $3 }')
packages="$essential python3 busybox-static mount cmake e2fsprogs erofs-utils libarchive13 mawk
  procps iproute2 libstdc++6 libseccomp2 libcap2 libssl3 libnftables1 libmnl0 libnghttp2-14 curl dnsutils nftables
  git python3-pip apt dpkg-dev tmux"
if dpkg-query -W -f='${db:Status-Status}' nodejs 2>/dev/null | grep -qx installed; then
  packages+=" nodejs"
fi
# The source tree (tests read scripts and data from it) without other build trees, and BUILD_DIR.
files=()
for f in "$src"/* "$src"/.clang-format; do
  [[ -e $f && $f != "$build" && ! -e $f/CMakeCache.txt ]] && files+=("$f")
done
files+=("$build")

export HUTCH_VM_NAME=vm-6.1
export HUTCH_VM_PACKAGES=${packages//$'\n'/ }
export HUTCH_VM_FILES="${files[*]}"
# The egress path (net/egress_path.h) needs veth and nftables with NAT, conntrack and reject,
# which Debian's 6.1 has as modules (their dependencies come from each module's .modinfo).
export HUTCH_VM_MODULES=${HUTCH_VM_MODULES-overlay erofs loop veth nf_tables nft_chain_nat nft_redir nft_ct nft_reject_inet}
export HUTCH_VM_TIMEOUT=${HUTCH_VM_TIMEOUT:-1800}
export HUTCH_VM_MEMORY=${HUTCH_VM_MEMORY:-3072}
export HUTCH_VM_BUILD_DIR=$build HUTCH_VM_CTEST_TIMEOUT=${HUTCH_VM_CTEST_TIMEOUT:-240}
export HUTCH_BUILD_DIR=$build
export HUTCH_VM_EXPORT="HUTCH_VM_BUILD_DIR HUTCH_VM_CTEST_TIMEOUT HUTCH_BUILD_DIR"
exec "$here/test-cgroupv2-vm.sh" "$here/vm/ctest-suite.sh" "$src/scripts/demo-workflow.sh"
