#include <cstdio>
#include <string>

#include "cli/verbs.h"

namespace hutch::cli {

int fail(const Error& error) {
  std::fprintf(stderr, "hutch: %s\n", error.message().c_str());
  return kExitRuntimeFailure;
}

Result<std::string> read_file(const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "re");
  if (file == nullptr) return sys_error("open", path);
  std::string text;
  char buffer[65536];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, file)) > 0;) text.append(buffer, n);
  std::fclose(file);
  return text;
}

}  // namespace hutch::cli
