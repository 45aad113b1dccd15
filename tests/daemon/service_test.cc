// The service layer in-process, without HTTP: the on-disk record, recovery of records that must
// not be adopted, the error kinds -> codes -> statuses the routes answer, the reaper's policy, and
// (as root, against a real zygote) the registry's one teardown sequence.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "daemon/errors.h"
#include "daemon/metrics.h"
#include "daemon/sandbox_spec.h"
#include "daemon/service/host_mounts.h"
#include "daemon/service/reaper.h"
#include "daemon/service/sandbox_record.h"
#include "daemon/service/sandbox_registry.h"
#include "daemon/zygote.h"
#include "runtime/base/proc_stat.h"
#include "runtime/cgroup/plan.h"
#include "runtime/ns/net.h"
#include "runtime/process/exec_protocol.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"
#include "tests/common/wait.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;
using testing::TempDir;
using namespace std::chrono_literals;

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A pid that no process has: a child, reaped.
pid_t reaped_pid() {
  pid_t pid = ::fork();
  if (pid == 0) _exit(0);
  ::waitpid(pid, nullptr, 0);
  return pid;
}

// The kernel's view: no process `pid`, or only its zombie.
bool process_dead(pid_t pid) {
  auto state = read_proc_state(pid);
  return !state || state->state == 'Z' || state->state == 'X';
}

TEST(SandboxRecordTest, WriteAtomicallyReplacesTheWholeRecordAndLeavesNoTempFile) {
  TempDir dir;
  ASSERT_TRUE(write_atomically(dir.path(), kRecord, "first, and longer\n"));
  ASSERT_TRUE(write_atomically(dir.path(), kRecord, "second\n"));
  EXPECT_EQ(read_file(dir.path() + "/" + kRecord), "second\n");
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    EXPECT_EQ(entry.path().filename(), kRecord);
    ++entries;
  }
  EXPECT_EQ(entries, 1);
}

TEST(SandboxRecordTest, WriteAtomicallyNamesTheSyscallAndPathItFailedOn) {
  TempDir dir;
  auto written = write_atomically(dir.path() + "/missing", kRecord, "x");
  ASSERT_FALSE(written);
  EXPECT_EQ(written.error().kind, ErrorKind::kFailure);
  EXPECT_NE(written.error().message().find("open"), std::string::npos) << written.error().message();
  EXPECT_NE(written.error().message().find(dir.path() + "/missing/"), std::string::npos);
}

TEST(SandboxRecordTest, RefAndPooledRecordRoundTrip) {
  LiveSandboxRef ref{4242, 123456789, 4243, "/s/sb-1/exec.sock", "/s/sb-1/supervisor.sock"};
  LiveSandboxRef back = ref_from_json(ref_to_json(ref));
  EXPECT_EQ(back.supervisor_pid, ref.supervisor_pid);
  EXPECT_EQ(back.supervisor_start_time, ref.supervisor_start_time);
  EXPECT_EQ(back.init_pid, ref.init_pid);
  EXPECT_EQ(back.exec_socket, ref.exec_socket);
  EXPECT_EQ(back.supervisor_socket, ref.supervisor_socket);
  EXPECT_EQ(back.exec_protocol, 0u) << "a ref made before exec protocol v3";
  ref.exec_protocol = kExecProtocolVersion;
  EXPECT_EQ(ref_from_json(ref_to_json(ref)).exec_protocol, kExecProtocolVersion);

  json pooled = json::parse(pooled_record("sb-1", ref));
  EXPECT_EQ(pooled["state"], "pooled");
  EXPECT_EQ(pooled["id"], "sb-1");
  EXPECT_EQ(ref_from_json(pooled["ref"]).init_pid, 4243);
  json creating = json::parse(creating_record("sb-2"));
  EXPECT_EQ(creating["state"], "creating");
  EXPECT_FALSE(creating.contains("ref"));
  EXPECT_THROW(ref_from_json(json{{"supervisor_pid", "not a pid"}}), json::exception);
}

TEST(SandboxRecordTest, GarbageInterruptedAndDeadRecordsAreNotAdopted) {
  TempDir state;
  auto dir_with = [&](const std::string& id, const std::string& record) {
    std::string dir = state.path() + "/" + id;
    std::filesystem::create_directories(dir);
    if (!record.empty()) write_file(dir + "/" + kRecord, record);
    return dir;
  };
  EXPECT_FALSE(recover_record("sb-garbage", dir_with("sb-garbage", "{not json")));
  EXPECT_FALSE(recover_record("sb-empty", dir_with("sb-empty", "")));
  EXPECT_FALSE(recover_record("sb-creating", dir_with("sb-creating", creating_record("x"))));
  json dead = json::parse(pooled_record("sb-dead", {reaped_pid(), 1, reaped_pid(), "/a", "/b"}));
  dead["state"] = "running";
  EXPECT_FALSE(recover_record("sb-dead", dir_with("sb-dead", dead.dump())));
}

// A supervisor of another protocol (an older hutchd's, after an upgrade): a process at the
// recorded pid and start time whose child is the recorded init, answering the attach with text.
// Recovery cannot adopt it and must not leave its sandbox running unmanaged: init is killed, but
// only when the supervisor is the recorded one (not a reused pid).
TEST(SandboxRecordTest, AnUnadoptableSupervisorsInitIsKilledOnlyIfItIsTheRecordedOne) {
  HUTCH_REQUIRE_ROOT();
  TempDir state;
  const std::string dir = state.path() + "/sb-old";
  std::filesystem::create_directories(dir);
  const std::string socket_path = dir + "/supervisor.sock";
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t supervisor = ::fork();
  ASSERT_GE(supervisor, 0);
  if (supervisor == 0) {
    ::close(ready[0]);
    int listener = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, socket_path.c_str(), sizeof addr.sun_path - 1);
    if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener, 4) != 0)
      ::_exit(1);
    const pid_t init = ::fork();
    if (init == 0) {
      ::pause();
      ::_exit(0);
    }
    if (::write(ready[1], &init, sizeof init) != sizeof init) ::_exit(1);
    for (;;) {
      int client = ::accept(listener, nullptr, nullptr);
      if (client < 0) continue;
      (void)!::write(client, "ok 1 2 3\n", 9);
      ::close(client);
    }
  }
  ::close(ready[1]);
  pid_t init = 0;
  ASSERT_EQ(::read(ready[0], &init, sizeof init), static_cast<ssize_t>(sizeof init));
  ::close(ready[0]);
  auto supervisor_state = read_proc_state(supervisor);
  ASSERT_TRUE(supervisor_state.has_value());
  auto record_with = [&](uint64_t start_time) {
    json record = json::parse(
        pooled_record("sb-old", {supervisor, start_time, init, dir + "/exec.sock", socket_path}));
    record["state"] = "running";
    write_file(dir + "/" + kRecord, record.dump());
  };

  record_with(supervisor_state->start_time + 1);  // as if the pid had been reused
  EXPECT_FALSE(recover_record("sb-old", dir));
  EXPECT_FALSE(process_dead(init)) << "the init of a process that is not the recorded one died";

  record_with(supervisor_state->start_time);
  EXPECT_FALSE(recover_record("sb-old", dir));
  EXPECT_TRUE(testing::wait_until([&] { return process_dead(init); }, 5s, "the old init to die"));

  // Our grandchild: its pid stays its own (a zombie at worst) while the supervisor is unreaped.
  ::kill(init, SIGKILL);
  ::kill(supervisor, SIGKILL);
  ::waitpid(supervisor, nullptr, 0);
}

// What a route answers for the registry's own errors: the code is the service's, the status the
// kind's, mapped once (daemon/errors.cc).
TEST(ServiceErrorTest, KindsBecomeCodesAndStatusesOnce) {
  auto failure = service::from_runtime(plain_error("x", "y").error());
  EXPECT_EQ(failure.code, "runtime_error");
  EXPECT_EQ(api_error(failure).status, 500);

  // An exec server of another protocol version: LiveSandbox::exec's error (tests/live's
  // ExecOfAnOutdatedServerIsAClearConflict) becomes a 409 of its own code, never a fork failure.
  auto outdated = service::from_runtime(
      kind_error(ErrorKind::kConflict, kOutdatedExecStep, "started by an older hutchd").error());
  EXPECT_EQ(outdated.code, "sandbox_outdated");
  EXPECT_EQ(api_error(outdated).status, 409);

  SandboxConfig config;
  config.rootfs = "/nonexistent/rootfs";
  auto checked = check_create_config(config);
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().kind, ErrorKind::kInvalid);
  EXPECT_EQ(checked.error().code, "bad_request");
  EXPECT_EQ(api_error(checked.error()).status, 400);
  EXPECT_EQ(checked.error().message, "rootfs /nonexistent/rootfs is not a directory");

  config.rootfs = "host";
  config.labels["big"] = std::string(64 * 1024, 'x');
  checked = check_create_config(config);
  ASSERT_FALSE(checked);
  EXPECT_EQ(checked.error().message, "env and labels together are limited to 64 KiB");
  config.labels.clear();
  EXPECT_TRUE(check_create_config(config));

  EXPECT_EQ(http_status(ErrorKind::kNotFound), 404);
  EXPECT_EQ(http_status(ErrorKind::kConflict), 409);
  EXPECT_EQ(http_status(ErrorKind::kUnsupported), 501);
  EXPECT_THROW(or_throw(service::ServiceResult<int>(
                   service::service_error(ErrorKind::kConflict, "conflict", "busy"))),
               ApiError);
  EXPECT_EQ(or_throw(service::ServiceResult<int>(7)), 7);
}

TEST(ReaperPolicyTest, IdleTtlWaitsForExecsAndProcessesMaxLifetimeDoesNot) {
  SandboxConfig config;
  config.idle_ttl_seconds = 10;
  config.max_lifetime_seconds = 100;
  ReapFacts fresh{true, 1s, 1s, 0, false};
  EXPECT_EQ(reap_reason(config, fresh), std::nullopt);

  ReapFacts idle = fresh;
  idle.idle_for = 10s;
  EXPECT_EQ(reap_reason(config, idle), "idle for 10 s");
  idle.active_execs = 1;
  EXPECT_EQ(reap_reason(config, idle), std::nullopt);
  idle.active_execs = 0;
  idle.has_running_process = true;
  EXPECT_EQ(reap_reason(config, idle), std::nullopt);

  ReapFacts old = idle;  // busy, but past its lifetime
  old.age = 100s;
  EXPECT_EQ(reap_reason(config, old), "max lifetime reached");
  old.alive = false;
  EXPECT_EQ(reap_reason(config, old), "init exited");

  config.idle_ttl_seconds = 0;  // no idle TTL
  config.max_lifetime_seconds.reset();
  ReapFacts forever{true, 1000h, 1000h, 0, false};
  EXPECT_EQ(reap_reason(config, forever), std::nullopt);
}

// The registry against a real zygote (root: it creates sandboxes).
class RegistryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    // Before any registry thread: the zygote is forked from this process.
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
    registry_.emplace(state_.path(), std::string(kDefaultCgroupParent), *zygote_, metrics_);
    registry_->recover();
  }
  void TearDown() override {
    if (registry_) registry_->destroy_all();
  }

  std::shared_ptr<Sandbox> create() {
    auto created = registry_->create(SandboxConfig{}, "test");
    EXPECT_TRUE(created) << created.error().message;
    return created ? *created : nullptr;
  }

  static Zygote* zygote_;
  TempDir state_;
  Metrics metrics_;
  std::optional<SandboxRegistry> registry_;
};

Zygote* RegistryTest::zygote_ = nullptr;

TEST_F(RegistryTest, TheZygoteRefusesANamespaceItWasNotMeantToUse) {
  SandboxSpec spec = build_spec(SandboxConfig{}, state_.path());
  spec.cgroup_parent = std::string(kDefaultCgroupParent);
  auto spawn = [&](const SandboxSpec& with, int fd) {
    const std::string dir = state_.path() + "/z";
    std::filesystem::create_directories(dir);
    return zygote_->spawn(with, dir + "/exec.sock", dir + "/supervisor.sock",
                          dir + "/supervisor.log", std::chrono::seconds(10), fd);
  };
  auto netns = make_loopback_netns();
  ASSERT_TRUE(netns) << netns.error().message();
  // A loopback spec (the zygote's own namespaces) with hutchd's namespace attached: refused.
  auto loopback = spawn(spec, netns->get());
  ASSERT_FALSE(loopback);
  EXPECT_NE(loopback.error().message().find("not host_owned"), std::string::npos)
      << loopback.error().message();
  // A host_owned spec whose fd is no network namespace: setns fails in the supervisor, named.
  spec.net = NetMode::kHostOwned;
  const UniqueFd not_a_namespace(::open("/dev/null", O_RDONLY | O_CLOEXEC));
  auto wrong = spawn(spec, not_a_namespace.get());
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message().find("setns"), std::string::npos) << wrong.error().message();
}

// The race a host mount had while it was bound by path (docs/security.md, host mounts): hutchd
// checked the source beneath the mount root, then the sandbox's child bound whatever the path
// named later. Here the swap happens deterministically between the check (hutchd opening the
// tree) and the start: the source directory is renamed and a symlink to a host directory outside
// the root takes its place. The tree is what gets bound (the kernel's view through
// /proc/<init>/root: the checked directory's device and inode, its file, no host secret); the
// same spec by path, as binds were before, shows the host directory instead.
TEST_F(RegistryTest, AHostMountBindsTheTreeHutchdCheckedNotWhatThePathNamesLater) {
  TempDir host;
  const std::string root = host.path() + "/allowed";
  const std::string source = root + "/skill";
  const std::string outside = host.path() + "/outside";
  for (const std::string& dir : {root, source, outside})
    ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
  ASSERT_EQ(::chmod(host.path().c_str(), 0755), 0);
  write_file(source + "/SKILL.md", "checked\n");
  write_file(outside + "/secret", "host secret\n");
  struct stat checked;
  ASSERT_EQ(::stat(source.c_str(), &checked), 0);

  SandboxConfig config;
  config.mounts = {{source, "/skill", true}};
  auto trees = open_host_mount_trees(config.mounts, {root});
  ASSERT_TRUE(trees) << trees.error().message();
  ASSERT_EQ(trees->size(), 1u);
  ASSERT_EQ(::rename(source.c_str(), (root + "/moved").c_str()), 0);
  // Relative, as an attacker's would be: it resolves the same from the host's root and from the
  // host's root as the sandbox's child sees it (/oldroot).
  ASSERT_EQ(::symlink("../outside", source.c_str()), 0);
  // Resolved again now, the source is refused: the symlink leaves the root.
  EXPECT_FALSE(open_host_mount_trees(config.mounts, {root}));

  auto start = [&](const SandboxSpec& spec, const std::string& name) {
    const std::string dir = state_.path() + "/" + name;
    std::filesystem::create_directories(dir);
    auto ref = zygote_->spawn(spec, dir + "/exec.sock", dir + "/supervisor.sock",
                              dir + "/supervisor.log", std::chrono::seconds(20));
    EXPECT_TRUE(ref) << ref.error().message();
    std::optional<LiveSandbox> live;
    if (ref) {
      auto connected = LiveSandbox::connect(*ref);
      EXPECT_TRUE(connected) << connected.error().message();
      if (connected) live.emplace(std::move(*connected));
    }
    return live;
  };
  SandboxSpec spec = build_spec(config, state_.path());
  spec.cgroup_parent = std::string(kDefaultCgroupParent);
  spec.binds[0].from = BindFrom::kLauncher;
  spec.binds[0].tree_fd = (*trees)[0].get();
  auto live = start(spec, "tree");
  ASSERT_TRUE(live);
  const std::string inside = "/proc/" + std::to_string(live->ref().init_pid) + "/root/skill";
  struct stat bound;
  ASSERT_EQ(::stat(inside.c_str(), &bound), 0) << inside;
  EXPECT_EQ(bound.st_dev, checked.st_dev);
  EXPECT_EQ(bound.st_ino, checked.st_ino);
  EXPECT_EQ(read_file(inside + "/SKILL.md"), "checked\n");
  EXPECT_NE(::access((inside + "/secret").c_str(), F_OK), 0);
  const std::string mountinfo =
      read_file("/proc/" + std::to_string(live->ref().init_pid) + "/mountinfo");
  const size_t at = mountinfo.find(" /skill ");
  ASSERT_NE(at, std::string::npos) << mountinfo;
  const std::string line = mountinfo.substr(at, mountinfo.find('\n', at) - at);
  EXPECT_NE(line.find(" ro,"), std::string::npos) << line;
  EXPECT_NE(line.find("nosuid"), std::string::npos) << line;
  EXPECT_NE(line.find("nodev"), std::string::npos) << line;
  EXPECT_TRUE(live->destroy());

  // The control: by path, the child follows the swapped-in symlink out of the root.
  SandboxSpec by_path = build_spec(config, state_.path());
  by_path.cgroup_parent = std::string(kDefaultCgroupParent);
  auto escaped = start(by_path, "path");
  ASSERT_TRUE(escaped);
  EXPECT_EQ(read_file("/proc/" + std::to_string(escaped->ref().init_pid) + "/root/skill/secret"),
            "host secret\n");
  EXPECT_TRUE(escaped->destroy());
}

TEST_F(RegistryTest, UnknownIdsAreSandboxNotFound) {
  auto got = registry_->get("sb-000000000000");
  ASSERT_FALSE(got);
  EXPECT_EQ(got.error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(got.error().code, "sandbox_not_found");
  EXPECT_EQ(api_error(got.error()).status, 404);
  auto destroyed = registry_->destroy("sb-000000000000", "test");
  ASSERT_TRUE(destroyed);
  EXPECT_FALSE(*destroyed);
}

// recover() removes what it cannot adopt, and counts it.
TEST_F(RegistryTest, RecoveryRemovesAGarbageRecord) {
  const std::string dir = registry_->sandboxes_dir() + "/sb-0123456789ab";
  std::filesystem::create_directories(dir);
  write_file(dir + "/" + kRecord, "\x01\x02 not a record");
  SandboxRegistry again(state_.path(), std::string(kDefaultCgroupParent), *zygote_, metrics_);
  RecoveryReport report = again.recover();
  EXPECT_EQ(report.adopted, 0);
  EXPECT_EQ(report.removed, 1);
  EXPECT_FALSE(std::filesystem::exists(dir));
}

// The one teardown: when the on-destroyed hook runs, the sandbox's processes are dead, it is out
// of the registry, and its dir is gone.
TEST_F(RegistryTest, TeardownKillsThenUnregistersThenRemovesTheDirThenTellsTheHook) {
  auto sandbox = create();
  ASSERT_NE(sandbox, nullptr);
  const std::string id = sandbox->id();
  const std::string dir = sandbox->dir();
  const pid_t init = sandbox->live().ref().init_pid;
  ASSERT_FALSE(process_dead(init));
  ASSERT_TRUE(std::filesystem::exists(dir + "/" + kRecord));
  struct Seen {
    std::string id;
    bool init_dead = false, registered = true, dir_exists = true;
  } seen;
  registry_->set_on_destroyed([&](const std::string& destroyed) {
    seen = {destroyed, process_dead(init), registry_->find(destroyed) != nullptr,
            std::filesystem::exists(dir)};
  });
  auto destroyed = registry_->destroy(id, "test");
  ASSERT_TRUE(destroyed) << destroyed.error().message;
  EXPECT_TRUE(*destroyed);
  EXPECT_EQ(seen.id, id);
  EXPECT_TRUE(seen.init_dead);
  EXPECT_FALSE(seen.registered);
  EXPECT_FALSE(seen.dir_exists);
  EXPECT_EQ(registry_->find(id), nullptr);
}

// destroy_soon (DELETE) returns once init, and with it every process of its pid namespace, has
// exited; the rest of the teardown follows in the background, through the same hook.
TEST_F(RegistryTest, DestroySoonKillsInitAndFinishesTheTeardownInTheBackground) {
  auto sandbox = create();
  ASSERT_NE(sandbox, nullptr);
  const pid_t init = sandbox->live().ref().init_pid;
  std::atomic<bool> told{false};
  registry_->set_on_destroyed([&](const std::string&) { told = true; });
  auto destroyed = registry_->destroy_soon(sandbox->id(), "test");
  ASSERT_TRUE(destroyed) << destroyed.error().message;
  EXPECT_TRUE(*destroyed);
  EXPECT_EQ(registry_->find(sandbox->id()), nullptr);
  EXPECT_TRUE(testing::wait_until([&] { return process_dead(init); }, 5s, "init to die"));
  EXPECT_TRUE(testing::wait_until([&] { return told.load(); }, 5s, "the background teardown"));
  EXPECT_FALSE(std::filesystem::exists(sandbox->dir()));
}

TEST_F(RegistryTest, PauseAndResumePersistTheState) {
  auto sandbox = create();
  ASSERT_NE(sandbox, nullptr);
  ASSERT_TRUE(registry_->pause(*sandbox));
  EXPECT_EQ(json::parse(read_file(sandbox->dir() + "/" + kRecord))["state"], "paused");
  ASSERT_TRUE(registry_->resume(*sandbox));
  EXPECT_EQ(json::parse(read_file(sandbox->dir() + "/" + kRecord))["state"], "running");
}

}  // namespace
}  // namespace hutch::daemon
