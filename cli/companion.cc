// The verbs of `hutch` that its companion executables serve: hutch-client (hutchd's verbs) and
// hutch-image.
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <string>

#include "cli/verbs.h"
#include "runtime/base/helper_path.h"

namespace hutch::cli {
namespace {

// The verbs that talk to hutchd are served by the helper hutch-client (helper_path): it
// links cpp-httplib, which exists only as a shared library, and hutch stays static.
constexpr std::string_view kClientVerbs[] = {"create", "ls",           "inspect", "exec",
                                             "cp",     "rm",           "pause",   "resume",
                                             "logs",   "port-forward", "shell",   "volume"};

}  // namespace

bool is_image_verb(int argc, char** argv) {
  int verb = 1;
  if (argc > 2 && std::string_view(argv[1]) == "--state-dir") verb = 3;
  if (argc > 1 && std::string_view(argv[1]).starts_with("--state-dir=")) verb = 2;
  return argc > verb && std::string_view(argv[verb]) == "image";
}

bool is_client_verb(const char* arg) {
  return std::ranges::find(kClientVerbs, std::string_view(arg)) != std::end(kClientVerbs);
}

int exec_companion(char** argv, std::string_view name, std::string_view serves) {
  auto path = helper_path(name);
  if (!path) return fail(path.error());
  ::execv(path->c_str(), argv);
  return fail(sys_error("execv", *path + " (it serves " + std::string(serves) + ")").error());
}

}  // namespace hutch::cli
