#include "runtime/fs/host_rootfs.h"

#include <dirent.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "runtime/fs/paths.h"

extern const char kHostRootfsList[];

namespace hutch {
namespace {

std::optional<std::vector<std::string>> list_host_dir(const std::string& path) {
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return std::nullopt;
  std::vector<std::string> names;
  while (dirent* entry = readdir(dir)) {
    std::string_view name = entry->d_name;
    if (name != "." && name != "..") names.emplace_back(name);
  }
  closedir(dir);
  return names;
}

}  // namespace

Result<std::vector<HostRootfsRule>> parse_host_rootfs_list(std::string_view text) {
  std::vector<HostRootfsRule> rules;
  std::istringstream lines{std::string(text)};
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    std::istringstream words(line);
    std::string verb, path, mode, extra;
    words >> verb >> path >> mode >> extra;
    if (verb.empty() || verb[0] == '#') continue;
    const std::string where = "line " + std::to_string(number) + ": ";
    if (!is_normal_absolute(path) || path == "/") {
      return plain_error("host rootfs list", where + "\"" + path + "\" is not a normalized absolute path");
    }
    if (verb == "show" && mode.empty()) {
      rules.push_back({HostRootfsRule::Kind::kShow, path, 0});
    } else if (verb == "empty" && !mode.empty() && extra.empty() &&
               mode.find_first_not_of("01234567") == std::string::npos && mode.size() <= 4) {
      rules.push_back({HostRootfsRule::Kind::kEmpty, path,
                       static_cast<mode_t>(std::stoul(mode, nullptr, 8))});
    } else {
      return plain_error("host rootfs list", where + "expected \"show PATH\" or \"empty PATH MODE\"");
    }
  }
  return rules;
}

std::vector<SkeletonEntry> plan_host_skeleton(const std::vector<HostRootfsRule>& rules,
                                              const ListDir& list_dir) {
  std::map<std::string, const HostRootfsRule*> by_path;
  std::set<std::string> parents;  // directories holding a rule: they get an allowlist
  for (const HostRootfsRule& rule : rules) {
    by_path[rule.path] = &rule;
    for (std::string dir = parent_path(rule.path);; dir = parent_path(dir)) {
      parents.insert(dir);
      if (dir == "/") break;
    }
  }

  std::map<std::string, SkeletonEntry> entries;  // sorted: parents before children
  for (const std::string& parent : parents) {
    if (parent != "/") entries[parent] = {SkeletonEntry::Kind::kDir, parent, 0755};
    for (const std::string& name : list_dir(parent).value_or(std::vector<std::string>{})) {
      const std::string child = join_path(parent, name);
      if (by_path.contains(child) || parents.contains(child)) continue;
      entries[child] = {SkeletonEntry::Kind::kWhiteout, child, 0};
    }
  }
  for (const HostRootfsRule& rule : rules) {
    if (rule.kind == HostRootfsRule::Kind::kEmpty) {
      entries[rule.path] = {SkeletonEntry::Kind::kOpaqueDir, rule.path, rule.mode};
    }
  }
  std::vector<SkeletonEntry> plan;
  for (auto& [path, entry] : entries) plan.push_back(std::move(entry));
  return plan;
}

Result<std::vector<SkeletonEntry>> plan_this_host_skeleton() {
  static const auto rules = parse_host_rootfs_list(kHostRootfsList);
  if (!rules) return std::unexpected(rules.error());
  return plan_host_skeleton(*rules, list_host_dir);
}

}  // namespace hutch
