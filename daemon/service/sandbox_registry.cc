#include "daemon/service/sandbox_registry.h"

#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "daemon/service/exec_service.h"
#include "daemon/service/host_mounts.h"
#include "daemon/service/sandbox_record.h"
#include "daemon/service/session_service.h"
#include "net/tls/trust_bundle.h"
#include "runtime/process/pidfd.h"

namespace hutch::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using service::ServiceResult;

constexpr auto kStartTimeout = std::chrono::seconds(30);
constexpr size_t kIdLength = 15;  // "sb-" + 12 hex digits
constexpr size_t kMaxConfigBytes = 64 * 1024;
// Background processes' output pumps, at a teardown: their exits are reported by then.
constexpr auto kPumpTimeout = std::chrono::seconds(5);

std::unexpected<service::ServiceError> failed(const Error& error) {
  return std::unexpected(service::from_runtime(error));
}

// Whether the process behind `pidfd` exited within `timeout` (a pidfd polls readable then).
}  // namespace

ServiceResult<void> check_create_config(const SandboxConfig& config) {
  if (config.rootfs != "host") {
    struct stat st {};
    if (::stat(config.rootfs.c_str(), &st) != 0 || !S_ISDIR(st.st_mode))
      return service::service_error(ErrorKind::kInvalid, "bad_request",
                                    "rootfs " + config.rootfs + " is not a directory");
  }
  if (config_to_json(config).dump().size() > kMaxConfigBytes)
    return service::service_error(ErrorKind::kInvalid, "bad_request",
                                  "env and labels together are limited to 64 KiB");
  return {};
}

size_t SandboxRegistry::max_state_dir_length() {
  constexpr size_t kSunPath = sizeof(sockaddr_un::sun_path) - 1;  // 107: room for the NUL
  return kSunPath - std::strlen("/sandboxes/") - kIdLength - std::strlen("/supervisor.sock");
}

std::string SandboxRegistry::new_id() const {
  unsigned char bytes[6];
  while (getrandom(bytes, sizeof bytes, 0) != sizeof bytes) {
  }
  static constexpr char kHex[] = "0123456789abcdef";
  std::string id = "sb-";
  for (unsigned char b : bytes) {
    id += kHex[b >> 4];
    id += kHex[b & 15];
  }
  return id;
}

void SandboxRegistry::remove_dir(const std::string& dir) const {
  std::error_code ignored;
  fs::remove_all(dir, ignored);
}

ServiceResult<void> SandboxRegistry::persist(const Sandbox& sandbox) const {
  if (auto written = write_atomically(sandbox.dir(), kRecord, sandbox.record().dump(2) + "\n");
      !written)
    return failed(written.error());
  return {};
}

// ---- recovery ----

RecoveryReport SandboxRegistry::recover() {
  std::error_code error;
  fs::create_directories(sandboxes_dir(), error);
  ::chmod(sandboxes_dir().c_str(), 0700);
  for (const auto& entry : fs::directory_iterator(sandboxes_dir(), error)) {
    if (!entry.is_directory()) continue;
    std::string id = entry.path().filename();
    if (recover_one(id, entry.path())) {
      ++recovered_.adopted;
    } else {
      ++recovered_.removed;
    }
  }
  return recovered_;
}

bool SandboxRegistry::recover_one(const std::string& id, const std::string& dir) {
  auto record = recover_record(id, dir);
  if (!record) {
    remove_dir(dir);
    return false;
  }
  // Before the config moves: the attachments outlive the previous hutchd, as the mounts do.
  if (volumes_ != nullptr) volumes_->adopt(id, record->config.volumes);
  auto sandbox = std::make_shared<Sandbox>(id, std::move(record->config), record->created_at,
                                           std::move(record->live), dir);
  if (record->paused) sandbox->set_state(SandboxState::kPaused);
  if (service::uses_engine(sandbox->network())) {
    Result<void> reattached = plain_error("network", "hutchd has no network service");
    if (network_) reattached = network_->reattach(id, dir, sandbox->live(), sandbox->network());
    // Adopted anyway: its processes and files are the client's; its egress stays closed (the
    // path's rules redirect to listeners that are not there).
    if (!reattached) {
      const std::string error =
          "egress closed: not re-attached after a hutchd restart: " + reattached.error().message();
      spdlog::error("sandbox={} recovery: network not re-attached: {}", id,
                    reattached.error().message());
      sandbox->set_network_error(error);
      sandbox->log().add({{"event", "network_error"}, {"error", error}});
      metrics_.count_network_reattach_failure();
    } else {
      install_trust(*sandbox);  // the CA and placeholder key kept in its dir
    }
  }
  // Named temp files of uploads the previous hutchd was killed in (runtime/files/sandbox_fs.h).
  if (auto fs = sandbox->fs(); !fs) {
    spdlog::warn("sandbox={} recovery: {}", id, fs.error().message());
  } else if (auto left = fs->remove_leftovers(); !left) {
    spdlog::warn("sandbox={} recovery: {}", id, left.error().message);
  }
  // Its background processes and PTYs (kept by its supervisor) and its shell sessions.
  adopt_background_processes(sandbox);
  restore_sessions(*sandbox);
  sandbox->log().add({{"event", "adopted"}, {"state", state_name(sandbox->state())}});
  spdlog::info("sandbox={} recovery: adopted ({}, init pid {})", id, state_name(sandbox->state()),
               sandbox->live().ref().init_pid);
  std::lock_guard lock(mutex_);
  sandboxes_[id] = std::move(sandbox);
  return true;
}

// ---- spawn and the warm pool ----

Result<LiveSandbox> SandboxRegistry::start_live(const SandboxConfig& config, const std::string& dir,
                                                int netns_fd) const {
  SandboxSpec spec = build_spec(config, state_dir_);
  spec.cgroup_parent = cgroup_parent_;
  // After the config's own mounts: hutch's trust is what /etc/hutch holds.
  if (network_ != nullptr && service::uses_engine(config.network)) {
    for (BindMount& bind : service::trust_binds(dir)) spec.binds.push_back(std::move(bind));
  }
  // Mounted here, by hutchd (the sandbox's child could not even reach the images in the 0700
  // state dir); the zygote passes them on, the launch idmaps them and the child attaches them.
  // Ours close when this returns: the supervisor holds its copies by then.
  std::vector<UniqueFd> volume_mounts;
  if (!config.volumes.empty()) {
    if (volumes_ == nullptr) return plain_error("volumes", "hutchd has no volume store");
    volume_mounts = HUTCH_TRY(volumes_->open_mounts(config.volumes));
    for (size_t i = 0; i < volume_mounts.size(); ++i)
      spec.volumes[i].mount_fd = volume_mounts[i].get();
  }
  // Resolved beneath the mount roots again and cloned here, from the fd the check opened: the
  // sandbox binds these trees, never the paths (daemon/service/host_mounts.h). The first
  // config.mounts.size() binds are the config's (build_spec).
  std::vector<UniqueFd> mount_trees = HUTCH_TRY(open_host_mount_trees(config.mounts, mount_roots_));
  for (size_t i = 0; i < mount_trees.size(); ++i) {
    spec.binds[i].from = BindFrom::kLauncher;
    spec.binds[i].tree_fd = mount_trees[i].get();
  }
  auto ref = HUTCH_TRY(zygote_.spawn(spec, dir + "/exec.sock", dir + "/supervisor.sock",
                                     dir + "/supervisor.log", kStartTimeout, netns_fd));
  auto live = LiveSandbox::connect(ref);
  if (!live) ::kill(ref.supervisor_pid, SIGKILL);
  return live;
}

void SandboxRegistry::warm_up(const LiveSandbox& live) const {
  // One exec ahead of time: the fresh overlay's lookups of the usual binaries and init's first
  // fork are paid here, not by the client's first exec.
  ExecRequest request;
  request.argv = {"true"};
  request.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
  auto process = live.exec(request);
  if (!process) return;
  for (int i = 0; i < kWarmUpPolls; ++i) {
    auto exit = process->poll_exit();
    if (!exit || *exit) return;
    pollfd ready{process->fd(), POLLIN, 0};
    ::poll(&ready, 1, static_cast<int>(kWarmUpPollInterval.count()));
  }
}

Result<void> SandboxRegistry::attach_network(const std::string& id, const std::string& dir,
                                             const LiveSandbox& live, const net::Policy& policy,
                                             std::optional<service::PreparedEgress> prepared,
                                             std::optional<service::SandboxTrust> trust) const {
  if (!service::uses_engine(policy)) return {};
  if (network_ == nullptr)
    return kind_error(ErrorKind::kUnsupported, "network",
                      std::string("mode ") + std::string(net::mode_name(policy.mode)) +
                          " needs hutchd's network service");
  return network_->attach(id, dir, live, policy, std::move(prepared), std::move(trust));
}

void SandboxRegistry::install_trust(Sandbox& sandbox) const {
  if (network_ == nullptr || !network_->ca_pem(sandbox.id())) return;
  // The files are bound into the sandbox at its start (service::trust_binds); tools that do not
  // read the distro's bundle path find them by these variables.
  std::map<std::string, std::string> env;
  for (const auto& entry :
       net::tls::trust_environment(service::kTrustBundlePath, service::kTrustCaPath))
    env[entry.name] = entry.value;
  // A secret's name is spelled as a variable: OPENAI_API_KEY=<placeholder>, what SDKs read.
  for (const auto& [secret, placeholder] :
       network_->status(sandbox.id(), sandbox.network()).placeholders)
    env[secret] = placeholder;
  sandbox.set_network_env(std::move(env));
}

Result<SpawnedSandbox> SandboxRegistry::spawn(const SandboxConfig& config, bool pooled,
                                              int netns_fd, std::string id) {
  if (id.empty()) id = new_id();
  std::string dir = sandboxes_dir() + "/" + id;
  if (::mkdir(dir.c_str(), 0700) != 0) return sys_error("mkdir", dir);
  // A record without a ref marks the creation in progress: recover() cleans it up if hutchd
  // dies before the sandbox is recorded.
  auto recorded = write_atomically(dir, pooled ? kPoolRecord : kRecord, creating_record(id));
  // Its CA before it starts: the spec binds the trust files.
  std::optional<service::SandboxTrust> trust;
  if (recorded && network_ != nullptr && service::uses_engine(config.network)) {
    auto provisioned = network_->provision_trust(dir);
    if (provisioned)
      trust.emplace(std::move(*provisioned));
    else
      recorded = std::unexpected(provisioned.error());
  }
  Result<LiveSandbox> started =
      recorded ? start_live(config, dir, netns_fd) : std::unexpected(recorded.error());
  if (!started) {
    remove_dir(dir);
    return std::unexpected(started.error());
  }
  LiveSandbox live = std::move(*started);
  // Until a Sandbox takes it (and sends its own deadlines), no next hutchd would adopt it (recovery
  // destroys "creating" and "pooled" records): it ends as soon as this hutchd is gone.
  SandboxDeadlines unadoptable;
  unadoptable.idle_ttl = std::chrono::milliseconds(0);
  unadoptable.state_dir = dir;
  if (auto sent = live.set_deadlines(unadoptable); !sent)
    spdlog::warn("sandbox={} deadlines: {}", id, sent.error().message());
  if (pooled) {
    warm_up(live);
    if (auto written = write_atomically(dir, kPoolRecord, pooled_record(id, live.ref()));
        !written) {
      (void)live.destroy();
      remove_dir(dir);
      return std::unexpected(written.error());
    }
  }
  return SpawnedSandbox{std::move(id), std::move(dir), std::move(live), config.layer_digests,
                        std::move(trust)};
}

void SandboxRegistry::discard(SpawnedSandbox& spawned) {
  if (auto destroyed = spawned.live.destroy(); !destroyed) {
    spdlog::error("sandbox={} discard: {}", spawned.id, destroyed.error().message());
  }
  remove_dir(spawned.dir);
}

void SandboxRegistry::start_pool(std::map<std::string, size_t> sizes, PoolConfigHook spawn_config) {
  pool_ = std::make_unique<WarmPool>(
      std::move(sizes),
      [this, spawn_config](SandboxConfig config) -> std::optional<SpawnedSandbox> {
        // The pool's thread is an edge: what fails here is logged here, and retried later.
        try {
          auto held = spawn_config(config);
          auto spawned = spawn(config, true);
          if (spawned) return std::move(*spawned);
          spdlog::error("warm pool {}: {}", WarmPool::key(config), spawned.error().message());
        } catch (const std::exception& e) {
          spdlog::error("warm pool {}: {}", WarmPool::key(config), e.what());
        }
        return std::nullopt;
      },
      [this](SpawnedSandbox& spawned) { discard(spawned); });
  pool_->start();
}

void SandboxRegistry::stop_pool() {
  if (pool_) pool_->stop();
}

std::map<std::string, std::pair<size_t, size_t>> SandboxRegistry::pool_status() const {
  return pool_ ? pool_->status() : std::map<std::string, std::pair<size_t, size_t>>{};
}

// ---- create and lookups ----

ServiceResult<std::shared_ptr<Sandbox>> SandboxRegistry::create(const SandboxConfig& requested,
                                                                const std::string& request_id) {
  auto resolved = resolve_host_mounts(requested, mount_roots_);
  if (!resolved) return std::unexpected(resolved.error());
  const SandboxConfig& config = *resolved;
  if (auto checked = check_create_config(config); !checked) return std::unexpected(checked.error());
  if (service::uses_engine(config.network) && network_ != nullptr) {
    if (auto known = service::check_inject_secrets(config.network, network_->secrets()); !known)
      return std::unexpected(known.error());
  }
  auto started = std::chrono::steady_clock::now();
  // Nothing is made ahead while this create runs (made_ahead.h): it would run on its cores.
  std::optional<service::NetworkService::RefillHold> refill_hold;
  if (network_ != nullptr) refill_hold.emplace(network_->hold_refills());
  // A sandbox with volumes has its id before it exists: the attachments are reserved under it,
  // and released on every failed path below (the reservation's destructor).
  std::string reserved_id;
  std::optional<service::VolumeReservation> reservation;
  if (!config.volumes.empty()) {
    if (volumes_ == nullptr)
      return service::service_error(ErrorKind::kUnsupported, "unsupported",
                                    "hutchd has no volume store");
    reserved_id = new_id();
    auto reserved = volumes_->reserve(reserved_id, config.volumes);
    if (!reserved) return std::unexpected(reserved.error());
    reservation.emplace(std::move(*reserved));
  }
  std::optional<SpawnedSandbox> spawned;
  // Pooled sandboxes were made without the request's host mounts and volumes.
  if (pool_ && config.mounts.empty() && config.volumes.empty()) spawned = pool_->take(config);
  const bool from_pool = spawned.has_value();
  // A filtered or open sandbox starts in a namespace whose path and listeners were made ahead,
  // when one is ready; a failed create closes it with `prepared` (never used again).
  std::optional<service::PreparedEgress> prepared;
  if (!from_pool && network_ && service::uses_engine(config.network))
    prepared = network_->take_prepared();
  if (!from_pool) {
    auto fresh = spawn(config, false, prepared ? prepared->netns.get() : -1, reserved_id);
    if (!fresh) return failed(fresh.error());
    spawned.emplace(std::move(*fresh));
  }
  auto sandbox = std::make_shared<Sandbox>(spawned->id, config, std::chrono::system_clock::now(),
                                           std::move(spawned->live), spawned->dir);
  // Before create returns: the sandbox's first connection already meets its policy.
  const bool made_ahead = prepared.has_value();
  if (auto attached = attach_network(spawned->id, spawned->dir, sandbox->live(), config.network,
                                     std::move(prepared), std::move(spawned->trust));
      !attached) {
    if (network_) network_->detach(spawned->id);
    (void)sandbox->live().destroy();
    remove_dir(spawned->dir);
    return failed(attached.error());
  }
  install_trust(*sandbox);
  if (auto persisted = persist(*sandbox); !persisted) {
    if (network_) network_->detach(spawned->id);
    (void)sandbox->live().destroy();
    remove_dir(spawned->dir);
    return std::unexpected(persisted.error());
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  metrics_.create_seconds().observe(seconds);
  sandbox->log().add({{"event", "created"},
                      {"duration_ms", seconds * 1000},
                      {"warm_pool", from_pool},
                      {"netns_ahead", made_ahead}});
  spdlog::info("sandbox={} request={} created in {:.1f} ms{}{} (init pid {})", spawned->id,
               request_id, seconds * 1000, from_pool ? " from the warm pool" : "",
               made_ahead ? " in a namespace made ahead" : "", sandbox->live().ref().init_pid);
  if (reservation) reservation->keep();  // registered below: its teardown releases them (forget)
  std::lock_guard lock(mutex_);
  sandboxes_[spawned->id] = sandbox;
  return sandbox;
}

std::shared_ptr<Sandbox> SandboxRegistry::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? nullptr : it->second;
}

ServiceResult<std::shared_ptr<Sandbox>> SandboxRegistry::get(const std::string& id) const {
  auto sandbox = find(id);
  if (!sandbox)
    return service::service_error(ErrorKind::kNotFound, "sandbox_not_found", "no sandbox " + id);
  sandbox->touch();
  return sandbox;
}

std::vector<std::shared_ptr<Sandbox>> SandboxRegistry::list() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Sandbox>> out;
  for (const auto& [id, sandbox] : sandboxes_) out.push_back(sandbox);
  return out;
}

// ---- teardown ----

Result<void> SandboxRegistry::stop_processes(Sandbox& sandbox) const {
  if (sandbox.state() == SandboxState::kPaused) (void)sandbox.live().thaw();
  HUTCH_TRY(sandbox.live().destroy());
  if (network_) network_->detach(sandbox.id());
  for (const auto& process : sandbox.processes()) process->wait_pumped(kPumpTimeout);
  return {};
}

void SandboxRegistry::forget(const std::shared_ptr<Sandbox>& sandbox) {
  {
    std::lock_guard lock(mutex_);
    auto it = sandboxes_.find(sandbox->id());
    if (it != sandboxes_.end() && it->second == sandbox) sandboxes_.erase(it);
  }
  remove_dir(sandbox->dir());
  // Its processes are dead and its mount namespace with them: the volumes are free.
  if (volumes_ != nullptr) volumes_->release(sandbox->id());
  if (on_destroyed_) on_destroyed_(sandbox->id());
}

Result<void> SandboxRegistry::teardown(const std::shared_ptr<Sandbox>& sandbox,
                                       const std::string& reason) {
  HUTCH_TRY(stop_processes(*sandbox));
  forget(sandbox);
  sandbox->log().add({{"event", "destroyed"}, {"reason", reason}});
  spdlog::info("sandbox={} destroyed ({})", sandbox->id(), reason);
  return {};
}

ServiceResult<bool> SandboxRegistry::destroy(const std::string& id, const std::string& reason) {
  auto sandbox = find(id);
  if (!sandbox) return false;
  std::lock_guard lifecycle(sandbox->lifecycle_mutex());
  if (find(id) != sandbox) return true;  // destroyed meanwhile by another request
  if (auto done = teardown(sandbox, reason); !done) return failed(done.error());
  return true;
}

ServiceResult<bool> SandboxRegistry::destroy_soon(const std::string& id,
                                                  const std::string& reason) {
  auto sandbox = find(id);
  if (!sandbox) return false;
  {
    std::lock_guard lifecycle(sandbox->lifecycle_mutex());
    if (find(id) != sandbox) return true;  // destroyed meanwhile by another request
    // SIGKILL to init kills the whole pid namespace; waiting for init's exit here would cost the
    // client the mount namespace's teardown (an RCU grace period, ~10 ms measured), so the
    // background teardown below waits for it instead. ESRCH: init is gone already.
    if (pidfd_signal(sandbox->live().init_pidfd(), SIGKILL) != 0 && errno != ESRCH)
      spdlog::warn("sandbox={} pidfd_signal(init, SIGKILL): {}", id, std::strerror(errno));
    // Its processes can write no more: a client that deletes a sandbox and at once creates the
    // next one with its volume must not be refused while the teardown finishes.
    if (volumes_ != nullptr) volumes_->end(id);
    std::lock_guard lock(mutex_);
    sandboxes_.erase(id);
  }
  {
    std::lock_guard lock(teardown_mutex_);
    teardowns_.emplace_back(sandbox, reason);
    if (!teardown_thread_.joinable()) teardown_thread_ = std::thread([this] { teardown_loop(); });
  }
  teardown_wake_.notify_one();
  return true;
}

void SandboxRegistry::teardown_loop() {
  std::unique_lock lock(teardown_mutex_);
  for (;;) {
    teardown_wake_.wait(lock, [this] { return teardown_stopping_ || !teardowns_.empty(); });
    if (teardowns_.empty()) return;  // stopping, and nothing left to finish
    auto [sandbox, reason] = std::move(teardowns_.front());
    teardowns_.pop_front();
    lock.unlock();
    // This thread is the teardown's edge. On failure the record stays: the next hutchd's
    // recovery finds a dead sandbox and removes it.
    if (auto done = teardown(sandbox, reason); !done)
      spdlog::error("sandbox={} teardown failed: {}", sandbox->id(), done.error().message());
    lock.lock();
  }
}

SandboxRegistry::~SandboxRegistry() { drain_teardowns(); }

void SandboxRegistry::drain_teardowns() {
  {
    std::lock_guard lock(teardown_mutex_);
    teardown_stopping_ = true;
  }
  teardown_wake_.notify_all();
  if (teardown_thread_.joinable()) teardown_thread_.join();
}

ServiceResult<std::shared_ptr<Sandbox>> SandboxRegistry::replace(
    const std::shared_ptr<Sandbox>& old, SandboxConfig config, const std::string& request_id) {
  const std::string id = old->id();
  const std::string& dir = old->dir();
  std::lock_guard lifecycle(old->lifecycle_mutex());
  if (find(id) != old)  // destroyed meanwhile
    return service::service_error(ErrorKind::kNotFound, "sandbox_not_found", "no sandbox " + id);
  if (auto stopped = stop_processes(*old); !stopped) return failed(stopped.error());
  // The old supervisor is gone; its socket files are stale names the new one binds again.
  ::unlink((dir + "/exec.sock").c_str());
  ::unlink((dir + "/supervisor.sock").c_str());
  auto live = start_live(config, dir);
  if (!live) {
    forget(old);
    return failed(live.error());
  }
  auto sandbox =
      std::make_shared<Sandbox>(id, std::move(config), old->created_at(), std::move(*live), dir);
  // The live policy carries over; the engine state (fake names) starts afresh.
  sandbox->set_network(old->network());
  if (auto attached = attach_network(id, dir, sandbox->live(), sandbox->network()); !attached) {
    if (network_) network_->detach(id);
    (void)sandbox->live().destroy();
    forget(old);
    return failed(attached.error());
  }
  install_trust(*sandbox);
  sandbox->inherit_processes(*old);
  if (auto persisted = persist(*sandbox); !persisted) {
    (void)sandbox->live().destroy();
    forget(old);
    return std::unexpected(persisted.error());
  }
  sandbox->log().add({{"event", "rolled_back"}, {"layers", sandbox->config().layer_digests}});
  spdlog::info("sandbox={} request={} rolled back (init pid {})", id, request_id,
               sandbox->live().ref().init_pid);
  std::lock_guard lock(mutex_);
  sandboxes_[id] = sandbox;
  return sandbox;
}

// ---- pause and resume ----

ServiceResult<void> SandboxRegistry::pause(Sandbox& sandbox) {
  std::lock_guard lifecycle(sandbox.lifecycle_mutex());
  if (sandbox.state() == SandboxState::kPaused) return {};
  if (auto frozen = sandbox.live().freeze(); !frozen) return failed(frozen.error());
  sandbox.set_state(SandboxState::kPaused);
  if (auto persisted = persist(sandbox); !persisted) return persisted;
  sandbox.log().add({{"event", "paused"}});
  return {};
}

ServiceResult<void> SandboxRegistry::resume(Sandbox& sandbox) {
  std::lock_guard lifecycle(sandbox.lifecycle_mutex());
  if (sandbox.state() == SandboxState::kRunning) return {};
  if (auto thawed = sandbox.live().thaw(); !thawed) return failed(thawed.error());
  sandbox.set_state(SandboxState::kRunning);
  if (auto persisted = persist(sandbox); !persisted) return persisted;
  sandbox.log().add({{"event", "resumed"}});
  return {};
}

ServiceResult<void> SandboxRegistry::set_network_policy(Sandbox& sandbox,
                                                        const net::Policy& policy) {
  std::lock_guard lifecycle(sandbox.lifecycle_mutex());
  const net::Policy current = sandbox.network();
  if (auto allowed = service::check_mode_change(current, policy); !allowed) return allowed;
  if (service::uses_engine(policy)) {
    if (network_ == nullptr)
      return service::service_error(ErrorKind::kUnsupported, "unsupported",
                                    "hutchd has no network service");
    if (auto set = network_->set_policy(sandbox.id(), policy); !set) return set;
  }
  sandbox.set_network(policy);
  install_trust(sandbox);  // the placeholders of secrets the new rules name
  if (auto persisted = persist(sandbox); !persisted) return persisted;
  sandbox.log().add({{"event", "network_policy"}, {"network", network_to_json(policy)}});
  return {};
}

void SandboxRegistry::destroy_all() {
  stop_pool();
  for (const auto& sandbox : list()) {
    if (auto done = destroy(sandbox->id(), "hutchd exiting with --destroy-on-exit"); !done)
      spdlog::error("sandbox={} destroy on exit: {}", sandbox->id(), done.error().message);
  }
}

}  // namespace hutch::daemon
