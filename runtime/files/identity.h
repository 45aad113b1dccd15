// The identity the file API acts with: the calling thread's fsuid/fsgid set to the host ids of
// the sandbox's root for the length of one operation.
//
// Why: a sandbox's root fs is an overlay mounted inside the sandbox's user namespace, where host
// uid 0 is not mapped, so an entry created as host root fails with EOVERFLOW. Under the sandbox
// root's ids what is created belongs to the sandbox, and the sandbox's permissions apply: a
// non-zero fsuid drops CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER and the other file
// capabilities from the thread's effective set (capabilities(7)), so a 0600 file of another
// in-sandbox user is EACCES. setfsuid(2) and setfsgid(2) act on the calling thread only, so the
// daemon's other worker threads keep their own ids.
#pragma once

#include <sys/types.h>

#include "runtime/files/sandbox_fs.h"

namespace hutch::files::detail {

class OwnerIdentity {
 public:
  // Switches to owner's ids and checks that both switches took effect: setfsuid(2) reports no
  // error, it returns the previous id whether it changed it or not. kIo when they did not (the
  // process lacks CAP_SETUID or CAP_SETGID); the thread is then back on the ids it had.
  static FsResult<OwnerIdentity> enter(Owner owner);

  OwnerIdentity(OwnerIdentity&& other) noexcept;
  OwnerIdentity(const OwnerIdentity&) = delete;
  OwnerIdentity& operator=(const OwnerIdentity&) = delete;
  OwnerIdentity& operator=(OwnerIdentity&&) = delete;
  // Back to the ids the thread had before enter(), so identities nest (write_file in edit).
  ~OwnerIdentity();

 private:
  OwnerIdentity(uid_t previous_uid, gid_t previous_gid)
      : previous_uid_(previous_uid), previous_gid_(previous_gid) {}
  uid_t previous_uid_;
  gid_t previous_gid_;
  bool active_ = true;
};

}  // namespace hutch::files::detail
