#include "runtime/sandbox.h"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <ctime>

#include "runtime/base/unique_fd.h"
#include "runtime/launch.h"
#include "runtime/process/pidfd.h"
#include "runtime/process/sync.h"

namespace hutch {
namespace {

constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// Blocks the forwarded signals for the run and reads them from a signalfd; restores on exit.
class ForwardedSignals {
 public:
  ForwardedSignals() {
    sigset_t set;
    sigemptyset(&set);
    for (int sig : kForwardedSignals) sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, &saved_);
    fd_.reset(signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK));
  }
  ForwardedSignals(const ForwardedSignals&) = delete;
  ForwardedSignals& operator=(const ForwardedSignals&) = delete;
  ~ForwardedSignals() { sigprocmask(SIG_SETMASK, &saved_, nullptr); }
  int fd() const { return fd_.get(); }

 private:
  sigset_t saved_;
  UniqueFd fd_;
};

int64_t now_us() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000 + ts.tv_nsec / 1000;
}

std::chrono::microseconds to_us(const timeval& tv) {
  return std::chrono::microseconds(int64_t{tv.tv_sec} * 1'000'000 + tv.tv_usec);
}

Error error_from_child(const ChildError& error) {
  return Error{error.step, error.detail, error.err};
}

}  // namespace

Result<RunResult> run_sandbox(const SandboxSpec& input, UniqueFd netns) {
  const int64_t started = now_us();
  Prepared prepared;
  HUTCH_TRY(prepare(input, prepared, true));
  if (netns) {
    if (input.net != NetMode::kHostOwned)
      return plain_error("run sandbox", "a network namespace given for a spec not host_owned");
    prepared.prebuilt_netns = std::move(netns);
  }
  ForwardedSignals signals;
  if (signals.fd() < 0) return sys_error("signalfd", "SIGINT SIGTERM SIGHUP SIGQUIT");
  auto launched = HUTCH_TRY(launch_sandbox(prepared, true));
  std::optional<SandboxCgroup>& cgroup = launched.cgroup;
  SandboxProcess& init = *launched.init;
  UniqueFd& sync = launched.sync;

  RunResult result;
  std::optional<Error> setup_failure;
  bool workload_ended = false;
  auto take_message = [&](const SyncMessage& message) {
    if (message.kind == SyncMessage::Kind::kWorkloadExit) {
      workload_ended = true;
      result.exit_code = message.exit_code;
      result.term_signal = message.term_signal;
    } else if (setup_failure || result.start_failure) {
      return;  // the first failure is the one to report
    } else if (message.kind == SyncMessage::Kind::kExecFailed) {
      result.start_failure = std::string(message.error.step) + "(" + message.error.detail + ")";
      result.start_errno = message.error.err;
      result.start_failed_at_exec = true;
    } else if (message.kind == SyncMessage::Kind::kFailure) {
      setup_failure = error_from_child(message.error);
    }
  };

  const int64_t deadline =
      input.timeout
          ? started + std::chrono::duration_cast<std::chrono::microseconds>(*input.timeout).count()
          : INT64_MAX;
  bool sync_open = true;
  for (;;) {
    pollfd fds[3] = {{init.pidfd(), POLLIN, 0},
                     {signals.fd(), POLLIN, 0},
                     {sync_open ? sync.get() : -1, POLLIN, 0}};
    int timeout_ms = -1;
    if (deadline != INT64_MAX && !result.timed_out) {
      timeout_ms = static_cast<int>(std::max<int64_t>(0, (deadline - now_us() + 999) / 1000));
    }
    int ready = poll(fds, 3, timeout_ms);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return sys_error("poll", "sandbox events");
    }
    if (ready == 0) {
      result.timed_out = true;
      init.kill();  // pid 1 dying takes every process of the namespace with it
      continue;
    }
    if (fds[2].revents != 0) {
      SyncMessage message{};
      long n = recv_sync(sync.get(), &message);
      if (n > 0)
        take_message(message);
      else
        sync_open = false;
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info;
      while (read(signals.fd(), &info, sizeof info) == sizeof info) {
        pidfd_signal(init.pidfd(), static_cast<int>(info.ssi_signo));
      }
    }
    if (fds[0].revents & POLLIN) break;
  }

  rusage usage{};
  auto reaped = HUTCH_TRY(init.reap(&usage));
  // Messages sent just before init exited.
  for (SyncMessage message{};
       sync_open && recv_sync(sync.get(), &message, nullptr, nullptr, true) > 0;) {
    take_message(message);
  }
  if (setup_failure) return std::unexpected(*setup_failure);
  if (!workload_ended && !result.timed_out) {
    // Init died without reporting: a kill from outside or a runtime bug; report its status.
    if (reaped.si_code == CLD_EXITED)
      result.exit_code = reaped.si_status;
    else
      result.term_signal = reaped.si_status;
  }
  result.duration = std::chrono::microseconds(now_us() - started);
  result.cpu_user = to_us(usage.ru_utime);
  result.cpu_system = to_us(usage.ru_stime);
  result.peak_memory_bytes = static_cast<uint64_t>(usage.ru_maxrss) * 1024;
  if (!cgroup) return result;
  auto stats = HUTCH_TRY(cgroup->stats());
  result.oom_killed = stats.oom_kills.value_or(0) > 0;
  if (stats.cpu_usage_usec) result.cpu_total = std::chrono::microseconds(*stats.cpu_usage_usec);
  if (stats.memory_peak_bytes) result.peak_memory_bytes = *stats.memory_peak_bytes;
  result.peak_pids = stats.pids_peak;
  HUTCH_TRY(cgroup->destroy());
  return result;
}

}  // namespace hutch
