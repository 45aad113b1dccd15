// The sandbox lifecycle routes, with health and metrics: each decodes its request, calls the
// registry (daemon/service/sandbox_registry.h) and encodes the answer.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "daemon/errors.h"
#include "daemon/json_codec.h"
#include "daemon/server.h"
#include "daemon/service/recipes.h"

namespace hutch::daemon {

using nlohmann::json;

void add_lifecycle_routes(Routes& routes, DaemonContext& context) {
  SandboxRegistry& registry = context.registry;
  routes.get("/v1/health", [&registry](Call&, const httplib::Request&, httplib::Response& res) {
    const RecoveryReport& recovered = registry.recovered();
    send_json(res, 200,
              {{"status", "ok"},
               {"sandboxes", registry.list().size()},
               {"recovered", {{"adopted", recovered.adopted}, {"removed", recovered.removed}}}});
  });
  routes.get("/metrics", [&context](Call&, const httplib::Request&, httplib::Response& res) {
    uint64_t running = 0, paused = 0;
    for (const auto& sandbox : context.registry.list())
      (sandbox->state() == SandboxState::kPaused ? paused : running)++;
    std::string text = context.metrics.render(running, paused);
    if (const service::NetworkService* network = context.registry.network()) {
      // What is made ahead for filtered and open creates (--net-ahead): ready, and wanted.
      auto ahead = [&text](const std::string& name, const std::string& what, size_t ready,
                           size_t wanted) {
        text += "# HELP " + name + " " + what +
                " made ahead for filtered and open creates (--net-ahead), ready and wanted.\n"
                "# TYPE " +
                name + " gauge\n" + name + "{state=\"ready\"} " + std::to_string(ready) + "\n" +
                name + "{state=\"wanted\"} " + std::to_string(wanted) + "\n";
      };
      ahead("hutch_net_netns_ahead", "Network namespaces", network->pool().ready(),
            network->pool().size());
      ahead("hutch_net_ca_ahead", "Sandbox CAs", network->trust_pool().ready(),
            network->trust_pool().size());
    }
    res.set_content(text, "text/plain; version=0.0.4");
  });
  routes.post("/v1/sandboxes",
              [&registry, &recipes = context.recipes](Call& call, const httplib::Request& req,
                                                      httplib::Response& res) {
                const json body = parse_body(req);
                SandboxConfig config = parse_sandbox_config(body);
                // --default-network, for a create that names none.
                if (!body.contains("network") && registry.network() != nullptr)
                  config.network.mode = registry.network()->default_mode();
                auto pinned = or_throw(recipes.resolve(config));  // held until the sandbox runs
                auto sandbox = or_throw(registry.create(config, call.request_id));
                send_json(res, 201, sandbox->to_json());
              });
  routes.get("/v1/sandboxes",
             [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
               std::vector<std::pair<std::string, std::string>> wanted;
               // httplib splits "label=k=v" at every '=': read the raw query instead.
               std::string query = req.target.find('?') == std::string::npos
                                       ? ""
                                       : req.target.substr(req.target.find('?') + 1);
               std::vector<std::string> labels;
               for (size_t start = 0; start <= query.size();) {
                 size_t end = std::min(query.find('&', start), query.size());
                 std::string part = query.substr(start, end - start);
                 if (part.starts_with("label="))
                   labels.push_back(httplib::detail::decode_url(part.substr(6), true));
                 start = end + 1;
               }
               for (const std::string& label : labels) {
                 size_t eq = label.find('=');
                 if (eq == std::string::npos) throw bad_request("label filter must be key=value");
                 wanted.emplace_back(label.substr(0, eq), label.substr(eq + 1));
               }
               json list = json::array();
               for (const auto& sandbox : registry.list()) {
                 const auto& labels = sandbox->config().labels;
                 bool match = std::ranges::all_of(wanted, [&](const auto& kv) {
                   auto it = labels.find(kv.first);
                   return it != labels.end() && it->second == kv.second;
                 });
                 if (match) list.push_back(sandbox->to_json());
               }
               send_json(res, 200, {{"sandboxes", list}});
             });
  const std::string one = "/v1/sandboxes/([A-Za-z0-9_-]+)";
  routes.get(one, [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
    send_json(res, 200, or_throw(registry.get(sandbox_id(req)))->to_json());
  });
  // Answered once init was sent SIGKILL (the pid namespace dies with it); the rest of the
  // teardown (exits, cgroups, state dir) finishes in the background unless ?wait=true. An
  // unknown id is no error.
  routes.del(one, [&registry](Call& call, const httplib::Request& req, httplib::Response& res) {
    const std::string reason = "deleted by request " + call.request_id;
    if (req.get_param_value("wait") == "true") {
      or_throw(registry.destroy(sandbox_id(req), reason));
    } else {
      or_throw(registry.destroy_soon(sandbox_id(req), reason));
    }
    res.status = 204;
  });
  routes.get("/v1/pools", [&registry](Call&, const httplib::Request&, httplib::Response& res) {
    json pools = json::array();
    for (const auto& [rootfs, status] : registry.pool_status()) {
      pools.push_back({{"rootfs", rootfs}, {"size", status.first}, {"idle", status.second}});
    }
    send_json(res, 200, {{"pools", pools}});
  });
  routes.post(one + "/pause",
              [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
                auto sandbox = or_throw(registry.get(sandbox_id(req)));
                or_throw(registry.pause(*sandbox));
                send_json(res, 200, sandbox->to_json());
              });
  routes.post(one + "/resume",
              [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
                auto sandbox = or_throw(registry.get(sandbox_id(req)));
                or_throw(registry.resume(*sandbox));
                send_json(res, 200, sandbox->to_json());
              });
  routes.get(one + "/logs",
             [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
               auto sandbox = or_throw(registry.get(sandbox_id(req)));
               std::string text;
               for (const json& event : sandbox->log().snapshot()) text += dump_json(event) + "\n";
               res.status = 200;
               res.set_content(text, "application/x-ndjson");
             });
}

}  // namespace hutch::daemon
