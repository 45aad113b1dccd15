// create, ls, inspect, rm, pause, resume, logs: one request each (logs -f polls).
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/client/verbs.h"

namespace hutch::client {
namespace {

constexpr auto kFollowInterval = std::chrono::milliseconds(200);

}  // namespace

void write_all(FILE* stream, std::string_view data) {
  std::fwrite(data.data(), 1, data.size(), stream);
  std::fflush(stream);
}

int fail(const Error& error) {
  std::fflush(stdout);
  std::fprintf(stderr, "hutch: %s\n", error.message().c_str());
  return kExitClientFailure;
}

int create_sandbox(Connection& daemon, const CreateOptions& options, bool json) {
  auto body = create_body(options);
  if (!body) return fail(body.error());
  auto sandbox = daemon.call("POST", "/v1/sandboxes", *body);
  if (!sandbox) return fail(sandbox.error());
  if (json) {
    std::printf("%s\n", sandbox->dump(2).c_str());
  } else {
    std::printf("%s\n", sandbox->value("id", "").c_str());
  }
  return 0;
}

int list_sandboxes(Connection& daemon, const std::vector<std::string>& labels, bool json) {
  std::string query;
  for (const std::string& label : labels) {
    auto kv = parse_key_value(label, "label");
    if (!kv) return fail(kv.error());
    query += (query.empty() ? "?label=" : "&label=") + url_encode(label);
  }
  auto answer = daemon.call("GET", "/v1/sandboxes" + query);
  if (!answer) return fail(answer.error());
  nlohmann::json sandboxes = answer->value("sandboxes", nlohmann::json::array());
  if (json) {
    std::printf("%s\n", sandboxes.dump(2).c_str());
  } else {
    write_all(stdout, format_sandbox_table(sandboxes));
  }
  return 0;
}

int inspect_sandbox(Connection& daemon, const std::string& id) {
  auto path = sandbox_path(id);
  if (!path) return fail(path.error());
  auto sandbox = daemon.call("GET", *path);
  if (!sandbox) return fail(sandbox.error());
  std::printf("%s\n", sandbox->dump(2).c_str());
  return 0;
}

int remove_sandboxes(Connection& daemon, const std::vector<std::string>& ids) {
  int status = 0;
  for (const std::string& id : ids) {
    auto path = sandbox_path(id);
    if (!path) {
      status = fail(path.error());
      continue;  // the others are still removed
    }
    if (auto removed = daemon.call("DELETE", *path); !removed) status = fail(removed.error());
  }
  return status;
}

int change_sandbox_state(Connection& daemon, const std::string& id, const std::string& action) {
  auto path = sandbox_path(id, "/" + action);
  if (!path) return fail(path.error());
  auto sandbox = daemon.call("POST", *path);
  if (!sandbox) return fail(sandbox.error());
  return 0;
}

int show_sandbox_log(Connection& daemon, const std::string& id) {
  auto path = sandbox_path(id, "/logs");
  if (!path) return fail(path.error());
  auto fetched = daemon.get_streaming(*path, [](std::string_view data) {
    write_all(stdout, data);
    return true;
  });
  if (!fetched) return fail(fetched.error());
  return 0;
}

int show_process_output(Connection& daemon, const ProcessOutputOptions& options) {
  auto base = sandbox_path(options.id, "/processes/" + url_encode(options.pid) + "/output");
  if (!base) return fail(base.error());
  FILE* out = options.stream == "stderr" ? stderr : stdout;
  uint64_t offset = 0;
  bool warned = false;
  while (true) {
    // base64: the output is bytes, and JSON strings cannot carry every byte sequence.
    auto chunk = daemon.call("GET", *base + "?stream=" + url_encode(options.stream) +
                                        "&encoding=base64&offset=" + std::to_string(offset));
    if (!chunk) return fail(chunk.error());
    auto data = base64_decode(chunk->value("data", ""));
    if (!data) return fail(Error{"hutchd", "sent output that is not base64", 0});
    write_all(out, *data);
    offset = chunk->value("next_offset", offset + data->size());
    if (chunk->value("truncated", false) && chunk->value("eof", false) && !warned) {
      std::fprintf(stderr, "hutch: the %s of process %s was truncated at hutchd's cap\n",
                   options.stream.c_str(), options.pid.c_str());
      warned = true;
    }
    if (chunk->value("eof", false)) return 0;
    if (data->empty()) {
      if (!options.follow) return 0;
      std::this_thread::sleep_for(kFollowInterval);
    }
  }
}

}  // namespace hutch::client
