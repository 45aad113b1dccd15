// The network service in-process, without HTTP: which mode changes a running sandbox may make,
// the host's addresses for the floor, and (as root, with a real zygote and registry) a filtered
// sandbox's lifecycle: attached before create returns, its fake names persisted, its decisions
// in the ring, detached on destroy, its own engine state after a rollback-like replace.
#include "daemon/service/network_service.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "daemon/metrics.h"
#include "daemon/service/sandbox_registry.h"
#include "daemon/zygote.h"
#include "runtime/cgroup/plan.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"
#include "tests/common/wait.h"

namespace hutch::daemon::service {
namespace {

using testing::TempDir;
using namespace std::chrono_literals;

net::Policy policy_of(net::Mode mode, std::vector<std::string> allow = {}) {
  net::Policy policy;
  policy.mode = mode;
  for (const std::string& text : allow) policy.allow.push_back(*net::parse_rule(text));
  return policy;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(NetworkServiceTest, OnlyFilteredAndOpenSwitchAtRuntime) {
  using net::Mode;
  const auto ok = [](Mode from, Mode to) {
    return check_mode_change(policy_of(from), policy_of(to)).has_value();
  };
  EXPECT_TRUE(ok(Mode::kFiltered, Mode::kOpen));
  EXPECT_TRUE(ok(Mode::kOpen, Mode::kFiltered));
  EXPECT_TRUE(ok(Mode::kFiltered, Mode::kFiltered));
  EXPECT_TRUE(ok(Mode::kLoopback, Mode::kLoopback));
  for (auto [from, to] : {std::pair{Mode::kLoopback, Mode::kFiltered},
                          {Mode::kFiltered, Mode::kNone},
                          {Mode::kOpen, Mode::kLoopback},
                          {Mode::kNone, Mode::kLoopback}}) {
    auto refused = check_mode_change(policy_of(from), policy_of(to));
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().kind, ErrorKind::kConflict);
    EXPECT_EQ(refused.error().code, "network_mode_fixed");
    EXPECT_NE(refused.error().message.find("namespace"), std::string::npos);
  }
  EXPECT_TRUE(uses_engine(policy_of(Mode::kOpen)));
  EXPECT_FALSE(uses_engine(policy_of(Mode::kLoopback)));
}

TEST(NetworkServiceTest, HostAddressesIncludeLoopback) {
  auto addresses = host_addresses();
  ASSERT_TRUE(addresses) << addresses.error().message();
  EXPECT_NE(std::ranges::find(*addresses, *net::Address::parse("127.0.0.1")), addresses->end());
}

TEST(NetworkServiceTest, AnUnopenableUpstreamNamespaceIsAStartupError) {
  Metrics metrics;
  NetworkOptions options;
  options.upstream_netns = "/nonexistent/ns/net";
  auto service = NetworkService::create(options, metrics);
  ASSERT_FALSE(service);
  EXPECT_NE(service.error().message().find("/nonexistent/ns/net"), std::string::npos);
}

class NetworkRegistryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    auto started = Zygote::start(HUTCHD_ZYGOTE_BINARY);
    ASSERT_TRUE(started) << started.error().message();
    zygote_ = new Zygote(std::move(*started));
  }
  static void TearDownTestSuite() {
    delete zygote_;
    zygote_ = nullptr;
  }
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_NE(zygote_, nullptr);
    NetworkOptions options;
    options.static_names["api.test"] = {*net::Address::parse("198.51.100.10")};
    auto service = NetworkService::create(options, metrics_);
    ASSERT_TRUE(service) << service.error().message();
    network_ = std::move(*service);
    registry_.emplace(state_.path(), std::string(kDefaultCgroupParent), *zygote_, metrics_);
    registry_->set_network(network_.get());
    registry_->recover();
  }
  void TearDown() override {
    if (registry_) registry_->destroy_all();
  }

  std::shared_ptr<Sandbox> create(const net::Policy& policy) {
    SandboxConfig config;
    config.network = policy;
    auto created = registry_->create(config, "test");
    EXPECT_TRUE(created) << created.error().message;
    return created ? *created : nullptr;
  }

  // `command` under sh -c in the sandbox, its stdout.
  static std::string run(const Sandbox& sandbox, const std::string& command) {
    int pipe_fds[2];
    EXPECT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
    UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
    ExecRequest request;
    request.argv = {"/bin/sh", "-c", command};
    request.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
    request.stdout_fd = write_end.get();
    auto process = sandbox.live().exec(request);
    EXPECT_TRUE(process) << process.error().message();
    write_end.reset();
    std::string out;
    char buffer[4096];
    for (ssize_t n; (n = ::read(read_end.get(), buffer, sizeof buffer)) > 0;) out.append(buffer, n);
    return out;
  }

  static Zygote* zygote_;
  TempDir state_;
  Metrics metrics_;
  std::unique_ptr<NetworkService> network_;
  std::optional<SandboxRegistry> registry_;
};

Zygote* NetworkRegistryTest::zygote_ = nullptr;

TEST_F(NetworkRegistryTest, AFilteredSandboxIsAttachedAndItsNamesPersisted) {
  auto sandbox = create(policy_of(net::Mode::kFiltered, {"api.test"}));
  ASSERT_TRUE(sandbox);
  auto status = network_->status(sandbox->id(), sandbox->network());
  ASSERT_TRUE(status.stats);
  std::string fake = run(*sandbox, "dig +short +time=3 +tries=1 api.test");
  ASSERT_FALSE(fake.empty());
  fake.pop_back();
  EXPECT_TRUE(net::Address::parse(fake)) << fake;
  EXPECT_EQ(read_file(sandbox->dir() + "/" + kNetworkNames), fake + " api.test\n");
  EXPECT_EQ(run(*sandbox, "dig +short +time=3 +tries=1 evil.test"), "");
  bool ended = true;
  auto decisions = network_->decisions(sandbox->id(), 0, 0ms, &ended);
  EXPECT_FALSE(ended);
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].seq, 1u);
  EXPECT_EQ(decisions[0].log.name, "api.test");
  EXPECT_TRUE(decisions[0].log.allowed);
  EXPECT_FALSE(decisions[1].log.allowed);
  EXPECT_TRUE(network_->decisions(sandbox->id(), 2, 0ms, nullptr).empty());

  ASSERT_TRUE(registry_->destroy(sandbox->id(), "test"));
  network_->decisions(sandbox->id(), 0, 0ms, &ended);
  EXPECT_TRUE(ended);
  EXPECT_FALSE(network_->status(sandbox->id(), sandbox->network()).stats);
}

TEST_F(NetworkRegistryTest, PolicyChangesPersistAndModeChangesAreRefused) {
  auto sandbox = create(policy_of(net::Mode::kFiltered, {"api.test"}));
  ASSERT_TRUE(sandbox);
  ASSERT_TRUE(registry_->set_network_policy(*sandbox, policy_of(net::Mode::kFiltered)));
  EXPECT_EQ(run(*sandbox, "dig +short +time=3 +tries=1 api.test"), "");
  EXPECT_TRUE(sandbox->network().allow.empty());
  EXPECT_NE(read_file(sandbox->dir() + "/sandbox.json").find("\"allow\": []"), std::string::npos);
  auto refused = registry_->set_network_policy(*sandbox, policy_of(net::Mode::kLoopback));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, "network_mode_fixed");
  ASSERT_TRUE(registry_->set_network_policy(*sandbox, policy_of(net::Mode::kOpen)));
  EXPECT_NE(run(*sandbox, "dig +short +time=3 +tries=1 api.test"), "");
}

TEST_F(NetworkRegistryTest, WithoutTheServiceAFilteredCreateIsRefused) {
  registry_->set_network(nullptr);
  SandboxConfig config;
  config.network = policy_of(net::Mode::kFiltered);
  auto created = registry_->create(config, "test");
  ASSERT_FALSE(created);
  EXPECT_EQ(created.error().kind, ErrorKind::kUnsupported);
  EXPECT_TRUE(std::filesystem::is_empty(registry_->sandboxes_dir()));
}

}  // namespace
}  // namespace hutch::daemon::service
