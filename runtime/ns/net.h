// Network namespace setup: loopback up, from inside or ahead of time.
#pragma once

#include "runtime/base/child_plan.h"
#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch {

// Child step (ChildStep): brings "lo" up in the child's network namespace when
// plan.loopback_up (false: no network, or a namespace made ahead with lo already up).
bool bring_loopback_up(const ChildPlan& plan, ChildError* error);

// A new network namespace with "lo" up, as an fd (setns(2) joins it); the calling thread stays
// in its own. For hutchd's zygote, which makes them ahead of the sandboxes that will use them:
// creating one costs ~0.3 ms. Owned by the caller's user namespace, so a sandbox in it cannot
// administer it; it has no capability to anyway.
Result<UniqueFd> make_loopback_netns();

}  // namespace hutch
