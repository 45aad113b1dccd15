// Filtered sandboxes' network namespaces made ahead, so a create with egress pays none of the
// path's install (~1.1 ms: the nft table, the veth, IPv6's local routes) or the listeners' binds:
// a thread of hutchd keeps `size` namespaces (made_ahead.h), each owned by the host's user
// namespace, with lo up, the egress path (net/egress_path.h) installed and the engine's listeners
// bound in it. The create takes one, hands its fd to the zygote (the supervisor joins it,
// launch.cc) and gives the listeners to the engine. Each namespace goes to one sandbox at most:
// take() moves it out, and whoever holds it last (the pool, a failed create) closing its fds
// frees it.
#pragma once

#include "daemon/service/made_ahead.h"
#include "net/egress_path.h"
#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch::daemon::service {

struct PreparedEgress {
  UniqueFd netns;  // the namespace (setns(2) joins it)
  net::EgressListeners listeners;
};

// A new namespace owned by the caller's user namespace with the path installed and the
// listeners bound: the pool's unit, made on the calling thread (which stays in its namespace).
Result<PreparedEgress> prepare_egress();

// size 0: no thread, take() always empty (every create installs its own path).
class EgressPool : public MadeAhead<PreparedEgress> {
 public:
  explicit EgressPool(size_t size)
      : MadeAhead<PreparedEgress>(size, prepare_egress, "network namespaces ahead") {}
};

}  // namespace hutch::daemon::service
