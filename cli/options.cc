#include "cli/options.h"

#include <charconv>
#include <cmath>

#include "runtime/defaults.h"
#include "runtime/fs/paths.h"

namespace hutch::cli {

Result<std::chrono::milliseconds> parse_duration(std::string_view text) {
  double value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  std::string_view unit(end, text.data() + text.size() - end);
  double scale = 0;
  if (unit.empty() || unit == "s")
    scale = 1000;
  else if (unit == "ms")
    scale = 1;
  else if (unit == "m")
    scale = 60'000;
  else if (unit == "h")
    scale = 3'600'000;
  if (ec != std::errc() || scale == 0 || !std::isfinite(value) || value <= 0 ||
      value * scale > 1e12) {
    return plain_error(
        "duration", "\"" + std::string(text) + "\" is not a positive duration like 30s, 500ms, 2m");
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(value * scale)));
}

Result<uint64_t> parse_size(std::string_view text) {
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  std::string_view unit(end, text.data() + text.size() - end);
  unsigned shift = 64;
  if (unit.empty())
    shift = 0;
  else if (unit == "k" || unit == "K")
    shift = 10;
  else if (unit == "m" || unit == "M")
    shift = 20;
  else if (unit == "g" || unit == "G")
    shift = 30;
  else if (unit == "t" || unit == "T")
    shift = 40;
  if (ec != std::errc() || shift == 64 || value == 0 || value > (UINT64_MAX >> shift)) {
    return plain_error("size",
                       "\"" + std::string(text) + "\" is not a positive size like 512M or 1G");
  }
  return value << shift;
}

Result<BindMount> parse_bind(std::string_view text) {
  BindMount bind;
  size_t first = text.find(':');
  if (first == std::string_view::npos)
    return plain_error("bind", "\"" + std::string(text) + "\" is not SRC:DST[:ro|rw]");
  bind.source = std::string(text.substr(0, first));
  std::string_view rest = text.substr(first + 1);
  size_t second = rest.find(':');
  bind.target = std::string(rest.substr(0, second));
  if (second != std::string_view::npos) {
    std::string_view mode = rest.substr(second + 1);
    if (mode == "rw")
      bind.read_only = false;
    else if (mode != "ro")
      return plain_error("bind", "mode \"" + std::string(mode) + "\" is not ro or rw");
  }
  if (bind.source.empty() || bind.source.find('\0') != std::string::npos) {
    return plain_error("bind", "empty source in \"" + std::string(text) + "\"");
  }
  if (!is_normal_absolute(bind.target) || bind.target == "/") {
    return plain_error("bind",
                       "target \"" + bind.target + "\" must be a normalized absolute path below /");
  }
  return bind;
}

Result<std::string> parse_env(std::string_view text) {
  HUTCH_TRY(check_env_entry(text));
  return std::string(text);
}

}  // namespace hutch::cli
