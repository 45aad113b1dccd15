#include "runtime/security/caps.h"

#include <linux/capability.h>
#include <linux/securebits.h>
#include <sys/capability.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>

namespace hutch {

int last_capability() { return static_cast<int>(cap_max_bits()) - 1; }

bool drop_bounding_and_lock_securebits(const ChildPlan& plan, ChildError* error) {
  const uint64_t keep = plan.capabilities;
  // NOROOT: uid 0 gains nothing at execve; NO_SETUID_FIXUP: setuid neither grants nor keeps;
  // each flag locked so the workload cannot undo it. Ambient raising stays possible only when
  // capabilities are kept (set_capabilities raises them; the bounding set caps what it can).
  constexpr unsigned long kSecurebits = SECBIT_NOROOT | SECBIT_NOROOT_LOCKED |
                                        SECBIT_NO_SETUID_FIXUP | SECBIT_NO_SETUID_FIXUP_LOCKED |
                                        SECBIT_KEEP_CAPS_LOCKED;
  constexpr unsigned long kNoAmbient =
      SECBIT_NO_CAP_AMBIENT_RAISE | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED;
  if (prctl(PR_SET_SECUREBITS, kSecurebits | (keep == 0 ? kNoAmbient : 0), 0, 0, 0) != 0) {
    return child_failure(error, "prctl(PR_SET_SECUREBITS)", "", errno);
  }
  for (int cap = 0; cap <= plan.last_cap; ++cap) {
    if (cap < 64 && (keep >> cap & 1)) continue;
    if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0 && errno != EINVAL) {
      return child_failure(error, "prctl(PR_CAPBSET_DROP)", "", errno);
    }
  }
  return true;
}

bool set_capabilities(const ChildPlan& plan, ChildError* error) {
  const uint64_t keep = plan.capabilities;
  if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) != 0) {
    return child_failure(error, "prctl(PR_CAP_AMBIENT_CLEAR_ALL)", "", errno);
  }
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  for (int word = 0; word < 2; ++word) {
    const auto bits = static_cast<uint32_t>(keep >> (32 * word));
    data[word] = {bits, bits, bits};  // effective, permitted, inheritable
  }
  if (syscall(SYS_capset, &header, data) != 0) {
    return child_failure(error, keep == 0 ? "capset(all empty)" : "capset(kept capabilities)", "",
                         errno);
  }
  for (int cap = 0; cap < 64; ++cap) {
    if (!(keep >> cap & 1)) continue;
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, cap, 0, 0) != 0) {
      return child_failure(error, "prctl(PR_CAP_AMBIENT_RAISE)", "", errno);
    }
  }
  return true;
}

}  // namespace hutch
