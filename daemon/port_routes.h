// A sandbox's TCP ports through hutchd: ANY /v1/sandboxes/{id}/ports/{port}/{path...}, an HTTP/1.1
// reverse proxy to the sandbox's 127.0.0.1:port (connected inside its network namespace,
// daemon/service/port_service.h), and the per-port tokens (.../port-tokens/{port}) that let a
// client reach that one port without hutchd's bearer token.
#pragma once

#include "daemon/server.h"

namespace hutch::daemon {

void add_port_routes(Routes& routes, DaemonContext& context);

}  // namespace hutch::daemon
