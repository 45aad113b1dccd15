// OwnerIdentity: setfsuid/setfsgid around one file operation, checked, restored on every path.
#include "runtime/files/identity.h"

#include <sys/fsuid.h>

#include <cstdlib>
#include <string>
#include <utility>

#include "runtime/files/resolve.h"

namespace hutch::files::detail {
namespace {

// setfsuid(-1) changes nothing (-1 is never a valid id) and returns the current fsuid: reading it
// back without parsing /proc/thread-self/status (setfsuid(2)).
uid_t current_fsuid() { return static_cast<uid_t>(::setfsuid(static_cast<uid_t>(-1))); }
gid_t current_fsgid() { return static_cast<gid_t>(::setfsgid(static_cast<gid_t>(-1))); }

}  // namespace

FsResult<OwnerIdentity> OwnerIdentity::enter(Owner owner) {
  const auto previous_gid = static_cast<gid_t>(::setfsgid(owner.gid));
  const auto previous_uid = static_cast<uid_t>(::setfsuid(owner.uid));
  // Constructed before the check: a half-done switch is undone when the error returns.
  OwnerIdentity identity(previous_uid, previous_gid);
  const uid_t uid = current_fsuid();
  const gid_t gid = current_fsgid();
  if (uid != owner.uid || gid != owner.gid) {
    return fail(Errc::kIo, "setfsuid(" + std::to_string(owner.uid) + ")/setfsgid(" +
                               std::to_string(owner.gid) +
                               "): the sandbox root's identity did not take effect (fsuid " +
                               std::to_string(uid) + ", fsgid " + std::to_string(gid) +
                               "): the daemon needs CAP_SETUID and CAP_SETGID");
  }
  return identity;
}

OwnerIdentity::OwnerIdentity(OwnerIdentity&& other) noexcept
    : previous_uid_(other.previous_uid_),
      previous_gid_(other.previous_gid_),
      active_(std::exchange(other.active_, false)) {}

OwnerIdentity::~OwnerIdentity() {
  if (!active_) return;
  // In the reverse order of enter().
  ::setfsuid(previous_uid_);
  ::setfsgid(previous_gid_);
  // Going back to the ids this thread just had cannot be refused (CAP_SETUID is not a file
  // capability, so the switch kept it). Should it be anyway, the thread would go on to do the
  // daemon's own work under a sandbox's ids: stop rather than leave files of the daemon owned by
  // a sandbox.
  if (current_fsuid() != previous_uid_ || current_fsgid() != previous_gid_) std::abort();
}

}  // namespace hutch::files::detail
