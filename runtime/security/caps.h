// Capabilities: by default the sandbox keeps none (effective, permitted, inheritable, ambient,
// bounding), with securebits locked so that neither setuid nor execve can bring any back. A spec
// may keep a few (SandboxSpec::capabilities, e.g. a recipe bake's file-ownership set): they are
// capabilities of the sandbox's user namespace, reaching only its own mapped ids, and are passed
// to every process as ambient capabilities.
#pragma once

#include <cstdint>

#include "runtime/base/child_plan.h"

namespace hutch {

// The highest capability number the running kernel knows (libcap's cap_max_bits - 1).
// Call in the parent; the child receives the number.
int last_capability();

// Child steps (ChildStep). Drops every capability not in plan.capabilities (a bit per capability
// number, up to plan.last_cap) from the bounding set and locks the securebits. Needs
// CAP_SETPCAP, so it runs before the uid switch's own capability loss.
bool drop_bounding_and_lock_securebits(const ChildPlan& plan, ChildError* error);

// Sets effective, permitted and inheritable to plan.capabilities and raises the same as ambient,
// so that they survive execve (0: all sets empty).
bool set_capabilities(const ChildPlan& plan, ChildError* error);

}  // namespace hutch
