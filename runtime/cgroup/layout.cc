#include "runtime/cgroup/layout.h"

#include <algorithm>
#include <sstream>

#include "runtime/base/text_file.h"

namespace hutch {
namespace {

std::vector<std::string> split(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::istringstream in(text);
  for (std::string part; std::getline(in, part, sep);) {
    if (!part.empty()) parts.push_back(part);
  }
  return parts;
}

// Super options of a v1 cgroup mount that are not controllers (cgroups(7),
// kernel/cgroup/cgroup-v1.c cgroup1_parse_param). "name=…" and "release_agent=…" are caught by
// their '='.
bool is_controller_option(const std::string& option) {
  static constexpr std::string_view kNotControllers[] = {
      "rw",          "ro", "none", "all", "noprefix", "clone_children", "xattr", "cpuset_v2_mode",
      "favordynmods"};
  if (option.find('=') != std::string::npos) return false;
  return std::find(std::begin(kNotControllers), std::end(kNotControllers), option) ==
         std::end(kNotControllers);
}

// mountinfo(5) escapes space, tab, newline and backslash in paths as \ooo octal.
std::string unescape_mount_path(const std::string& path) {
  std::string out;
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] == '\\' && i + 3 < path.size()) {
      const std::string digits = path.substr(i + 1, 3);
      if (std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out +=
            static_cast<char>((digits[0] - '0') * 64 + (digits[1] - '0') * 8 + (digits[2] - '0'));
        i += 3;
        continue;
      }
    }
    out += path[i];
  }
  return out;
}

std::string read_first_line(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return "";
  return text->substr(0, text->find('\n'));
}

}  // namespace

std::string CgroupLayout::mode() const {
  if (!v2_mount.empty() && v1.empty()) return "v2";
  if (!v2_mount.empty()) return "hybrid";
  return v1.empty() ? "none" : "v1";
}

CgroupLayout parse_cgroup_mounts(const std::string& mountinfo) {
  CgroupLayout layout;
  std::istringstream lines(mountinfo);
  for (std::string line; std::getline(lines, line);) {
    // mountinfo(5): id parent major:minor root mount_point options [optional...] - fstype source
    // super_options
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, device, root, mount_point;
    head >> id >> parent >> device >> root >> mount_point;
    mount_point = unescape_mount_path(mount_point);
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype, source, super_options;
    tail >> fstype >> source >> super_options;
    if (fstype == "cgroup2") {
      if (layout.v2_mount.empty()) layout.v2_mount = mount_point;
    } else if (fstype == "cgroup") {
      CgroupV1Hierarchy hierarchy{mount_point, {}};
      for (const std::string& option : split(super_options, ',')) {
        if (is_controller_option(option)) hierarchy.controllers.push_back(option);
      }
      if (!hierarchy.controllers.empty()) layout.v1.push_back(std::move(hierarchy));
    }
  }
  return layout;
}

Result<CgroupLayout> read_cgroup_layout() {
  auto mountinfo = HUTCH_TRY(read_text_file("/proc/self/mountinfo"));
  CgroupLayout layout = parse_cgroup_mounts(mountinfo);
  if (!layout.v2_mount.empty()) {
    layout.v2_controllers = split(read_first_line(layout.v2_mount + "/cgroup.controllers"), ' ');
    layout.v2_subtree_control =
        split(read_first_line(layout.v2_mount + "/cgroup.subtree_control"), ' ');
  }
  return layout;
}

std::vector<CgroupMembership> parse_proc_cgroup(const std::string& text) {
  std::vector<CgroupMembership> memberships;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    size_t first = line.find(':');
    size_t second = first == std::string::npos ? first : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    CgroupMembership membership;
    membership.v2 = line.substr(0, first) == "0";
    for (const std::string& c : split(line.substr(first + 1, second - first - 1), ',')) {
      if (is_controller_option(c)) membership.controllers.push_back(c);
    }
    membership.path = line.substr(second + 1);
    memberships.push_back(std::move(membership));
  }
  return memberships;
}

Result<std::vector<CgroupMembership>> read_proc_cgroups(const std::string& path) {
  auto text = HUTCH_TRY(read_text_file(path));
  return parse_proc_cgroup(text);
}

Result<std::vector<CgroupMembership>> read_own_cgroups() {
  return read_proc_cgroups("/proc/self/cgroup");
}

std::string cgroup_path_in(const std::vector<CgroupMembership>& memberships, bool v2,
                           const std::vector<std::string>& controllers) {
  std::vector<std::string> wanted = controllers;
  std::sort(wanted.begin(), wanted.end());
  for (const CgroupMembership& m : memberships) {
    std::vector<std::string> have = m.controllers;
    std::sort(have.begin(), have.end());
    if (v2 ? m.v2 : (!m.v2 && !have.empty() && have == wanted)) return m.path;
  }
  return "";
}

}  // namespace hutch
