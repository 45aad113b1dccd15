// A network decision (net::ConnectionLog) as one NDJSON line of GET .../network/log and of
// `hutch run --net-log`: the same fields in both.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "net/engine/engine.h"

namespace hutch::daemon {

// With "seq": the decision's number in its sandbox's log.
nlohmann::json connection_log_to_json(const net::ConnectionLog& log, uint64_t seq);

}  // namespace hutch::daemon
