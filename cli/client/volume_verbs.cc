// hutch volume create, ls, rm: persistent volumes (POST/GET/DELETE /v1/volumes).
#include <cstdio>

#include "cli/client/verbs.h"

namespace hutch::client {

int create_volume(Connection& daemon, const std::string& name, const std::string& size) {
  auto body = volume_body(name, size);
  if (!body) return fail(body.error());
  auto volume = daemon.call("POST", "/v1/volumes", *body);
  if (!volume) return fail(volume.error());
  std::printf("%s\n", volume->value("name", "").c_str());
  return 0;
}

int list_volumes(Connection& daemon, bool json) {
  auto answer = daemon.call("GET", "/v1/volumes");
  if (!answer) return fail(answer.error());
  nlohmann::json volumes = answer->value("volumes", nlohmann::json::array());
  if (json) {
    std::printf("%s\n", volumes.dump(2).c_str());
  } else {
    write_all(stdout, format_volume_table(volumes));
  }
  return 0;
}

int remove_volumes(Connection& daemon, const std::vector<std::string>& names) {
  int status = 0;
  for (const std::string& name : names) {
    if (auto removed = daemon.call("DELETE", "/v1/volumes/" + url_encode(name)); !removed)
      status = fail(removed.error());
  }
  return status;
}

}  // namespace hutch::client
