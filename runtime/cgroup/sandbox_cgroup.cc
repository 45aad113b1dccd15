#include "runtime/cgroup/sandbox_cgroup.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <utility>

#include "runtime/cgroup/kill.h"
#include "runtime/cgroup/v1.h"
#include "runtime/cgroup/v2.h"

namespace hutch {
namespace {

using std::chrono::milliseconds;

// Generous for a slow (emulated) machine; reached only when something is stuck.
constexpr milliseconds kFreezeTimeout{5000};
constexpr milliseconds kKillTimeout{10000};
constexpr milliseconds kRmdirPatience{300};

bool valid_sandbox_id(std::string_view id) {
  if (id.empty() || id.size() > 200 || id == "." || id == "..") return false;
  return std::all_of(id.begin(), id.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_' || c == '.';
  });
}

bool has(const std::vector<std::string>& list, std::string_view item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

}  // namespace

Result<SandboxCgroup> SandboxCgroup::create(const CgroupPlan& plan, std::string_view sandbox_id) {
  if (!valid_sandbox_id(sandbox_id)) {
    return plain_error("create cgroup", "invalid sandbox id '" + std::string(sandbox_id) +
                                            "' (letters, digits, '-', '_', '.')");
  }
  SandboxCgroup cgroup;  // on any error below, its destructor removes what was created
  cgroup.id_ = sandbox_id;
  for (const CgroupDirPlan& dir_plan : plan.dirs) {
    HUTCH_TRY(cgroup.add_dir(plan, dir_plan));
  }
  // Limits before any process enters: nothing ever runs unlimited.
  for (const LimitEnforcement& enforcement : plan.enforcement) {
    const Dir* dir = cgroup.in_hierarchy(enforcement.hierarchy);
    if (dir == nullptr) {
      return plain_error(
          "create cgroup",
          "plan has no dir for the " + std::string(limit_name(enforcement.limit)) + " limit");
    }
    HUTCH_TRY(enforcement.hierarchy.version == CgroupVersion::kV2
                  ? write_v2_limit(dir->self, enforcement.limit, plan.limits)
                  : write_v1_limit(dir->self, enforcement.limit, plan.limits));
  }
  return cgroup;
}

Result<void> SandboxCgroup::add_dir(const CgroupPlan& plan, const CgroupDirPlan& dir_plan) {
  const bool v2 = dir_plan.hierarchy.version == CgroupVersion::kV2;
  CgroupDir root = HUTCH_TRY(open_cgroup_dir(dir_plan.hierarchy.mount_point));
  // The one write to a cgroup hutch did not create (see CgroupPlan::v2_root_enable): only the
  // controllers this sandbox needs, and only if the root has not enabled them already.
  if (v2 && !plan.v2_enable.empty()) {
    HUTCH_TRY(enable_v2_controllers(root, plan.v2_enable));
  }
  HUTCH_TRY(check_cgroup_parent(plan.parent));
  // Retried: a sandbox ending meanwhile removes `hutch` when it was the last one (destroy()).
  constexpr int kAttempts = 8;
  for (int attempt = 0;; ++attempt) {
    HUTCH_TRY(make_cgroup_subdir(root, plan.parent, /*may_exist=*/true));
    Result<CgroupDir> parent = open_cgroup_subdir(root, plan.parent);
    if (!parent) {
      if (parent.error().err == ENOENT && attempt + 1 < kAttempts) continue;
      return std::unexpected(parent.error());
    }
    // `hutch` holds no processes itself, so cgroup2's no-internal-process rule allows this.
    if (v2 && !plan.v2_enable.empty()) {
      HUTCH_TRY(enable_v2_controllers(*parent, plan.v2_enable));
    }
    Result<void> made = make_cgroup_subdir(*parent, id_, /*may_exist=*/false);
    if (!made) {
      if (made.error().err == ENOENT && attempt + 1 < kAttempts) continue;
      return made;
    }
    Result<CgroupDir> self = open_cgroup_subdir(*parent, id_);
    if (!self) {
      // Created but unopenable: remove it now, as no Dir will remember it.
      (void)remove_cgroup_tree(*parent, id_, kRmdirPatience);
      return std::unexpected(self.error());
    }
    dirs_.push_back(
        {dir_plan.hierarchy, dir_plan.controllers, std::move(*parent), std::move(*self)});
    return {};
  }
}

SandboxCgroup::SandboxCgroup(SandboxCgroup&& other) noexcept
    : id_(std::move(other.id_)),
      dirs_(std::exchange(other.dirs_, {})),
      sampled_memory_peak_(other.sampled_memory_peak_),
      sampled_pids_peak_(other.sampled_pids_peak_) {}

SandboxCgroup& SandboxCgroup::operator=(SandboxCgroup&& other) noexcept {
  if (this != &other) {
    (void)destroy();
    id_ = std::move(other.id_);
    dirs_ = std::exchange(other.dirs_, {});
    sampled_memory_peak_ = other.sampled_memory_peak_;
    sampled_pids_peak_ = other.sampled_pids_peak_;
  }
  return *this;
}

SandboxCgroup::~SandboxCgroup() { (void)destroy(); }

const SandboxCgroup::Dir* SandboxCgroup::v2() const {
  for (const Dir& dir : dirs_) {
    if (dir.hierarchy.version == CgroupVersion::kV2) return &dir;
  }
  return nullptr;
}

const SandboxCgroup::Dir* SandboxCgroup::with_controller(std::string_view controller) const {
  for (const Dir& dir : dirs_) {
    if (has(dir.controllers, controller)) return &dir;
  }
  return nullptr;
}

const SandboxCgroup::Dir* SandboxCgroup::in_hierarchy(const CgroupHierarchy& hierarchy) const {
  for (const Dir& dir : dirs_) {
    if (dir.hierarchy.mount_point == hierarchy.mount_point) return &dir;
  }
  return nullptr;
}

int SandboxCgroup::v2_dir_fd() const {
  const Dir* dir = v2();
  return dir == nullptr ? -1 : dir->self.fd.get();
}

Result<void> SandboxCgroup::attach(pid_t pid) {
  if (dirs_.empty()) {
    return plain_error("attach to cgroup", "sandbox cgroup " + id_ + " is destroyed");
  }
  for (const Dir& dir : dirs_) {
    // cgroup2 too, unless the process is already in the sandbox's cgroup2 tree (placed by
    // CLONE_INTO_CGROUP, maybe into a sub-cgroup that must keep it): kill and freeze act on
    // cgroup2, so they must reach it.
    if (dir.hierarchy.version == CgroupVersion::kV2) {
      bool placed = HUTCH_TRY(in_v2_tree(dir, pid));
      if (placed) continue;
    }
    HUTCH_TRY(write_cgroup_file(dir.self, "cgroup.procs", std::to_string(pid)));
  }
  return {};
}

Result<std::vector<UniqueFd>> SandboxCgroup::open_v1_task_files() const {
  if (dirs_.empty()) {
    return plain_error("open cgroup tasks", "sandbox cgroup " + id_ + " is destroyed");
  }
  std::vector<UniqueFd> files;
  for (const Dir& dir : dirs_) {
    if (dir.hierarchy.version != CgroupVersion::kV1) continue;
    UniqueFd fd(openat(dir.self.fd.get(), "tasks", O_WRONLY | O_NOFOLLOW | O_CLOEXEC));
    if (!fd) return sys_error("open", dir.self.path + "/tasks");
    files.push_back(std::move(fd));
  }
  return files;
}

Result<bool> SandboxCgroup::in_v2_tree(const Dir& dir, pid_t pid) {
  Result<std::vector<CgroupMembership>> memberships =
      read_proc_cgroups("/proc/" + std::to_string(pid) + "/cgroup");
  if (!memberships) return std::unexpected(memberships.error());
  // The path as /proc/<pid>/cgroup shows it: relative to the mount (both seen from our cgroup
  // namespace).
  const std::string own = dir.self.path.substr(dir.hierarchy.mount_point.size());
  const std::string path = cgroup_path_in(*memberships, true, {});
  return path == own || path.starts_with(own + "/");
}

Result<void> SandboxCgroup::freeze() {
  if (const Dir* dir = v2()) return set_v2_frozen(dir->self, true, kFreezeTimeout);
  if (const Dir* dir = with_controller("freezer")) {
    return set_v1_frozen(dir->self, true, kFreezeTimeout);
  }
  return plain_error("freeze cgroup", "no cgroup2 and no v1 freezer hierarchy on this host");
}

Result<void> SandboxCgroup::thaw() {
  if (const Dir* dir = v2()) return set_v2_frozen(dir->self, false, kFreezeTimeout);
  if (const Dir* dir = with_controller("freezer")) {
    return set_v1_frozen(dir->self, false, kFreezeTimeout);
  }
  return plain_error("thaw cgroup", "no cgroup2 and no v1 freezer hierarchy on this host");
}

Result<void> SandboxCgroup::kill_all() {
  if (dirs_.empty()) return {};
  CgroupKillTarget target;
  if (const Dir* dir = v2()) target.v2 = &dir->self;
  if (const Dir* dir = with_controller("freezer")) target.v1_freezer = &dir->self;
  for (const Dir& dir : dirs_) target.dirs.push_back(&dir.self);
  return kill_cgroup_processes(target, kKillTimeout);
}

Result<CgroupStats> SandboxCgroup::stats() {
  if (dirs_.empty()) return plain_error("cgroup stats", "sandbox cgroup " + id_ + " is destroyed");
  CgroupStats stats;
  Result<void> read;
  if (const Dir* dir = v2()) {
    read = read_v2_cpu_stats(dir->self, stats);
  } else if (const Dir* dir = with_controller("cpuacct")) {
    read = read_v1_cpuacct_stats(dir->self, stats);
  }
  if (!read) return std::unexpected(read.error());
  if (const Dir* dir = with_controller("memory")) {
    read = dir->hierarchy.version == CgroupVersion::kV2 ? read_v2_memory_stats(dir->self, stats)
                                                        : read_v1_memory_stats(dir->self, stats);
    if (!read) return std::unexpected(read.error());
  }
  if (const Dir* dir = with_controller("pids")) {
    if (read = read_pids_stats(dir->self, stats); !read) return std::unexpected(read.error());
  }
  // Where the kernel reports only current values, the peak is the highest value seen so far.
  if (stats.memory_peak_bytes) {
    sampled_memory_peak_ = std::max(sampled_memory_peak_, *stats.memory_peak_bytes);
    stats.memory_peak_bytes = sampled_memory_peak_;
  }
  if (stats.pids_peak) {
    sampled_pids_peak_ = std::max(sampled_pids_peak_, *stats.pids_peak);
    stats.pids_peak = sampled_pids_peak_;
  }
  return stats;
}

Result<UniqueFd> SandboxCgroup::open_oom_counter() const {
  const Dir* dir = with_controller("memory");
  if (dir == nullptr) return UniqueFd();
  const char* name =
      dir->hierarchy.version == CgroupVersion::kV2 ? "memory.events" : "memory.oom_control";
  UniqueFd fd(openat(dir->self.fd.get(), name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC));
  if (!fd) return sys_error("open", dir->self.path + "/" + name);
  return fd;
}

Result<std::optional<uint64_t>> read_oom_counter(int fd) {
  char text[512];
  ssize_t n;
  while ((n = pread(fd, text, sizeof text, 0)) < 0 && errno == EINTR) {
  }
  if (n < 0) return sys_error("pread", "oom counter");
  return find_cgroup_key(std::string_view(text, static_cast<size_t>(n)), "oom_kill");
}

Result<void> SandboxCgroup::destroy() {
  if (dirs_.empty()) return {};
  // Kill first: a populated cgroup cannot be removed.
  HUTCH_TRY(kill_all());
  Result<void> outcome;
  std::vector<Dir> left;
  for (Dir& dir : dirs_) {
    Result<void> removed = remove_cgroup_tree(dir.parent, id_, kRmdirPatience);
    if (!removed) {
      if (outcome) outcome = removed;
      left.push_back(std::move(dir));
      continue;
    }
    // The shared parent goes too once empty, so nothing of hutch's stays on the host; another
    // sandbox still in it (EBUSY) or gone already (ENOENT) is fine, and creators retry.
    const std::string parent = dir.parent.path;
    if (rmdir(parent.c_str()) != 0 && errno != EBUSY && errno != ENOTEMPTY && errno != ENOENT) {
      if (outcome) outcome = sys_error("rmdir", parent);
    }
  }
  dirs_ = std::move(left);
  return outcome;
}

std::vector<std::string> SandboxCgroup::paths() const {
  std::vector<std::string> paths;
  for (const Dir& dir : dirs_) paths.push_back(dir.self.path);
  return paths;
}

}  // namespace hutch
