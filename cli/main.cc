// hutch: the command-line face of the runtime. Parses arguments, calls the runtime, maps the
// outcome to an exit status. No kernel work here.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/options.h"
#include "runtime/features.h"
#include "runtime/sandbox.h"
#include "seccomp/default_program.h"
#include "seccomp/profile.h"

namespace hutch::cli {
namespace {

// Exit statuses of `hutch run`, as documented in README.md.
constexpr int kExitTimeout = 124;
constexpr int kExitRuntimeFailure = 125;
constexpr int kExitCannotExecute = 126;
constexpr int kExitNotFound = 127;

struct RunOptions {
  std::string rootfs = "host";
  std::string timeout;
  std::vector<std::string> env;
  std::string workdir = "/";
  std::string hostname = "hutch";
  std::string net = "loopback";
  std::vector<std::string> binds;
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t id_base = IdMap{}.host_base;
  uint32_t id_count = IdMap{}.count;
  std::string disk = "1G";
  std::string memory;
  std::optional<uint64_t> pids;
  std::optional<double> cpus;
  std::optional<uint32_t> cpu_weight;
  bool no_limits = false;
  std::string cgroup_parent{hutch::kDefaultCgroupParent};
  std::string seccomp_profile;
  bool json = false;
  std::vector<std::string> command;
};

int fail(const Error& error) {
  std::fprintf(stderr, "hutch: %s\n", error.message().c_str());
  return kExitRuntimeFailure;
}

bool valid_hostname(const std::string& name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.') return false;
  }
  return true;
}

Result<std::string> read_file(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "re");
  if (file == nullptr) return sys_error("open", path);
  std::string text;
  char buffer[65536];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) text.append(buffer, n);
  std::fclose(file);
  return text;
}

Result<SandboxSpec> make_spec(const RunOptions& options, const std::string& state_dir) {
  SandboxSpec spec;
  spec.state_dir = state_dir;
  spec.argv = options.command;
  for (const std::string& arg : spec.argv) {
    if (arg.find('\0') != std::string::npos) return plain_error("command", "argument contains NUL");
  }
  if (options.rootfs != "host") spec.lower_dirs = {options.rootfs};
  if (!options.timeout.empty()) {
    auto timeout = parse_duration(options.timeout);
    if (!timeout) return std::unexpected(timeout.error());
    spec.timeout = *timeout;
  }
  std::vector<std::string> env;
  for (const std::string& kv : options.env) {
    auto parsed = parse_env(kv);
    if (!parsed) return std::unexpected(parsed.error());
    env.push_back(*parsed);
  }
  spec.env = sandbox_environment(env, options.uid);
  spec.workdir = options.workdir;
  if (!valid_hostname(options.hostname)) {
    return plain_error("hostname", "\"" + options.hostname + "\" is not 1-64 of [A-Za-z0-9.-]");
  }
  spec.hostname = options.hostname;
  spec.net = options.net == "none" ? NetMode::kNone : NetMode::kLoopback;
  for (const std::string& text : options.binds) {
    auto bind = parse_bind(text);
    if (!bind) return std::unexpected(bind.error());
    spec.binds.push_back(*bind);
  }
  spec.uid = options.uid;
  spec.gid = options.gid;
  spec.ids = {options.id_base, options.id_count};
  auto disk = parse_size(options.disk);
  if (!disk) return std::unexpected(disk.error());
  spec.disk_bytes = *disk;
  if (!options.memory.empty()) {
    auto memory = parse_size(options.memory);
    if (!memory) return std::unexpected(memory.error());
    spec.limits.memory_bytes = *memory;
  }
  spec.limits.pids = options.pids;
  spec.limits.cpus = options.cpus;
  spec.limits.cpu_weight = options.cpu_weight;
  if (options.no_limits) {
    if (!options.memory.empty() || options.pids || options.cpus || options.cpu_weight) {
      return plain_error("limits", "--no-limits contradicts --memory/--pids/--cpus/--cpu-weight");
    }
    spec.cgroup = false;
  }
  spec.cgroup_parent = options.cgroup_parent;

  if (options.seccomp_profile.empty()) {
    spec.seccomp = default_seccomp_program();
    return spec;
  }
  auto text = read_file(options.seccomp_profile);
  if (!text) return std::unexpected(text.error());
  auto policy = parse_seccomp_profile(*text);
  if (!policy) return std::unexpected(policy.error());
  auto program = compile_seccomp(*policy);
  if (!program) return std::unexpected(program.error());
  spec.seccomp = std::move(*program);
  return spec;
}

int exit_status(const RunResult& result) {
  if (result.start_failed_at_exec) {
    std::fprintf(stderr, "hutch: %s: %s\n", result.start_failure->c_str(),
                 std::strerror(result.start_errno));
    return result.start_errno == ENOENT || result.start_errno == ENOTDIR ? kExitNotFound
                                                                         : kExitCannotExecute;
  }
  if (result.timed_out) return kExitTimeout;
  if (result.oom_killed)
    std::fprintf(stderr, "hutch: the memory limit's OOM killer killed a process of the sandbox\n");
  if (result.term_signal != 0) return 128 + result.term_signal;
  return result.exit_code;
}

void print_json(const RunResult& result, int status) {
  using std::chrono::duration;
  nlohmann::json record = {
      {"exit_code", status},
      {"signal",
       result.term_signal == 0 ? nlohmann::json(nullptr) : nlohmann::json(result.term_signal)},
      {"timed_out", result.timed_out},
      {"oom_killed", result.oom_killed},
      {"duration_ms", duration<double, std::milli>(result.duration).count()},
      {"cpu_user_ms", duration<double, std::milli>(result.cpu_user).count()},
      {"cpu_system_ms", duration<double, std::milli>(result.cpu_system).count()},
      {"peak_memory_bytes", result.peak_memory_bytes},
  };
  if (result.cpu_total) record["cpu_ms"] = duration<double, std::milli>(*result.cpu_total).count();
  if (result.peak_pids) record["peak_pids"] = *result.peak_pids;
  if (result.start_failure)
    record["start_failure"] = *result.start_failure + ": " + std::strerror(result.start_errno);
  std::fflush(stdout);
  std::printf("%s\n", record.dump().c_str());
}

int run(const RunOptions& options, const std::string& state_dir) {
  auto spec = make_spec(options, state_dir);
  if (!spec) return fail(spec.error());
  auto result = run_sandbox(*spec);
  if (!result) {
    if (options.json) {
      std::printf(
          "%s\n",
          nlohmann::json{
              {"exit_code", kExitRuntimeFailure},
              {"error", {{"step", result.error().step}, {"message", result.error().message()}}}}
              .dump()
              .c_str());
    }
    return fail(result.error());
  }
  int status = exit_status(*result);
  if (options.json) print_json(*result, status);
  return status;
}

int info(bool json) {
  std::vector<Feature> features = probe_features();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Feature& f : features) {
      out.push_back({{"name", f.name}, {"available", f.available}, {"detail", f.detail}});
    }
    std::printf("%s\n", nlohmann::json{{"features", out}}.dump(2).c_str());
  } else {
    for (const Feature& f : features) {
      std::printf("%-32s %-4s %s\n", f.name.c_str(), f.available ? "yes" : "no", f.detail.c_str());
    }
  }
  bool all = std::ranges::all_of(features, [](const Feature& f) { return f.available; });
  return all ? 0 : 1;
}

}  // namespace
}  // namespace hutch::cli

int main(int argc, char** argv) {
  using namespace hutch::cli;
  CLI::App app{"hutch: lightweight Linux sandboxes from namespaces, overlayfs and seccomp"};
  app.require_subcommand(1);
  std::string state_dir = "/var/lib/hutch";
  if (const char* env = std::getenv("HUTCH_STATE_DIR"); env != nullptr && *env != '\0')
    state_dir = env;
  app.add_option("--state-dir", state_dir,
                 "State directory (default $HUTCH_STATE_DIR or /var/lib/hutch)");

  RunOptions options;
  CLI::App* run_cmd =
      app.add_subcommand("run", "Run a command in a new sandbox, then remove the sandbox");
  run_cmd->add_option("--rootfs", options.rootfs,
                      "\"host\" (embedded default) or a rootfs directory");
  run_cmd->add_option("--timeout", options.timeout,
                      "Kill the whole sandbox after DURATION (30s, 500ms, 2m); exit 124");
  run_cmd
      ->add_option("--env", options.env,
                   "K=V for the sandbox (repeatable); the host environment is never inherited")
      ->allow_extra_args(false);
  run_cmd->add_option("--workdir", options.workdir,
                      "Working directory inside (created if missing)");
  run_cmd->add_option("--hostname", options.hostname, "Hostname inside");
  run_cmd->add_option("--net", options.net, "none | loopback (default: new netns with loopback up)")
      ->check(CLI::IsMember({"none", "loopback"}));
  run_cmd
      ->add_option("--bind", options.binds,
                   "SRC:DST[:ro|rw] host path inside, read-only unless rw (repeatable)")
      ->allow_extra_args(false);
  run_cmd->add_option("--uid", options.uid, "User id inside (default 0)");
  run_cmd->add_option("--gid", options.gid, "Group id inside (default 0)");
  run_cmd->add_option("--id-base", options.id_base, "Host id that the sandbox's id 0 maps to");
  run_cmd->add_option("--id-count", options.id_count, "How many ids are mapped");
  run_cmd->add_option("--disk", options.disk, "Cap of the writable layer and of /tmp (default 1G)");
  run_cmd->add_option("--memory", options.memory,
                      "Memory limit (512M, 2G); swap off; OOM kill -> exit 137");
  run_cmd->add_option("--pids", options.pids, "Maximum number of processes and threads")
      ->check(CLI::Range(1, 4194304));
  run_cmd->add_option("--cpus", options.cpus, "CPU time limit in CPUs (0.5 = half of one CPU)")
      ->check(CLI::Range(0.001, 4096.0));
  run_cmd->add_option("--cpu-weight", options.cpu_weight, "CPU weight 1..10000 (default 100)")
      ->check(CLI::Range(1, 10000));
  run_cmd->add_option("--cgroup-parent", options.cgroup_parent,
                      "Parent cgroup hutch owns at each hierarchy's root (default hutch)");
  run_cmd->add_flag(
      "--no-limits", options.no_limits,
      "No cgroup at all: no default limits, no cgroup stats (trusted workloads only)");
  run_cmd->add_option("--seccomp-profile", options.seccomp_profile,
                      "Seccomp profile JSON (default: built-in)");
  run_cmd->add_flag("--json", options.json, "Print a result record as the last line of stdout");
  run_cmd->add_option("command", options.command, "CMD [ARGS...] (after --)")->required();

  bool info_json = false;
  CLI::App* info_cmd = app.add_subcommand("info", "Report the kernel features hutch uses");
  info_cmd->add_flag("--json", info_json, "JSON output");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitRuntimeFailure;
  }
  if (run_cmd->parsed()) return run(options, state_dir);
  return info(info_json);
}
