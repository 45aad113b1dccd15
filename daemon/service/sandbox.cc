#include "daemon/service/sandbox.h"

#include <spdlog/spdlog.h>

#include "daemon/service/sandbox_record.h"

namespace hutch::daemon {

using nlohmann::json;

std::string state_name(SandboxState state) {
  return state == SandboxState::kPaused ? "paused" : "running";
}

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
      dir_(std::move(dir)),
      network_(config_.network) {
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

Result<files::SandboxFs> Sandbox::fs() {
  std::lock_guard lock(mutex_);
  if (!root_) root_ = HUTCH_TRY(live_.open_root());
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

net::Policy Sandbox::network() const {
  std::lock_guard lock(mutex_);
  return network_;
}

void Sandbox::set_network(net::Policy policy) {
  std::lock_guard lock(mutex_);
  network_ = std::move(policy);
}

std::string Sandbox::network_error() const {
  std::lock_guard lock(mutex_);
  return network_error_;
}

void Sandbox::set_network_error(std::string error) {
  std::lock_guard lock(mutex_);
  network_error_ = std::move(error);
}

json network_error_json(const std::string& error) {
  if (error.empty()) return nullptr;
  return {{"code", "network_not_attached"}, {"message", error}};
}

std::map<std::string, std::string> Sandbox::network_env() const {
  std::lock_guard lock(mutex_);
  return network_env_;
}

void Sandbox::set_network_env(std::map<std::string, std::string> env) {
  std::lock_guard lock(mutex_);
  network_env_ = std::move(env);
}

json Sandbox::to_json() const {
  json out = config_to_json(config_);
  out["network"] = network_to_json(network());
  if (std::string error = network_error(); !error.empty())
    out["network_error"] = network_error_json(error);
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
          {"config",
           [this] {
             json config = config_to_json(config_);
             config["network"] = network_to_json(network());
             return config;
           }()},
          {"ref", ref_to_json(live_.ref())}};
}

}  // namespace hutch::daemon
