#!/usr/bin/env bash
# Installs every build, test and benchmark dependency (Debian packages only) and builds hutch.
# python3 and busybox-static: tests run them inside sandboxes; python3-pytest: the Python client's
# suite (clients/python); qemu-system-x86 and cpio: the
# pure-cgroup2 VM test (scripts/test-cgroupv2-vm.sh); bubblewrap crun runc: bench/coldstart peers;
# libssl-dev: sha256 of layers (libcrypto.a, linked statically); erofs-utils: mkfs.erofs makes
# each layer's image (runtime/fs/erofs.h); e2fsprogs: mkfs.ext4 makes each persistent volume's
# image (runtime/volumes/volume_store.h); libarchive-dev: hutch-image reads and writes tar
# streams (layer export/load, OCI and docker image import) with gzip/zstd; clang-16 and
# libclang-rt-16-dev: libFuzzer and the sanitizer runtimes of scripts/fuzz.sh (clang-16 is the
# oldest Debian 12 clang that compiles libstdc++ 12's std::expected, see CMakeLists.txt); systemd:
# systemd-analyze verifies the installed unit; dpkg-dev (dpkg-shlibdeps) and file: cpack -G DEB
# computes the package's Depends with them (tests/install); clang-format: scripts/check-docs.sh.
# nftables iproute2 curl dnsutils git python3-pip: the network tests' clients inside sandboxes
# (tests/daemon/network_clients_test.cc installs with pip, git and apt through the engine).
# libnghttp2-dev: HTTP/2 framing, HPACK and flow control of the engine's h2 relay on terminated
# TLS connections (net/engine/h2_relay.h) and of the tests' h2 upstream.
# Node.js >= 20 and npm (on this machine kind, not from Debian: Debian 12 has 18) build and test
# the TypeScript client, whose packages come from the npm registry through
# clients/js/package-lock.json.
# Builds with warnings as errors (HUTCH_WERROR, off for packagers' builds).
# Idempotent: safe to run again; apt-get skips what is installed, cmake rebuilds what changed.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  build-essential cmake pkg-config
  libseccomp-dev libcap-dev nlohmann-json3-dev libcpp-httplib-dev libspdlog-dev libgtest-dev
  libcli11-dev libssl-dev erofs-utils e2fsprogs libarchive-dev
  python3 busybox-static debootstrap python3-pytest
  qemu-system-x86 cpio
  bubblewrap crun runc util-linux
  clang-16 libclang-rt-16-dev
  systemd dpkg-dev file
  clang-format
  libboost1.81-dev libnftables-dev libmnl-dev libnghttp2-dev
  nftables iproute2 curl dnsutils git python3-pip
  tmux  # a real terminal for the `hutch shell` test (tests/daemon/pty_test.cc)
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

if command -v npm >/dev/null && (($(node -p 'process.versions.node.split(".")[0]') >= 20)); then
  npm ci --prefix clients/js --no-audit --no-fund --loglevel=error
else
  echo "setup: Node.js >= 20 with npm not found: the TypeScript client (clients/js) is not set up" >&2
fi

build_dir=${HUTCH_BUILD_DIR:-build}
build_type=${HUTCH_BUILD_TYPE:-RelWithDebInfo}
cmake -S . -B "$build_dir" -DCMAKE_BUILD_TYPE="$build_type" -DHUTCH_WERROR=ON \
  ${HUTCH_CMAKE_ARGS:-} >/dev/null
cmake --build "$build_dir" -j"$(nproc)"
