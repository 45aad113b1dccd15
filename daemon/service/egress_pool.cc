#include "daemon/service/egress_pool.h"

#include "runtime/ns/net.h"

namespace hutch::daemon::service {

Result<PreparedEgress> prepare_egress() {
  PreparedEgress prepared;
  prepared.netns = HUTCH_TRY(make_loopback_netns());
  HUTCH_TRY(net::install_egress_path(prepared.netns.get()));
  prepared.listeners = HUTCH_TRY(net::bind_egress_listeners(prepared.netns.get()));
  return prepared;
}

}  // namespace hutch::daemon::service
