// A live sandbox driven through the runtime API: the supervisor runs in a forked child of this
// (single-threaded) test process, as hutchd's zygote does it.
#include "runtime/live_sandbox.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "runtime/process/exec_protocol.h"
#include "runtime/process/sync.h"
#include "runtime/supervisor_protocol.h"
#include "seccomp/default_program.h"
#include "tests/common/command.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"

namespace hutch {
namespace {

using namespace std::chrono_literals;

struct Output {
  std::string out;
  std::string err;
  ExecExit exit;
};

class LiveSandboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_FALSE(dir_.path().empty());
    SandboxSpec spec;
    spec.seccomp = default_seccomp_program();
    spec.limits.pids = 64;
    exec_socket_ = dir_.path() + "/exec.sock";
    supervisor_socket_ = dir_.path() + "/supervisor.sock";
    int ready[2];
    ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
    supervisor_ = fork();
    ASSERT_GE(supervisor_, 0);
    if (supervisor_ == 0) {
      close(ready[0]);
      _exit(serve_sandbox(spec, exec_socket_, supervisor_socket_, ready[1]));
    }
    close(ready[1]);
    auto ref = read_serve_ready(ready[0], 10s, exec_socket_, supervisor_socket_);
    close(ready[0]);
    ASSERT_TRUE(ref) << ref.error().message();
    EXPECT_EQ(ref->supervisor_pid, supervisor_);
    auto connected = LiveSandbox::connect(*ref);
    ASSERT_TRUE(connected) << connected.error().message();
    sandbox_.emplace(std::move(*connected));
  }

  void TearDown() override {
    if (sandbox_) {
      auto destroyed = sandbox_->destroy();
      EXPECT_TRUE(destroyed) << destroyed.error().message();
    }
    if (supervisor_ > 0) {
      int status = 0;
      EXPECT_EQ(waitpid(supervisor_, &status, 0), supervisor_);
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    }
  }

  // Runs argv to its end, collecting stdout and stderr.
  Output run(std::vector<std::string> argv, const std::string& input = "") {
    Output output;
    int out[2], err[2], in[2];
    EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(in, O_CLOEXEC), 0);
    ExecRequest request;
    request.argv = std::move(argv);
    request.env = {"PATH=/usr/bin:/bin", "HOME=/root"};
    request.stdin_fd = in[0];
    request.stdout_fd = out[1];
    request.stderr_fd = err[1];
    auto process = sandbox_->exec(request);
    close(out[1]);
    close(err[1]);
    close(in[0]);
    (void)!write(in[1], input.data(), input.size());
    close(in[1]);
    EXPECT_TRUE(process) << process.error().message();
    if (process) {
      EXPECT_GT(process->pid(), 1);
      output.out = drain(out[0]);
      output.err = drain(err[0]);
      output.exit = wait_exit(*process);
    }
    close(out[0]);
    close(err[0]);
    return output;
  }

  // How many `sleep` processes the sandbox has (by comm: the checking shell's own command line
  // must not count).
  std::string count_sleeps() {
    return run({"sh", "-c", "cat /proc/[0-9]*/comm | grep -c '^sleep$' || true"}).out;
  }

  static std::string drain(int fd) {
    std::string text;
    char buffer[4096];
    ssize_t n;
    while ((n = read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, n);
    return text;
  }

  static ExecExit wait_exit(ExecProcess& process) {
    for (;;) {
      pollfd fd{process.fd(), POLLIN, 0};
      poll(&fd, 1, 10'000);
      auto exit = process.poll_exit();
      EXPECT_TRUE(exit);
      if (!exit) return {};
      if (*exit) return **exit;
    }
  }

  testing::TempDir dir_;
  std::string exec_socket_;
  std::string supervisor_socket_;
  pid_t supervisor_ = -1;
  std::optional<LiveSandbox> sandbox_;
};

TEST_F(LiveSandboxTest, ExecsRunInsideWithOutputStdinAndExitCodes) {
  Output echo = run({"sh", "-c", "echo out; echo err >&2; cat; exit 7"}, "from stdin");
  EXPECT_EQ(echo.out, "out\nfrom stdin");
  EXPECT_EQ(echo.err, "err\n");
  EXPECT_EQ(echo.exit.exit_code, 7);
  EXPECT_EQ(echo.exit.term_signal, 0);

  // Every exec is in the sandbox's namespaces, as its root, fully confined.
  Output status = run({"cat", "/proc/self/status"});
  EXPECT_NE(status.out.find("Seccomp:\t2"), std::string::npos) << status.out;
  EXPECT_NE(status.out.find("CapEff:\t0000000000000000"), std::string::npos);
  EXPECT_NE(status.out.find("NoNewPrivs:\t1"), std::string::npos);
  Output uid_map = run({"cat", "/proc/self/uid_map"});
  EXPECT_NE(uid_map.out.find("1000000000"), std::string::npos) << uid_map.out;
  char host_ns[64] = {}, sandbox_ns[64] = {};
  ASSERT_GT(readlink("/proc/self/ns/pid", host_ns, sizeof host_ns - 1), 0);
  Output ns = run({"readlink", "/proc/self/ns/pid"});
  ASSERT_GT(readlink(("/proc/" + std::to_string(sandbox_->ref().init_pid) + "/ns/pid").c_str(),
                     sandbox_ns, sizeof sandbox_ns - 1),
            0);
  EXPECT_EQ(ns.out, std::string(sandbox_ns) + "\n");
  EXPECT_NE(std::string(host_ns), std::string(sandbox_ns));

  // A file written by one exec is seen by the next: one sandbox, one filesystem.
  EXPECT_EQ(run({"sh", "-c", "echo kept > /tmp/state"}).exit.exit_code, 0);
  EXPECT_EQ(run({"cat", "/tmp/state"}).out, "kept\n");
}

TEST_F(LiveSandboxTest, CommandsThatCannotStartReport127And126) {
  Output missing = run({"no-such-command"});
  EXPECT_EQ(missing.exit.exit_code, 127);
  ASSERT_TRUE(missing.exit.start_error);
  EXPECT_NE(missing.err.find("No such file or directory"), std::string::npos) << missing.err;
  Output not_executable = run({"/etc/hostname"});
  EXPECT_EQ(not_executable.exit.exit_code, 126);

  ExecRequest request;
  request.argv = {"true"};
  request.workdir = "/no/such/dir";
  auto process = sandbox_->exec(request);
  ASSERT_TRUE(process) << process.error().message();
  ExecExit exit = wait_exit(*process);
  EXPECT_EQ(exit.exit_code, 126);
  ASSERT_TRUE(exit.start_error);
  EXPECT_NE(exit.start_error->find("chdir"), std::string::npos);
}

// A pty is made by the shim on the sandbox's devpts: the master comes back with kStarted, the
// command sees the slave as its controlling terminal (`tty`, and the kernel's view: tty_nr in
// /proc/self/stat is set); a pty without a size is refused before it is sent.
TEST_F(LiveSandboxTest, ExecOnAPtyOfTheSandboxDevpts) {
  ExecRequest request;
  request.argv = {"sh", "-c", "tty; stty size; cut -d' ' -f6,7 /proc/self/stat"};
  request.pty = PtySize{77, 11};
  auto process = sandbox_->exec(request);
  ASSERT_TRUE(process) << process.error().message();
  UniqueFd master = process->take_pty_master();
  ASSERT_TRUE(master);
  std::string out;
  char buffer[4096];
  ssize_t n;
  // EIO once the slave's last holder is gone.
  while ((n = read(master.get(), buffer, sizeof buffer)) > 0) out.append(buffer, n);
  EXPECT_EQ(wait_exit(*process).exit_code, 0);
  EXPECT_EQ(out.rfind("/dev/pts/", 0), 0u) << out;
  EXPECT_NE(out.find("\r\n11 77\r\n"), std::string::npos) << out;
  EXPECT_EQ(out.find(" 0\r\n"), std::string::npos) << "tty_nr is 0: no controlling tty " << out;

  ExecRequest no_rows;
  no_rows.argv = {"true"};
  no_rows.pty = PtySize{80, 0};
  EXPECT_FALSE(sandbox_->exec(no_rows));
}

// Init keeps a spare shim forked ahead. With the pids limit reached there is neither a spare
// nor room for the command: the exec fails with a reason, and works again once pids are free.
TEST_F(LiveSandboxTest, ExecAtThePidsLimitFailsWithAReasonAndRecovers) {
  // Init and its spare shim, which init forks once it serves.
  Result<CgroupStats> idle = plain_error("stats", "not read");
  for (int i = 0; i < 500; ++i) {
    idle = sandbox_->stats();
    ASSERT_TRUE(idle && idle->pids_current) << (idle ? "no pids count" : idle.error().message());
    if (*idle->pids_current == 2u) break;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_EQ(*idle->pids_current, 2u);
  // The spare becomes the command's shim, init forks a new spare, sh forks the sleeps: the
  // sandbox then holds exactly 64 pids.
  const uint64_t sleeps = 64 - *idle->pids_current - 2;
  ExecRequest filler;
  filler.argv = {"sh", "-c",
                 "i=0; while [ $i -lt " + std::to_string(sleeps) +
                     " ]; do sleep 1000 & i=$((i+1)); done; wait"};
  auto process = sandbox_->exec(filler);
  ASSERT_TRUE(process) << process.error().message();
  std::optional<uint64_t> pids;
  for (int i = 0; i < 500 && pids != 64u; ++i) {
    std::this_thread::sleep_for(10ms);
    auto stats = sandbox_->stats();
    ASSERT_TRUE(stats) << stats.error().message();
    pids = stats->pids_current;
  }
  ASSERT_EQ(pids, 64u);
  ExecRequest probe;
  probe.argv = {"true"};
  auto refused = sandbox_->exec(probe);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message().find("pids limit"), std::string::npos)
      << refused.error().message();
  ASSERT_TRUE(process->kill_tree());
  EXPECT_EQ(wait_exit(*process).term_signal, SIGKILL);
  EXPECT_EQ(run({"echo", "room again"}).out, "room again\n");
}

TEST_F(LiveSandboxTest, KillTreeKillsDoubleForkedAndSetsidDescendants) {
  ExecRequest request;
  request.argv = {"sh", "-c", "(setsid sleep 1000 &); (sleep 1001 &); sleep 1002"};
  auto process = sandbox_->exec(request);
  ASSERT_TRUE(process) << process.error().message();
  // Wait until all three sleeps exist.
  for (int i = 0; i < 200; ++i) {
    if (count_sleeps() == "3\n") break;
    std::this_thread::sleep_for(10ms);
  }
  ASSERT_TRUE(process->kill_tree());
  ExecExit exit = wait_exit(*process);
  EXPECT_EQ(exit.term_signal, SIGKILL);
  EXPECT_EQ(exit.exit_code, 128 + SIGKILL);
  EXPECT_EQ(count_sleeps(), "0\n");
}

TEST_F(LiveSandboxTest, DisconnectKillsAForegroundCommandButNotABackgroundOne) {
  ExecRequest foreground;
  foreground.argv = {"sleep", "1000"};
  ExecRequest background;
  background.argv = {"sleep", "2000"};
  background.survive_disconnect = true;
  {
    auto a = sandbox_->exec(foreground);
    auto b = sandbox_->exec(background);
    ASSERT_TRUE(a && b);
  }
  std::string seen;
  for (int i = 0; i < 200; ++i) {
    seen = run({"sh", "-c",
                "cat /proc/[0-9]*/cmdline | tr '\\0' ' ' | grep -o 'sleep [12]000' | sort | tr "
                "'\\n' ,"})
               .out;
    if (seen == "sleep 2000,") break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(seen, "sleep 2000,");
}

TEST_F(LiveSandboxTest, SignalReachesTheCommand) {
  ExecRequest request;
  request.argv = {"sleep", "1000"};
  auto process = sandbox_->exec(request);
  ASSERT_TRUE(process);
  ASSERT_TRUE(process->signal(SIGTERM));
  ExecExit exit = wait_exit(*process);
  EXPECT_EQ(exit.term_signal, SIGTERM);
  EXPECT_EQ(exit.exit_code, 128 + SIGTERM);
}

TEST_F(LiveSandboxTest, FreezeStopsProgressAndThawResumes) {
  ASSERT_TRUE(sandbox_->freeze());
  ExecRequest request;
  request.argv = {"true"};
  // A frozen sandbox's init cannot accept: exec waits until thawed.
  std::thread thaw([&] {
    std::this_thread::sleep_for(200ms);
    EXPECT_TRUE(sandbox_->thaw());
  });
  auto started = std::chrono::steady_clock::now();
  auto process = sandbox_->exec(request);
  thaw.join();
  ASSERT_TRUE(process) << process.error().message();
  EXPECT_GE(std::chrono::steady_clock::now() - started, 150ms);
  EXPECT_EQ(wait_exit(*process).exit_code, 0);
  auto stats = sandbox_->stats();
  ASSERT_TRUE(stats) << stats.error().message();
  EXPECT_TRUE(stats->pids_current.has_value());
}

TEST_F(LiveSandboxTest, RootFdSeesTheSandboxFilesystem) {
  EXPECT_EQ(run({"sh", "-c", "echo inside > /tmp/marker"}).exit.exit_code, 0);
  auto root = sandbox_->open_root();
  ASSERT_TRUE(root) << root.error().message();
  int fd = openat(root->get(), "tmp/marker", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(drain(fd), "inside\n");
  close(fd);
}

TEST_F(LiveSandboxTest, SnapshotCopiesTheUpperDirExactlyWhileAWriterRuns) {
  ASSERT_EQ(run({"sh", "-c",
                 "echo v1 > /etc/motd && rm /etc/debian_version && mkdir -p /opt/a && "
                 "ln -s /etc/motd /opt/a/link && chmod 1750 /opt/a"})
                .exit.exit_code,
            0);
  // A writer that appends while the snapshot is taken: the copy is a whole state, never torn.
  ExecRequest writer;
  writer.argv = {"sh", "-c",
                 "i=0; while :; do i=$((i+1)); echo $i > /opt/counter.tmp; "
                 "mv /opt/counter.tmp /opt/counter; done"};
  auto process = sandbox_->exec(writer);
  ASSERT_TRUE(process) << process.error().message();
  // Writing by the time of the snapshot, however slow the machine (the qemu VM).
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (run({"test", "-s", "/opt/counter"}).exit.exit_code != 0) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the writer never wrote";
    std::this_thread::sleep_for(10ms);
  }
  const std::string dest = dir_.path() + "/snap";
  auto stats = sandbox_->snapshot(dest);
  ASSERT_TRUE(stats) << stats.error().message();
  EXPECT_GT(stats->files, 0u);
  ASSERT_TRUE(process->kill_tree());
  wait_exit(*process);

  EXPECT_EQ(testing::read_file_or_empty(dest + "/etc/motd"), "v1\n");
  struct stat st;
  ASSERT_EQ(lstat((dest + "/etc/debian_version").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode) && st.st_rdev == 0) << "the deletion is a whiteout";
  ASSERT_EQ(lstat((dest + "/opt/a").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000000000u) << "ownership in host ids, as the sandbox wrote it";
  EXPECT_EQ(st.st_mode & 07777, 01750u);
  char target[64] = {};
  ASSERT_GT(readlink((dest + "/opt/a/link").c_str(), target, sizeof target - 1), 0);
  EXPECT_STREQ(target, "/etc/motd");
  ASSERT_EQ(lstat((dest + "/opt/counter").c_str(), &st), 0);
  EXPECT_GT(st.st_size, 1) << "a whole number, never an empty half-written file";
  // The sandbox runs on after the snapshot (thawed).
  EXPECT_EQ(run({"cat", "/etc/motd"}).out, "v1\n");
}

// The supervisor refuses what is not a request of its protocol (here the word the protocol before
// it spoke) with a typed error reply, and serves on, unfrozen.
TEST_F(LiveSandboxTest, SupervisorRefusesGarbageAndServesOn) {
  auto address = unix_address(supervisor_socket_);
  ASSERT_TRUE(address) << address.error().message();
  const UniqueFd conn(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  ASSERT_TRUE(conn);
  ASSERT_EQ(connect(conn.get(), reinterpret_cast<const sockaddr*>(&*address), sizeof *address), 0);
  ASSERT_EQ(send(conn.get(), "freeze", 6, MSG_NOSIGNAL), 6);
  std::vector<char> reply(sizeof(SupervisorReply) + 1);
  const ssize_t n = recv(conn.get(), reply.data(), reply.size(), 0);
  auto decoded = decode_reply(reply.data(), n);
  ASSERT_TRUE(decoded) << decoded.error().message();
  EXPECT_EQ(decoded->ok, 0u);
  EXPECT_EQ(from_wire(decoded->error).message(),
            "supervisor request: malformed message: 6 bytes, not " +
                std::to_string(sizeof(SupervisorRequest)));
  EXPECT_EQ(run({"true"}).exit.exit_code, 0);
  auto stats = sandbox_->stats();
  ASSERT_TRUE(stats) << stats.error().message();
  EXPECT_TRUE(stats->pids_current.has_value());
}

// The destination is checked by the client and opened there (its parent, as an fd); a failed copy
// leaves the sandbox thawed.
TEST_F(LiveSandboxTest, SnapshotToABadDestinationFailsAndTheSandboxRunsOn) {
  auto relative = sandbox_->snapshot("snap");
  ASSERT_FALSE(relative);
  EXPECT_EQ(relative.error().message(), "snapshot: bad snapshot path snap");
  const std::string missing = dir_.path() + "/no/such/snap";
  auto orphan = sandbox_->snapshot(missing);
  ASSERT_FALSE(orphan);
  EXPECT_EQ(orphan.error().message(),
            "snapshot: open(" + dir_.path() + "/no/such): No such file or directory");
  auto taken = sandbox_->snapshot(dir_.path());  // exists already
  ASSERT_FALSE(taken);
  EXPECT_NE(taken.error().message().find("File exists"), std::string::npos)
      << taken.error().message();
  EXPECT_EQ(run({"true"}).exit.exit_code, 0) << "thawed after the failed copy";
}

TEST_F(LiveSandboxTest, DestroyLeavesNothingAndConnectRefusesAfterwards) {
  const LiveSandboxRef ref = sandbox_->ref();
  ExecRequest request;
  request.argv = {"sleep", "1000"};
  request.survive_disconnect = true;
  ASSERT_TRUE(sandbox_->exec(request));
  ASSERT_TRUE(sandbox_->destroy());
  EXPECT_TRUE(sandbox_->destroy());  // idempotent
  sandbox_.reset();
  int status = 0;
  ASSERT_EQ(waitpid(supervisor_, &status, 0), supervisor_);
  supervisor_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(ref.init_pid)));
  EXPECT_FALSE(std::filesystem::exists(ref.exec_socket));
  EXPECT_FALSE(std::filesystem::exists(ref.supervisor_socket));
  auto again = LiveSandbox::connect(ref);
  EXPECT_FALSE(again);
  for (const char* hierarchy : {"/sys/fs/cgroup/pids/hutch", "/sys/fs/cgroup/memory/hutch",
                                "/sys/fs/cgroup/unified/hutch", "/sys/fs/cgroup/hutch"}) {
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator(hierarchy, ignored)) {
      if (!entry.is_directory()) continue;
      EXPECT_EQ(entry.path().filename().string().find(std::to_string(ref.supervisor_pid)),
                std::string::npos)
          << entry.path();
    }
  }
}

// Waits (polling) until the supervisor, this process's child, exited; its exit status, -1 if it
// still runs after `timeout`.
int wait_exited(pid_t pid, std::chrono::milliseconds timeout) {
  const auto end = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) return status;
    if (std::chrono::steady_clock::now() >= end) return -1;
    std::this_thread::sleep_for(20ms);
  }
}

// A state dir for the supervisor to remove once it ended the sandbox by itself.
std::string make_state_dir(const std::string& parent) {
  const std::string dir = parent + "/state";
  std::filesystem::create_directories(dir + "/sub");
  std::ofstream(dir + "/sub/file") << "x";
  return dir;
}

TEST_F(LiveSandboxTest, MaxLifetimeWaitsUntilNoClientIsAttached) {
  const LiveSandboxRef ref = sandbox_->ref();
  SandboxDeadlines deadlines;
  deadlines.end_at = std::chrono::system_clock::now() + 300ms;
  deadlines.state_dir = make_state_dir(dir_.path());
  ASSERT_TRUE(sandbox_->set_deadlines(deadlines));
  auto connected = LiveSandbox::connect(ref);
  ASSERT_TRUE(connected) << connected.error().message();
  std::optional<LiveSandbox> second(std::move(*connected));
  sandbox_.reset();
  // Past the deadline, but a client is still attached: it is in charge.
  std::this_thread::sleep_for(600ms);
  EXPECT_EQ(wait_exited(supervisor_, 0ms), -1);
  EXPECT_TRUE(second->alive());
  ExecRequest request;
  request.argv = {"true"};
  request.env = {"PATH=/usr/bin:/bin"};
  auto process = second->exec(request);
  ASSERT_TRUE(process) << process.error().message();
  EXPECT_EQ(wait_exit(*process).exit_code, 0);

  second.reset();
  const int status = wait_exited(supervisor_, 10s);
  ASSERT_NE(status, -1) << "the supervisor did not end the sandbox";
  supervisor_ = -1;
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(ref.init_pid)));
  EXPECT_FALSE(std::filesystem::exists(deadlines.state_dir));
  EXPECT_FALSE(std::filesystem::exists(ref.supervisor_socket));
}

TEST_F(LiveSandboxTest, IdleTtlCountsFromTheLastDetach) {
  const LiveSandboxRef ref = sandbox_->ref();
  SandboxDeadlines deadlines;
  deadlines.idle_ttl = 1s;
  deadlines.state_dir = make_state_dir(dir_.path());
  ASSERT_TRUE(sandbox_->set_deadlines(deadlines));
  // Attached for longer than the TTL: nothing ends.
  std::this_thread::sleep_for(1500ms);
  EXPECT_EQ(run({"true"}).exit.exit_code, 0);
  const auto detached = std::chrono::steady_clock::now();
  sandbox_.reset();
  const int status = wait_exited(supervisor_, 10s);
  ASSERT_NE(status, -1) << "the supervisor did not end the sandbox";
  supervisor_ = -1;
  EXPECT_GE(std::chrono::steady_clock::now() - detached, 1s);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_FALSE(std::filesystem::exists("/proc/" + std::to_string(ref.init_pid)));
  EXPECT_FALSE(std::filesystem::exists(deadlines.state_dir));
}

// Without deadlines (a client that never sent any) a detached sandbox runs on, as before.
TEST_F(LiveSandboxTest, WithoutDeadlinesADetachedSandboxRunsOn) {
  const LiveSandboxRef ref = sandbox_->ref();
  sandbox_.reset();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(wait_exited(supervisor_, 0ms), -1);
  auto again = LiveSandbox::connect(ref);
  ASSERT_TRUE(again) << again.error().message();
  sandbox_.emplace(std::move(*again));
}

}  // namespace
}  // namespace hutch

namespace hutch {
namespace {

// A unix SOCK_SEQPACKET connection to `path`.
UniqueFd connect_to(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  if (connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
    return UniqueFd();
  return fd;
}

// Sends `header` then argv {"true"} and workdir "/" with three /dev/null stdio fds, as a client
// of that header's version would, and returns the exec server's first event (kind 0: none).
template <typename Header>
ExecEvent send_request(const std::string& exec_socket, const Header& header) {
  UniqueFd conn = connect_to(exec_socket);
  EXPECT_TRUE(conn) << "connect " << exec_socket << ": " << strerror(errno);
  std::string message(reinterpret_cast<const char*>(&header), sizeof header);
  message.append("true", 5);
  message.append("/", 2);
  UniqueFd null(open("/dev/null", O_RDWR | O_CLOEXEC));
  const int stdio[3] = {null.get(), null.get(), null.get()};
  EXPECT_EQ(send_with_fds(conn.get(), message.data(), message.size(), stdio, 3), 0);
  ExecEvent event{};
  pollfd readable{conn.get(), POLLIN, 0};
  EXPECT_EQ(poll(&readable, 1, 10'000), 1);
  EXPECT_EQ(recv(conn.get(), &event, sizeof event, 0), static_cast<ssize_t>(sizeof event));
  return event;
}

// The header of exec protocol v2 (before the version field), as a hutchd of then sent it.
struct V2Header {
  uint32_t magic = 0x68757463;  // "hutc"
  uint32_t argc = 1;
  uint32_t envc = 0;
  uint32_t survive_disconnect = 0;
  uint32_t pty_cols = 0;
  uint32_t pty_rows = 0;
};

TEST_F(LiveSandboxTest, AnOldSizedRequestIsRefusedNamingTheServersVersion) {
  const ExecEvent event = send_request(sandbox_->ref().exec_socket, V2Header{});
  EXPECT_EQ(event.kind, ExecEvent::Kind::kRefused);
  EXPECT_EQ(event.protocol_version, kExecProtocolVersion);
  EXPECT_STREQ(event.start_error,
               ("this sandbox's exec server speaks exec protocol v" +
                std::to_string(kExecProtocolVersion) + ", the request is v1 or v2")
                   .c_str());
  EXPECT_EQ(run({"true"}).exit.exit_code, 0) << "the server serves on";
}

TEST_F(LiveSandboxTest, ARequestOfAnotherVersionIsRefusedNamingBoth) {
  ExecRequestHeader header;
  header.version = kExecProtocolVersion + 1;
  header.argc = 1;
  const ExecEvent event = send_request(sandbox_->ref().exec_socket, header);
  EXPECT_EQ(event.kind, ExecEvent::Kind::kRefused);
  EXPECT_EQ(event.protocol_version, kExecProtocolVersion);
  EXPECT_NE(std::string(event.start_error)
                .find("the request is v" + std::to_string(kExecProtocolVersion + 1)),
            std::string::npos)
      << event.start_error;
}

// The client's side, against a stand-in exec server of the sandbox's ref: a refusal, and the
// silent close of a server from before v3, are a conflict naming both versions, never a fork
// failure; a silent close of a v3 server is not called outdated.
TEST_F(LiveSandboxTest, ExecOfAnOutdatedServerIsAClearConflict) {
  const std::string fake_socket = dir_.path() + "/fake-exec.sock";
  UniqueFd listener(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, fake_socket.c_str(), sizeof address.sun_path - 1);
  ASSERT_EQ(bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(listen(listener.get(), 4), 0);
  // Answers one request: with a refusal of `version`, or (0) by closing without a word.
  auto serve_one = [&](uint32_t version) {
    return std::thread([&listener, version] {
      UniqueFd conn(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
      char buffer[4096];
      (void)recv(conn.get(), buffer, sizeof buffer, 0);
      if (version == 0) return;
      ExecEvent event{};
      event.kind = ExecEvent::Kind::kRefused;
      event.protocol_version = version;
      (void)send(conn.get(), &event, sizeof event, MSG_NOSIGNAL);
    });
  };
  auto exec_with = [&](uint32_t recorded_protocol, uint32_t server_version) {
    LiveSandboxRef ref = sandbox_->ref();
    ref.exec_socket = fake_socket;
    ref.exec_protocol = recorded_protocol;
    auto other = LiveSandbox::connect(ref);
    EXPECT_TRUE(other) << other.error().message();
    std::thread server = serve_one(server_version);
    ExecRequest request;
    request.argv = {"true"};
    auto process = other->exec(request);
    server.join();
    EXPECT_FALSE(process);
    return process ? Error{} : process.error();
  };
  const std::string ours = "this hutchd speaks v" + std::to_string(kExecProtocolVersion);

  Error refused = exec_with(kExecProtocolVersion, 2);
  EXPECT_EQ(refused.kind, ErrorKind::kConflict);
  EXPECT_EQ(refused.step, kOutdatedExecStep);
  EXPECT_NE(refused.message().find("started by an older hutchd (exec protocol v2, " + ours +
                                   "): recreate it"),
            std::string::npos)
      << refused.message();

  Error silent_old = exec_with(0, 0);
  EXPECT_EQ(silent_old.step, kOutdatedExecStep);
  EXPECT_NE(silent_old.message().find("(exec protocol v1 or v2, " + ours + ")"), std::string::npos)
      << silent_old.message();

  Error silent_current = exec_with(kExecProtocolVersion, 0);
  EXPECT_NE(silent_current.step, kOutdatedExecStep);
  EXPECT_EQ(silent_current.message().find("fork"), std::string::npos) << silent_current.message();
}

}  // namespace
}  // namespace hutch
