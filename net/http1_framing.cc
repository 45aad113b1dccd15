#include "net/http1_framing.h"

#include <algorithm>
#include <charconv>
#include <cstring>

#include "net/http_head.h"

namespace hutch::net {

namespace {

std::unexpected<Error> invalid(std::string detail) {
  return kind_error(ErrorKind::kInvalid, "request framing", std::move(detail));
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(),
                                            [](char x, char y) { return lower(x) == lower(y); });
}

// RFC 9110 5.6.2 tchar.
bool is_tchar(char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return c != '\0' && std::strchr("!#$%&'*+-.^_`|~", c) != nullptr;
}

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view text) {
  while (!text.empty() && is_space(text.front())) text.remove_prefix(1);
  while (!text.empty() && is_space(text.back())) text.remove_suffix(1);
  return text;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Calls `field(name, value)` for each field line of a complete head (after the request line).
template <class Field>
void for_each_field(std::string_view head, Field&& field) {
  size_t start = head.find("\r\n");
  while (start != std::string_view::npos) {
    start += 2;
    const size_t end = head.find("\r\n", start);
    if (end == std::string_view::npos || end == start) return;
    const std::string_view line = head.substr(start, end - start);
    start = end;
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    field(line.substr(0, colon), trim(line.substr(colon + 1)));
  }
}

// Calls `token(element)` for each element of a comma-separated list (RFC 9110 5.6.1), trimmed;
// empty elements are skipped.
template <class Token>
void for_each_element(std::string_view list, Token&& token) {
  for (size_t start = 0; start <= list.size();) {
    size_t comma = list.find(',', start);
    if (comma == std::string_view::npos) comma = list.size();
    const std::string_view element = trim(list.substr(start, comma - start));
    if (!element.empty()) token(element);
    start = comma + 1;
  }
}

// Skips a run of tchar at `at`; false if there was none.
bool skip_token(std::string_view text, size_t& at) {
  const size_t start = at;
  while (at < text.size() && is_tchar(text[at])) ++at;
  return at > start;
}

// RFC 9110 5.6.4 quoted-string at `at` (which holds the opening quote).
bool skip_quoted(std::string_view text, size_t& at) {
  for (++at; at < text.size(); ++at) {
    const auto c = static_cast<unsigned char>(text[at]);
    if (c == '"') {
      ++at;
      return true;
    }
    if (c == '\\') {
      if (++at == text.size()) return false;
      const auto escaped = static_cast<unsigned char>(text[at]);
      if (escaped != '\t' && (escaped < 0x20 || escaped == 0x7f)) return false;
    } else if (c != '\t' && (c < 0x20 || c == 0x7f)) {
      return false;
    }
  }
  return false;
}

void skip_space(std::string_view text, size_t& at) {
  while (at < text.size() && is_space(text[at])) ++at;
}

// RFC 9112 7.1.1: *( BWS ";" BWS name [ BWS "=" BWS ( token / quoted-string ) ] ), nothing after.
bool valid_extensions(std::string_view text) {
  size_t at = 0;
  while (at < text.size()) {
    skip_space(text, at);
    if (at == text.size() || text[at] != ';') return false;
    ++at;
    skip_space(text, at);
    if (!skip_token(text, at)) return false;
    const size_t after_name = at;
    skip_space(text, at);
    if (at == text.size() || text[at] != '=') {
      at = after_name;
      continue;
    }
    ++at;
    skip_space(text, at);
    if (at < text.size() && text[at] == '"') {
      if (!skip_quoted(text, at)) return false;
    } else if (!skip_token(text, at)) {
      return false;
    }
  }
  return true;
}

// One chunk-size line without its CRLF: the size, or the fault.
std::string parse_size_line(std::string_view line, uint64_t& size) {
  size_t digits = 0;
  while (digits < line.size() && hex_value(line[digits]) >= 0) ++digits;
  if (digits == 0) return "a chunk size that is not hex";
  if (digits > kMaxChunkDigits) return "a chunk size of more than 16 hex digits (2^64 or more)";
  size = 0;
  for (size_t i = 0; i < digits; ++i) size = size << 4 | static_cast<uint64_t>(hex_value(line[i]));
  if (!valid_extensions(line.substr(digits)))
    return "junk or a broken extension after a chunk size";
  return {};
}

// The trailer section's field lines, each without its CRLF (the final empty line excluded).
std::string check_trailers(std::string_view lines) {
  size_t start = 0;
  while (start < lines.size()) {
    size_t end = lines.find("\r\n", start);
    if (end == std::string_view::npos) end = lines.size();
    const std::string_view line = lines.substr(start, end - start);
    start = end + 2;
    if (line.empty() || is_space(line[0])) return "an empty or folded trailer line";
    const size_t colon = line.find(':');
    if (colon == std::string_view::npos) return "a trailer line without ':'";
    const std::string_view name = line.substr(0, colon);
    size_t at = 0;
    if (!skip_token(name, at) || at != name.size()) return "a trailer name that is not a token";
    for (char c : line.substr(colon + 1)) {
      const auto u = static_cast<unsigned char>(c);
      if (u != '\t' && (u < 0x20 || u == 0x7f))
        return "a control byte (or bare CR, LF) in a trailer";
    }
    for (std::string_view framing : {"content-length", "transfer-encoding", "host"}) {
      if (iequals(name, framing)) return "a trailer that frames or routes the request";
    }
  }
  return {};
}

}  // namespace

Result<BodyFraming> request_framing(std::string_view head) {
  bool chunked = false;
  std::optional<uint64_t> length;
  std::string fault;
  for_each_field(head, [&](std::string_view name, std::string_view value) {
    if (!fault.empty()) return;
    if (iequals(name, "transfer-encoding")) {
      if (chunked) fault = "Transfer-Encoding is given twice";
      // Values are never echoed: they come from the sandbox and may hold a placeholder.
      else if (!iequals(value, "chunked"))
        fault = "a Transfer-Encoding other than chunked";
      chunked = true;
    } else if (iequals(name, "content-length")) {
      uint64_t parsed = 0;
      const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), parsed);
      if (length)
        fault = "Content-Length is given twice";
      else if (value.empty() || error != std::errc() || end != value.data() + value.size())
        fault = "a Content-Length that is not a number";
      length = parsed;
    }
  });
  if (!fault.empty()) return invalid(std::move(fault));
  if (chunked && length) return invalid("both Content-Length and Transfer-Encoding are set");
  if (chunked) return BodyFraming{BodyFraming::Kind::kChunked, 0};
  if (length) return BodyFraming{BodyFraming::Kind::kLength, *length};
  return BodyFraming{};
}

bool wants_upgrade(std::string_view head) {
  bool upgrade_field = false, upgrade_option = false;
  for_each_field(head, [&](std::string_view name, std::string_view value) {
    if (iequals(name, "upgrade") && !value.empty()) upgrade_field = true;
    if (!iequals(name, "connection")) return;
    for_each_element(value, [&](std::string_view option) {
      if (iequals(option, "upgrade")) upgrade_option = true;
    });
  });
  return upgrade_field && upgrade_option;
}

std::optional<std::string> only_websocket_upgrade(std::string_view head) {
  const auto is_websocket = [](std::string_view protocol) {
    return iequals(protocol.substr(0, protocol.find('/')), "websocket");
  };
  bool dropped = false;
  for_each_field(head, [&](std::string_view name, std::string_view value) {
    if (iequals(name, "http2-settings")) dropped = true;
    if (!iequals(name, "upgrade")) return;
    for_each_element(value, [&](std::string_view protocol) {
      if (!is_websocket(protocol)) dropped = true;
    });
  });
  if (!dropped) return std::nullopt;
  std::string out;
  out.reserve(head.size());
  size_t start = 0;
  for (size_t end; (end = head.find("\r\n", start)) != std::string_view::npos; start = end + 2) {
    const std::string_view line = head.substr(start, end - start);
    const size_t colon = start == 0 ? std::string_view::npos : line.find(':');
    const std::string_view name = line.substr(0, colon == std::string_view::npos ? 0 : colon);
    if (iequals(name, "http2-settings")) continue;
    if (!iequals(name, "upgrade")) {
      out.append(line).append("\r\n");
      continue;
    }
    std::string kept;
    for_each_element(line.substr(colon + 1), [&](std::string_view protocol) {
      if (is_websocket(protocol)) kept.append(kept.empty() ? "" : ", ").append(protocol);
    });
    if (!kept.empty()) out.append(name).append(": ").append(kept).append("\r\n");
  }
  return out;
}

ChunkedBody::Scan ChunkedBody::scan(std::span<const uint8_t> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  Scan out;
  size_t at = 0;
  const auto fail = [&](std::string error) {
    out.error = std::move(error);
    out.body = 0;
    return out;
  };
  while (state_ != State::kDone && at < text.size()) {
    switch (state_) {
      case State::kSize: {
        const std::string_view rest = text.substr(at, kMaxChunkLine + 2);
        const size_t lf = rest.find('\n');
        if (lf == std::string_view::npos) {
          if (rest.size() > kMaxChunkLine + 1)
            return fail("a chunk-size line longer than 4096 bytes");
          out.body = at;
          return out;
        }
        if (lf == 0 || rest[lf - 1] != '\r') return fail("a bare LF after a chunk size");
        uint64_t size = 0;
        if (std::string error = parse_size_line(rest.substr(0, lf - 1), size); !error.empty())
          return fail(std::move(error));
        at += lf + 1;
        left_ = size;
        state_ = size == 0 ? State::kTrailers : State::kData;
        break;
      }
      case State::kData: {
        const size_t n = static_cast<size_t>(std::min<uint64_t>(left_, text.size() - at));
        at += n;
        left_ -= n;
        if (left_ == 0) state_ = State::kDataEnd;
        break;
      }
      case State::kDataEnd:
        if (text[at] != '\r' || (text.size() - at >= 2 && text[at + 1] != '\n'))
          return fail("chunk data not followed by CRLF");
        if (text.size() - at < 2) {
          out.body = at;
          return out;
        }
        at += 2;
        state_ = State::kSize;
        break;
      case State::kTrailers: {
        const std::string_view rest = text.substr(at, kMaxHttpHead);
        size_t end;
        if (rest.starts_with("\r\n")) {
          end = 0;
        } else if ((end = rest.find("\r\n\r\n")) != std::string_view::npos) {
          if (std::string error = check_trailers(rest.substr(0, end)); !error.empty())
            return fail(std::move(error));
          end += 2;
        } else {
          if (rest.size() >= kMaxHttpHead) return fail("trailers larger than 64 KiB");
          if ((rest[0] != '\r' && !is_tchar(rest[0])) ||
              (rest.size() >= 2 && rest[0] == '\r' && rest[1] != '\n'))
            return fail("a trailer line that is neither a field nor the end");
          out.body = at;
          return out;
        }
        out.trailers_at = at;
        out.trailers_size = end + 2;
        at += end + 2;
        state_ = State::kDone;
        break;
      }
      case State::kDone:
        break;
    }
  }
  out.body = at;
  out.done = state_ == State::kDone;
  return out;
}

ResponseHead parse_response_head(std::span<const uint8_t> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()),
                              std::min(bytes.size(), kMaxHttpHead));
  ResponseHead head;
  const size_t end = text.find("\r\n\r\n");
  if (end == std::string_view::npos) {
    if (bytes.size() >= kMaxHttpHead) head.status = ResponseHead::Status::kMalformed;
    return head;
  }
  const std::string_view line = text.substr(0, text.find("\r\n"));
  int code = 0;
  const bool version = line.starts_with("HTTP/1.1 ") || line.starts_with("HTTP/1.0 ");
  const auto [after, error] =
      std::from_chars(line.data() + std::min<size_t>(9, line.size()),
                      line.data() + std::min<size_t>(12, line.size()), code);
  if (!version || line.size() < 12 || error != std::errc() || after != line.data() + 12 ||
      (line.size() > 12 && line[12] != ' ') || code < 100 || code > 999) {
    head.status = ResponseHead::Status::kMalformed;
    return head;
  }
  head.status = ResponseHead::Status::kComplete;
  head.code = code;
  head.head_size = end + 4;
  return head;
}

}  // namespace hutch::net
