// The clients an agent reaches for, through a filtered sandbox: curl, Python's urllib, pip, git,
// apt and Node's fetch, none of them told of a proxy (the egress path catches every connection and
// DNS query; Node's fetch ignores HTTP_PROXY by design). U (tests/common/upstream_netns.h) serves a
// tree this test builds on the host: a page, a bare git repository for git's dumb HTTP protocol, a
// flat apt repository with one package (dpkg-deb, dpkg-scanpackages) and a PEP 503 simple index
// with one wheel. hutchd resolves git.test, deb.test, pypi.test and api.test to U (--net-resolve).
// Each client uses the host rootfs's own binary inside the sandbox; what it installs lands in the
// sandbox's upper layer, never on the host.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/command.h"
#include "tests/common/hutchd.h"
#include "tests/common/must_work.h"
#include "tests/common/python_index.h"
#include "tests/common/temp_dir.h"
#include "tests/common/upstream_netns.h"
#include "tests/common/wait.h"

namespace hutch::testing {
namespace {

using namespace std::chrono_literals;

constexpr const char* kPage = "hello from upstream";

// Builds U's tree under $PUB (HOME is set: git wants one), but for the wheel (publish_wheel_sh).
const char* kBuildTree = R"sh(
set -eu
mkdir -p "$PUB/deb" "$WORK/src" "$WORK/pkg/DEBIAN" "$WORK/pkg/usr/share/hello-hutch"
printf 'hello from upstream' > "$PUB/index.html"

git -C "$WORK/src" init -q -b main
printf 'hello from git\n' > "$WORK/src/README"
git -C "$WORK/src" add README
git -C "$WORK/src" -c user.name=hutch -c user.email=hutch@test commit -q -m first
git clone -q --bare "$WORK/src" "$PUB/repo.git"
git -C "$PUB/repo.git" update-server-info

printf 'Package: hello-hutch\nVersion: 1.0\nArchitecture: all\nMaintainer: hutch <hutch@test>\nDescription: a test package\n' \
  > "$WORK/pkg/DEBIAN/control"
printf 'hello from apt\n' > "$WORK/pkg/usr/share/hello-hutch/greeting"
dpkg-deb --root-owner-group -Zgzip --build "$WORK/pkg" "$PUB/deb/hello-hutch_1.0_all.deb" >/dev/null
(cd "$PUB/deb" && dpkg-scanpackages --multiversion . 2>/dev/null > Packages)
)sh";

// apt-get and dpkg on the host rootfs, whose /var is empty: their state directories first, then
// only this test's source list (the host's lists are hidden), as root without apt's _apt user.
const char* kAptInstall = R"sh(
mkdir -p /var/lib/dpkg/info /var/lib/dpkg/updates /var/lib/dpkg/triggers /var/lib/apt/lists/partial \
  /var/cache/apt/archives/partial /var/log/apt
touch /var/lib/dpkg/status /var/lib/dpkg/available
echo 'deb [trusted=yes] http://deb.test/deb ./' > /tmp/hutch.list
apt="apt-get -q -o Dir::Etc::SourceList=/tmp/hutch.list -o Dir::Etc::SourceParts=/nonexistent
  -o APT::Sandbox::User=root -o Acquire::Retries=0"
$apt update && $apt install -y --no-install-recommends hello-hutch >/dev/null &&
  cat /usr/share/hello-hutch/greeting
)sh";

class NetworkClientsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    for (const char* tool :
         {"/usr/bin/curl", "/usr/bin/git", "/usr/bin/apt-get", "/usr/bin/dpkg-deb",
          "/usr/bin/dpkg-scanpackages", "/usr/bin/python3", "/usr/bin/unshare"})
      HUTCH_REQUIRE(::access(tool, X_OK) == 0, std::string("needs ") + tool);
    HUTCH_REQUIRE(run_command({"/usr/bin/python3", "-m", "pip", "--version"}).exit_code == 0,
                  "needs Debian's python3-pip");
    ::setenv("HUTCH_TEST_NET", "1", 1);
    const std::string pub = temp_.path() + "/pub";
    CommandOptions options;
    options.env = {"PATH=/usr/bin:/bin", "HOME=" + temp_.path(), "PUB=" + pub,
                   "WORK=" + temp_.path() + "/work"};
    auto built = run_command(
        {"/bin/sh", "-c",
         kBuildTree + publish_wheel_sh("hutchdemo", "GREETING = 'hello from a wheel'\n")},
        options);
    ASSERT_EQ(built.exit_code, 0) << built.out << built.err;
    ASSERT_NO_FATAL_FAILURE(start_upstream_netns(pub, upstream_));
    std::vector<std::string> args = {"--destroy-on-exit", "--net-upstream-netns",
                                     upstream_->netns()};
    for (const char* name : {"api.test", "git.test", "deb.test", "pypi.test"}) {
      args.push_back("--net-resolve");
      args.push_back(std::string(name) + "=198.51.100.10");
    }
    daemon_ = std::make_unique<Hutchd>(temp_.path(), args);
    ASSERT_TRUE(daemon_->start()) << daemon_->log();
  }
  void TearDown() override {
    if (daemon_ && daemon_->pid() > 0) daemon_->stop(SIGTERM);
  }

  std::string create(const json& allow) {
    auto reply =
        daemon_->post("/v1/sandboxes", {{"network", {{"mode", "filtered"}, {"allow", allow}}}});
    EXPECT_EQ(reply.status, 201) << reply.raw;
    return reply.body.value("id", "");
  }

  // `command` under sh -c in the sandbox with no proxy variables: exit code, stdout and stderr.
  std::pair<int, std::string> run(const std::string& id, const std::string& command) {
    auto reply =
        daemon_->post("/v1/sandboxes/" + id + "/exec",
                      {{"command", "{ " + command + "\n} 2>&1"}, {"timeout_seconds", 120}});
    EXPECT_EQ(reply.status, 200) << reply.raw;
    return {reply.body.value("exit_code", -1), reply.body.value("stdout", "")};
  }

  // The allowed connection decisions for `name` that carried a response.
  int allowed_with_bytes(const std::string& id, const std::string& name) {
    int count = 0;
    std::istringstream lines(daemon_->get("/v1/sandboxes/" + id + "/network/log").raw);
    for (std::string line; std::getline(lines, line);) {
      const json decision = json::parse(line, nullptr, false);
      if (decision.is_object() && decision.value("name", "") == name &&
          decision.value("protocol", "") != "dns" && decision.value("allowed", false) &&
          decision.value("bytes_down", 0) > 0)
        ++count;
    }
    return count;
  }

  TempDir temp_;
  std::unique_ptr<UpstreamNetns> upstream_;
  std::unique_ptr<Hutchd> daemon_;
};

TEST_F(NetworkClientsTest, CurlUrllibPipGitAndAptReachAllowedHostsWithoutProxySettings) {
  const std::string id = create({"api.test", "git.test", "deb.test", "pypi.test"});
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(run(id, "curl -sS --max-time 20 http://api.test/"),
            std::make_pair(0, std::string(kPage)));
  EXPECT_EQ(run(id,
                "python3 -c \"import urllib.request; "
                "print(urllib.request.urlopen('http://api.test/', timeout=20).read().decode())\""),
            std::make_pair(0, std::string(kPage) + "\n"));

  auto [git_exit, git_out] =
      run(id, "git clone -q http://git.test/repo.git /tmp/repo && cat /tmp/repo/README");
  EXPECT_EQ(git_exit, 0) << git_out;
  EXPECT_NE(git_out.find("hello from git"), std::string::npos) << git_out;

  auto [pip_exit, pip_out] =
      run(id,
          "python3 -m pip install -q --no-cache-dir --disable-pip-version-check "
          "--break-system-packages "
          "--trusted-host pypi.test --index-url http://pypi.test/simple/ --target /tmp/site "
          "hutchdemo && "
          "PYTHONPATH=/tmp/site python3 -c 'import hutchdemo; print(hutchdemo.GREETING)'");
  EXPECT_EQ(pip_exit, 0) << pip_out;
  EXPECT_NE(pip_out.find("hello from a wheel"), std::string::npos) << pip_out;

  auto [apt_exit, apt_out] = run(id, kAptInstall);
  EXPECT_EQ(apt_exit, 0) << apt_out;
  EXPECT_NE(apt_out.find("hello from apt"), std::string::npos) << apt_out;
  EXPECT_FALSE(std::filesystem::exists("/usr/share/hello-hutch")) << "installed on the host";

  for (const char* name : {"api.test", "git.test", "pypi.test", "deb.test"})
    EXPECT_GE(allowed_with_bytes(id, name), 1) << name << " in the network log";
}

TEST_F(NetworkClientsTest, ClientsOfADeniedHostFailFastAndNothingReachesIt) {
  const std::string id = create({"api.test"});
  ASSERT_FALSE(id.empty());
  const auto started = std::chrono::steady_clock::now();
  auto [git_exit, git_out] = run(id, "git clone -q http://git.test/repo.git /tmp/repo");
  EXPECT_NE(git_exit, 0);
  EXPECT_NE(git_out.find("Could not resolve host: git.test"), std::string::npos) << git_out;
  auto [pip_exit, pip_out] =
      run(id,
          "python3 -m pip download -q --no-cache-dir --disable-pip-version-check --retries 0 "
          "--trusted-host pypi.test --index-url http://pypi.test/simple/ -d /tmp/dl hutchdemo");
  EXPECT_NE(pip_exit, 0) << pip_out;
  EXPECT_LT(std::chrono::steady_clock::now() - started, 30s * time_scale()) << "a denial is fast";
  EXPECT_EQ(upstream_->log().find("repo.git"), std::string::npos) << upstream_->log();
  EXPECT_EQ(upstream_->log().find("hutchdemo"), std::string::npos) << upstream_->log();
}

TEST_F(NetworkClientsTest, NodeFetchIgnoresProxySettingsAndIsStillFiltered) {
  HUTCH_REQUIRE(::access("/usr/bin/node", X_OK) == 0, "needs /usr/bin/node");
  const std::string id = create({"api.test"});
  ASSERT_FALSE(id.empty());
  const std::string fetch =
      "node -e \"fetch(process.argv[1]).then(r => r.text()).then(t => console.log(t), "
      "e => { console.log('failed: ' + (e.cause ? e.cause.code : e.message)); process.exit(1); "
      "})\" ";
  EXPECT_EQ(run(id, fetch + "http://api.test/"), std::make_pair(0, std::string(kPage) + "\n"));
  auto [denied_exit, denied_out] = run(id, fetch + "http://git.test/");
  EXPECT_EQ(denied_exit, 1) << denied_out;
  EXPECT_NE(denied_out.find("failed: ENOTFOUND"), std::string::npos) << denied_out;
}

}  // namespace
}  // namespace hutch::testing
