// `hutch run --net filtered|open` end to end, as root: build/hutch hands the run to hutch-egress,
// whose network engine serves the sandbox's egress for the run's length; no hutchd. Upstreams
// run in network namespaces this test makes (U: tests/common/upstream_netns.h, python3's
// http.server; and a TLS one for injection), which the engine dials into with
// --net-upstream-netns; names come from --net-resolve. No packet leaves the machine.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "runtime/cgroup/stale.h"
#include "tests/common/command.h"
#include "tests/common/memory_scan.h"
#include "tests/common/must_work.h"
#include "tests/common/processes.h"
#include "tests/common/temp_dir.h"
#include "tests/common/upstream_netns.h"
#include "tests/common/wait.h"
#include "tests/daemon/tls_upstream.h"
#include "tests/daemon/upstream_certificate.h"

namespace hutch::testing {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

constexpr const char* kPage = "hello from upstream";
constexpr std::string_view kSecret = "sk-run-4f1c0e77b2";
constexpr std::string_view kEnvSecret = "env-run-secret-61d0a9";
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif

std::vector<json> ndjson(const std::string& text) {
  std::vector<json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(json::parse(line));
  }
  return lines;
}

// What the runs left in `dir` (their TMPDIR, where each keeps its CA while it runs).
std::vector<std::string> entries_of(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error))
    names.push_back(entry.path().filename());
  return names;
}

// Host pids whose command line (NULs as spaces) is exactly `command`.
std::vector<pid_t> processes_running(const std::string& command) {
  std::vector<pid_t> pids;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", error)) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmdline = read_file_or_empty(entry.path() / "cmdline");
    std::replace(cmdline.begin(), cmdline.end(), '\0', ' ');
    if (cmdline == command + " ") pids.push_back(std::stoi(name));
  }
  return pids;
}

pid_t parent_of(pid_t pid) {
  const std::string stat = read_file_or_empty("/proc/" + std::to_string(pid) + "/stat");
  int parent = 0;
  const size_t close = stat.rfind(')');
  if (close == std::string::npos || std::sscanf(stat.c_str() + close + 1, " %*c %d", &parent) != 1)
    return -1;
  return parent;
}

class RunEgress : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    for (const char* tool : {"/usr/bin/curl", "/usr/bin/python3", "/usr/bin/unshare"})
      HUTCH_REQUIRE(::access(tool, X_OK) == 0, std::string("needs ") + tool);
    ASSERT_EQ(::mkdir(tmp_.c_str(), 0700), 0);
  }
  void TearDown() override {
    EXPECT_EQ(entries_of(tmp_), std::vector<std::string>{}) << "a run left its CA's dir behind";
  }

  // The environment of a run: the test-only engine options allowed, the CA's dir in tmp_.
  std::vector<std::string> test_env() const {
    return {"PATH=/usr/sbin:/usr/bin:/sbin:/bin", "HUTCH_TEST_NET=1", "TMPDIR=" + tmp_};
  }

  void start_plain_upstream() {
    std::ofstream(temp_.path() + "/index.html") << kPage;
    ASSERT_NO_FATAL_FAILURE(start_upstream_netns(temp_.path(), upstream_));
  }
  std::vector<std::string> engine_args() const {
    return {"--net-upstream-netns", upstream_->netns(),
            "--net-resolve",        "api.test=198.51.100.10",
            "--net-resolve",        "evil.test=198.51.100.10",
            "--net-resolve",        "meta.test=169.254.169.254"};
  }
  // `hutch run --net MODE` with `options` (after the engine's), `script` under sh -c.
  CommandResult run(const std::string& mode, const std::vector<std::string>& options,
                    const std::string& script) {
    std::vector<std::string> args = {"run", "--net", mode};
    for (const std::string& arg : engine_args()) args.push_back(arg);
    args.insert(args.end(), options.begin(), options.end());
    args.insert(args.end(), {"--", "/bin/sh", "-c", script});
    CommandOptions command;
    command.env = test_env();
    return hutch(args, command);
  }

  TempDir temp_;
  const std::string tmp_ = temp_.path() + "/tmp";
  std::unique_ptr<UpstreamNetns> upstream_;
};

TEST_F(RunEgress, FilteredReachesAllowedNamesOnlyAndLogsEachDecision) {
  ASSERT_NO_FATAL_FAILURE(start_plain_upstream());
  const std::string log = temp_.path() + "/decisions.ndjson";
  auto result = run("filtered", {"--allow", "api.test", "--net-log", log, "--json"},
                    "curl -sS --max-time 10 http://api.test/; echo; "
                    "curl -sS --max-time 10 http://evil.test/ 2>&1; "
                    "curl -sS --max-time 10 -w ' %{http_code}' http://198.51.100.10/; echo; "
                    "python3 -c \"import socket; s=socket.socket(socket.AF_INET, "
                    "socket.SOCK_DGRAM); s.sendto(b'x', ('198.51.100.10', 9999))\" 2>&1; "
                    "exit 7");
  // The command's own status comes through, as from any hutch run.
  EXPECT_EQ(result.exit_code, 7) << result.err;
  EXPECT_NE(result.out.find(std::string(kPage) + "\n"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("Could not resolve host: evil.test"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("\"network_denied\""), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(" 403\n"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("Operation not permitted"), std::string::npos) << result.out;
  // --json: the run's record is the last line, with the network's figures.
  const size_t last = result.out.rfind('\n', result.out.size() - 2);
  const json record = json::parse(result.out.substr(last + 1), nullptr, false);
  ASSERT_TRUE(record.is_object()) << result.out;
  EXPECT_EQ(record["exit_code"], 7) << record;
  const json& network = record["network"];
  EXPECT_EQ(network["mode"], "filtered") << record;
  EXPECT_GE(network["connections"].get<int>(), 2) << record << ": api.test and the IP literal";
  EXPECT_GE(network["denied"].get<int>(), 1) << record;
  EXPECT_GE(network["dns_denied"].get<int>(), 1) << record;
  EXPECT_GT(network["bytes_down"].get<int>(), 0) << record;

  // Every decision, as GET .../network/log lists them, written by the time the run returned.
  bool allowed_http = false, denied_dns = false, denied_literal = false;
  for (const json& line : ndjson(read_file_or_empty(log))) {
    EXPECT_TRUE(line.contains("seq") && line.contains("time") && line.contains("rule")) << line;
    if (line["protocol"] == "http" && line["name"] == "api.test" && line["allowed"] == true &&
        line["bytes_down"].get<uint64_t>() > 0)
      allowed_http = true;
    if (line["protocol"] == "dns" && line["name"] == "evil.test" && line["allowed"] == false)
      denied_dns = true;
    if (line["address"] == "198.51.100.10" && line["name"].is_null() && line["allowed"] == false)
      denied_literal = true;
  }
  EXPECT_TRUE(allowed_http) << read_file_or_empty(log);
  EXPECT_TRUE(denied_dns) << read_file_or_empty(log);
  EXPECT_TRUE(denied_literal) << read_file_or_empty(log);
  EXPECT_TRUE(upstream_->serving()) << upstream_->log();
}

TEST_F(RunEgress, OpenReachesAnyPublicNameButNeverTheFloorOrADeniedName) {
  ASSERT_NO_FATAL_FAILURE(start_plain_upstream());
  auto result = run("open", {"--deny", "evil.test"},
                    "curl -sS --max-time 10 http://api.test/; echo; "
                    "curl -sS --max-time 10 http://evil.test/ 2>&1; "
                    "curl -sS --max-time 10 -w ' %{http_code}' http://meta.test/latest/; echo");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_NE(result.out.find(std::string(kPage) + "\n"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find("Could not resolve host: evil.test"), std::string::npos) << result.out;
  // The metadata address answers in U, yet the floor refuses it whatever the mode.
  EXPECT_NE(result.out.find("floor"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(" 403\n"), std::string::npos) << result.out;
  EXPECT_EQ(upstream_->log().find("/latest/"), std::string::npos) << upstream_->log();
}

// The sandbox's root cannot undo the path: its namespace belongs to the host's user namespace.
TEST_F(RunEgress, TheSandboxsRootCannotFlushTheRulesOrRouteAround) {
  HUTCH_REQUIRE(::access("/usr/sbin/nft", X_OK) == 0 && ::access("/usr/sbin/ip", X_OK) == 0,
                "needs nft and ip");
  ASSERT_NO_FATAL_FAILURE(start_plain_upstream());
  auto result = run("filtered", {"--allow", "api.test"},
                    "nft flush ruleset 2>&1; echo nft=$?; ip route del default 2>&1; echo ip=$?; "
                    "curl -sS --max-time 10 -w ' %{http_code}' http://198.51.100.10/; echo");
  EXPECT_EQ(result.exit_code, 0) << result.err;
  EXPECT_EQ(result.out.find("nft=0"), std::string::npos) << result.out;
  EXPECT_EQ(result.out.find("ip=0"), std::string::npos) << result.out;
  EXPECT_NE(result.out.find(" 403\n"), std::string::npos) << result.out;
}

// Credentials: the sandbox holds a placeholder, the upstream gets the secret over TLS, and no
// process of the run but the host side's engine ever holds the value: not the sandbox's, and not
// the runner that forks it (its init is a fork of the runner that never execs).
TEST_F(RunEgress, InjectedSecretReachesTheUpstreamAndNoProcessOfTheSandbox) {
  HUTCH_REQUIRE(::access("/etc/ssl/certs/ca-certificates.crt", R_OK) == 0,
                "needs the host's CA bundle (ca-certificates)");
  UpstreamCertificate certificate;
  ASSERT_NO_FATAL_FAILURE(write_upstream_certificate(temp_.path(), "upstream", "run upstream",
                                                     "api.test", certificate));
  TlsUpstream tls(temp_.path(), certificate.cert, certificate.key);
  ASSERT_GT(tls.pid(), 0);
  ASSERT_TRUE(wait_until([&] { return tls.serving(); }, 10s, "U's https server"))
      << read_file_or_empty(temp_.path() + "/upstream.err");
  const std::string secrets = temp_.path() + "/secrets";
  std::ofstream(secrets) << "OPENAI_API_KEY=" << kSecret << "\n";
  ASSERT_EQ(::chmod(secrets.c_str(), 0600), 0);
  const std::string policy = temp_.path() + "/policy.json";
  std::ofstream(policy) << json{
      {"allow", {"api.test"}},
      {"inject",
       {{{"match_hosts", {"api.test"}},
         {"headers", {{"Authorization", {{"secret", "OPENAI_API_KEY"}, {"prefix", "Bearer "}}}}}},
        {{"match_hosts", {"api.test"}},
         {"path_prefix", "/env/"},
         {"headers", {{"Authorization", {{"secret", "RUN_ENV_SECRET"}}}}}}}}};

  std::vector<std::string> env = test_env();
  env.push_back("RUN_ENV_SECRET=" + std::string(kEnvSecret));
  // Long enough for the scans below (minutes of memory under ASan); the test ends it.
  const std::string sleeper = "sleep 600.5";
  CommandResult result;
  std::thread runner([&] {
    std::vector<std::string> args = {"run",
                                     "--net",
                                     "filtered",
                                     "--net-upstream-netns",
                                     tls.netns(),
                                     "--net-resolve",
                                     "api.test=198.51.100.10",
                                     "--net-upstream-ca",
                                     certificate.ca,
                                     "--net-policy",
                                     policy,
                                     "--secrets-file",
                                     secrets,
                                     "--secret-from-env",
                                     "RUN_ENV_SECRET",
                                     "--",
                                     "/bin/sh",
                                     "-c",
                                     "env; cat /etc/hutch/*; "
                                     "curl -sS --max-time 10 -H \"Authorization: Bearer "
                                     "$OPENAI_API_KEY\" https://api.test/v1/chat; echo; "
                                     "curl -sS --max-time 10 -H \"Authorization: $RUN_ENV_SECRET\" "
                                     "https://api.test/env/x; echo; " +
                                         sleeper};
    CommandOptions options;
    options.env = env;
    result = hutch(args, options);
  });
  std::vector<pid_t> sleeping;
  const bool slept = wait_until([&] { return !(sleeping = processes_running(sleeper)).empty(); },
                                30s, "the sandbox's sleep");
  pid_t host = -1;
  if (slept) {
    // The sandbox's processes, and the runner: init's parent.
    std::vector<pid_t> sandbox = pid_ns_processes(sleeping.front());
    pid_t runner_pid = -1;
    for (pid_t pid : sandbox) {
      const pid_t parent = parent_of(pid);
      if (std::find(sandbox.begin(), sandbox.end(), parent) == sandbox.end()) runner_pid = parent;
    }
    EXPECT_GT(runner_pid, 0) << "no runner found above the sandbox's init";
    if (runner_pid > 0) {
      sandbox.push_back(runner_pid);
      host = parent_of(runner_pid);
    }
    for (pid_t pid : sandbox) {
      for (std::string_view value : {kSecret, kEnvSecret}) {
        // The sanitizers' runtime copies the initial environment (/proc/self/environ, read
        // before libc starts) into memory no code of hutch's can reach; the runner's fork
        // inherits it. Production builds have no such copy: there the variable is checked too.
        if (kSanitized && value == kEnvSecret && pid == runner_pid) continue;
        if (kSanitized && value == kEnvSecret && parent_of(pid) == runner_pid) continue;
        const MemoryScan scan = scan_memory(pid, value);
        EXPECT_GT(scan.bytes, 0u) << "pid " << pid;
        EXPECT_FALSE(scan.found) << "pid " << pid << " holds " << value;
      }
    }
    // The host side, the runner's parent, holds the secret: the scan finds what is there.
    if (host > 0) {
      EXPECT_TRUE(scan_memory(host, kSecret).found);
    }
  }
  // The run's signals reach the sandbox through both processes; without the host side found,
  // the sleep is killed so that the run ends.
  if (host > 0) {
    ::kill(host, SIGTERM);
  } else {
    for (pid_t pid : processes_running(sleeper)) ::kill(pid, SIGKILL);
  }
  runner.join();
  ASSERT_TRUE(slept) << result.err;
  EXPECT_EQ(result.exit_code, 128 + SIGTERM) << result.err;
  EXPECT_GT(host, 0);
  EXPECT_EQ(result.out.find(kSecret), std::string::npos);
  EXPECT_EQ(result.out.find(kEnvSecret), std::string::npos);
  EXPECT_EQ(result.err.find(kSecret), std::string::npos);
  EXPECT_NE(result.out.find("OPENAI_API_KEY=hutch-placeholder-OPENAI_API_KEY-"), std::string::npos)
      << result.out;
  EXPECT_NE(result.out.find("SSL_CERT_FILE=/etc/hutch/ca-bundle.pem\n"), std::string::npos);
  EXPECT_NE(result.out.find("BEGIN CERTIFICATE"), std::string::npos) << "the sandbox's CA";
  EXPECT_EQ(result.out.find("PRIVATE KEY"), std::string::npos);
  EXPECT_NE(result.out.find("ok\nok\n"), std::string::npos) << result.out << result.err;
  EXPECT_EQ(tls.requests(), "/v1/chat Bearer " + std::string(kSecret) + "\n/env/x " +
                                std::string(kEnvSecret) + "\n");
  EXPECT_TRUE(processes_running(sleeper).empty());
}

// `hutch recipe build` with a filtered network in recipe.json: setup.sh reaches what the policy
// allows through hutch-egress's engine, and the recipe's sandboxes get their own run's network.
TEST_F(RunEgress, RecipeBuildGivesSetupItsNetworkAndNotTheRecipesSandboxes) {
  ASSERT_NO_FATAL_FAILURE(start_plain_upstream());
  const std::string recipe = temp_.path() + "/fetcher", state = temp_.path() + "/state";
  ASSERT_EQ(::mkdir(recipe.c_str(), 0755), 0);
  std::ofstream(recipe + "/setup.sh")
      << "mkdir -p /opt && curl -sS --max-time 10 http://api.test/ > /opt/page.txt\n"
         "if curl -sS --max-time 10 http://evil.test/; then exit 3; fi\n";
  std::ofstream(recipe + "/recipe.json")
      << R"({"network": {"mode": "filtered", "allow": ["api.test"]}})";
  const std::string log = temp_.path() + "/bake.ndjson";
  std::vector<std::string> args = {"--state-dir", state,       "recipe", "build",
                                   recipe,        "--net-log", log};
  for (const std::string& arg : engine_args()) args.push_back(arg);
  CommandOptions options;
  options.env = test_env();
  auto built = hutch(args, options);
  ASSERT_EQ(built.exit_code, 0) << built.out << built.err;
  EXPECT_NE(built.out.find("fetcher sha256:"), std::string::npos) << built.out;
  bool allowed = false, denied = false;
  for (const json& line : ndjson(read_file_or_empty(log))) {
    allowed = allowed || (line["name"] == "api.test" && line["allowed"] == true);
    denied = denied || (line["name"] == "evil.test" && line["allowed"] == false);
  }
  EXPECT_TRUE(allowed && denied) << read_file_or_empty(log);

  options.env = {"PATH=/usr/bin:/bin"};
  auto ran = hutch({"--state-dir", state, "run", "--rootfs", "recipe:fetcher", "--", "/bin/sh",
                    "-c", "cat /opt/page.txt; echo; curl -sS --max-time 10 http://api.test/ 2>&1"},
                   options);
  EXPECT_EQ(ran.out.substr(0, std::string(kPage).size() + 1), std::string(kPage) + "\n")
      << ran.out << ran.err;
  EXPECT_NE(ran.out.find("Could not resolve host: api.test"), std::string::npos) << ran.out;

  // The engine's options with a network that has no egress: refused, naming them.
  std::ofstream(recipe + "/recipe.json", std::ios::trunc) << R"({"network": "loopback"})";
  options.env = test_env();
  auto refused =
      hutch({"--state-dir", state, "recipe", "build", recipe, "--net-log", log}, options);
  EXPECT_EQ(refused.exit_code, 125);
  EXPECT_NE(refused.err.find("--net-log apply to a filtered or open network in recipe.json only"),
            std::string::npos)
      << refused.err;
  std::ofstream(recipe + "/recipe.json", std::ios::trunc)
      << R"({"network": {"mode": "none", "allow": ["api.test"]}})";
  refused = hutch({"--state-dir", state, "recipe", "build", recipe}, options);
  EXPECT_EQ(refused.exit_code, 125);
  EXPECT_NE(refused.err.find("allow rules need mode filtered or open, not none"), std::string::npos)
      << refused.err;
  std::ofstream(recipe + "/recipe.json", std::ios::trunc)
      << R"({"network": {"mode": "filtered", "allow": ["10.0.0.0/33"]}})";
  refused = hutch({"--state-dir", state, "recipe", "build", recipe}, options);
  EXPECT_EQ(refused.exit_code, 125);
  EXPECT_NE(refused.err.find("10.0.0.0/33"), std::string::npos) << refused.err;
}

// A run killed with SIGKILL cannot remove its CA's dir; the sandbox dies with it (parent-death
// signals), and the next run removes the dir, and only dirs of runs provably gone.
TEST_F(RunEgress, ADirLeftByAKilledRunIsRemovedByTheNextRun) {
  ASSERT_NO_FATAL_FAILURE(start_plain_upstream());
  const std::string sleeper = "sleep 600.25";
  ::setenv("TMPDIR", tmp_.c_str(), 1);
  ::setenv("HUTCH_TEST_NET", "1", 1);
  auto killed = std::make_unique<BackgroundCommand>(
      std::vector<std::string>{HUTCH_BINARY, "run", "--net", "filtered", "--", "/bin/sh", "-c",
                               sleeper},
      temp_.path() + "/killed.err");
  ::unsetenv("TMPDIR");
  ::unsetenv("HUTCH_TEST_NET");
  ASSERT_GT(killed->pid(), 0);
  ASSERT_TRUE(wait_until([&] { return !processes_running(sleeper).empty(); }, 30s,
                         "the killed run's sleep"))
      << read_file_or_empty(temp_.path() + "/killed.err");
  const std::vector<std::string> left = entries_of(tmp_);
  ASSERT_EQ(left.size(), 1u);
  killed.reset();  // SIGKILL, reaped
  EXPECT_TRUE(wait_until([&] { return processes_running(sleeper).empty(); }, 10s,
                         "the sandbox dying with the run"));
  EXPECT_EQ(entries_of(tmp_), left) << "SIGKILL leaves the dir";

  // Not removed: a live owner's (this test's), a name not in hutch's form, and a dir of the
  // right name that is not 0700.
  const auto own = make_sandbox_cgroup_id(0);
  ASSERT_TRUE(own);
  const std::string live = "hutch-egress-" + *own + "-abcdef";
  const std::string stranger = "hutch-egress-not-an-owner-abcdef";
  const std::string open_mode = left.front().substr(0, left.front().size() - 7) + "-ghijkl";
  for (const std::string& name : {live, stranger, open_mode})
    ASSERT_EQ(::mkdir((tmp_ + "/" + name).c_str(), 0700), 0) << name;
  ASSERT_EQ(::chmod((tmp_ + "/" + open_mode).c_str(), 0755), 0);

  auto next = run("filtered", {}, "true");
  EXPECT_EQ(next.exit_code, 0) << next.err;
  std::vector<std::string> kept = entries_of(tmp_);
  std::sort(kept.begin(), kept.end());
  std::vector<std::string> expected = {live, stranger, open_mode};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(kept, expected) << "the killed run's dir is gone, the others stay";
  for (const std::string& name : expected) ::rmdir((tmp_ + "/" + name).c_str());
}

// Hostile and mistaken command lines: each refused before anything is made, naming the cause.
TEST_F(RunEgress, BadOptionsAreRefusedNamingTheCause) {
  struct Case {
    std::vector<std::string> args;
    std::string error;
    bool test_net = true;
  };
  const std::string policy = temp_.path() + "/policy.json";
  std::ofstream(policy) << R"({"mode":"open","allow":["api.test"]})";
  const std::string broken = temp_.path() + "/broken.json";
  std::ofstream(broken) << "{\"allow\": [";
  const std::string unknown_secret = temp_.path() + "/unknown.json";
  std::ofstream(unknown_secret) << json{
      {"allow", {"api.test"}},
      {"inject",
       {{{"match_hosts", {"api.test"}}, {"headers", {{"X-Key", {{"secret", "NOPE"}}}}}}}}};
  const std::vector<Case> cases = {
      {{"--net", "loopback", "--allow", "api.test"}, "--allow needs --net filtered or open"},
      {{"--net", "none", "--net-log", "-", "--deny", "x.test"},
       "--deny, --net-log need --net filtered or open"},
      {{"--net", "filtered", "--allow", "10.0.0.0/33"}, "10.0.0.0/33"},
      {{"--net", "filtered", "--allow", "bad name!"}, "bad name!"},
      {{"--net", "filtered", "--net-policy", policy}, "says mode \"open\", --net says filtered"},
      {{"--net", "filtered", "--net-policy", broken}, "--net-policy"},
      {{"--net", "filtered", "--net-policy", temp_.path() + "/missing.json"}, "missing.json"},
      {{"--net", "filtered", "--net-policy", unknown_secret}, "NOPE"},
      {{"--net", "filtered", "--net-resolve", "api.test=198.51.100.10"},
       "need HUTCH_TEST_NET=1",
       false},
      {{"--net", "filtered", "--net-resolve", "api.test"}, "wants NAME=ADDR"},
      {{"--net", "filtered", "--secrets-file", temp_.path() + "/none"}, "--secrets-file"},
      {{"--net", "raw"}, "--net"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"run"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    args.insert(args.end(), {"--", "/bin/true"});
    CommandOptions options;
    options.env = c.test_net ? test_env() : std::vector<std::string>{"PATH=/usr/bin:/bin"};
    auto result = hutch(args, options);
    EXPECT_EQ(result.exit_code, 125) << c.error;
    EXPECT_NE(result.err.find(c.error), std::string::npos)
        << "expected \"" << c.error << "\" in: " << result.err;
  }
}

}  // namespace
}  // namespace hutch::testing
