// User namespace: the id maps that make root inside an unprivileged id outside.
#pragma once

#include <sys/types.h>

#include "runtime/base/child_plan.h"
#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"
#include "runtime/spec.h"

namespace hutch {

// Refuses maps that would reach host id 0 or overflow the 32-bit id space.
Result<void> validate_id_map(const IdMap& ids);

// Writes /proc/<pid>/{uid,gid}_map from the parent (which is root in the initial namespace).
Result<void> write_id_maps(pid_t pid, const IdMap& ids);

// An fd of the child's user namespace, for idmapped mounts.
Result<UniqueFd> open_userns(pid_t pid);

// Child step (ChildStep): limits the child's user namespace to zero nested namespaces
// (user.max_user_namespaces, per namespace since Linux 4.9), through the host's /proc before the
// child detaches it.
bool forbid_nested_userns(const ChildPlan& plan, ChildError* error);

}  // namespace hutch
