// The network routes: a sandbox's policy and stats (GET, PUT .../network) and its decision log
// (GET .../network/log, NDJSON, ?follow=1 to stream). They decode, call the registry and the
// network service (daemon/service/network_service.h), and encode.
#include <chrono>
#include <string>
#include <vector>

#include "daemon/codec/connection_log.h"
#include "daemon/errors.h"
#include "daemon/json_codec.h"
#include "daemon/server.h"
#include "daemon/service/network_service.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;

// A follower's wait for new decisions; a blank line (keepalive) after kKeepalive without any,
// which is also when a client that went away is noticed.
constexpr auto kPollWait = std::chrono::milliseconds(500);
constexpr auto kKeepalive = std::chrono::seconds(5);

json status_json(const service::NetworkStatus& status, const Sandbox& sandbox) {
  json out = network_to_json(status.policy);
  out["error"] = network_error_json(sandbox.network_error());
  if (status.stats) {
    const net::SandboxNetStats& s = *status.stats;
    out["stats"] = {{"connections", s.connections}, {"denied", s.denied},
                    {"dns_queries", s.dns_queries}, {"dns_denied", s.dns_denied},
                    {"active", s.active},           {"bytes_up", s.bytes_up},
                    {"bytes_down", s.bytes_down}};
  } else {
    out["stats"] = nullptr;
  }
  out["ca_pem"] = status.ca_pem ? json(*status.ca_pem) : json(nullptr);
  out["placeholders"] = status.placeholders;
  return out;
}

service::NetworkService& network_of(SandboxRegistry& registry) {
  service::NetworkService* network = registry.network();
  if (network == nullptr) throw ApiError(501, "unsupported", "hutchd has no network service");
  return *network;
}

}  // namespace

void add_network_routes(Routes& routes, DaemonContext& context) {
  SandboxRegistry& registry = context.registry;
  const std::string one = "/v1/sandboxes/([A-Za-z0-9_-]+)/network";
  routes.get(one, [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
    auto sandbox = or_throw(registry.get(sandbox_id(req)));
    send_json(
        res, 200,
        status_json(network_of(registry).status(sandbox->id(), sandbox->network()), *sandbox));
  });
  routes.put_reader(
      one, [&registry, &context](Call&, const httplib::Request& req, httplib::Response& res,
                                 const httplib::ContentReader& reader) {
        auto sandbox = or_throw(registry.get(sandbox_id(req)));
        std::string body;
        const uint64_t cap = context.options.max_json_bytes;
        bool fits = true;
        reader([&](const char* data, size_t length) {
          fits = body.size() + length <= cap;
          if (fits) body.append(data, length);
          return fits;
        });
        if (!fits)
          throw ApiError(413, "payload_too_large",
                         "JSON bodies are limited to " + std::to_string(cap) + " bytes");
        net::Policy policy = parse_network(json::parse(body));
        or_throw(registry.set_network_policy(*sandbox, policy));
        send_json(
            res, 200,
            status_json(network_of(registry).status(sandbox->id(), sandbox->network()), *sandbox));
      });
  routes.get(one + "/log", [&registry](Call& call, const httplib::Request& req,
                                       httplib::Response& res) {
    auto sandbox = or_throw(registry.get(sandbox_id(req)));
    service::NetworkService& network = network_of(registry);
    const std::string follow = req.get_param_value("follow");
    if (follow != "1" && follow != "true") {
      std::string text;
      for (const auto& entry : network.decisions(sandbox->id(), 0, {}, nullptr))
        text += dump_json(connection_log_to_json(entry.log, entry.seq)) + "\n";
      res.status = 200;
      res.set_content(text, "application/x-ndjson");
      return;
    }
    std::shared_ptr<void> slot = call.slot;
    res.status = 200;
    res.set_chunked_content_provider("application/x-ndjson", [&registry, &network, sandbox, slot](
                                                                 size_t, httplib::DataSink& sink) {
      uint64_t after = 0;
      auto quiet_since = std::chrono::steady_clock::now();
      // Until the client goes (a write fails) or the sandbox is deleted (or rolled back:
      // its successor has a log of its own).
      while (registry.find(sandbox->id()) == sandbox) {
        for (const auto& entry : network.decisions(sandbox->id(), after, kPollWait, nullptr)) {
          std::string line = dump_json(connection_log_to_json(entry.log, entry.seq)) + "\n";
          if (!sink.write(line.data(), line.size())) return false;
          after = entry.seq;
          quiet_since = std::chrono::steady_clock::now();
        }
        if (std::chrono::steady_clock::now() - quiet_since >= kKeepalive) {
          if (!sink.write("\n", 1)) return false;
          quiet_since = std::chrono::steady_clock::now();
        }
      }
      sink.done();
      return true;
    });
  });
}

}  // namespace hutch::daemon
