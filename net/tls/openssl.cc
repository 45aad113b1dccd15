#include "net/tls/openssl.h"

#include <openssl/err.h>
#include <openssl/pem.h>

namespace hutch::net::tls {

std::unexpected<Error> openssl_error(std::string_view step, std::string detail) {
  std::string reasons;
  while (const unsigned long code = ERR_get_error()) {
    char text[256];
    ERR_error_string_n(code, text, sizeof text);
    reasons += reasons.empty() ? "" : "; ";
    reasons += text;
  }
  if (!reasons.empty()) detail += ": " + reasons;
  return plain_error(step, std::move(detail));
}

Result<std::string> certificate_pem(X509* certificate) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || PEM_write_bio_X509(bio.get(), certificate) != 1) {
    return openssl_error("PEM_write_bio_X509", "certificate");
  }
  char* data = nullptr;
  const long size = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(size));
}

}  // namespace hutch::net::tls
