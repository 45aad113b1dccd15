#!/bin/sh
# shellcheck shell=sh
# /init of the throwaway initramfs built by scripts/test-cgroupv2-vm.sh (busybox ash, PID 1).
# Sets up a pure cgroup-v2 machine, runs every binary listed in /etc/hutch-vm/tests and prints
#   HUTCH-VM-BEGIN <name>
#   ...the binary's output...
#   HUTCH-VM-RESULT <name> <exit-code>
# for each, then powers off. The host script parses these markers; keep their format in sync.
# In disk mode the same file is the /init of the boot initramfs (marked by /etc/hutch-vm/boot-disk),
# which mounts the ext4 disk and switch_roots into it, and the disk's /init, which runs the tests.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp

# Stage 1, on the initramfs rootfs: it has no parent mount, so pivot_root(2) fails with EINVAL in
# every mount namespace whose root it still is, and hutch pivot_roots into each sandbox. Bind-mount it
# and make the bind mount (which has a parent) the root, the way switch_root does, then start over.
if [ -z "${HUTCH_VM_STAGE2-}" ] && [ -e /etc/hutch-vm/boot-disk ]; then
  bb=/bin/busybox
  fatal() {
    echo "hutch-vm: FATAL: $*"
    $bb poweroff -f
  }
  $bb mount -t devtmpfs devtmpfs /dev || fatal "mount /dev"
  exec </dev/console >/dev/console 2>&1
  # virtio_pci and virtio_blk reach the disk; the others are wanted by the tests, once booted.
  for m in /lib/modules/hutch/*.ko; do
    $bb insmod "$m" || fatal "insmod $m"
  done
  tries=0
  while [ ! -b /dev/vda ] && [ "$tries" -lt 100 ]; do
    $bb sleep 0.1
    tries=$((tries + 1))
  done
  $bb mount -t ext4 /dev/vda /newroot || fatal "mount -t ext4 /dev/vda /newroot"
  $bb mount --move /dev /newroot/dev || fatal "mount --move /dev /newroot/dev" # the console is open
  export HUTCH_VM_STAGE2=1
  # busybox's sh on the disk too, whatever the packages made /bin/sh.
  exec $bb switch_root /newroot /bin/busybox sh /init
fi
if [ -z "${HUTCH_VM_STAGE2-}" ]; then
  /bin/busybox mkdir -p /newroot
  if ! { /bin/busybox mount --bind / /newroot && cd /newroot && /bin/busybox mount --move . /; }; then
    echo "hutch-vm: FATAL: cannot re-root onto a bind mount of the rootfs"
    /bin/busybox poweroff -f
  fi
  export HUTCH_VM_STAGE2=1
  exec /bin/busybox chroot . /init
fi
unset HUTCH_VM_STAGE2
# Tests must not skip on the real kernel, and may want to know where they are.
export HUTCH_MUST_WORK=1 HUTCH_IN_VM=1
# gtest reads its flags from GTEST_<FLAG> too, so plain (non-gtest) binaries get no unknown arguments.
export GTEST_BRIEF=1 GTEST_COLOR=no
# Written by the host script: HUTCH_VM_TEST_ARGS (extra arguments for every binary) and
# HUTCH_VM_TEST_CGROUP (cgroup each binary runs in; "/" = the root cgroup).
# HUTCH_VM_ON_DISK=1: / is the ext4 disk with the packages' own tools.
HUTCH_VM_TEST_ARGS="" HUTCH_VM_TEST_CGROUP=/hutch-vm.slice HUTCH_VM_ON_DISK=0
# shellcheck disable=SC1091 # generated per run
[ -r /etc/hutch-vm/env ] && . /etc/hutch-vm/env
# The applet links on the initramfs (/bin/sh is the only one in the archive); a disk has real tools.
[ "$HUTCH_VM_ON_DISK" = 1 ] || /bin/busybox --install -s
poweroff() { /bin/busybox poweroff "$@"; } # no init system on the disk to ask

say() { echo "hutch-vm: $*"; }
die() {
  say "FATAL: $*"
  poweroff -f
  exit 1 # poweroff failed: init exits, the kernel panics, panic=-1 + qemu -no-reboot end the VM
}

mount -t proc proc /proc || die "mount /proc"
mount -t sysfs sysfs /sys || die "mount /sys"
mountpoint -q /dev || mount -t devtmpfs devtmpfs /dev || die "mount /dev"
# In case the kernel found no /dev/console to hand us: the console is where the host reads results.
exec </dev/console >/dev/console 2>&1
mkdir -p /dev/pts /dev/shm
# What udev makes on a host; bash's process substitution opens /dev/fd/N.
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts || die "mount /dev/pts"
mount -t tmpfs -o mode=1777 tmpfs /dev/shm || die "mount /dev/shm"
# /run (and /tmp, off disk) become tmpfs mounts of their own, keeping what the archive put there.
# On disk /tmp stays on the ext4 root: 6.1 cannot idmap tmpfs, and tests build rootfs trees there.
dirs="/tmp /run"
[ "$HUTCH_VM_ON_DISK" = 1 ] && dirs=/run
for d in $dirs; do
  mode=755
  [ "$d" = /tmp ] && mode=1777
  mkdir -p /mnt/seed
  mount -t tmpfs -o "mode=$mode" tmpfs /mnt/seed || die "mount tmpfs for $d"
  cp -a "$d"/. /mnt/seed/ || die "copy $d"
  rm -rf "${d:?}"/* "${d:?}"/.[!.]*
  mount --move /mnt/seed "$d" || die "move tmpfs to $d"
done
# The options systemd uses on the production hosts; plain as a fallback.
mount -t cgroup2 -o nsdelegate,memory_recursiveprot cgroup2 /sys/fs/cgroup 2>/dev/null ||
  mount -t cgroup2 cgroup2 /sys/fs/cgroup || die "mount cgroup2 at /sys/fs/cgroup"
/bin/busybox hostname hutch-vm
ip link set lo up 2>/dev/null || true

# Kernel messages (OOM kills, ...) would land in the middle of test output on the same console.
# Keep only emergencies while the tests run; failures get a dmesg tail below.
echo 1 >/proc/sys/kernel/printk

for m in /lib/modules/hutch/*.ko; do
  [ -e "$m" ] || continue
  insmod "$m" || die "insmod $m"
done

controllers=""
for c in memory pids cpu io; do
  grep -qw "$c" /sys/fs/cgroup/cgroup.controllers && controllers="$controllers +$c"
done
# shellcheck disable=SC2086 # one word per controller is wanted
echo $controllers >/sys/fs/cgroup/cgroup.subtree_control || die "enable$controllers in cgroup.subtree_control"
# Like a service on a systemd host, each binary runs in a leaf cgroup of its own (never in the root
# cgroup, which is exempt from the no-internal-processes rule), inside a slice that has the
# controllers delegated to it.
cg_parent=/sys/fs/cgroup${HUTCH_VM_TEST_CGROUP%/}
where="${HUTCH_VM_TEST_CGROUP%/}/<name>"
if [ "$cg_parent" = /sys/fs/cgroup ]; then
  where="/ (the root cgroup)"
else
  dir=/sys/fs/cgroup
  for part in $(echo "${HUTCH_VM_TEST_CGROUP#/}" | tr / ' '); do
    dir=$dir/$part
    mkdir -p "$dir" || die "mkdir $dir"
    # shellcheck disable=SC2086
    echo $controllers >"$dir/cgroup.subtree_control" || die "enable$controllers in $dir"
  done
fi
say "kernel $(uname -r); cgroup2 $(grep ' /sys/fs/cgroup ' /proc/mounts | cut -d' ' -f4);" \
  "controllers: $(cat /sys/fs/cgroup/cgroup.controllers); enabled:$controllers;" \
  "tests run in cgroup $where; up $(cut -d' ' -f1 /proc/uptime) s"

cd /tmp || die "cd /tmp"
dmesg_seen=$(dmesg | wc -l)
failed=0
while read -r name; do
  [ -n "$name" ] || continue
  echo "HUTCH-VM-BEGIN $name"
  rc=0
  cg=/sys/fs/cgroup
  if [ "$cg_parent" != /sys/fs/cgroup ]; then
    cg=$cg_parent/$name
    mkdir -p "$cg" || die "mkdir $cg"
  fi
  (
    echo 0 >"$cg/cgroup.procs" || exit 125
    # shellcheck disable=SC2086 # HUTCH_VM_TEST_ARGS is deliberately split into words
    # The link's target: scripts find their own directory from $0.
    exec "$(readlink -f "/tests/$name")" $HUTCH_VM_TEST_ARGS
  ) </dev/null 2>&1 || rc=$?
  echo
  echo "HUTCH-VM-RESULT $name $rc"
  [ "$rc" -eq 0 ] || failed=1
done </etc/hutch-vm/tests

if [ "$failed" -ne 0 ]; then
  # What the kernel said while the tests ran (OOM kills, segfaults, warnings), if anything.
  echo "HUTCH-VM-DMESG-BEGIN"
  dmesg | tail -n +$((dmesg_seen + 1)) | tail -n 80
  echo "HUTCH-VM-DMESG-END"
fi
say "done, up $(cut -d' ' -f1 /proc/uptime) s"
echo "HUTCH-VM-DONE"
poweroff -f
exit 1
