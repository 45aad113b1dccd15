// `hutch run`: a spec from the command line, one sandbox, its outcome as an exit status.
#include <stdio.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "cli/options.h"
#include "cli/verbs.h"
#include "runtime/defaults.h"
#include "runtime/layers/layer_store.h"
#include "runtime/recipes/recipe.h"
#include "runtime/sandbox.h"
#include "seccomp/default_program.h"
#include "seccomp/profile.h"

namespace hutch::cli {
namespace {

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

void print_json(const RunResult& result, int status, int record_fd) {
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
  ::dprintf(record_fd, "%s\n", record.dump().c_str());
}

}  // namespace

Result<SandboxSpec> make_spec(const RunOptions& options, const std::string& state_dir) {
  SandboxSpec spec;
  spec.state_dir = state_dir;
  spec.argv = options.command;
  for (const std::string& arg : spec.argv) {
    if (arg.find('\0') != std::string::npos) return plain_error("command", "argument contains NUL");
  }
  spec.layers = options.layers;
  if (options.rootfs.starts_with("recipe:") || options.rootfs.starts_with("image:")) {
    // Only recipes need the layer store: a plain run never opens the state dir.
    auto store = HUTCH_TRY(layers::LayerStore::open(state_dir));
    auto rootfs = HUTCH_TRY(recipes::resolve_rootfs(store, options.rootfs));
    spec.layers.insert(spec.layers.end(), rootfs.layers.begin(), rootfs.layers.end());
    spec.lower_dirs = rootfs.lower_dirs;
  } else if (options.rootfs != "host") {
    spec.lower_dirs = {options.rootfs};
  }
  spec.upper_dir = options.upper_dir;
  if (!options.timeout.empty()) {
    auto timeout = HUTCH_TRY(parse_duration(options.timeout));
    spec.timeout = timeout;
  }
  std::vector<std::string> env;
  for (const std::string& kv : options.env) {
    auto parsed = HUTCH_TRY(parse_env(kv));
    env.push_back(parsed);
  }
  spec.env = sandbox_environment(options.uid, env);
  spec.workdir = options.workdir;
  HUTCH_TRY(check_hostname(options.hostname));
  spec.hostname = options.hostname;
  spec.net = options.net == "none" ? NetMode::kNone : NetMode::kLoopback;
  for (const std::string& text : options.binds) {
    auto bind = HUTCH_TRY(parse_bind(text));
    spec.binds.push_back(bind);
  }
  spec.uid = options.uid;
  spec.gid = options.gid;
  spec.ids = {options.id_base, options.id_count};
  auto disk = HUTCH_TRY(parse_size(options.disk));
  spec.disk_bytes = disk;
  if (!options.memory.empty()) {
    auto memory = HUTCH_TRY(parse_size(options.memory));
    spec.limits.memory_bytes = memory;
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
  auto text = HUTCH_TRY(read_file(options.seccomp_profile));
  auto policy = HUTCH_TRY(parse_seccomp_profile(text));
  auto program = HUTCH_TRY(compile_seccomp(policy));
  spec.seccomp = std::move(program);
  return spec;
}

int run_spec(const RunOptions& options, const SandboxSpec& spec, UniqueFd netns, int record_fd) {
  auto result = run_sandbox(spec, std::move(netns));
  if (!result) {
    if (options.json) {
      std::fflush(stdout);
      ::dprintf(
          record_fd, "%s\n",
          nlohmann::json{
              {"exit_code", kExitRuntimeFailure},
              {"error", {{"step", result.error().step}, {"message", result.error().message()}}}}
              .dump()
              .c_str());
    }
    return fail(result.error());
  }
  int status = exit_status(*result);
  if (options.json) print_json(*result, status, record_fd);
  return status;
}

int run(const RunOptions& options, const std::string& state_dir) {
  auto spec = make_spec(options, state_dir);
  if (!spec) return fail(spec.error());
  return run_spec(options, *spec);
}

}  // namespace hutch::cli
