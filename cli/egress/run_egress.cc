// `hutch run --net filtered|open` and `hutch recipe build` with such a network in recipe.json.
// The sandbox runs in a network namespace with the egress path (net/egress_path.h), whose
// listeners the network engine of this process serves (daemon/service/network_service.h) until
// the sandbox is gone.
//
// Two processes, because of what a fork copies:
// - This one (the host side) makes the namespace and binds its listeners, then forks the runner
//   while it is still single-threaded: the runner forks the sandbox (run_sandbox), and a fork
//   from a process with threads could inherit a lock another thread held.
// - Only after that fork does the host side make what the sandbox must never hold: the CA key and
//   the secrets' values. The sandbox's init is a fork of the runner that never execs, so the
//   runner's memory must not have them. The runner wipes its copy of the --secret-from-env
//   variables for the same reason.
// - The host side starts the engine, attaches the listeners and sends the runner the environment
//   to add (the trust variables, the secrets' placeholders). Only then does the runner start the
//   sandbox, so its first connection finds the engine serving.
#include "cli/egress/run_egress.h"

#include <poll.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "daemon/codec/connection_log.h"
#include "daemon/json_codec.h"
#include "daemon/metrics.h"
#include "daemon/service/egress_pool.h"
#include "daemon/service/host_address_watch.h"
#include "daemon/service/network_service.h"
#include "daemon/service/sandbox_trust.h"
#include "daemon/service/secrets.h"
#include "net/tls/sandbox_ca.h"
#include "net/tls/trust_bundle.h"
#include "recipes/recipe_json.h"
#include "runtime/cgroup/stale.h"
#include "runtime/process/pidfd.h"

namespace hutch::cli {
namespace {

using daemon::service::NetworkService;
using nlohmann::json;

// How long, after the sandbox is gone, the engine may take to log the connections it still had
// (each is logged when its relay ends).
constexpr auto kDrainWait = std::chrono::seconds(2);
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// The policy of the run: --net-policy's file (PUT .../network's body, its mode optional), then
// --allow and --deny added, checked as hutchd checks a create's.
Result<net::Policy> run_policy(const RunOptions& options) {
  json body = json::object();
  if (!options.net_policy.empty()) {
    auto text = HUTCH_TRY(read_file(options.net_policy));
    try {
      body = json::parse(text);
    } catch (const std::exception& e) {
      return plain_error("--net-policy", options.net_policy + ": " + e.what());
    }
    if (!body.is_object())
      return plain_error("--net-policy", options.net_policy + ": not a JSON object");
    if (body.contains("mode") && body["mode"] != options.net)
      return plain_error("--net-policy", options.net_policy + " says mode " + body["mode"].dump() +
                                             ", --net says " + options.net);
  }
  body["mode"] = options.net;
  for (const auto& [key, rules] : {std::pair{"allow", &options.allow}, {"deny", &options.deny}}) {
    if (rules->empty()) continue;
    if (!body.contains(key)) body[key] = json::array();
    if (!body[key].is_array())
      return plain_error("--net-policy", std::string(key) + ": not a list");
    for (const std::string& rule : *rules) body[key].push_back(rule);
  }
  try {
    return daemon::parse_network(body);
  } catch (const std::exception& e) {
    return plain_error("network policy", e.what());
  }
}

// recipe.json's network, checked as hutchd checks a bake's.
Result<net::Policy> bake_policy(const std::string& recipe_dir) {
  auto text = HUTCH_TRY(read_file(recipe_dir + "/recipe.json"));
  auto settings = HUTCH_TRY(recipes::parse_recipe_json(text));
  if (!settings.network) return plain_error("recipe.json", "names no network");
  try {
    return daemon::parse_network(json::parse(*settings.network));
  } catch (const std::exception& e) {
    return plain_error("recipe.json", std::string("network: ") + e.what());
  }
}

// The environment the sandbox gets from the host side, one "K=V" per line, each name not set by
// --env already.
void add_environment(SandboxSpec& spec, const std::string& lines) {
  size_t start = 0;
  while (start < lines.size()) {
    size_t end = lines.find('\n', start);
    if (end == std::string::npos) end = lines.size();
    std::string entry = lines.substr(start, end - start);
    start = end + 1;
    const std::string prefix = entry.substr(0, entry.find('=') + 1);
    bool set = false;
    for (const std::string& existing : spec.env) set = set || existing.starts_with(prefix);
    if (!set) spec.env.push_back(std::move(entry));
  }
}

// What the runner does once the host side said go: runs the sandbox in `netns`, with
// `environment` ("K=V" lines) added, writes a --json record to `record_fd`, and returns the exit
// status.
using RunnerBody =
    std::function<int(UniqueFd netns, const std::string& environment, int record_fd)>;

// All `fd` holds until its writer closes it; nullopt on a read error.
std::optional<std::string> read_to_end(int fd) {
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return std::nullopt;
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

// The runner: waits for the host side's go, then runs `body`. Never returns.
[[noreturn]] void runner(const RunOptions& options, const RunnerBody& body, UniqueFd netns,
                         UniqueFd from_host, UniqueFd record, pid_t host) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != host) ::_exit(kExitRuntimeFailure);
  for (const std::string& name : options.secret_from_env) {
    if (char* value = ::getenv(name.c_str())) ::explicit_bzero(value, std::strlen(value));
  }
  // No go: the host side failed, and said why.
  const std::optional<std::string> message = read_to_end(from_host.get());
  if (!message || !message->starts_with("go\n")) ::_exit(kExitRuntimeFailure);
  const int status =
      body(std::move(netns), message->substr(3), record ? record.get() : STDOUT_FILENO);
  std::fflush(nullptr);
  ::_exit(status);
}

// A 0700 dir in $TMPDIR (or /tmp) for a run's CA, removed with this. Its name holds its owner's
// identity, as hutch's cgroup ids do (runtime/cgroup/stale.h): a run killed before it could
// remove its dir leaves one the next run removes.
class PrivateDir {
 public:
  static constexpr std::string_view kPrefix = "hutch-egress-";
  static constexpr size_t kSuffix = 7;  // mkdtemp's "-XXXXXX"

  static Result<PrivateDir> make() {
    const std::filesystem::path tmp = temp_dir();
    sweep(tmp);
    const std::string owner = HUTCH_TRY(make_sandbox_cgroup_id(0));
    std::string path = (tmp / (std::string(kPrefix) + owner + "-XXXXXX")).string();
    if (::mkdtemp(path.data()) == nullptr) return sys_error("mkdtemp", path);
    return PrivateDir(std::move(path));
  }
  PrivateDir(PrivateDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  PrivateDir& operator=(PrivateDir&&) = delete;
  ~PrivateDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  explicit PrivateDir(std::string path) : path_(std::move(path)) {}

  static std::filesystem::path temp_dir() {
    std::error_code no_tmp;
    std::filesystem::path tmp = std::filesystem::temp_directory_path(no_tmp);
    return no_tmp ? std::filesystem::path("/tmp") : tmp;
  }

  // Removes the dirs of runs that are gone: only ours in form (a 0700 directory this uid owns,
  // which no other user can have made or changed) and only when the owner is provably dead.
  static void sweep(const std::filesystem::path& tmp) {
    std::error_code error;
    for (const auto& entry : std::filesystem::directory_iterator(tmp, error)) {
      const std::string name = entry.path().filename();
      if (!name.starts_with(kPrefix) || name.size() <= kPrefix.size() + kSuffix) continue;
      const std::string owner = name.substr(kPrefix.size(), name.size() - kPrefix.size() - kSuffix);
      struct stat st {};
      if (::lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) ||
          st.st_uid != ::geteuid() || (st.st_mode & 07777) != 0700 || cgroup_owner_alive(owner))
        continue;
      std::error_code ignored;
      std::filesystem::remove_all(entry.path(), ignored);
    }
  }

  std::string path_;
};

// The host side's end of the run: what it made, undone on every path.
class HostSide {
 public:
  HostSide() = default;
  HostSide(const HostSide&) = delete;
  HostSide& operator=(const HostSide&) = delete;
  ~HostSide() {
    if (follower_.joinable()) {
      stop_ = true;
      follower_.join();
    }
    if (service_) service_->detach(id_);
  }

  // The engine serving `listeners` as `id`; the sandbox's CA kept in `trust_dir`, whose public
  // files the sandbox binds, or ("") in memory only, nothing of it in the sandbox (a bake: its
  // layer must not hold one). Returns the environment to add to the sandbox's.
  Result<std::string> start(const RunOptions& options, const net::Policy& policy,
                            net::EgressListeners listeners, std::string id,
                            const std::string& trust_dir) {
    id_ = std::move(id);
    policy_ = policy;
    auto secrets = std::make_shared<daemon::service::SecretStore>();
    HUTCH_TRY(daemon::service::load_secret_options(*secrets, options.secrets_file,
                                                   options.secret_from_env));
    if (auto known = daemon::service::check_inject_secrets(policy, secrets.get()); !known)
      return plain_error("network policy", known.error().message);
    daemon::service::SandboxTrust trust;
    if (trust_dir.empty()) {
      trust.ca = HUTCH_TRY(net::tls::SandboxCa::create({.label = "bake " + id_}));
      trust.placeholder_key = HUTCH_TRY(net::new_placeholder_key());
    } else {
      trust = HUTCH_TRY(daemon::service::make_trust_dir(trust_dir + "/" +
                                                        std::string(daemon::service::kTrustDir)));
    }

    daemon::service::NetworkOptions network;
    network.netns_ahead = 0;
    network.watch_host_addresses = true;
    network.secrets = secrets;
    HUTCH_TRY(daemon::service::set_test_network_options(
        network, options.net_upstream_netns, options.net_resolve, options.net_upstream_ca));
    service_ = HUTCH_TRY(NetworkService::create(std::move(network), metrics_));
    HUTCH_TRY(service_->attach_unsupervised(id_, policy, std::move(listeners), std::move(trust)));
    if (!options.net_log.empty()) HUTCH_TRY(follow_log(options.net_log));

    if (trust_dir.empty()) return std::string();
    std::string environment;
    for (const auto& entry : net::tls::trust_environment(daemon::service::kTrustBundlePath,
                                                         daemon::service::kTrustCaPath))
      environment += entry.name + "=" + entry.value + "\n";
    // A secret's name spelled as a variable holds its placeholder, as in hutchd's sandboxes.
    for (const auto& [secret, placeholder] : service_->status(id_, policy).placeholders)
      environment += secret + "=" + placeholder + "\n";
    return environment;
  }

  // The sandbox's figures, for the --json record.
  json figures() const {
    auto stats = service_ ? service_->status(id_, policy_).stats : std::nullopt;
    if (!stats) return nullptr;
    return {{"mode", net::mode_name(policy_.mode)},
            {"connections", stats->connections},
            {"denied", stats->denied},
            {"dns_queries", stats->dns_queries},
            {"dns_denied", stats->dns_denied},
            {"bytes_up", stats->bytes_up},
            {"bytes_down", stats->bytes_down}};
  }

  // After the sandbox is gone: the engine's last decisions are logged before the detach.
  void drain() {
    if (!service_) return;
    const auto deadline = std::chrono::steady_clock::now() + kDrainWait;
    while (std::chrono::steady_clock::now() < deadline) {
      auto stats = service_->status(id_, policy_).stats;
      if (!stats || stats->active == 0) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

 private:
  Result<void> follow_log(const std::string& path) {
    FILE* out = stderr;
    if (path != "-") {
      out = std::fopen(path.c_str(), "we");
      if (out == nullptr) return sys_error("fopen", path + " (--net-log)");
    }
    follower_ = std::thread([this, out] {
      uint64_t after = 0;
      for (bool last = false; !last;) {
        last = stop_;  // one more read after the stop: what came before it
        for (const auto& entry :
             service_->decisions(id_, after, std::chrono::milliseconds(last ? 0 : 200), nullptr)) {
          std::fprintf(out, "%s\n",
                       daemon::connection_log_to_json(entry.log, entry.seq).dump().c_str());
          after = entry.seq;
        }
        std::fflush(out);
      }
      if (out != stderr) std::fclose(out);
    });
    return {};
  }

  std::string id_;
  net::Policy policy_;
  daemon::Metrics metrics_;
  std::unique_ptr<NetworkService> service_;
  std::atomic<bool> stop_ = false;
  std::thread follower_;
};

// Waits for the runner, passing on the signals hutch run forwards to its sandbox; returns its
// status as an exit status.
int wait_for_runner(pid_t runner_pid, const sigset_t& forwarded) {
  UniqueFd pidfd(pidfd_open_fd(runner_pid));
  UniqueFd signals(::signalfd(-1, &forwarded, SFD_CLOEXEC));
  for (bool exited = false; pidfd && signals && !exited;) {
    pollfd fds[2] = {{pidfd.get(), POLLIN, 0}, {signals.get(), POLLIN, 0}};
    if (::poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (fds[1].revents & POLLIN) {
      signalfd_siginfo info{};
      if (::read(signals.get(), &info, sizeof info) == sizeof info)
        pidfd_signal(pidfd.get(), static_cast<int>(info.ssi_signo));
    }
    exited = (fds[0].revents & POLLIN) != 0;
  }
  int status = 0;
  while (::waitpid(runner_pid, &status, 0) < 0) {
    if (errno != EINTR) return kExitRuntimeFailure;
  }
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return WEXITSTATUS(status);
}

// The runner's --json record (it has exited: the pipe holds all of it), printed with "network"
// added as the last line of stdout. Nothing when the runner wrote none (it died).
void print_record(int from_runner, json network) {
  json record = json::parse(read_to_end(from_runner).value_or(""), nullptr, false);
  if (!record.is_object()) return;
  record["network"] = std::move(network);
  std::fflush(stdout);
  std::printf("%s\n", record.dump().c_str());
  std::fflush(stdout);
}

// The runner runs `body` in the namespace with the egress path while this process's engine
// serves it with `policy`, the CA as HostSide::start says; returns the runner's exit status.
// With `record` (a run's --json), the runner's record comes back over a pipe, and this process
// prints it with the network's figures added.
int beside_engine(const RunOptions& options, const net::Policy& policy,
                  daemon::service::PreparedEgress prepared, const std::string& trust_dir,
                  bool record, const RunnerBody& body) {
  int go[2], records[2] = {-1, -1};
  if (::pipe2(go, O_CLOEXEC) != 0) return fail(sys_error("pipe2", "the runner's go").error());
  UniqueFd go_read(go[0]), go_write(go[1]);
  if (record && ::pipe2(records, O_CLOEXEC) != 0)
    return fail(sys_error("pipe2", "the runner's record").error());
  UniqueFd record_read(records[0]), record_write(records[1]);
  const pid_t host_pid = ::getpid();
  const pid_t runner_pid = ::fork();
  if (runner_pid < 0) return fail(sys_error("fork", "the runner").error());
  if (runner_pid == 0) {
    go_write.reset();
    record_read.reset();
    prepared.listeners = {};
    runner(options, body, std::move(prepared.netns), std::move(go_read), std::move(record_write),
           host_pid);
  }
  go_read.reset();
  record_write.reset();
  prepared.netns.reset();

  // A runner gone before it read its go: the write fails with EPIPE instead of killing us.
  ::signal(SIGPIPE, SIG_IGN);
  // Before any thread: every thread inherits the mask, so the signals wait for signalfd.
  sigset_t forwarded;
  sigemptyset(&forwarded);
  for (int sig : kForwardedSignals) sigaddset(&forwarded, sig);
  ::sigprocmask(SIG_BLOCK, &forwarded, nullptr);

  spdlog::set_default_logger(spdlog::stderr_logger_mt("hutch-egress"));
  spdlog::set_pattern("hutch: %v");
  spdlog::set_level(spdlog::level::warn);

  HostSide host;
  const std::string id = "run-" + std::to_string(host_pid);
  auto environment = host.start(options, policy, std::move(prepared.listeners), id, trust_dir);
  if (!environment) {
    go_write.reset();  // no go: the runner exits
    wait_for_runner(runner_pid, forwarded);
    return fail(environment.error());
  }
  const std::string message = "go\n" + *environment;
  for (size_t written = 0; written < message.size();) {
    const ssize_t n = ::write(go_write.get(), message.data() + written, message.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;  // the runner is gone: its status says why
    written += static_cast<size_t>(n);
  }
  go_write.reset();
  const int status = wait_for_runner(runner_pid, forwarded);
  host.drain();
  if (record_read) print_record(record_read.get(), host.figures());
  return status;
}

}  // namespace

int run_with_egress(const RunOptions& options, const std::string& state_dir) {
  auto policy = run_policy(options);
  if (!policy) return fail(policy.error());
  auto spec = make_spec(options, state_dir);
  if (!spec) return fail(spec.error());
  auto dir = PrivateDir::make();
  if (!dir) return fail(dir.error());
  auto prepared = daemon::service::prepare_egress();
  if (!prepared) return fail(prepared.error());
  spec->net = NetMode::kHostOwned;
  for (BindMount& bind : daemon::service::trust_binds(dir->path()))
    spec->binds.push_back(std::move(bind));
  return beside_engine(options, *policy, std::move(*prepared), dir->path(), options.json,
                       [&](UniqueFd netns, const std::string& environment, int record_fd) {
                         add_environment(*spec, environment);
                         return run_spec(options, *spec, std::move(netns), record_fd);
                       });
}

int recipe_build_with_egress(const RecipeOptions& recipe, const std::string& state_dir) {
  auto policy = bake_policy(recipe.dir);
  if (!policy) return fail(policy.error());
  auto prepared = daemon::service::prepare_egress();
  if (!prepared) return fail(prepared.error());
  return beside_engine(recipe.sandbox, *policy, std::move(*prepared), "", false,
                       [&](UniqueFd netns, const std::string&, int) {
                         return recipe_build(recipe, state_dir, std::move(netns));
                       });
}

}  // namespace hutch::cli
