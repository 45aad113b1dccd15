// U for credential injection: python3's http.server over TLS on 198.51.100.10:443 in a new
// network namespace, with a certificate the test made (upstream_certificate.h), appending each
// request's "PATH Authorization" to DIR/auth.log. Used by hutchd's injection tests and by
// `hutch run --net`'s.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "tests/common/command.h"

namespace hutch::testing {

class TlsUpstream {
 public:
  TlsUpstream(const std::string& dir, const std::string& cert, const std::string& key);
  // 0.0.0.0:443 in LISTEN in its namespace's /proc/net/tcp.
  bool serving() const;
  std::string netns() const { return "/proc/" + std::to_string(pid()) + "/ns/net"; }
  // Every request so far, one "PATH Authorization" line each ("-": none).
  std::string requests() const;
  pid_t pid() const { return server_->pid(); }

 private:
  std::string log_;
  std::unique_ptr<BackgroundCommand> server_;
};

}  // namespace hutch::testing
