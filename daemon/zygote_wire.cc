#include "daemon/zygote_wire.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "daemon/errors.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;

// An integer field of the zygote's wire format, range-checked: get<T>() would convert a float
// (undefined behaviour beyond T's range: the json_codec fuzzer found "id_count": 6.5e62) or wrap
// an integer too large for T.
template <typename T>
T wire_uint(const json& j, const char* name) {
  const json& value = j.at(name);
  const bool non_negative =
      value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() >= 0);
  if (!non_negative || value.get<uint64_t>() > std::numeric_limits<T>::max())
    throw bad_request(std::string(name) + " must be an integer from 0 to " +
                      std::to_string(std::numeric_limits<T>::max()));
  return static_cast<T>(value.get<uint64_t>());
}

const char* net_mode_wire(NetMode mode) {
  switch (mode) {
    case NetMode::kNone:
      return "none";
    case NetMode::kLoopback:
      return "loopback";
    case NetMode::kHostOwned:
      return "host_owned";
  }
  return "none";
}

NetMode net_mode_from_wire(const std::string& text) {
  if (text == "none") return NetMode::kNone;
  if (text == "loopback") return NetMode::kLoopback;
  if (text == "host_owned") return NetMode::kHostOwned;
  throw bad_request("net must be none, loopback or host_owned");
}

const char* bind_from_wire(BindFrom from) {
  switch (from) {
    case BindFrom::kHost:
      return "host";
    case BindFrom::kLauncher:
      return "launcher";
    case BindFrom::kSandbox:
      return "sandbox";
  }
  return "host";
}

BindFrom bind_from_from_wire(const std::string& text) {
  if (text == "host") return BindFrom::kHost;
  if (text == "launcher") return BindFrom::kLauncher;
  if (text == "sandbox") return BindFrom::kSandbox;
  throw bad_request("a bind's from must be host, launcher or sandbox");
}

}  // namespace

json spec_to_json(const SandboxSpec& spec) {
  json limits = json::object();
  if (spec.limits.memory_bytes) limits["memory_bytes"] = *spec.limits.memory_bytes;
  if (spec.limits.pids) limits["pids"] = *spec.limits.pids;
  if (spec.limits.cpus) limits["cpus"] = *spec.limits.cpus;
  if (spec.limits.cpu_weight) limits["cpu_weight"] = *spec.limits.cpu_weight;
  json binds = json::array();
  for (const BindMount& bind : spec.binds)
    binds.push_back({{"source", bind.source},
                     {"target", bind.target},
                     {"ro", bind.read_only},
                     {"from", bind_from_wire(bind.from)},
                     {"existing_file_only", bind.existing_file_only},
                     {"tree", bind.tree_fd >= 0}});
  json volumes = json::array();
  for (const VolumeMount& volume : spec.volumes)
    volumes.push_back({{"target", volume.target}, {"ro", volume.read_only}});
  return {
      {"lower_dirs", spec.lower_dirs},
      {"layers", spec.layers},
      {"upper_dir", spec.upper_dir},
      {"capabilities", spec.capabilities},
      {"env", spec.env},
      {"workdir", spec.workdir},
      {"hostname", spec.hostname},
      {"net", net_mode_wire(spec.net)},
      {"binds", binds},
      {"volumes", volumes},
      {"uid", spec.uid},
      {"gid", spec.gid},
      {"id_base", spec.ids.host_base},
      {"id_count", spec.ids.count},
      {"disk_bytes", spec.disk_bytes},
      {"limits", limits},
      {"cgroup", spec.cgroup},
      {"cgroup_parent", spec.cgroup_parent},
      {"sweep_stale_cgroups", spec.sweep_stale_cgroups},
      {"state_dir", spec.state_dir},
  };
}

SandboxSpec spec_from_json(const json& j) {
  SandboxSpec spec;
  spec.lower_dirs = j.at("lower_dirs").get<std::vector<std::string>>();
  spec.layers = j.at("layers").get<std::vector<std::string>>();
  spec.upper_dir = j.at("upper_dir").get<std::string>();
  spec.capabilities = wire_uint<uint64_t>(j, "capabilities");
  spec.env = j.at("env").get<std::vector<std::string>>();
  spec.workdir = j.at("workdir").get<std::string>();
  spec.hostname = j.at("hostname").get<std::string>();
  spec.net = net_mode_from_wire(j.at("net").get<std::string>());
  for (const json& bind : j.at("binds")) {
    spec.binds.push_back({bind.at("source").get<std::string>(),
                          bind.at("target").get<std::string>(), bind.at("ro").get<bool>(),
                          bind_from_from_wire(bind.at("from").get<std::string>()),
                          bind.at("existing_file_only").get<bool>(),
                          bind.at("tree").get<bool>() ? kTreeFollows : -1});
  }
  for (const json& volume : j.at("volumes")) {
    VolumeMount mount;
    mount.target = volume.at("target").get<std::string>();
    mount.read_only = volume.at("ro").get<bool>();
    spec.volumes.push_back(std::move(mount));
  }
  spec.uid = wire_uint<uid_t>(j, "uid");
  spec.gid = wire_uint<gid_t>(j, "gid");
  spec.ids.host_base = wire_uint<uint32_t>(j, "id_base");
  spec.ids.count = wire_uint<uint32_t>(j, "id_count");
  spec.disk_bytes = wire_uint<uint64_t>(j, "disk_bytes");
  const json& limits = j.at("limits");
  if (limits.contains("memory_bytes"))
    spec.limits.memory_bytes = wire_uint<uint64_t>(limits, "memory_bytes");
  if (limits.contains("pids")) spec.limits.pids = wire_uint<uint64_t>(limits, "pids");
  if (limits.contains("cpus")) spec.limits.cpus = limits["cpus"].get<double>();
  if (limits.contains("cpu_weight"))
    spec.limits.cpu_weight = wire_uint<uint32_t>(limits, "cpu_weight");
  spec.cgroup = j.at("cgroup").get<bool>();
  spec.cgroup_parent = j.at("cgroup_parent").get<std::string>();
  spec.sweep_stale_cgroups = j.at("sweep_stale_cgroups").get<bool>();
  spec.state_dir = j.at("state_dir").get<std::string>();
  return spec;
}

}  // namespace hutch::daemon
