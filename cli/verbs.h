// The verbs `hutch` runs itself (`hutch run`, recipe, layers, info) and the dispatch of the
// others to its companion executables. Each verb returns the process's exit status; main.cc only
// parses the command line (CLI11) and calls one of them.
#pragma once

#include <unistd.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"
#include "runtime/cgroup/plan.h"
#include "runtime/spec.h"

namespace CLI {
class App;
}

namespace hutch::cli {

// Exit statuses of `hutch run`, as documented in README.md.
constexpr int kExitTimeout = 124;
constexpr int kExitRuntimeFailure = 125;
constexpr int kExitCannotExecute = 126;
constexpr int kExitNotFound = 127;

// Prints "hutch: <message>" on stderr and returns kExitRuntimeFailure.
int fail(const Error& error);
// A whole host file.
Result<std::string> read_file(const std::string& path);

// run_verb.cc
struct RunOptions {
  std::string rootfs = "host";
  std::vector<std::string> layers;
  std::string upper_dir;
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
  // --net filtered|open only: hutch-egress serves those runs (cli/egress/run_egress.h).
  std::vector<std::string> allow, deny;  // rules (net/policy.h)
  std::string net_policy;                // a JSON file: PUT .../network's body
  std::string secrets_file;              // NAME=value lines for inject rules
  std::vector<std::string> secret_from_env;
  std::string net_log;  // the decisions as NDJSON, "-": stderr
  // Tests only (HUTCH_TEST_NET=1), as hutchd's options of the same names.
  std::string net_upstream_netns, net_upstream_ca;
  std::vector<std::string> net_resolve;
};

// commands.cc: --state-dir (default $HUTCH_STATE_DIR, else /var/lib/hutch), shared by hutch and
// hutch-egress.
void add_state_dir_option(CLI::App& app, std::string& state_dir);
// commands.cc: the `run` subcommand and its options, shared by hutch and hutch-egress.
CLI::App* add_run_command(CLI::App& app, RunOptions& options);
// --net filtered or open: the run needs the network engine, in hutch-egress.
bool run_needs_egress(const RunOptions& options);
// The options given that only filtered and open networks take, as "--allow, --net-log" ("":
// none).
std::string egress_only_options(const RunOptions& options);
// Such options given to a run without them: an error naming them.
Result<void> check_run_net_options(const RunOptions& options);

// The spec of a `hutch run` (or of a bake's sandbox) from its options.
Result<SandboxSpec> make_spec(const RunOptions& options, const std::string& state_dir);
int run(const RunOptions& options, const std::string& state_dir);
// Runs `spec` (in `netns` when given: a host_owned spec's) and maps the outcome to the exit
// status, with the --json record when asked, written to `record_fd` (hutch-egress's runner hands
// it to the host side, which adds the network's figures).
int run_spec(const RunOptions& options, const SandboxSpec& spec, UniqueFd netns = {},
             int record_fd = STDOUT_FILENO);

// recipe_verbs.cc
struct RecipeOptions {
  std::string dir;
  std::string name;
  bool name_given = false;  // an explicit --name "" is an error, not the default
  std::string base;
  std::vector<std::string> env;
  RunOptions sandbox;
  bool json = false;
};

// commands.cc: `recipe build` and its options under `recipe_cmd`, shared as add_run_command.
CLI::App* add_recipe_build_command(CLI::App& recipe_cmd, RecipeOptions& recipe);
// Whether DIR/recipe.json gives setup.sh a filtered or open network: the bake then runs in
// hutch-egress, beside the engine. Errors: recipe.json's, a network that is not one, and the
// engine's options given without such a network.
Result<bool> recipe_needs_egress(const RecipeOptions& recipe);
// The bake; `netns` (hutch-egress's, for a filtered or open network in recipe.json) is the
// namespace setup.sh runs in.
int recipe_build(RecipeOptions recipe, const std::string& state_dir, UniqueFd netns = {});
int recipe_list(bool json, const std::string& state_dir);

// layer_verbs.cc
struct LayerOptions {
  std::vector<std::string> digests;
  bool json = false;
};

int layers_list(bool json, const std::string& state_dir);
int layers_du(const std::string& state_dir);
int layers_remove(const std::vector<std::string>& digests, const std::string& state_dir);
int layers_gc(const std::string& state_dir);

// info_verb.cc: the kernel features hutch uses; 1 when one is missing.
int info(bool json);

// companion.cc: the verbs other executables of hutch's serve.
// `hutch image ...`, also after a leading `--state-dir DIR`, which hutch-image takes as well.
bool is_image_verb(int argc, char** argv);
// A verb that talks to hutchd (create, ls, exec, ...).
bool is_client_verb(const char* arg);
// Replaces this process with the helper executable `name` (same argv); returns only on
// failure. `serves` says what it is for, in the error.
int exec_companion(char** argv, std::string_view name, std::string_view serves);

}  // namespace hutch::cli
