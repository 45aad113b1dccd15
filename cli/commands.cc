// The subcommands hutch-egress serves too, `run` and `recipe build`: hutch parses them, and
// hutch-egress parses the same argv again when hutch hands it a run or a bake with egress.
#include <CLI/CLI.hpp>
#include <cstdlib>
#include <string>

#include "cli/verbs.h"

namespace hutch::cli {
namespace {

void add_engine_test_options(CLI::App& command, RunOptions& options) {
  command.add_option("--net-upstream-netns", options.net_upstream_netns,
                     "Tests only (HUTCH_TEST_NET=1): the engine dials upstreams from this "
                     "network namespace");
  command
      .add_option("--net-resolve", options.net_resolve,
                  "Tests only (HUTCH_TEST_NET=1): NAME=ADDR, a static resolver instead of the "
                  "host's (repeatable)")
      ->allow_extra_args(false);
  command.add_option("--net-upstream-ca", options.net_upstream_ca,
                     "Tests only (HUTCH_TEST_NET=1): verify terminated upstreams with this PEM "
                     "file's CAs");
}

}  // namespace

void add_state_dir_option(CLI::App& app, std::string& state_dir) {
  state_dir = "/var/lib/hutch";
  if (const char* env = std::getenv("HUTCH_STATE_DIR"); env != nullptr && *env != '\0')
    state_dir = env;
  app.add_option("--state-dir", state_dir,
                 "State directory (default $HUTCH_STATE_DIR or /var/lib/hutch)");
}

CLI::App* add_run_command(CLI::App& app, RunOptions& options) {
  CLI::App* run_cmd =
      app.add_subcommand("run", "Run a command in a new sandbox, then remove the sandbox");
  run_cmd->add_option("--rootfs", options.rootfs,
                      "\"host\" (embedded default), a rootfs directory, recipe:NAME or image:NAME");
  run_cmd
      ->add_option("--layer", options.layers,
                   "Read-only layer DIR above the rootfs, topmost first (repeatable): a captured "
                   "upper dir")
      ->allow_extra_args(false);
  run_cmd->add_option("--upper-dir", options.upper_dir,
                      "Keep the writable layer in DIR/upper (not a tmpfs) after the run");
  run_cmd->add_option("--timeout", options.timeout,
                      "Kill the whole sandbox after DURATION (30s, 500ms, 2m); exit 124");
  run_cmd
      ->add_option("--env", options.env,
                   "K=V for the sandbox (repeatable); the host environment is never inherited")
      ->allow_extra_args(false);
  run_cmd->add_option("--workdir", options.workdir,
                      "Working directory inside (created if missing)");
  run_cmd->add_option("--hostname", options.hostname, "Hostname inside");
  run_cmd
      ->add_option("--net", options.net,
                   "none | loopback (default: new netns with loopback up) | filtered (egress "
                   "only as --allow/--deny/--net-policy say, through the network engine) | open "
                   "(every public address, through the engine)")
      ->check(CLI::IsMember({"none", "loopback", "filtered", "open"}));
  run_cmd
      ->add_option("--allow", options.allow,
                   "filtered: allow HOST, *.SUFFIX, IP, CIDR or any of them with :PORT "
                   "(repeatable)")
      ->allow_extra_args(false);
  run_cmd
      ->add_option("--deny", options.deny,
                   "filtered or open: deny as --allow's forms (repeatable; deny wins)")
      ->allow_extra_args(false);
  run_cmd->add_option("--net-policy", options.net_policy,
                      "filtered or open: a JSON file as PUT /v1/sandboxes/ID/network's body "
                      "(allow, deny, inject rules); --allow and --deny add to it");
  run_cmd->add_option("--secrets-file", options.secrets_file,
                      "NAME=value lines for the policy's inject rules (a regular file, mode 0600 "
                      "or 0400); the values never enter the sandbox");
  run_cmd
      ->add_option("--secret-from-env", options.secret_from_env,
                   "Take secret NAME from this process's environment variable NAME (repeatable)")
      ->allow_extra_args(false);
  run_cmd->add_option("--net-log", options.net_log,
                      "Write each network decision to FILE as an NDJSON line (\"-\": stderr)");
  add_engine_test_options(*run_cmd, options);
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
  return run_cmd;
}

CLI::App* add_recipe_build_command(CLI::App& recipe_cmd, RecipeOptions& recipe) {
  CLI::App* build_cmd = recipe_cmd.add_subcommand(
      "build", "Run DIR/setup.sh once in a fresh sandbox and keep its changes as a layer");
  build_cmd->add_option("dir", recipe.dir, "Recipe directory (setup.sh, optional recipe.json)")
      ->required();
  build_cmd->add_option("--name", recipe.name, "Tag of the result (default: the dir's name)");
  build_cmd->add_option("--base", recipe.base,
                        "host (default), a rootfs directory, recipe:NAME or image:NAME; overrides "
                        "recipe.json");
  build_cmd
      ->add_option("--env", recipe.env,
                   "K=V for setup.sh only (repeatable): never stored in the layer")
      ->allow_extra_args(false);
  build_cmd->add_option("--timeout", recipe.sandbox.timeout, "Kill setup.sh after DURATION");
  build_cmd->add_option("--memory", recipe.sandbox.memory, "Memory limit of the bake");
  build_cmd->add_option("--pids", recipe.sandbox.pids, "Process limit of the bake");
  build_cmd->add_option("--disk", recipe.sandbox.disk, "Cap of /tmp during the bake");
  build_cmd->add_flag("--json", recipe.json, "Print the outcome as JSON");
  build_cmd->add_option("--net-log", recipe.sandbox.net_log,
                        "With a filtered or open network in recipe.json: write each network "
                        "decision of setup.sh to FILE as an NDJSON line (\"-\": stderr)");
  add_engine_test_options(*build_cmd, recipe.sandbox);
  return build_cmd;
}

bool run_needs_egress(const RunOptions& options) {
  return options.net == "filtered" || options.net == "open";
}

std::string egress_only_options(const RunOptions& options) {
  std::string given;
  auto note = [&given](bool present, const char* name) {
    if (present) given += (given.empty() ? "" : ", ") + std::string(name);
  };
  note(!options.allow.empty(), "--allow");
  note(!options.deny.empty(), "--deny");
  note(!options.net_policy.empty(), "--net-policy");
  note(!options.secrets_file.empty(), "--secrets-file");
  note(!options.secret_from_env.empty(), "--secret-from-env");
  note(!options.net_log.empty(), "--net-log");
  note(!options.net_upstream_netns.empty(), "--net-upstream-netns");
  note(!options.net_resolve.empty(), "--net-resolve");
  note(!options.net_upstream_ca.empty(), "--net-upstream-ca");
  return given;
}

Result<void> check_run_net_options(const RunOptions& options) {
  if (run_needs_egress(options)) return {};
  const std::string given = egress_only_options(options);
  if (given.empty()) return {};
  const bool several = given.find(',') != std::string::npos;
  return plain_error("--net", given + (several ? " need" : " needs") +
                                  " --net filtered or open (the network is " + options.net + ")");
}

}  // namespace hutch::cli
