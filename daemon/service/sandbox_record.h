// A sandbox's on-disk record, <state>/sandboxes/<id>/sandbox.json, and what crash recovery makes
// of it. The record is what lets a restarted hutchd re-adopt a live sandbox or deliberately
// destroy it; it is written atomically, so a reader sees the old record or the new one.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "daemon/json_codec.h"
#include "runtime/base/error.h"
#include "runtime/live_sandbox.h"

namespace hutch::daemon {

inline constexpr const char* kRecord = "sandbox.json";
// A warm-pool sandbox's record until a create takes it; the create then writes kRecord, which
// wins over this one. A new name rather than a replacement: on ext4, renaming over a record
// written a while ago costs ~0.3 ms (the old inode's delayed blocks are dealt with at once),
// renaming onto a free name ~0.05 ms, and this is on the create's path.
inline constexpr const char* kPoolRecord = "pooled.json";

nlohmann::json ref_to_json(const LiveSandboxRef& ref);
// Throws nlohmann::json exceptions on a missing or mistyped field.
LiveSandboxRef ref_from_json(const nlohmann::json& j);

// A record without a ref: the creation is in progress, and recovery destroys what it finds.
std::string creating_record(const std::string& id);
// A warm-pool sandbox: nobody has seen it, so recovery destroys it too.
std::string pooled_record(const std::string& id, const LiveSandboxRef& ref);

// tmp + rename of <dir>/<name>.
Result<void> write_atomically(const std::string& dir, const std::string& name,
                              const std::string& text);

// The pid listening on a unix socket (SO_PEERCRED), 0 when nobody does.
pid_t socket_peer(const std::string& path);
// The first child of `pid` (the supervisor's only child is the sandbox's init), 0 when none.
pid_t first_child(pid_t pid);

// A record recovery can adopt, with its supervisor connected.
struct AdoptableRecord {
  SandboxConfig config;
  std::chrono::system_clock::time_point created_at;
  bool paused = false;
  LiveSandbox live;
};

// Reads the record in `dir` and connects to its supervisor. nullopt when the sandbox is not to
// be adopted (no complete record, supervisor gone, an idle warm-pool sandbox, an unreadable
// config): whatever of it still runs is destroyed, the reason logged, and the caller removes
// the dir.
std::optional<AdoptableRecord> recover_record(const std::string& id, const std::string& dir);

}  // namespace hutch::daemon
