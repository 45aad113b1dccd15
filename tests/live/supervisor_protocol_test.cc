// The supervisor's typed messages (runtime/supervisor_protocol.h) and the ready-pipe reader
// (read_serve_ready): round trips, and truncated or garbage messages refused by name. No root.
#include "runtime/supervisor_protocol.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/live_sandbox.h"

namespace hutch {
namespace {

using namespace std::chrono_literals;

template <typename Message>
std::vector<char> bytes_of(const Message& message) {
  std::vector<char> bytes(sizeof message);
  std::memcpy(bytes.data(), &message, sizeof message);
  return bytes;
}

template <typename Decode>
std::string refusal(Decode decode, const std::vector<char>& bytes, long size) {
  auto decoded = decode(bytes.data(), size);
  return decoded ? std::string("accepted") : decoded.error().message();
}

TEST(SupervisorProtocol, SnapshotRequestRoundTrips) {
  SupervisorRequest request;
  request.kind = SupervisorRequest::Kind::kSnapshot;
  std::strcpy(request.snapshot_name, "snap-1");
  const std::vector<char> bytes = bytes_of(request);
  auto decoded = decode_request(bytes.data(), static_cast<long>(bytes.size()));
  ASSERT_TRUE(decoded) << decoded.error().message();
  EXPECT_EQ(decoded->kind, SupervisorRequest::Kind::kSnapshot);
  EXPECT_STREQ(decoded->snapshot_name, "snap-1");
}

TEST(SupervisorProtocol, DeadlinesRoundTrip) {
  SandboxDeadlines deadlines;
  deadlines.end_at = std::chrono::system_clock::time_point(1'800'000'000'123ms);
  deadlines.idle_ttl = 90s;
  deadlines.state_dir = "/var/lib/hutch/sandboxes/a dir with spaces";
  auto request = deadlines_request(deadlines);
  ASSERT_TRUE(request) << request.error().message();
  const std::vector<char> bytes = bytes_of(*request);
  auto decoded = decode_request(bytes.data(), static_cast<long>(bytes.size()));
  ASSERT_TRUE(decoded) << decoded.error().message();
  ASSERT_EQ(decoded->kind, SupervisorRequest::Kind::kDeadlines);
  const SandboxDeadlines received = deadlines_of(*decoded);
  EXPECT_EQ(received.end_at, deadlines.end_at);
  EXPECT_EQ(received.idle_ttl, deadlines.idle_ttl);
  EXPECT_EQ(received.state_dir, deadlines.state_dir);

  const SandboxDeadlines none = deadlines_of(*deadlines_request(SandboxDeadlines{}));
  EXPECT_FALSE(none.end_at);
  EXPECT_FALSE(none.idle_ttl);
  EXPECT_TRUE(none.state_dir.empty());
  // Zero is a deadline (end as soon as no client is attached), not the absence of one.
  SandboxDeadlines zero;
  zero.idle_ttl = 0ms;
  EXPECT_EQ(deadlines_of(*deadlines_request(zero)).idle_ttl, 0ms);
}

TEST(SupervisorProtocol, DeadlinesWithAnOverlongStateDirAreRefused) {
  SandboxDeadlines deadlines;
  deadlines.state_dir = "/" + std::string(PATH_MAX, 'x');
  auto request = deadlines_request(deadlines);
  ASSERT_FALSE(request);
  EXPECT_EQ(request.error().message(), "deadlines: state dir path too long");
}

TEST(SupervisorProtocol, StatsRoundTripWithAbsentFields) {
  CgroupStats stats;
  stats.cpu_usage_usec = 0;  // present and zero, unlike an absent field
  stats.memory_peak_bytes = 1ull << 40;
  stats.pids_peak = 17;
  SupervisorReply reply;
  reply.ok = 1;
  put_stats(stats, reply);
  const std::vector<char> bytes = bytes_of(reply);
  auto decoded = decode_reply(bytes.data(), static_cast<long>(bytes.size()));
  ASSERT_TRUE(decoded) << decoded.error().message();
  const CgroupStats received = stats_of(*decoded);
  EXPECT_EQ(received.cpu_usage_usec, std::optional<uint64_t>(0));
  EXPECT_EQ(received.memory_peak_bytes, stats.memory_peak_bytes);
  EXPECT_EQ(received.pids_current, std::nullopt);
  EXPECT_EQ(received.pids_peak, std::optional<uint64_t>(17));
  EXPECT_EQ(received.oom_kills, std::nullopt);
}

TEST(SupervisorProtocol, ErrorsRoundTripAndLongOnesAreTruncated) {
  const Error error{"mkdirat", "snap", EEXIST};
  const SupervisorReply reply = error_reply(error);
  const std::vector<char> bytes = bytes_of(reply);
  auto decoded = decode_reply(bytes.data(), static_cast<long>(bytes.size()));
  ASSERT_TRUE(decoded);
  EXPECT_EQ(decoded->ok, 0u);
  EXPECT_EQ(from_wire(decoded->error).message(), error.message());

  const Error huge{std::string(500, 's'), std::string(5000, 'd'), 0};
  const Error received = from_wire(to_wire(huge));
  EXPECT_EQ(received.step, std::string(sizeof(WireError::step) - 1, 's'));
  EXPECT_EQ(received.detail, std::string(sizeof(WireError::detail) - 1, 'd'));
}

TEST(SupervisorProtocol, TruncatedAndOversizedMessagesAreRefused) {
  const std::vector<char> request = bytes_of(SupervisorRequest{});
  for (long size : {-1L, 0L, 4L, static_cast<long>(request.size()) - 1}) {
    EXPECT_EQ(refusal(decode_request, request, size),
              "supervisor request: malformed message: " + std::to_string(size) + " bytes, not " +
                  std::to_string(request.size()));
  }
  std::vector<char> longer = request;
  longer.push_back('x');
  EXPECT_NE(refusal(decode_request, longer, static_cast<long>(longer.size())), "accepted");
  const std::vector<char> reply = bytes_of(SupervisorReply{});
  EXPECT_NE(refusal(decode_reply, reply, static_cast<long>(reply.size()) - 1), "accepted");
  const std::vector<char> ready = bytes_of(ServeReady{});
  EXPECT_NE(refusal(decode_ready, ready, static_cast<long>(ready.size()) / 2), "accepted");
}

TEST(SupervisorProtocol, GarbageIsRefused) {
  // The words of the protocol before this one: an older client's request.
  std::vector<char> words(sizeof(SupervisorRequest), '\0');
  std::memcpy(words.data(), "freeze", 6);
  EXPECT_EQ(refusal(decode_request, words, static_cast<long>(words.size())),
            "supervisor request: malformed message: bad magic (a peer of another hutch version?)");

  for (uint32_t kind : {0u, 99u}) {
    SupervisorRequest request;
    std::memcpy(&request.kind, &kind, sizeof kind);
    EXPECT_EQ(refusal(decode_request, bytes_of(request), sizeof request),
              "supervisor request: malformed message: unknown kind " + std::to_string(kind));
    ServeReady ready;
    std::memcpy(&ready.kind, &kind, sizeof kind);
    EXPECT_NE(refusal(decode_ready, bytes_of(ready), sizeof ready), "accepted");
  }

  SupervisorReply reply;
  reply.magic = ServeReady::kMagic;  // a message of another kind
  EXPECT_NE(refusal(decode_reply, bytes_of(reply), sizeof reply), "accepted");
}

// The supervisor works beneath the directory fd it was passed: the name must be one new entry.
TEST(SupervisorProtocol, SnapshotNamesOtherThanOneEntryAreRefused) {
  for (const char* name : {"", ".", "..", "a/b", "/abs"}) {
    SupervisorRequest request;
    request.kind = SupervisorRequest::Kind::kSnapshot;
    std::strcpy(request.snapshot_name, name);
    EXPECT_EQ(refusal(decode_request, bytes_of(request), sizeof request),
              std::string("supervisor request: bad snapshot name ") + name);
  }
}

TEST(SupervisorProtocol, UnterminatedStringsAreTerminated) {
  SupervisorRequest request;
  request.kind = SupervisorRequest::Kind::kSnapshot;
  std::memset(request.snapshot_name, 'n', sizeof request.snapshot_name);
  std::memset(request.state_dir, 's', sizeof request.state_dir);
  auto decoded = decode_request(bytes_of(request).data(), sizeof request);
  ASSERT_TRUE(decoded) << decoded.error().message();
  EXPECT_EQ(std::strlen(decoded->snapshot_name), sizeof request.snapshot_name - 1);
  EXPECT_EQ(std::strlen(decoded->state_dir), sizeof request.state_dir - 1);

  ServeReady failed = failed_ready(Error{"step", "detail", 0});
  std::memset(failed.error.detail, 'd', sizeof failed.error.detail);
  auto ready = decode_ready(bytes_of(failed).data(), sizeof failed);
  ASSERT_TRUE(ready);
  EXPECT_EQ(std::strlen(ready->error.detail), sizeof failed.error.detail - 1);
}

TEST(SupervisorProtocol, ReadyMessagesNeedTheirPids) {
  ServeReady serving;
  serving.kind = ServeReady::Kind::kServing;
  serving.supervisor_pid = 10;
  EXPECT_EQ(refusal(decode_ready, bytes_of(serving), sizeof serving),
            "supervisor ready message: malformed message: no pid");
  serving.init_pid = 11;
  EXPECT_EQ(refusal(decode_ready, bytes_of(serving), sizeof serving), "accepted");
  ServeReady announced;
  announced.kind = ServeReady::Kind::kSupervisor;
  EXPECT_NE(refusal(decode_ready, bytes_of(announced), sizeof announced), "accepted");
}

// read_serve_ready over a real pipe, as the zygote and the live tests use it.
class ReadyPipe : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(pipe2(fds_, O_CLOEXEC), 0); }
  void TearDown() override {
    close(fds_[0]);
    close_writer();
  }
  void write_message(const ServeReady& ready) { write_ready(fds_[1], ready); }
  void write_bytes(const void* data, size_t size) {
    ASSERT_EQ(write(fds_[1], data, size), static_cast<ssize_t>(size));
  }
  void close_writer() {
    if (fds_[1] >= 0) close(fds_[1]);
    fds_[1] = -1;
  }
  Result<LiveSandboxRef> read(std::chrono::milliseconds timeout = 5s) {
    return read_serve_ready(fds_[0], timeout, "/x/exec.sock", "/x/supervisor.sock", &stuck_);
  }
  int fds_[2] = {-1, -1};
  pid_t stuck_ = -1;
};

ServeReady announcement(pid_t pid) {
  ServeReady ready;
  ready.kind = ServeReady::Kind::kSupervisor;
  ready.supervisor_pid = pid;
  return ready;
}

TEST_F(ReadyPipe, ServingGivesTheRef) {
  write_message(announcement(42));
  ServeReady serving;
  serving.kind = ServeReady::Kind::kServing;
  serving.supervisor_pid = 42;
  serving.init_pid = 43;
  serving.supervisor_start_time = 123456789;
  write_message(serving);
  auto ref = read();
  ASSERT_TRUE(ref) << ref.error().message();
  EXPECT_EQ(ref->supervisor_pid, 42);
  EXPECT_EQ(ref->init_pid, 43);
  EXPECT_EQ(ref->supervisor_start_time, 123456789u);
  EXPECT_EQ(ref->exec_socket, "/x/exec.sock");
  EXPECT_EQ(ref->supervisor_socket, "/x/supervisor.sock");
  EXPECT_EQ(stuck_, 0);
}

TEST_F(ReadyPipe, AReportedFailureCarriesTheSupervisorsError) {
  write_message(announcement(42));
  write_message(failed_ready(Error{"mount", "overlay on /root", EINVAL}));
  auto ref = read();
  ASSERT_FALSE(ref);
  EXPECT_EQ(ref.error().message(), "sandbox start: mount(overlay on /root): Invalid argument");
  EXPECT_EQ(stuck_, 0);  // it cleans up and exits by itself
}

// Its pid may be another process's by now (the zygote reaps supervisors at once): not to kill.
TEST_F(ReadyPipe, ASupervisorThatClosedThePipeIsNotStuck) {
  write_message(announcement(42));
  close_writer();
  auto ref = read();
  ASSERT_FALSE(ref);
  EXPECT_EQ(ref.error().message(),
            "sandbox start: the supervisor exited before its sandbox was ready");
  EXPECT_EQ(stuck_, 0);
}

// Still holding the pipe open, and silent: stuck in setup.
TEST_F(ReadyPipe, SilenceTimesOut) {
  write_message(announcement(42));
  auto ref = read(50ms);
  ASSERT_FALSE(ref);
  EXPECT_EQ(ref.error().message(), "sandbox start: no answer from the supervisor in time");
  EXPECT_EQ(stuck_, 42);
}

TEST_F(ReadyPipe, HalfAMessageIsRefused) {
  const ServeReady serving;
  write_bytes(&serving, sizeof serving / 2);
  close_writer();
  auto ref = read();
  ASSERT_FALSE(ref);
  EXPECT_EQ(ref.error().message(), "sandbox start: supervisor ready message: malformed message: " +
                                       std::to_string(sizeof serving / 2) + " bytes, not " +
                                       std::to_string(sizeof serving));
}

TEST(KeeperProtocol, RequestRoundTripsAndIsRefusedWithoutAPid) {
  KeeperRequest request;
  request.kind = KeeperRequest::Kind::kKeep;
  request.pid = 42;
  request.pty = 1;
  request.cap_bytes = 16 << 20;
  std::vector<char> bytes = bytes_of(request);
  auto decoded = decode_keeper_request(bytes.data(), static_cast<long>(bytes.size()));
  ASSERT_TRUE(decoded) << decoded.error().message();
  EXPECT_EQ(decoded->pid, 42);
  EXPECT_EQ(decoded->cap_bytes, 16u << 20);
  request.pid = 0;
  bytes = bytes_of(request);
  EXPECT_EQ(refusal(decode_keeper_request, bytes, static_cast<long>(bytes.size())),
            "keeper request: malformed message: no pid");
  KeeperRequest list;
  list.kind = KeeperRequest::Kind::kList;
  bytes = bytes_of(list);
  EXPECT_TRUE(decode_keeper_request(bytes.data(), static_cast<long>(bytes.size())));
}

// A supervisor of an older hutchd (before the keeper) takes a keeper request for a
// SupervisorRequest: its decoder refuses it by size, and it answers with a SupervisorReply. The
// new client names that instead of calling it malformed.
TEST(KeeperProtocol, AnOlderSupervisorsRefusalIsNamed) {
  KeeperRequest request;
  request.kind = KeeperRequest::Kind::kList;
  const std::vector<char> sent = bytes_of(request);
  auto old_decode = decode_request(sent.data(), static_cast<long>(sent.size()));
  ASSERT_FALSE(old_decode);
  const std::vector<char> answer = bytes_of(error_reply(old_decode.error()));
  auto reply = decode_keeper_reply(answer.data(), static_cast<long>(answer.size()));
  ASSERT_FALSE(reply);
  EXPECT_EQ(reply.error().kind, ErrorKind::kUnsupported);
  const std::string message = reply.error().message();
  EXPECT_NE(message.find("started by an older hutchd"), std::string::npos) << message;
  EXPECT_NE(message.find("malformed message: " + std::to_string(sizeof request) + " bytes"),
            std::string::npos)
      << message;
  // A KeeperReply of the right size still decodes.
  KeeperReply ok;
  ok.ok = 1;
  ok.last = 1;
  const std::vector<char> good = bytes_of(ok);
  EXPECT_TRUE(decode_keeper_reply(good.data(), static_cast<long>(good.size())));
}

TEST(KeeperProtocol, ExitFileRoundTrips) {
  KeptExit exit;
  exit.exit_code = 137;
  exit.term_signal = 9;
  exit.stdout_truncated = true;
  exit.ended_unix_ms = 1'800'000'000'123;
  exit.start_error = "execve: No such\nfile";
  auto parsed = parse_kept_exit(format_kept_exit(exit));
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->exit_code, 137);
  EXPECT_EQ(parsed->term_signal, 9);
  EXPECT_TRUE(parsed->stdout_truncated);
  EXPECT_FALSE(parsed->stderr_truncated);
  EXPECT_EQ(parsed->ended_unix_ms, 1'800'000'000'123);
  EXPECT_EQ(parsed->start_error, "execve: No such file");
  EXPECT_FALSE(parse_kept_exit(""));
  EXPECT_FALSE(parse_kept_exit("0 0 0"));
  EXPECT_FALSE(parse_kept_exit("0 0 0 0 12 x\n"));
}

TEST_F(ReadyPipe, TheOldTextLineIsRefused) {
  const std::string line = "ok 43 42 123456789\n";
  std::vector<char> padded(sizeof(ServeReady), '\0');
  std::memcpy(padded.data(), line.data(), line.size());
  write_bytes(padded.data(), padded.size());
  auto ref = read();
  ASSERT_FALSE(ref);
  EXPECT_EQ(ref.error().message(),
            "sandbox start: supervisor ready message: malformed message: bad magic (a peer of "
            "another hutch version?)");
}

}  // namespace
}  // namespace hutch
