// hutch exec: streamed to the terminal as the command writes (the default), buffered (--json),
// or started in the background (-d).
#include <cstdio>

#include "cli/client/verbs.h"

namespace hutch::client {
namespace {

int streamed(Connection& daemon, const std::string& path, const nlohmann::json& body) {
  LineSplitter lines;
  std::optional<int> exit_code;
  std::optional<Error> bad_line;
  auto streamed = daemon.post_streaming(path, body, [&](std::string_view data) {
    for (const std::string& line : lines.feed(data)) {
      nlohmann::json event = nlohmann::json::parse(line, nullptr, false);
      if (!event.is_object()) {
        bad_line = Error{"hutchd", "sent a stream line that is not a JSON object", 0};
        return false;
      }
      if (auto it = event.find("stdout"); it != event.end() && it->is_string())
        write_all(stdout, it->get_ref<const std::string&>());
      if (auto it = event.find("stderr"); it != event.end() && it->is_string())
        write_all(stderr, it->get_ref<const std::string&>());
      if (auto it = event.find("error"); it != event.end() && it->is_object()) {
        bad_line = daemon_error(500, line);
        return false;
      }
      if (auto it = event.find("exit_code"); it != event.end() && it->is_number_integer())
        exit_code = it->get<int>();
    }
    return true;
  });
  if (bad_line) return fail(*bad_line);
  if (!streamed) return fail(streamed.error());
  if (!exit_code)
    return fail(Error{"hutchd at " + daemon.where(),
                      "the exec stream ended before the command's exit status", 0});
  return *exit_code;
}

int buffered(Connection& daemon, const std::string& path, const nlohmann::json& body) {
  auto result = daemon.call("POST", path, body);
  if (!result) return fail(result.error());
  std::printf("%s\n", result->dump().c_str());
  return result->value("exit_code", kExitClientFailure);
}

int background(Connection& daemon, const std::string& path, const nlohmann::json& body, bool json) {
  auto process = daemon.call("POST", path, body);
  if (!process) return fail(process.error());
  if (json) {
    std::printf("%s\n", process->dump().c_str());
  } else {
    std::printf("%s\n", process->value("pid", nlohmann::json(nullptr)).dump().c_str());
  }
  return 0;
}

}  // namespace

int exec_command(Connection& daemon, const std::string& id, const ExecOptions& options, bool json) {
  ExecOptions request = options;
  request.stream = !json && !options.background;
  auto body = exec_body(request);
  if (!body) return fail(body.error());
  auto path = sandbox_path(id, "/exec");
  if (!path) return fail(path.error());
  if (options.background) return background(daemon, *path, *body, json);
  if (json) return buffered(daemon, *path, *body);
  return streamed(daemon, *path, *body);
}

}  // namespace hutch::client
