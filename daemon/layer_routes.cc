// Recipes, snapshots, forks, checkpoints and layer gc through hutchd: the HTTP face of
// runtime/layers (the store under hutchd's state dir, shared with `hutch recipe build`) and of
// LiveSandbox::snapshot.
//
// Tags the daemon makes for itself: `fork-<sandbox id>-<random>` (a fork's snapshot) and
// `cp-<sandbox id>-<name>` (a checkpoint). Both go when their sandbox is destroyed (or, after a
// crash, at the next gc), so the layers become collectable; clients cannot name recipes so.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <shared_mutex>
#include <string_view>

#include "daemon/errors.h"
#include "daemon/json_codec.h"
#include "daemon/server.h"
#include "runtime/layers/layer_store.h"
#include "runtime/process/sync.h"
#include "runtime/recipes/recipe.h"

extern char** environ;

namespace hutch::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxBakeLog = 1 << 20;
constexpr uint64_t kDefaultBakeTimeout = 3600;
constexpr uint64_t kMaxForks = 16;
constexpr size_t kMaxCheckpointName = 41;
constexpr std::string_view kForkPrefix = "fork-sb-";
constexpr std::string_view kCheckpointPrefix = "cp-sb-";

// Daemon-side operations that hold a layer between making it and tagging it (or between resolving
// a tag and the sandbox mounting it) take this shared; gc takes it exclusively, so a gc with a
// short grace cannot remove a layer in that window. (`hutch` CLI processes are covered by the
// store's grace period only.)
std::shared_mutex layer_use;

layers::LayerStore open_store(const std::string& state_dir) {
  auto store = layers::LayerStore::open(state_dir);
  if (!store) throw runtime_failure(store.error());
  return std::move(*store);
}

std::string random_hex(size_t bytes) {
  unsigned char buffer[16];
  while (getrandom(buffer, bytes, 0) != static_cast<ssize_t>(bytes)) {
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    out += kHex[buffer[i] >> 4];
    out += kHex[buffer[i] & 15];
  }
  return out;
}

bool internal_tag(std::string_view name) {
  return name.starts_with(kForkPrefix) || name.starts_with(kCheckpointPrefix);
}

void check_user_tag(const std::string& name, const std::string& field) {
  check_layer_name(name, field);
  if (internal_tag(name))
    throw bad_request(field + " \"" + name + "\": the prefixes fork-sb- and cp-sb- are hutchd's");
}

std::string checkpoint_tag(const std::string& id, const std::string& name) {
  return std::string(kCheckpointPrefix) + id.substr(3) + "-" + name;
}

// The overlay's lower entries travel as fds in one SCM_RIGHTS message (runtime/launch.cc): the host
// rootfs takes two (its skeleton and "/"), a rootfs directory one.
size_t max_layers(const std::string& base) {
  return static_cast<size_t>(kMaxPassedFds) - (base == "host" ? 2 : 1);
}

// Points `config` at the stack of tag `name` (its layer, then its parents).
void apply_stack(SandboxConfig& config, const layers::LayerStore& store, const std::string& name) {
  auto resolved = recipes::resolve_rootfs(store, "recipe:" + name);
  if (!resolved) {
    auto tag = store.resolve_tag(name);
    if (tag && !*tag) throw ApiError(404, "recipe_not_found", "no recipe or snapshot " + name);
    throw runtime_failure(resolved.error());
  }
  if (resolved->layers.size() > max_layers(resolved->base)) {
    throw ApiError(409, "too_many_layers",
                   name + " stacks " + std::to_string(resolved->layers.size()) +
                       " layers; overlayfs here takes at most " +
                       std::to_string(max_layers(resolved->base)) + " on base " + resolved->base);
  }
  config.rootfs = resolved->base;
  config.layer_digests = resolved->digests;
  config.layer_images = resolved->layers;
}

// A scratch directory on the store's filesystem (so adopt_tree renames instead of copying),
// removed on every path.
class SnapshotScratch {
 public:
  explicit SnapshotScratch(const std::string& state_dir) {
    const std::string parent = state_dir + "/snapshots-tmp";
    if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST)
      throw runtime_failure(sys_error("mkdir", parent).error());
    path_ = parent + "/" + random_hex(8);
    if (::mkdir(path_.c_str(), 0700) != 0) throw runtime_failure(sys_error("mkdir", path_).error());
  }
  SnapshotScratch(const SnapshotScratch&) = delete;
  SnapshotScratch& operator=(const SnapshotScratch&) = delete;
  ~SnapshotScratch() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string upper() const { return path_ + "/upper"; }

 private:
  std::string path_;
};

struct Snapshot {
  std::string digest;
  SnapshotStats stats;
  double duration_ms = 0;
};

// Captures the sandbox's upper dir as a layer over its own stack and tags it `tag`.
Snapshot snapshot_sandbox(SandboxRegistry& registry, Sandbox& sandbox, const std::string& tag) {
  auto started = Clock::now();
  layers::LayerStore store = open_store(registry.state_dir());
  SnapshotScratch scratch(registry.state_dir());
  Snapshot out;
  {
    // Against pause/resume/destroy meanwhile.
    std::lock_guard lifecycle(sandbox.lifecycle_mutex());
    auto stats = sandbox.live().snapshot(scratch.upper());
    // The supervisor thaws after copying; a paused sandbox goes back to sleep.
    if (sandbox.state() == SandboxState::kPaused) {
      if (auto frozen = sandbox.live().freeze(); !frozen) {
        spdlog::error("sandbox={} refreezing after a snapshot: {}", sandbox.id(),
                      frozen.error().message());
      }
    }
    if (!stats) throw runtime_failure(stats.error());
    out.stats = *stats;
  }
  layers::LayerManifest manifest;
  manifest.parents = sandbox.config().layer_digests;
  manifest.base = sandbox.config().rootfs;
  manifest.built_by = "snapshot of " + sandbox.id();
  std::shared_lock use(layer_use);
  auto layer = store.adopt_tree(scratch.upper(), manifest);
  if (!layer) throw runtime_failure(layer.error());
  if (auto tagged = store.tag(tag, layer->digest); !tagged) throw runtime_failure(tagged.error());
  out.digest = layer->digest;
  out.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  spdlog::info("sandbox={} snapshot {} -> {} ({} files, {} bytes, {:.1f} ms)", sandbox.id(), tag,
               out.digest, out.stats.files, out.stats.bytes, out.duration_ms);
  return out;
}

// Untags `prefix`* (best effort: runs after destroys, where nothing may throw).
void untag_prefix(layers::LayerStore& store, const std::string& prefix) {
  auto tags = store.tags();
  if (!tags) {
    spdlog::warn("listing tags: {}", tags.error().message());
    return;
  }
  for (const auto& [name, digest] : *tags) {
    if (!name.starts_with(prefix)) continue;
    if (auto r = store.untag(name); !r && r.error().err != ENOENT)
      spdlog::warn("untag {}: {}", name, r.error().message());
  }
}

// The sandbox id in an internal tag ("sb-" + 12 hex), "" for other tags.
std::string tag_owner(std::string_view name) {
  for (std::string_view prefix : {kForkPrefix, kCheckpointPrefix}) {
    if (name.starts_with(prefix) && name.size() >= prefix.size() + 12)
      return "sb-" + std::string(name.substr(prefix.size(), 12));
  }
  return "";
}

// ---- bake: `hutch recipe build` as a child process ----

std::string hutch_binary() {
  std::error_code error;
  fs::path self = fs::read_symlink("/proc/self/exe", error);
  if (!error) {
    // build/daemon/hutchd beside build/hutch, or both installed in one bin dir.
    for (const fs::path& dir : {self.parent_path(), self.parent_path().parent_path()}) {
      fs::path candidate = dir / "hutch";
      if (::access(candidate.c_str(), X_OK) == 0) return candidate;
    }
  }
  return "hutch";  // posix_spawnp searches PATH
}

struct BakeRun {
  int status = -1;  // the exit status; -1 when killed at the timeout
  std::string log;  // stdout and stderr interleaved, at most kMaxBakeLog
  bool truncated = false;
};

BakeRun run_bake(const std::vector<std::string>& args, std::chrono::seconds timeout) {
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) throw runtime_failure(sys_error("pipe2", "").error());
  UniqueFd read_end(pipe_fds[0]);
  UniqueFd write_end(pipe_fds[1]);
  std::vector<char*> argv;
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  // dup2 clears O_CLOEXEC on the copies: the pipe's own fds close at exec.
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDERR_FILENO);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  // hutchd blocks its stop signals for sigwait: the bake must not inherit that mask.
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
  pid_t pid = 0;
  int rc = ::posix_spawnp(&pid, argv[0], &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    errno = rc;
    throw runtime_failure(sys_error("posix_spawn", args[0]).error());
  }
  write_end.reset();
  BakeRun run;
  auto deadline = Clock::now() + timeout;
  bool killed = false;
  char buffer[16384];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0 && !killed) {
      ::kill(pid, SIGKILL);  // its sandbox dies with it (parent-death signal)
      killed = true;
    }
    pollfd ready{read_end.get(), POLLIN, 0};
    int n =
        ::poll(&ready, 1, killed ? 1000 : static_cast<int>(std::min<int64_t>(left.count(), 1000)));
    if (n < 0 && errno != EINTR) break;
    if (n <= 0) continue;
    ssize_t got = ::read(read_end.get(), buffer, sizeof buffer);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF: the bake and everything it started closed the pipe
    size_t room = kMaxBakeLog - run.log.size();
    run.log.append(buffer, std::min(room, static_cast<size_t>(got)));
    if (static_cast<size_t>(got) > room) run.truncated = true;
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  run.status = killed ? -1 : (WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  return run;
}

// The `--json` line hutch prints last.
json last_json_line(const std::string& log) {
  size_t end = log.size();
  while (end > 0) {
    size_t start = log.rfind('\n', end - 1);
    start = start == std::string::npos ? 0 : start + 1;
    std::string_view line(log.data() + start, end - start);
    if (line.starts_with("{")) {
      json parsed = json::parse(line, nullptr, false);
      if (parsed.is_object() && parsed.contains("name")) return parsed;
    }
    if (start == 0) break;
    end = start - 1;
  }
  return nullptr;
}

void post_recipe(const SandboxRegistry& registry, const httplib::Request& req,
                 httplib::Response& res) {
  json body = parse_body(req);
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (key != "dir" && key != "name" && key != "base" && key != "env" && key != "timeout_seconds")
      throw bad_request("unknown field \"" + key + "\"");
  }
  const std::string dir = string_field(body, "dir");
  check_no_nul(dir, "dir");
  struct stat st {};
  if (dir.empty() || dir[0] != '/' || ::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
    throw bad_request("dir must be an absolute path of a directory");
  std::string name = optional_string(body, "name").value_or(fs::path(dir).filename());
  check_user_tag(name, "name");
  std::vector<std::string> args = {
      hutch_binary(), "--state-dir", registry.state_dir(), "recipe", "build", dir, "--name", name};
  if (auto base = optional_string(body, "base")) {
    check_no_nul(*base, "base");
    args.insert(args.end(), {"--base", *base});
  }
  if (const json* env = optional_field(body, "env")) {
    if (!env->is_object()) throw bad_request("env must be an object of strings");
    for (const auto& [key, value] : env->items()) {
      if (!valid_env_key(key) || !value.is_string())
        throw bad_request("env: keys are [A-Za-z_][A-Za-z0-9_]*, values strings");
      check_no_nul(value.get_ref<const std::string&>(), "env." + key);
      // Values reach the child's argv only: never a log line of hutchd's.
      args.insert(args.end(), {"--env", key + "=" + value.get<std::string>()});
    }
  }
  args.push_back("--json");
  uint64_t timeout = optional_uint(body, "timeout_seconds").value_or(kDefaultBakeTimeout);
  if (timeout == 0 || timeout > 24 * 3600) throw bad_request("timeout_seconds must be 1..86400");

  BakeRun run;
  {
    std::shared_lock use(layer_use);
    run = run_bake(args, std::chrono::seconds(timeout));
  }
  json outcome = last_json_line(run.log);
  if (run.truncated) run.log += "\n[log truncated at 1 MiB]\n";
  if (run.status == 0 && outcome.is_object() && outcome.contains("digest")) {
    spdlog::info("recipe {} baked: {}{}", name, outcome["digest"].get<std::string>(),
                 outcome.value("cached", false) ? " (cached)" : "");
    send_json(res, 201,
              {{"name", name},
               {"digest", outcome["digest"]},
               {"cached", outcome.value("cached", false)},
               {"log", run.log}});
    return;
  }
  std::string message = run.status == -1
                            ? "the bake timed out after " + std::to_string(timeout) + " s"
                        : outcome.is_object() && outcome.contains("error")
                            ? outcome["error"].get<std::string>()
                            : "hutch recipe build exited with status " + std::to_string(run.status);
  spdlog::info("recipe {} bake failed: {}", name, message);
  send_json(res, 422,
            {{"error", {{"code", "bake_failed"}, {"message", message}, {"log", run.log}}}});
}

json recipe_list(const layers::LayerStore& store) {
  auto tags = store.tags();
  if (!tags) throw runtime_failure(tags.error());
  json out = json::array();
  for (const auto& [name, digest] : *tags) {
    if (internal_tag(name)) continue;
    auto info = store.get(digest);
    if (!info) continue;  // removed meanwhile
    out.push_back({{"name", name},
                   {"digest", digest},
                   {"created", iso8601(std::chrono::system_clock::from_time_t(
                                   static_cast<time_t>(info->manifest.created)))},
                   {"size", info->manifest.size},
                   {"base", info->manifest.base.empty() ? "host" : info->manifest.base}});
  }
  return out;
}

json snapshot_json(const std::string& name, const Snapshot& snapshot) {
  return {{"name", name},
          {"digest", snapshot.digest},
          {"files", snapshot.stats.files},
          {"bytes", snapshot.stats.bytes},
          {"frozen_ms", snapshot.stats.frozen.count() / 1000.0},
          {"duration_ms", snapshot.duration_ms}};
}

}  // namespace

std::shared_lock<std::shared_mutex> resolve_recipe(SandboxConfig& config,
                                                   const std::string& state_dir) {
  std::shared_lock use(layer_use);
  if (config.recipe.empty()) return use;
  if (config.rootfs != "host")
    throw bad_request("give either a recipe or a rootfs directory, not both");
  layers::LayerStore store = open_store(state_dir);
  apply_stack(config, store, config.recipe);
  return use;
}

void add_layer_routes(Routes& routes, DaemonContext& context) {
  SandboxRegistry& registry = context.registry;
  registry.set_on_destroyed([&registry](const std::string& id) {
    auto store = layers::LayerStore::open(registry.state_dir());
    if (!store) {
      spdlog::warn("sandbox={} dropping its checkpoints: {}", id, store.error().message());
      return;
    }
    untag_prefix(*store, std::string(kCheckpointPrefix) + id.substr(3) + "-");
    untag_prefix(*store, std::string(kForkPrefix) + id.substr(3) + "-");
  });

  routes.post("/v1/recipes",
              [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
                post_recipe(registry, req, res);
              });
  routes.get("/v1/recipes", [&registry](Call&, const httplib::Request&, httplib::Response& res) {
    send_json(res, 200, {{"recipes", recipe_list(open_store(registry.state_dir()))}});
  });
  routes.del("/v1/recipes/([^/]+)",
             [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
               const std::string name = req.matches[1].str();
               check_layer_name(name, "recipe name");
               layers::LayerStore store = open_store(registry.state_dir());
               if (auto r = store.untag(name); !r && r.error().err != ENOENT)
                 throw runtime_failure(r.error());
               res.status = 204;
             });

  const std::string one = "/v1/sandboxes/([A-Za-z0-9_-]+)";
  routes.post(
      one + "/snapshot", [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
        json body = parse_body(req);
        if (!body.is_object()) throw bad_request("the request body must be an object");
        const std::string name = string_field(body, "name");
        check_user_tag(name, "name");
        auto sandbox = or_throw(registry.get(sandbox_id(req)));
        send_json(res, 201, snapshot_json(name, snapshot_sandbox(registry, *sandbox, name)));
      });

  routes.post(one + "/fork", [&registry](Call& call, const httplib::Request& req,
                                         httplib::Response& res) {
    json body = parse_body(req);
    if (!body.is_object()) throw bad_request("the request body must be an object");
    uint64_t count = optional_uint(body, "count").value_or(1);
    if (count < 1 || count > kMaxForks) throw bad_request("count must be 1..16");
    std::optional<std::map<std::string, std::string>> labels;
    if (optional_field(body, "labels") != nullptr) {
      // The sandbox config's own label rules.
      labels = parse_sandbox_config(json{{"labels", body["labels"]}}).labels;
    }
    auto source = or_throw(registry.get(sandbox_id(req)));
    const std::string tag = std::string(kForkPrefix) + source->id().substr(3) + "-" + random_hex(4);
    Snapshot snapshot = snapshot_sandbox(registry, *source, tag);
    SandboxConfig config = source->config();
    config.recipe = tag;
    if (labels) config.labels = *labels;
    std::vector<std::shared_ptr<Sandbox>> forks;
    try {
      auto use = resolve_recipe(config, registry.state_dir());
      for (uint64_t i = 0; i < count; ++i)
        forks.push_back(or_throw(registry.create(config, call.request_id)));
    } catch (...) {
      // All or none.
      for (const auto& fork : forks)
        (void)registry.destroy(fork->id(), "fork request " + call.request_id + " failed");
      throw;
    }
    json list = json::array();
    for (const auto& fork : forks) list.push_back(fork->to_json());
    send_json(res, 201, {{"snapshot", snapshot_json(tag, snapshot)}, {"sandboxes", list}});
  });

  routes.post(one + "/checkpoints", [&registry](Call&, const httplib::Request& req,
                                                httplib::Response& res) {
    json body = parse_body(req);
    if (!body.is_object()) throw bad_request("the request body must be an object");
    const std::string name = string_field(body, "name");
    check_layer_name(name, "name", kMaxCheckpointName);
    auto sandbox = or_throw(registry.get(sandbox_id(req)));
    Snapshot snapshot = snapshot_sandbox(registry, *sandbox, checkpoint_tag(sandbox->id(), name));
    send_json(res, 201, snapshot_json(name, snapshot));
  });
  routes.get(one + "/checkpoints",
             [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
               auto sandbox = or_throw(registry.get(sandbox_id(req)));
               layers::LayerStore store = open_store(registry.state_dir());
               auto tags = store.tags();
               if (!tags) throw runtime_failure(tags.error());
               const std::string prefix = checkpoint_tag(sandbox->id(), "");
               json list = json::array();
               for (const auto& [tag, digest] : *tags) {
                 if (!tag.starts_with(prefix)) continue;
                 auto info = store.get(digest);
                 if (!info) continue;
                 list.push_back({{"name", tag.substr(prefix.size())},
                                 {"digest", digest},
                                 {"created", iso8601(std::chrono::system_clock::from_time_t(
                                                 static_cast<time_t>(info->manifest.created)))}});
               }
               send_json(res, 200, {{"checkpoints", list}});
             });
  routes.post(one + "/checkpoints/([^/]+)/rollback",
              [&registry](Call& call, const httplib::Request& req, httplib::Response& res) {
                const std::string name = req.matches[2].str();
                check_layer_name(name, "checkpoint name", kMaxCheckpointName);
                auto sandbox = or_throw(registry.get(sandbox_id(req)));
                const std::string tag = checkpoint_tag(sandbox->id(), name);
                SandboxConfig config = sandbox->config();
                layers::LayerStore store = open_store(registry.state_dir());
                std::shared_lock use(layer_use);
                auto digest = store.resolve_tag(tag);
                if (!digest) throw runtime_failure(digest.error());
                if (!*digest)
                  throw ApiError(404, "checkpoint_not_found",
                                 "sandbox " + sandbox->id() + " has no checkpoint " + name);
                apply_stack(config, store, tag);  // refuses a too deep stack before destroying
                auto replaced =
                    or_throw(registry.replace(sandbox, std::move(config), call.request_id));
                send_json(res, 200, replaced->to_json());
              });

  routes.post(
      "/v1/layers/gc", [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
        json body = parse_body(req);
        if (!body.is_object()) throw bad_request("the request body must be an object");
        uint64_t grace = optional_uint(body, "grace_seconds")
                             .value_or(static_cast<uint64_t>(layers::kDefaultGcGrace.count()));
        if (grace > 30ull * 24 * 3600) throw bad_request("grace_seconds is too large");
        layers::LayerStore store = open_store(registry.state_dir());
        std::unique_lock exclusive(layer_use);
        // Internal tags of sandboxes that are gone (a crash skipped their destroy).
        auto tags = store.tags();
        if (!tags) throw runtime_failure(tags.error());
        for (const auto& [name, digest] : *tags) {
          std::string owner = tag_owner(name);
          if (!owner.empty() && registry.find(owner) == nullptr) (void)store.untag(name);
        }
        std::vector<std::string> in_use;
        for (const auto& sandbox : registry.list()) {
          const auto& digests = sandbox->config().layer_digests;
          in_use.insert(in_use.end(), digests.begin(), digests.end());
        }
        auto attached = recipes::layers_in_use(store);
        if (!attached) throw runtime_failure(attached.error());
        in_use.insert(in_use.end(), attached->begin(), attached->end());
        auto removed = store.gc(in_use, std::chrono::seconds(grace));
        if (!removed) throw runtime_failure(removed.error());
        spdlog::info("layers gc: removed {} layers", removed->size());
        send_json(res, 200, {{"removed", *removed}});
      });
}

}  // namespace hutch::daemon
