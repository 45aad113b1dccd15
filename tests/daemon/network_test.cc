// Filtered and open sandboxes end to end: a real hutchd (tests/common/hutchd.h) whose engine dials
// upstreams in a network namespace this test makes (U: lo up, 198.51.100.10 and 169.254.169.254
// on it, python3's http.server on port 80), with names from --net-resolve; real sandboxes use
// the host's curl, dig, nft, ip and python3 from inside. Nothing here touches the host's network
// namespace, and no packet leaves the machine: the sandbox's namespace has a dead-end route only,
// and the engine's upstream sockets are made in U.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/command.h"
#include "tests/common/hutchd.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"
#include "tests/common/upstream_netns.h"
#include "tests/common/wait.h"

namespace hutch::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPage = "hello from upstream";

bool tool_exists(const char* path) { return ::access(path, X_OK) == 0; }

std::vector<std::string> engine_args(const UpstreamNetns& upstream) {
  return {"--net-upstream-netns", upstream.netns(),
          "--net-resolve",        "api.test=198.51.100.10",
          "--net-resolve",        "evil.test=198.51.100.10",
          "--net-resolve",        "meta.test=169.254.169.254"};
}

// Sockets hutchd holds open.
int socket_count(pid_t pid) {
  int count = 0;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    char target[128] = {};
    if (::readlink(entry.path().c_str(), target, sizeof target - 1) > 0 &&
        std::string(target).starts_with("socket:"))
      ++count;
  }
  return count;
}

// The network namespaces process `pid` holds as open fds ("net:[...]").
std::set<std::string> netns_fds(pid_t pid) {
  std::set<std::string> links;
  const std::string dir = "/proc/" + std::to_string(pid) + "/fd";
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    char target[128] = {};
    if (::readlink(entry.path().c_str(), target, sizeof target - 1) > 0 &&
        std::string(target).starts_with("net:["))
      links.insert(target);
  }
  return links;
}

std::string netns_of(pid_t pid) {
  char link[128] = {};
  const std::string path = "/proc/" + std::to_string(pid) + "/ns/net";
  if (::readlink(path.c_str(), link, sizeof link - 1) <= 0) return "";
  return link;
}

// Whether any process still has the network namespace `link` ("net:[...]") as its own or as an
// open fd.
bool namespace_in_use(const std::string& link) {
  std::error_code error;
  for (const auto& proc : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = proc.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    char target[128] = {};
    if (::readlink((proc.path() / "ns/net").c_str(), target, sizeof target - 1) > 0 &&
        link == target)
      return true;
    std::error_code fd_error;
    for (const auto& fd : std::filesystem::directory_iterator(proc.path() / "fd", fd_error)) {
      char fd_target[128] = {};
      if (::readlink(fd.path().c_str(), fd_target, sizeof fd_target - 1) > 0 && link == fd_target)
        return true;
    }
  }
  return false;
}

std::vector<json> ndjson(const std::string& text) {
  std::vector<json> lines;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) lines.push_back(json::parse(line));
  }
  return lines;
}

class NetworkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    for (const char* tool :
         {"/usr/bin/curl", "/usr/bin/dig", "/usr/sbin/nft", "/usr/bin/python3", "/usr/bin/unshare"})
      HUTCH_REQUIRE(tool_exists(tool), std::string("needs ") + tool);
    ::setenv("HUTCH_TEST_NET", "1", 1);
    std::ofstream(temp_.path() + "/index.html") << kPage;
    ASSERT_NO_FATAL_FAILURE(start_upstream_netns(temp_.path(), upstream_));
  }
  void TearDown() override {
    if (daemon_) daemon_->delete_sandboxes_and_stop();
  }

  void start(std::vector<std::string> extra = {"--destroy-on-exit"}) {
    auto args = engine_args(*upstream_);
    args.insert(args.end(), extra.begin(), extra.end());
    daemon_ = std::make_unique<Hutchd>(temp_.path(), args);
    ASSERT_TRUE(daemon_->start()) << daemon_->log();
  }

  std::string create(const json& network) {
    auto reply = daemon_->post("/v1/sandboxes", {{"network", network}});
    EXPECT_EQ(reply.status, 201) << reply.raw;
    return reply.body.value("id", "");
  }

  // `command` under sh -c in the sandbox: stdout and stderr together.
  std::string run(const std::string& id, const std::string& command) {
    auto reply = daemon_->post("/v1/sandboxes/" + id + "/exec",
                               {{"command", command + " 2>&1"}, {"timeout_seconds", 60}});
    EXPECT_EQ(reply.status, 200) << reply.raw;
    return reply.body.value("stdout", "");
  }

  // The namespaces hutchd holds as fds but U's (--net-upstream-netns) and its own: those made
  // ahead, and one being made.
  std::set<std::string> made_ahead() const {
    std::set<std::string> links = netns_fds(daemon_->pid());
    links.erase(netns_of(upstream_->pid()));
    links.erase(netns_of(daemon_->pid()));
    return links;
  }
  // Whether hutchd's pool of namespaces made ahead holds `count`, all ready (/metrics).
  bool pool_ready(int count) const {
    return daemon_->get("/metrics")
               .raw.find("hutch_net_netns_ahead{state=\"ready\"} " + std::to_string(count) +
                         "\n") != std::string::npos;
  }

  std::string curl(const std::string& id, const std::string& url, const std::string& extra = "") {
    return run(id, "curl -sS --max-time 10 " + extra + " " + url);
  }

  TempDir temp_;
  std::unique_ptr<UpstreamNetns> upstream_;
  std::unique_ptr<Hutchd> daemon_;
};

const json kApiOnly = {{"mode", "filtered"}, {"allow", {"api.test"}}};

TEST_F(NetworkTest, FilteredReachesAllowedNamesOnlyAndLogsEachDecision) {
  start();
  const std::string id = create(kApiOnly);
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(curl(id, "http://api.test/"), kPage);
  EXPECT_NE(curl(id, "http://evil.test/").find("Could not resolve host"), std::string::npos);
  EXPECT_NE(run(id, "dig +time=3 +tries=1 @8.8.8.8 evil.test").find("status: NXDOMAIN"),
            std::string::npos);
  // An IP literal has no name an allow could match: a 403 whose JSON body names the rule.
  std::string denied = curl(id, "http://198.51.100.10/", "-w ' %{http_code}'");
  EXPECT_NE(denied.find("\"network_denied\""), std::string::npos) << denied;
  EXPECT_TRUE(denied.ends_with(" 403")) << denied;
  // UDP anywhere but DNS is dropped in the namespace: sendto fails at once.
  EXPECT_NE(run(id,
                "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
                "s.sendto(b'x', ('198.51.100.10', 9999))\"")
                .find("Operation not permitted"),
            std::string::npos);

  auto sandbox = daemon_->get("/v1/sandboxes/" + id);
  EXPECT_EQ(sandbox.body["network"]["mode"], "filtered");
  EXPECT_EQ(sandbox.body["network"]["allow"], json({"api.test"}));
  auto status = daemon_->get("/v1/sandboxes/" + id + "/network");
  ASSERT_EQ(status.status, 200) << status.raw;
  EXPECT_EQ(status.body["mode"], "filtered");
  EXPECT_GE(status.body["stats"]["connections"].get<int>(), 2) << status.raw;
  EXPECT_GE(status.body["stats"]["denied"].get<int>(), 1) << status.raw;
  EXPECT_GE(status.body["stats"]["dns_denied"].get<int>(), 1) << status.raw;

  auto log = daemon_->get("/v1/sandboxes/" + id + "/network/log");
  ASSERT_EQ(log.status, 200);
  bool allowed_api = false, denied_literal = false, denied_dns = false;
  for (const json& line : ndjson(log.raw)) {
    for (const char* key : {"time", "name", "address", "port", "protocol", "rule", "allowed",
                            "reason", "bytes_up", "bytes_down", "duration_ms"})
      EXPECT_TRUE(line.contains(key)) << key << " in " << line.dump();
    if (line["name"] == "api.test" && line["protocol"] == "http" && line["allowed"] == true)
      allowed_api = line["bytes_down"].get<uint64_t>() > 0;
    if (line["address"] == "198.51.100.10" && line["allowed"] == false) denied_literal = true;
    if (line["protocol"] == "dns" && line["name"] == "evil.test" && line["allowed"] == false)
      denied_dns = true;
  }
  EXPECT_TRUE(allowed_api) << log.raw;
  EXPECT_TRUE(denied_literal) << log.raw;
  EXPECT_TRUE(denied_dns) << log.raw;
  const std::string metrics = daemon_->get("/metrics").raw;
  EXPECT_NE(metrics.find("hutch_net_connections_total{outcome=\"allowed\"} "), std::string::npos);
  EXPECT_EQ(metrics.find("hutch_net_connections_total{outcome=\"denied\"} 0\n"), std::string::npos)
      << metrics;
  EXPECT_EQ(metrics.find("hutch_net_dns_denied_total 0\n"), std::string::npos) << metrics;
  EXPECT_NE(daemon_->log().find("sandbox=" + id + " net=http allowed=true name=api.test"),
            std::string::npos);
}

TEST_F(NetworkTest, AnAddressAllowOpensAnIpLiteral) {
  start();
  const std::string id = create({{"mode", "filtered"}, {"allow", {"198.51.100.0/24"}}});
  EXPECT_EQ(curl(id, "http://198.51.100.10/"), kPage);
}

TEST_F(NetworkTest, MetadataIsRefusedEvenInOpenMode) {
  start();
  const std::string id = create("open");
  EXPECT_EQ(curl(id, "http://api.test/"), kPage);
  EXPECT_EQ(curl(id, "http://198.51.100.10/"), kPage);
  std::string metadata = run(id, "curl -sS --max-time 10 http://169.254.169.254/; echo \" rc=$?\"");
  EXPECT_EQ(metadata.find(kPage), std::string::npos) << metadata;
  EXPECT_EQ(metadata.find("rc=0"), std::string::npos) << metadata;
  std::string by_name = run(id, "curl -sS --max-time 10 http://meta.test/; echo \" rc=$?\"");
  EXPECT_EQ(by_name.find(kPage), std::string::npos) << by_name;
}

TEST_F(NetworkTest, TheSandboxRootCannotChangeTheRules) {
  start();
  const std::string id = create(kApiOnly);
  EXPECT_NE(run(id, "nft flush ruleset").find("Operation not permitted"), std::string::npos);
  EXPECT_NE(run(id, "ip route del default").find("Operation not permitted"), std::string::npos);
  EXPECT_NE(curl(id, "http://198.51.100.10/").find("network_denied"), std::string::npos);
  EXPECT_NE(curl(id, "http://evil.test/").find("Could not resolve host"), std::string::npos);
  EXPECT_EQ(curl(id, "http://api.test/"), kPage);
}

TEST_F(NetworkTest, PutReplacesThePolicyAtRuntime) {
  start();
  const std::string id = create(kApiOnly);
  const std::string path = "/v1/sandboxes/" + id + "/network";
  ASSERT_EQ(curl(id, "http://api.test/"), kPage);
  auto locked = daemon_->put(path, R"({"mode":"filtered","allow":[]})");
  ASSERT_EQ(locked.status, 200) << locked.raw;
  EXPECT_EQ(locked.body["allow"], json::array());
  EXPECT_NE(curl(id, "http://api.test/").find("Could not resolve host"), std::string::npos);
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + id).body["network"]["allow"], json::array());

  ASSERT_EQ(daemon_->put(path, R"("open")").status, 200);
  EXPECT_EQ(curl(id, "http://198.51.100.10/"), kPage);
  ASSERT_EQ(daemon_->put(path, kApiOnly.dump()).status, 200);
  EXPECT_NE(curl(id, "http://198.51.100.10/").find("network_denied"), std::string::npos);

  auto to_none = daemon_->put(path, R"("none")");
  EXPECT_EQ(to_none.status, 409) << to_none.raw;
  EXPECT_EQ(to_none.body["error"]["code"], "network_mode_fixed") << to_none.raw;
  auto bad = daemon_->put(path, R"({"mode":"filtered","allow":["ok.test","10.0.0.0/33"]})");
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.raw.find("allow[1]"), std::string::npos) << bad.raw;

  const std::string loopback = create("loopback");
  auto from_loopback = daemon_->put("/v1/sandboxes/" + loopback + "/network", R"("filtered")");
  EXPECT_EQ(from_loopback.status, 409) << from_loopback.raw;
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + loopback + "/network").body["stats"], nullptr);
}

TEST_F(NetworkTest, LogFollowStreamsNewDecisionsUntilTheSandboxIsDeleted) {
  start();
  const std::string id = create(kApiOnly);
  std::mutex mutex;
  std::string received;
  std::atomic<bool> ended = false;
  std::thread follower([&] {
    auto client = daemon_->client(60);
    client->Get("/v1/sandboxes/" + id + "/network/log?follow=1",
                [&](const char* data, size_t length) {
                  std::lock_guard lock(mutex);
                  received.append(data, length);
                  return true;
                });
    ended = true;
  });
  EXPECT_EQ(curl(id, "http://api.test/"), kPage);
  EXPECT_TRUE(wait_until(
      [&] {
        std::lock_guard lock(mutex);
        return received.find("\"api.test\"") != std::string::npos;
      },
      10s, "the follower to see the decision"));
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + id).status, 204);
  EXPECT_TRUE(wait_until([&] { return ended.load(); }, 10s, "the follow stream to end"));
  follower.join();
}

TEST_F(NetworkTest, DeleteClosesEveryListenerAndFreesTheNamespace) {
  // No namespaces made ahead: their refill would change hutchd's socket count meanwhile
  // (FilteredCreatesJoinANamespaceMadeAheadAndEachIsUsedOnce covers those).
  start({"--destroy-on-exit", "--net-ahead", "0"});
  const int before = socket_count(daemon_->pid());
  auto created = daemon_->post("/v1/sandboxes", {{"network", kApiOnly}});
  ASSERT_EQ(created.status, 201);
  const std::string id = created.body["id"];
  EXPECT_GE(socket_count(daemon_->pid()), before + 6);  // tcp, dns udp and tcp, v4 and v6
  char link[128] = {};
  const std::string init_ns =
      "/proc/" + std::to_string(created.body["init_pid"].get<int>()) + "/ns/net";
  ASSERT_GT(::readlink(init_ns.c_str(), link, sizeof link - 1), 0);
  ASSERT_EQ(daemon_->del("/v1/sandboxes/" + id + "?wait=true").status, 204);
  EXPECT_TRUE(wait_until([&] { return socket_count(daemon_->pid()) <= before; }, 5s,
                         "hutchd's sockets back to " + std::to_string(before)));
  EXPECT_FALSE(namespace_in_use(link)) << link;
}

TEST_F(NetworkTest, ARestartedHutchdReattachesWithTheNamesGivenBefore) {
  start({});
  const std::string id = create(kApiOnly);
  std::string fake = run(id, "dig +short +time=3 +tries=1 api.test");
  while (!fake.empty() && fake.back() == '\n') fake.pop_back();
  ASSERT_TRUE(fake.starts_with("198.1")) << fake;
  EXPECT_EQ(daemon_->stop(SIGTERM), 0);
  daemon_ = std::make_unique<Hutchd>(temp_.path(), engine_args(*upstream_));
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  // A client that cached the answer: no DNS query now, the fake address dialled with its name.
  EXPECT_EQ(curl(id, "http://api.test/", "--resolve api.test:80:" + fake), kPage);
  // The engine was given the names from before: the same name keeps its fake address.
  EXPECT_EQ(run(id, "dig +short +time=3 +tries=1 api.test"), fake + "\n");
  EXPECT_EQ(curl(id, "http://api.test/"), kPage);
  EXPECT_NE(curl(id, "http://evil.test/").find("Could not resolve host"), std::string::npos);
}

// A process of the test's own, holding UDP 127.0.0.1:53 (the DNS stub's address) in a sandbox's
// namespace while hutchd is down: the restarted hutchd cannot bind its listeners there. (Not TCP
// 900: the connections it served before leave TIME_WAIT entries a plain bind trips on.)
class PortSquatter {
 public:
  PortSquatter(pid_t sandbox_init, const std::string& ready_file)
      : squatter_({"/usr/bin/nsenter", "--net=/proc/" + std::to_string(sandbox_init) + "/ns/net",
                   "/usr/bin/python3", "-c",
                   "import socket, time\n"
                   "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
                   "s.bind(('127.0.0.1', 53))\n"
                   "open('" +
                       ready_file +
                       "', 'w').close()\n"
                       "time.sleep(600)\n"},
                  ready_file + ".log") {}
  pid_t pid() const { return squatter_.pid(); }

 private:
  BackgroundCommand squatter_;
};

TEST_F(NetworkTest, AFailedReattachIsReportedAndEgressStaysClosed) {
  HUTCH_REQUIRE(tool_exists("/usr/bin/nsenter"), "needs /usr/bin/nsenter");
  start({});
  const std::string id = create(kApiOnly);
  ASSERT_EQ(curl(id, "http://api.test/"), kPage);
  const int init_pid = daemon_->get("/v1/sandboxes/" + id).body["init_pid"];
  EXPECT_EQ(daemon_->stop(SIGTERM), 0);
  const std::string ready = temp_.path() + "/squatting";
  PortSquatter squatter(init_pid, ready);
  ASSERT_GT(squatter.pid(), 0);
  ASSERT_TRUE(wait_until([&] { return ::access(ready.c_str(), F_OK) == 0; }, 10s,
                         "the squatter to bind 127.0.0.1:53"))
      << std::ifstream(ready + ".log").rdbuf();
  daemon_ = std::make_unique<Hutchd>(temp_.path(), engine_args(*upstream_));
  ASSERT_TRUE(daemon_->start()) << daemon_->log();

  // Adopted (its processes and files are the client's), but not looking healthy.
  auto sandbox = daemon_->get("/v1/sandboxes/" + id);
  ASSERT_EQ(sandbox.status, 200) << sandbox.raw;
  EXPECT_EQ(sandbox.body["network_error"]["code"], "network_not_attached") << sandbox.raw;
  auto status = daemon_->get("/v1/sandboxes/" + id + "/network");
  ASSERT_EQ(status.status, 200) << status.raw;
  EXPECT_EQ(status.body["error"]["code"], "network_not_attached") << status.raw;
  const std::string message = status.body["error"]["message"];
  EXPECT_NE(message.find("egress closed"), std::string::npos) << message;
  EXPECT_NE(message.find("127.0.0.1"), std::string::npos) << message;  // the bind that failed
  EXPECT_NE(daemon_->log().find("sandbox=" + id + " recovery: network not re-attached"),
            std::string::npos);
  EXPECT_NE(daemon_->get("/metrics").raw.find("hutch_net_reattach_failures_total 1\n"),
            std::string::npos);
  EXPECT_NE(daemon_->get("/v1/sandboxes/" + id + "/logs").raw.find("\"network_error\""),
            std::string::npos);
  // Fail-safe: the rules still redirect every connection to the engine's port, where nothing
  // listens, and every DNS query to the stub's (here the squatter, which never answers).
  std::string refused = run(id, "curl -sS --max-time 5 http://api.test/; echo \" rc=$?\"");
  EXPECT_EQ(refused.find(kPage), std::string::npos) << refused;
  EXPECT_EQ(refused.find("rc=0"), std::string::npos) << refused;
  refused = run(id, "curl -sS --max-time 10 http://198.51.100.10/; echo \" rc=$?\"");
  EXPECT_EQ(refused.find(kPage), std::string::npos) << refused;
  EXPECT_EQ(refused.find("rc=0"), std::string::npos) << refused;
  // A healthy sandbox next to it shows no error.
  const std::string healthy = create(kApiOnly);
  EXPECT_FALSE(daemon_->get("/v1/sandboxes/" + healthy).body.contains("network_error"));
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + healthy + "/network").body["error"], nullptr);
}

TEST_F(NetworkTest, RollbackAndForkKeepThePolicyWithTheirOwnNames) {
  start();
  const std::string id = create(kApiOnly);
  const std::string names = daemon_->state_dir() + "/sandboxes/" + id + "/network-names";
  ASSERT_EQ(daemon_
                ->put("/v1/sandboxes/" + id + "/network",
                      json({{"mode", "filtered"}, {"allow", {"api.test", "evil.test"}}}).dump())
                .status,
            200);
  ASSERT_EQ(curl(id, "http://evil.test/"), kPage);
  EXPECT_NE(std::ifstream(names).peek(), EOF);
  auto checkpoint = daemon_->post("/v1/sandboxes/" + id + "/checkpoints", {{"name", "c1"}});
  ASSERT_EQ(checkpoint.status, 201) << checkpoint.raw;
  auto rolled = daemon_->post("/v1/sandboxes/" + id + "/checkpoints/c1/rollback", json::object());
  ASSERT_EQ(rolled.status, 200) << rolled.raw;
  EXPECT_EQ(rolled.body["network"]["allow"], json({"api.test", "evil.test"}));
  EXPECT_EQ(std::ifstream(names).peek(), EOF);  // fresh engine state: no names yet
  EXPECT_EQ(curl(id, "http://evil.test/"), kPage);

  auto forked = daemon_->post("/v1/sandboxes/" + id + "/fork", json::object());
  ASSERT_EQ(forked.status, 201) << forked.raw;
  const std::string fork = forked.body["sandboxes"][0]["id"];
  EXPECT_EQ(forked.body["sandboxes"][0]["network"]["allow"], json({"api.test", "evil.test"}));
  EXPECT_EQ(curl(fork, "http://evil.test/"), kPage);
  EXPECT_NE(curl(fork, "http://198.51.100.10/").find("network_denied"), std::string::npos);
}

TEST_F(NetworkTest, DefaultNetworkAppliesToCreatesThatNameNoneAndSkipsTheWarmPool) {
  start({"--destroy-on-exit", "--default-network", "filtered", "--warm-pool", "host=1"});
  auto idle = [&] {
    auto pools = daemon_->get("/v1/pools");
    return pools.status == 200 && !pools.body["pools"].empty() &&
           pools.body["pools"][0]["idle"] == 1;
  };
  ASSERT_TRUE(wait_until(idle, 10s, "the warm pool to fill"));
  auto created = daemon_->post("/v1/sandboxes", json::object());
  ASSERT_EQ(created.status, 201);
  const std::string id = created.body["id"];
  EXPECT_EQ(created.body["network"]["mode"], "filtered");
  // A pooled sandbox's namespace was made for loopback: a filtered create never takes one.
  EXPECT_NE(daemon_->get("/v1/sandboxes/" + id + "/logs").raw.find("\"warm_pool\":false"),
            std::string::npos);
  EXPECT_TRUE(idle());
  EXPECT_NE(curl(id, "http://api.test/").find("Could not resolve host"), std::string::npos);
  auto bad =
      daemon_->post("/v1/sandboxes", {{"network", {{"mode", "filtered"}, {"allow", {"a..test"}}}}});
  EXPECT_EQ(bad.status, 400);
  EXPECT_NE(bad.raw.find("allow[0]"), std::string::npos) << bad.raw;
}

TEST_F(NetworkTest, FilteredCreatesJoinANamespaceMadeAheadAndEachIsUsedOnce) {
  start({"--destroy-on-exit", "--net-ahead", "2"});
  auto pool_full = [&] { return pool_ready(2) && made_ahead().size() == 2; };
  ASSERT_TRUE(wait_until(pool_full, 10s, "two namespaces made ahead")) << daemon_->log();
  const std::set<std::string> ahead = made_ahead();
  auto created = daemon_->post("/v1/sandboxes", {{"network", kApiOnly}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string first = created.body["id"];
  const std::string first_ns = netns_of(created.body["init_pid"].get<int>());
  EXPECT_TRUE(ahead.contains(first_ns)) << first_ns;
  EXPECT_NE(daemon_->get("/v1/sandboxes/" + first + "/logs").raw.find("\"netns_ahead\":true"),
            std::string::npos);
  // The path and listeners came with the namespace: the policy holds from the first connection.
  EXPECT_EQ(curl(first, "http://api.test/"), kPage);
  EXPECT_NE(curl(first, "http://evil.test/").find("Could not resolve host"), std::string::npos);
  EXPECT_NE(run(first, "nft flush ruleset").find("Operation not permitted"), std::string::npos);

  // Refilled off the request path, with new namespaces: the one handed out is not hutchd's any
  // more, so no second sandbox can get it.
  ASSERT_TRUE(wait_until(pool_full, 10s, "the pool refilled"));
  EXPECT_FALSE(made_ahead().contains(first_ns));
  const std::string second = create("open");
  const std::string second_ns = netns_of(daemon_->get("/v1/sandboxes/" + second).body["init_pid"]);
  EXPECT_NE(second_ns, first_ns);
  EXPECT_EQ(curl(second, "http://198.51.100.10/"), kPage);
  const std::string loopback = create("loopback");
  EXPECT_FALSE(
      ahead.contains(netns_of(daemon_->get("/v1/sandboxes/" + loopback).body["init_pid"])));

  ASSERT_EQ(daemon_->del("/v1/sandboxes/" + first + "?wait=true").status, 204);
  EXPECT_FALSE(namespace_in_use(first_ns)) << first_ns;
  // Shutdown drains the pool: none of its namespaces outlives hutchd.
  ASSERT_TRUE(wait_until(pool_full, 10s, "the pool refilled"));
  const std::set<std::string> left = made_ahead();
  EXPECT_EQ(daemon_->stop(SIGTERM), 0);
  for (const std::string& link : left) EXPECT_FALSE(namespace_in_use(link)) << link;
}

TEST_F(NetworkTest, NetAheadZeroInstallsThePathAtCreate) {
  start({"--destroy-on-exit", "--net-ahead", "0"});
  const std::string id = create(kApiOnly);
  EXPECT_TRUE(made_ahead().empty());
  EXPECT_NE(daemon_->get("/v1/sandboxes/" + id + "/logs").raw.find("\"netns_ahead\":false"),
            std::string::npos);
  EXPECT_EQ(curl(id, "http://api.test/"), kPage);
  EXPECT_NE(curl(id, "http://198.51.100.10/").find("network_denied"), std::string::npos);
}

TEST_F(NetworkTest, NetAheadOutOfRangeIsRefused) {
  for (const char* value : {"-1", "65", "many", "1e3"}) {
    Hutchd refused(temp_.path(), {"--net-ahead", value});
    EXPECT_FALSE(refused.start()) << value;
    EXPECT_NE(refused.log().find("--net-ahead"), std::string::npos) << value << refused.log();
  }
}

// A recipe dir under the test's temp dir: setup.sh fetches U's page into the layer, and
// recipe.json gives the bake `network`.
std::string fetching_recipe(const std::string& temp, const std::string& name, const json& network) {
  const std::string dir = temp + "/" + name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir + "/setup.sh") << "curl -sS --max-time 10 -o /fetched.html http://api.test/\n";
  std::ofstream(dir + "/recipe.json") << json({{"network", network}}).dump();
  return dir;
}

TEST_F(NetworkTest, ARecipeBakesWithItsOwnPolicyWhichItsSandboxesDoNotInherit) {
  // No namespaces made ahead (whose refill would change the socket count): the bake makes its
  // own, and it goes with the bake.
  start({"--destroy-on-exit", "--net-ahead", "0"});
  const std::string dir = fetching_recipe(temp_.path(), "fetcher", kApiOnly);
  const int sockets = socket_count(daemon_->pid());
  auto baked = daemon_->post("/v1/recipes", {{"dir", dir}, {"name", "fetcher"}});
  ASSERT_EQ(baked.status, 201) << baked.raw;
  EXPECT_TRUE(wait_until([&] { return socket_count(daemon_->pid()) <= sockets; }, 10s,
                         "hutchd's sockets back to " + std::to_string(sockets)));
  EXPECT_TRUE(made_ahead().empty());
  // setup.sh's decisions are the engine's, logged like a sandbox's.
  EXPECT_NE(daemon_->log().find("net=http allowed=true name=api.test"), std::string::npos);

  // The create's network, not the bake's: loopback by default, a policy of its own if given.
  auto created = daemon_->post("/v1/sandboxes", {{"recipe", "fetcher"}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  EXPECT_EQ(created.body["network"]["mode"], "loopback");
  EXPECT_EQ(run(id, "cat /fetched.html"), kPage);
  EXPECT_NE(curl(id, "http://api.test/").find("Could not resolve host"), std::string::npos);
  auto filtered = daemon_->post(
      "/v1/sandboxes",
      {{"recipe", "fetcher"}, {"network", {{"mode", "filtered"}, {"allow", {"evil.test"}}}}});
  ASSERT_EQ(filtered.status, 201) << filtered.raw;
  const std::string other = filtered.body["id"];
  EXPECT_EQ(filtered.body["network"]["allow"], json({"evil.test"}));
  EXPECT_NE(curl(other, "http://api.test/").find("Could not resolve host"), std::string::npos);
  EXPECT_EQ(curl(other, "http://evil.test/"), kPage);
}

TEST_F(NetworkTest, ABakeItsPolicyDeniesFailsWithAClearError) {
  start();
  for (const json& network :
       {json({{"mode", "filtered"}, {"allow", {"evil.test"}}}), json("loopback"), json("none")}) {
    const std::string dir = fetching_recipe(temp_.path(), "denied", network);
    auto reply = daemon_->post("/v1/recipes", {{"dir", dir}, {"name", "denied"}});
    ASSERT_EQ(reply.status, 422) << network.dump() << ": " << reply.raw;
    EXPECT_EQ(reply.body["error"]["code"], "bake_failed");
    EXPECT_NE(reply.body["error"]["message"].get<std::string>().find("setup.sh"), std::string::npos)
        << reply.raw;
    EXPECT_NE(reply.body["error"]["log"].get<std::string>().find("Could not resolve host"),
              std::string::npos)
        << network.dump() << ": " << reply.raw;
    EXPECT_EQ(daemon_->post("/v1/sandboxes", {{"recipe", "denied"}}).status, 404);
  }
  // Hostile policies are refused before anything runs (a 400 from hutchd's policy codec, or the
  // helper's 422 for a recipe.json it cannot read), saying what is wrong.
  for (const json& network :
       {json("sideways"), json(7), json({{"mode", "filtered"}, {"allow", {"10.0.0.0/33"}}}),
        json({{"mode", "filtered"}, {"alow", json::array()}}),
        json({{"mode", "filtered"}, {"allow", {"a..test"}}})}) {
    const std::string dir = fetching_recipe(temp_.path(), "hostile", network);
    auto reply = daemon_->post("/v1/recipes", {{"dir", dir}, {"name", "hostile"}});
    EXPECT_TRUE(reply.status == 400 || reply.status == 422) << network.dump() << ": " << reply.raw;
    EXPECT_NE(reply.raw.find("recipe.json"), std::string::npos) << reply.raw;
    EXPECT_EQ(reply.raw.find("Could not resolve host"), std::string::npos) << reply.raw;
    EXPECT_EQ(daemon_->post("/v1/sandboxes", {{"recipe", "hostile"}}).status, 404);
  }
}

TEST_F(NetworkTest, TestOnlyFlagsNeedHutchTestNet) {
  ::unsetenv("HUTCH_TEST_NET");
  Hutchd refused(temp_.path(), engine_args(*upstream_));
  EXPECT_FALSE(refused.start());
  EXPECT_NE(refused.log().find("need HUTCH_TEST_NET=1"), std::string::npos) << refused.log();
}

}  // namespace
}  // namespace hutch::testing
