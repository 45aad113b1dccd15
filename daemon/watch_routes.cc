// GET /v1/sandboxes/{id}/watch?path=/w&recursive=1&since=N: the events of a directory of the
// sandbox as NDJSON over a chunked response (daemon/service/watch_service.h): decodes, opens the
// shared watch, pumps its batches until the sandbox or the directory goes away or the client
// leaves.
#include <chrono>

#include "daemon/codec/fields.h"
#include "daemon/errors.h"
#include "daemon/server.h"
#include "daemon/service/watch_service.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr auto kPollSlice = std::chrono::milliseconds(250);
constexpr auto kKeepalive = std::chrono::seconds(5);

json event_json(const files::WatchEvent& event) {
  json out = {{"seq", event.seq},
              {"event", files::watch_event_name(event.kind)},
              {"path", event.path},
              {"is_dir", event.is_dir}};
  if (event.kind == files::WatchEventKind::kMove) out["from"] = event.from;
  return out;
}

bool flag_param(const httplib::Request& req, const char* name) {
  if (!req.has_param(name)) return false;
  std::string text = req.get_param_value(name);
  if (text == "1" || text == "true") return true;
  if (text == "0" || text == "false") return false;
  throw bad_request(std::string(name) + " must be 0, 1, true or false");
}

std::optional<uint64_t> since_param(const httplib::Request& req) {
  if (!req.has_param("since")) return std::nullopt;
  std::string text = req.get_param_value("since");
  if (text.empty() || text.size() > 18 || text.find_first_not_of("0123456789") != std::string::npos)
    throw bad_request("since must be a non-negative integer");
  return std::stoull(text);
}

bool write_line(httplib::DataSink& sink, const json& value) {
  std::string line = dump_json(value) + "\n";
  return sink.write(line.data(), line.size());
}

void watch_route(WatchService& watches, DaemonContext& context, Call& call,
                 const httplib::Request& req, httplib::Response& res) {
  auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
  if (!req.has_param("path")) throw bad_request("path is required");
  std::string path = req.get_param_value("path");
  check_absolute_path(path, "path");
  bool recursive = flag_param(req, "recursive");
  std::optional<uint64_t> since = since_param(req);
  auto opened = watches.open(sandbox, path, recursive);
  if (!opened) {
    if (auto* fs = std::get_if<files::FsError>(&opened.error())) throw fs_failure(*fs);
    throw api_error(std::get<service::ServiceError>(opened.error()));
  }
  std::shared_ptr<SandboxWatch> watch = *opened;
  uint64_t from = since.value_or(watch->last_seq());
  std::shared_ptr<void> slot = call.slot;
  res.status = 200;
  res.set_chunked_content_provider(
      "application/x-ndjson", [watch, from, slot](size_t, httplib::DataSink& sink) mutable {
        auto last_write = Clock::now();
        for (;;) {
          auto batch = watch->next(from, kPollSlice);
          if (!batch) {
            write_line(sink, {{"end", "error"}, {"message", batch.error().message}});
            sink.done();
            return true;
          }
          for (const auto& event : batch->events) {
            if (!write_line(sink, event_json(event))) return false;
            from = event.seq;
            last_write = Clock::now();
          }
          if (batch->sandbox_gone || batch->directory_gone) {
            bool ok = write_line(
                sink, {{"end", batch->sandbox_gone ? "sandbox_deleted" : "directory_gone"},
                       {"seq", batch->last_seq}});
            if (ok) sink.done();
            return ok;
          }
          if (Clock::now() - last_write >= kKeepalive) {
            if (!write_line(sink, {{"keepalive", true}, {"seq", from}})) return false;
            last_write = Clock::now();
          }
        }
      });
}

}  // namespace

void add_watch_routes(Routes& routes, DaemonContext& context) {
  auto watches = std::make_shared<WatchService>();
  routes.get("/v1/sandboxes/([A-Za-z0-9_-]+)/watch",
             [&context, watches](Call& call, const httplib::Request& req, httplib::Response& res) {
               watch_route(*watches, context, call, req, res);
             });
}

}  // namespace hutch::daemon
