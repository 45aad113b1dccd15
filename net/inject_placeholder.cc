// The placeholders' HMAC (net/inject.h), apart from the rest of inject.cc so that what parses
// rules (the policy's JSON, linked into the static zygote) links no OpenSSL.
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <algorithm>
#include <set>
#include <string_view>

#include "net/inject.h"

namespace hutch::net {

Result<PlaceholderKey> new_placeholder_key() {
  PlaceholderKey key;
  if (RAND_bytes(key.data(), static_cast<int>(key.size())) != 1) {
    return plain_error("RAND_bytes", "placeholder key");
  }
  return key;
}

std::string placeholder_for(const PlaceholderKey& key, std::string_view secret) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(secret.data()), secret.size(), digest, &size);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string text = std::string(kPlaceholderPrefix) + std::string(secret) + "-";
  for (unsigned i = 0; i < 16; ++i) {
    text += kHex[digest[i] >> 4];
    text += kHex[digest[i] & 0xf];
  }
  return text;
}

std::optional<std::string> placeholder_in(std::span<const InjectRule> rules,
                                          const PlaceholderKey& key,
                                          std::span<const uint8_t> bytes) {
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  if (text.find(kPlaceholderPrefix) == std::string_view::npos) return std::nullopt;
  std::set<std::string> secrets;
  for (const InjectRule& rule : rules) {
    for (const InjectHeader& header : rule.headers) secrets.insert(header.secret);
  }
  PlaceholderScanner scanner;
  for (const std::string& secret : secrets) scanner.add(secret, placeholder_for(key, secret));
  auto hits = scanner.scan(bytes);
  if (hits.empty()) return std::nullopt;
  return hits.front().secret;
}

std::optional<std::string> PlaceholderStream::feed(std::span<const InjectRule> rules,
                                                   const PlaceholderKey& key,
                                                   std::span<const uint8_t> piece) {
  size_t longest = 0;
  for (const InjectRule& rule : rules) {
    for (const InjectHeader& header : rule.headers) {
      longest = std::max(longest, kPlaceholderPrefix.size() + header.secret.size() + 1 + 32);
    }
  }
  if (longest == 0) return std::nullopt;
  const std::string_view text(reinterpret_cast<const char*>(piece.data()), piece.size());
  // Where the kept bytes meet the piece: enough of the piece to complete one begun in the tail.
  if (!tail_.empty()) {
    std::string seam = tail_;
    seam.append(text.substr(0, longest - 1));
    if (auto secret = placeholder_in(rules, key,
                                     {reinterpret_cast<const uint8_t*>(seam.data()), seam.size()}))
      return secret;
  }
  if (auto secret = placeholder_in(rules, key, piece)) return secret;
  if (text.size() >= longest - 1) {
    tail_.assign(text.substr(text.size() - (longest - 1)));
  } else {
    tail_.append(text);
    if (tail_.size() > longest - 1) tail_.erase(0, tail_.size() - (longest - 1));
  }
  return std::nullopt;
}

}  // namespace hutch::net
