#include "daemon/service/session_service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <fstream>
#include <set>

#include "daemon/sandbox_spec.h"
#include "daemon/service/sandbox_record.h"
#include "runtime/defaults.h"

namespace hutch::daemon {
namespace {

using service::ServiceResult;

constexpr std::string_view kStateDir = "/.hutch-sessions";
constexpr size_t kMaxSessionNameLength = 64;

// $1 the state file, $2 the cwd, $3 the names to unset (valid env keys only, so plain word
// splitting is safe), $4 the command. The trap keeps the command's exit status and writes
// nothing to its stdout or stderr; where `env -0` fails (a rootfs without it) it leaves no state
// file, so a partial one can never unset the whole environment. A command killed by a signal (a
// timeout) runs no trap: the state stays as it was.
constexpr const char* kPrelude =
    "__hutch_state=$1\n"
    "cd -- \"$2\" 2>/dev/null || cd /\n"
    "for __hutch_name in $3; do unset \"$__hutch_name\"; done\n"
    "unset __hutch_name\n"
    "trap '__hutch_rc=$?; { pwd && printf \"\\000\" && env -0; } >\"$__hutch_state\" 2>/dev/null "
    "|| rm -f \"$__hutch_state\" 2>/dev/null; exit \"$__hutch_rc\"' EXIT\n"
    "__hutch_command=$4\n"
    "shift 4\n"
    "eval \"$__hutch_command\"\n";

bool valid_session_name(std::string_view name) {
  if (name.empty() || name.size() > kMaxSessionNameLength) return false;
  auto plain = [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  };
  if (!plain(name[0])) return false;
  return std::all_of(name.begin(), name.end(),
                     [&](char c) { return plain(c) || c == '.' || c == '_' || c == '-'; });
}

bool shell_owned(std::string_view key) {
  return key == "PWD" || key == "OLDPWD" || key == "SHLVL" || key == "_";
}

std::string shell_quote(std::string_view word) {
  std::string out = "'";
  for (char c : word) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}

// An argv request runs as the command its words quote to; a command request as given.
std::string session_command(const ExecOptions& options) {
  if (options.argv.size() == 3 && options.argv[0] == "/bin/sh" && options.argv[1] == "-c")
    return options.argv[2];
  std::string command;
  for (const auto& word : options.argv) {
    if (!command.empty()) command += ' ';
    command += shell_quote(word);
  }
  return command;
}

std::vector<std::string> base_environment_names(const Sandbox& sandbox) {
  std::vector<std::string> names;
  for (const auto& entry : exec_environment(sandbox.config().env, {}))
    names.push_back(entry.substr(0, entry.find('=')));
  return names;
}

std::string state_path(const ShellSession& session) {
  return std::string(kStateDir) + "/" + session.name();
}

constexpr const char* kSessionsRecord = "sessions.json";

nlohmann::json session_to_json(const ShellSession& session) {
  const SessionState state = session.state();
  return {{"name", session.name()},
          {"state_file", state_path(session)},
          {"cwd", state.cwd},
          {"env", state.env},
          {"unset", state.unset}};
}

// Rewrites the sandbox's sessions record; a failure is logged: the sessions still work, only a
// restart would lose the change.
void persist_sessions(Sandbox& sandbox) {
  SessionTable& table = sandbox.sessions();
  std::lock_guard lock(table.record_mutex());
  nlohmann::json sessions = nlohmann::json::array();
  for (const auto& session : table.all()) sessions.push_back(session_to_json(*session));
  const nlohmann::json record = {{"sessions", sessions}, {"generated", table.generated()}};
  if (auto written = write_atomically(sandbox.dir(), kSessionsRecord, record.dump() + "\n");
      !written)
    spdlog::warn("sandbox={} sessions record: {}", sandbox.id(), written.error().message());
}

// Releases the session when the command (buffered, or the route's stream) is done with it.
class SessionLease {
 public:
  explicit SessionLease(std::shared_ptr<ShellSession> session) : session_(std::move(session)) {}
  SessionLease(const SessionLease&) = delete;
  SessionLease& operator=(const SessionLease&) = delete;
  ~SessionLease() { session_->end(); }
  ShellSession& session() { return *session_; }

 private:
  std::shared_ptr<ShellSession> session_;
};

ServiceResult<std::shared_ptr<SessionLease>> lease_session(Sandbox& sandbox,
                                                           const std::string& name,
                                                           const ExecOptions& options) {
  if (options.background)
    return service::service_error(ErrorKind::kInvalid, "bad_request",
                                  "a session command cannot run in the background");
  auto session = sandbox.sessions().find(name);
  if (!session)
    return service::service_error(ErrorKind::kNotFound, "session_not_found",
                                  "no session " + name + " in sandbox " + sandbox.id());
  if (!session->try_begin())
    return service::service_error(ErrorKind::kConflict, "session_busy",
                                  "session " + name + " is running a command; wait for its end");
  return std::make_shared<SessionLease>(std::move(session));
}

// The options the command runs with: the prelude's argv, the session's environment under the
// request's, the request's workdir (if any) in place of the session's cwd.
ServiceResult<ExecOptions> session_exec_options(Sandbox& sandbox, ShellSession& session,
                                                const ExecOptions& request) {
  auto fs = sandbox.fs();
  if (!fs) return std::unexpected(service::from_runtime(fs.error()));
  if (auto made = fs->mkdir(kStateDir, false, 01777);
      !made && made.error().code != files::Errc::kAlreadyExists)
    return service::service_error(ErrorKind::kFailure, "runtime_error",
                                  "session state directory: " + made.error().message);
  if (auto removed = fs->remove(state_path(session), false);
      !removed && removed.error().code != files::Errc::kNotFound)
    return service::service_error(ErrorKind::kFailure, "runtime_error",
                                  "session state file: " + removed.error().message);
  SessionState state = session.state();
  std::string unset;
  for (const auto& name : state.unset) {
    if (request.env.contains(name)) continue;
    if (!unset.empty()) unset += ' ';
    unset += name;
  }
  ExecOptions options = request;
  options.argv = {"/bin/sh",
                  "-c",
                  kPrelude,
                  "hutch-session",
                  state_path(session),
                  request.workdir.value_or(state.cwd),
                  unset,
                  session_command(request)};
  options.workdir = "/";
  options.env = state.env;
  for (const auto& [key, value] : request.env) options.env[key] = value;
  return options;
}

// Reads back what the command's EXIT trap wrote; a missing, oversized or malformed file (the
// command was killed, or wrote it itself) leaves the state as it was.
void capture_state(Sandbox& sandbox, ShellSession& session) {
  auto fs = sandbox.fs();
  if (!fs) return;
  std::string path = state_path(session);
  auto text = fs->read_file(path, kMaxSessionStateBytes);
  (void)fs->remove(path, false);
  if (!text) {
    if (text.error().code != files::Errc::kNotFound)
      spdlog::warn("sandbox={} session={} state not read: {}", sandbox.id(), session.name(),
                   text.error().message);
    return;
  }
  if (auto state = parse_session_state(*text, base_environment_names(sandbox))) {
    session.set_state(std::move(*state));
    persist_sessions(sandbox);
  }
}

}  // namespace

std::optional<SessionState> parse_session_state(std::string_view text,
                                                const std::vector<std::string>& base) {
  size_t end_of_cwd = text.find('\0');
  if (end_of_cwd == std::string_view::npos || end_of_cwd < 2 || text[end_of_cwd - 1] != '\n')
    return std::nullopt;
  SessionState state;
  state.cwd = std::string(text.substr(0, end_of_cwd - 1));
  if (state.cwd.front() != '/' || state.cwd.find('\n') != std::string::npos) return std::nullopt;
  std::string_view rest = text.substr(end_of_cwd + 1);
  while (!rest.empty()) {
    size_t end = rest.find('\0');
    std::string_view entry = rest.substr(0, end);
    rest = end == std::string_view::npos ? std::string_view() : rest.substr(end + 1);
    size_t equals = entry.find('=');
    if (equals == std::string_view::npos) continue;
    std::string_view key = entry.substr(0, equals);
    if (!valid_env_key(key) || shell_owned(key)) continue;
    state.env[std::string(key)] = std::string(entry.substr(equals + 1));
  }
  std::set<std::string> unset;
  for (const auto& name : base)
    if (!shell_owned(name) && !state.env.contains(name)) unset.insert(name);
  state.unset.assign(unset.begin(), unset.end());
  return state;
}

void restore_sessions(Sandbox& sandbox) {
  const std::string path = sandbox.dir() + "/" + kSessionsRecord;
  std::ifstream in(path);
  if (!in) return;
  const nlohmann::json record = nlohmann::json::parse(in, nullptr, false);
  try {
    for (const auto& entry : record.at("sessions")) {
      const std::string name = entry.at("name").get<std::string>();
      if (!valid_session_name(name)) continue;
      SessionState state;
      state.cwd = entry.at("cwd").get<std::string>();
      state.env = entry.at("env").get<std::map<std::string, std::string>>();
      state.unset = entry.at("unset").get<std::vector<std::string>>();
      sandbox.sessions().add(std::make_shared<ShellSession>(name, std::move(state)),
                             kMaxSessionsPerSandbox);
    }
    sandbox.sessions().set_generated(record.at("generated").get<uint64_t>());
  } catch (const nlohmann::json::exception& e) {
    spdlog::warn("sandbox={} recovery: {} unreadable: {}", sandbox.id(), path, e.what());
    return;
  }
  const size_t restored = sandbox.sessions().names().size();
  if (restored != 0) spdlog::info("sandbox={} recovery: {} shell sessions", sandbox.id(), restored);
}

ServiceResult<std::string> create_session(Sandbox& sandbox, const SessionRequest& request) {
  if (request.name && !valid_session_name(*request.name))
    return service::service_error(
        ErrorKind::kInvalid, "invalid_session_name",
        "a session name is 1-64 of [A-Za-z0-9._-], starting with a letter or digit");
  for (const auto& [key, value] : request.env) {
    if (!valid_env_key(key))
      return service::service_error(ErrorKind::kInvalid, "bad_request",
                                    "env key \"" + key + "\" is not [A-Za-z_][A-Za-z0-9_]*");
  }
  SessionState state;
  state.cwd = request.workdir.value_or(sandbox.config().workdir);
  state.env = request.env;
  // A generated name a client took already is skipped; the table holds at most kMax names.
  for (size_t attempt = 0; attempt <= kMaxSessionsPerSandbox; ++attempt) {
    std::string name = request.name ? *request.name : sandbox.sessions().next_name();
    auto added =
        sandbox.sessions().add(std::make_shared<ShellSession>(name, state), kMaxSessionsPerSandbox);
    if (added == SessionTable::AddOutcome::kAdded) {
      persist_sessions(sandbox);
      sandbox.log().add({{"event", "session_created"}, {"session", name}});
      return name;
    }
    if (added == SessionTable::AddOutcome::kFull) break;
    if (request.name)
      return service::service_error(ErrorKind::kConflict, "session_exists",
                                    "session " + name + " exists");
  }
  return service::service_error(ErrorKind::kConflict, "too_many_sessions",
                                "sandbox " + sandbox.id() + " has " +
                                    std::to_string(kMaxSessionsPerSandbox) +
                                    " sessions already; delete one");
}

std::vector<std::string> list_sessions(const Sandbox& sandbox) {
  return sandbox.sessions().names();
}

ServiceResult<void> delete_session(Sandbox& sandbox, const std::string& name) {
  if (!sandbox.sessions().remove(name))
    return service::service_error(ErrorKind::kNotFound, "session_not_found",
                                  "no session " + name + " in sandbox " + sandbox.id());
  persist_sessions(sandbox);
  sandbox.log().add({{"event", "session_deleted"}, {"session", name}});
  return {};
}

ServiceResult<BufferedExec> run_session_exec(const std::shared_ptr<Sandbox>& sandbox,
                                             const std::string& name, const ExecOptions& options,
                                             const std::string& request_id, Metrics& metrics) {
  auto lease = lease_session(*sandbox, name, options);
  if (!lease) return std::unexpected(lease.error());
  auto run_options = session_exec_options(*sandbox, (*lease)->session(), options);
  if (!run_options) return std::unexpected(run_options.error());
  auto result = run_buffered_exec(sandbox, *run_options, request_id, metrics);
  if (result) capture_state(*sandbox, (*lease)->session());
  return result;
}

ServiceResult<StreamedExec> start_session_exec(const std::shared_ptr<Sandbox>& sandbox,
                                               const std::string& name, const ExecOptions& options,
                                               const std::string& request_id) {
  auto lease = lease_session(*sandbox, name, options);
  if (!lease) return std::unexpected(lease.error());
  auto run_options = session_exec_options(*sandbox, (*lease)->session(), options);
  if (!run_options) return std::unexpected(run_options.error());
  auto started = start_streamed_exec(sandbox, *run_options, request_id);
  if (!started) return std::unexpected(started.error());
  std::weak_ptr<Sandbox> weak = sandbox;
  // Released here, before the stream's last line, so the client's next command finds it free.
  started->on_end = [weak, lease = *lease](const ExecOutcome&) mutable {
    if (!lease) return;
    if (auto owner = weak.lock()) capture_state(*owner, lease->session());
    lease.reset();
  };
  return started;
}

}  // namespace hutch::daemon
