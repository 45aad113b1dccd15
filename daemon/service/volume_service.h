// Persistent volumes as hutchd serves them (/v1/volumes, a create's "volumes"): the runtime's
// VolumeStore (runtime/volumes/volume_store.h) plus the attachment policy. A volume is in at most
// one sandbox read-write at a time, unless every read-write attachment asked for "shared";
// read-only attachments are unlimited. Attachments live in memory, rebuilt at startup from the
// re-adopted sandboxes' records (adopt), so a restart keeps them. No HTTP here.
//
// Codes: bad_volume (400: name, size), volume_not_found (404), volume_exists (409),
// volume_busy (409: attached, naming the sandbox).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "daemon/sandbox_spec.h"
#include "daemon/service/error.h"
#include "runtime/volumes/volume_store.h"

namespace hutch::daemon::service {

struct VolumeAttachment {
  std::string sandbox_id;
  std::string target;
  bool read_only = false;
  bool shared = false;
  // The sandbox was killed and its teardown is under way: it holds the volume no more, though its
  // mount lingers until the teardown ends (release).
  bool ending = false;
};

struct VolumeStatus {
  VolumeInfo info;
  std::optional<VolumeUsage> usage;  // empty when the filesystem could not be mounted to look
  std::vector<VolumeAttachment> attachments;
};

class VolumeService;

// The attachments reserve() made for one sandbox, released on destruction unless kept (the
// sandbox was registered; its teardown releases them then).
class VolumeReservation {
 public:
  VolumeReservation() = default;
  VolumeReservation(VolumeService* service, std::string sandbox_id)
      : service_(service), sandbox_id_(std::move(sandbox_id)) {}
  VolumeReservation(VolumeReservation&& other) noexcept
      : service_(std::exchange(other.service_, nullptr)),
        sandbox_id_(std::move(other.sandbox_id_)) {}
  VolumeReservation& operator=(VolumeReservation&&) = delete;
  ~VolumeReservation();
  void keep() { service_ = nullptr; }

 private:
  VolumeService* service_ = nullptr;
  std::string sandbox_id_;
};

class VolumeService {
 public:
  // The store in <state_dir>/volumes.
  static Result<std::unique_ptr<VolumeService>> open(const std::string& state_dir);

  ServiceResult<VolumeStatus> create(const std::string& name, uint64_t size_bytes);
  ServiceResult<std::vector<VolumeStatus>> list() const;
  ServiceResult<VolumeStatus> get(const std::string& name) const;
  // Errors: volume_busy while a sandbox has it attached (one being torn down does not count),
  // volume_not_found, bad_volume.
  ServiceResult<void> remove(const std::string& name);

  // Records `volumes` as attached to sandbox `sandbox_id` (a new one, or one being restarted by a
  // rollback, whose own attachments do not count against it). Errors: volume_not_found,
  // volume_busy (another sandbox has one read-write and not both shared).
  ServiceResult<VolumeReservation> reserve(const std::string& sandbox_id,
                                           const std::vector<SandboxVolume>& volumes);
  // Recovery: a re-adopted sandbox's attachments, recorded without checks.
  void adopt(const std::string& sandbox_id, const std::vector<SandboxVolume>& volumes);
  // The sandbox was killed (its teardown follows): its attachments no longer count against others.
  void end(const std::string& sandbox_id);
  // The sandbox is gone: its attachments end. Idempotent.
  void release(const std::string& sandbox_id);

  // One detached mount per entry (VolumeStore::open_mount), for the sandbox's launch.
  Result<std::vector<UniqueFd>> open_mounts(const std::vector<SandboxVolume>& volumes) const;

 private:
  explicit VolumeService(std::unique_ptr<VolumeStore> store) : store_(std::move(store)) {}
  VolumeStatus status_of(VolumeInfo info) const;  // with mutex_ not held

  std::unique_ptr<VolumeStore> store_;
  mutable std::mutex mutex_;
  std::map<std::string, std::vector<VolumeAttachment>> attachments_;  // by volume name
};

}  // namespace hutch::daemon::service
