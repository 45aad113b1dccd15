// Credential injection through hutchd's API, as root: the secrets routes and flags, the policy's
// `inject` key and its checks, and a filtered sandbox whose curl (the host's) reaches an HTTPS
// upstream in a network namespace this test makes (python3's http.server with ssl, a certificate
// from a test CA hutchd is told to trust by --net-upstream-ca) knowing only the placeholder
// (its variable, and the trust bundle hutchd writes into it), while the upstream gets the secret.
// The secret's value must appear in no reply, no log and no file of hutchd's state dir.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "tests/common/command.h"
#include "tests/common/dir_search.h"
#include "tests/common/hutchd.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"
#include "tests/common/wait.h"
#include "tests/daemon/daemon_fixture.h"
#include "tests/daemon/tls_upstream.h"
#include "tests/daemon/upstream_certificate.h"

namespace hutch::testing {
namespace {

using namespace std::chrono_literals;

constexpr std::string_view kSecret = "sk-live-7d2e91aa0c";
constexpr std::string_view kEnvSecret = "env-secret-93b1f0";

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

json inject_network(const std::string& secret = "OPENAI_API_KEY") {
  return {{"mode", "filtered"},
          {"allow", {"api.test"}},
          {"inject",
           {{{"match_hosts", {"api.test"}},
             {"path_prefix", "/v1/"},
             {"headers", {{"Authorization", {{"secret", secret}, {"prefix", "Bearer "}}}}}}}}};
}

class InjectDaemon : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    for (const char* tool : {"/usr/bin/curl", "/usr/bin/python3", "/usr/bin/unshare"})
      HUTCH_REQUIRE(::access(tool, X_OK) == 0, std::string("needs ") + tool);
    HUTCH_REQUIRE(::access("/etc/ssl/certs/ca-certificates.crt", R_OK) == 0,
                  "needs the host's CA bundle (ca-certificates)");
    ::setenv("HUTCH_TEST_NET", "1", 1);
    // The upstream's certificate for api.test, from a CA of the test's own.
    UpstreamCertificate certificate;
    ASSERT_NO_FATAL_FAILURE(write_upstream_certificate(temp_.path(), "upstream", "test upstream",
                                                       "api.test", certificate));
    upstream_ca_ = certificate.ca;
    upstream_ = std::make_unique<TlsUpstream>(temp_.path(), certificate.cert, certificate.key);
    ASSERT_GT(upstream_->pid(), 0);
    ASSERT_TRUE(wait_until([&] { return upstream_->serving(); }, 10s, "U's https server"))
        << slurp(temp_.path() + "/upstream.err");
    secrets_file_ = temp_.path() + "/secrets";
    std::ofstream(secrets_file_) << "# test\nOPENAI_API_KEY=" << kSecret << "\n";
    ASSERT_EQ(::chmod(secrets_file_.c_str(), 0600), 0);
    ::setenv("HUTCH_TEST_ENV_SECRET", std::string(kEnvSecret).c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("HUTCH_TEST_ENV_SECRET");
    if (daemon_) daemon_->delete_sandboxes_and_stop();
    ::unsetenv("HUTCH_TEST_NET");
  }

  void start() {
    daemon_ = std::make_unique<Hutchd>(
        temp_.path(),
        std::vector<std::string>{"--destroy-on-exit", "--net-upstream-netns", upstream_->netns(),
                                 "--net-resolve", "api.test=198.51.100.10", "--net-upstream-ca",
                                 upstream_ca_, "--secrets-file", secrets_file_, "--secret-from-env",
                                 "HUTCH_TEST_ENV_SECRET"});
    ASSERT_TRUE(daemon_->start()) << daemon_->log();
  }
  // As recovery_test.cc does: hutchd killed (its sandboxes stay), and the next one re-adopts them.
  void restart_after_kill() {
    daemon_->stop(SIGKILL);
    ::setenv("HUTCH_TEST_ENV_SECRET", std::string(kEnvSecret).c_str(), 1);  // it unset it
    start();
  }
  std::string placeholder_of(const std::string& id) {
    auto network = daemon_->get("/v1/sandboxes/" + id + "/network");
    EXPECT_EQ(network.status, 200) << network.raw;
    return network.body["placeholders"].value("OPENAI_API_KEY", "");
  }
  std::string ca_of(const std::string& id) {
    auto network = daemon_->get("/v1/sandboxes/" + id + "/network");
    EXPECT_EQ(network.status, 200) << network.raw;
    return network.body.value("ca_pem", "");
  }

  // A sandbox made with inject_network(): its id, its CA (PEM, never empty) and the placeholder
  // of OPENAI_API_KEY.
  struct Injected {
    std::string id, ca, placeholder;
  };
  void create_injected(Injected& sandbox) {
    auto created = daemon_->post("/v1/sandboxes", {{"network", inject_network()}});
    ASSERT_EQ(created.status, 201) << created.raw;
    sandbox.id = created.body["id"];
    sandbox.ca = ca_of(sandbox.id);
    sandbox.placeholder = placeholder_of(sandbox.id);
    ASSERT_FALSE(sandbox.ca.empty());
  }

  std::string run(const std::string& id, const std::string& command) {
    auto reply = daemon_->post("/v1/sandboxes/" + id + "/exec",
                               {{"command", command + " 2>&1"}, {"timeout_seconds", 60}});
    EXPECT_EQ(reply.status, 200) << reply.raw;
    return reply.body.value("stdout", "");
  }

  TempDir temp_;
  std::string upstream_ca_, secrets_file_;
  std::unique_ptr<TlsUpstream> upstream_;
  std::unique_ptr<Hutchd> daemon_;
};

TEST_F(InjectDaemon, SandboxCurlGetsTheSecretInjectedKnowingOnlyThePlaceholder) {
  start();
  auto created = daemon_->post("/v1/sandboxes", {{"network", inject_network()}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  auto network = daemon_->get("/v1/sandboxes/" + id + "/network");
  ASSERT_EQ(network.status, 200) << network.raw;
  ASSERT_TRUE(network.body["ca_pem"].is_string()) << network.raw;
  const std::string placeholder = network.body["placeholders"].value("OPENAI_API_KEY", "");
  ASSERT_TRUE(placeholder.starts_with("hutch-placeholder-OPENAI_API_KEY-")) << network.raw;
  const json& rule = network.body["inject"][0];
  EXPECT_EQ(rule["headers"]["Authorization"]["secret"], "OPENAI_API_KEY") << network.raw;
  EXPECT_EQ(network.raw.find(kSecret), std::string::npos);

  // Every exec has the trust variables (the bundle hutchd wrote into the sandbox: the host's
  // roots and the sandbox's CA) and the secret's variable holding the placeholder.
  const std::string env = run(id, "env");
  EXPECT_NE(env.find("CURL_CA_BUNDLE=/etc/hutch/ca-bundle.pem\n"), std::string::npos) << env;
  EXPECT_NE(env.find("SSL_CERT_FILE=/etc/hutch/ca-bundle.pem\n"), std::string::npos) << env;
  EXPECT_NE(env.find("NODE_EXTRA_CA_CERTS=/etc/hutch/sandbox-ca.pem\n"), std::string::npos) << env;
  EXPECT_NE(env.find("OPENAI_API_KEY=" + placeholder + "\n"), std::string::npos) << env;
  EXPECT_EQ(run(id, "cat /etc/hutch/sandbox-ca.pem"), network.body["ca_pem"].get<std::string>());
  const std::string bundle = run(id, "cat /etc/hutch/ca-bundle.pem");
  EXPECT_NE(bundle.find(network.body["ca_pem"].get<std::string>()), std::string::npos);
  EXPECT_GT(bundle.size(), network.body["ca_pem"].get<std::string>().size() + 1000)
      << "the host's roots are in the bundle too";
  const std::string out = run(id,
                              "curl -sS --max-time 10 -H \"Authorization: Bearer $OPENAI_API_KEY\" "
                              "https://api.test/v1/chat https://api.test/v1/models");
  EXPECT_EQ(out, "okok");
  EXPECT_EQ(upstream_->requests(), "/v1/chat Bearer " + std::string(kSecret) +
                                       "\n/v1/models Bearer " + std::string(kSecret) + "\n");

  // Outside the rule's path the placeholder is refused, and logged; the secret is nowhere.
  const std::string refused =
      run(id, "curl -sS --max-time 10 -H \"X-Key: $OPENAI_API_KEY\" https://api.test/admin");
  EXPECT_NE(refused.find("\"rule\":\"inject\""), std::string::npos) << refused;
  ASSERT_TRUE(wait_until(
      [&] {
        return daemon_->get("/v1/sandboxes/" + id + "/network/log")
                   .raw.find("\"rule\":\"inject\"") != std::string::npos;
      },
      5s, "the refusal in the network log"));
  const auto log = daemon_->get("/v1/sandboxes/" + id + "/network/log");
  EXPECT_NE(log.raw.find("injected Authorization"), std::string::npos) << log.raw;
  EXPECT_EQ(log.raw.find(kSecret), std::string::npos);
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + id).raw.find(kSecret), std::string::npos);
  EXPECT_EQ(daemon_->get("/metrics").raw.find(kSecret), std::string::npos);
  EXPECT_EQ(daemon_->log().find(kSecret), std::string::npos);
  EXPECT_FALSE(tree_holds(daemon_->state_dir(), kSecret))
      << "sandbox.json, the names file, the records";
  // Another sandbox has a CA and placeholders of its own.
  auto second = daemon_->post("/v1/sandboxes", {{"network", inject_network()}});
  ASSERT_EQ(second.status, 201) << second.raw;
  auto second_network =
      daemon_->get("/v1/sandboxes/" + second.body["id"].get<std::string>() + "/network");
  EXPECT_NE(second_network.body["ca_pem"], network.body["ca_pem"]);
  EXPECT_NE(second_network.body["placeholders"]["OPENAI_API_KEY"], placeholder);
  // The sandbox's own environment and files hold no secret.
  EXPECT_EQ(run(id, "env; cat /etc/hutch/*").find(kSecret), std::string::npos);
}

// Tools that read only the distro's bundle path (curl without CURL_CA_BUNDLE, OpenSSL's default
// file through Python's default context) trust the sandbox's CA with no variable at all: hutchd
// binds the bundle read-only over /etc/ssl/certs/ca-certificates.crt. A snapshot and a sandbox
// made from it hold no CA; a fork has its own.
TEST_F(InjectDaemon, TheDistroBundleTrustsTheSandboxCaWithNoVariable) {
  start();
  Injected sandbox;
  ASSERT_NO_FATAL_FAILURE(create_injected(sandbox));
  const auto& [id, ca, placeholder] = sandbox;
  EXPECT_EQ(run(id, "env -i /usr/bin/curl -sS --max-time 10 -H 'Authorization: Bearer " +
                        placeholder + "' https://api.test/v1/chat"),
            "ok");
  EXPECT_EQ(run(id,
                "env -i /usr/bin/python3 -c 'import urllib.request; print(urllib.request."
                "urlopen(\"https://api.test/v1/models\", timeout=10).read().decode())'"),
            "ok\n");
  // The rule sets the header whether or not the request sent the placeholder.
  EXPECT_EQ(upstream_->requests(), "/v1/chat Bearer " + std::string(kSecret) +
                                       "\n/v1/models Bearer " + std::string(kSecret) + "\n");
  EXPECT_NE(run(id, "cat /etc/ssl/certs/ca-certificates.crt").find(ca), std::string::npos);
  const std::string mounts = run(id, "cat /proc/self/mountinfo");
  EXPECT_NE(mounts.find(" /etc/ssl/certs/ca-certificates.crt ro,"), std::string::npos) << mounts;
  EXPECT_NE(mounts.find(" /etc/hutch ro,"), std::string::npos) << mounts;
  // Its root can neither write the files nor take the mounts away (seccomp refuses umount2; were
  // it allowed, the rootfs's own file would show, and the host's file stays host root's, 0644).
  EXPECT_EQ(run(id,
                "echo x >> /etc/ssl/certs/ca-certificates.crt 2>/dev/null && echo wrote || "
                "echo refused"),
            "refused\n");
  EXPECT_NE(run(id,
                "umount /etc/hutch; umount -l /etc/ssl/certs/ca-certificates.crt; "
                "cat /etc/hutch/sandbox-ca.pem")
                .find(ca),
            std::string::npos);
  // hutchd keeps the key in its state, for it alone.
  const std::string kept = daemon_->state_dir() + "/sandboxes/" + id + "/ca";
  struct stat st {};
  ASSERT_EQ(::stat((kept + "/key.pem").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_EQ(st.st_uid, ::geteuid());
  ASSERT_EQ(::stat(kept.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0700u);
  EXPECT_EQ(run(id, "grep -rl 'PRIVATE KEY' /etc /root /tmp 2>/dev/null"), "");

  auto snapshot = daemon_->post("/v1/sandboxes/" + id + "/snapshot", {{"name", "trusting"}});
  ASSERT_EQ(snapshot.status, 201) << snapshot.raw;
  auto plain = daemon_->post("/v1/sandboxes", {{"recipe", "trusting"}, {"network", "loopback"}});
  ASSERT_EQ(plain.status, 201) << plain.raw;
  const std::string plain_id = plain.body["id"];
  EXPECT_EQ(run(plain_id, "ls -A /etc/hutch"), "") << "the empty mount point only";
  EXPECT_EQ(run(plain_id, "cat /etc/ssl/certs/ca-certificates.crt"),
            read_file_or_empty("/etc/ssl/certs/ca-certificates.crt"))
      << "the image's own bundle";
  EXPECT_EQ(run(plain_id, "grep -rl 'hutch sandbox CA' /etc /root 2>/dev/null"), "");

  auto forked = daemon_->post("/v1/sandboxes/" + id + "/fork", {{"count", 1}});
  ASSERT_EQ(forked.status, 201) << forked.raw;
  const std::string fork_id = forked.body["sandboxes"][0]["id"];
  const std::string fork_ca = ca_of(fork_id);
  EXPECT_NE(fork_ca, ca);
  const std::string fork_bundle = run(fork_id, "cat /etc/ssl/certs/ca-certificates.crt");
  EXPECT_NE(fork_bundle.find(fork_ca), std::string::npos);
  EXPECT_EQ(fork_bundle.find(ca), std::string::npos);
}

// A restarted hutchd loads each sandbox's CA and placeholder key back from its state: the
// sandbox keeps trusting the CA it was given and its processes' placeholders still work.
TEST_F(InjectDaemon, ARestartedHutchdKeepsTheSandboxsCaAndPlaceholders) {
  start();
  Injected sandbox;
  ASSERT_NO_FATAL_FAILURE(create_injected(sandbox));
  const auto& [id, ca, placeholder] = sandbox;
  ASSERT_FALSE(placeholder.empty());

  restart_after_kill();
  EXPECT_EQ(daemon_->get("/v1/health").body["recovered"]["adopted"], 1);
  EXPECT_EQ(ca_of(id), ca);
  EXPECT_EQ(placeholder_of(id), placeholder);
  EXPECT_EQ(run(id, "cat /etc/hutch/sandbox-ca.pem"), ca);
  EXPECT_NE(run(id, "env").find("OPENAI_API_KEY=" + placeholder + "\n"), std::string::npos);
  EXPECT_EQ(run(id, "env -i /usr/bin/curl -sS --max-time 10 -H 'Authorization: Bearer " +
                        placeholder + "' https://api.test/v1/chat"),
            "ok");
  EXPECT_EQ(upstream_->requests(), "/v1/chat Bearer " + std::string(kSecret) + "\n");

  const std::string dir = daemon_->state_dir() + "/sandboxes/" + id;
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + id + "?wait=true").status, 204);
  EXPECT_FALSE(std::filesystem::exists(dir)) << "the kept CA goes with the sandbox";
}

TEST_F(InjectDaemon, SecretsRoutesAreWriteOnlyAndRefuseHostileInput) {
  start();
  auto listed = daemon_->get("/v1/secrets");
  ASSERT_EQ(listed.status, 200) << listed.raw;
  ASSERT_EQ(listed.body["secrets"].size(), 2u) << listed.raw;
  EXPECT_EQ(listed.body["secrets"][0]["name"], "HUTCH_TEST_ENV_SECRET");
  EXPECT_EQ(listed.body["secrets"][0]["source"], "environment");
  EXPECT_EQ(listed.body["secrets"][1]["source"], "file");
  EXPECT_EQ(listed.raw.find(kSecret), std::string::npos);
  EXPECT_EQ(listed.raw.find(kEnvSecret), std::string::npos);
  // --secret-from-env: the variable is gone from hutchd's environment, even /proc's copy.
  EXPECT_EQ(slurp("/proc/" + std::to_string(daemon_->pid()) + "/environ").find(kEnvSecret),
            std::string::npos);

  EXPECT_EQ(daemon_->put("/v1/secrets/GITHUB_TOKEN", "ghp-value-1").status, 204);
  EXPECT_EQ(daemon_->put("/v1/secrets/GITHUB_TOKEN", "ghp-value-2").status, 204) << "replaced";
  listed = daemon_->get("/v1/secrets");
  EXPECT_EQ(listed.body["secrets"].size(), 3u) << listed.raw;
  EXPECT_EQ(listed.body["secrets"][0]["source"], "api");
  EXPECT_EQ(listed.raw.find("ghp-value"), std::string::npos);
  EXPECT_EQ(daemon_->del("/v1/secrets/GITHUB_TOKEN").status, 204);
  auto gone = daemon_->del("/v1/secrets/GITHUB_TOKEN");
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(error_code(gone), "secret_not_found") << gone.raw;
  EXPECT_EQ(daemon_->get("/v1/secrets/OPENAI_API_KEY").status, 404) << "no route reads a value";

  for (const std::string& name :
       std::vector<std::string>{"1BAD", "a-b", "a.b", "%00X", std::string(200, 'A')}) {
    auto bad = daemon_->put("/v1/secrets/" + name, "v");
    EXPECT_EQ(bad.status, 400) << name << ": " << bad.raw;
  }
  auto huge = daemon_->put("/v1/secrets/HUGE", std::string(64 * 1024, 'x'));
  EXPECT_EQ(huge.status, 413) << huge.raw;
  EXPECT_EQ(daemon_->put("/v1/secrets/HUGE", std::string(16385, 'x')).status, 413);
  // Far beyond: the connection is dropped; nothing is stored either way.
  EXPECT_NE(daemon_->put("/v1/secrets/HUGE", std::string(8 << 20, 'x')).status, 204);
  EXPECT_EQ(daemon_->put("/v1/secrets/MAX", std::string(16384, 'x')).status, 204);
  EXPECT_EQ(daemon_->get("/v1/secrets").raw.find("HUGE"), std::string::npos);
  for (const std::string& value :
       std::vector<std::string>{"", "line\nbreak-value-5c1", std::string("nul\0value-5c1", 13)}) {
    auto bad = daemon_->put("/v1/secrets/CONTROL", value);
    EXPECT_EQ(bad.status, 400) << bad.raw;
    EXPECT_EQ(bad.raw.find("value-5c1"), std::string::npos) << "errors never echo a value";
  }
  EXPECT_EQ(daemon_->log().find("ghp-value"), std::string::npos);
  EXPECT_EQ(daemon_->log().find(kEnvSecret), std::string::npos);
}

TEST_F(InjectDaemon, InjectRulesNeedKnownSecretsAndAllowedHosts) {
  start();
  auto unknown = daemon_->post("/v1/sandboxes", {{"network", inject_network("NO_SUCH_SECRET")}});
  EXPECT_EQ(unknown.status, 400) << unknown.raw;
  EXPECT_EQ(error_code(unknown), "unknown_secret");
  EXPECT_NE(unknown.raw.find("NO_SUCH_SECRET"), std::string::npos) << unknown.raw;

  json not_allowed = inject_network();
  not_allowed["inject"][0]["match_hosts"] = {"evil.test"};
  auto refused = daemon_->post("/v1/sandboxes", {{"network", not_allowed}});
  EXPECT_EQ(refused.status, 400) << refused.raw;
  EXPECT_NE(refused.raw.find("not allowed by the policy"), std::string::npos) << refused.raw;

  json loopback = inject_network();
  loopback["mode"] = "loopback";
  loopback.erase("allow");
  EXPECT_EQ(daemon_->post("/v1/sandboxes", {{"network", loopback}}).status, 400);
  for (const json& hostile :
       {json{{"match_hosts", {"api.test"}}, {"headers", {{"Host", "OPENAI_API_KEY"}}}},
        json{{"match_hosts", {"api.test"}}, {"headers", {{"X", "bad-name"}}}},
        json{{"match_hosts", {"api.test"}}, {"headers", json::object()}},
        json{{"match_hosts", {"api.test"}}, {"headerz", {{"X", "OPENAI_API_KEY"}}}},
        json{{"match_hosts", {"10.0.0.0/8"}}, {"headers", {{"X", "OPENAI_API_KEY"}}}}}) {
    json network = inject_network();
    network["inject"] = {hostile};
    auto bad = daemon_->post("/v1/sandboxes", {{"network", network}});
    EXPECT_EQ(bad.status, 400) << hostile.dump() << ": " << bad.raw;
  }

  auto created = daemon_->post("/v1/sandboxes", {{"network", inject_network()}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  auto put =
      daemon_->put("/v1/sandboxes/" + id + "/network", inject_network("ALSO_MISSING").dump());
  EXPECT_EQ(put.status, 400) << put.raw;
  EXPECT_EQ(error_code(put), "unknown_secret");
  auto network = daemon_->get("/v1/sandboxes/" + id + "/network");
  EXPECT_EQ(network.body["inject"][0]["headers"]["Authorization"]["secret"], "OPENAI_API_KEY")
      << "the refused PUT changed nothing";
}

}  // namespace
}  // namespace hutch::testing
