// hutch: the command-line face of the runtime. Parses arguments, calls the runtime, maps the
// outcome to an exit status. No kernel work here.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>

#include "cli/options.h"
#include "recipes/recipe_json.h"
#include "runtime/features.h"
#include "runtime/layers/layer_store.h"
#include "runtime/recipes/recipe.h"
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
  spec.layers = options.layers;
  if (options.rootfs.starts_with("recipe:") || options.rootfs.starts_with("image:")) {
    // Only recipes need the layer store: a plain run never opens the state dir.
    auto store = layers::LayerStore::open(state_dir);
    if (!store) return std::unexpected(store.error());
    auto rootfs = recipes::resolve_rootfs(*store, options.rootfs);
    if (!rootfs) return std::unexpected(rootfs.error());
    spec.layers.insert(spec.layers.end(), rootfs->layers.begin(), rootfs->layers.end());
    spec.lower_dirs = rootfs->lower_dirs;
  } else if (options.rootfs != "host") {
    spec.lower_dirs = {options.rootfs};
  }
  spec.upper_dir = options.upper_dir;
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

struct RecipeOptions {
  std::string dir;
  std::string name;
  bool name_given = false;  // an explicit --name "" is an error, not the default
  std::string base;
  std::vector<std::string> env;
  RunOptions sandbox;
  bool json = false;
};

struct LayerOptions {
  std::vector<std::string> digests;
  bool json = false;
};

// recipe.json (recipes/recipe_json.h). Command-line options win over it.
Result<void> apply_recipe_json(RecipeOptions& recipe) {
  const std::string path = recipe.dir + "/recipe.json";
  if (access(path.c_str(), F_OK) != 0) return {};
  auto text = read_file(path);
  if (!text) return std::unexpected(text.error());
  auto parsed = recipes::parse_recipe_json(*text);
  if (!parsed) return std::unexpected(parsed.error());
  if (recipe.base.empty() && parsed->base) recipe.base = *parsed->base;
  parsed->env.insert(parsed->env.end(), recipe.env.begin(), recipe.env.end());
  recipe.env = std::move(parsed->env);
  if (recipe.sandbox.timeout.empty() && parsed->timeout) recipe.sandbox.timeout = *parsed->timeout;
  if (recipe.sandbox.memory.empty() && parsed->memory) recipe.sandbox.memory = *parsed->memory;
  if (!recipe.sandbox.pids) recipe.sandbox.pids = parsed->pids;
  if (!recipe.sandbox.cpus) recipe.sandbox.cpus = parsed->cpus;
  return {};
}

int recipe_build(RecipeOptions recipe, const std::string& state_dir) {
  if (auto r = apply_recipe_json(recipe); !r) return fail(r.error());
  std::vector<std::string> bake_env;
  for (const std::string& kv : recipe.env) {
    auto parsed = parse_env(kv);
    if (!parsed) return fail(parsed.error());
    bake_env.push_back(*parsed);
  }
  recipe.sandbox.env.clear();
  recipe.sandbox.command = {"true"};  // replaced by bake()
  auto spec = make_spec(recipe.sandbox, state_dir);
  if (!spec) return fail(spec.error());
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  recipes::BakeRequest request;
  auto dir = std::filesystem::weakly_canonical(recipe.dir);
  request.recipe_dir = dir.string();
  request.name = recipe.name_given ? recipe.name : dir.filename().string();
  request.base = recipe.base.empty() ? "host" : recipe.base;
  request.bake_env = std::move(bake_env);
  request.sandbox = std::move(*spec);
  auto outcome = recipes::bake(*store, request);
  if (!outcome) {
    if (recipe.json) {
      std::printf("%s\n",
                  nlohmann::json{{"name", request.name}, {"error", outcome.error().message()}}
                      .dump()
                      .c_str());
    }
    return fail(outcome.error());
  }
  if (recipe.json) {
    std::printf("%s\n", nlohmann::json{{"name", request.name},
                                       {"digest", outcome->digest},
                                       {"cached", outcome->cached}}
                            .dump()
                            .c_str());
  } else {
    std::printf("%s %s %s\n", request.name.c_str(), outcome->digest.c_str(),
                outcome->cached ? "cached" : "built");
  }
  return 0;
}

int recipe_list(bool json, const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  auto tags = store->tags();
  if (!tags) return fail(tags.error());
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [name, digest] : *tags) {
    auto info = store->get(digest);
    if (!info) return fail(info.error());
    if (json) {
      out.push_back({{"name", name},
                     {"digest", digest},
                     {"created", info->manifest.created},
                     {"size", info->manifest.size},
                     {"base", info->manifest.base}});
    } else {
      std::printf("%-24s %s %10llu bytes\n", name.c_str(), digest.c_str(),
                  static_cast<unsigned long long>(info->manifest.size));
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int layers_list(bool json, const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  auto all = store->list();
  if (!all) return fail(all.error());
  nlohmann::json out = nlohmann::json::array();
  for (const layers::LayerInfo& layer : *all) {
    if (json) {
      out.push_back({{"digest", layer.digest},
                     {"parents", layer.manifest.parents},
                     {"created", layer.manifest.created},
                     {"size", layer.manifest.size},
                     {"built_by", layer.manifest.built_by}});
    } else {
      std::printf("%s %10llu bytes  %s\n", layer.digest.c_str(),
                  static_cast<unsigned long long>(layer.manifest.size),
                  layer.manifest.built_by.c_str());
    }
  }
  if (json) std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

int layers_du(const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  auto all = store->list();
  if (!all) return fail(all.error());
  uint64_t total = 0;
  for (const layers::LayerInfo& layer : *all) {
    std::error_code ignored;
    const uint64_t image = std::filesystem::file_size(store->image_path(layer.digest), ignored);
    total += layer.manifest.size + (ignored ? 0 : image);
  }
  std::printf("%zu layers, %llu bytes (trees and images)\n", all->size(),
              static_cast<unsigned long long>(total));
  return 0;
}

int layers_remove(const std::vector<std::string>& digests, const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  auto in_use = recipes::layers_in_use(*store);
  if (!in_use) return fail(in_use.error());
  for (const std::string& digest : digests) {
    auto info = store->get(digest);
    if (!info) return fail(info.error());
    if (std::ranges::find(*in_use, info->digest) != in_use->end())
      return fail(
          plain_error("layers rm", info->digest + " is in use by a running sandbox").error());
    if (auto r = store->remove(info->digest); !r) return fail(r.error());
  }
  return 0;
}

int layers_gc(const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) return fail(store.error());
  auto in_use = recipes::layers_in_use(*store);
  if (!in_use) return fail(in_use.error());
  auto removed = store->gc(*in_use);
  if (!removed) return fail(removed.error());
  for (const std::string& digest : *removed) std::printf("removed %s\n", digest.c_str());
  return 0;
}

// The verbs that talk to hutchd are served by the helper hutch-client (helper_path): it
// links cpp-httplib, which exists only as a shared library, and hutch stays static.
constexpr std::string_view kClientVerbs[] = {"create", "ls",    "inspect", "exec", "cp",
                                             "rm",     "pause", "resume",  "logs"};

// `hutch image ...`, also after a leading `--state-dir DIR`, which hutch-image takes as well.
bool is_image_verb(int argc, char** argv) {
  int verb = 1;
  if (argc > 2 && std::string_view(argv[1]) == "--state-dir") verb = 3;
  if (argc > 1 && std::string_view(argv[1]).starts_with("--state-dir=")) verb = 2;
  return argc > verb && std::string_view(argv[verb]) == "image";
}

bool is_client_verb(const char* arg) {
  return std::ranges::find(kClientVerbs, std::string_view(arg)) != std::end(kClientVerbs);
}

// A helper executable of hutch's: beside this binary in the build tree (build/hutch-client), or
// in PREFIX/libexec/hutch/ once installed as PREFIX/bin/hutch. The first of the two that exists.
Result<std::string> helper_path(std::string_view name) {
  std::error_code error;
  std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) return sys_error("readlink", "/proc/self/exe", error.value());
  std::filesystem::path beside = self.parent_path() / name;
  std::filesystem::path installed = self.parent_path().parent_path() / "libexec/hutch" / name;
  int err = ENOENT;  // the more telling errno: EACCES on a helper that is there
  for (const std::filesystem::path& candidate : {beside, installed}) {
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
    if (errno != ENOENT) err = errno;
  }
  return sys_error("access",
                   std::string(name) + " at " + beside.string() + " or " + installed.string(), err);
}

// Replaces this process with the helper executable `name` (same argv); returns only on
// failure. `serves` says what it is for, in the error.
int exec_companion(char** argv, std::string_view name, std::string_view serves) {
  auto path = helper_path(name);
  if (!path) return fail(path.error());
  ::execv(path->c_str(), argv);
  return fail(sys_error("execv", *path + " (it serves " + std::string(serves) + ")").error());
}

int info(bool json) {
  std::vector<Feature> features = probe_features();
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const Feature& f : features) {
      out.push_back({{"name", f.name},
                     {"available", f.available},
                     {"detail", f.detail},
                     {"needed_for", f.needed_for}});
    }
    std::printf("%s\n", nlohmann::json{{"features", out}}.dump(2).c_str());
  } else {
    for (const Feature& f : features) {
      std::printf("%-36s %-4s %s\n", f.name.c_str(), f.available ? "yes" : "no", f.detail.c_str());
      if (!f.available) std::printf("%-36s      without it: %s\n", "", f.needed_for.c_str());
    }
  }
  bool all = std::ranges::all_of(features, [](const Feature& f) { return f.available; });
  return all ? 0 : 1;
}

}  // namespace
}  // namespace hutch::cli

int main(int argc, char** argv) {
  using namespace hutch::cli;
  if (argc > 1 && is_client_verb(argv[1]))
    return exec_companion(argv, "hutch-client", "hutch's hutchd verbs");
  // `hutch image ...` is served by hutch-image: it links libarchive, whose static dependencies
  // (compression libraries) are not all available as archives.
  if (is_image_verb(argc, argv)) return exec_companion(argv, "hutch-image", "hutch image");
  CLI::App app{"hutch: lightweight Linux sandboxes from namespaces, overlayfs and seccomp"};
  app.footer(
      "Verbs served by hutchd (see hutch VERB --help): create, ls, inspect, exec, cp, rm, pause,\n"
      "resume, logs. They find it at --socket PATH ($HUTCH_SOCKET, default\n"
      "/run/hutch/hutchd.sock) or --url http://HOST:PORT with --token-file; they exit 125 when\n"
      "hutchd answers an error or cannot be reached (exec: the command's own status).\n"
      "hutch image export|load|import|ls|rm (see hutch image --help): move layers between\n"
      "machines as tar streams, import rootfs/OCI/docker images as --rootfs image:NAME, list and\n"
      "remove them (served by hutch-image).");
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

  RecipeOptions recipe;
  CLI::App* recipe_cmd = app.add_subcommand("recipe", "Bake and list recipes (setup.sh layers)");
  recipe_cmd->require_subcommand(1);
  CLI::App* build_cmd = recipe_cmd->add_subcommand(
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
  CLI::App* recipe_ls_cmd = recipe_cmd->add_subcommand("ls", "List recipes");
  recipe_ls_cmd->add_flag("--json", recipe.json, "JSON output");

  LayerOptions layer_options;
  CLI::App* layers_cmd = app.add_subcommand("layers", "The layer store: ls, du, rm, gc");
  layers_cmd->require_subcommand(1);
  CLI::App* layers_ls_cmd = layers_cmd->add_subcommand("ls", "List layers");
  layers_ls_cmd->add_flag("--json", layer_options.json, "JSON output");
  CLI::App* layers_du_cmd = layers_cmd->add_subcommand("du", "Disk use of the store");
  CLI::App* layers_rm_cmd = layers_cmd->add_subcommand("rm", "Remove layers (not tagged ones)");
  layers_rm_cmd->add_option("digest", layer_options.digests, "sha256:... (or the hex)")->required();
  CLI::App* layers_gc_cmd =
      layers_cmd->add_subcommand("gc", "Remove layers no recipe, snapshot or sandbox uses");

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int code = app.exit(e);
    return code == 0 ? 0 : kExitRuntimeFailure;
  }
  if (run_cmd->parsed()) return run(options, state_dir);
  recipe.name_given = build_cmd->count("--name") > 0;
  if (build_cmd->parsed()) return recipe_build(recipe, state_dir);
  if (recipe_ls_cmd->parsed()) return recipe_list(recipe.json, state_dir);
  if (layers_ls_cmd->parsed()) return layers_list(layer_options.json, state_dir);
  if (layers_du_cmd->parsed()) return layers_du(state_dir);
  if (layers_rm_cmd->parsed()) return layers_remove(layer_options.digests, state_dir);
  if (layers_gc_cmd->parsed()) return layers_gc(state_dir);
  return info(info_json);
}
