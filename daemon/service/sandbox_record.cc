#include "daemon/service/sandbox_record.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <fstream>

#include "daemon/zygote.h"
#include "runtime/base/proc_stat.h"
#include "runtime/base/unique_fd.h"
#include "runtime/process/pidfd.h"

namespace hutch::daemon {

using nlohmann::json;

json ref_to_json(const LiveSandboxRef& ref) {
  return {{"supervisor_pid", ref.supervisor_pid},
          {"supervisor_start_time", ref.supervisor_start_time},
          {"init_pid", ref.init_pid},
          {"exec_socket", ref.exec_socket},
          {"supervisor_socket", ref.supervisor_socket},
          {"exec_protocol", ref.exec_protocol}};
}

LiveSandboxRef ref_from_json(const json& j) {
  LiveSandboxRef ref;
  ref.supervisor_pid = j.at("supervisor_pid").get<pid_t>();
  ref.supervisor_start_time = j.at("supervisor_start_time").get<uint64_t>();
  ref.init_pid = j.at("init_pid").get<pid_t>();
  ref.exec_socket = j.at("exec_socket").get<std::string>();
  ref.supervisor_socket = j.at("supervisor_socket").get<std::string>();
  // Missing in the records of a hutchd before exec protocol v3.
  ref.exec_protocol = j.value("exec_protocol", 0u);
  return ref;
}

std::string creating_record(const std::string& id) {
  return json{{"version", 1}, {"id", id}, {"state", "creating"}}.dump() + "\n";
}

std::string pooled_record(const std::string& id, const LiveSandboxRef& ref) {
  return json{{"version", 1}, {"id", id}, {"state", "pooled"}, {"ref", ref_to_json(ref)}}.dump() +
         "\n";
}

// No fsync: a record outlives hutchd in the page cache, and nothing it describes survives a
// reboot (the sandbox's processes die with the host), so durability across power loss would buy
// nothing and cost a millisecond per create.
Result<void> write_atomically(const std::string& dir, const std::string& name,
                              const std::string& text) {
  std::string tmp = dir + "/." + name + ".tmp";
  UniqueFd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600));
  if (!fd) return sys_error("open", tmp);
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return sys_error("write", tmp);
    done += static_cast<size_t>(n);
  }
  fd.reset();
  std::string final_path = dir + "/" + name;
  if (::rename(tmp.c_str(), final_path.c_str()) != 0)
    return sys_error("rename", tmp + " to " + final_path);
  return {};
}

pid_t socket_peer(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (!fd || path.size() >= sizeof addr.sun_path) return 0;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 0;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.pid;
}

pid_t first_child(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t child = 0;
  in >> child;
  return child;
}

namespace {

json read_record(const std::string& dir) {
  try {
    std::string path = dir + "/" + kRecord;
    if (::access(path.c_str(), F_OK) != 0) path = dir + "/" + kPoolRecord;
    std::ifstream in(path);
    return json::parse(in);
  } catch (const std::exception&) {
    return nullptr;
  }
}

// hutchd died between forking the supervisor and recording it: the supervisor is found through
// its socket (SO_PEERCRED) and its init as its child, and that sandbox is destroyed.
void destroy_unrecorded(const std::string& dir) {
  pid_t supervisor = socket_peer(dir + "/supervisor.sock");
  if (supervisor <= 0) return;
  auto state = read_proc_state(supervisor);
  LiveSandboxRef found{supervisor, state ? state->start_time : 0, first_child(supervisor),
                       dir + "/exec.sock", dir + "/supervisor.sock"};
  if (auto live = LiveSandbox::connect(found)) {
    (void)live->destroy();
  } else {
    ::kill(supervisor, SIGKILL);
  }
}

// The recorded supervisor (its pid and start time) and its init (its child) run, but the
// supervisor cannot be adopted: it speaks another protocol (an older hutchd's, after an upgrade)
// or does not answer. Its sandbox is ended as a destroy would end it, by SIGKILL to init, so
// nothing of it runs on unmanaged; its supervisor then tears down its cgroups and exits.
void end_unadoptable(const LiveSandboxRef& ref) {
  UniqueFd supervisor(pidfd_open_fd(ref.supervisor_pid));
  if (!supervisor) return;
  auto supervisor_state = read_proc_state(ref.supervisor_pid);
  if (!supervisor_state || supervisor_state->start_time != ref.supervisor_start_time) return;
  UniqueFd init(pidfd_open_fd(ref.init_pid));
  if (!init) return;
  auto init_state = read_proc_state(ref.init_pid);
  if (!init_state || init_state->parent != ref.supervisor_pid) return;
  if (pidfd_signal(init.get(), SIGKILL) == 0)
    spdlog::warn("supervisor {} could not be adopted: its init {} was killed", ref.supervisor_pid,
                 ref.init_pid);
}

}  // namespace

std::optional<AdoptableRecord> recover_record(const std::string& id, const std::string& dir) {
  json record = read_record(dir);
  std::optional<LiveSandboxRef> ref;
  try {
    if (record.is_object() && record.contains("ref")) ref = ref_from_json(record["ref"]);
  } catch (const std::exception&) {
  }
  if (!ref) {
    destroy_unrecorded(dir);
    spdlog::warn("sandbox={} recovery: no complete record (creation was interrupted); removed", id);
    return std::nullopt;
  }
  auto live = LiveSandbox::connect(*ref);
  if (!live) {
    end_unadoptable(*ref);
    spdlog::warn("sandbox={} recovery: not adoptable ({}); removed", id, live.error().message());
    return std::nullopt;
  }
  if (record.value("state", "") == "pooled") {
    (void)live->destroy();
    spdlog::info("sandbox={} recovery: an idle warm-pool sandbox; destroyed", id);
    return std::nullopt;
  }
  AdoptableRecord adoptable{SandboxConfig{}, std::chrono::system_clock::now(),
                            record.value("state", "running") == "paused", std::move(*live)};
  try {
    adoptable.config = parse_sandbox_config(record.at("config"), ConfigSource::kRecord);
    if (auto parsed = parse_iso8601(record.at("created_at").get<std::string>()))
      adoptable.created_at = *parsed;
  } catch (const std::exception& e) {
    spdlog::warn("sandbox={} recovery: unreadable record ({}); destroyed", id, e.what());
    (void)adoptable.live.destroy();
    return std::nullopt;
  }
  return adoptable;
}

}  // namespace hutch::daemon
