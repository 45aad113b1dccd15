#include "daemon/service/exec_service.h"

#include <spdlog/spdlog.h>

namespace hutch::daemon {
namespace {

using Clock = std::chrono::steady_clock;
using service::ServiceResult;

// Every exec's start: a paused sandbox runs nothing; the others log the exec.
ServiceResult<void> begin_exec(Sandbox& sandbox, const ExecOptions& options,
                               const std::string& request_id) {
  if (sandbox.state() == SandboxState::kPaused)
    return service::service_error(ErrorKind::kConflict, "sandbox_paused",
                                  "sandbox " + sandbox.id() + " is paused; resume it");
  sandbox.log().add({{"event", "exec_started"}, {"request", request_id}, {"argv", options.argv}});
  return {};
}

ExecStart exec_start(const ExecOptions& options, const Sandbox& sandbox) {
  ExecStart start;
  start.argv = options.argv;
  std::map<std::string, std::string> env = sandbox.network_env();
  for (const auto& [name, value] : sandbox.config().env) env[name] = value;
  start.env = exec_environment(env, options.env);
  start.workdir = options.workdir.value_or(sandbox.config().workdir);
  start.stdin_data = options.stdin_data;
  return start;
}

std::optional<Clock::time_point> exec_deadline(const ExecOptions& options, const Sandbox& sandbox) {
  double seconds = options.timeout_seconds > 0
                       ? options.timeout_seconds
                       : static_cast<double>(sandbox.config().default_timeout_seconds);
  if (seconds <= 0) return std::nullopt;
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

std::optional<uint64_t> oom_kills(const Sandbox& sandbox) {
  auto count = sandbox.live().oom_kills();
  return count ? *count : std::nullopt;
}

// The sandbox's bookkeeping at a background process's end.
BackgroundProcess::ExitHook process_exit_hook(const std::shared_ptr<Sandbox>& sandbox) {
  std::weak_ptr<Sandbox> weak = sandbox;
  return [weak](const ProcessStatus& status) {
    if (auto owner = weak.lock()) {
      owner->touch();  // the idle TTL counts from the process's end
      owner->log().add({{"event", "process_exited"},
                        {"pid", status.pid},
                        {"exit_code", status.exit_code},
                        {"duration_ms", status.duration_ms}});
    }
  };
}

}  // namespace

void adopt_background_processes(const std::shared_ptr<Sandbox>& sandbox) {
  std::vector<std::string> warnings;
  auto adopted = BackgroundProcess::adopt(sandbox->live(), sandbox->dir(),
                                          process_exit_hook(sandbox), warnings);
  for (const std::string& warning : warnings)
    spdlog::warn("sandbox={} recovery: {}", sandbox->id(), warning);
  size_t running = 0;
  for (auto& process : adopted) {
    const ProcessStatus status = process->status();
    running += status.running ? 1 : 0;
    sandbox->log().add({{"event", status.running ? "process_reattached" : "process_exited"},
                        {"pid", status.pid},
                        {"exit_code", status.running ? nlohmann::json(nullptr)
                                                     : nlohmann::json(status.exit_code)}});
    sandbox->add_process(std::move(process));
  }
  if (!adopted.empty())
    spdlog::info("sandbox={} recovery: {} background processes, {} running", sandbox->id(),
                 adopted.size(), running);
}

void finish_exec(Sandbox& sandbox, const std::string& request_id, const ExecOptions& options,
                 const ExecOutcome& outcome, Metrics& metrics) {
  metrics.exec_seconds().observe(outcome.duration.count() / 1e6);
  double ms = outcome.duration.count() / 1000.0;
  sandbox.log().add({{"event", "exec_ended"},
                     {"request", request_id},
                     {"argv", options.argv},
                     {"exit_code", outcome.exit_code},
                     {"timed_out", outcome.timed_out},
                     {"duration_ms", ms}});
  spdlog::info("sandbox={} request={} exec exit={} timed_out={} {:.2f} ms", sandbox.id(),
               request_id, outcome.exit_code, outcome.timed_out, ms);
}

ServiceResult<BufferedExec> run_buffered_exec(const std::shared_ptr<Sandbox>& sandbox,
                                              const ExecOptions& options,
                                              const std::string& request_id, Metrics& metrics) {
  if (auto runnable = begin_exec(*sandbox, options, request_id); !runnable)
    return std::unexpected(runnable.error());
  Sandbox::ExecGuard guard(*sandbox);
  auto oom_before = oom_kills(*sandbox);
  auto session = ExecSession::start(sandbox->live(), exec_start(options, *sandbox));
  if (!session) return std::unexpected(service::from_runtime(session.error()));
  CappedBuffer out_cap(options.max_output_bytes), err_cap(options.max_output_bytes);
  BufferedExec result;
  result.outcome = session->run(exec_deadline(options, *sandbox),
                                [&](OutputStream stream, std::string_view data) {
                                  if (stream == OutputStream::kStdout) {
                                    result.out.append(out_cap.admit(data));
                                  } else {
                                    result.err.append(err_cap.admit(data));
                                  }
                                  return true;
                                });
  auto oom_after = oom_kills(*sandbox);
  result.oom_killed = oom_before && oom_after && *oom_after > *oom_before;
  result.truncated = out_cap.truncated || err_cap.truncated;
  finish_exec(*sandbox, request_id, options, result.outcome, metrics);
  return result;
}

ServiceResult<StreamedExec> start_streamed_exec(const std::shared_ptr<Sandbox>& sandbox,
                                                const ExecOptions& options,
                                                const std::string& request_id) {
  if (auto runnable = begin_exec(*sandbox, options, request_id); !runnable)
    return std::unexpected(runnable.error());
  auto guard = std::make_shared<Sandbox::ExecGuard>(*sandbox);
  auto session = ExecSession::start(sandbox->live(), exec_start(options, *sandbox));
  if (!session) return std::unexpected(service::from_runtime(session.error()));
  return StreamedExec{std::make_shared<ExecSession>(std::move(*session)),
                      exec_deadline(options, *sandbox),
                      std::move(guard),
                      {}};
}

ServiceResult<std::shared_ptr<BackgroundProcess>> start_background_exec(
    const std::shared_ptr<Sandbox>& sandbox, const ExecOptions& options,
    const std::string& request_id, uint64_t output_cap, std::optional<PtySize> pty) {
  if (auto runnable = begin_exec(*sandbox, options, request_id); !runnable)
    return std::unexpected(runnable.error());
  ExecStart start = exec_start(options, *sandbox);
  start.pty = pty;
  auto process = BackgroundProcess::start(sandbox->live(), start, sandbox->dir(), output_cap,
                                          process_exit_hook(sandbox));
  if (!process && process.error().kind == ErrorKind::kUnsupported)
    return service::service_error(ErrorKind::kConflict, "supervisor_outdated",
                                  process.error().message());
  if (!process) return std::unexpected(service::from_runtime(process.error()));
  sandbox->add_process(*process);
  sandbox->log().add({{"event", "process_started"},
                      {"request", request_id},
                      {"pid", (*process)->pid()},
                      {"argv", options.argv}});
  return *process;
}

ServiceResult<std::shared_ptr<BackgroundProcess>> find_process(const Sandbox& sandbox,
                                                               const std::string& pid) {
  std::shared_ptr<BackgroundProcess> process;
  try {
    process = sandbox.process(static_cast<pid_t>(std::stol(pid)));
  } catch (const std::exception&) {
  }
  if (!process)
    return service::service_error(ErrorKind::kNotFound, "process_not_found",
                                  "no background process " + pid);
  return process;
}

}  // namespace hutch::daemon
