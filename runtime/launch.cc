#include "runtime/launch.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <future>
#include <string_view>
#include <utility>

#include "runtime/cgroup/layout.h"
#include "runtime/cgroup/stale.h"
#include "runtime/defaults.h"
#include "runtime/features.h"
#include "runtime/fs/erofs.h"
#include "runtime/fs/idmap.h"
#include "runtime/fs/overlay.h"
#include "runtime/ns/net.h"
#include "runtime/ns/userns.h"
#include "runtime/process/exec_search.h"
#include "runtime/process/pidfd.h"
#include "runtime/process/sync.h"
#include "runtime/security/caps.h"

namespace hutch {
namespace {

// The cgroup namespace comes later, from the child itself (see run_sandbox_child).
constexpr uint64_t kNamespaces =
    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC;

// The absolute path of an existing file or directory, without symlinks, "." or "..".
Result<std::string> canonical_path(const std::string& path, std::string_view what) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr)
    return sys_error("realpath", std::string(what) + " " + path);
  return std::string(resolved);
}

// canonical_path of what must be a directory; `what` names it in the error.
Result<std::string> canonical_directory(const std::string& path, std::string_view what) {
  std::string resolved = HUTCH_TRY(canonical_path(path, what));
  struct stat st;
  if (stat(resolved.c_str(), &st) != 0) return sys_error("stat", resolved);
  if (!S_ISDIR(st.st_mode)) return plain_error(what, resolved + " is not a directory");
  return resolved;
}

// "CLONE_NEWUSER|CLONE_NEWNS|...": the clone3 flags named in its error.
std::string clone_flag_names(uint64_t flags) {
  constexpr std::pair<uint64_t, std::string_view> kNames[] = {
      {CLONE_NEWUSER, "CLONE_NEWUSER"}, {CLONE_NEWNS, "CLONE_NEWNS"},
      {CLONE_NEWPID, "CLONE_NEWPID"},   {CLONE_NEWNET, "CLONE_NEWNET"},
      {CLONE_NEWUTS, "CLONE_NEWUTS"},   {CLONE_NEWIPC, "CLONE_NEWIPC"},
      {CLONE_PIDFD, "CLONE_PIDFD"},     {CLONE_INTO_CGROUP, "CLONE_INTO_CGROUP"},
  };
  std::string names;
  for (const auto& [flag, name] : kNames) {
    if (!(flags & flag)) continue;
    if (!names.empty()) names += "|";
    names += name;
  }
  return names;
}

// Parent side of the handshake, part one: the id maps, so the child can go on as root of its
// namespace.
Result<void> write_maps(const Prepared& prepared, pid_t pid, int sync_fd) {
  HUTCH_TRY(write_id_maps(pid, prepared.spec.ids));
  SyncMessage ready{};
  ready.kind = SyncMessage::Kind::kMapsReady;
  ready.from = SyncMessage::From::kParent;
  if (int err = send_sync(sync_fd, ready))
    return sys_error("sendmsg", "maps ready to sandbox child", err);
  return {};
}

// upper_dir/{upper,work}, owned by the sandbox's root so that it owns its root directory (the
// overlay's root takes the upper dir's owner); upper_dir itself 0700: the sandbox's files are no
// other host user's business.
Result<void> prepare_upper_dir(const SandboxSpec& spec) {
  if (chmod(spec.upper_dir.c_str(), 0700) != 0) return sys_error("chmod", spec.upper_dir + " 0700");
  for (const char* name : {"upper", "work"}) {
    const std::string path = spec.upper_dir + "/" + name;
    if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) return sys_error("mkdir", path);
    if (chown(path.c_str(), spec.ids.host_base, spec.ids.host_base) != 0)
      return sys_error("chown", path + " to " + std::to_string(spec.ids.host_base));
  }
  return {};
}

// Part two, while the child sets up its staging area: the root overlay, mounted here (see
// runtime/fs/overlay.h), over lower trees idmapped through the child's user namespace (host
// root's files appear as the sandbox root's).
Result<void> send_root(Prepared& prepared, std::future<Result<UniqueFd>>& skeleton, pid_t pid,
                       Launched& launched) {
  auto userns = HUTCH_TRY(open_userns(pid));
  // Before kRoot, after which the child attaches them: the child inherited the volumes' fds at
  // clone3, and they name the same mounts as ours.
  for (const VolumeMount& volume : prepared.spec.volumes) {
    HUTCH_TRY(idmap_mount(volume.mount_fd, userns.get(), volume.read_only,
                          "the volume at " + volume.target));
  }
  std::vector<UniqueFd> trees;
  for (const std::string& layer : prepared.layers) {
    auto tree =
        HUTCH_TRY(layer.ends_with(".erofs")
                      ? open_erofs_tree(layer)
                      : open_idmapped_tree(layer, userns.get(), prepared.spec.ids.host_base));
    trees.push_back(std::move(tree));
  }
  if (prepared.prebuilt_skeleton) {
    trees.push_back(std::move(prepared.prebuilt_skeleton));
  } else if (skeleton.valid()) {
    auto built = HUTCH_TRY(skeleton.get());
    trees.push_back(std::move(built));
  }
  for (const std::string& lower : prepared.lowers) {
    auto tree = HUTCH_TRY(open_idmapped_tree(lower, userns.get(), prepared.spec.ids.host_base));
    trees.push_back(std::move(tree));
  }
  auto upper_fs =
      HUTCH_TRY(prepared.spec.upper_dir.empty()
                    ? make_upper_tmpfs(prepared.spec.disk_bytes, prepared.spec.ids.host_base)
                    : open_writable_tree(prepared.spec.upper_dir));
  // Opened before the overlay helper attaches the tree (and its namespace takes the attachment
  // away): a live sandbox's supervisor snapshots the upper dir through this fd.
  launched.upper.reset(openat(upper_fs.get(), "upper", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!launched.upper) return sys_error("openat", "upper (the sandbox's upper layer)");
  std::vector<int> fds;
  for (const UniqueFd& tree : trees) fds.push_back(tree.get());
  auto overlay = HUTCH_TRY(mount_overlay(fds, upper_fs.get()));
  launched.overlay_helper = std::move(overlay.helper);
  SyncMessage root{};
  root.kind = SyncMessage::Kind::kRoot;
  root.from = SyncMessage::From::kParent;
  const int overlay_fd = overlay.mount.get();
  if (int err = send_sync(launched.sync.get(), root, &overlay_fd, 1))
    return sys_error("sendmsg", "the root overlay to the sandbox child", err);
  return {};
}

// The trees of the binds whose sources the sandbox's ids cannot reach (BindFrom::kLauncher),
// opened here as host root unless the caller opened them (BindMount::tree_fd); the child inherits
// the fds through clone3 (MountOp::source_fd) and attaches them. Closed by the caller once the
// child has its copies.
Result<std::vector<UniqueFd>> open_launcher_trees(MountPlan& plan) {
  std::vector<UniqueFd> trees;
  for (MountOp& op : plan.ops) {
    if (op.kind != MountOp::Kind::kBind || op.from != BindFrom::kLauncher || op.source_fd >= 0)
      continue;
    UniqueFd tree(
        open_tree(AT_FDCWD, op.source.c_str(), OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC | AT_RECURSIVE));
    if (!tree) return sys_error("open_tree", op.source + " (OPEN_TREE_CLONE)");
    op.source_fd = tree.get();
    trees.push_back(std::move(tree));
  }
  return trees;
}

// Limits from the spec (defaults for what it leaves unset), in a fresh cgroup per sandbox.
// Leftovers of crashed runs are removed first (unless the caller sweeps on its own schedule), so
// they cannot pile up.
Result<SandboxCgroup> create_sandbox_cgroup(const SandboxSpec& spec) {
  auto layout = HUTCH_TRY(read_cgroup_layout());
  auto ram = HUTCH_TRY(host_ram_bytes());
  auto plan =
      HUTCH_TRY(plan_cgroups(layout, with_defaults(spec.limits, default_cgroup_limits(ram))));
  plan.parent = spec.cgroup_parent;
  if (spec.sweep_stale_cgroups) {
    HUTCH_TRY(remove_stale_cgroups(layout, cgroup_owner_alive, spec.cgroup_parent));
  }
  // Atomic: hutchd's worker threads create sandboxes concurrently.
  static std::atomic<uint64_t> sequence = 0;
  auto id = HUTCH_TRY(make_sandbox_cgroup_id(sequence.fetch_add(1, std::memory_order_relaxed)));
  return SandboxCgroup::create(plan, id);
}

}  // namespace

SandboxProcess::~SandboxProcess() {
  if (reaped_ || !pidfd_) return;
  kill();
  siginfo_t info;
  while (waitid(P_PIDFD, pidfd_.get(), &info, WEXITED) != 0 && errno == EINTR) {
  }
}

void SandboxProcess::kill() const { pidfd_signal(pidfd_.get(), SIGKILL); }

Result<siginfo_t> SandboxProcess::reap(rusage* usage) {
  siginfo_t info{};
  while (syscall(SYS_waitid, P_PIDFD, pidfd_.get(), &info, WEXITED, usage) != 0) {
    if (errno != EINTR) return sys_error("waitid", "P_PIDFD sandbox init");
  }
  reaped_ = true;
  return info;
}

namespace {

// Older kernels lack mechanisms a guarantee rests on (docs/design.md#kernels): refused, never
// weakened. Read once per process.
Result<void> check_kernel() {
  static const std::string release = [] {
    utsname host{};
    uname(&host);
    return std::string(host.release);
  }();
  const auto [major, minor] = kernel_version(release);
  if (major > kMinimumKernel[0] || (major == kMinimumKernel[0] && minor >= kMinimumKernel[1]))
    return {};
  return plain_error(
      "kernel", "Linux " + release + " is older than " + std::to_string(kMinimumKernel[0]) + "." +
                    std::to_string(kMinimumKernel[1]) +
                    ", the oldest hutch supports (`hutch info` lists what it lacks)");
}

}  // namespace

Result<void> prepare(const SandboxSpec& input, Prepared& out, bool needs_command) {
  HUTCH_TRY(check_kernel());
  out.spec = input;
  SandboxSpec& spec = out.spec;
  // Everything is validated before the first host change (prepare_upper_dir, at the end): a
  // refused spec leaves the host as it was.
  if (needs_command && (spec.argv.empty() || spec.argv[0].empty()))
    return plain_error("run", "no command given");
  HUTCH_TRY(validate_id_map(spec.ids));
  if (spec.uid >= spec.ids.count || spec.gid >= spec.ids.count) {
    return plain_error("id map", "uid/gid " + std::to_string(spec.uid) + "/" +
                                     std::to_string(spec.gid) + " is outside the mapped range 0.." +
                                     std::to_string(spec.ids.count - 1));
  }
  HUTCH_TRY(check_hostname(spec.hostname));
  for (const std::string& entry : spec.env) HUTCH_TRY(check_env_entry(entry));
  out.host_rootfs = spec.lower_dirs.empty();
  if (out.host_rootfs && !out.prebuilt_skeleton) {
    // Planned before clone3: afterwards every page the parent writes is a copy-on-write fault.
    out.skeleton = HUTCH_TRY(plan_this_host_skeleton());
  }
  if (out.host_rootfs) {
    out.lowers = {"/"};
  } else {
    for (const std::string& dir : spec.lower_dirs)
      out.lowers.push_back(HUTCH_TRY(canonical_directory(dir, "rootfs")));
  }
  for (const std::string& layer : spec.layers) {
    out.layers.push_back(
        HUTCH_TRY(canonical_path(layer, layer.ends_with(".erofs") ? "layer image" : "layer")));
  }
  const size_t lower_count = out.layers.size() + out.lowers.size() + (out.host_rootfs ? 1 : 0);
  if (lower_count > kMaxPassedFds)
    return plain_error("rootfs", "too many lower layers (" + std::to_string(lower_count) +
                                     "; at most " + std::to_string(kMaxPassedFds) + ")");
  if (!spec.upper_dir.empty())
    spec.upper_dir = HUTCH_TRY(canonical_directory(spec.upper_dir, "upper dir"));
  for (BindMount& bind : spec.binds) {
    if (bind.from != BindFrom::kSandbox)
      bind.source = HUTCH_TRY(canonical_path(bind.source, "bind source"));
  }
  out.mounts = HUTCH_TRY(build_mount_plan(spec));

  std::string_view path_var = kDefaultSearchPath;
  for (const std::string& kv : spec.env) {
    if (kv.starts_with("PATH=")) path_var = std::string_view(kv).substr(5);
  }
  out.path_dirs = split_search_path(path_var);

  ChildPlan& child = out.child;
  // The parent's choice, so that the child's path has no decision of its own: a live sandbox
  // (no command) serves execs.
  child.mode = needs_command ? ChildPlan::Mode::kOneShot : ChildPlan::Mode::kLive;
  child.mounts = &out.mounts;
  child.seccomp = &spec.seccomp;
  child.hostname = spec.hostname.c_str();
  child.loopback_up = spec.net == NetMode::kLoopback;
  // A ready network namespace is only for a sandbox that wants lo up.
  if (spec.net == NetMode::kNone) out.prebuilt_netns.reset();
  child.uid = spec.uid;
  child.gid = spec.gid;
  child.workdir = spec.workdir.c_str();
  child.last_cap = last_capability();
  child.capabilities = spec.capabilities;
  for (std::string& arg : spec.argv) child.argv.push_back(arg.data());
  child.argv.push_back(nullptr);
  for (std::string& kv : spec.env) child.envp.push_back(kv.data());
  child.envp.push_back(nullptr);
  for (const std::string& dir : out.path_dirs) child.path_dirs.push_back(dir.c_str());
  child.path_dirs.push_back(nullptr);
  if (!spec.upper_dir.empty()) HUTCH_TRY(prepare_upper_dir(spec));
  return {};
}

Result<Launched> launch_sandbox(Prepared& prepared, bool skeleton_on_thread) {
  if ((prepared.child.mode == ChildPlan::Mode::kLive) != (prepared.child.exec_listen_fd >= 0))
    return plain_error("launch", "a live sandbox needs an exec listener, and only a live one");
  Launched launched;
  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return sys_error("socketpair", "AF_UNIX SOCK_SEQPACKET");
  }
  launched.sync.reset(pair[0]);
  UniqueFd child_end(pair[1]);
  prepared.child.sync_fd = child_end.get();

  // The skeleton's ~150 tmpfs entries are made on another thread while this one creates the
  // cgroups and the namespaces (clone3 copies only the calling thread). Otherwise they are made
  // after clone3, while the child sets up its staging area. Planning it stays in prepare():
  // after clone3 its allocations would fault.
  std::future<Result<UniqueFd>> skeleton;
  if (prepared.host_rootfs && !prepared.prebuilt_skeleton) {
    skeleton =
        std::async(skeleton_on_thread ? std::launch::async : std::launch::deferred,
                   build_skeleton_mount, std::cref(prepared.skeleton), prepared.spec.ids.host_base);
  }

  // The sandbox's cgroups exist, limits written, before its first process: clone3 places the
  // child straight into the cgroup2 dir, and v1 hierarchies get it before it may run.
  if (prepared.spec.cgroup) {
    auto created = HUTCH_TRY(create_sandbox_cgroup(prepared.spec));
    launched.cgroup.emplace(std::move(created));
  }

  std::vector<UniqueFd> v1_task_files;
  if (launched.cgroup) {
    auto opened = HUTCH_TRY(launched.cgroup->open_v1_task_files());
    v1_task_files = std::move(opened);
    prepared.child.v1_task_fds.clear();
    for (const UniqueFd& fd : v1_task_files) prepared.child.v1_task_fds.push_back(fd.get());
  }

  std::vector<UniqueFd> launcher_trees = HUTCH_TRY(open_launcher_trees(prepared.mounts));

  // Made here, in the caller's user namespace: CLONE_NEWNET in clone3 would make the namespace
  // the sandbox's user namespace owns, whose root could then undo the engine's rules.
  if (prepared.spec.net == NetMode::kHostOwned && !prepared.prebuilt_netns) {
    auto made = HUTCH_TRY(make_loopback_netns());
    prepared.prebuilt_netns = std::move(made);
  }
  int pidfd = -1;
  clone_args args{};
  args.flags = kNamespaces | CLONE_PIDFD;
  if (prepared.prebuilt_netns) {
    if (setns(prepared.prebuilt_netns.get(), CLONE_NEWNET) != 0)
      return sys_error("setns", "the sandbox's network namespace (made ahead)");
    prepared.prebuilt_netns.reset();
    args.flags &= ~static_cast<uint64_t>(CLONE_NEWNET);
    prepared.child.loopback_up = false;  // up since it was made
  }
  if (launched.cgroup && launched.cgroup->v2_dir_fd() >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(launched.cgroup->v2_dir_fd());
  }
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  long pid = syscall(SYS_clone3, &args, sizeof args);
  if (pid < 0) return sys_error("clone3", clone_flag_names(args.flags));
  if (pid == 0) {
    launched.sync.reset();
    run_sandbox_child(prepared.child);
  }
  launched.init.emplace(static_cast<pid_t>(pid), pidfd);
  const pid_t init = launched.init->pid();
  child_end.reset();
  v1_task_files.clear();   // the child has its own copies and joins its v1 cgroups through them
  launcher_trees.clear();  // likewise: the child attaches its copies (a tree dies with its last fd)

  HUTCH_TRY(write_maps(prepared, init, launched.sync.get()));
  HUTCH_TRY(send_root(prepared, skeleton, init, launched));

  return launched;
}

}  // namespace hutch
