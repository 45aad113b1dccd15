#!/usr/bin/env bash
# Runs test binaries inside a real pure cgroup-v2 kernel: Debian's cloud kernel under qemu (TCG).
#
#   scripts/test-cgroupv2-vm.sh TEST_BINARY [TEST_BINARY...]
#
# Production hosts run pure cgroup v2, the development/CI machines hybrid cgroups (see
# ../shared/PLATFORM.md), so the v2 path of hutch is proven here on a real kernel:
# - the kernel package (linux-image-cloud-amd64's current dependency) is `apt-get download`ed and
#   unpacked into a cache, never installed (its hooks would touch the host's /boot);
# - a throwaway initramfs (busybox-static, overlay.ko, the binaries and their shared libraries) boots
#   with cgroup2 at /sys/fs/cgroup and +memory +pids +cpu (+io) enabled, HUTCH_MUST_WORK=1 and
#   HUTCH_IN_VM=1 in the environment, and runs every binary once (gtest ones in brief mode);
# - the binaries' output is printed, then per-binary results, then the VM wall time and, last, the line
#     cgroupv2-vm: N passed, M failed
#   counting individual gtest tests, or ctest tests for a binary that runs ctest (a binary that
#   crashed or ended without a gtest or ctest summary counts as one test; scripts/vm/results.sh
#   reads the console).
# Exit status: 0 all passed; 1 a test failed, a binary left no result, or the VM timed out;
# 2 usage or setup error (no VM result).
#
# Each binary is placed at its own absolute host path in the guest (so paths relative to
# /proc/self/exe still work) with /tests/<basename> pointing at it (under /dev, /proc or /sys, which
# the guest mounts over, it is /tests/<basename> itself). Dynamic executables get every `ldd` library
# at the same path. The guest's / is a bind mount of the initramfs (tmpfs) rootfs, since
# pivot_root fails on the rootfs itself; /tmp, /run and /dev/shm are tmpfs mounts of their own. The guest has no network and no host filesystem.
#
# Environment (all optional):
#   HUTCH_VM_CACHE        kernel cache dir (default ~/.cache/hutch-vm); the only thing left behind
#   HUTCH_VM_TIMEOUT      wall-clock budget for the VM in seconds (default 300)
#   HUTCH_VM_MEMORY       guest memory in MiB (default 1024)
#   HUTCH_VM_SMP          guest CPUs (default 2)
#   HUTCH_VM_FILES        extra files/dirs (whitespace-separated) copied to the same absolute path
#                         in the guest, e.g. "$PWD/build/hutch"; ELF files get their libraries
#   HUTCH_VM_TEST_ARGS    extra arguments for every binary (split into words), e.g. --gtest_filter=X
#   HUTCH_VM_EXPORT       names of variables exported into the guest with their values here
#   HUTCH_VM_TEST_CGROUP  cgroup each binary runs in, as <this>/<name> (default /hutch-vm.slice,
#                         like a service on a systemd host; "/" runs them in the root cgroup)
#   HUTCH_VM_MODULES      kernel modules to insmod, with their dependencies (default "overlay",
#                         and veth and nftables for the egress path: see egress_modules below)
#   HUTCH_VM_KERNEL_PKG   kernel package to use instead of linux-image-cloud-amd64's dependency
#   HUTCH_VM_APPEND       extra kernel command line
#   HUTCH_VM_LOG          also save the full console log to this file
#   HUTCH_VM_VERBOSE=1    stream the console live instead of printing each binary's output at the end
#   HUTCH_VM_STRIP=0      keep debug info in the ELF files copied in (default: objcopy --strip-debug)
#   HUTCH_VM_NAME         the name results are printed under (default cgroupv2-vm)
#   HUTCH_VM_PACKAGES     Debian packages (installed here) whose files, with those of every
#                         installed package they depend on, go into the guest at their own paths;
#                         setting it boots the guest from an ext4 disk instead (see below)
#   HUTCH_VM_DISK_FREE    MiB of free space on that disk (default 4096)
#
# Disk mode (HUTCH_VM_PACKAGES set): the tree above, plus the packages' files (hard links; no man
# pages or locales, but /usr/share/doc, which tests look at), the host's /etc (without shadow
# files, ssh keys or private TLS keys), the alternatives' links in /usr/bin and /usr/sbin, the
# host's /usr-merge symlinks and empty copies of the directories in /, /usr/local and /var,
# becomes an ext4 image (`mkfs.ext4 -d`, no mount, sparse, removed afterwards) attached as a
# virtio disk. A tiny initramfs (busybox and the modules) insmods the modules, mounts the disk and
# switch_roots into it; /tmp stays on the ext4 root, so the guest's / and /tmp can be idmapped (6.1
# cannot idmap tmpfs, 9p or virtiofs). Directories in HUTCH_VM_FILES are copied without .git,
# CMakeFiles and *.o files. Needs e2fsprogs too.
#
# Needs (Debian): qemu-system-x86 busybox-static cpio (plus apt, dpkg, coreutils, util-linux,
# gzip, xz-utils/zstd only if the kernel's modules are compressed). No root needed once the kernel
# is cached; downloading it needs only apt's package lists (root runs `apt-get update` if missing).
set -euo pipefail

prog=${HUTCH_VM_NAME:-cgroupv2-vm}
say() { printf '%s: %s\n' "$prog" "$*"; }
die() {
  printf '%s: error: %s\n' "$prog" "$*" >&2
  exit 2
}
usage() {
  sed -n '2,/^set -euo/{/^set -euo/d;s/^# \{0,1\}//;p}' "${BASH_SOURCE[0]}" >&2
  exit 2
}

(($#)) || usage
case $1 in -h | --help) usage ;; esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
init_template=$here/vm/init.sh
cache=${HUTCH_VM_CACHE:-${HOME:?}/.cache/hutch-vm}
budget=${HUTCH_VM_TIMEOUT:-300}
memory=${HUTCH_VM_MEMORY:-1024}
smp=${HUTCH_VM_SMP:-2}
# net/egress_path.h: a veth dead end and nftables with NAT (redirect), conntrack and reject.
egress_modules="veth nf_tables nft_chain_nat nft_redir nft_ct nft_reject_inet"
modules=${HUTCH_VM_MODULES-overlay $egress_modules}
meta_pkg=linux-image-cloud-amd64
verbose=${HUTCH_VM_VERBOSE:-0}
strip=${HUTCH_VM_STRIP:-1}
command -v objcopy >/dev/null || strip=0
packages=${HUTCH_VM_PACKAGES:-}
disk_free=${HUTCH_VM_DISK_FREE:-4096}
on_disk=0
[[ -z $packages ]] || on_disk=1

[[ $budget =~ ^[1-9][0-9]*$ ]] || die "HUTCH_VM_TIMEOUT must be a positive number of seconds, not '$budget'"
[[ $memory =~ ^[1-9][0-9]*$ ]] || die "HUTCH_VM_MEMORY must be MiB, not '$memory'"
[[ $smp =~ ^[1-9][0-9]*$ ]] || die "HUTCH_VM_SMP must be a CPU count, not '$smp'"
[[ $disk_free =~ ^[0-9]+$ ]] || die "HUTCH_VM_DISK_FREE must be MiB, not '$disk_free'"
[[ -r $init_template ]] || die "missing $init_template"
if ((on_disk)); then
  command -v mkfs.ext4 >/dev/null || die "'mkfs.ext4' not found; install: apt-get install e2fsprogs"
  # The guest's kernel reaches its disk through these (the cloud kernel has them as modules).
  modules="virtio_pci virtio_blk $modules"
fi
for tool in qemu-system-x86_64 busybox cpio gzip timeout flock dpkg-deb apt-cache apt-get ldd; do
  command -v "$tool" >/dev/null ||
    die "'$tool' not found; install: apt-get install --no-install-recommends qemu-system-x86 busybox-static cpio"
done

# The test binaries: existing executables with distinct base names (the name is the marker key).
declare -a bins=() names=()
declare -A seen=()
for arg; do
  [[ -f $arg && -x $arg ]] || die "not an executable file: $arg"
  name=$(basename "$arg")
  [[ $name =~ ^[A-Za-z0-9._+-]+$ ]] || die "test binary name '$name' has characters other than [A-Za-z0-9._+-]"
  [[ -z ${seen[$name]:-} ]] || die "two test binaries are named '$name'"
  seen[$name]=1
  bins+=("$(realpath "$arg")")
  names+=("$name")
done

# --- cleanup: temp dirs and the qemu process go on every exit path ---------------------------------
declare -a temps=()
vm_pid=""
cleanup() {
  if [[ -n $vm_pid ]]; then
    # `timeout` forwards the signal to qemu (and SIGKILLs it 5 s later if it lingers).
    kill -TERM "$vm_pid" 2>/dev/null || true
    wait "$vm_pid" 2>/dev/null || true
    vm_pid=""
  fi
  if ((${#temps[@]})); then rm -rf "${temps[@]}"; fi
}
trap cleanup EXIT
trap 'echo >&2; say "interrupted" >&2; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP
new_temp() { # new_temp VAR: a fresh temp dir, registered for removal
  local d
  d=$(mktemp -d "${TMPDIR:-/tmp}/hutch-vm.XXXXXX")
  temps+=("$d")
  printf -v "$1" %s "$d"
}
now() { echo "${EPOCHREALTIME/,/.}"; }
elapsed() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# --- kernel: download + unpack once, reuse from the cache ------------------------------------------
kernel_pkg() {
  if [[ -n ${HUTCH_VM_KERNEL_PKG:-} ]]; then
    echo "$HUTCH_VM_KERNEL_PKG"
    return
  fi
  apt-cache depends "$meta_pkg" 2>/dev/null | awk '/Depends: linux-image-/ { print $2; exit }'
}
apt_update() {
  if ((EUID != 0)); then
    say "apt's package lists look stale or empty, and only root can run apt-get update" >&2
    return 1
  fi
  say "running apt-get update" >&2
  apt-get update -qq >&2
}
newest_cached() {
  local d best=""
  for d in "$cache"/linux-image-*/; do
    [[ -e $d.complete ]] && best=${d%/}
  done
  [[ -n $best ]] && echo "$best"
}
download_kernel() { # download_kernel PKG DEST: unpack PKG's files into DEST (created)
  local pkg=$1 dest=$2 dl unpack
  new_temp dl
  chmod 755 "$dl"
  # apt drops to the _apt user for downloads: let it write (else apt warns and downloads as root).
  if ((EUID == 0)) && id _apt >/dev/null 2>&1; then chown _apt "$dl"; fi
  (cd "$dl" && apt-get download -q "$pkg" >&2) || return 1
  unpack=$(mktemp -d "$cache/.unpack.XXXXXX")
  temps+=("$unpack")
  dpkg-deb -x "$dl/$pkg"_*.deb "$unpack" || return 1
  touch "$unpack/.complete"
  mv -T "$unpack" "$dest"
  rm -rf "$dl"
}
fetch_kernel() { # sets kdir
  local pkg lock_fd old
  mkdir -p "$cache"
  exec {lock_fd}>"$cache/.lock"
  flock "$lock_fd" # one download at a time; readers wait for a writer
  pkg=$(kernel_pkg)
  if [[ -z $pkg ]] && apt_update; then pkg=$(kernel_pkg); fi
  if [[ -z $pkg ]]; then
    kdir=$(newest_cached) || die "cannot find the package $meta_pkg depends on (apt-cache depends $meta_pkg)"
    say "warning: apt-cache knows no $meta_pkg; using the cached $(basename "$kdir")"
    exec {lock_fd}>&-
    return
  fi
  [[ $pkg =~ ^linux-image-[A-Za-z0-9.+-]+$ ]] || die "unexpected kernel package name '$pkg'"
  kdir=$cache/$pkg
  if [[ ! -e $kdir/.complete ]]; then
    rm -rf "$kdir"
    local t0
    t0=$(now)
    say "downloading and unpacking $pkg into $cache (once)"
    if ! download_kernel "$pkg" "$kdir"; then
      # Stale package lists name a version the mirror no longer has: refresh once and retry.
      if apt_update && pkg=$(kernel_pkg) && [[ -n $pkg ]] && kdir=$cache/$pkg &&
        { [[ -e $kdir/.complete ]] || download_kernel "$pkg" "$kdir"; }; then
        :
      elif kdir=$(newest_cached); then
        say "warning: could not download $pkg; using the cached $(basename "$kdir")"
      else
        die "could not download $pkg (apt-get download $pkg)"
      fi
    fi
    say "kernel ready in $(elapsed "$t0") s"
    # Older kernels we unpacked are dead weight now.
    for old in "$cache"/linux-image-*/; do
      old=${old%/}
      [[ $old != "$kdir" && -e $old/.complete ]] && rm -rf "$old"
    done
  fi
  exec {lock_fd}>&-
}

kdir=""
fetch_kernel
vmlinuz=$(find "$kdir/boot" -maxdepth 1 -name 'vmlinuz-*' -print -quit)
[[ -n $vmlinuz ]] || die "no boot/vmlinuz-* in $kdir"
kver=${vmlinuz##*/vmlinuz-}
moddir=""
for d in "$kdir/lib/modules/$kver" "$kdir/usr/lib/modules/$kver"; do
  [[ -d $d ]] && moddir=$d && break
done
[[ -n $moddir || -z $modules ]] || die "no lib/modules/$kver in $kdir"

# --- initramfs: built fresh in a temp dir ------------------------------------------------------------
build_start=$(now)
work=""
new_temp work
root=$work/root
mkdir "$root"
chmod 755 "$root" # the kernel uses the archive's root mode for /; anything else breaks non-root users
# In disk mode the initramfs is only the boot stage: busybox, /init and the modules.
boot=$root
if ((on_disk)); then
  boot=$work/boot
  mkdir -p "$boot"/{bin,proc,sys,dev,newroot,etc/hutch-vm,lib/modules/hutch}
  chmod 755 "$boot"
  : >"$boot/etc/hutch-vm/boot-disk"
  # The host's /usr-merge links (bin -> usr/bin, ...) first, so everything lands behind them.
  mkdir -p "$root/usr"
  for l in /*; do
    if [[ -L $l ]]; then
      mkdir -p "$root/$(realpath -m --relative-to=/ "$l")"
      cp -P "$l" "$root/"
    fi
  done
fi
mkdir -p "$root"/{bin,sbin,usr/bin,usr/sbin,proc,sys,dev,tmp,run,root,etc/hutch-vm,tests,lib/modules/hutch}
chmod 1777 "$root/tmp"
chmod 700 "$root/root"

# stage_packages: hard-links into the guest the files of $packages and of every installed package
# they depend on (no recommends), at their own paths, and copies the host's /etc without secrets.
stage_packages() {
  local -a closure=() files=()
  local f map=() missing
  read -ra closure <<<"$packages"
  missing=$(dpkg-query -W -f='${Status} ${Package}\n' "${closure[@]}" 2>&1 |
    grep -v '^install ok installed' || true)
  [[ -z $missing ]] || die "HUTCH_VM_PACKAGES: not installed here: $(tr '\n' ' ' <<<"$missing")"
  mapfile -t closure < <(apt-cache depends --recurse --installed --no-recommends --no-suggests \
    --no-conflicts --no-breaks --no-replaces --no-enhances "${closure[@]}" 2>/dev/null |
    grep -v '^[ <]' | sort -u)
  # Debian 12 packages still name /bin, /lib, ...: map them to where the links point.
  for f in /*; do
    [[ -L $f ]] && map+=(-e "s|^$f/|/$(realpath -m --relative-to=/ "$f")/|")
  done
  while read -r f; do
    [[ -d $f && ! -L $f ]] && continue
    [[ -e $f || -L $f ]] && files+=("$f")
  done < <(dpkg-query -L "${closure[@]}" 2>/dev/null | grep '^/' | sed "${map[@]}" |
    grep -Ev '^/usr/share/(man|locale|info|lintian)/' | sort -u)
  ((${#files[@]})) || die "HUTCH_VM_PACKAGES: no files found for: $packages"
  # From /: cp --parents reads the parents' attributes through the path without its leading slash.
  # Hard links when the temp dir shares /usr's filesystem (no copying), else copies.
  local link=(-l)
  ln "${files[0]}" "$work/.link-test" 2>/dev/null || link=()
  rm -f "$work/.link-test"
  printf '%s\0' "${files[@]}" | (cd / && xargs -0 cp -a "${link[@]}" --parents -t "$root") ||
    die "cannot copy the packages' files into $root"
  # update-alternatives' links (awk -> /etc/alternatives/awk -> mawk) are no package's files.
  while read -r f; do
    [[ -e $root$(readlink -f "$f") && ! -e $root$f ]] && cp -P "$f" "$root$f"
  done < <(find /usr/bin /usr/sbin -maxdepth 1 -lname '/etc/alternatives/*')
  # The host's directory skeleton (/usr/local/bin, /var/tmp, /home, ...): empty, same modes.
  for f in /* /usr/local/* /var/*; do
    if [[ -L $f ]]; then
      [[ -e $root$f || -L $root$f ]] || cp -P "$f" "$root$f"
    elif [[ -d $f ]]; then
      mkdir -p "$root$f"
      chmod --reference="$f" "$root$f"
    fi
  done
  # /etc comes whole from the copy below: the packages' /etc files hard-linked above go first, or
  # tar -x unlinking them would change the host files' ctime while the reading tar reads them
  # ("file changed as we read it", exit 1).
  find "$root/etc" -type f -links +1 -delete
  tar -C / -cf - --exclude=etc/shadow --exclude=etc/shadow- --exclude=etc/gshadow \
    --exclude=etc/gshadow- --exclude=etc/ssh --exclude=etc/ssl/private \
    --exclude=etc/apt/auth.conf --exclude=etc/apt/auth.conf.d etc | tar -C "$root" -xf - ||
    die "cannot copy /etc into $root"
  # Locked passwords for every account: the files exist, as on any host, but hold no secret.
  awk -F: '{ print $1 ":*:19000:0:99999:7:::" }' /etc/passwd >"$root/etc/shadow"
  awk -F: '{ print $1 ":*::" }' /etc/group >"$root/etc/gshadow"
  chmod 640 "$root/etc/shadow" "$root/etc/gshadow"
  say "staged ${#closure[@]} packages (${#files[@]} files) and /etc"
}
((on_disk == 0)) || stage_packages

# copy_with_libs SRC: SRC to the same absolute path in the guest, plus every library `ldd` names.
copy_with_libs() {
  local src=$1 lib
  mkdir -p "$root$(dirname "$src")"
  rm -f "$root$src" # a staged hard link: never write through it into the host's file
  # Debug info is most of a test binary's size and only slows the boot: ELF files go in without it.
  if [[ $strip == 1 && $(head -c4 "$src" | od -An -c | tr -d ' ') == 177ELF ]] &&
    objcopy --strip-debug "$src" "$root$src" 2>/dev/null; then
    chmod --reference="$src" "$root$src"
  else
    cp -L --preserve=mode "$src" "$root$src"
  fi
  # A static executable makes ldd fail ("not a dynamic executable"); nothing more to copy then.
  local out
  out=$(LC_ALL=C ldd "$src" 2>/dev/null) || return 0
  if grep -q 'not found' <<<"$out"; then
    die "$src needs libraries this host lacks: $(grep 'not found' <<<"$out" | tr -s ' \t\n' ' ')"
  fi
  while read -r lib; do
    [[ -e $root$lib ]] && continue
    mkdir -p "$root$(dirname "$lib")"
    cp -L "$lib" "$root$lib"
  done < <(awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' <<<"$out")
}

# busybox (busybox-static; a dynamic one works too through copy_with_libs). /init creates the applet
# links itself (`busybox --install -s`): ~270 symlinks, cheaper in the guest than ~800 forks here.
busybox=$(command -v busybox)
if ((on_disk)); then
  # The boot stage needs a static busybox; the disk keeps the packages' own /bin/sh.
  LC_ALL=C ldd "$busybox" >/dev/null 2>&1 && die "disk mode needs a static busybox (busybox-static)"
  cp -L "$busybox" "$boot/bin/busybox"
  ln -s busybox "$boot/bin/sh"
  install -m 755 "$init_template" "$boot/init"
  [[ -e $root/bin/busybox ]] || cp -L "$busybox" "$root/bin/busybox"
else
  copy_with_libs "$busybox"
  [[ $busybox == /bin/busybox ]] || cp -L "$busybox" "$root/bin/busybox"
  ln -s busybox "$root/bin/sh"
  printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$root/etc/passwd"
  printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$root/etc/group"
fi
install -m 755 "$init_template" "$root/init"
echo hutch-vm >"$root/etc/hostname"

# Kernel modules with their dependencies, numbered in load order (dependencies first). The package
# has no modules.dep (depmod runs at install time), so dependencies come from each module's .modinfo.
declare -A mod_path=() mod_done=()
mod_seq=0
if [[ -n $modules ]]; then
  while read -r f; do
    n=${f##*/}
    n=${n%%.ko*}
    mod_path[${n//-/_}]=$f
  done < <(find "$moddir/kernel" -name '*.ko*')
fi
add_module() { # add_module NAME
  local name=${1//-/_} src dep out
  [[ -z ${mod_done[$name]:-} ]] || return 0
  mod_done[$name]=1
  src=${mod_path[$name]:-}
  [[ -n $src ]] || die "kernel module '$1' is not in $moddir/kernel (built in? then drop it from HUTCH_VM_MODULES)"
  out=$work/mod-$name.ko
  case $src in
    *.ko) cp "$src" "$out" ;;
    *.ko.xz) xz -dc "$src" >"$out" ;;
    *.ko.zst) zstd -qdc "$src" >"$out" ;;
    *.ko.gz) gzip -dc "$src" >"$out" ;;
    *) die "unknown module format: $src" ;;
  esac
  for dep in $(tr '\0' '\n' <"$out" | sed -n 's/^depends=//p' | tr , ' '); do
    add_module "$dep"
  done
  mod_seq=$((mod_seq + 1))
  mv "$out" "$(printf '%s/lib/modules/hutch/%02d-%s.ko' "$boot" "$mod_seq" "$name")"
}
for m in $modules; do add_module "$m"; done

# copy_tree DIR: DIR at the same path, without .git, CMakeFiles and object files; executables go
# through copy_with_libs (stripped, with their libraries), the rest is hard-linked in disk mode.
copy_tree() {
  local f link=()
  ((on_disk == 0)) || link=(-l)
  while IFS= read -r -d '' f; do
    if [[ -d $f && ! -L $f ]]; then
      mkdir -p "$root$f"
    elif [[ -f $f && ! -L $f && -x $f ]]; then
      copy_with_libs "$f"
    else
      cp -a "${link[@]}" "$f" "$root$f" 2>/dev/null || cp -a "$f" "$root$f"
    fi
  done < <(find "$1" \( -name .git -o -name CMakeFiles -o -name '*.o' \) -prune -o -print0)
}

# Extra files, then the test binaries (at their own path, /tests/<name> pointing there).
read -ra extra <<<"${HUTCH_VM_FILES:-}"
for f in "${extra[@]}"; do
  [[ -e $f ]] || die "HUTCH_VM_FILES: no such file: $f"
  f=$(realpath "$f")
  case $f in /dev/* | /proc/* | /sys/* | /tests/* | /etc/hutch-vm/* | /init)
    die "HUTCH_VM_FILES: $f would be hidden or clobbered in the guest" ;;
  esac
  if [[ -d $f ]]; then
    mkdir -p "$root$(dirname "$f")"
    copy_tree "$f"
  else
    copy_with_libs "$f"
  fi
done
for i in "${!bins[@]}"; do
  case ${bins[i]} in
    /dev/* | /proc/* | /sys/* | /tests/*)
      # The guest mounts over these: the binary lives at /tests/<name> itself.
      copy_with_libs "${bins[i]}"
      mv "$root${bins[i]}" "$root/tests/${names[i]}"
      chmod 755 "$root/tests/${names[i]}"
      ;;
    *)
      copy_with_libs "${bins[i]}"
      chmod 755 "$root${bins[i]}"
      ln -s "${bins[i]}" "$root/tests/${names[i]}"
      ;;
  esac
done
printf '%s\n' "${names[@]}" >"$root/etc/hutch-vm/tests"
sq() { printf "'%s'" "${1//\'/\'\\\'\'}"; } # single-quoted for sh
{
  echo "HUTCH_VM_TEST_ARGS=$(sq "${HUTCH_VM_TEST_ARGS:-}")"
  echo "HUTCH_VM_TEST_CGROUP=$(sq "${HUTCH_VM_TEST_CGROUP:-/hutch-vm.slice}")"
  echo "HUTCH_VM_ON_DISK=$on_disk"
  for v in ${HUTCH_VM_EXPORT:-}; do
    [[ $v =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "HUTCH_VM_EXPORT: '$v' is not a variable name"
    echo "export $v=$(sq "${!v-}")"
  done
} >"$root/etc/hutch-vm/env"

initrd=$work/initramfs.cpio.gz
(cd "$boot" && find . -print0 | LC_ALL=C sort -z | cpio --null -o -H newc -R 0:0 --quiet) | gzip -1 >"$initrd"
drive=()
if ((on_disk)); then
  disk=$work/root.ext4
  used=$(du -sm "$root" | cut -f1)
  # Sparse: only what mkfs writes takes space on the host.
  mkfs.ext4 -q -F -L hutch-vm -d "$root" -E root_owner=0:0 "$disk" \
    "$((used + used / 4 + disk_free))M" >/dev/null || die "mkfs.ext4 -d $root $disk failed"
  rm -rf "$root" # only links and copies: the disk has them now
  drive=(-drive "file=$disk,format=raw,if=virtio,cache=unsafe")
  say "ext4 disk of $used MiB used + $disk_free MiB free and initramfs $(du -k "$initrd" | cut -f1) KiB" \
    "built in $(elapsed "$build_start") s; kernel $kver"
else
  say "initramfs $(du -k "$initrd" | cut -f1) KiB built in $(elapsed "$build_start") s; kernel $kver"
fi

# --- boot ----------------------------------------------------------------------------------------------
log=$work/console.log
append="console=ttyS0 panic=-1 quiet${HUTCH_VM_APPEND:+ $HUTCH_VM_APPEND}"
say "booting (qemu TCG, ${memory} MiB, $smp CPUs, budget ${budget} s)"
: >"$log"
vm_start=$(now)
timeout -k 5 "$budget" qemu-system-x86_64 -accel tcg,thread=multi -m "$memory" -smp "$smp" \
  -nographic -no-reboot -nic none -kernel "$vmlinuz" -initrd "$initrd" -append "$append" \
  "${drive[@]}" \
  </dev/null >"$log" 2>&1 &
vm_pid=$!
tail_pid=""
if [[ $verbose == 1 ]]; then
  tail -n +1 -f --pid="$vm_pid" "$log" | tr -d '\r' | sed -uE $'s/\e\\[[0-9;?]*[A-Za-z]//g; s/\ec//g' &
  tail_pid=$!
fi
vm_rc=0
wait "$vm_pid" || vm_rc=$?
vm_pid=""
[[ -z $tail_pid ]] || wait "$tail_pid" || true
vm_time=$(elapsed "$vm_start")
[[ -z ${HUTCH_VM_LOG:-} ]] || cp "$log" "$HUTCH_VM_LOG"

# --- results ---------------------------------------------------------------------------------------
HUTCH_VM_NAME=$prog "$here/vm/results.sh" "$log" "$vm_rc" "$budget" "$vm_time" "${names[@]}"
