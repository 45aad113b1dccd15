// U: the upstream side of the network tests through hutchd. A process in a new network namespace
// (lo up, 198.51.100.10 and 169.254.169.254 on it) serving a directory over HTTP on port 80 of
// every address it has with python3's http.server. hutchd's engine dials into it with
// --net-upstream-netns; no packet of a test ever leaves the machine.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "tests/common/command.h"

namespace hutch::testing {

class UpstreamNetns {
 public:
  // Serves `dir`; python3's log goes to `dir`/upstream.log.
  explicit UpstreamNetns(const std::string& dir);

  // The server listens (its namespace's /proc/net/tcp has 0.0.0.0:80 in LISTEN).
  bool serving() const;
  std::string netns() const { return "/proc/" + std::to_string(pid()) + "/ns/net"; }
  pid_t pid() const { return server_.pid(); }
  std::string log() const;

 private:
  std::string dir_;
  BackgroundCommand server_;
};

// `upstream` made to serve `dir`, once its server listens; fails the calling test (gtest
// assertions: call it under ASSERT_NO_FATAL_FAILURE) when it does not within 10 s.
void start_upstream_netns(const std::string& dir, std::unique_ptr<UpstreamNetns>& upstream);

}  // namespace hutch::testing
