#include "runtime/layers/sha256.h"

#include <openssl/evp.h>

namespace hutch::layers {

void Sha256::Free::operator()(evp_md_ctx_st* ctx) const { EVP_MD_CTX_free(ctx); }

Result<Sha256> Sha256::create() {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr) return plain_error("EVP_MD_CTX_new", "out of memory");
  Sha256 hasher(ctx);
  if (EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
    return plain_error("EVP_DigestInit_ex", "sha256");
  }
  return hasher;
}

void Sha256::update(std::string_view bytes) {
  // EVP_DigestUpdate only fails on a context that was never initialised, which create() rules out.
  EVP_DigestUpdate(ctx_.get(), bytes.data(), bytes.size());
}

std::string Sha256::finish_hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(ctx_.get(), digest, &length);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(length * 2);
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kHex[digest[i] >> 4]);
    hex.push_back(kHex[digest[i] & 0xf]);
  }
  return hex;
}

Result<std::string> sha256_digest(std::string_view bytes) {
  auto hasher = HUTCH_TRY(Sha256::create());
  hasher.update(bytes);
  return "sha256:" + hasher.finish_hex();
}

}  // namespace hutch::layers
