// Incremental sha256 over OpenSSL's EVP API.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "runtime/base/error.h"

struct evp_md_ctx_st;

namespace hutch::layers {

class Sha256 {
 public:
  static Result<Sha256> create();

  void update(std::string_view bytes);
  // Lowercase hex of the digest; the hasher is spent afterwards.
  std::string finish_hex();

 private:
  struct Free {
    void operator()(evp_md_ctx_st* ctx) const;
  };
  explicit Sha256(evp_md_ctx_st* ctx) : ctx_(ctx) {}
  std::unique_ptr<evp_md_ctx_st, Free> ctx_;
};

// "sha256:<hex>" of `bytes`.
Result<std::string> sha256_digest(std::string_view bytes);

}  // namespace hutch::layers
