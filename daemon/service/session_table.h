// A sandbox's persistent shell sessions: the working directory and exported environment hutchd
// keeps between a session's commands (daemon/service/session_service.h runs them, and records
// them in the sandbox's dir so that a restarted hutchd has them). It lives in the Sandbox, so a
// sandbox's sessions end with it.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace hutch::daemon {

// What the next command of a session starts from.
struct SessionState {
  std::string cwd;
  std::map<std::string, std::string> env;  // merged over the sandbox's exec environment
  std::vector<std::string> unset;          // names of that environment the session unset
};

class ShellSession {
 public:
  ShellSession(std::string name, SessionState state)
      : name_(std::move(name)), state_(std::move(state)) {}
  const std::string& name() const { return name_; }

  // One command at a time: false while another runs.
  bool try_begin() { return !busy_.exchange(true); }
  void end() { busy_.store(false); }

  SessionState state() const {
    std::lock_guard lock(mutex_);
    return state_;
  }
  void set_state(SessionState state) {
    std::lock_guard lock(mutex_);
    state_ = std::move(state);
  }

 private:
  const std::string name_;
  std::atomic<bool> busy_{false};
  mutable std::mutex mutex_;
  SessionState state_;
};

class SessionTable {
 public:
  // kExists: `name` is taken; kFull: the table holds `max` sessions already.
  enum class AddOutcome { kAdded, kExists, kFull };
  AddOutcome add(std::shared_ptr<ShellSession> session, size_t max) {
    std::lock_guard lock(mutex_);
    if (sessions_.contains(session->name())) return AddOutcome::kExists;
    if (sessions_.size() >= max) return AddOutcome::kFull;
    sessions_.emplace(session->name(), std::move(session));
    return AddOutcome::kAdded;
  }
  std::shared_ptr<ShellSession> find(const std::string& name) const {
    std::lock_guard lock(mutex_);
    auto it = sessions_.find(name);
    return it == sessions_.end() ? nullptr : it->second;
  }
  bool remove(const std::string& name) {
    std::lock_guard lock(mutex_);
    return sessions_.erase(name) > 0;
  }
  std::vector<std::string> names() const {
    std::lock_guard lock(mutex_);
    std::vector<std::string> out;
    for (const auto& [name, session] : sessions_) out.push_back(name);
    return out;
  }
  // The next free generated name ("s1", "s2", ...).
  std::string next_name() {
    std::lock_guard lock(mutex_);
    return "s" + std::to_string(++generated_);
  }
  // For the record: every session, and how many names were generated.
  std::vector<std::shared_ptr<ShellSession>> all() const {
    std::lock_guard lock(mutex_);
    std::vector<std::shared_ptr<ShellSession>> out;
    for (const auto& [name, session] : sessions_) out.push_back(session);
    return out;
  }
  uint64_t generated() const {
    std::lock_guard lock(mutex_);
    return generated_;
  }
  void set_generated(uint64_t generated) {
    std::lock_guard lock(mutex_);
    generated_ = generated;
  }
  // Serializes the writes of the record (one temp file name per sandbox).
  std::mutex& record_mutex() { return record_mutex_; }

 private:
  mutable std::mutex mutex_;
  std::mutex record_mutex_;
  std::map<std::string, std::shared_ptr<ShellSession>> sessions_;
  uint64_t generated_ = 0;
};

}  // namespace hutch::daemon
