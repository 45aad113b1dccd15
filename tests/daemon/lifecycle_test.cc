// Sandbox lifecycle through hutchd: create/list/get/delete, pause/resume, idle TTL, limits on
// requests (body size, concurrency, auth), error shapes.
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include "tests/common/command.h"
#include "tests/common/wait.h"
#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

TEST_F(DaemonTest, CreateListGetDeleteIsIdempotent) {
  std::string a = create({{"labels", {{"team", "red"}}}, {"env", {{"FOO", "1"}}}});
  std::string b = create({{"labels", {{"team", "blue"}}}});
  ASSERT_FALSE(a.empty());
  ASSERT_FALSE(b.empty());
  auto got = daemon_->get("/v1/sandboxes/" + a);
  ASSERT_EQ(got.status, 200) << got.raw;
  EXPECT_EQ(got.body["id"], a);
  EXPECT_EQ(got.body["state"], "running");
  EXPECT_EQ(got.body["labels"]["team"], "red");
  EXPECT_EQ(got.body["env"]["FOO"], "1");
  EXPECT_EQ(got.body["idle_ttl_seconds"], 600);
  EXPECT_EQ(got.body["default_timeout_seconds"], 600);
  EXPECT_EQ(got.body["network"],
            json({{"mode", "loopback"}, {"allow", json::array()}, {"deny", json::array()}}));
  EXPECT_TRUE(got.body["created_at"].get<std::string>().ends_with("Z"));

  auto all = daemon_->get("/v1/sandboxes");
  ASSERT_EQ(all.status, 200);
  EXPECT_EQ(all.body["sandboxes"].size(), 2u);
  auto red = daemon_->get("/v1/sandboxes?label=team=red");
  ASSERT_EQ(red.body["sandboxes"].size(), 1u);
  EXPECT_EQ(red.body["sandboxes"][0]["id"], a);

  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + a).status, 204);
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + a).status, 204);
  EXPECT_EQ(daemon_->del("/v1/sandboxes/sb-doesnotexist").status, 204);
  auto gone = daemon_->get("/v1/sandboxes/" + a);
  EXPECT_EQ(gone.status, 404);
  EXPECT_EQ(error_code(gone), "sandbox_not_found");
  EXPECT_EQ(daemon_->get("/v1/sandboxes").body["sandboxes"].size(), 1u);
  // DELETE answers once the sandbox's processes are dead; its dir goes with the background
  // teardown, within moments.
  const std::string dir = daemon_->state_dir() + "/sandboxes/" + a;
  EXPECT_TRUE(wait_until([&] { return !std::filesystem::exists(dir); }, std::chrono::seconds(5),
                         "the sandbox's state dir to go", std::chrono::milliseconds(10)));
}

// docs/api.md: DELETE "answers once every process of the sandbox is dead", as the kernel sees it
// when the answer comes: init is gone (or only its zombie is left for the supervisor to reap), and
// so is a background process of the sandbox.
// /proc/<pid>/stat's state field, '-' when there is no such process.
char process_state(pid_t pid) {
  // read(2) of a process reaped meanwhile fails with ESRCH, which an istreambuf_iterator throws.
  const std::string stat = read_file_or_empty("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  return paren == std::string::npos || paren + 2 >= stat.size() ? '-' : stat[paren + 2];
}

TEST_F(DaemonTest, DeleteKillsInitAndEveryProcessOfTheSandbox) {
  const std::string id = create();
  const pid_t init = daemon_->get("/v1/sandboxes/" + id).body["init_pid"].get<pid_t>();
  const std::string marker = "sleep 86317";
  auto started = daemon_->post("/v1/sandboxes/" + id + "/exec",
                               {{"argv", {"sleep", "86317"}}, {"background", true}});
  ASSERT_EQ(started.status, 201) << started.body.dump();
  ASSERT_TRUE(wait_until([&] { return count_host_processes_with(marker) == 1; },
                         std::chrono::seconds(5), "the background sleep to run"));
  ASSERT_EQ(daemon_->del("/v1/sandboxes/" + id).status, 204);
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + id).status, 404);
  EXPECT_TRUE(wait_until(
      [&] {
        const char state = process_state(init);
        return (state == '-' || state == 'Z' || state == 'X') &&
               count_host_processes_with(marker) == 0;
      },
      std::chrono::seconds(2), "init and the background sleep to die after DELETE"));
}

// How many idle sandboxes hutchd's one warm pool holds, once it holds `want` (or 10 s passed).
int wait_for_idle(const Hutchd& daemon, int want) {
  auto idle = [&] {
    auto pools = daemon.get("/v1/pools");
    return pools.body["pools"].size() == 1 ? pools.body["pools"][0]["idle"].get<int>() : -1;
  };
  int seen = -1;
  EXPECT_TRUE(wait_until([&] { return (seen = idle()) >= want; }, std::chrono::seconds(10),
                         "the warm pool to fill", std::chrono::milliseconds(10)));
  return seen;
}

TEST(WarmPoolTest, CreatesComeFromThePoolWhichRefillsAndNeverOutlivesHutchd) {
  HUTCH_REQUIRE_ROOT();
  TempDir temp;
  Hutchd daemon(temp.path(), {"--warm-pool", "host=2"});
  ASSERT_TRUE(daemon.start()) << daemon.log();
  ASSERT_EQ(wait_for_idle(daemon, 2), 2) << daemon.log();

  auto created =
      daemon.post("/v1/sandboxes", {{"labels", {{"from", "pool"}}}, {"env", {{"X", "1"}}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  EXPECT_EQ(created.body["labels"]["from"], "pool");
  auto logs = daemon.client()->Get("/v1/sandboxes/" + id + "/logs");
  ASSERT_TRUE(logs);
  EXPECT_NE(logs->body.find("\"warm_pool\":true"), std::string::npos) << logs->body;
  auto ran =
      daemon.post("/v1/sandboxes/" + id + "/exec", {{"command", "echo $X; cat /etc/hostname"}});
  EXPECT_EQ(ran.body["stdout"], "1\nhutch\n") << ran.raw;
  // A create the pool cannot serve (its own limits) is built fresh, and works as well.
  auto limited = daemon.post("/v1/sandboxes", {{"limits", {{"pids", 64}}}});
  ASSERT_EQ(limited.status, 201) << limited.raw;
  auto limited_logs =
      daemon.client()->Get("/v1/sandboxes/" + limited.body["id"].get<std::string>() + "/logs");
  EXPECT_NE(limited_logs->body.find("\"warm_pool\":false"), std::string::npos);

  EXPECT_EQ(wait_for_idle(daemon, 2), 2) << "the pool refills";

  // Without --destroy-on-exit hutchd leaves user sandboxes running, but never idle pool ones.
  std::vector<std::string> pool_dirs;
  for (const auto& entry : std::filesystem::directory_iterator(daemon.state_dir() + "/sandboxes")) {
    const std::string name = entry.path().filename();
    if (name != id && name != limited.body["id"]) pool_dirs.push_back(entry.path());
  }
  EXPECT_EQ(pool_dirs.size(), 2u);
  EXPECT_EQ(daemon.stop(SIGTERM), 0);
  for (const std::string& dir : pool_dirs) EXPECT_FALSE(std::filesystem::exists(dir)) << dir;

  // The next hutchd adopts the two user sandboxes; destroy them for a clean host.
  Hutchd again(temp.path());
  ASSERT_TRUE(again.start()) << again.log();
  EXPECT_EQ(again.get("/v1/health").body["recovered"]["adopted"], 2);
  EXPECT_EQ(again.del("/v1/sandboxes/" + id + "?wait=true").status, 204);
  EXPECT_EQ(
      again.del("/v1/sandboxes/" + limited.body["id"].get<std::string>() + "?wait=true").status,
      204);
}

// A taken pool sandbox has two records (pooled.json from the pool, sandbox.json from the create):
// after a kill -9 the next hutchd adopts it by sandbox.json. The idle ones, which no hutchd would
// adopt, end as soon as hutchd is gone: their supervisors destroy them and remove their dirs.
TEST(WarmPoolTest, AfterKill9TheTakenSandboxIsAdoptedAndIdleOnesEndByThemselves) {
  HUTCH_REQUIRE_ROOT();
  TempDir temp;
  Hutchd daemon(temp.path(), {"--warm-pool", "host=2"});
  ASSERT_TRUE(daemon.start()) << daemon.log();
  ASSERT_EQ(wait_for_idle(daemon, 2), 2) << daemon.log();
  auto created = daemon.post("/v1/sandboxes", {{"labels", {{"kept", "yes"}}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  const std::string dir = daemon.state_dir() + "/sandboxes/" + id;
  EXPECT_TRUE(std::filesystem::exists(dir + "/pooled.json"));
  EXPECT_TRUE(std::filesystem::exists(dir + "/sandbox.json"));
  ASSERT_EQ(wait_for_idle(daemon, 2), 2);
  EXPECT_EQ(daemon.stop(SIGKILL), 128 + SIGKILL);
  auto dirs = [&] {
    size_t count = 0;
    for ([[maybe_unused]] const auto& entry :
         std::filesystem::directory_iterator(daemon.state_dir() + "/sandboxes"))
      ++count;
    return count;
  };
  EXPECT_TRUE(wait_until([&] { return dirs() <= 1; }, std::chrono::seconds(10),
                         "the idle pool sandboxes' dirs to go", std::chrono::milliseconds(50)));
  EXPECT_EQ(dirs(), 1u) << "the idle pool sandboxes' dirs are gone";

  Hutchd again(temp.path());
  ASSERT_TRUE(again.start()) << again.log();
  auto health = again.get("/v1/health");
  EXPECT_EQ(health.body["recovered"]["adopted"], 1) << health.raw;
  EXPECT_EQ(health.body["recovered"]["removed"], 0) << health.raw;
  auto adopted = again.get("/v1/sandboxes/" + id);
  ASSERT_EQ(adopted.status, 200) << adopted.raw;
  EXPECT_EQ(adopted.body["labels"]["kept"], "yes");
  EXPECT_EQ(again.post("/v1/sandboxes/" + id + "/exec", {{"argv", {"true"}}}).body["exit_code"], 0);
  EXPECT_EQ(again.del("/v1/sandboxes/" + id + "?wait=true").status, 204);
  size_t left = 0;
  for ([[maybe_unused]] const auto& entry :
       std::filesystem::directory_iterator(again.state_dir() + "/sandboxes"))
    ++left;
  EXPECT_EQ(left, 0u);
}

// hutchd's zygote makes network namespaces ahead of the sandboxes: each one still gets its own
// (never the host's, never another sandbox's), with a working loopback; "none" has none.
TEST_F(DaemonTest, EverySandboxHasItsOwnNetworkNamespace) {
  const std::string probe =
      "readlink /proc/self/ns/net; python3 -c \"import socket; s = socket.socket(); "
      "s.bind(('127.0.0.1', 8080)); s.listen(); socket.create_connection(('127.0.0.1', 8080)); "
      "print('loopback ok')\"";
  std::set<std::string> namespaces;
  for (int i = 0; i < 6; ++i) {
    auto ran = exec(create(), {{"command", probe}});
    ASSERT_EQ(ran["exit_code"], 0) << ran.dump();
    std::string out = ran["stdout"];
    EXPECT_TRUE(out.ends_with("\nloopback ok\n")) << out;
    namespaces.insert(out.substr(0, out.find('\n')));
  }
  EXPECT_EQ(namespaces.size(), 6u);
  char host[64] = {};
  ASSERT_GT(readlink("/proc/self/ns/net", host, sizeof host - 1), 0);
  EXPECT_FALSE(namespaces.contains(host));
  auto none = exec(create({{"network", "none"}}),
                   {{"command",
                     "python3 -c \"import socket; "
                     "socket.create_connection(('127.0.0.1', 1))\" 2>&1 | tail -n 1"}});
  EXPECT_NE(none["stdout"].get<std::string>().find("unreachable"), std::string::npos)
      << none.dump();
}

TEST_F(DaemonTest, CreateRejectsBadConfig) {
  for (const json& body : {json{{"network", "host"}}, json{{"env", {{"1BAD", "x"}}}},
                           json{{"rootfs", "relative/dir"}}, json{{"rootfs", "/no/such/dir"}},
                           json{{"limits", {{"pids", 0}}}}, json{{"idle_ttl_seconds", -1}},
                           json{{"hostname", "bad host"}}, json{{"unknown_field", 1}}}) {
    auto reply = daemon_->post("/v1/sandboxes", body);
    EXPECT_EQ(reply.status, 400) << body.dump() << " " << reply.raw;
    EXPECT_EQ(error_code(reply), "bad_request") << body.dump();
  }
  EXPECT_EQ(daemon_->get("/v1/sandboxes").body["sandboxes"].size(), 0u);
}

TEST_F(DaemonTest, HealthMetricsAndLogs) {
  std::string id = create();
  exec(id, {{"argv", {"true"}}});
  auto health = daemon_->get("/v1/health");
  ASSERT_EQ(health.status, 200);
  EXPECT_EQ(health.body["status"], "ok");
  EXPECT_EQ(health.body["sandboxes"], 1);
  EXPECT_EQ(health.body["recovered"]["adopted"], 0);
  daemon_->get("/v1/sandboxes/sb-missing");
  auto metrics = daemon_->client()->Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("hutch_sandboxes{state=\"running\"} 1"), std::string::npos)
      << metrics->body;
  EXPECT_NE(metrics->body.find("hutch_create_seconds_count 1"), std::string::npos);
  EXPECT_NE(metrics->body.find("hutch_exec_seconds_count 1"), std::string::npos);
  EXPECT_NE(metrics->body.find("hutch_errors_total{code=\"sandbox_not_found\"} 1"),
            std::string::npos);
  auto logs = daemon_->client()->Get("/v1/sandboxes/" + id + "/logs");
  ASSERT_TRUE(logs);
  EXPECT_EQ(logs->status, 200);
  EXPECT_NE(logs->body.find("\"event\":\"created\""), std::string::npos) << logs->body;
  EXPECT_NE(logs->body.find("\"event\":\"exec_ended\""), std::string::npos) << logs->body;
}

TEST_F(DaemonTest, ErrorsHaveStableCodes) {
  std::string id = create();
  auto malformed = daemon_->post_raw("/v1/sandboxes/" + id + "/exec", "{\"argv\": [");
  EXPECT_EQ(malformed.status, 400);
  EXPECT_EQ(error_code(malformed), "invalid_json");
  auto nan = daemon_->post_raw("/v1/sandboxes/" + id + "/exec",
                               "{\"argv\":[\"true\"],\"timeout_seconds\":NaN}");
  EXPECT_EQ(nan.status, 400);
  EXPECT_EQ(error_code(nan), "invalid_json");
  auto not_object = daemon_->post_raw("/v1/sandboxes/" + id + "/exec", "[1,2]");
  EXPECT_EQ(not_object.status, 400);
  auto huge = daemon_->post_raw("/v1/sandboxes/" + id + "/exec",
                                "{\"command\":\"" + std::string(9 << 20, 'a') + "\"}");
  EXPECT_EQ(huge.status, 413);
  EXPECT_EQ(error_code(huge), "payload_too_large");
  // `curl -d` labels JSON as a form; cpp-httplib caps forms at 8 KiB: the error says what to do.
  auto form = daemon_->client()->Post("/v1/sandboxes/" + id + "/exec",
                                      "{\"command\":\"" + std::string(20000, 'a') + "\"}",
                                      "application/x-www-form-urlencoded");
  ASSERT_TRUE(form);
  EXPECT_EQ(form->status, 413);
  EXPECT_NE(form->body.find("Content-Type: application/json"), std::string::npos) << form->body;
  auto no_route = daemon_->get("/v2/nothing");
  EXPECT_EQ(no_route.status, 404);
  EXPECT_EQ(error_code(no_route), "not_found");
  auto wrong_method = daemon_->get("/v1/sandboxes/" + id + "/exec");
  EXPECT_EQ(wrong_method.status, 405);
  EXPECT_EQ(error_code(wrong_method), "method_not_allowed");
  auto no_sandbox = daemon_->post("/v1/sandboxes/sb-nope/exec", {{"argv", {"true"}}});
  EXPECT_EQ(no_sandbox.status, 404);
  EXPECT_EQ(error_code(no_sandbox), "sandbox_not_found");
  // The daemon still serves after all of that.
  EXPECT_EQ(exec(id, {{"argv", {"true"}}})["exit_code"], 0);
}

TEST_F(DaemonTest, PausedSandboxRefusesExecUntilResumed) {
  std::string id = create();
  auto paused = daemon_->post("/v1/sandboxes/" + id + "/pause", json::object());
  ASSERT_EQ(paused.status, 200) << paused.raw;
  EXPECT_EQ(paused.body["state"], "paused");
  auto refused = daemon_->post("/v1/sandboxes/" + id + "/exec", {{"argv", {"true"}}});
  EXPECT_EQ(refused.status, 409);
  EXPECT_EQ(error_code(refused), "sandbox_paused");
  auto resumed = daemon_->post("/v1/sandboxes/" + id + "/resume", json::object());
  ASSERT_EQ(resumed.status, 200) << resumed.raw;
  EXPECT_EQ(resumed.body["state"], "running");
  EXPECT_EQ(exec(id, {{"command", "echo back"}})["stdout"], "back\n");
}

TEST_F(DaemonTest, IdleTtlReapsIdleSandboxesAndSparesBusyOnes) {
  // A 2 s TTL against a request every 300 ms: a GET slowed down by a loaded host still comes in
  // time for `busy`.
  std::string idle = create({{"idle_ttl_seconds", 2}});
  std::string busy = create({{"idle_ttl_seconds", 2}});
  std::string working = create({{"idle_ttl_seconds", 2}});
  // `working` runs a background process past the end of the test.
  auto started = daemon_->post("/v1/sandboxes/" + working + "/exec",
                               {{"command", "sleep 30"}, {"background", true}});
  ASSERT_EQ(started.status, 201) << started.raw;
  const std::string idle_dir = daemon_->state_dir() + "/sandboxes/" + idle;
  auto touch_busy = [&] { EXPECT_EQ(daemon_->get("/v1/sandboxes/" + busy).status, 200); };
  // Watching `idle` through its state dir: a GET of it would be a request that keeps it alive.
  EXPECT_TRUE(wait_until(
      [&] {
        touch_busy();
        return !std::filesystem::exists(idle_dir);
      },
      std::chrono::seconds(10), "the idle sandbox to be reaped", std::chrono::milliseconds(300)));
  // One more TTL: by then the others would be reaped too, did their requests or process not count.
  for (int i = 0; i < 8; ++i) {
    touch_busy();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + idle).status, 404);
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + busy).status, 200);
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + working).status, 200);
  EXPECT_FALSE(std::filesystem::exists(daemon_->state_dir() + "/sandboxes/" + idle));
}

TEST_F(DaemonTest, MaxLifetimeDestroysEvenBusySandboxes) {
  std::string id = create({{"max_lifetime_seconds", 1}});
  auto started = daemon_->post("/v1/sandboxes/" + id + "/exec",
                               {{"command", "sleep 30"}, {"background", true}});
  ASSERT_EQ(started.status, 201);
  EXPECT_TRUE(wait_until([&] { return daemon_->get("/v1/sandboxes/" + id).status == 404; },
                         std::chrono::seconds(10), "the reaper to end the sandbox at 1 s",
                         std::chrono::milliseconds(100)));
}

TEST(DaemonLimits, SaturatedDaemonAnswers429) {
  HUTCH_REQUIRE_ROOT();
  TempDir temp;
  Hutchd daemon(temp.path(), {"--max-concurrent", "2", "--destroy-on-exit"});
  ASSERT_TRUE(daemon.start()) << daemon.log();
  auto created = daemon.post("/v1/sandboxes", json::object());
  ASSERT_EQ(created.status, 201);
  std::string path = "/v1/sandboxes/" + created.body["id"].get<std::string>() + "/exec";
  const pid_t init = created.body["init_pid"].get<pid_t>();
  std::atomic<int> ok{0};
  std::vector<std::thread> slow;
  for (int i = 0; i < 2; ++i) {
    slow.emplace_back([&] {
      if (daemon.post(path, {{"argv", {"sleep", "3"}}}).status == 200) ++ok;
    });
  }
  // Both requests are in flight once both of their sleeps run in the sandbox.
  EXPECT_TRUE(wait_until([&] { return count_pid_ns_processes_with(init, "sleep 3") == 2; },
                         std::chrono::seconds(3), "both slow execs to run",
                         std::chrono::milliseconds(20)));
  auto refused = daemon.post(path, {{"argv", {"true"}}});
  EXPECT_EQ(refused.status, 429);
  EXPECT_EQ(error_code(refused), "too_many_requests");
  EXPECT_EQ(daemon.get("/v1/health").status, 200);  // health is never refused
  for (auto& t : slow) t.join();
  EXPECT_EQ(ok.load(), 2);
  EXPECT_EQ(daemon.post(path, {{"argv", {"true"}}}).status, 200);
  EXPECT_EQ(daemon.stop(SIGTERM), 0);
  if (HasFailure()) std::fprintf(stderr, "--- hutchd log ---\n%s\n", daemon.log().c_str());
}

TEST(DaemonLimits, TcpNeedsTheBearerToken) {
  HUTCH_REQUIRE_ROOT();
  TempDir temp;
  std::string token = "0123456789abcdef0123456789abcdef";
  std::ofstream(temp.path() + "/token") << token << "\n";
  int port = 20000 + (getpid() % 20000);
  Hutchd daemon(temp.path(), {"--listen", "127.0.0.1:" + std::to_string(port), "--token-file",
                              temp.path() + "/token"});
  ASSERT_TRUE(daemon.start()) << daemon.log();
  httplib::Client tcp("127.0.0.1", port);
  auto anonymous = tcp.Get("/v1/health");
  ASSERT_TRUE(anonymous);
  EXPECT_EQ(anonymous->status, 401);
  EXPECT_NE(anonymous->body.find("unauthorized"), std::string::npos);
  tcp.set_bearer_token_auth(token.substr(0, 31) + "0");
  EXPECT_EQ(tcp.Get("/v1/health")->status, 401);
  tcp.set_bearer_token_auth(token);
  EXPECT_EQ(tcp.Get("/v1/health")->status, 200);
  EXPECT_EQ(daemon.stop(SIGTERM), 0);
}

TEST(DaemonStartup, RefusesBadFlags) {
  HUTCH_REQUIRE_ROOT();
  TempDir temp;
  Hutchd long_state(temp.path(), {"--state-dir", temp.path() + "/" + std::string(80, 's')});
  EXPECT_FALSE(long_state.start());
  EXPECT_NE(long_state.log().find("107-byte"), std::string::npos) << long_state.log();
  Hutchd tcp_without_token(temp.path(), {"--listen", "127.0.0.1:1"});
  EXPECT_FALSE(tcp_without_token.start());
  EXPECT_NE(tcp_without_token.log().find("--token-file"), std::string::npos);
}

}  // namespace
}  // namespace hutch::testing
