#include "daemon/service/recipes.h"

#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>

#include "recipes/recipe_json.h"
#include "runtime/base/text_file.h"
#include "runtime/defaults.h"
#include "runtime/process/sync.h"
#include "runtime/recipes/recipe.h"

namespace hutch::daemon::service {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr uint64_t kMaxForks = 16;
constexpr uint64_t kMaxBakeTimeout = 24 * 3600;
constexpr uint64_t kMaxGcGrace = 30ull * 24 * 3600;
constexpr std::string_view kForkPrefix = "fork-sb-";
constexpr std::string_view kCheckpointPrefix = "cp-sb-";

template <class T>
ServiceResult<T> runtime(Result<T> result) {
  if (!result) return std::unexpected(from_runtime(result.error()));
  if constexpr (std::is_void_v<T>)
    return {};
  else
    return std::move(*result);
}

std::unexpected<ServiceError> bad_request(std::string message) {
  return service_error(ErrorKind::kInvalid, "bad_request", std::move(message));
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

// recipe.json's `network`, the bake's own policy: nullopt when there is none (or recipe.json is
// malformed: hutchd-bake reports that with the rest of the recipe's errors).
ServiceResult<std::optional<net::Policy>> bake_network(const std::string& dir) {
  const std::string path = dir + "/recipe.json";
  if (::access(path.c_str(), F_OK) != 0) return std::nullopt;
  auto text = read_text_file(path);
  if (!text) return std::nullopt;
  auto settings = recipes::parse_recipe_json(*text);
  if (!settings || !settings->network) return std::nullopt;
  try {
    return parse_network(nlohmann::json::parse(*settings->network));
  } catch (const std::exception& e) {
    return bad_request(std::string("recipe.json: ") + e.what());
  }
}

// The engine's hold on a bake's namespace, released when the bake ends, however it ends.
class BakeEgress {
 public:
  BakeEgress(NetworkService* network, std::string id) : network_(network), id_(std::move(id)) {}
  BakeEgress(const BakeEgress&) = delete;
  BakeEgress& operator=(const BakeEgress&) = delete;
  ~BakeEgress() {
    if (network_) network_->detach(id_);
  }

 private:
  NetworkService* network_;
  std::string id_;
};

ServiceResult<void> check_user_tag(const std::string& name, const std::string& field) {
  if (internal_tag(name))
    return bad_request(field + " \"" + name + "\": the prefixes fork-sb- and cp-sb- are hutchd's");
  return {};
}

std::string checkpoint_tag(const std::string& id, const std::string& name) {
  return std::string(kCheckpointPrefix) + id.substr(3) + "-" + name;
}

// The overlay's lower entries travel as fds in one SCM_RIGHTS message (runtime/launch.cc): the host
// rootfs takes two (its skeleton and "/"), a rootfs directory one.
size_t max_layers(const std::string& base) {
  return static_cast<size_t>(kMaxPassedFds) - (base == "host" ? 2 : 1);
}

// A scratch directory on the store's filesystem (so adopt_tree renames instead of copying),
// removed on every path.
class SnapshotScratch {
 public:
  static ServiceResult<std::unique_ptr<SnapshotScratch>> make(const std::string& state_dir) {
    const std::string parent = state_dir + "/snapshots-tmp";
    if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST)
      return std::unexpected(from_runtime(sys_error("mkdir", parent).error()));
    std::string path = parent + "/" + random_hex(8);
    if (::mkdir(path.c_str(), 0700) != 0)
      return std::unexpected(from_runtime(sys_error("mkdir", path).error()));
    return std::unique_ptr<SnapshotScratch>(new SnapshotScratch(std::move(path)));
  }
  SnapshotScratch(const SnapshotScratch&) = delete;
  SnapshotScratch& operator=(const SnapshotScratch&) = delete;
  ~SnapshotScratch() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  std::string upper() const { return path_ + "/upper"; }

 private:
  explicit SnapshotScratch(std::string path) : path_(std::move(path)) {}
  std::string path_;
};

// Untags `prefix`* (best effort: runs after destroys, where nothing may fail).
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

}  // namespace

bool internal_tag(std::string_view name) {
  return name.starts_with(kForkPrefix) || name.starts_with(kCheckpointPrefix);
}

// ---- LayerPin ----

LayerPin::LayerPin(LayerPin&& other) noexcept
    : service_(std::exchange(other.service_, nullptr)),
      digests_(std::move(other.digests_)),
      making_(std::exchange(other.making_, std::nullopt)) {}

LayerPin& LayerPin::operator=(LayerPin&& other) noexcept {
  if (this != &other) {
    release();
    service_ = std::exchange(other.service_, nullptr);
    digests_ = std::move(other.digests_);
    making_ = std::exchange(other.making_, std::nullopt);
  }
  return *this;
}

LayerPin::~LayerPin() { release(); }

void LayerPin::release() {
  if (service_ == nullptr) return;
  std::lock_guard lock(service_->mutex_);
  for (const std::string& digest : digests_)
    service_->pinned_.erase(service_->pinned_.find(digest));
  if (making_) service_->making_.erase(*making_);
  service_ = nullptr;
  digests_.clear();
  making_.reset();
}

// ---- RecipeService ----

RecipeService::RecipeService(SandboxRegistry& registry, std::string bake_helper)
    : registry_(registry), bake_helper_(std::move(bake_helper)) {}

ServiceResult<layers::LayerStore> RecipeService::open_store() const {
  return runtime(layers::LayerStore::open(registry_.state_dir()));
}

LayerPin RecipeService::pin(std::vector<std::string> digests, bool making) {
  std::lock_guard lock(mutex_);
  return pin_locked(std::move(digests), making);
}

LayerPin RecipeService::pin_locked(std::vector<std::string> digests, bool making) {
  LayerPin pin;
  pin.service_ = this;
  for (const std::string& digest : digests) pinned_.insert(digest);
  pin.digests_ = std::move(digests);
  if (making) pin.making_ = making_.insert(static_cast<int64_t>(std::time(nullptr)));
  return pin;
}

ServiceResult<LayerPin> RecipeService::apply_stack(SandboxConfig& config,
                                                   const layers::LayerStore& store,
                                                   const std::string& name) {
  // Resolved and pinned in one critical section: a gc cannot fall between the two.
  std::lock_guard lock(mutex_);
  auto resolved = recipes::resolve_rootfs(store, "recipe:" + name);
  if (!resolved) {
    auto tag = store.resolve_tag(name);
    if (tag && !*tag)
      return service_error(ErrorKind::kNotFound, "recipe_not_found",
                           "no recipe or snapshot " + name);
    return std::unexpected(from_runtime(resolved.error()));
  }
  if (resolved->layers.size() > max_layers(resolved->base)) {
    return service_error(ErrorKind::kConflict, "too_many_layers",
                         name + " stacks " + std::to_string(resolved->layers.size()) +
                             " layers; overlayfs here takes at most " +
                             std::to_string(max_layers(resolved->base)) + " on base " +
                             resolved->base);
  }
  config.rootfs = resolved->base;
  config.layer_digests = resolved->digests;
  config.layer_images = resolved->layers;
  return pin_locked(resolved->digests, false);
}

ServiceResult<LayerPin> RecipeService::resolve(SandboxConfig& config) {
  if (config.recipe.empty()) return LayerPin();
  if (config.rootfs != "host")
    return bad_request("give either a recipe or a rootfs directory, not both");
  layers::LayerStore store = HUTCH_TRY(open_store());
  return apply_stack(config, store, config.recipe);
}

ServiceResult<BakeReport> RecipeService::bake(const BakeParams& params) {
  struct stat st {};
  if (params.dir.empty() || params.dir[0] != '/' || ::stat(params.dir.c_str(), &st) != 0 ||
      !S_ISDIR(st.st_mode))
    return bad_request("dir must be an absolute path of a directory");
  HUTCH_TRY(check_user_tag(params.name, "name"));
  if (params.timeout_seconds == 0 || params.timeout_seconds > kMaxBakeTimeout)
    return bad_request("timeout_seconds must be 1..86400");
  BakeJob job;
  job.state_dir = registry_.state_dir();
  job.recipe_dir = params.dir;
  job.name = params.name;
  job.base = params.base.value_or("");
  for (const auto& [key, value] : params.env) {
    std::string entry = key + "=" + value;
    if (auto valid = check_env_entry(entry); !valid)
      return bad_request("env: keys are [A-Za-z_][A-Za-z0-9_]*, values strings");
    job.env.push_back(std::move(entry));
  }

  // The bake's layer is new (the making window keeps it until tagged), and its base, when a
  // recipe given here, is pinned: gc does not wait for the bake, and cannot take either.
  LayerPin held;
  if (job.base.starts_with("recipe:")) {
    layers::LayerStore store = HUTCH_TRY(open_store());
    std::lock_guard lock(mutex_);
    auto base = recipes::resolve_rootfs(store, job.base);
    // An unknown base is hutchd-bake's to report, with the rest of the bake's errors.
    held = pin_locked(base ? base->digests : std::vector<std::string>{}, true);
  } else {
    held = pin({}, true);
  }
  // recipe.json's network is setup.sh's alone: the recipe's sandboxes get their create's.
  const std::optional<net::Policy> network = HUTCH_TRY(bake_network(params.dir));
  UniqueFd netns;
  std::optional<BakeEgress> egress;
  if (network && network->mode == net::Mode::kNone) job.net = "none";
  if (network && uses_engine(*network)) {
    NetworkService* service = registry_.network();
    if (service == nullptr)
      return service_error(ErrorKind::kUnsupported, "unsupported",
                           "recipe.json: network " + std::string(net::mode_name(network->mode)) +
                               " needs hutchd's network service");
    const std::string id = "bake-" + random_hex(6) + "-" + params.name;
    netns = HUTCH_TRY(runtime(service->attach_bake(id, *network)));
    egress.emplace(service, id);
    job.net = "host_owned";
  }
  // In hutchd-bake, not in this process: a bake forks its sandbox, unsafe from hutchd's many
  // threads, and the deadline kills the whole bake, sandbox included (service/bake.h).
  BakeRun run = HUTCH_TRY(runtime(run_bake_helper(
      bake_helper_, job, std::chrono::seconds(params.timeout_seconds), netns ? netns.get() : -1)));
  netns.reset();
  BakeReport report;
  report.name = params.name;
  report.log = std::move(run.log);
  if (run.truncated) report.log += "\n[log truncated at 1 MiB]\n";
  if (run.result && run.result->ok) {
    report.ok = true;
    report.digest = run.result->digest;
    report.cached = run.result->cached;
    spdlog::info("recipe {} baked: {}{}", report.name, report.digest,
                 report.cached ? " (cached)" : "");
    return report;
  }
  report.message = run.timed_out
                       ? "the bake timed out after " + std::to_string(params.timeout_seconds) + " s"
                   : run.result ? run.result->error
                                : "hutchd-bake exited with status " + std::to_string(run.status);
  spdlog::info("recipe {} bake failed: {}", report.name, report.message);
  return report;
}

ServiceResult<std::vector<TaggedLayer>> RecipeService::list() const {
  layers::LayerStore store = HUTCH_TRY(open_store());
  auto tags = HUTCH_TRY(runtime(store.tags()));
  std::vector<TaggedLayer> out;
  for (const auto& [name, digest] : tags) {
    if (internal_tag(name)) continue;
    auto info = store.get(digest);
    if (!info) continue;  // removed meanwhile
    out.push_back({name, digest, static_cast<time_t>(info->manifest.created), info->manifest.size,
                   info->manifest.base.empty() ? "host" : info->manifest.base});
  }
  return out;
}

ServiceResult<void> RecipeService::remove(const std::string& name) {
  layers::LayerStore store = HUTCH_TRY(open_store());
  if (auto r = store.untag(name); !r && r.error().err != ENOENT)
    return std::unexpected(from_runtime(r.error()));
  return {};
}

ServiceResult<Snapshot> RecipeService::snapshot_as(Sandbox& sandbox, const std::string& tag,
                                                   const std::string& name) {
  auto started = Clock::now();
  layers::LayerStore store = HUTCH_TRY(open_store());
  auto scratch = HUTCH_TRY(SnapshotScratch::make(registry_.state_dir()));
  Snapshot out;
  out.name = name;
  for (const SandboxVolume& volume : sandbox.config().volumes)
    out.volumes_excluded.push_back(volume.name);
  {
    // Against pause/resume/destroy meanwhile.
    std::lock_guard lifecycle(sandbox.lifecycle_mutex());
    auto stats = sandbox.live().snapshot(scratch->upper());
    // The supervisor thaws after copying; a paused sandbox goes back to sleep.
    if (sandbox.state() == SandboxState::kPaused) {
      if (auto frozen = sandbox.live().freeze(); !frozen) {
        spdlog::error("sandbox={} refreezing after a snapshot: {}", sandbox.id(),
                      frozen.error().message());
      }
    }
    out.stats = HUTCH_TRY(runtime(std::move(stats)));
  }
  layers::LayerManifest manifest;
  manifest.parents = sandbox.config().layer_digests;
  manifest.base = sandbox.config().rootfs;
  manifest.built_by = "snapshot of " + sandbox.id();
  // Untagged between adopt_tree and tag: the making window keeps it from gc. Its parents are
  // the running sandbox's, which gc keeps anyway.
  LayerPin making = pin({}, true);
  auto layer = HUTCH_TRY(runtime(store.adopt_tree(scratch->upper(), manifest)));
  HUTCH_TRY(runtime(store.tag(tag, layer.digest)));
  out.digest = layer.digest;
  out.duration_ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  spdlog::info("sandbox={} snapshot {} -> {} ({} files, {} bytes, {:.1f} ms)", sandbox.id(), tag,
               out.digest, out.stats.files, out.stats.bytes, out.duration_ms);
  return out;
}

ServiceResult<Snapshot> RecipeService::snapshot(Sandbox& sandbox, const std::string& name) {
  HUTCH_TRY(check_user_tag(name, "name"));
  return snapshot_as(sandbox, name, name);
}

ServiceResult<Forked> RecipeService::fork(Sandbox& source, uint64_t count,
                                          std::optional<std::map<std::string, std::string>> labels,
                                          const std::string& request_id) {
  if (count < 1 || count > kMaxForks) return bad_request("count must be 1..16");
  const std::string tag = std::string(kForkPrefix) + source.id().substr(3) + "-" + random_hex(4);
  Forked forked;
  forked.snapshot = HUTCH_TRY(snapshot_as(source, tag, tag));
  SandboxConfig config = source.config();
  config.recipe = tag;
  config.network = source.network();  // the live policy; each fork gets its own engine state
  // A fork copies the sandbox's own files (the snapshot), never its volumes: they are mounts,
  // not layers, and a read-write one is a single sandbox's at a time.
  config.volumes.clear();
  if (labels) config.labels = std::move(*labels);
  LayerPin held = HUTCH_TRY(resolve(config));
  for (uint64_t i = 0; i < count; ++i) {
    auto created = registry_.create(config, request_id);
    if (created) {
      forked.sandboxes.push_back(std::move(*created));
      continue;
    }
    // All or none; the create's own failure is the one reported.
    for (const auto& fork : forked.sandboxes) {
      if (auto destroyed = registry_.destroy(fork->id(), "fork request " + request_id + " failed");
          !destroyed)
        spdlog::error("sandbox={} destroying a fork of a failed request: {}", fork->id(),
                      destroyed.error().message);
    }
    return std::unexpected(std::move(created).error());
  }
  return forked;
}

ServiceResult<Snapshot> RecipeService::checkpoint(Sandbox& sandbox, const std::string& name) {
  return snapshot_as(sandbox, checkpoint_tag(sandbox.id(), name), name);
}

ServiceResult<std::vector<TaggedLayer>> RecipeService::checkpoints(const Sandbox& sandbox) const {
  layers::LayerStore store = HUTCH_TRY(open_store());
  auto tags = HUTCH_TRY(runtime(store.tags()));
  const std::string prefix = checkpoint_tag(sandbox.id(), "");
  std::vector<TaggedLayer> out;
  for (const auto& [tag, digest] : tags) {
    if (!tag.starts_with(prefix)) continue;
    auto info = store.get(digest);
    if (!info) continue;
    out.push_back({tag.substr(prefix.size()), digest, static_cast<time_t>(info->manifest.created),
                   info->manifest.size,
                   info->manifest.base.empty() ? "host" : info->manifest.base});
  }
  return out;
}

ServiceResult<std::shared_ptr<Sandbox>> RecipeService::rollback(
    const std::shared_ptr<Sandbox>& sandbox, const std::string& name,
    const std::string& request_id) {
  const std::string tag = checkpoint_tag(sandbox->id(), name);
  SandboxConfig config = sandbox->config();
  layers::LayerStore store = HUTCH_TRY(open_store());
  auto digest = HUTCH_TRY(runtime(store.resolve_tag(tag)));
  if (!digest)
    return service_error(ErrorKind::kNotFound, "checkpoint_not_found",
                         "sandbox " + sandbox->id() + " has no checkpoint " + name);
  // Refuses a too deep stack before destroying anything.
  LayerPin held = HUTCH_TRY(apply_stack(config, store, tag));
  return registry_.replace(sandbox, std::move(config), request_id);
}

ServiceResult<std::vector<std::string>> RecipeService::gc(uint64_t grace_seconds) {
  if (grace_seconds > kMaxGcGrace) return bad_request("grace_seconds is too large");
  std::chrono::seconds grace(static_cast<int64_t>(grace_seconds));
  layers::LayerStore store = HUTCH_TRY(open_store());
  std::lock_guard lock(mutex_);
  // Internal tags of sandboxes that are gone (a crash skipped their destroy).
  auto tags = HUTCH_TRY(runtime(store.tags()));
  for (const auto& [name, digest] : tags) {
    std::string owner = tag_owner(name);
    if (!owner.empty() && registry_.find(owner) == nullptr) (void)store.untag(name);
  }
  std::vector<std::string> in_use(pinned_.begin(), pinned_.end());
  for (const auto& sandbox : registry_.list()) {
    const auto& digests = sandbox->config().layer_digests;
    in_use.insert(in_use.end(), digests.begin(), digests.end());
  }
  auto attached = HUTCH_TRY(runtime(recipes::layers_in_use(store)));
  in_use.insert(in_use.end(), attached.begin(), attached.end());
  if (!making_.empty()) {
    // A layer made since the oldest making window opened has an mtime (whole seconds) at or
    // after its start; the store compares against its own clock a little later: 2 s of slack.
    const int64_t open_for = static_cast<int64_t>(std::time(nullptr)) - *making_.begin();
    grace = std::max(grace, std::chrono::seconds(open_for + 2));
  }
  auto removed = HUTCH_TRY(runtime(store.gc(in_use, grace)));
  spdlog::info("layers gc: removed {} layers", removed.size());
  return removed;
}

void RecipeService::drop_tags_of(const std::string& sandbox_id) {
  auto store = layers::LayerStore::open(registry_.state_dir());
  if (!store) {
    spdlog::warn("sandbox={} dropping its checkpoints: {}", sandbox_id, store.error().message());
    return;
  }
  untag_prefix(*store, std::string(kCheckpointPrefix) + sandbox_id.substr(3) + "-");
  untag_prefix(*store, std::string(kForkPrefix) + sandbox_id.substr(3) + "-");
}

}  // namespace hutch::daemon::service
