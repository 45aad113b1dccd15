// A network decision (net::ConnectionLog) as one NDJSON line of GET .../network/log and of
// `hutch run --net-log`: the same fields in both.
#pragma once

#include <nlohmann/json.hpp>

#include "net/engine/engine.h"

namespace hutch::daemon {

nlohmann::json connection_log_to_json(const net::ConnectionLog& log);

}  // namespace hutch::daemon
