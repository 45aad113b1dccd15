#include "daemon/codec/connection_log.h"

#include "daemon/codec/time.h"

namespace hutch::daemon {

nlohmann::json connection_log_to_json(const net::ConnectionLog& log, uint64_t seq) {
  using nlohmann::json;
  json out = {{"seq", seq},
              {"time", iso8601(log.started)},
              {"protocol", log.protocol},
              {"name", log.name ? json(*log.name) : json(nullptr)},
              {"address", log.address},
              {"port", log.port},
              {"allowed", log.allowed},
              {"rule", log.rule},
              {"reason", log.reason},
              {"bytes_up", log.bytes_up},
              {"bytes_down", log.bytes_down},
              {"duration_ms", log.duration_ms}};
  if (!log.via_proxy.empty()) {
    out["via_proxy"] = log.via_proxy;
    out["proxy_failed"] = log.proxy_failed;
  }
  return out;
}

}  // namespace hutch::daemon
