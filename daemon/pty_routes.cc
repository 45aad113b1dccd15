// The PTY routes (/v1/sandboxes/{id}/ptys...): a PTY is a background process whose stdio is a
// pseudo-terminal of the sandbox's own devpts (ExecStart::pty), so it is also listed among the
// processes; these routes add the terminal's size, input as writes, resize and a followed output.
#include <algorithm>
#include <chrono>

#include "daemon/errors.h"
#include "daemon/exec.h"
#include "daemon/exec_routes.h"
#include "daemon/json_codec.h"
#include "daemon/server.h"
#include "daemon/service/exec_service.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;

constexpr uint64_t kMaxPtyCells = 1000;  // cols and rows: 1..1000
constexpr PtySize kDefaultPtySize{80, 24};
constexpr uint64_t kDefaultOutputLimit = 1ull << 20;
constexpr uint64_t kMaxOutputLimit = 8ull << 20;
constexpr uint64_t kMaxInputBytes = 1ull << 20;
// A follower's wait for output; a blank line (keepalive) after kKeepalive without any, which is
// also when a client that went away is noticed (as in GET .../network/log?follow=1).
constexpr auto kFollowWait = std::chrono::milliseconds(500);
constexpr auto kKeepalive = std::chrono::seconds(5);
constexpr auto kDeleteWait = std::chrono::seconds(5);

uint16_t cells(const json& body, const char* name, uint16_t fallback) {
  auto value = optional_uint(body, name);
  if (!value) return fallback;
  if (*value < 1 || *value > kMaxPtyCells)
    throw bad_request(std::string(name) + " must be 1.." + std::to_string(kMaxPtyCells));
  return static_cast<uint16_t>(*value);
}

PtySize parse_size(const json& body, PtySize fallback) {
  return {cells(body, "cols", fallback.cols), cells(body, "rows", fallback.rows)};
}

// The process `pid` of the sandbox, when it is on a pty. Errors: pty_not_found.
std::shared_ptr<BackgroundProcess> find_pty(const Sandbox& sandbox, const std::string& pid) {
  auto process = find_process(sandbox, pid);
  if (!process || !(*process)->status().pty)
    throw ApiError(404, "pty_not_found", "no pty " + pid + " in sandbox " + sandbox.id());
  return *process;
}

// One output chunk as background output shows it (GET .../processes/{pid}/output).
json chunk_json(const OutputChunk& chunk, bool base64) {
  return {{"data", base64 ? base64_encode(chunk.data) : chunk.data},
          {"offset", chunk.offset},
          {"next_offset", chunk.next_offset},
          {"eof", chunk.eof},
          {"truncated", chunk.truncated}};
}

void create_pty(DaemonContext& context, Call& call, const httplib::Request& req,
                httplib::Response& res) {
  auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
  json body = parse_body(req);
  require_object(body, "the request body");
  check_known_fields(body, {"argv", "command", "workdir", "env", "cols", "rows"});
  PtySize size = parse_size(body, kDefaultPtySize);
  json command = json::object();
  for (const char* field : {"argv", "command", "workdir", "env"}) {
    if (body.contains(field)) command[field] = body[field];
  }
  // A shell when neither is given, as a terminal's user expects.
  if (!command.contains("argv") && !command.contains("command"))
    command["argv"] = json::array({"/bin/sh"});
  ExecOptions options = parse_exec_request(command, ExecFlavor::kPlain);
  // Full-screen programs read TERM; the sandbox's or the request's own value wins.
  if (!options.env.contains("TERM") && !sandbox->config().env.contains("TERM"))
    options.env["TERM"] = "xterm-256color";
  auto process = or_throw(start_background_exec(sandbox, options, call.request_id,
                                                context.options.background_output_cap, size));
  send_json(res, 201, status_json(process->status()));
}

// ?follow=1: NDJSON, one chunk_json line per piece of output from `offset`, a blank line every
// kKeepalive without output, and a last {"exit_code":…} line once the output is complete.
void follow_output(Call& call, const std::shared_ptr<Sandbox>& sandbox,
                   const std::shared_ptr<BackgroundProcess>& process, uint64_t offset,
                   uint64_t limit, bool base64, httplib::Response& res) {
  std::shared_ptr<void> slot = call.slot;
  res.status = 200;
  res.set_chunked_content_provider(
      "application/x-ndjson",
      [sandbox, process, slot, offset, limit, base64](size_t, httplib::DataSink& sink) {
        uint64_t next = offset;
        auto quiet_since = std::chrono::steady_clock::now();
        for (;;) {
          process->wait_output(OutputStream::kStdout, next, kFollowWait);
          auto chunk = process->read_output(OutputStream::kStdout, next, limit);
          if (!chunk) return false;
          if (!chunk->data.empty()) {
            std::string line = dump_json(chunk_json(*chunk, base64)) + "\n";
            if (!sink.write(line.data(), line.size())) return false;
            next = chunk->next_offset;
            quiet_since = std::chrono::steady_clock::now();
          }
          if (chunk->eof) break;
          if (std::chrono::steady_clock::now() - quiet_since >= kKeepalive) {
            if (!sink.write("\n", 1)) return false;
            quiet_since = std::chrono::steady_clock::now();
          }
        }
        sandbox->touch();
        ProcessStatus status = process->status();
        std::string last =
            dump_json({{"exit_code", status.exit_code},
                       {"term_signal",
                        status.term_signal == 0 ? json(nullptr) : json(status.term_signal)},
                       {"next_offset", next}}) +
            "\n";
        if (!sink.write(last.data(), last.size())) return false;
        sink.done();
        return true;
      });
}

}  // namespace

void add_pty_routes(Routes& routes, DaemonContext& context) {
  const std::string one = "/v1/sandboxes/([A-Za-z0-9_-]+)";
  routes.post(one + "/ptys",
              [&context](Call& call, const httplib::Request& req, httplib::Response& res) {
                create_pty(context, call, req, res);
              });
  routes.get(one + "/ptys", [&context](Call&, const httplib::Request& req, httplib::Response& res) {
    auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
    json list = json::array();
    for (const auto& process : sandbox->processes()) {
      ProcessStatus status = process->status();
      if (status.pty) list.push_back(status_json(status));
    }
    send_json(res, 200, {{"ptys", list}});
  });
  const std::string pty = one + "/ptys/([0-9]+)";
  routes.get(pty, [&context](Call&, const httplib::Request& req, httplib::Response& res) {
    auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
    send_json(res, 200, status_json(find_pty(*sandbox, req.matches[2])->status()));
  });
  routes.get(
      pty + "/output", [&context](Call& call, const httplib::Request& req, httplib::Response& res) {
        auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
        auto process = find_pty(*sandbox, req.matches[2]);
        uint64_t offset = uint_param(req, "offset", 0);
        uint64_t limit = std::min(uint_param(req, "limit", kDefaultOutputLimit), kMaxOutputLimit);
        if (limit == 0) throw bad_request("limit must be at least 1");
        bool base64 = req.has_param("encoding") && req.get_param_value("encoding") == "base64";
        const std::string follow = req.get_param_value("follow");
        if (follow == "1" || follow == "true")
          return follow_output(call, sandbox, process, offset, limit, base64, res);
        send_json(res, 200,
                  chunk_json(or_throw(process->read_output(OutputStream::kStdout, offset, limit)),
                             base64));
      });
  routes.post(pty + "/input",
              [&context](Call&, const httplib::Request& req, httplib::Response& res) {
                auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
                auto process = find_pty(*sandbox, req.matches[2]);
                json body = parse_body(req);
                require_object(body, "the request body");
                check_known_fields(body, {"data", "data_base64"});
                std::string data = optional_string(body, "data").value_or("");
                if (auto encoded = optional_string(body, "data_base64")) {
                  auto decoded = base64_decode(*encoded);
                  if (!decoded) throw bad_request("data_base64 is not base64");
                  data += *decoded;
                }
                if (data.size() > kMaxInputBytes)
                  throw bad_request("input is limited to 1 MiB a request");
                // A master takes writes after its slave side closed: the exit is what tells.
                if (!process->running())
                  throw ApiError(409, "conflict", "the pty's process has exited");
                bool written = or_throw(process->write_stdin(data, false));
                if (!written) throw ApiError(409, "conflict", "the pty's process has exited");
                sandbox->touch();
                send_json(res, 200, {{"written", data.size()}});
              });
  routes.post(pty + "/resize",
              [&context](Call&, const httplib::Request& req, httplib::Response& res) {
                auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
                auto process = find_pty(*sandbox, req.matches[2]);
                json body = parse_body(req);
                require_object(body, "the request body");
                check_known_fields(body, {"cols", "rows"});
                if (!body.contains("cols") || !body.contains("rows"))
                  throw bad_request("cols and rows are required");
                or_throw(process->resize(parse_size(body, kDefaultPtySize)));
                send_json(res, 200, status_json(process->status()));
              });
  routes.post(pty + "/signal",
              [&context](Call&, const httplib::Request& req, httplib::Response& res) {
                auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
                auto process = find_pty(*sandbox, req.matches[2]);
                json body = parse_body(req);
                const json* signal = optional_field(body, "signal");
                auto number = signal != nullptr ? parse_signal(*signal) : std::nullopt;
                if (!number) throw bad_request("signal must be a name like \"TERM\" or a number");
                or_throw(process->signal(*number));
                send_json(res, 200, status_json(process->status()));
              });
  // Kills the process's whole tree; the answer is its status once it has exited.
  routes.del(pty, [&context](Call&, const httplib::Request& req, httplib::Response& res) {
    auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
    auto process = find_pty(*sandbox, req.matches[2]);
    if (process->running()) or_throw(process->kill_tree());
    process->wait(kDeleteWait);
    send_json(res, 200, status_json(process->status()));
  });
}

}  // namespace hutch::daemon
