// The persistent volume routes (issue #13): POST /v1/volumes {name, size_bytes} creates one,
// GET /v1/volumes lists them, GET and DELETE /v1/volumes/{name}. Each decodes, calls the volume
// service (daemon/service/volume_service.h) and encodes; a create's "volumes" attaches them.
#include <string>

#include "daemon/codec/fields.h"
#include "daemon/codec/time.h"
#include "daemon/errors.h"
#include "daemon/server.h"
#include "daemon/service/volume_service.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;

service::VolumeService& volumes_of(SandboxRegistry& registry) {
  if (registry.volumes() == nullptr)
    throw ApiError(501, "unsupported", "hutchd has no volume store");
  return *registry.volumes();
}

json volume_json(const service::VolumeStatus& status) {
  json attached = json::array();
  for (const service::VolumeAttachment& attachment : status.attachments) {
    attached.push_back({{"sandbox", attachment.sandbox_id},
                        {"target", attachment.target},
                        {"readonly", attachment.read_only},
                        {"shared", attachment.shared},
                        {"ending", attachment.ending}});
  }
  json out = {{"name", status.info.name},
              {"size_bytes", status.info.size_bytes},
              {"created", iso8601(status.info.created)},
              {"attached", attached}};
  out["used_bytes"] = status.usage ? json(status.usage->used_bytes) : json(nullptr);
  out["available_bytes"] = status.usage ? json(status.usage->available_bytes) : json(nullptr);
  return out;
}

// size_bytes: a JSON integer; anything else (negative, fractional, a string) is the volume's
// error, not the codec's.
uint64_t size_field(const json& body) {
  const json* size = optional_field(body, "size_bytes");
  if (size == nullptr) throw ApiError(400, "bad_volume", "size_bytes is required");
  if (!size->is_number_unsigned())
    throw ApiError(400, "bad_volume", "size_bytes must be a non-negative integer");
  return size->get<uint64_t>();
}

}  // namespace

void add_volume_routes(Routes& routes, DaemonContext& context) {
  SandboxRegistry& registry = context.registry;
  const std::string one = "/v1/volumes/([^/]+)";
  routes.post("/v1/volumes",
              [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
                const json body = parse_body(req);
                require_object(body, "the request body");
                check_known_fields(body, {"name", "size_bytes"});
                const std::string name = string_field(body, "name");
                const uint64_t size = size_field(body);
                send_json(res, 201, volume_json(or_throw(volumes_of(registry).create(name, size))));
              });
  routes.get("/v1/volumes", [&registry](Call&, const httplib::Request&, httplib::Response& res) {
    json list = json::array();
    for (const service::VolumeStatus& status : or_throw(volumes_of(registry).list()))
      list.push_back(volume_json(status));
    send_json(res, 200, {{"volumes", list}});
  });
  routes.get(one, [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
    send_json(res, 200, volume_json(or_throw(volumes_of(registry).get(req.matches[1].str()))));
  });
  routes.del(one, [&registry](Call&, const httplib::Request& req, httplib::Response& res) {
    or_throw(volumes_of(registry).remove(req.matches[1].str()));
    res.status = 204;
  });
}

}  // namespace hutch::daemon
