// POST /v1/sandboxes/{id}/exec (buffered, streamed, background), the HasteKit aliases, and the
// background process routes (PTYs among them: daemon/pty_routes.cc): each decodes, calls
// daemon/service/exec_service.h, encodes.
#include "daemon/exec_routes.h"

#include "daemon/errors.h"
#include "daemon/exec.h"
#include "daemon/json_codec.h"
#include "daemon/server.h"
#include "daemon/service/exec_service.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;

constexpr uint64_t kDefaultOutputLimit = 1ull << 20;
constexpr uint64_t kMaxOutputLimit = 8ull << 20;
constexpr uint64_t kMaxWaitSeconds = 600;

// Length of the longest prefix of `data` that does not end inside a UTF-8 sequence, so a
// streamed chunk boundary never splits a character (the rest is sent with the next chunk).
size_t utf8_complete_prefix(std::string_view data) {
  size_t n = data.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    unsigned char c = static_cast<unsigned char>(data[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    size_t need = (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return need > back ? n - back : n;
  }
  return n;
}

}  // namespace

void send_buffered_exec(const BufferedExec& result, httplib::Response& res) {
  json body = {{"stdout", result.out},
               {"stderr", result.err},
               {"exit_code", result.outcome.exit_code},
               {"duration_ms", result.outcome.duration.count() / 1000.0},
               {"timed_out", result.outcome.timed_out},
               {"oom_killed", result.oom_killed},
               {"truncated", result.truncated}};
  if (result.outcome.start_error) body["start_error"] = *result.outcome.start_error;
  send_json(res, 200, body);
}

void stream_exec(DaemonContext& context, Call& call, const std::shared_ptr<Sandbox>& sandbox,
                 const ExecOptions& options, StreamedExec started, httplib::Response& res) {
  auto shared_session = started.session;
  auto deadline = started.deadline;
  auto guard = started.guard;
  auto on_end = started.on_end;
  std::shared_ptr<void> slot = call.slot;
  std::string request_id = call.request_id;
  res.status = 200;
  res.set_chunked_content_provider(
      "application/x-ndjson", [&context, sandbox, options, shared_session, deadline, slot, guard,
                               on_end, request_id](size_t, httplib::DataSink& sink) {
        CappedBuffer out_cap(options.max_output_bytes), err_cap(options.max_output_bytes);
        std::string pending[2];
        auto emit = [&](OutputStream stream, std::string_view data, bool flush) {
          std::string& buffer = pending[stream == OutputStream::kStdout ? 0 : 1];
          buffer.append((stream == OutputStream::kStdout ? out_cap : err_cap).admit(data));
          size_t complete = flush ? buffer.size() : utf8_complete_prefix(buffer);
          if (complete == 0) return true;
          std::string line = dump_json({{stream == OutputStream::kStdout ? "stdout" : "stderr",
                                         buffer.substr(0, complete)}}) +
                             "\n";
          buffer.erase(0, complete);
          return sink.write(line.data(), line.size());
        };
        ExecOutcome outcome = shared_session->run(
            deadline,
            [&](OutputStream stream, std::string_view data) { return emit(stream, data, false); });
        finish_exec(*sandbox, request_id, options, outcome, context.metrics);
        if (on_end) on_end(outcome);
        if (outcome.aborted) return false;
        bool ok = emit(OutputStream::kStdout, {}, true) && emit(OutputStream::kStderr, {}, true);
        std::string last = dump_json({{"exit_code", outcome.exit_code},
                                      {"timed_out", outcome.timed_out},
                                      {"duration_ms", outcome.duration.count() / 1000.0},
                                      {"truncated", out_cap.truncated || err_cap.truncated}}) +
                           "\n";
        ok = ok && sink.write(last.data(), last.size());
        if (ok) sink.done();
        return ok;
      });
}

namespace {

void buffered_exec(DaemonContext& context, Call& call, const std::shared_ptr<Sandbox>& sandbox,
                   const ExecOptions& options, httplib::Response& res) {
  send_buffered_exec(
      or_throw(run_buffered_exec(sandbox, options, call.request_id, context.metrics)), res);
}

void streamed_exec(DaemonContext& context, Call& call, const std::shared_ptr<Sandbox>& sandbox,
                   const ExecOptions& options, httplib::Response& res) {
  stream_exec(context, call, sandbox, options,
              or_throw(start_streamed_exec(sandbox, options, call.request_id)), res);
}

void background_exec(DaemonContext& context, Call& call, const std::shared_ptr<Sandbox>& sandbox,
                     const ExecOptions& options, httplib::Response& res) {
  auto process = or_throw(start_background_exec(sandbox, options, call.request_id,
                                                context.options.background_output_cap));
  send_json(res, 201, status_json(process->status()));
}

void exec_route(DaemonContext& context, Call& call, const httplib::Request& req,
                httplib::Response& res, ExecFlavor flavor) {
  auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
  ExecOptions options = parse_exec_request(parse_body(req), flavor);
  if (options.background) return background_exec(context, call, sandbox, options, res);
  if (options.stream) return streamed_exec(context, call, sandbox, options, res);
  buffered_exec(context, call, sandbox, options, res);
}

}  // namespace

json status_json(const ProcessStatus& status) {
  json out = {
      {"pid", status.pid},
      {"state", status.running ? "running" : "exited"},
      {"argv", status.argv},
      {"started_at", status.started_at},
      {"duration_ms", status.duration_ms},
      {"exit_code", status.running ? json(nullptr) : json(status.exit_code)},
      {"term_signal",
       status.running || status.term_signal == 0 ? json(nullptr) : json(status.term_signal)}};
  if (status.start_error) out["start_error"] = *status.start_error;
  if (status.pty) out["pty"] = {{"cols", status.pty->cols}, {"rows", status.pty->rows}};
  return out;
}

uint64_t uint_param(const httplib::Request& req, const char* name, uint64_t fallback) {
  if (!req.has_param(name)) return fallback;
  std::string text = req.get_param_value(name);
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 18)
    throw bad_request(std::string(name) + " must be a non-negative integer");
  return std::stoull(text);
}

void add_exec_routes(Routes& routes, DaemonContext& context) {
  const std::string one = "/v1/sandboxes/([A-Za-z0-9_-]+)";
  routes.post(one + "/exec",
              [&context](Call& call, const httplib::Request& req, httplib::Response& res) {
                exec_route(context, call, req, res, ExecFlavor::kPlain);
              });
  routes.post(one + "/exec/bash",
              [&context](Call& call, const httplib::Request& req, httplib::Response& res) {
                exec_route(context, call, req, res, ExecFlavor::kBash);
              });
  routes.post(one + "/exec/python",
              [&context](Call& call, const httplib::Request& req, httplib::Response& res) {
                exec_route(context, call, req, res, ExecFlavor::kPython);
              });

  routes.get(one + "/processes",
             [&context](Call&, const httplib::Request& req, httplib::Response& res) {
               auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
               json list = json::array();
               for (const auto& process : sandbox->processes())
                 list.push_back(status_json(process->status()));
               send_json(res, 200, {{"processes", list}});
             });
  const std::string proc = one + "/processes/([0-9]+)";
  routes.get(proc, [&context](Call&, const httplib::Request& req, httplib::Response& res) {
    auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
    send_json(res, 200, status_json(or_throw(find_process(*sandbox, req.matches[2]))->status()));
  });
  routes.get(
      proc + "/output", [&context](Call&, const httplib::Request& req, httplib::Response& res) {
        auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
        auto process = or_throw(find_process(*sandbox, req.matches[2]));
        std::string stream = req.has_param("stream") ? req.get_param_value("stream") : "stdout";
        if (stream != "stdout" && stream != "stderr")
          throw bad_request("stream must be stdout or stderr");
        uint64_t offset = uint_param(req, "offset", 0);
        uint64_t limit = std::min(uint_param(req, "limit", kDefaultOutputLimit), kMaxOutputLimit);
        bool base64 = req.has_param("encoding") && req.get_param_value("encoding") == "base64";
        auto chunk = process->read_output(
            stream == "stdout" ? OutputStream::kStdout : OutputStream::kStderr, offset, limit);
        if (!chunk) throw runtime_failure(chunk.error());
        send_json(res, 200,
                  {{"data", base64 ? base64_encode(chunk->data) : chunk->data},
                   {"offset", chunk->offset},
                   {"next_offset", chunk->next_offset},
                   {"eof", chunk->eof},
                   {"truncated", chunk->truncated}});
      });
  routes.post(proc + "/stdin",
              [&context](Call&, const httplib::Request& req, httplib::Response& res) {
                auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
                auto process = or_throw(find_process(*sandbox, req.matches[2]));
                json body = parse_body(req);
                std::string data = optional_string(body, "data").value_or("");
                if (auto encoded = optional_string(body, "data_base64")) {
                  auto decoded = base64_decode(*encoded);
                  if (!decoded) throw bad_request("data_base64 is not base64");
                  data += *decoded;
                }
                bool eof = optional_bool(body, "eof").value_or(false);
                auto written = process->write_stdin(data, eof);
                if (!written) throw runtime_failure(written.error());
                if (!*written && (!data.empty() || !eof))
                  throw ApiError(409, "conflict", "the process's stdin is closed");
                send_json(res, 200, {{"written", data.size()}, {"eof", eof}});
              });
  routes.post(
      proc + "/signal", [&context](Call&, const httplib::Request& req, httplib::Response& res) {
        auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
        auto process = or_throw(find_process(*sandbox, req.matches[2]));
        json body = parse_body(req);
        const json* signal = optional_field(body, "signal");
        if (signal == nullptr) throw bad_request("signal is required");
        Result<void> sent;
        if (signal->is_string() && signal->get<std::string>() == "KILL_TREE") {
          sent = process->kill_tree();
        } else {
          auto number = parse_signal(*signal);
          if (!number)
            throw bad_request("unknown signal (a name like \"TERM\", a number, or \"KILL_TREE\")");
          sent = process->signal(*number);
        }
        if (!sent) throw runtime_failure(sent.error());
        send_json(res, 200, status_json(process->status()));
      });
  routes.post(
      proc + "/wait", [&context](Call&, const httplib::Request& req, httplib::Response& res) {
        auto sandbox = or_throw(context.registry.get(sandbox_id(req)));
        auto process = or_throw(find_process(*sandbox, req.matches[2]));
        uint64_t seconds = std::min(uint_param(req, "timeout_seconds", 30), kMaxWaitSeconds);
        process->wait(std::chrono::seconds(seconds));
        if (!process->running()) process->wait_pumped(std::chrono::seconds(5));
        sandbox->touch();
        send_json(res, 200, status_json(process->status()));
      });
}

}  // namespace hutch::daemon
