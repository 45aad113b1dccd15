#include "net/tls_hello.h"

#include <optional>
#include <set>

namespace hutch::net {

namespace {

constexpr uint8_t kRecordHandshake = 22;
constexpr uint8_t kHandshakeClientHello = 1;
constexpr size_t kRecordHeader = 5;
constexpr size_t kMaxRecordPayload = 16384 + 2048;  // TLSCiphertext's limit (RFC 8446 5.2)
constexpr uint16_t kExtServerName = 0;
constexpr uint16_t kExtAlpn = 16;
constexpr uint8_t kNameTypeHostName = 0;

ClientHello result(HelloStatus status, std::string detail = {}) {
  ClientHello hello;
  hello.status = status;
  hello.detail = std::move(detail);
  return hello;
}

// A bounds-checked cursor over one message: every read fails rather than run past the end.
class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> data) : data_(data) {}
  bool empty() const { return pos_ == data_.size(); }
  std::optional<uint32_t> number(int bytes) {
    if (data_.size() - pos_ < static_cast<size_t>(bytes)) return std::nullopt;
    uint32_t value = 0;
    for (int i = 0; i < bytes; ++i) value = value << 8 | data_[pos_++];
    return value;
  }
  // A vector with a length prefix of `bytes` bytes, as a cursor of its own.
  std::optional<Cursor> vector(int bytes) {
    const auto length = number(bytes);
    if (!length || data_.size() - pos_ < *length) return std::nullopt;
    Cursor inner(data_.subspan(pos_, *length));
    pos_ += *length;
    return inner;
  }
  bool skip(size_t count) {
    if (data_.size() - pos_ < count) return false;
    pos_ += count;
    return true;
  }
  std::string rest() const { return std::string(data_.begin() + pos_, data_.end()); }

 private:
  std::span<const uint8_t> data_;
  size_t pos_ = 0;
};

ClientHello parse_server_name(Cursor extension, ClientHello hello) {
  auto list = extension.vector(2);
  if (!list || !extension.empty()) return result(HelloStatus::kMalformed, "server_name lengths");
  bool seen = false;
  while (!list->empty()) {
    const auto type = list->number(1);
    auto name = list->vector(2);
    if (!type || !name) return result(HelloStatus::kMalformed, "server_name entry lengths");
    if (*type != kNameTypeHostName) continue;
    // RFC 6066 3: "The ServerNameList MUST NOT contain more than one name of the same name_type".
    if (seen) return result(HelloStatus::kMalformed, "two host names in server_name");
    seen = true;
    hello.server_name = name->rest();
    if (hello.server_name.empty()) return result(HelloStatus::kMalformed, "empty host name");
  }
  if (seen) hello.status = HelloStatus::kComplete;
  return hello;
}

ClientHello parse_alpn(Cursor extension, ClientHello hello) {
  auto list = extension.vector(2);
  if (!list || !extension.empty() || list->empty()) {
    return result(HelloStatus::kMalformed, "ALPN lengths");
  }
  while (!list->empty()) {
    auto protocol = list->vector(1);
    if (!protocol || protocol->empty())
      return result(HelloStatus::kMalformed, "ALPN entry lengths");
    hello.alpn.push_back(protocol->rest());
  }
  return hello;
}

ClientHello parse_body(std::span<const uint8_t> body) {
  Cursor cursor(body);
  const auto version = cursor.number(2);
  if (!version || *version >> 8 != 3) return result(HelloStatus::kMalformed, "legacy_version");
  if (!cursor.skip(32)) return result(HelloStatus::kMalformed, "random");
  auto session = cursor.vector(1);
  auto suites = cursor.vector(2);
  auto compression = cursor.vector(1);
  if (!session || !suites || !compression) {
    return result(HelloStatus::kMalformed, "session id, cipher suites or compression lengths");
  }
  ClientHello hello = result(HelloStatus::kNoSni);
  if (cursor.empty()) return hello;  // no extensions at all (TLS 1.2 and older may omit them)
  auto extensions = cursor.vector(2);
  if (!extensions || !cursor.empty()) return result(HelloStatus::kMalformed, "extensions length");
  std::set<uint32_t> seen;
  while (!extensions->empty()) {
    const auto type = extensions->number(2);
    auto data = extensions->vector(2);
    if (!type || !data) return result(HelloStatus::kMalformed, "extension lengths");
    // RFC 8446 4.2: no extension type twice; a second server_name could disagree with the first.
    if (!seen.insert(*type).second) {
      return result(HelloStatus::kMalformed, "extension " + std::to_string(*type) + " twice");
    }
    if (*type == kExtServerName) hello = parse_server_name(*data, std::move(hello));
    if (*type == kExtAlpn) hello = parse_alpn(*data, std::move(hello));
    if (hello.status == HelloStatus::kMalformed) return hello;
  }
  return hello;
}

}  // namespace

ClientHello parse_client_hello(std::span<const uint8_t> bytes) {
  std::vector<uint8_t> message;
  std::optional<size_t> message_length;
  size_t pos = 0;
  while (true) {
    if (message_length && message.size() >= *message_length) break;
    if (bytes.size() - pos < kRecordHeader) {
      // What is there must still be a handshake record header's prefix.
      if (pos < bytes.size() && bytes[pos] != kRecordHandshake) {
        return result(pos == 0 ? HelloStatus::kNotTls : HelloStatus::kMalformed,
                      "record type " + std::to_string(bytes[pos]) + " is not handshake");
      }
      if (pos + 1 < bytes.size() && bytes[pos + 1] != 3) {
        return result(pos == 0 ? HelloStatus::kNotTls : HelloStatus::kMalformed,
                      "record version is not 3.x");
      }
      return result(HelloStatus::kNeedMore);
    }
    const uint8_t type = bytes[pos];
    const uint8_t major = bytes[pos + 1];
    const size_t length = size_t{bytes[pos + 3]} << 8 | bytes[pos + 4];
    if (type != kRecordHandshake || major != 3) {
      return result(pos == 0 ? HelloStatus::kNotTls : HelloStatus::kMalformed,
                    "record type " + std::to_string(type) + " version " + std::to_string(major) +
                        ".x is not a TLS handshake");
    }
    if (length == 0 || length > kMaxRecordPayload) {
      return result(HelloStatus::kMalformed, "record length " + std::to_string(length));
    }
    const size_t available = std::min(length, bytes.size() - pos - kRecordHeader);
    message.insert(message.end(), bytes.begin() + pos + kRecordHeader,
                   bytes.begin() + pos + kRecordHeader + available);
    if (!message.empty() && message[0] != kHandshakeClientHello) {
      return result(HelloStatus::kNotTls,
                    "handshake type " + std::to_string(message[0]) + " is not ClientHello");
    }
    if (!message_length && message.size() >= 4) {
      message_length = 4 + (size_t{message[1]} << 16 | size_t{message[2]} << 8 | message[3]);
      if (*message_length > kMaxClientHello) {
        return result(HelloStatus::kMalformed,
                      "ClientHello of " + std::to_string(*message_length) + " bytes");
      }
    }
    if (available < length) return result(HelloStatus::kNeedMore);
    pos += kRecordHeader + length;
  }
  // Bytes of the same record past the hello belong to no message we know: refused.
  if (message.size() != *message_length) {
    return result(HelloStatus::kMalformed, "a record holds more than the ClientHello");
  }
  return parse_body(std::span(message).subspan(4));
}

std::string_view hello_status_name(HelloStatus status) {
  switch (status) {
    case HelloStatus::kComplete:
      return "complete";
    case HelloStatus::kNoSni:
      return "no sni";
    case HelloStatus::kNeedMore:
      return "need more";
    case HelloStatus::kNotTls:
      return "not tls";
    case HelloStatus::kMalformed:
      return "malformed";
  }
  return "unknown";
}

}  // namespace hutch::net
