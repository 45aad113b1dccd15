// The request framing (net/http1_framing.h) on any bytes: framing from a head, a chunked body and
// an upgrade's response head, never a crash or undefined behaviour. A chunked body fed in pieces
// (sizes from the input's first byte) must end, or fail, exactly where it does fed whole: the
// relay reads it as the sandbox's segments come.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>

#include "net/http1_framing.h"

namespace {

struct Outcome {
  size_t body = 0;
  bool done = false;
  bool failed = false;
};

Outcome whole(std::span<const uint8_t> bytes) {
  hutch::net::ChunkedBody chunked;
  const auto scan = chunked.scan(bytes);
  if (scan.body > bytes.size() || (scan.done && !scan.error.empty())) std::abort();
  if (scan.trailers_size > 0 && scan.trailers_at + scan.trailers_size > scan.body) std::abort();
  return {scan.body, scan.done, !scan.error.empty()};
}

Outcome in_pieces(std::span<const uint8_t> bytes, size_t step) {
  hutch::net::ChunkedBody chunked;
  Outcome out;
  std::basic_string<uint8_t> pending;
  for (size_t at = 0; at < bytes.size();) {
    const size_t n = std::min(step, bytes.size() - at);
    pending.append(bytes.data() + at, n);
    at += n;
    const auto scan = chunked.scan(std::span(pending.data(), pending.size()));
    if (!scan.error.empty()) return {out.body, false, true};
    out.body += scan.body;
    pending.erase(0, scan.body);
    if (scan.done) return {out.body, true, false};
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace hutch::net;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto framing = request_framing(text);
      framing && framing->kind != BodyFraming::Kind::kLength && framing->length != 0)
    std::abort();
  (void)wants_upgrade(text);
  const ResponseHead head = parse_response_head(std::span(data, size));
  if (head.status == ResponseHead::Status::kComplete &&
      (head.head_size > size || head.code < 100 || head.code > 999))
    std::abort();
  if (size == 0) return 0;
  const std::span<const uint8_t> body(data + 1, size - 1);
  const Outcome all = whole(body);
  const Outcome pieces = in_pieces(body, 1 + data[0] % 64);
  if (all.failed != pieces.failed || all.done != pieces.done) std::abort();
  if (!all.failed && all.body != pieces.body) std::abort();
  return 0;
}
