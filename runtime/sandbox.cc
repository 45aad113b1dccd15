#include "runtime/sandbox.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <future>

#include "runtime/cgroup/layout.h"
#include "runtime/cgroup/sandbox_cgroup.h"
#include "runtime/cgroup/stale.h"
#include "runtime/fs/host_rootfs.h"
#include "runtime/fs/idmap.h"
#include "runtime/fs/mount_plan.h"
#include "runtime/fs/paths.h"
#include "runtime/ns/userns.h"
#include "runtime/process/child.h"
#include "runtime/process/pidfd.h"
#include "runtime/process/sync.h"
#include "runtime/security/caps.h"
#include "runtime/unique_fd.h"

namespace hutch {
namespace {

// The cgroup namespace comes later, from the child itself (see run_sandbox_child).
constexpr uint64_t kNamespaces =
    CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWUTS | CLONE_NEWIPC;
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// The sandbox's init, seen from the parent. Until reaped, destruction kills it, and with it
// (pid namespace teardown) every process of the sandbox.
class SandboxProcess {
 public:
  SandboxProcess(pid_t pid, int pidfd) : pid_(pid), pidfd_(pidfd) {}
  SandboxProcess(const SandboxProcess&) = delete;
  SandboxProcess& operator=(const SandboxProcess&) = delete;
  ~SandboxProcess() {
    if (reaped_) return;
    kill();
    siginfo_t info;
    while (waitid(P_PIDFD, pidfd_.get(), &info, WEXITED) != 0 && errno == EINTR) {
    }
  }

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_.get(); }
  void kill() const { pidfd_signal(pidfd_.get(), SIGKILL); }

  // Reaps init (which reaped the workload) along with the resource usage of both.
  Result<siginfo_t> reap(rusage* usage) {
    siginfo_t info{};
    while (syscall(SYS_waitid, P_PIDFD, pidfd_.get(), &info, WEXITED, usage) != 0) {
      if (errno != EINTR) return sys_error("waitid", "P_PIDFD sandbox init");
    }
    reaped_ = true;
    return info;
  }

 private:
  pid_t pid_;
  UniqueFd pidfd_;
  bool reaped_ = false;
};

// Blocks the forwarded signals for the run and reads them from a signalfd; restores on exit.
class ForwardedSignals {
 public:
  ForwardedSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kForwardedSignals) sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, &saved_);
    fd_.reset(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  }
  ForwardedSignals(const ForwardedSignals&) = delete;
  ForwardedSignals& operator=(const ForwardedSignals&) = delete;
  ~ForwardedSignals() { sigprocmask(SIG_SETMASK, &saved_, nullptr); }
  int fd() const { return fd_.get(); }

 private:
  sigset_t saved_;
  UniqueFd fd_;
};

int64_t now_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000 + ts.tv_nsec / 1000;
}

std::chrono::microseconds to_us(const timeval& tv) {
  return std::chrono::microseconds(int64_t{tv.tv_sec} * 1'000'000 + tv.tv_usec);
}

Result<std::string> canonical_dir(const std::string& path, const char* what) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr)
    return sys_error("realpath", std::string(what) + " " + path);
  struct stat st;
  if (stat(resolved, &st) != 0) return sys_error("stat", resolved);
  if (std::strcmp(what, "rootfs") == 0 && !S_ISDIR(st.st_mode)) {
    return plain_error("rootfs", std::string(resolved) + " is not a directory");
  }
  return std::string(resolved);
}

Error error_from_child(const ChildError& error) {
  return Error{error.step, error.detail, error.err};
}

struct Prepared {
  SandboxSpec spec;  // with canonical paths
  bool host_rootfs = false;
  std::vector<SkeletonEntry> skeleton;  // the host rootfs's skeleton layer, topmost
  std::vector<std::string> lowers;      // host directories, below the skeleton
  MountPlan mounts;
  ChildPlan child;
  std::vector<std::string> path_dirs;
};

Result<void> prepare(const SandboxSpec& input, Prepared& out) {
  out.spec = input;
  SandboxSpec& spec = out.spec;
  if (spec.argv.empty() || spec.argv[0].empty()) return plain_error("run", "no command given");
  if (auto r = validate_id_map(spec.ids); !r) return r;
  if (spec.uid >= spec.ids.count || spec.gid >= spec.ids.count) {
    return plain_error("id map", "uid/gid " + std::to_string(spec.uid) + "/" +
                                     std::to_string(spec.gid) + " is outside the mapped range 0.." +
                                     std::to_string(spec.ids.count - 1));
  }
  out.host_rootfs = spec.lower_dirs.empty();
  if (out.host_rootfs) {
    // Planned before clone3: afterwards every page the parent writes is a copy-on-write fault.
    auto entries = plan_this_host_skeleton();
    if (!entries) return std::unexpected(entries.error());
    out.skeleton = std::move(*entries);
    out.lowers = {"/"};
  } else {
    for (const std::string& dir : spec.lower_dirs) {
      auto canonical = canonical_dir(dir, "rootfs");
      if (!canonical) return std::unexpected(canonical.error());
      out.lowers.push_back(*canonical);
    }
  }
  const size_t lower_count = out.lowers.size() + (out.host_rootfs ? 1 : 0);
  if (lower_count > kMaxPassedFds) return plain_error("rootfs", "too many lower layers");
  for (BindMount& bind : spec.binds) {
    auto canonical = canonical_dir(bind.source, "bind source");
    if (!canonical) return std::unexpected(canonical.error());
    bind.source = *canonical;
  }
  auto mounts = build_mount_plan(spec, lower_count);
  if (!mounts) return std::unexpected(mounts.error());
  out.mounts = std::move(*mounts);

  std::string path_var = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";
  for (const std::string& kv : spec.env) {
    if (kv.starts_with("PATH=")) path_var = kv.substr(5);
  }
  for (size_t start = 0; start <= path_var.size();) {
    size_t end = path_var.find(':', start);
    if (end == std::string::npos) end = path_var.size();
    std::string dir = path_var.substr(start, end - start);
    out.path_dirs.push_back(dir.empty() ? "." : dir);
    start = end + 1;
  }

  ChildPlan& child = out.child;
  child.mounts = &out.mounts;
  child.seccomp = &spec.seccomp;
  child.hostname = spec.hostname.c_str();
  child.loopback_up = spec.net == NetMode::kLoopback;
  child.uid = spec.uid;
  child.gid = spec.gid;
  child.workdir = spec.workdir.c_str();
  child.last_cap = last_capability();
  for (std::string& arg : spec.argv) child.argv.push_back(arg.data());
  child.argv.push_back(nullptr);
  for (std::string& kv : spec.env) child.envp.push_back(kv.data());
  child.envp.push_back(nullptr);
  for (const std::string& dir : out.path_dirs) child.path_dirs.push_back(dir.c_str());
  return {};
}

// Parent side of the handshake, part one: the id maps, so the child can go on as root of its
// namespace.
Result<void> write_maps(const Prepared& prepared, pid_t pid, int sync_fd) {
  if (auto r = write_id_maps(pid, prepared.spec.ids); !r) return r;
  SyncMessage ready{};
  ready.kind = SyncMessage::Kind::kMapsReady;
  ready.from = SyncMessage::From::kParent;
  if (int err = send_sync(sync_fd, ready))
    return sys_error("sendmsg", "maps ready to sandbox child", err);
  return {};
}

// Part two, while the child sets up its staging area: the lower trees. Idmapped through the
// child's user namespace, host root's files appear as the sandbox root's.
Result<void> send_layers(const Prepared& prepared, std::future<Result<UniqueFd>>& skeleton,
                         pid_t pid, int sync_fd) {
  auto userns = open_userns(pid);
  if (!userns) return std::unexpected(userns.error());
  std::vector<UniqueFd> trees;
  std::vector<int> fds;
  if (skeleton.valid()) {
    auto built = skeleton.get();
    if (!built) return std::unexpected(built.error());
    fds.push_back(built->get());
    trees.push_back(std::move(*built));
  }
  for (const std::string& lower : prepared.lowers) {
    auto tree = open_idmapped_tree(lower, userns->get(), prepared.spec.ids.host_base);
    if (!tree) return std::unexpected(tree.error());
    fds.push_back(tree->get());
    trees.push_back(std::move(*tree));
  }
  SyncMessage layers{};
  layers.kind = SyncMessage::Kind::kLayers;
  layers.from = SyncMessage::From::kParent;
  if (int err = send_sync(sync_fd, layers, fds.data(), static_cast<int>(fds.size()))) {
    return sys_error("sendmsg", "lower layers to sandbox child", err);
  }
  return {};
}

// Limits from the spec (defaults for what it leaves unset), in a fresh cgroup per sandbox.
// Leftovers of crashed runs are removed first, so they cannot pile up.
Result<SandboxCgroup> create_sandbox_cgroup(const SandboxSpec& spec) {
  auto layout = read_cgroup_layout();
  if (!layout) return std::unexpected(layout.error());
  auto ram = host_ram_bytes();
  if (!ram) return std::unexpected(ram.error());
  auto plan = plan_cgroups(*layout, with_defaults(spec.limits, default_cgroup_limits(*ram)));
  if (!plan) return std::unexpected(plan.error());
  plan->parent = spec.cgroup_parent;
  if (auto stale = remove_stale_cgroups(*layout, cgroup_owner_alive, spec.cgroup_parent); !stale) {
    return std::unexpected(stale.error());
  }
  static uint64_t sequence = 0;
  auto id = make_sandbox_cgroup_id(sequence++);
  if (!id) return std::unexpected(id.error());
  return SandboxCgroup::create(*plan, *id);
}

}  // namespace

Result<RunResult> run_sandbox(const SandboxSpec& input) {
  const int64_t started = now_us();
  Prepared prepared;
  if (auto r = prepare(input, prepared); !r) return std::unexpected(r.error());

  int pair[2];
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, pair) != 0) {
    return sys_error("socketpair", "AF_UNIX SOCK_SEQPACKET");
  }
  UniqueFd sync(pair[0]);
  UniqueFd child_end(pair[1]);
  prepared.child.sync_fd = child_end.get();

  // The skeleton's ~150 tmpfs entries are made on another thread while this one creates the
  // cgroups and the namespaces (clone3 copies only the calling thread; the child allocates
  // nothing). Planning it stays in prepare(): after clone3 its allocations would fault.
  std::future<Result<UniqueFd>> skeleton;
  if (prepared.host_rootfs) {
    skeleton = std::async(std::launch::async, build_skeleton_mount, std::cref(prepared.skeleton),
                          prepared.spec.ids.host_base);
  }

  // The sandbox's cgroups exist, limits written, before its first process: clone3 places the
  // child straight into the cgroup2 dir, and v1 hierarchies get it before it may run.
  std::optional<SandboxCgroup> cgroup;
  if (prepared.spec.cgroup) {
    auto created = create_sandbox_cgroup(prepared.spec);
    if (!created) return std::unexpected(created.error());
    cgroup.emplace(std::move(*created));
  }

  ForwardedSignals signals;
  if (signals.fd() < 0) return sys_error("signalfd", "SIGINT SIGTERM SIGHUP SIGQUIT");

  int pidfd = -1;
  clone_args args{};
  args.flags = kNamespaces | CLONE_PIDFD;
  if (cgroup && cgroup->v2_dir_fd() >= 0) {
    args.flags |= CLONE_INTO_CGROUP;
    args.cgroup = static_cast<uint64_t>(cgroup->v2_dir_fd());
  }
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd);
  args.exit_signal = SIGCHLD;
  long pid = syscall(SYS_clone3, &args, sizeof args);
  if (pid < 0) return sys_error("clone3", "CLONE_NEWUSER|NEWNS|NEWPID|NEWNET|NEWUTS|NEWIPC");
  if (pid == 0) {
    sync.reset();
    run_sandbox_child(prepared.child);
  }
  SandboxProcess init(static_cast<pid_t>(pid), pidfd);
  child_end.reset();

  if (cgroup) {
    // v1 has no CLONE_INTO_CGROUP: the child stays blocked on the sync socket until attached.
    // On hybrid hosts this first v1 migration waits for an RCU grace period (several ms; the
    // kernel's cgroup_threadgroup_rwsem), the one cost pure cgroup2 hosts do not pay.
    if (auto r = cgroup->attach(init.pid()); !r) return std::unexpected(r.error());
  }
  if (auto r = write_maps(prepared, init.pid(), sync.get()); !r) return std::unexpected(r.error());
  if (auto r = send_layers(prepared, skeleton, init.pid(), sync.get()); !r)
    return std::unexpected(r.error());

  RunResult result;
  std::optional<Error> setup_failure;
  bool workload_ended = false;
  auto take_message = [&](const SyncMessage& message) {
    if (message.kind == SyncMessage::Kind::kWorkloadExit) {
      workload_ended = true;
      result.exit_code = message.exit_code;
      result.term_signal = message.term_signal;
    } else if (message.kind == SyncMessage::Kind::kFailure && !setup_failure &&
               !result.start_failure) {
      if (message.from == SyncMessage::From::kWorkload &&
          std::strcmp(message.error.step, "execve") == 0) {
        result.start_failure = std::string(message.error.step) + "(" + message.error.detail + ")";
        result.start_errno = message.error.err;
        result.start_failed_at_exec = true;
      } else {
        setup_failure = error_from_child(message.error);
      }
    }
  };

  const int64_t deadline =
      input.timeout
          ? started + std::chrono::duration_cast<std::chrono::microseconds>(*input.timeout).count()
          : INT64_MAX;
  bool sync_open = true;
  for (;;) {
    pollfd fds[3] = {{init.pidfd(), POLLIN, 0},
                     {signals.fd(), POLLIN, 0},
                     {sync_open ? sync.get() : -1, POLLIN, 0}};
    int timeout_ms = -1;
    if (deadline != INT64_MAX && !result.timed_out) {
      timeout_ms = static_cast<int>(std::max<int64_t>(0, (deadline - now_us() + 999) / 1000));
    }
    int ready = poll(fds, 3, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return sys_error("poll", "sandbox events");
    }
    if (ready == 0) {
      result.timed_out = true;
      init.kill();  // pid 1 dying takes every process of the namespace with it
      continue;
    }
    if (fds[2].revents != 0) {
      SyncMessage message{};
      long n = recv_sync(sync.get(), &message);
      if (n > 0)
        take_message(message);
      else
        sync_open = false;
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(signals.fd(), &info, sizeof info) == sizeof info) {
        pidfd_signal(init.pidfd(), static_cast<int>(info.ssi_signo));
      }
    }
    if (fds[0].revents & POLLIN) break;
  }

  rusage usage{};
  auto reaped = init.reap(&usage);
  if (!reaped) return std::unexpected(reaped.error());
  // Messages sent just before init exited.
  for (SyncMessage message{};
       sync_open && recv_sync(sync.get(), &message, nullptr, nullptr, true) > 0;) {
    take_message(message);
  }
  if (setup_failure) return std::unexpected(*setup_failure);
  if (!workload_ended && !result.timed_out) {
    // Init died without reporting: a kill from outside or a runtime bug; report its status.
    if (reaped->si_code == CLD_EXITED)
      result.exit_code = reaped->si_status;
    else
      result.term_signal = reaped->si_status;
  }
  result.duration = std::chrono::microseconds(now_us() - started);
  result.cpu_user = to_us(usage.ru_utime);
  result.cpu_system = to_us(usage.ru_stime);
  result.peak_memory_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  if (!cgroup) return result;
  auto stats = cgroup->stats();
  if (!stats) return std::unexpected(stats.error());
  result.oom_killed = stats->oom_kills.value_or(0) > 0;
  if (stats->cpu_usage_usec) result.cpu_total = std::chrono::microseconds(*stats->cpu_usage_usec);
  if (stats->memory_peak_bytes) result.peak_memory_bytes = *stats->memory_peak_bytes;
  result.peak_pids = stats->pids_peak;
  if (auto destroyed = cgroup->destroy(); !destroyed) return std::unexpected(destroyed.error());
  return result;
}

}  // namespace hutch
