// hutchd restarts: a clean SIGTERM and a kill -9 both leave sandboxes running; the next hutchd
// re-adopts them, and sandboxes that died meanwhile are removed and reported. Nothing is left
// behind after a delete: no supervisor, no cgroup. With no hutchd at all, each sandbox still ends
// at its idle TTL and max lifetime: its supervisor destroys it.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <thread>

#include "tests/common/command.h"
#include "tests/common/wait.h"
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

// Loop devices (/dev/loopN) bound to a file under `prefix`.
std::vector<std::string> loop_devices_under(const std::string& prefix) {
  std::vector<std::string> devices;
  std::error_code ignored;
  for (const auto& entry : std::filesystem::directory_iterator("/sys/block", ignored)) {
    const std::string name = entry.path().filename();
    if (!name.starts_with("loop")) continue;
    const std::string backing = read_file_or_empty(entry.path() / "loop" / "backing_file");
    if (backing.starts_with(prefix)) devices.push_back("/dev/" + name);
  }
  return devices;
}

// What a live sandbox holds on the host.
struct Footprint {
  int supervisor = 0;
  int init = 0;
  ino_t mount_namespace = 0;
  std::vector<std::string> cgroups;
  std::vector<std::string> loop_devices;
  std::string dir;  // <state>/sandboxes/<id>
};

// Nothing of the sandbox remains (polled: the supervisor's parent may reap it late).
bool gone(const Footprint& sandbox) {
  if (process_running(sandbox.supervisor) || process_running(sandbox.init)) return false;
  for (const std::string& dir : sandbox.cgroups) {
    if (std::filesystem::exists(dir)) return false;
  }
  for (const std::string& device : sandbox.loop_devices) {
    const std::string name = std::filesystem::path(device).filename();
    if (!read_file_or_empty("/sys/block/" + name + "/loop/backing_file").empty()) return false;
  }
  return processes_in_mount_namespace(sandbox.mount_namespace) == 0 &&
         !std::filesystem::exists(sandbox.dir);
}

void expect_gone(const Footprint& sandbox) {
  EXPECT_FALSE(process_running(sandbox.supervisor)) << "supervisor " << sandbox.supervisor;
  EXPECT_FALSE(process_running(sandbox.init)) << "init " << sandbox.init;
  for (const std::string& dir : sandbox.cgroups) EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
  for (const std::string& device : sandbox.loop_devices) {
    const std::string name = std::filesystem::path(device).filename();
    EXPECT_EQ(read_file_or_empty("/sys/block/" + name + "/loop/backing_file"), "") << device;
  }
  EXPECT_EQ(processes_in_mount_namespace(sandbox.mount_namespace), 0);
  EXPECT_FALSE(std::filesystem::exists(sandbox.dir)) << sandbox.dir;
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
    // Sandboxes a failed deadline test left without a daemon: their supervisors tear them down
    // on SIGTERM.
    for (const Footprint& sandbox : footprints_) {
      if (!process_running(sandbox.supervisor)) continue;
      ::kill(sandbox.supervisor, SIGTERM);
      EXPECT_TRUE(wait_until([&] { return !process_running(sandbox.supervisor); },
                             std::chrono::seconds(10), "a left-over supervisor to end"));
    }
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

  // A sandbox on an erofs layer (a snapshot of another sandbox: a loop device) with `config`.
  std::string create_on_a_layer(json config) {
    auto base = daemon_->post("/v1/sandboxes", json::object());
    EXPECT_EQ(base.status, 201) << base.raw;
    const std::string base_id = base.body.value("id", "");
    auto snapshot = daemon_->post("/v1/sandboxes/" + base_id + "/snapshot", {{"name", "base"}});
    EXPECT_EQ(snapshot.status, 201) << snapshot.raw;
    EXPECT_EQ(daemon_->del("/v1/sandboxes/" + base_id + "?wait=true").status, 204);
    config["recipe"] = "base";
    auto created = daemon_->post("/v1/sandboxes", config);
    EXPECT_EQ(created.status, 201) << created.raw;
    return created.body.value("id", "");
  }
  Footprint footprint(const std::string& id) {
    Footprint sandbox;
    const json ref = record(id)["ref"];
    sandbox.supervisor = ref.value("supervisor_pid", 0);
    sandbox.init = ref.value("init_pid", 0);
    struct stat ns {};
    if (::stat(("/proc/" + std::to_string(sandbox.init) + "/ns/mnt").c_str(), &ns) == 0)
      sandbox.mount_namespace = ns.st_ino;
    sandbox.cgroups = cgroup_dirs(sandbox.init);
    sandbox.loop_devices = loop_devices_under(temp_.path());
    sandbox.dir = daemon_->state_dir() + "/sandboxes/" + id;
    EXPECT_TRUE(process_running(sandbox.init));
    EXPECT_NE(sandbox.mount_namespace, 0u);
    EXPECT_FALSE(sandbox.cgroups.empty());
    footprints_.push_back(sandbox);
    return sandbox;
  }
  // Kills hutchd for good: the sandboxes are on their own.
  void kill_daemon(int sig) {
    daemon_->stop(sig);
    daemon_.reset();
  }
  // Waits until nothing of `sandbox` remains and checks it: at most `timeout`, and not before
  // `not_before` (the sandbox's deadline as the test knows it).
  void expect_ends(const Footprint& sandbox, std::chrono::steady_clock::time_point not_before,
                   std::chrono::seconds timeout = std::chrono::seconds(20)) {
    EXPECT_TRUE(wait_until([&] { return gone(sandbox); }, timeout, "the sandbox to end",
                           std::chrono::milliseconds(50)));
    EXPECT_GE(std::chrono::steady_clock::now(), not_before) << "the sandbox ended too early";
    expect_gone(sandbox);
  }

  TempDir temp_;
  std::unique_ptr<Hutchd> daemon_;
  std::vector<Footprint> footprints_;
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
  EXPECT_TRUE(wait_until([&] { return !process_running(supervisor); }, std::chrono::seconds(5),
                         "the supervisor to end"));
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
  EXPECT_TRUE(wait_until([&] { return !process_running(supervisor); }, std::chrono::seconds(5),
                         "the supervisor to die"));
  for (const std::string& dir : dirs) EXPECT_TRUE(std::filesystem::exists(dir)) << dir;

  daemon_ = std::make_unique<Hutchd>(temp_.path(), flags);
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  for (const std::string& dir : dirs) {
    EXPECT_TRUE(wait_until([&] { return !std::filesystem::exists(dir); }, std::chrono::seconds(5),
                           "the sweep to remove " + dir));
  }
  // The dirs go before the sweep logs it.
  EXPECT_TRUE(wait_until(
      [&] { return daemon_->log().find("cgroup sweep: removed 1 ") != std::string::npos; },
      std::chrono::seconds(5), "the sweep's log line", std::chrono::milliseconds(50)))
      << daemon_->log();
  // The parents are this test's to remove (nothing else is in them).
  for (const std::string& dir : dirs) ::rmdir(std::filesystem::path(dir).parent_path().c_str());
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

// ---- Deadlines with no hutchd: the supervisor ends the sandbox by itself ----

TEST_F(RecoveryTest, MaxLifetimeEndsASandboxWhoseDaemonWasKilled) {
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  const auto created = std::chrono::steady_clock::now();
  const std::string id = create_on_a_layer({{"max_lifetime_seconds", 3}, {"idle_ttl_seconds", 0}});
  ASSERT_FALSE(id.empty());
  const Footprint sandbox = footprint(id);
  ASSERT_FALSE(sandbox.loop_devices.empty()) << "the recipe's erofs layer is on a loop device";
  kill_daemon(SIGKILL);
  EXPECT_TRUE(process_running(sandbox.init));
  expect_ends(sandbox, created + std::chrono::seconds(3));
}

TEST_F(RecoveryTest, IdleTtlEndsASandboxWhoseDaemonWasKilled) {
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  auto created = daemon_->post("/v1/sandboxes", {{"idle_ttl_seconds", 3}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const std::string id = created.body["id"];
  const Footprint sandbox = footprint(id);
  // Activity until the kill: the TTL counts from when hutchd went, not from the create.
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(daemon_->post("/v1/sandboxes/" + id + "/exec", {{"command", "sleep 0.5"}}).status,
              200);
  }
  const auto killed = std::chrono::steady_clock::now();
  kill_daemon(SIGKILL);
  expect_ends(sandbox, killed + std::chrono::seconds(3));
}

TEST_F(RecoveryTest, IdleTtlEndsASandboxWhoseDaemonStoppedCleanly) {
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  auto created = daemon_->post("/v1/sandboxes", {{"idle_ttl_seconds", 2}});
  ASSERT_EQ(created.status, 201) << created.raw;
  const Footprint sandbox = footprint(created.body["id"]);
  const auto stopped = std::chrono::steady_clock::now();
  kill_daemon(SIGTERM);
  EXPECT_TRUE(process_running(sandbox.init)) << "a clean stop leaves sandboxes running";
  expect_ends(sandbox, stopped + std::chrono::seconds(2));
}

// Nothing is left to adopt or reap it: the state dir is gone with the daemon.
TEST_F(RecoveryTest, ASandboxEndsWhenItsDaemonAndStateDirAreGone) {
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  const auto created = std::chrono::steady_clock::now();
  const std::string id = create_on_a_layer({{"max_lifetime_seconds", 3}});
  ASSERT_FALSE(id.empty());
  const Footprint sandbox = footprint(id);
  ASSERT_FALSE(sandbox.loop_devices.empty());
  const std::string state_dir = daemon_->state_dir();
  kill_daemon(SIGKILL);
  std::filesystem::remove_all(state_dir);
  expect_ends(sandbox, created + std::chrono::seconds(3));
}

// A paused sandbox is not immortal: its deadlines run as a running one's.
TEST_F(RecoveryTest, MaxLifetimeEndsAPausedSandboxWhoseDaemonWasKilled) {
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  const auto created = std::chrono::steady_clock::now();
  auto made = daemon_->post("/v1/sandboxes", {{"max_lifetime_seconds", 3}});
  ASSERT_EQ(made.status, 201) << made.raw;
  const std::string id = made.body["id"];
  const Footprint sandbox = footprint(id);
  ASSERT_EQ(daemon_->post("/v1/sandboxes/" + id + "/pause", json::object()).status, 200);
  kill_daemon(SIGKILL);
  expect_ends(sandbox, created + std::chrono::seconds(3));
}

// A restarted hutchd adopts the sandbox before its deadline, and while it runs its reaper is in
// charge: it destroys the sandbox at the deadline counted from the creation (once: the
// supervisor does not tear it down too).
TEST_F(RecoveryTest, AnAdoptedSandboxKeepsItsMaxLifetimeUnderTheReaper) {
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  const auto created = std::chrono::steady_clock::now();
  auto made = daemon_->post("/v1/sandboxes", {{"max_lifetime_seconds", 4}});
  ASSERT_EQ(made.status, 201) << made.raw;
  const std::string id = made.body["id"];
  const Footprint sandbox = footprint(id);
  restart_after(SIGKILL);
  EXPECT_EQ(daemon_->get("/v1/health").body["recovered"]["adopted"], 1);
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + id).status, 200);
  EXPECT_TRUE(wait_until([&] { return daemon_->get("/v1/sandboxes/" + id).status == 404; },
                         std::chrono::seconds(20), "the adopted sandbox's max lifetime",
                         std::chrono::milliseconds(50)));
  expect_ends(sandbox, created + std::chrono::seconds(4), std::chrono::seconds(10));
  const std::string log = daemon_->log();
  EXPECT_NE(log.find("sandbox=" + id + " destroyed (max lifetime reached)"), std::string::npos)
      << log;
  EXPECT_EQ(log.find("destroy failed"), std::string::npos) << log;
}

// The deadline survives adoption: once the adopting hutchd is killed too, the supervisor still
// ends the sandbox at the deadline counted from the creation.
TEST_F(RecoveryTest, AnAdoptedSandboxKeepsItsMaxLifetimeWhenTheNextDaemonDiesToo) {
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  const auto created = std::chrono::steady_clock::now();
  auto made = daemon_->post("/v1/sandboxes", {{"max_lifetime_seconds", 4}});
  ASSERT_EQ(made.status, 201) << made.raw;
  const std::string id = made.body["id"];
  const Footprint sandbox = footprint(id);
  restart_after(SIGKILL);
  EXPECT_EQ(daemon_->get("/v1/health").body["recovered"]["adopted"], 1);
  kill_daemon(SIGKILL);
  expect_ends(sandbox, created + std::chrono::seconds(4));
}

}  // namespace
}  // namespace hutch::testing
