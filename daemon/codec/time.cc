// ISO-8601 formatting and parsing of API times.
#include "daemon/codec/time.h"

#include <time.h>

#include <cstdio>

namespace hutch::daemon {

std::string iso8601(std::chrono::system_clock::time_point time) {
  using namespace std::chrono;
  return iso8601_ns(duration_cast<nanoseconds>(time.time_since_epoch()).count());
}

std::string iso8601_ns(int64_t ns_since_epoch) {
  time_t seconds = static_cast<time_t>(ns_since_epoch / 1'000'000'000);
  int64_t millis = (ns_since_epoch % 1'000'000'000) / 1'000'000;
  if (millis < 0) {
    millis += 1000;
    --seconds;
  }
  struct tm tm {};
  gmtime_r(&seconds, &tm);
  char text[96];
  std::snprintf(text, sizeof text, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(millis));
  return text;
}

std::optional<std::chrono::system_clock::time_point> parse_iso8601(const std::string& text) {
  struct tm tm {};
  int millis = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d.%3dZ", &tm.tm_year, &tm.tm_mon,
                  &tm.tm_mday, &tm.tm_hour, &tm.tm_min, &tm.tm_sec, &millis) != 7)
    return std::nullopt;
  tm.tm_year -= 1900;
  tm.tm_mon -= 1;
  time_t seconds = timegm(&tm);
  // system_clock counts nanoseconds in an int64_t: only years 1678..2262 fit (fuzz/ found it).
  constexpr time_t kMaxSeconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::duration::max())
          .count() -
      1;
  if (seconds > kMaxSeconds || seconds < -kMaxSeconds) return std::nullopt;
  return std::chrono::system_clock::from_time_t(seconds) + std::chrono::milliseconds(millis);
}

}  // namespace hutch::daemon
