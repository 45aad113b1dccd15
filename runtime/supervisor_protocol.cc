#include "runtime/supervisor_protocol.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string_view>

namespace hutch {
namespace {

// Copies text into a fixed buffer, truncated, always NUL-terminated.
template <size_t N>
void put_text(char (&out)[N], const std::string& text) {
  const size_t size = std::min(text.size(), N - 1);
  std::memcpy(out, text.data(), size);
  out[size] = '\0';
}

template <size_t N>
void terminate(char (&text)[N]) {
  text[N - 1] = '\0';
}

// The checks every message gets: its exact size and its magic.
template <typename Message>
Result<Message> decode_fixed(const void* data, long size, const char* what) {
  if (size < 0 || static_cast<size_t>(size) != sizeof(Message)) {
    return plain_error(what, "malformed message: " + std::to_string(size) + " bytes, not " +
                                 std::to_string(sizeof(Message)));
  }
  Message message;
  std::memcpy(&message, data, sizeof message);
  if (message.magic != Message::kMagic)
    return plain_error(what, "malformed message: bad magic (a peer of another hutch version?)");
  return message;
}

template <typename Kind>
bool known_kind(Kind kind) {
  const auto value = static_cast<uint32_t>(kind);
  return value >= 1 && value <= static_cast<uint32_t>(Kind::kLast);
}

WireCount count_of(const std::optional<uint64_t>& value) {
  return value ? WireCount{*value, 1} : WireCount{};
}

std::optional<uint64_t> optional_of(const WireCount& count) {
  if (count.present == 0) return std::nullopt;
  return count.value;
}

}  // namespace

WireError to_wire(const Error& error) {
  WireError wire;
  wire.err = error.err;
  put_text(wire.step, error.step);
  put_text(wire.detail, error.detail);
  return wire;
}

Error from_wire(const WireError& error) { return Error{error.step, error.detail, error.err}; }

Result<SupervisorRequest> decode_request(const void* data, long size) {
  auto request = HUTCH_TRY(decode_fixed<SupervisorRequest>(data, size, "supervisor request"));
  if (!known_kind(request.kind)) {
    return plain_error(
        "supervisor request",
        "malformed message: unknown kind " + std::to_string(static_cast<uint32_t>(request.kind)));
  }
  terminate(request.snapshot_name);
  terminate(request.state_dir);
  if (request.kind == SupervisorRequest::Kind::kSnapshot) {
    const std::string_view name = request.snapshot_name;
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string_view::npos)
      return plain_error("supervisor request", "bad snapshot name " + std::string(name));
  }
  return request;
}

Result<SupervisorReply> decode_reply(const void* data, long size) {
  auto reply = HUTCH_TRY(decode_fixed<SupervisorReply>(data, size, "supervisor reply"));
  terminate(reply.error.step);
  terminate(reply.error.detail);
  return reply;
}

Result<ServeReady> decode_ready(const void* data, long size) {
  auto ready = HUTCH_TRY(decode_fixed<ServeReady>(data, size, "supervisor ready message"));
  if (!known_kind(ready.kind)) {
    return plain_error(
        "supervisor ready message",
        "malformed message: unknown kind " + std::to_string(static_cast<uint32_t>(ready.kind)));
  }
  terminate(ready.error.step);
  terminate(ready.error.detail);
  const bool pids_needed = ready.kind != ServeReady::Kind::kFailed;
  if (pids_needed && (ready.supervisor_pid <= 0 ||
                      (ready.kind == ServeReady::Kind::kServing && ready.init_pid <= 0))) {
    return plain_error("supervisor ready message", "malformed message: no pid");
  }
  return ready;
}

Result<KeeperRequest> decode_keeper_request(const void* data, long size) {
  auto request = HUTCH_TRY(decode_fixed<KeeperRequest>(data, size, "keeper request"));
  if (!known_kind(request.kind)) {
    return plain_error("keeper request", "malformed message: unknown kind " +
                                             std::to_string(static_cast<uint32_t>(request.kind)));
  }
  if (request.kind != KeeperRequest::Kind::kList && request.pid <= 0)
    return plain_error("keeper request", "malformed message: no pid");
  return request;
}

Result<KeeperReply> decode_keeper_reply(const void* data, long size) {
  if (size == static_cast<long>(sizeof(SupervisorReply))) {
    uint32_t magic = 0;
    std::memcpy(&magic, data, sizeof magic);
    if (magic == SupervisorReply::kMagic) {
      auto old = HUTCH_TRY(decode_reply(data, size));
      return kind_error(ErrorKind::kUnsupported, "keeper",
                        "this sandbox's supervisor was started by an older hutchd, which kept "
                        "background processes itself (it answered: " +
                            from_wire(old.error).message() +
                            "); recreate the sandbox for background processes and PTYs");
    }
  }
  auto reply = HUTCH_TRY(decode_fixed<KeeperReply>(data, size, "keeper reply"));
  terminate(reply.error.step);
  terminate(reply.error.detail);
  return reply;
}

KeeperReply keeper_error_reply(const Error& error) {
  KeeperReply reply;
  reply.error = to_wire(error);
  return reply;
}

std::string format_kept_exit(const KeptExit& exit) {
  std::string error = exit.start_error;
  std::replace(error.begin(), error.end(), '\n', ' ');
  return std::to_string(exit.exit_code) + " " + std::to_string(exit.term_signal) + " " +
         (exit.stdout_truncated ? "1" : "0") + " " + (exit.stderr_truncated ? "1" : "0") + " " +
         std::to_string(exit.ended_unix_ms) + "\n" + error + "\n";
}

std::optional<KeptExit> parse_kept_exit(std::string_view text) {
  const size_t end = text.find('\n');
  if (end == std::string_view::npos) return std::nullopt;
  KeptExit exit;
  int out = 0, err = 0;
  long long ended = 0;
  char extra = 0;
  const std::string line(text.substr(0, end));
  if (std::sscanf(line.c_str(), "%d %d %d %d %lld %c", &exit.exit_code, &exit.term_signal, &out,
                  &err, &ended, &extra) != 5)
    return std::nullopt;
  exit.stdout_truncated = out != 0;
  exit.stderr_truncated = err != 0;
  exit.ended_unix_ms = ended;
  std::string_view rest = text.substr(end + 1);
  if (const size_t error_end = rest.find('\n'); error_end != std::string_view::npos)
    rest = rest.substr(0, error_end);
  exit.start_error = std::string(rest);
  return exit;
}

void put_stats(const CgroupStats& stats, SupervisorReply& reply) {
  reply.cpu_usage_usec = count_of(stats.cpu_usage_usec);
  reply.memory_peak_bytes = count_of(stats.memory_peak_bytes);
  reply.pids_current = count_of(stats.pids_current);
  reply.pids_peak = count_of(stats.pids_peak);
  reply.oom_kills = count_of(stats.oom_kills);
}

CgroupStats stats_of(const SupervisorReply& reply) {
  CgroupStats stats;
  stats.cpu_usage_usec = optional_of(reply.cpu_usage_usec);
  stats.memory_peak_bytes = optional_of(reply.memory_peak_bytes);
  stats.pids_current = optional_of(reply.pids_current);
  stats.pids_peak = optional_of(reply.pids_peak);
  stats.oom_kills = optional_of(reply.oom_kills);
  return stats;
}

Result<SupervisorRequest> deadlines_request(const SandboxDeadlines& deadlines) {
  SupervisorRequest request;
  request.kind = SupervisorRequest::Kind::kDeadlines;
  if (deadlines.state_dir.size() >= sizeof request.state_dir)
    return plain_error("deadlines", "state dir path too long");
  put_text(request.state_dir, deadlines.state_dir);
  if (deadlines.end_at) {
    request.has_end_at = 1;
    request.end_at_unix_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadlines.end_at->time_since_epoch())
            .count();
  }
  if (deadlines.idle_ttl) {
    request.has_idle_ttl = 1;
    request.idle_ttl_ms = deadlines.idle_ttl->count();
  }
  return request;
}

SandboxDeadlines deadlines_of(const SupervisorRequest& request) {
  SandboxDeadlines deadlines;
  if (request.has_end_at != 0) {
    deadlines.end_at =
        std::chrono::system_clock::time_point(std::chrono::milliseconds(request.end_at_unix_ms));
  }
  if (request.has_idle_ttl != 0)
    deadlines.idle_ttl = std::chrono::milliseconds(request.idle_ttl_ms);
  deadlines.state_dir = request.state_dir;
  return deadlines;
}

SupervisorReply error_reply(const Error& error) {
  SupervisorReply reply;
  reply.error = to_wire(error);
  return reply;
}

ServeReady failed_ready(const Error& error) {
  ServeReady ready;
  ready.kind = ServeReady::Kind::kFailed;
  ready.error = to_wire(error);
  return ready;
}

void write_ready(int fd, const ServeReady& ready) {
  while (write(fd, &ready, sizeof ready) < 0 && errno == EINTR) {
  }
}

Result<sockaddr_un> unix_address(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    return plain_error("socket path", path + " is empty or longer than " +
                                          std::to_string(sizeof address.sun_path - 1) + " bytes");
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

}  // namespace hutch
