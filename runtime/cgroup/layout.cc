#include "runtime/cgroup/layout.h"

#include <fstream>
#include <sstream>

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
    // mountinfo(5): id parent major:minor root mount_point options [optional...] - fstype source super_options
    size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, device, root, mount_point;
    head >> id >> parent >> device >> root >> mount_point;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype, source, super_options;
    tail >> fstype >> source >> super_options;
    if (fstype == "cgroup2") {
      if (layout.v2_mount.empty()) layout.v2_mount = mount_point;
    } else if (fstype == "cgroup") {
      CgroupV1Hierarchy hierarchy{mount_point, {}};
      for (const std::string& option : split(super_options, ',')) {
        if (option != "rw" && option != "ro" && option.find('=') == std::string::npos &&
            option != "clone_children" && option != "noprefix" && option != "xattr") {
          hierarchy.controllers.push_back(option);
        }
      }
      if (!hierarchy.controllers.empty()) layout.v1.push_back(std::move(hierarchy));
    }
  }
  return layout;
}

Result<CgroupLayout> read_cgroup_layout() {
  std::ifstream mountinfo("/proc/self/mountinfo");
  if (!mountinfo) return sys_error("open", "/proc/self/mountinfo");
  std::stringstream text;
  text << mountinfo.rdbuf();
  CgroupLayout layout = parse_cgroup_mounts(text.str());
  if (!layout.v2_mount.empty()) {
    std::ifstream controllers(layout.v2_mount + "/cgroup.controllers");
    std::string line;
    std::getline(controllers, line);
    layout.v2_controllers = split(line, ' ');
  }
  return layout;
}

}  // namespace hutch
