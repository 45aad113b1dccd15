#include "tests/common/upstream_netns.h"

#include <fstream>

#include "tests/common/wait.h"

namespace hutch::testing {

UpstreamNetns::UpstreamNetns(const std::string& dir)
    : dir_(dir),
      server_({"/usr/bin/unshare", "-n", "/bin/sh", "-c",
               "ip link set lo up && ip addr add 198.51.100.10/32 dev lo && "
               "ip addr add 169.254.169.254/32 dev lo && "
               "exec python3 -m http.server --bind 0.0.0.0 --directory " +
                   dir + " 80"},
              dir + "/upstream.log") {}

bool UpstreamNetns::serving() const {
  std::ifstream tcp("/proc/" + std::to_string(pid()) + "/net/tcp");
  std::string line;
  while (std::getline(tcp, line)) {
    if (line.find("00000000:0050 00000000:0000 0A") != std::string::npos) return true;
  }
  return false;
}

std::string UpstreamNetns::log() const { return read_file_or_empty(dir_ + "/upstream.log"); }

void start_upstream_netns(const std::string& dir, std::unique_ptr<UpstreamNetns>& upstream) {
  using namespace std::chrono_literals;
  upstream = std::make_unique<UpstreamNetns>(dir);
  ASSERT_GT(upstream->pid(), 0);
  ASSERT_TRUE(wait_until([&] { return upstream->serving(); }, 10s, "U's http.server"))
      << upstream->log();
}

}  // namespace hutch::testing
