#include "runtime/fs/mount_plan.h"

#include <sys/mount.h>

#include "runtime/fs/paths.h"

namespace hutch {
namespace {

constexpr const char* kDevNodes[] = {"null", "zero", "full", "random", "urandom", "tty"};

MountOp op(MountOp::Kind kind, std::string path) {
  MountOp step{};
  step.kind = kind;
  step.path = std::move(path);
  return step;
}

MountOp mkdir_op(std::string path, mode_t mode, uid_t uid = 0, gid_t gid = 0) {
  MountOp step = op(MountOp::Kind::kMkdir, std::move(path));
  step.mode = mode;
  step.uid = uid;
  step.gid = gid;
  return step;
}

MountOp fs_op(std::string fstype, std::string path, unsigned long long attrs,
              std::vector<std::pair<std::string, std::string>> options) {
  MountOp step = op(MountOp::Kind::kMountFs, std::move(path));
  step.fstype = std::move(fstype);
  step.attrs = attrs;
  step.options = std::move(options);
  return step;
}

MountOp file_op(MountOp::Kind kind, std::string path, std::string source, mode_t mode = 0644) {
  MountOp step = op(kind, std::move(path));
  step.source = std::move(source);
  step.mode = mode;
  return step;
}

}  // namespace

const std::vector<std::string> kMaskedProcFiles = {
    "/proc/kcore",       "/proc/keys",        "/proc/latency_stats", "/proc/timer_list",
    "/proc/timer_stats", "/proc/sched_debug", "/proc/sysrq-trigger"};
const std::vector<std::string> kMaskedProcDirs = {"/proc/acpi", "/proc/asound", "/proc/scsi"};
const std::vector<std::string> kReadOnlyProcPaths = {"/proc/bus", "/proc/fs", "/proc/irq",
                                                     "/proc/sys"};

std::string generate_passwd(uid_t uid, gid_t gid) {
  std::string passwd = "root:x:0:0:root:/root:/bin/sh\n";
  if (uid != 0) {
    passwd += "user:x:" + std::to_string(uid) + ":" + std::to_string(gid) +
              ":sandbox user:/home/user:/bin/sh\n";
  }
  return passwd + "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n";
}

std::string generate_group(gid_t gid) {
  std::string group = "root:x:0:\ntty:x:5:\n";
  if (gid != 0 && gid != 5) group += "user:x:" + std::to_string(gid) + ":\n";
  return group + "nogroup:x:65534:\n";
}

std::string generate_hosts(const std::string& hostname) {
  return "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n127.0.1.1\t" + hostname +
         "\n";
}

Result<MountPlan> build_mount_plan(const SandboxSpec& spec) {
  if (!is_normal_absolute(spec.workdir)) {
    return plain_error("mount plan",
                       "workdir \"" + spec.workdir + "\" is not a normalized absolute path");
  }
  MountPlan plan;
  auto& ops = plan.ops;
  const std::string size = std::to_string(spec.disk_bytes);

  ops.push_back(mkdir_op("/proc", 0555));
  ops.push_back(
      fs_op("proc", "/proc", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC, {}));
  for (const std::string& path : kMaskedProcFiles)
    ops.push_back(op(MountOp::Kind::kMaskFile, path));
  for (const std::string& path : kMaskedProcDirs) ops.push_back(op(MountOp::Kind::kMaskDir, path));
  for (const std::string& path : kReadOnlyProcPaths)
    ops.push_back(op(MountOp::Kind::kReadOnly, path));

  ops.push_back(mkdir_op("/dev", 0755));
  ops.push_back(fs_op("tmpfs", "/dev", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC,
                      {{"mode", "0755"}, {"size", "65536"}}));
  for (const char* node : kDevNodes) {
    MountOp bind = op(MountOp::Kind::kBind, std::string("/dev/") + node);
    bind.source = std::string("/dev/") + node;
    bind.read_only = false;
    ops.push_back(std::move(bind));
  }
  ops.push_back(mkdir_op("/dev/pts", 0755));
  std::vector<std::pair<std::string, std::string>> devpts = {
      {"newinstance", ""}, {"ptmxmode", "0666"}, {"mode", "0620"}};
  if (spec.ids.count > 5) devpts.emplace_back("gid", "5");
  ops.push_back(fs_op("devpts", "/dev/pts", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, devpts));
  ops.push_back(file_op(MountOp::Kind::kSymlink, "/dev/ptmx", "pts/ptmx"));
  ops.push_back(mkdir_op("/dev/shm", 01777));
  ops.push_back(fs_op("tmpfs", "/dev/shm", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                      {{"mode", "1777"}, {"size", size}}));
  ops.push_back(file_op(MountOp::Kind::kSymlink, "/dev/fd", "/proc/self/fd"));
  ops.push_back(file_op(MountOp::Kind::kSymlink, "/dev/stdin", "/proc/self/fd/0"));
  ops.push_back(file_op(MountOp::Kind::kSymlink, "/dev/stdout", "/proc/self/fd/1"));
  ops.push_back(file_op(MountOp::Kind::kSymlink, "/dev/stderr", "/proc/self/fd/2"));

  ops.push_back(mkdir_op("/tmp", 01777));
  ops.push_back(fs_op("tmpfs", "/tmp", MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                      {{"mode", "1777"}, {"size", size}}));

  ops.push_back(mkdir_op("/etc", 0755));
  ops.push_back(file_op(MountOp::Kind::kWriteFile, "/etc/hostname", spec.hostname + "\n"));
  ops.push_back(file_op(MountOp::Kind::kWriteFile, "/etc/hosts", generate_hosts(spec.hostname)));
  ops.push_back(file_op(MountOp::Kind::kWriteFile, "/etc/resolv.conf",
                        "# hutch: this sandbox has no network beyond loopback\n"));
  ops.push_back(
      file_op(MountOp::Kind::kWriteFile, "/etc/passwd", generate_passwd(spec.uid, spec.gid)));
  ops.push_back(file_op(MountOp::Kind::kWriteFile, "/etc/group", generate_group(spec.gid)));
  if (spec.uid != 0) {
    ops.push_back(mkdir_op("/home", 0755));
    ops.push_back(mkdir_op("/home/user", 0755, spec.uid, spec.gid));
  }

  for (const BindMount& bind : spec.binds) {
    if (!is_normal_absolute(bind.target) || bind.target == "/") {
      return plain_error(
          "bind", "target \"" + bind.target + "\" is not a normalized absolute path below /");
    }
    if (!is_normal_absolute(bind.source)) {
      return plain_error("bind", "source \"" + bind.source + "\" is not canonical");
    }
    if (bind.tree_fd < -1) return plain_error("bind", "no tree for " + bind.target);
    if (bind.tree_fd >= 0 && bind.from != BindFrom::kLauncher) {
      return plain_error("bind", "a tree for " + bind.target + " comes from the launcher only");
    }
    // Over an existing file only: nothing of its path may be created (the upper layer, and so
    // the sandbox's snapshots, would keep directories its rootfs never had).
    if (!bind.existing_file_only) ops.push_back(mkdir_op(parent_path(bind.target), 0755));
    MountOp step = op(MountOp::Kind::kBind, bind.target);
    step.source = bind.source;
    step.read_only = bind.read_only;
    step.from = bind.from;
    step.existing_file_only = bind.existing_file_only;
    step.source_fd = bind.tree_fd;
    // A host directory is data: no set-id binaries or device nodes of the host's take effect.
    step.attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    ops.push_back(std::move(step));
  }
  for (const VolumeMount& volume : spec.volumes) {
    if (!is_normal_absolute(volume.target) || volume.target == "/") {
      return plain_error(
          "volume", "target \"" + volume.target + "\" is not a normalized absolute path below /");
    }
    if (volume.mount_fd < 0) return plain_error("volume", "no mount for " + volume.target);
    ops.push_back(mkdir_op(volume.target, 0755));
    MountOp step = op(MountOp::Kind::kAttach, volume.target);
    step.fd = volume.mount_fd;
    ops.push_back(std::move(step));
  }
  // After the volumes: a workdir inside one is made in it.
  ops.push_back(mkdir_op(spec.workdir, 0755, spec.uid, spec.gid));
  return plan;
}

}  // namespace hutch
