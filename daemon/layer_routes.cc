// Recipes, snapshots, forks, checkpoints and layer gc through hutchd: decoding, a call into the
// recipe service (daemon/service/recipes.h, where the orchestration and its locking live), and
// encoding. Errors become HTTP statuses in api_error (daemon/errors.cc) only.
#include "daemon/layer_routes.h"

#include <filesystem>

#include "daemon/errors.h"
#include "daemon/json_codec.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;
using service::RecipeService;

constexpr size_t kMaxCheckpointName = 41;

json object_body(const httplib::Request& req) {
  json body = parse_body(req);
  if (!body.is_object()) throw bad_request("the request body must be an object");
  return body;
}

std::string created(time_t seconds) {
  return iso8601(std::chrono::system_clock::from_time_t(seconds));
}

json snapshot_json(const service::Snapshot& snapshot) {
  return {{"name", snapshot.name},
          {"digest", snapshot.digest},
          {"files", snapshot.stats.files},
          {"bytes", snapshot.stats.bytes},
          {"frozen_ms", snapshot.stats.frozen.count() / 1000.0},
          {"duration_ms", snapshot.duration_ms},
          {"volumes_excluded", snapshot.volumes_excluded}};
}

service::BakeParams bake_params(const httplib::Request& req) {
  json body = parse_body(req);
  if (!body.is_object()) throw bad_request("the request body must be a JSON object");
  for (const auto& [key, value] : body.items()) {
    if (key != "dir" && key != "name" && key != "base" && key != "env" && key != "timeout_seconds")
      throw bad_request("unknown field \"" + key + "\"");
  }
  service::BakeParams params;
  params.dir = string_field(body, "dir");
  check_no_nul(params.dir, "dir");
  params.name =
      optional_string(body, "name").value_or(std::filesystem::path(params.dir).filename());
  check_layer_name(params.name, "name");
  if ((params.base = optional_string(body, "base"))) check_no_nul(*params.base, "base");
  if (const json* env = optional_field(body, "env")) {
    if (!env->is_object()) throw bad_request("env must be an object of strings");
    for (const auto& [key, value] : env->items()) {
      if (!valid_env_key(key) || !value.is_string())
        throw bad_request("env: keys are [A-Za-z_][A-Za-z0-9_]*, values strings");
      check_no_nul(value.get_ref<const std::string&>(), "env." + key);
      params.env[key] = value.get<std::string>();
    }
  }
  params.timeout_seconds = optional_uint(body, "timeout_seconds").value_or(params.timeout_seconds);
  return params;
}

}  // namespace

void add_layer_routes(Routes& routes, SandboxRegistry& registry, RecipeService& recipes) {
  routes.post("/v1/recipes", [&recipes](Call&, const httplib::Request& req,
                                        httplib::Response& res) {
    service::BakeReport report = or_throw(recipes.bake(bake_params(req)));
    if (report.ok) {
      send_json(res, 201,
                {{"name", report.name},
                 {"digest", report.digest},
                 {"cached", report.cached},
                 {"log", report.log}});
    } else {
      send_json(
          res, 422,
          {{"error", {{"code", "bake_failed"}, {"message", report.message}, {"log", report.log}}}});
    }
  });
  routes.get("/v1/recipes", [&recipes](Call&, const httplib::Request&, httplib::Response& res) {
    json list = json::array();
    for (const service::TaggedLayer& layer : or_throw(recipes.list())) {
      list.push_back({{"name", layer.name},
                      {"digest", layer.digest},
                      {"created", created(layer.created)},
                      {"size", layer.size},
                      {"base", layer.base}});
    }
    send_json(res, 200, {{"recipes", list}});
  });
  routes.del("/v1/recipes/([^/]+)",
             [&recipes](Call&, const httplib::Request& req, httplib::Response& res) {
               const std::string name = req.matches[1].str();
               check_layer_name(name, "recipe name");
               or_throw(recipes.remove(name));
               res.status = 204;
             });

  const std::string one = "/v1/sandboxes/([A-Za-z0-9_-]+)";
  routes.post(one + "/snapshot",
              [&registry, &recipes](Call&, const httplib::Request& req, httplib::Response& res) {
                json body = object_body(req);
                const std::string name = string_field(body, "name");
                check_layer_name(name, "name");
                auto sandbox = or_throw(registry.get(sandbox_id(req)));
                send_json(res, 201, snapshot_json(or_throw(recipes.snapshot(*sandbox, name))));
              });

  routes.post(one + "/fork", [&registry, &recipes](Call& call, const httplib::Request& req,
                                                   httplib::Response& res) {
    json body = object_body(req);
    uint64_t count = optional_uint(body, "count").value_or(1);
    std::optional<std::map<std::string, std::string>> labels;
    if (optional_field(body, "labels") != nullptr) {
      // The sandbox config's own label rules.
      labels = parse_sandbox_config(json{{"labels", body["labels"]}}).labels;
    }
    auto source = or_throw(registry.get(sandbox_id(req)));
    service::Forked forked =
        or_throw(recipes.fork(*source, count, std::move(labels), call.request_id));
    json list = json::array();
    for (const auto& fork : forked.sandboxes) list.push_back(fork->to_json());
    send_json(res, 201, {{"snapshot", snapshot_json(forked.snapshot)}, {"sandboxes", list}});
  });

  routes.post(one + "/checkpoints",
              [&registry, &recipes](Call&, const httplib::Request& req, httplib::Response& res) {
                json body = object_body(req);
                const std::string name = string_field(body, "name");
                check_layer_name(name, "name", kMaxCheckpointName);
                auto sandbox = or_throw(registry.get(sandbox_id(req)));
                send_json(res, 201, snapshot_json(or_throw(recipes.checkpoint(*sandbox, name))));
              });
  routes.get(one + "/checkpoints", [&registry, &recipes](Call&, const httplib::Request& req,
                                                         httplib::Response& res) {
    auto sandbox = or_throw(registry.get(sandbox_id(req)));
    json list = json::array();
    for (const service::TaggedLayer& layer : or_throw(recipes.checkpoints(*sandbox))) {
      list.push_back(
          {{"name", layer.name}, {"digest", layer.digest}, {"created", created(layer.created)}});
    }
    send_json(res, 200, {{"checkpoints", list}});
  });
  routes.post(
      one + "/checkpoints/([^/]+)/rollback",
      [&registry, &recipes](Call& call, const httplib::Request& req, httplib::Response& res) {
        const std::string name = req.matches[2].str();
        check_layer_name(name, "checkpoint name", kMaxCheckpointName);
        auto sandbox = or_throw(registry.get(sandbox_id(req)));
        auto replaced = or_throw(recipes.rollback(sandbox, name, call.request_id));
        send_json(res, 200, replaced->to_json());
      });

  routes.post(
      "/v1/layers/gc", [&recipes](Call&, const httplib::Request& req, httplib::Response& res) {
        json body = object_body(req);
        uint64_t grace = optional_uint(body, "grace_seconds")
                             .value_or(static_cast<uint64_t>(layers::kDefaultGcGrace.count()));
        auto removed = or_throw(recipes.gc(grace));
        send_json(res, 200, {{"removed", removed}});
      });
}

}  // namespace hutch::daemon
