// Credential injection (issue #12): rules that set request headers from secrets hutchd holds,
// for some hosts only; the placeholders the sandbox sees instead of the secrets; the scanner
// that finds a placeholder wherever it is sent; and the rewriting of an HTTP/1.1 request head.
// Pure logic: the relay applies it to each request head it reads from a terminated connection.
//
// The relay's order for one request: the rules that apply (rules_for) give headers to set
// (headers_to_set with the secrets' values); rewrite_head replaces them in the head; then
// find_placeholders over the rewritten head: any placeholder still there (another header, the
// target) is one sent where its secret does not go, and the request is refused and logged. On a
// connection that is not terminated, a placeholder in the plain-HTTP head is refused likewise.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "net/policy.h"
#include "runtime/base/error.h"

namespace hutch::net {

// A secret's name, as hutchd and the rules name it: [A-Za-z_][A-Za-z0-9_]{0,127} (an
// environment variable's spelling, so `--secret-from-env NAME` and the placeholder's variable
// line up).
bool is_valid_secret_name(std::string_view name);

// InjectHeader and InjectRule are in net/policy.h (a Policy carries them).

// Checks what the JSON codec cannot: at least one host and one header, names and prefixes as
// above, no header set twice by one rule. The error names the part at fault.
Result<void> validate_rule(const InjectRule& rule);

// Whether any rule names `host` (a normalised name): the engine terminates TLS for it.
bool terminates(std::span<const InjectRule> rules, std::string_view host);

// The rules for one request, in order. `target` is the request target as sent (origin-form
// "/v1/chat?x"); a path prefix is compared with it byte for byte, and never matches a target
// with dot segments ("/v1/../admin"), percent-encoded dots or slashes, or a backslash: those
// mean a different path to some servers, and a credential must not follow them.
std::vector<const InjectRule*> rules_for(std::span<const InjectRule> rules, std::string_view host,
                                         std::string_view method, std::string_view target);

struct HeaderValue {
  std::string name;
  std::string value;
};

// The headers the rules set, with their secrets' values from `lookup` (nullopt: no such
// secret, an error naming it). A later rule setting the same header wins.
using SecretLookup = std::function<std::optional<std::string>(std::string_view secret)>;
Result<std::vector<HeaderValue>> headers_to_set(std::span<const InjectRule* const> rules,
                                                const SecretLookup& lookup);

// A placeholder: "hutch-placeholder-<secret>-<32 hex digits>", the digits the first 128 bits of
// HMAC-SHA256(sandbox key, secret name). Deterministic for a sandbox and a secret (hutchd keeps
// the key with the sandbox's record, outside the sandbox), unguessable without the key, and
// independent of the secret's value. Only [A-Za-z0-9_-]: URL encoding leaves it as it is.
// new_placeholder_key and placeholder_for are in target hutch_net_placeholder (OpenSSL).
inline constexpr std::string_view kPlaceholderPrefix = "hutch-placeholder-";
using PlaceholderKey = std::array<uint8_t, 32>;
Result<PlaceholderKey> new_placeholder_key();  // RAND_bytes
std::string placeholder_for(const PlaceholderKey& key, std::string_view secret);

struct PlaceholderHit {
  std::string secret;
  size_t offset = 0;
};

// Finds the known placeholders in a buffer. It sees only the bytes it is given: a placeholder
// split across two reads is found only if the caller scans the whole head at once (the relay
// does: it holds the head until the empty line, up to kMaxHttpHead). Literal bytes only: a
// placeholder base64-encoded (Basic auth) or otherwise transformed is not found.
class PlaceholderScanner {
 public:
  void add(std::string secret, std::string placeholder);
  std::vector<PlaceholderHit> scan(std::span<const uint8_t> bytes) const;
  std::vector<PlaceholderHit> scan(std::string_view text) const;

 private:
  struct Entry {
    std::string secret;
    std::string placeholder;
  };
  std::vector<Entry> entries_;
};

// The secret whose placeholder is in `bytes`, if any, among the secrets `rules` name (in target
// hutch_net_placeholder). Cheap when no placeholder is there: one search for the common prefix.
std::optional<std::string> placeholder_in(std::span<const InjectRule> rules,
                                          const PlaceholderKey& key,
                                          std::span<const uint8_t> bytes);

// Finds placeholders in a stream seen a piece at a time (a request body): the last bytes of the
// pieces fed so far are kept, so that a placeholder split across two pieces is found as well.
// Literal bytes only, as above: one split by chunked framing or encoded is not found.
class PlaceholderStream {
 public:
  // The secret whose placeholder `piece` holds or completes, if any, among those `rules` name
  // (in target hutch_net_placeholder). Cheap without one: a search for the common prefix.
  std::optional<std::string> feed(std::span<const InjectRule> rules, const PlaceholderKey& key,
                                  std::span<const uint8_t> piece);

 private:
  std::string tail_;  // the last bytes fed, fewer than the longest placeholder
};

// Replaces each named header of a complete HTTP/1.1 request head (through the empty line, as
// parse_http_head accepted it): every existing field of that name is removed and one field is
// added before the empty line. Errors never include a value: a value with CR, LF or NUL (header
// injection) is refused naming the header only, as is a result over kMaxHttpHead, and so is a
// head with a bare CR or LF or a field name that is not a token (whitespace before the colon).
Result<std::string> rewrite_head(std::string_view head, std::span<const HeaderValue> set);

}  // namespace hutch::net
