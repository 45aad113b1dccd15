#include "runtime/fs/mount_plan.h"

#include <gtest/gtest.h>
#include <sys/mount.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/result_util.h"

namespace hutch {
namespace {

using Kind = MountOp::Kind;
using Option = std::pair<std::string, std::string>;
using test_util::contains;
using test_util::error_message;

SandboxSpec make_spec() {
  SandboxSpec spec;
  spec.hostname = "box";
  spec.disk_bytes = 123'456'789;
  return spec;
}

MountPlan build_ok(const SandboxSpec& spec) {
  auto plan = build_mount_plan(spec);
  EXPECT_TRUE(plan) << plan.error().message();
  return plan ? *plan : MountPlan{};
}

// Index of the first op of `kind` at `path`, or -1.
int index_of(const MountPlan& plan, Kind kind, const std::string& path) {
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    if (plan.ops[i].kind == kind && plan.ops[i].path == path) return static_cast<int>(i);
  }
  return -1;
}

const MountOp* find_op(const MountPlan& plan, Kind kind, const std::string& path) {
  int i = index_of(plan, kind, path);
  return i < 0 ? nullptr : &plan.ops[i];
}

bool has_option(const MountOp& op, const std::string& key, const std::string& value) {
  return std::ranges::find(op.options, Option{key, value}) != op.options.end();
}

TEST(MountPlan, ProcIsMountedBeforeItsMasks) {
  MountPlan plan = build_ok(make_spec());
  const int proc = index_of(plan, Kind::kMountFs, "/proc");
  ASSERT_GE(proc, 0);
  EXPECT_EQ(plan.ops[proc].fstype, "proc");
  const unsigned long long attrs = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
  EXPECT_EQ(plan.ops[proc].attrs & attrs, attrs);
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const Kind kind = plan.ops[i].kind;
    if (kind == Kind::kMaskFile || kind == Kind::kMaskDir || kind == Kind::kReadOnly) {
      EXPECT_GT(static_cast<int>(i), proc) << plan.ops[i].path;
    }
  }
}

TEST(MountPlan, MasksEveryProcPathWithTheRightKind) {
  MountPlan plan = build_ok(make_spec());
  for (const std::string& path : kMaskedProcFiles) {
    EXPECT_NE(find_op(plan, Kind::kMaskFile, path), nullptr) << path;
  }
  for (const std::string& path : kMaskedProcDirs) {
    EXPECT_NE(find_op(plan, Kind::kMaskDir, path), nullptr) << path;
  }
  for (const std::string& path : kReadOnlyProcPaths) {
    EXPECT_NE(find_op(plan, Kind::kReadOnly, path), nullptr) << path;
  }
}

TEST(MountPlan, MaskListsCoverRuncsProcPaths) {
  // SECURITY.md: the /proc paths runc masks or makes read-only.
  auto has = [](const std::vector<std::string>& list, const std::string& path) {
    return std::ranges::find(list, path) != list.end();
  };
  for (const char* file : {"/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list",
                           "/proc/timer_stats", "/proc/sched_debug", "/proc/sysrq-trigger"}) {
    EXPECT_TRUE(has(kMaskedProcFiles, file)) << file;
  }
  for (const char* dir : {"/proc/acpi", "/proc/asound", "/proc/scsi"}) {
    EXPECT_TRUE(has(kMaskedProcDirs, dir)) << dir;
  }
  for (const char* path : {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys"}) {
    EXPECT_TRUE(has(kReadOnlyProcPaths, path)) << path;
  }
}

TEST(MountPlan, DevIsAFreshTmpfsWithOnlyTheSafeNodesBound) {
  MountPlan plan = build_ok(make_spec());
  const int dev = index_of(plan, Kind::kMountFs, "/dev");
  ASSERT_GE(dev, 0);
  EXPECT_EQ(plan.ops[dev].fstype, "tmpfs");
  std::vector<std::string> bound;
  for (size_t i = 0; i < plan.ops.size(); ++i) {
    const MountOp& op = plan.ops[i];
    if (op.kind != Kind::kBind || !op.path.starts_with("/dev/")) continue;
    bound.push_back(op.path);
    EXPECT_EQ(op.source, op.path);
    EXPECT_FALSE(op.read_only) << op.path;
    EXPECT_EQ(op.attrs, 0u) << op.path << ": device nodes need dev";
    EXPECT_GT(static_cast<int>(i), dev) << op.path << " is bound before /dev is mounted";
  }
  const std::vector<std::string> expected = {"/dev/null",   "/dev/zero",    "/dev/full",
                                             "/dev/random", "/dev/urandom", "/dev/tty"};
  EXPECT_EQ(bound, expected);
}

TEST(MountPlan, DevptsIsAPrivateInstance) {
  MountPlan plan = build_ok(make_spec());
  const MountOp* pts = find_op(plan, Kind::kMountFs, "/dev/pts");
  ASSERT_NE(pts, nullptr);
  EXPECT_EQ(pts->fstype, "devpts");
  EXPECT_TRUE(has_option(*pts, "newinstance", ""));
  EXPECT_TRUE(has_option(*pts, "ptmxmode", "0666"));
  EXPECT_TRUE(has_option(*pts, "gid", "5"));  // the default IdMap maps the tty group
  const MountOp* ptmx = find_op(plan, Kind::kSymlink, "/dev/ptmx");
  ASSERT_NE(ptmx, nullptr);
  EXPECT_EQ(ptmx->source, "pts/ptmx");
}

TEST(MountPlan, DevptsGidOnlyWhenTheTtyGroupIsMapped) {
  SandboxSpec spec = make_spec();
  spec.ids.count = 1;
  MountPlan plan = build_ok(spec);
  const MountOp* pts = find_op(plan, Kind::kMountFs, "/dev/pts");
  ASSERT_NE(pts, nullptr);
  for (const Option& option : pts->options) EXPECT_NE(option.first, "gid");
}

TEST(MountPlan, TmpAndShmAreTmpfsCappedByDiskSize) {
  MountPlan plan = build_ok(make_spec());
  for (const char* path : {"/tmp", "/dev/shm"}) {
    const MountOp* op = find_op(plan, Kind::kMountFs, path);
    ASSERT_NE(op, nullptr) << path;
    EXPECT_EQ(op->fstype, "tmpfs");
    EXPECT_TRUE(has_option(*op, "size", "123456789")) << path;
    EXPECT_TRUE(has_option(*op, "mode", "1777")) << path;
    EXPECT_EQ(op->attrs & (MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV),
              MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  }
}

TEST(MountPlan, StdioLinksPointIntoProcSelf) {
  MountPlan plan = build_ok(make_spec());
  const std::pair<const char*, const char*> links[] = {{"/dev/fd", "/proc/self/fd"},
                                                       {"/dev/stdin", "/proc/self/fd/0"},
                                                       {"/dev/stdout", "/proc/self/fd/1"},
                                                       {"/dev/stderr", "/proc/self/fd/2"}};
  for (const auto& [path, target] : links) {
    const MountOp* link = find_op(plan, Kind::kSymlink, path);
    ASSERT_NE(link, nullptr) << path;
    EXPECT_EQ(link->source, target);
  }
}

TEST(MountPlan, GeneratesEtcFilesForRoot) {
  MountPlan plan = build_ok(make_spec());
  const std::pair<const char*, std::string> files[] = {{"/etc/hostname", "box\n"},
                                                       {"/etc/hosts", generate_hosts("box")},
                                                       {"/etc/passwd", generate_passwd(0, 0)},
                                                       {"/etc/group", generate_group(0)}};
  const int etc = index_of(plan, Kind::kMkdir, "/etc");
  ASSERT_GE(etc, 0);
  for (const auto& [path, content] : files) {
    const int i = index_of(plan, Kind::kWriteFile, path);
    ASSERT_GE(i, 0) << path;
    EXPECT_EQ(plan.ops[i].source, content) << path;
    EXPECT_GT(i, etc) << path << " is written before /etc exists";
  }
  const MountOp* resolv = find_op(plan, Kind::kWriteFile, "/etc/resolv.conf");
  ASSERT_NE(resolv, nullptr);
  EXPECT_FALSE(contains(resolv->source, "nameserver"));  // only loopback: nothing to resolve with
  EXPECT_EQ(index_of(plan, Kind::kMkdir, "/home/user"), -1);
}

TEST(MountPlan, NonRootUserGetsItsPasswdEntryAndHome) {
  SandboxSpec spec = make_spec();
  spec.uid = 1000;
  spec.gid = 1001;
  MountPlan plan = build_ok(spec);
  const MountOp* passwd = find_op(plan, Kind::kWriteFile, "/etc/passwd");
  ASSERT_NE(passwd, nullptr);
  EXPECT_EQ(passwd->source, generate_passwd(1000, 1001));
  const MountOp* group = find_op(plan, Kind::kWriteFile, "/etc/group");
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->source, generate_group(1001));
  const MountOp* home = find_op(plan, Kind::kMkdir, "/home/user");
  ASSERT_NE(home, nullptr);
  EXPECT_EQ(home->uid, 1000u);
  EXPECT_EQ(home->gid, 1001u);
}

TEST(GeneratePasswd, RootOnlyHasRootAndNobody) {
  EXPECT_EQ(generate_passwd(0, 0),
            "root:x:0:0:root:/root:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
}

TEST(GeneratePasswd, NonRootGetsAUserLineWithHomeUnderHome) {
  const std::string passwd = generate_passwd(1000, 1001);
  EXPECT_TRUE(contains(passwd, "root:x:0:0:root:/root:/bin/sh\n"));
  EXPECT_TRUE(contains(passwd, "\nuser:x:1000:1001:sandbox user:/home/user:/bin/sh\n"));
  EXPECT_TRUE(contains(passwd, "\nnobody:x:65534:65534:"));
}

TEST(GenerateGroup, RootGidHasTheFixedGroups) {
  EXPECT_EQ(generate_group(0), "root:x:0:\ntty:x:5:\nnogroup:x:65534:\n");
}

TEST(GenerateGroup, OtherGidGetsAUserGroup) {
  EXPECT_EQ(generate_group(1000), "root:x:0:\ntty:x:5:\nuser:x:1000:\nnogroup:x:65534:\n");
}

TEST(GenerateGroup, TtyGidIsNotDuplicated) { EXPECT_FALSE(contains(generate_group(5), "user:")); }

TEST(GenerateHosts, MapsLocalhostAndTheHostname) {
  const std::string hosts = generate_hosts("box");
  EXPECT_TRUE(contains(hosts, "127.0.0.1\tlocalhost\n"));
  EXPECT_TRUE(contains(hosts, "::1\tlocalhost"));
  EXPECT_TRUE(contains(hosts, "127.0.1.1\tbox\n"));
}

TEST(MountPlan, BindsKeepOrderAndReadOnlyAfterTheirParentDirs) {
  SandboxSpec spec = make_spec();
  spec.binds = {{"/host/data", "/data", true},
                {"/host/out", "/work/out", false},
                {"/host/cfg", "/etc/app.conf", true}};
  MountPlan plan = build_ok(spec);
  std::vector<const MountOp*> user_binds;
  for (const MountOp& op : plan.ops) {
    if (op.kind == Kind::kBind && !op.path.starts_with("/dev/")) user_binds.push_back(&op);
  }
  ASSERT_EQ(user_binds.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(user_binds[i]->path, spec.binds[i].target);
    EXPECT_EQ(user_binds[i]->source, spec.binds[i].source);
    EXPECT_EQ(user_binds[i]->read_only, spec.binds[i].read_only);
    // Host directories are data: their set-id files and device nodes take no effect.
    EXPECT_EQ(user_binds[i]->attrs, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  }
  EXPECT_LT(index_of(plan, Kind::kMkdir, "/work"), index_of(plan, Kind::kBind, "/work/out"));
  // After the generated /etc files, so a bound config file is not overwritten.
  EXPECT_LT(index_of(plan, Kind::kWriteFile, "/etc/passwd"),
            index_of(plan, Kind::kBind, "/etc/app.conf"));
}

// hutchd's trust files: a directory the launcher opens, then a file of it bound over the rootfs's
// own bundle files, for which nothing is created (their parents neither).
TEST(MountPlan, BindsOverExistingFilesCreateNothingAndKeepTheirSource) {
  SandboxSpec spec = make_spec();
  spec.binds = {{"/state/ca/public", "/etc/hutch", true, BindFrom::kLauncher},
                {"/etc/hutch/ca-bundle.pem", "/etc/pki/tls/certs/ca-bundle.crt", true,
                 BindFrom::kSandbox, true}};
  MountPlan plan = build_ok(spec);
  const MountOp* dir = find_op(plan, Kind::kBind, "/etc/hutch");
  ASSERT_TRUE(dir);
  EXPECT_EQ(dir->from, BindFrom::kLauncher);
  EXPECT_FALSE(dir->existing_file_only);
  EXPECT_EQ(dir->source_fd, -1) << "the launcher sets it, not the plan";
  const MountOp* file = find_op(plan, Kind::kBind, "/etc/pki/tls/certs/ca-bundle.crt");
  ASSERT_TRUE(file);
  EXPECT_EQ(file->from, BindFrom::kSandbox);
  EXPECT_EQ(file->source, "/etc/hutch/ca-bundle.pem");
  EXPECT_TRUE(file->existing_file_only);
  EXPECT_TRUE(file->read_only);
  for (const MountOp& op : plan.ops) {
    EXPECT_FALSE(op.kind == Kind::kMkdir && op.path.starts_with("/etc/pki")) << op.path;
  }
  EXPECT_LT(index_of(plan, Kind::kBind, "/etc/hutch"),
            index_of(plan, Kind::kBind, "/etc/pki/tls/certs/ca-bundle.crt"));
}

// hutchd's host mounts: a tree hutchd cloned from the fd it checked beneath the mount root
// (daemon/service/host_mounts.h) is what the child attaches; the path only names it in errors.
TEST(MountPlan, ABindsOwnTreeIsCarriedToTheChildNotReopenedByPath) {
  SandboxSpec spec = make_spec();
  spec.binds = {{"/srv/skills/a", "/skills/a", true, BindFrom::kLauncher, false, 42}};
  MountPlan plan = build_ok(spec);
  const MountOp* bind = find_op(plan, Kind::kBind, "/skills/a");
  ASSERT_TRUE(bind);
  EXPECT_EQ(bind->from, BindFrom::kLauncher);
  EXPECT_EQ(bind->source_fd, 42);
  EXPECT_TRUE(bind->read_only);
  EXPECT_EQ(bind->attrs, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV);
  // Only the launcher's binds take a tree; one still on the wire (never put in) is refused.
  spec.binds[0].from = BindFrom::kHost;
  EXPECT_TRUE(contains(error_message(build_mount_plan(spec)), "from the launcher"));
  spec.binds[0].from = BindFrom::kLauncher;
  spec.binds[0].tree_fd = -2;
  EXPECT_TRUE(contains(error_message(build_mount_plan(spec)), "no tree for /skills/a"));
}

TEST(MountPlan, RejectsBindTargetsOutsideTheNormalTree) {
  for (const char* target : {"/", "", "data", "./data", "/a/../b", "/..", "/a/", "//a"}) {
    SandboxSpec spec = make_spec();
    spec.binds = {{"/host", target, true}};
    EXPECT_TRUE(contains(error_message(build_mount_plan(spec)), "target")) << target;
  }
  SandboxSpec spec = make_spec();
  spec.binds = {{"/host", std::string("/a\0/etc", 7), true}};
  EXPECT_FALSE(build_mount_plan(spec)) << "target with NUL";
}

TEST(MountPlan, RejectsNonCanonicalBindSources) {
  for (const char* source : {"", "host", "/host/../etc", "/host/"}) {
    SandboxSpec spec = make_spec();
    spec.binds = {{source, "/data", true}};
    EXPECT_TRUE(contains(error_message(build_mount_plan(spec)), "source")) << source;
  }
}

TEST(MountPlan, RejectsNonNormalWorkdir) {
  for (const char* workdir : {"", "work", "/work/", "/work/..", "/../etc", "//work"}) {
    SandboxSpec spec = make_spec();
    spec.workdir = workdir;
    EXPECT_TRUE(contains(error_message(build_mount_plan(spec)), "workdir")) << workdir;
  }
}

TEST(MountPlan, VolumesAreAttachedAfterBindsAndBeforeTheWorkdir) {
  SandboxSpec spec = make_spec();
  spec.binds = {{"/srv/data", "/data", true}};
  spec.volumes = {{5, "/workspace", false}, {6, "/cache/pip", true}};
  spec.workdir = "/workspace/project";
  MountPlan plan = build_ok(spec);
  const int bind = index_of(plan, Kind::kBind, "/data");
  const int workspace = index_of(plan, Kind::kAttach, "/workspace");
  const int cache = index_of(plan, Kind::kAttach, "/cache/pip");
  const int workdir = index_of(plan, Kind::kMkdir, "/workspace/project");
  ASSERT_GE(bind, 0);
  ASSERT_GT(workspace, bind);
  ASSERT_GT(cache, workspace);
  EXPECT_GT(workdir, cache);  // made inside the volume
  EXPECT_EQ(plan.ops[workspace].fd, 5);
  EXPECT_EQ(plan.ops[cache].fd, 6);
  EXPECT_LT(index_of(plan, Kind::kMkdir, "/cache/pip"), cache);  // its mount point first
}

TEST(MountPlan, RejectsBadVolumes) {
  for (const char* target : {"/", "relative", "/a/../b", "/a//b", ""}) {
    SandboxSpec spec = make_spec();
    spec.volumes = {{5, target, false}};
    EXPECT_FALSE(build_mount_plan(spec)) << target;
  }
  SandboxSpec no_fd = make_spec();
  no_fd.volumes = {{-1, "/workspace", false}};
  EXPECT_FALSE(build_mount_plan(no_fd));
}

TEST(MountPlan, WorkdirIsCreatedLastAndOwnedByTheUser) {
  SandboxSpec spec = make_spec();
  spec.workdir = "/work/dir";
  spec.uid = 1000;
  spec.gid = 1000;
  spec.binds = {{"/host", "/data", true}};
  MountPlan plan = build_ok(spec);
  ASSERT_FALSE(plan.ops.empty());
  const MountOp& last = plan.ops.back();
  EXPECT_EQ(last.kind, Kind::kMkdir);
  EXPECT_EQ(last.path, "/work/dir");
  EXPECT_EQ(last.uid, 1000u);
  EXPECT_EQ(last.gid, 1000u);
}

}  // namespace
}  // namespace hutch
