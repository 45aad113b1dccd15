// hutchd behind a corporate proxy (--net-upstream-proxy, --net-no-proxy,
// --net-upstream-proxy-secret), as root: U is the network tests' upstream namespace
// (tests/common/upstream_netns.h, python3's http.server on 198.51.100.10:80) with a CONNECT proxy
// (tests/common/connect_proxy.h) added on 198.51.100.9:3128. A filtered sandbox's curl must reach
// api.test only through the proxy, with the secret's credentials, and direct.test (no_proxy)
// without it; the credentials are in no reply, no sandbox, no log and no state file.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/common/command.h"
#include "tests/common/connect_proxy.h"
#include "tests/common/hutchd.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"
#include "tests/common/upstream_netns.h"
#include "tests/common/wait.h"
#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPage = "hello from upstream";
constexpr std::string_view kCredentials = "corp-user:corp-pass-5c0ffee";
// base64("corp-user:corp-pass-5c0ffee")
constexpr std::string_view kAuthorization = "Basic Y29ycC11c2VyOmNvcnAtcGFzcy01YzBmZmVl";

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class UpstreamProxyDaemon : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    for (const char* tool : {"/usr/bin/curl", "/usr/bin/python3", "/usr/bin/unshare",
                             "/usr/bin/nsenter", "/usr/sbin/ip"})
      HUTCH_REQUIRE(::access(tool, X_OK) == 0, std::string("needs ") + tool);
    ::setenv("HUTCH_TEST_NET", "1", 1);
    std::ofstream(temp_.path() + "/index.html") << kPage;
    ASSERT_NO_FATAL_FAILURE(start_upstream_netns(temp_.path(), upstream_));
    ASSERT_EQ(run_command({"/usr/bin/nsenter", "--net=" + upstream_->netns(), "/usr/sbin/ip",
                           "addr", "add", "198.51.100.9/32", "dev", "lo"})
                  .exit_code,
              0);
    upstream_ns_.reset(::open(upstream_->netns().c_str(), O_RDONLY | O_CLOEXEC));
    ASSERT_TRUE(upstream_ns_);
    proxy_ = std::make_unique<ConnectProxy>(
        upstream_ns_.get(), "198.51.100.9", 3128,
        std::map<std::string, std::string>{{"api.test", "198.51.100.10"}});
    ASSERT_TRUE(proxy_->ok());
    secrets_file_ = temp_.path() + "/secrets";
    std::ofstream(secrets_file_) << "CORP_PROXY=" << kCredentials << "\n";
    ASSERT_EQ(::chmod(secrets_file_.c_str(), 0600), 0);
  }
  void TearDown() override {
    if (daemon_) daemon_->delete_sandboxes_and_stop();
    proxy_.reset();
    ::unsetenv("HUTCH_TEST_NET");
  }

  std::vector<std::string> args() const {
    return {"--destroy-on-exit",
            "--net-upstream-netns",
            upstream_->netns(),
            "--net-resolve",
            "api.test=198.51.100.10",
            "--net-resolve",
            "direct.test=198.51.100.10",
            "--secrets-file",
            secrets_file_,
            "--net-upstream-proxy",
            "http://198.51.100.9:3128",
            "--net-no-proxy",
            "direct.test",
            "--net-upstream-proxy-secret",
            "CORP_PROXY"};
  }

  std::string run(const std::string& id, const std::string& command) {
    auto reply = daemon_->post("/v1/sandboxes/" + id + "/exec",
                               {{"command", command + " 2>&1"}, {"timeout_seconds", 60}});
    EXPECT_EQ(reply.status, 200) << reply.raw;
    return reply.body.value("stdout", "");
  }

  bool holds_credentials(std::string_view text) const {
    return text.find(kCredentials) != std::string_view::npos ||
           text.find(kAuthorization.substr(6)) != std::string_view::npos;
  }

  TempDir temp_;
  std::unique_ptr<UpstreamNetns> upstream_;
  UniqueFd upstream_ns_;
  std::unique_ptr<ConnectProxy> proxy_;
  std::string secrets_file_;
  std::unique_ptr<Hutchd> daemon_;
};

TEST_F(UpstreamProxyDaemon, SandboxTrafficGoesThroughTheProxyWithCredentialsItNeverSees) {
  daemon_ = std::make_unique<Hutchd>(temp_.path(), args());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  auto created =
      daemon_->post("/v1/sandboxes",
                    {{"network", {{"mode", "filtered"}, {"allow", {"api.test", "direct.test"}}}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];

  EXPECT_EQ(run(id, "curl -sS --max-time 10 http://api.test/"), kPage);
  auto heads = proxy_->heads();
  ASSERT_EQ(heads.size(), 1u);
  EXPECT_TRUE(heads[0].starts_with("CONNECT api.test:80 HTTP/1.1\r\n")) << heads[0];
  EXPECT_NE(heads[0].find("\r\nProxy-Authorization: " + std::string(kAuthorization) + "\r\n"),
            std::string::npos)
      << heads[0];
  // no_proxy: straight to the upstream, the proxy sees nothing more.
  EXPECT_EQ(run(id, "curl -sS --max-time 10 http://direct.test/"), kPage);
  EXPECT_EQ(proxy_->heads().size(), 1u);

  // The sandbox has no trace of the credentials: not in its environment, not in its processes'.
  const std::string inside = run(id, "env; cat /proc/1/environ; cat /proc/self/environ");
  EXPECT_FALSE(holds_credentials(inside)) << inside;

  auto log = daemon_->get("/v1/sandboxes/" + id + "/network/log");
  ASSERT_EQ(log.status, 200);
  EXPECT_NE(log.raw.find("\"via_proxy\":\"198.51.100.9:3128\""), std::string::npos) << log.raw;
  EXPECT_NE(daemon_->log().find("via proxy 198.51.100.9:3128"), std::string::npos);

  // A 407: the sandbox gets a 502 at once, the log and /metrics say so.
  proxy_->set_mode(ConnectProxy::Mode::kRefuse, 407);
  const std::string refused = run(id, "curl -sS --max-time 10 -w ' %{http_code}' http://api.test/");
  EXPECT_NE(refused.find("\"proxy_status\":407"), std::string::npos) << refused;
  EXPECT_TRUE(refused.ends_with(" 502")) << refused;
  EXPECT_TRUE(wait_until(
      [&] {
        return daemon_->get("/metrics").raw.find("hutch_net_proxy_failures_total 1\n") !=
               std::string::npos;
      },
      5s, "the proxy failure counted"));
  log = daemon_->get("/v1/sandboxes/" + id + "/network/log");
  EXPECT_NE(log.raw.find("answered 407"), std::string::npos) << log.raw;
  EXPECT_NE(log.raw.find("\"proxy_failed\":true"), std::string::npos) << log.raw;

  // The proxy's secret cannot be put into requests by an inject rule.
  auto reserved = daemon_->put(
      "/v1/sandboxes/" + id + "/network",
      json({{"mode", "filtered"},
            {"allow", {"api.test"}},
            {"inject",
             {{{"match_hosts", {"api.test"}},
               {"headers",
                {{"Authorization", {{"secret", "CORP_PROXY"}, {"prefix", "Basic "}}}}}}}}})
          .dump());
  EXPECT_EQ(reserved.status, 400) << reserved.raw;
  EXPECT_EQ(error_code(reserved), "reserved_secret") << reserved.raw;

  EXPECT_FALSE(holds_credentials(daemon_->log()));
  EXPECT_FALSE(holds_credentials(log.raw));
  std::error_code error;
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(daemon_->state_dir(), error)) {
    if (!entry.is_regular_file(error) || entry.is_symlink(error)) continue;
    EXPECT_FALSE(holds_credentials(slurp(entry.path()))) << entry.path();
  }
}

TEST_F(UpstreamProxyDaemon, BadProxyOptionsAreRefusedAtStart) {
  for (const std::vector<std::string>& bad :
       {std::vector<std::string>{"--net-upstream-proxy", "https://198.51.100.9:3128"},
        std::vector<std::string>{"--net-upstream-proxy", "http://u:p@198.51.100.9:3128"},
        std::vector<std::string>{"--net-upstream-proxy", "http://198.51.100.9:3128",
                                 "--net-upstream-proxy-secret", "NOT_HELD"},
        std::vector<std::string>{"--net-no-proxy", "direct.test"},
        std::vector<std::string>{"--net-upstream-proxy", "http://198.51.100.9:3128",
                                 "--net-no-proxy", "direct.test:80"}}) {
    std::filesystem::create_directories(temp_.path() + "/bad");
    Hutchd daemon(temp_.path() + "/bad", bad);
    EXPECT_FALSE(daemon.start()) << bad[1];
    EXPECT_NE(daemon.log().find("proxy"), std::string::npos) << daemon.log();
  }
}

}  // namespace
}  // namespace hutch::testing
