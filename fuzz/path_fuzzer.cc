// The file API's path parsing: parse_path (lexical normalization of a client's sandbox path)
// and the glob parser (brace expansion, pattern splitting, name and path matching). Input: a
// path; as a glob, a pattern and, after its first '\n', a path to match it against.
// Aborts when a result breaks the documented form (runtime/files/resolve.h, glob.h).
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "runtime/files/glob.h"
#include "runtime/files/resolve.h"

namespace {

using hutch::files::detail::SandboxPath;

void check(bool ok) {
  if (!ok) std::abort();
}

// "/a/b/c" or "/": no "//", no trailing "/", no "." or ".." component.
bool normalized(std::string_view path) {
  if (path == "/") return true;
  if (path.empty() || path.front() != '/' || path.back() == '/') return false;
  size_t pos = 1;
  while (pos <= path.size()) {
    size_t end = path.find('/', pos);
    if (end == std::string_view::npos) end = path.size();
    std::string_view part = path.substr(pos, end - pos);
    if (part.empty() || part == "." || part == "..") return false;
    pos = end + 1;
  }
  return true;
}

void fuzz_path(std::string_view raw) {
  auto parsed = hutch::files::detail::parse_path(raw);
  if (!parsed) {
    check(!parsed.error().message.empty());
    return;
  }
  const SandboxPath& p = *parsed;
  check(normalized(p.path) && normalized(p.parent));
  check(p.path.size() <= raw.size());
  check(p.is_root() ? p.path == "/" && p.parent == "/"
                    : p.name.find('/') == std::string::npos &&
                          p.path == hutch::files::detail::join(p.parent, p.name));
  // Normalizing is idempotent.
  auto again = hutch::files::detail::parse_path(p.path);
  check(again && again->path == p.path && again->parent == p.parent && again->name == p.name);
}

void fuzz_glob(std::string_view pattern, std::string_view name) {
  auto expanded = hutch::files::expand_braces(pattern, 64);
  check(!expanded || (!expanded->empty() && expanded->size() <= 64));
  if (!expanded) return;
  for (const std::string& alternative : *expanded) {
    std::vector<std::string> parts = hutch::files::split_pattern(alternative);
    for (const std::string& part : parts) check(!part.empty() && part != ".");
    if (parts.empty()) continue;
    if (!hutch::files::has_wildcard(parts[0])) hutch::files::unescape(parts[0]);
    hutch::files::match_name(parts[0], name);
    std::vector<std::string> names = hutch::files::split_pattern(name);
    hutch::files::match_path(parts, names);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  fuzz_path(input);
  fuzz_glob(input.substr(0, newline),
            newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1));
  return 0;
}
