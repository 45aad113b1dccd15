// The persistent shell session routes, /v1/sandboxes/{id}/sessions[/{name}[/exec]]: each decodes,
// calls daemon/service/session_service.h, encodes (a command's result has /exec's shapes).
#include "daemon/codec/fields.h"
#include "daemon/errors.h"
#include "daemon/exec_routes.h"
#include "daemon/json_codec.h"
#include "daemon/server.h"
#include "daemon/service/session_service.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;

SessionRequest parse_session_request(const json& body) {
  require_object(body, "the request body");
  check_known_fields(body, {"name", "workdir", "env"});
  SessionRequest request;
  request.name = optional_string(body, "name");
  if (auto workdir = optional_string(body, "workdir")) {
    check_absolute_path(*workdir, "workdir");
    request.workdir = *workdir;
  }
  request.env = string_map(body, "env");
  return request;
}

void session_exec_route(DaemonContext& context, Call& call, const httplib::Request& req,
                        httplib::Response& res) {
  auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
  std::string name = req.matches[2];
  ExecOptions options = parse_exec_request(parse_body(req), ExecFlavor::kPlain);
  if (options.stream)
    return stream_exec(context, call, sandbox, options,
                       or_throw(start_session_exec(sandbox, name, options, call.request_id)), res);
  send_buffered_exec(
      or_throw(run_session_exec(sandbox, name, options, call.request_id, context.metrics)), res);
}

}  // namespace

void add_session_routes(Routes& routes, DaemonContext& context) {
  const std::string sessions = "/v1/sandboxes/([A-Za-z0-9_-]+)/sessions";
  routes.post(sessions, [&context](Call&, const httplib::Request& req, httplib::Response& res) {
    auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
    std::string name = or_throw(create_session(*sandbox, parse_session_request(parse_body(req))));
    send_json(res, 201, {{"name", name}});
  });
  routes.get(sessions, [&context](Call&, const httplib::Request& req, httplib::Response& res) {
    auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
    json list = json::array();
    for (const auto& name : list_sessions(*sandbox)) list.push_back({{"name", name}});
    send_json(res, 200, {{"sessions", list}});
  });
  routes.del(sessions + "/([^/]+)",
             [&context](Call&, const httplib::Request& req, httplib::Response& res) {
               auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
               or_throw(delete_session(*sandbox, req.matches[2]));
               send_json(res, 200, {{"deleted", std::string(req.matches[2])}});
             });
  routes.post(sessions + "/([^/]+)/exec",
              [&context](Call& call, const httplib::Request& req, httplib::Response& res) {
                session_exec_route(context, call, req, res);
              });
}

}  // namespace hutch::daemon
