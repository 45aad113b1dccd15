#!/usr/bin/env bash
# Builds a rootfs directory for `hutch run --rootfs DIR` and `hutch recipe build --base DIR`.
#
#   scripts/build-rootfs.sh busybox DIR   a static busybox tree (Debian's busybox-static): /bin with
#                                         every applet, owned by the sandbox's root (host id
#                                         1000000000, hutch's default --id-base) so it needs no
#                                         idmapped mount; for tests, seconds to build, no network.
#   scripts/build-rootfs.sh debian DIR    Debian bookworm minbase by debootstrap, from the mirror apt
#                                         is configured with (override: MIRROR=URL). Left owned by
#                                         host root: hutch idmaps it at mount time.
#
# DIR must not exist or be empty. Needs root (chown, debootstrap).
set -euo pipefail

usage() {
  echo "usage: $0 busybox|debian DIR" >&2
  exit 2
}
(($# == 2)) || usage
kind=$1
dir=$2
sandbox_root=${HUTCH_ID_BASE:-1000000000}

if [[ -e $dir && -n $(ls -A "$dir") ]]; then
  echo "$0: $dir exists and is not empty" >&2
  exit 1
fi
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# The first Debian mirror in apt's sources (deb822 .sources or one-line .list).
apt_mirror() {
  local uri
  uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null |
    awk '/^URIs:/ && $2 ~ /debian\/?$/ {print $2; exit}')
  [[ -n $uri ]] || uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
    awk '$1 == "deb" && $2 !~ /^\[/ && $2 ~ /debian\/?$/ {print $2; exit}')
  echo "${uri:-http://deb.debian.org/debian}"
}

case $kind in
  busybox)
    busybox=$(command -v busybox || true)
    # The static one: a dynamic busybox would need the host's libc inside.
    for candidate in /bin/busybox /usr/bin/busybox; do
      if [[ -x $candidate ]] && ! ldd "$candidate" >/dev/null 2>&1; then busybox=$candidate; fi
    done
    if [[ -z $busybox ]] || ldd "$busybox" >/dev/null 2>&1; then
      echo "$0: no static busybox; install Debian's busybox-static (scripts/setup.sh)" >&2
      exit 1
    fi
    mkdir -p "$dir"/{bin,dev,proc,sys,tmp,etc,root,opt}
    cp "$busybox" "$dir/bin/busybox"
    # Relative links: `busybox --install -s` would point them at the host path of busybox.
    for applet in $("$busybox" --list); do
      [[ $applet == busybox ]] || ln -sf busybox "$dir/bin/$applet"
    done
    echo "root:x:0:0:root:/root:/bin/sh" >"$dir/etc/passwd"
    echo "root:x:0:" >"$dir/etc/group"
    chmod 1777 "$dir/tmp"
    chown -hR "$sandbox_root:$sandbox_root" "$dir"
    ;;
  debian)
    command -v debootstrap >/dev/null || {
      echo "$0: no debootstrap; run scripts/setup.sh" >&2
      exit 1
    }
    mirror=${MIRROR:-$(apt_mirror)}
    debootstrap --variant=minbase bookworm "$dir" "$mirror"
    ;;
  *) usage ;;
esac

echo "built $kind rootfs in $dir: $(find "$dir" | wc -l) entries, $(du -sh "$dir" | cut -f1)"
echo "use: hutch run --rootfs $dir -- /bin/sh   or   hutch recipe build RECIPE --base $dir"
