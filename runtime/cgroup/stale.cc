#include "runtime/cgroup/stale.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <map>
#include <sstream>
#include <vector>

#include "runtime/base/proc_stat.h"
#include "runtime/base/text_file.h"
#include "runtime/cgroup/cgroup_fs.h"
#include "runtime/cgroup/kill.h"

namespace hutch {
namespace {

constexpr std::string_view kIdPrefix = "run-";
constexpr std::chrono::milliseconds kKillTimeout{10000};
constexpr std::chrono::milliseconds kRmdirPatience{300};

template <class T>
bool parse_field(std::string_view& rest, T& value, bool last) {
  size_t end = last ? rest.size() : rest.find('-');
  if (end == std::string_view::npos || end == 0) return false;
  auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + end, value);
  if (ec != std::errc() || ptr != rest.data() + end) return false;
  rest.remove_prefix(last ? end : end + 1);
  return true;
}

Result<uint64_t> own_pid_namespace() {
  struct stat st {};
  if (stat("/proc/self/ns/pid", &st) != 0) return sys_error("stat", "/proc/self/ns/pid");
  return static_cast<uint64_t>(st.st_ino);
}

// A dir of one stale id in one hierarchy.
struct StaleDir {
  const CgroupDir* parent;  // <mount>/hutch
  bool v2;
  bool freezer;
};

// True if this process sits in `<mount>/<parent>/<id>` (or below) of any hierarchy.
bool holds_this_process(const std::vector<CgroupMembership>& own, const CgroupLayout& layout,
                        std::string_view parent, const std::string& id) {
  const std::string prefix = "/" + std::string(parent) + "/" + id;
  auto inside = [&](const std::string& path) {
    return path == prefix || path.starts_with(prefix + "/");
  };
  if (!layout.v2_mount.empty() && inside(cgroup_path_in(own, true, {}))) return true;
  for (const CgroupV1Hierarchy& hierarchy : layout.v1) {
    if (inside(cgroup_path_in(own, false, hierarchy.controllers))) return true;
  }
  return false;
}

Result<void> remove_one(const std::string& id, const std::vector<StaleDir>& places) {
  std::vector<CgroupDir> dirs;
  dirs.reserve(places.size());  // `target` points into it
  CgroupKillTarget target;
  for (const StaleDir& place : places) {
    Result<CgroupDir> dir = open_cgroup_subdir(*place.parent, id);
    if (!dir) {
      if (dir.error().err == ENOENT) continue;
      return std::unexpected(dir.error());
    }
    dirs.push_back(std::move(*dir));
    if (place.v2) target.v2 = &dirs.back();
    if (place.freezer) target.v1_freezer = &dirs.back();
    target.dirs.push_back(&dirs.back());
  }
  HUTCH_TRY(kill_cgroup_processes(target, kKillTimeout));
  for (const StaleDir& place : places) {
    Result<void> removed = remove_cgroup_tree(*place.parent, id, kRmdirPatience);
    if (!removed) return removed;
  }
  return {};
}

}  // namespace

std::string format_sandbox_cgroup_id(const CgroupOwner& owner) {
  return std::string(kIdPrefix) + std::to_string(owner.pid_namespace) + "-" +
         std::to_string(owner.pid) + "-" + std::to_string(owner.start_time) + "-" +
         std::to_string(owner.sequence);
}

std::optional<CgroupOwner> parse_sandbox_cgroup_id(std::string_view id) {
  if (!id.starts_with(kIdPrefix)) return std::nullopt;
  std::string_view rest = id.substr(kIdPrefix.size());
  CgroupOwner owner;
  if (!parse_field(rest, owner.pid_namespace, false) || !parse_field(rest, owner.pid, false) ||
      !parse_field(rest, owner.start_time, false) || !parse_field(rest, owner.sequence, true) ||
      owner.pid <= 0) {
    return std::nullopt;
  }
  return owner;
}

Result<std::string> make_sandbox_cgroup_id(uint64_t sequence) {
  uint64_t pid_namespace = HUTCH_TRY(own_pid_namespace());
  ProcState self = HUTCH_TRY(read_proc_state(getpid()));
  return format_sandbox_cgroup_id({pid_namespace, getpid(), self.start_time, sequence});
}

bool cgroup_owner_alive(std::string_view id) {
  std::optional<CgroupOwner> owner = parse_sandbox_cgroup_id(id);
  if (!owner) return true;
  Result<uint64_t> pid_namespace = own_pid_namespace();
  if (!pid_namespace || *pid_namespace != owner->pid_namespace) return true;
  Result<ProcState> state = read_proc_state(owner->pid);
  if (!state) return state.error().err != ENOENT;
  return state->start_time == owner->start_time && state->state != 'Z' && state->state != 'X';
}

Result<int> remove_stale_cgroups(const CgroupLayout& layout,
                                 const std::function<bool(std::string_view id)>& is_live,
                                 std::string_view parent_name) {
  HUTCH_TRY(check_cgroup_parent(parent_name));
  std::vector<CgroupMembership> own = HUTCH_TRY(read_own_cgroups());
  struct Hierarchy {
    std::string mount_point;
    bool v2;
    bool freezer;
  };
  std::vector<Hierarchy> hierarchies;
  if (!layout.v2_mount.empty()) hierarchies.push_back({layout.v2_mount, true, false});
  for (const CgroupV1Hierarchy& h : layout.v1) {
    bool freezer =
        std::find(h.controllers.begin(), h.controllers.end(), "freezer") != h.controllers.end();
    hierarchies.push_back({h.mount_point, false, freezer});
  }
  std::vector<CgroupDir> parents;  // <mount>/hutch of each hierarchy that has one
  parents.reserve(hierarchies.size());
  std::map<std::string, std::vector<StaleDir>> stale;
  // An id recurs in every hierarchy: its owner is looked up once (a /proc read per live owner).
  std::map<std::string, bool, std::less<>> live;
  for (const Hierarchy& hierarchy : hierarchies) {
    CgroupDir root = HUTCH_TRY(open_cgroup_dir(hierarchy.mount_point));
    Result<CgroupDir> parent = open_cgroup_subdir(root, std::string(parent_name));
    if (!parent) {
      if (parent.error().err == ENOENT) continue;
      return std::unexpected(parent.error());
    }
    parents.push_back(std::move(*parent));
    std::vector<std::string> ids = HUTCH_TRY(list_cgroup_subdirs(parents.back()));
    for (const std::string& id : ids) {
      auto known = live.find(id);
      if (known == live.end()) known = live.emplace(id, is_live(id)).first;
      if (!known->second) stale[id].push_back({&parents.back(), hierarchy.v2, hierarchy.freezer});
    }
  }
  int removed = 0;
  Result<void> first_error;
  for (const auto& [id, places] : stale) {
    if (holds_this_process(own, layout, parent_name, id)) continue;
    Result<void> outcome = remove_one(id, places);
    if (outcome) {
      ++removed;
    } else if (first_error) {
      first_error = outcome;
    }
  }
  if (!first_error) return std::unexpected(first_error.error());
  return removed;
}

Result<int> sweep_stale_cgroups(std::string_view parent) {
  auto layout = HUTCH_TRY(read_cgroup_layout());
  return remove_stale_cgroups(layout, cgroup_owner_alive, parent);
}

}  // namespace hutch
