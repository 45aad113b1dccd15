// The HTTP/1.x head reader (net/http_head.h) on any bytes: a status, never a crash or undefined
// behaviour; a complete head ends inside the input, and its host goes through the policy's host
// parser and the 403 builder, whose body must be JSON whatever the host held.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <span>

#include "net/http_head.h"
#include "net/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hutch::net;
  const HttpHead head = parse_http_head(std::span(data, size));
  if (head.status == HeadStatus::kMalformed && head.detail.empty()) std::abort();
  if (head.status != HeadStatus::kComplete) return 0;
  if (head.head_size > size || head.head_size < 4 || head.method.empty()) std::abort();
  if (!head.host.empty()) {
    if (auto host = parse_host(head.host); host && !host->name && !host->address) std::abort();
  }
  const std::string response =
      build_forbidden_response(head.host, head.port.value_or(80), head.target, head.detail);
  const size_t split = response.find("\r\n\r\n");
  if (split == std::string::npos) std::abort();
  const auto body = nlohmann::json::parse(response.substr(split + 4), nullptr, false);
  if (body.is_discarded() || body["rule"] != head.target) std::abort();
  return 0;
}
