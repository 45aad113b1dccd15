#include "runtime/layers/names.h"

#include <charconv>

namespace hutch::layers {
namespace {

bool is_lower_alnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool is_hex(char c) { return (c >= 'a' && c <= 'f') || (c >= '0' && c <= '9'); }

template <class Int>
std::optional<Int> parse_number(std::string_view text) {
  Int value{};
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

Result<void> validate_name(std::string_view name) {
  if (name.empty() || name.size() > 64) {
    return plain_error("invalid name", "\"" + std::string(name) + "\": must be 1 to 64 characters");
  }
  if (!is_lower_alnum(name[0])) {
    return plain_error("invalid name", "\"" + std::string(name) + "\": must start with [a-z0-9]");
  }
  for (char c : name) {
    if (!is_lower_alnum(c) && c != '.' && c != '_' && c != '-') {
      return plain_error("invalid name",
                         "\"" + std::string(name) + "\": only [a-z0-9._-] are allowed");
    }
  }
  return {};
}

Result<std::string> digest_hex(std::string_view digest) {
  std::string_view hex = digest;
  if (hex.starts_with("sha256:")) hex.remove_prefix(7);
  bool valid = hex.size() == 64;
  for (char c : hex) valid = valid && is_hex(c);
  if (!valid) {
    return plain_error("invalid digest",
                       "\"" + std::string(digest) + "\": want sha256:<64 lowercase hex>");
  }
  return std::string(hex);
}

std::string scratch_name(const ScratchOwner& owner, std::string_view random) {
  return std::string(kScratchPrefix) + std::to_string(owner.pid) + "-" +
         std::to_string(owner.start_time) + "-" + std::string(random);
}

std::optional<ScratchOwner> parse_scratch_name(std::string_view name) {
  if (!name.starts_with(kScratchPrefix)) return std::nullopt;
  name.remove_prefix(kScratchPrefix.size());
  size_t first = name.find('-');
  if (first == std::string_view::npos) return std::nullopt;
  size_t second = name.find('-', first + 1);
  if (second == std::string_view::npos) return std::nullopt;
  auto pid = parse_number<pid_t>(name.substr(0, first));
  auto start = parse_number<uint64_t>(name.substr(first + 1, second - first - 1));
  if (!pid || !start || *pid <= 0) return std::nullopt;
  return ScratchOwner{*pid, *start};
}

}  // namespace hutch::layers
