#include "daemon/sandbox_registry.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "daemon/errors.h"
#include "runtime/base/proc_stat.h"
#include "runtime/cgroup/stale.h"
#include "runtime/process/pidfd.h"

namespace hutch::daemon {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr auto kStartTimeout = std::chrono::seconds(30);
constexpr size_t kIdLength = 15;  // "sb-" + 12 hex digits
constexpr const char* kRecord = "sandbox.json";
// A warm-pool sandbox's record until a create takes it; the create then writes kRecord, which
// wins over this one. A new name rather than a replacement: on ext4, renaming over a record
// written a while ago costs ~0.3 ms (the old inode's delayed blocks are dealt with at once),
// renaming onto a free name ~0.05 ms, and this is on the create's path.
constexpr const char* kPoolRecord = "pooled.json";
constexpr auto kCgroupSweepInterval = std::chrono::minutes(1);

std::string state_name(SandboxState state) {
  return state == SandboxState::kPaused ? "paused" : "running";
}

json ref_to_json(const LiveSandboxRef& ref) {
  return {{"supervisor_pid", ref.supervisor_pid},
          {"supervisor_start_time", ref.supervisor_start_time},
          {"init_pid", ref.init_pid},
          {"exec_socket", ref.exec_socket},
          {"supervisor_socket", ref.supervisor_socket}};
}

LiveSandboxRef ref_from_json(const json& j) {
  LiveSandboxRef ref;
  ref.supervisor_pid = j.at("supervisor_pid").get<pid_t>();
  ref.supervisor_start_time = j.at("supervisor_start_time").get<uint64_t>();
  ref.init_pid = j.at("init_pid").get<pid_t>();
  ref.exec_socket = j.at("exec_socket").get<std::string>();
  ref.supervisor_socket = j.at("supervisor_socket").get<std::string>();
  return ref;
}

// tmp + rename: a reader (or a restarted hutchd, after a crash or kill -9) sees the old record or
// the new one, never a torn one. No fsync: a record outlives hutchd in the page cache, and nothing
// it describes survives a reboot (the sandbox's processes die with the host), so durability
// across power loss would buy nothing and cost a millisecond per create.
void write_atomically(const std::string& dir, const std::string& name, const std::string& text) {
  std::string tmp = dir + "/." + name + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) throw runtime_failure(sys_error("open", tmp).error());
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      Error error = sys_error("write", tmp).error();
      ::close(fd);
      throw runtime_failure(error);
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  std::string final_path = dir + "/" + name;
  if (::rename(tmp.c_str(), final_path.c_str()) != 0)
    throw runtime_failure(sys_error("rename", tmp + " to " + final_path).error());
}

// The pid listening on a unix socket (SO_PEERCRED), 0 when nobody does.
pid_t socket_peer(const std::string& path) {
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (!fd || path.size() >= sizeof addr.sun_path) return 0;
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return 0;
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd.get(), SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return 0;
  return cred.pid;
}

// The first child of `pid` (the supervisor's only child is the sandbox's init).
pid_t first_child(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  pid_t child = 0;
  in >> child;
  return child;
}

}  // namespace

// ---- EventLog ----

void EventLog::add(json event) {
  event["time"] = iso8601(std::chrono::system_clock::now());
  std::lock_guard lock(mutex_);
  events_.push_back(std::move(event));
  if (events_.size() > kMaxEvents) events_.pop_front();
}

std::vector<json> EventLog::snapshot() const {
  std::lock_guard lock(mutex_);
  return {events_.begin(), events_.end()};
}

// ---- Sandbox ----

Sandbox::Sandbox(std::string id, SandboxConfig config,
                 std::chrono::system_clock::time_point created_at, LiveSandbox live,
                 std::string dir)
    : id_(std::move(id)),
      config_(std::move(config)),
      created_at_(created_at),
      live_(std::move(live)),
      dir_(std::move(dir)) {
  touch();
  // For when this hutchd is gone (stopped or crashed): the supervisor enforces the same deadlines
  // itself, max lifetime from the recorded creation time, so an adoption keeps it.
  SandboxDeadlines deadlines;
  if (config_.max_lifetime_seconds)
    deadlines.end_at = created_at_ + std::chrono::seconds(*config_.max_lifetime_seconds);
  if (config_.idle_ttl_seconds > 0)
    deadlines.idle_ttl = std::chrono::seconds(config_.idle_ttl_seconds);
  deadlines.state_dir = dir_;
  if (auto sent = live_.set_deadlines(deadlines); !sent)
    spdlog::warn("sandbox={} deadlines: {}", id_, sent.error().message());
}

std::chrono::steady_clock::duration Sandbox::idle_for() const {
  return std::chrono::steady_clock::now().time_since_epoch() -
         std::chrono::steady_clock::duration(last_activity_.load());
}

files::Owner Sandbox::owner() const {
  // The root of the id map the sandbox's spec was built with (build_spec), never assumed here.
  return sandbox_root_owner(config_);
}

files::SandboxFs Sandbox::fs() {
  std::lock_guard lock(mutex_);
  if (!root_) {
    auto root = live_.open_root();
    if (!root) throw runtime_failure(root.error());
    root_ = std::move(*root);
  }
  return files::SandboxFs(root_.get(), owner());
}

void Sandbox::add_process(std::shared_ptr<BackgroundProcess> process) {
  std::lock_guard lock(mutex_);
  processes_[process->pid()] = std::move(process);
}

void Sandbox::inherit_processes(Sandbox& from) {
  std::scoped_lock lock(mutex_, from.mutex_);
  processes_.merge(from.processes_);
}

std::shared_ptr<BackgroundProcess> Sandbox::process(pid_t pid) const {
  std::lock_guard lock(mutex_);
  auto it = processes_.find(pid);
  return it == processes_.end() ? nullptr : it->second;
}

std::vector<std::shared_ptr<BackgroundProcess>> Sandbox::processes() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<BackgroundProcess>> out;
  for (const auto& [pid, process] : processes_) out.push_back(process);
  return out;
}

bool Sandbox::has_running_process() const {
  std::lock_guard lock(mutex_);
  for (const auto& [pid, process] : processes_) {
    if (process->running()) return true;
  }
  return false;
}

json Sandbox::to_json() const {
  json out = config_to_json(config_);
  out["id"] = id_;
  out["state"] = state_name(state());
  out["created_at"] = iso8601(created_at_);
  out["init_pid"] = live_.ref().init_pid;
  return out;
}

json Sandbox::record() const {
  return {{"version", 1},
          {"id", id_},
          {"created_at", iso8601(created_at_)},
          {"state", state_name(state())},
          {"config", config_to_json(config_)},
          {"ref", ref_to_json(live_.ref())}};
}

// ---- SandboxRegistry ----

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

void SandboxRegistry::persist(const Sandbox& sandbox) const {
  write_atomically(sandbox.dir(), kRecord, sandbox.record().dump(2) + "\n");
}

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
  json record;
  try {
    std::string path = dir + "/" + kRecord;
    if (::access(path.c_str(), F_OK) != 0) path = dir + "/" + kPoolRecord;
    std::ifstream in(path);
    record = json::parse(in);
  } catch (const std::exception&) {
    record = nullptr;
  }
  std::optional<LiveSandboxRef> ref;
  try {
    if (record.is_object() && record.contains("ref")) ref = ref_from_json(record["ref"]);
  } catch (const std::exception&) {
  }
  if (!ref) {
    // hutchd died between forking the supervisor and recording it: find the supervisor through
    // its socket (SO_PEERCRED) and its init as its child, and destroy that sandbox.
    pid_t supervisor = socket_peer(dir + "/supervisor.sock");
    if (supervisor > 0) {
      auto state = read_proc_state(supervisor);
      LiveSandboxRef found{supervisor, state ? state->start_time : 0, first_child(supervisor),
                           dir + "/exec.sock", dir + "/supervisor.sock"};
      auto live = LiveSandbox::connect(found);
      if (live) {
        (void)live->destroy();
      } else {
        ::kill(supervisor, SIGKILL);
      }
    }
    spdlog::warn("sandbox={} recovery: no complete record (creation was interrupted); removed", id);
    remove_dir(dir);
    return false;
  }
  auto live = LiveSandbox::connect(*ref);
  if (!live) {
    spdlog::warn("sandbox={} recovery: not alive ({}); removed", id, live.error().message());
    remove_dir(dir);
    return false;
  }
  if (record.value("state", "") == "pooled") {
    (void)live->destroy();
    spdlog::info("sandbox={} recovery: an idle warm-pool sandbox; destroyed", id);
    remove_dir(dir);
    return false;
  }
  SandboxConfig config;
  std::chrono::system_clock::time_point created_at = std::chrono::system_clock::now();
  try {
    config = parse_sandbox_config(record.at("config"), ConfigSource::kRecord);
    if (auto parsed = parse_iso8601(record.at("created_at").get<std::string>()))
      created_at = *parsed;
  } catch (const std::exception& e) {
    spdlog::warn("sandbox={} recovery: unreadable record ({}); destroyed", id, e.what());
    (void)live->destroy();
    remove_dir(dir);
    return false;
  }
  auto sandbox =
      std::make_shared<Sandbox>(id, std::move(config), created_at, std::move(*live), dir);
  if (record.value("state", "running") == "paused") sandbox->set_state(SandboxState::kPaused);
  // Named temp files of uploads the previous hutchd was killed in (runtime/files/sandbox_fs.h).
  if (auto left = sandbox->fs().remove_leftovers(); !left)
    spdlog::warn("sandbox={} recovery: {}", id, left.error().message);
  sandbox->log().add({{"event", "adopted"}, {"state", state_name(sandbox->state())}});
  spdlog::info("sandbox={} recovery: adopted ({}, init pid {})", id, state_name(sandbox->state()),
               ref->init_pid);
  std::lock_guard lock(mutex_);
  sandboxes_[id] = std::move(sandbox);
  return true;
}

SpawnedSandbox SandboxRegistry::spawn(const SandboxConfig& config, const std::string& request_id,
                                      bool pooled) {
  std::string id = new_id();
  std::string dir = sandboxes_dir() + "/" + id;
  if (::mkdir(dir.c_str(), 0700) != 0) throw runtime_failure(sys_error("mkdir", dir).error());
  // A record without a ref marks the creation in progress: recover() cleans it up if hutchd
  // dies before the sandbox is recorded.
  const char* record_name = pooled ? kPoolRecord : kRecord;
  write_atomically(dir, record_name,
                   json{{"version", 1}, {"id", id}, {"state", "creating"}}.dump() + "\n");
  SandboxSpec spec = build_spec(config, state_dir_);
  spec.cgroup_parent = cgroup_parent_;
  auto ref = zygote_.spawn(spec, dir + "/exec.sock", dir + "/supervisor.sock",
                           dir + "/supervisor.log", kStartTimeout);
  if (!ref) {
    spdlog::error("sandbox={} request={} create failed: {}", id, request_id, ref.error().message());
    remove_dir(dir);
    throw runtime_failure(ref.error());
  }
  auto live = LiveSandbox::connect(*ref);
  if (!live) {
    spdlog::error("sandbox={} request={} connect failed: {}", id, request_id,
                  live.error().message());
    ::kill(ref->supervisor_pid, SIGKILL);
    remove_dir(dir);
    throw runtime_failure(live.error());
  }
  // Until a Sandbox takes it (and sends its own deadlines), no next hutchd would adopt it (recovery
  // destroys "creating" and "pooled" records): it ends as soon as this hutchd is gone.
  SandboxDeadlines unadoptable;
  unadoptable.idle_ttl = std::chrono::milliseconds(0);
  unadoptable.state_dir = dir;
  if (auto sent = live->set_deadlines(unadoptable); !sent)
    spdlog::warn("sandbox={} deadlines: {}", id, sent.error().message());
  if (pooled) {
    // One exec ahead of time: the fresh overlay's lookups of the usual binaries and init's first
    // fork are paid here, not by the client's first exec.
    ExecRequest warm_up;
    warm_up.argv = {"true"};
    warm_up.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
    if (auto process = live->exec(warm_up)) {
      for (int i = 0; i < 1000; ++i) {
        auto exit = process->poll_exit();
        if (!exit || *exit) break;
        pollfd ready{process->fd(), POLLIN, 0};
        ::poll(&ready, 1, 10);
      }
    }
    // Recovery destroys pooled sandboxes: nobody has seen them.
    write_atomically(
        dir, kPoolRecord,
        json{{"version", 1}, {"id", id}, {"state", "pooled"}, {"ref", ref_to_json(*ref)}}.dump() +
            "\n");
  }
  return SpawnedSandbox{std::move(id), std::move(dir), std::move(*live), config.layer_digests};
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
        try {
          auto held = spawn_config(config);
          return spawn(config, "warm-pool", true);
        } catch (const ApiError& e) {
          spdlog::error("warm pool {}: {}", WarmPool::key(config), e.message);
          return std::nullopt;
        }
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

std::shared_ptr<Sandbox> SandboxRegistry::create(const SandboxConfig& config,
                                                 const std::string& request_id) {
  auto started = std::chrono::steady_clock::now();
  std::optional<SpawnedSandbox> pooled;
  if (pool_) pooled = pool_->take(config);
  SpawnedSandbox spawned = pooled ? std::move(*pooled) : spawn(config, request_id, false);
  auto sandbox = std::make_shared<Sandbox>(spawned.id, config, std::chrono::system_clock::now(),
                                           std::move(spawned.live), spawned.dir);
  try {
    persist(*sandbox);
  } catch (const ApiError&) {
    (void)sandbox->live().destroy();
    remove_dir(spawned.dir);
    throw;
  }
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  metrics_.create_seconds().observe(seconds);
  sandbox->log().add(
      {{"event", "created"}, {"duration_ms", seconds * 1000}, {"warm_pool", pooled.has_value()}});
  spdlog::info("sandbox={} request={} created in {:.1f} ms{} (init pid {})", spawned.id, request_id,
               seconds * 1000, pooled ? " from the warm pool" : "", sandbox->live().ref().init_pid);
  std::lock_guard lock(mutex_);
  sandboxes_[spawned.id] = sandbox;
  return sandbox;
}

std::shared_ptr<Sandbox> SandboxRegistry::find(const std::string& id) const {
  std::lock_guard lock(mutex_);
  auto it = sandboxes_.find(id);
  return it == sandboxes_.end() ? nullptr : it->second;
}

std::shared_ptr<Sandbox> SandboxRegistry::get(const std::string& id) const {
  auto sandbox = find(id);
  if (!sandbox) throw sandbox_not_found(id);
  sandbox->touch();
  return sandbox;
}

std::vector<std::shared_ptr<Sandbox>> SandboxRegistry::list() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Sandbox>> out;
  for (const auto& [id, sandbox] : sandboxes_) out.push_back(sandbox);
  return out;
}

bool SandboxRegistry::destroy(const std::string& id, const std::string& reason) {
  auto sandbox = find(id);
  if (!sandbox) return false;
  std::lock_guard lifecycle(sandbox->lifecycle_mutex());
  if (find(id) != sandbox) return true;  // destroyed meanwhile by another request
  // A frozen cgroup v1 task takes SIGKILL only once thawed.
  if (sandbox->state() == SandboxState::kPaused) (void)sandbox->live().thaw();
  if (auto destroyed = sandbox->live().destroy(); !destroyed) {
    spdlog::error("sandbox={} destroy failed: {}", id, destroyed.error().message());
    throw runtime_failure(destroyed.error());
  }
  {
    std::lock_guard lock(mutex_);
    sandboxes_.erase(id);
  }
  for (const auto& process : sandbox->processes()) process->wait_pumped(std::chrono::seconds(5));
  remove_dir(sandbox->dir());
  if (on_destroyed_) on_destroyed_(id);
  sandbox->log().add({{"event", "destroyed"}, {"reason", reason}});
  spdlog::info("sandbox={} destroyed ({})", id, reason);
  return true;
}

bool SandboxRegistry::destroy_soon(const std::string& id, const std::string& reason) {
  auto sandbox = find(id);
  if (!sandbox) return false;
  {
    std::lock_guard lifecycle(sandbox->lifecycle_mutex());
    if (find(id) != sandbox) return true;  // destroyed meanwhile by another request
    // init's death takes every process of the sandbox with it (a frozen one too: the kernel
    // delivers SIGKILL to frozen cgroup2 tasks; v1 ones are thawed by the supervisor's destroy).
    pidfd_signal(sandbox->live().init_pidfd(), SIGKILL);
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

void SandboxRegistry::finish_teardown(const std::shared_ptr<Sandbox>& sandbox,
                                      const std::string& reason) {
  if (sandbox->state() == SandboxState::kPaused) (void)sandbox->live().thaw();
  if (auto destroyed = sandbox->live().destroy(); !destroyed) {
    // The record stays: the next hutchd's recovery finds a dead sandbox and removes it.
    spdlog::error("sandbox={} teardown failed: {}", sandbox->id(), destroyed.error().message());
    return;
  }
  for (const auto& process : sandbox->processes()) process->wait_pumped(std::chrono::seconds(5));
  remove_dir(sandbox->dir());
  if (on_destroyed_) on_destroyed_(sandbox->id());
  sandbox->log().add({{"event", "destroyed"}, {"reason", reason}});
  spdlog::info("sandbox={} destroyed ({})", sandbox->id(), reason);
}

void SandboxRegistry::teardown_loop() {
  std::unique_lock lock(teardown_mutex_);
  for (;;) {
    teardown_wake_.wait(lock, [this] { return teardown_stopping_ || !teardowns_.empty(); });
    if (teardowns_.empty()) return;  // stopping, and nothing left to finish
    auto [sandbox, reason] = std::move(teardowns_.front());
    teardowns_.pop_front();
    lock.unlock();
    finish_teardown(sandbox, reason);
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

std::shared_ptr<Sandbox> SandboxRegistry::replace(const std::shared_ptr<Sandbox>& old,
                                                  SandboxConfig config,
                                                  const std::string& request_id) {
  const std::string id = old->id();
  const std::string& dir = old->dir();
  std::lock_guard lifecycle(old->lifecycle_mutex());
  if (find(id) != old) throw sandbox_not_found(id);  // destroyed meanwhile
  // A frozen cgroup v1 task takes SIGKILL only once thawed.
  if (old->state() == SandboxState::kPaused) (void)old->live().thaw();
  if (auto destroyed = old->live().destroy(); !destroyed) {
    spdlog::error("sandbox={} request={} rollback: destroy failed: {}", id, request_id,
                  destroyed.error().message());
    throw runtime_failure(destroyed.error());
  }
  for (const auto& process : old->processes()) process->wait_pumped(std::chrono::seconds(5));
  auto forget = [&] {
    {
      std::lock_guard lock(mutex_);
      sandboxes_.erase(id);
    }
    remove_dir(dir);
    if (on_destroyed_) on_destroyed_(id);
  };
  // The old supervisor is gone; its socket files are stale names the new one binds again.
  ::unlink((dir + "/exec.sock").c_str());
  ::unlink((dir + "/supervisor.sock").c_str());
  auto ref = zygote_.spawn(build_spec(config, state_dir_), dir + "/exec.sock",
                           dir + "/supervisor.sock", dir + "/supervisor.log", kStartTimeout);
  std::optional<LiveSandbox> live;
  if (ref) {
    if (auto connected = LiveSandbox::connect(*ref)) {
      live = std::move(*connected);
    } else {
      ::kill(ref->supervisor_pid, SIGKILL);
      ref = std::unexpected(connected.error());
    }
  }
  if (!live) {
    spdlog::error("sandbox={} request={} rollback: restart failed: {}", id, request_id,
                  ref.error().message());
    forget();
    throw runtime_failure(ref.error());
  }
  auto sandbox =
      std::make_shared<Sandbox>(id, std::move(config), old->created_at(), std::move(*live), dir);
  sandbox->inherit_processes(*old);
  try {
    persist(*sandbox);
  } catch (const ApiError&) {
    (void)sandbox->live().destroy();
    forget();
    throw;
  }
  sandbox->log().add({{"event", "rolled_back"}, {"layers", sandbox->config().layer_digests}});
  spdlog::info("sandbox={} request={} rolled back (init pid {})", id, request_id,
               sandbox->live().ref().init_pid);
  std::lock_guard lock(mutex_);
  sandboxes_[id] = sandbox;
  return sandbox;
}

void SandboxRegistry::pause(Sandbox& sandbox) {
  std::lock_guard lifecycle(sandbox.lifecycle_mutex());
  if (sandbox.state() == SandboxState::kPaused) return;
  if (auto frozen = sandbox.live().freeze(); !frozen) throw runtime_failure(frozen.error());
  sandbox.set_state(SandboxState::kPaused);
  persist(sandbox);
  sandbox.log().add({{"event", "paused"}});
}

void SandboxRegistry::resume(Sandbox& sandbox) {
  std::lock_guard lifecycle(sandbox.lifecycle_mutex());
  if (sandbox.state() == SandboxState::kRunning) return;
  if (auto thawed = sandbox.live().thaw(); !thawed) throw runtime_failure(thawed.error());
  sandbox.set_state(SandboxState::kRunning);
  persist(sandbox);
  sandbox.log().add({{"event", "resumed"}});
}

void SandboxRegistry::reap() {
  const auto steady_now = std::chrono::steady_clock::now();
  if (!last_cgroup_sweep_ || steady_now - *last_cgroup_sweep_ >= kCgroupSweepInterval) {
    last_cgroup_sweep_ = steady_now;
    auto removed = sweep_stale_cgroups(cgroup_parent_);
    if (!removed) {
      spdlog::error("cgroup sweep: {}", removed.error().message());
    } else if (*removed > 0) {
      spdlog::info("cgroup sweep: removed {} cgroups of crashed sandboxes", *removed);
    }
  }
  auto now = std::chrono::system_clock::now();
  for (const auto& sandbox : list()) {
    const SandboxConfig& config = sandbox->config();
    std::string reason;
    if (!sandbox->live().alive()) {
      reason = "init exited";
    } else if (config.max_lifetime_seconds &&
               now - sandbox->created_at() >= std::chrono::seconds(*config.max_lifetime_seconds)) {
      reason = "max lifetime reached";
    } else if (config.idle_ttl_seconds > 0 && sandbox->active_execs() == 0 &&
               sandbox->idle_for() >= std::chrono::seconds(config.idle_ttl_seconds) &&
               !sandbox->has_running_process()) {
      reason = "idle for " + std::to_string(config.idle_ttl_seconds) + " s";
    }
    if (reason.empty()) continue;
    try {
      destroy(sandbox->id(), reason);
    } catch (const ApiError& e) {
      spdlog::error("sandbox={} reaper: {}", sandbox->id(), e.message);
    }
  }
}

void SandboxRegistry::destroy_all() {
  stop_pool();
  for (const auto& sandbox : list()) {
    try {
      destroy(sandbox->id(), "hutchd exiting with --destroy-on-exit");
    } catch (const ApiError& e) {
      spdlog::error("sandbox={} destroy on exit: {}", sandbox->id(), e.message);
    }
  }
}

}  // namespace hutch::daemon
