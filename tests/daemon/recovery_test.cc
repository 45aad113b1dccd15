// hutchd restarts: a clean SIGTERM and a kill -9 both leave sandboxes running; the next hutchd
// re-adopts them, and sandboxes that died meanwhile are removed and reported. Nothing is left
// behind after a delete: no supervisor, no cgroup.
#include <gtest/gtest.h>
#include <signal.h>

#include <fstream>
#include <thread>

#include "tests/common/command.h"
#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

// The cgroup directories of a process, as host paths (/sys/fs/cgroup/<hierarchy>/<path>).
std::vector<std::string> cgroup_dirs(int pid) {
  std::vector<std::string> dirs;
  std::istringstream lines(read_file_or_empty("/proc/" + std::to_string(pid) + "/cgroup"));
  std::string line;
  while (std::getline(lines, line)) {
    // hierarchy-id:controllers:path
    size_t first = line.find(':'), second = line.find(':', first + 1);
    std::string controllers = line.substr(first + 1, second - first - 1);
    std::string path = line.substr(second + 1);
    if (path.find("hutch") == std::string::npos) continue;
    std::string mount =
        controllers.empty() ? "/sys/fs/cgroup/unified" : "/sys/fs/cgroup/" + controllers;
    if (controllers.empty() && !std::filesystem::exists(mount)) mount = "/sys/fs/cgroup";
    if (controllers.starts_with("name=")) mount = "/sys/fs/cgroup/" + controllers.substr(5);
    dirs.push_back(mount + path);
  }
  return dirs;
}

// Alive and not a zombie: after hutchd restarts, a supervisor's parent is the host's init,
// which may reap it late.
bool process_running(int pid) {
  std::string stat = read_file_or_empty("/proc/" + std::to_string(pid) + "/stat");
  size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() && stat[paren + 2] != 'Z';
}

class RecoveryTest : public ::testing::Test {
 protected:
  void SetUp() override { HUTCH_REQUIRE_ROOT(); }
  void TearDown() override {
    if (daemon_ && daemon_->pid() > 0) {
      auto list = daemon_->get("/v1/sandboxes");
      for (const json& sandbox : list.body["sandboxes"])
        daemon_->del("/v1/sandboxes/" + sandbox["id"].get<std::string>());
      daemon_->stop(SIGTERM);
    }
    if (HasFailure() && daemon_)
      std::fprintf(stderr, "--- hutchd log ---\n%s\n", daemon_->log().c_str());
  }
  void restart_after(int sig) {
    daemon_->stop(sig);
    daemon_ = std::make_unique<Hutchd>(temp_.path());
    ASSERT_TRUE(daemon_->start()) << daemon_->log();
  }
  json record(const std::string& id) {
    std::ifstream in(daemon_->state_dir() + "/sandboxes/" + id + "/sandbox.json");
    return json::parse(in, nullptr, false);
  }
  void check_restart(int sig) {
    daemon_ = std::make_unique<Hutchd>(temp_.path());
    ASSERT_TRUE(daemon_->start()) << daemon_->log();
    auto created = daemon_->post("/v1/sandboxes", {{"labels", {{"keep", "yes"}}}});
    ASSERT_EQ(created.status, 201);
    std::string id = created.body["id"];
    int init_pid = created.body["init_pid"];
    auto wrote = daemon_->post("/v1/sandboxes/" + id + "/exec",
                               {{"command", "echo kept > /root/state.txt"}});
    ASSERT_EQ(wrote.status, 200);
    json saved = record(id);
    ASSERT_TRUE(saved.is_object());
    int supervisor = saved["ref"]["supervisor_pid"];
    std::vector<std::string> cgroups = cgroup_dirs(init_pid);
    EXPECT_FALSE(cgroups.empty()) << read_file_or_empty("/proc/" + std::to_string(init_pid) +
                                                        "/cgroup");
    for (const std::string& dir : cgroups) EXPECT_TRUE(std::filesystem::exists(dir)) << dir;

    restart_after(sig);
    auto health = daemon_->get("/v1/health");
    EXPECT_EQ(health.body["recovered"]["adopted"], 1) << health.raw;
    EXPECT_EQ(health.body["recovered"]["removed"], 0);
    auto got = daemon_->get("/v1/sandboxes/" + id);
    ASSERT_EQ(got.status, 200) << got.raw;
    EXPECT_EQ(got.body["labels"]["keep"], "yes");
    auto read =
        daemon_->post("/v1/sandboxes/" + id + "/exec", {{"argv", {"cat", "/root/state.txt"}}});
    EXPECT_EQ(read.body["stdout"], "kept\n") << read.raw;
    auto file = daemon_->client()->Get("/v1/sandboxes/" + id + "/files?path=/root/state.txt");
    ASSERT_TRUE(file);
    EXPECT_EQ(file->body, "kept\n");

    // ?wait=true: answered once the teardown is complete, so the host can be checked at once.
    EXPECT_EQ(daemon_->del("/v1/sandboxes/" + id + "?wait=true").status, 204);
    EXPECT_FALSE(process_running(supervisor));
    EXPECT_FALSE(process_running(init_pid));
    for (const std::string& dir : cgroups) EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
    EXPECT_FALSE(std::filesystem::exists(daemon_->state_dir() + "/sandboxes/" + id));
  }

  TempDir temp_;
  std::unique_ptr<Hutchd> daemon_;
};

TEST_F(RecoveryTest, SigtermLeavesSandboxesForTheNextDaemon) { check_restart(SIGTERM); }

TEST_F(RecoveryTest, Kill9LeavesSandboxesForTheNextDaemon) { check_restart(SIGKILL); }

TEST_F(RecoveryTest, DeadSandboxesAreRemovedAndReported) {
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  auto created = daemon_->post("/v1/sandboxes", json::object());
  ASSERT_EQ(created.status, 201);
  std::string id = created.body["id"];
  int supervisor = record(id)["ref"]["supervisor_pid"];
  daemon_->stop(SIGKILL);
  // The sandbox ends while no daemon watches: its supervisor tears it down on SIGTERM.
  ::kill(supervisor, SIGTERM);
  for (int i = 0; i < 100 && process_running(supervisor); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  // A half-created sandbox (no complete record) is removed too.
  std::filesystem::create_directories(daemon_->state_dir() + "/sandboxes/sb-000000000000");
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  auto health = daemon_->get("/v1/health");
  EXPECT_EQ(health.body["recovered"]["adopted"], 0);
  EXPECT_EQ(health.body["recovered"]["removed"], 2) << health.raw;
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + id).status, 404);
  EXPECT_FALSE(std::filesystem::exists(daemon_->state_dir() + "/sandboxes/" + id));
  EXPECT_NE(daemon_->log().find("sandbox=" + id), std::string::npos);
}

// hutchd's sandboxes do not sweep crashed runs' cgroups at each create (the cost grows with the
// number of live sandboxes): hutchd does, at its start and every minute. A supervisor killed
// with SIGKILL cannot remove its sandbox's cgroups; the next hutchd's sweep does. A cgroup parent
// of this test's own keeps other tests' `hutch run` sweeps away from them.
TEST_F(RecoveryTest, ACrashedSupervisorsCgroupsAreSweptByTheNextDaemon) {
  const std::string parent = "hutch-sweep-test-" + std::to_string(getpid());
  const std::vector<std::string> flags = {"--cgroup-parent", parent};
  daemon_ = std::make_unique<Hutchd>(temp_.path(), flags);
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  auto created = daemon_->post("/v1/sandboxes", json::object());
  ASSERT_EQ(created.status, 201);
  const json ref = record(created.body["id"])["ref"];
  const std::vector<std::string> dirs = cgroup_dirs(ref["init_pid"]);
  ASSERT_FALSE(dirs.empty());
  for (const std::string& dir : dirs) EXPECT_NE(dir.find("/" + parent + "/"), std::string::npos);
  daemon_->stop(SIGKILL);
  const int supervisor = ref["supervisor_pid"];
  ::kill(supervisor, SIGKILL);
  for (int i = 0; i < 100 && process_running(supervisor); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (const std::string& dir : dirs) EXPECT_TRUE(std::filesystem::exists(dir)) << dir;

  daemon_ = std::make_unique<Hutchd>(temp_.path(), flags);
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  for (const std::string& dir : dirs) {
    for (int i = 0; i < 100 && std::filesystem::exists(dir); ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  }
  EXPECT_NE(daemon_->log().find("cgroup sweep: removed 1 "), std::string::npos) << daemon_->log();
  // The parents are this test's to remove (nothing else is in them).
  for (const std::string& dir : dirs)
    ::rmdir(std::filesystem::path(dir).parent_path().c_str());
}

TEST_F(RecoveryTest, DestroyOnExitLeavesNothing) {
  daemon_ = std::make_unique<Hutchd>(temp_.path(), std::vector<std::string>{"--destroy-on-exit"});
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  auto created = daemon_->post("/v1/sandboxes", json::object());
  ASSERT_EQ(created.status, 201);
  int supervisor = record(created.body["id"])["ref"]["supervisor_pid"];
  EXPECT_EQ(daemon_->stop(SIGTERM), 0);
  EXPECT_FALSE(process_running(supervisor));
  EXPECT_TRUE(std::filesystem::is_empty(temp_.path() + "/state/sandboxes"));
}

}  // namespace
}  // namespace hutch::testing
