#include "daemon/service/volume_service.h"

#include <algorithm>

namespace hutch::daemon::service {
namespace {

std::unexpected<ServiceError> volume_error(const Error& error) {
  switch (error.kind) {
    case ErrorKind::kInvalid:
      return service_error(ErrorKind::kInvalid, "bad_volume", error.message());
    case ErrorKind::kNotFound:
      return service_error(ErrorKind::kNotFound, "volume_not_found", error.message());
    case ErrorKind::kConflict:
      return service_error(ErrorKind::kConflict, "volume_exists", error.message());
    default:
      return std::unexpected(from_runtime(error));
  }
}

std::unexpected<ServiceError> busy(const std::string& volume, const VolumeAttachment& holder,
                                   const std::string& why) {
  return service_error(ErrorKind::kConflict, "volume_busy",
                       "volume " + volume + " is attached read-write to sandbox " +
                           holder.sandbox_id + " at " + holder.target + why);
}

}  // namespace

VolumeReservation::~VolumeReservation() {
  if (service_ != nullptr) service_->release(sandbox_id_);
}

Result<std::unique_ptr<VolumeService>> VolumeService::open(const std::string& state_dir) {
  auto store = HUTCH_TRY(VolumeStore::open(state_dir + "/volumes"));
  return std::unique_ptr<VolumeService>(new VolumeService(std::move(store)));
}

VolumeStatus VolumeService::status_of(VolumeInfo info) const {
  VolumeStatus status;
  // Mounting to look takes the store's mount lock, never ours.
  if (auto usage = store_->usage(info.name)) status.usage = *usage;
  {
    std::lock_guard lock(mutex_);
    if (auto it = attachments_.find(info.name); it != attachments_.end())
      status.attachments = it->second;
  }
  status.info = std::move(info);
  return status;
}

ServiceResult<VolumeStatus> VolumeService::create(const std::string& name, uint64_t size_bytes) {
  auto created = store_->create(name, size_bytes);
  if (!created) return volume_error(created.error());
  return status_of(std::move(*created));
}

ServiceResult<std::vector<VolumeStatus>> VolumeService::list() const {
  auto volumes = store_->list();
  if (!volumes) return volume_error(volumes.error());
  std::vector<VolumeStatus> out;
  for (VolumeInfo& info : *volumes) out.push_back(status_of(std::move(info)));
  return out;
}

ServiceResult<VolumeStatus> VolumeService::get(const std::string& name) const {
  auto info = store_->get(name);
  if (!info) return volume_error(info.error());
  return status_of(std::move(*info));
}

ServiceResult<void> VolumeService::remove(const std::string& name) {
  std::lock_guard lock(mutex_);
  if (auto it = attachments_.find(name); it != attachments_.end()) {
    for (const VolumeAttachment& holder : it->second) {
      if (holder.ending) continue;
      return service_error(ErrorKind::kConflict, "volume_busy",
                           "volume " + name + " is attached to sandbox " + holder.sandbox_id +
                               " at " + holder.target + ": delete the sandbox first");
    }
  }
  if (auto removed = store_->remove(name); !removed) return volume_error(removed.error());
  return {};
}

ServiceResult<VolumeReservation> VolumeService::reserve(const std::string& sandbox_id,
                                                        const std::vector<SandboxVolume>& volumes) {
  std::lock_guard lock(mutex_);
  for (const SandboxVolume& wanted : volumes) {
    // Checked under the lock: remove() cannot take the volume away between this and the record.
    if (auto exists = store_->get(wanted.name); !exists) return volume_error(exists.error());
    auto it = attachments_.find(wanted.name);
    if (it == attachments_.end()) continue;
    for (const VolumeAttachment& other : it->second) {
      if (other.sandbox_id == sandbox_id || other.ending || other.read_only || wanted.read_only)
        continue;
      if (!other.shared || !wanted.shared)
        return busy(wanted.name, other,
                    other.shared ? "; this request did not ask for \"shared\""
                                 : " (not shared): delete it first, or attach read-only");
    }
  }
  for (const SandboxVolume& wanted : volumes) {
    auto& list = attachments_[wanted.name];
    std::erase_if(list, [&](const VolumeAttachment& a) { return a.sandbox_id == sandbox_id; });
    list.push_back({sandbox_id, wanted.target, wanted.read_only, wanted.shared});
  }
  return VolumeReservation(this, sandbox_id);
}

void VolumeService::adopt(const std::string& sandbox_id,
                          const std::vector<SandboxVolume>& volumes) {
  std::lock_guard lock(mutex_);
  for (const SandboxVolume& volume : volumes)
    attachments_[volume.name].push_back(
        {sandbox_id, volume.target, volume.read_only, volume.shared});
}

void VolumeService::end(const std::string& sandbox_id) {
  std::lock_guard lock(mutex_);
  for (auto& [name, list] : attachments_) {
    for (VolumeAttachment& attachment : list) {
      if (attachment.sandbox_id == sandbox_id) attachment.ending = true;
    }
  }
}

void VolumeService::release(const std::string& sandbox_id) {
  std::lock_guard lock(mutex_);
  for (auto it = attachments_.begin(); it != attachments_.end();) {
    std::erase_if(it->second,
                  [&](const VolumeAttachment& a) { return a.sandbox_id == sandbox_id; });
    it = it->second.empty() ? attachments_.erase(it) : std::next(it);
  }
}

Result<std::vector<UniqueFd>> VolumeService::open_mounts(
    const std::vector<SandboxVolume>& volumes) const {
  std::vector<UniqueFd> mounts;
  for (const SandboxVolume& volume : volumes)
    mounts.push_back(HUTCH_TRY(store_->open_mount(volume.name, volume.read_only)));
  return mounts;
}

}  // namespace hutch::daemon::service
