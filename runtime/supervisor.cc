#include "runtime/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <vector>

#include "runtime/base/proc_stat.h"
#include "runtime/fs/tree_copy.h"
#include "runtime/launch.h"
#include "runtime/process/sync.h"
#include "runtime/process_keeper.h"
#include "runtime/supervisor_protocol.h"

namespace hutch {
namespace {

using Kind = SupervisorRequest::Kind;

// A listening SOCK_SEQPACKET socket at `path`, mode 0600 (host root only).
Result<UniqueFd> listen_unix(const std::string& path) {
  const sockaddr_un address = HUTCH_TRY(unix_address(path));
  UniqueFd fd(socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  if (!fd) return sys_error("socket", "AF_UNIX SOCK_SEQPACKET");
  if (unlink(path.c_str()) != 0 && errno != ENOENT) return sys_error("unlink", path);
  if (bind(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
    return sys_error("bind", path);
  if (chmod(path.c_str(), 0600) != 0) return sys_error("chmod", path + " 0600");
  if (listen(fd.get(), 128) != 0) return sys_error("listen", path);
  return fd;
}

// Removes the sockets' paths however serve_sandbox ends.
class SocketPaths {
 public:
  SocketPaths(std::string a, std::string b) : paths_{std::move(a), std::move(b)} {}
  SocketPaths(const SocketPaths&) = delete;
  SocketPaths& operator=(const SocketPaths&) = delete;
  ~SocketPaths() {
    for (const std::string& path : paths_) unlink(path.c_str());
  }

 private:
  std::string paths_[2];
};

void send_reply(int conn, const SupervisorReply& reply, int fd = -1) {
  (void)send_with_fds(conn, &reply, sizeof reply, &fd, fd >= 0 ? 1 : 0);
}

// Waits for init's kServing, or the failure it reports while setting up.
Result<void> wait_until_serving(Launched& launched) {
  for (;;) {
    pollfd fds[2] = {{launched.sync.get(), POLLIN, 0}, {launched.init->pidfd(), POLLIN, 0}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return sys_error("poll", "sandbox setup");
    }
    if (fds[0].revents != 0) {
      SyncMessage message{};
      long n = recv_sync(launched.sync.get(), &message);
      if (n > 0 && message.kind == SyncMessage::Kind::kServing) return {};
      if (n > 0 && message.kind == SyncMessage::Kind::kFailure)
        return std::unexpected(Error{message.error.step, message.error.detail, message.error.err});
      if (n > 0) continue;
    }
    return plain_error("sandbox setup", "init exited before it served");
  }
}

// kFreeze, kThaw, kStats: the cgroup's answer.
SupervisorReply answer_cgroup(std::optional<SandboxCgroup>& cgroup, Kind kind) {
  if (!cgroup) return error_reply(Error{"cgroup", "the sandbox has none (created without limits)"});
  if (kind == Kind::kStats) {
    auto stats = cgroup->stats();
    if (!stats) return error_reply(stats.error());
    SupervisorReply reply;
    reply.ok = 1;
    put_stats(*stats, reply);
    return reply;
  }
  auto done = kind == Kind::kFreeze ? cgroup->freeze() : cgroup->thaw();
  if (!done) return error_reply(done.error());
  SupervisorReply reply;
  reply.ok = 1;
  return reply;
}

// kSnapshot: the upper dir copied to a new directory `name` in `parent` while the sandbox is
// frozen, so no process changes it halfway; thawed on every path.
SupervisorReply snapshot(std::optional<SandboxCgroup>& cgroup, int upper_fd, int parent,
                         const std::string& name) {
  class Thaw {
   public:
    explicit Thaw(std::optional<SandboxCgroup>& cgroup) : cgroup_(cgroup) {}
    Thaw(const Thaw&) = delete;
    Thaw& operator=(const Thaw&) = delete;
    ~Thaw() {
      if (frozen_) (void)cgroup_->thaw();
    }
    Result<void> freeze() {
      if (!cgroup_) return {};
      HUTCH_TRY(cgroup_->freeze());
      frozen_ = true;
      return {};
    }
    Result<void> thaw() {
      if (!frozen_) return {};
      frozen_ = false;
      return cgroup_->thaw();
    }

   private:
    std::optional<SandboxCgroup>& cgroup_;
    bool frozen_ = false;
  } frozen(cgroup);
  const auto freezing = std::chrono::steady_clock::now();
  if (auto r = frozen.freeze(); !r) return error_reply(r.error());
  syncfs(upper_fd);
  auto copied = copy_tree(upper_fd, parent, name);
  auto thawed = frozen.thaw();
  const auto frozen_us = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::steady_clock::now() - freezing);
  if (!copied) return error_reply(copied.error());
  if (!thawed) return error_reply(thawed.error());
  SupervisorReply reply;
  reply.ok = 1;
  reply.snapshot_files = copied->files;
  reply.snapshot_bytes = copied->bytes;
  reply.snapshot_frozen_us = static_cast<uint64_t>(frozen_us.count());
  return reply;
}

// kAttach: the cgroup's OOM counter file as an fd, so that hutchd reads the count around each
// exec without a round trip here; none when there is no memory cgroup.
void attach(const std::optional<SandboxCgroup>& cgroup, int conn) {
  UniqueFd counter;
  if (cgroup) {
    auto opened = cgroup->open_oom_counter();
    if (!opened) return send_reply(conn, error_reply(opened.error()));
    counter = std::move(*opened);
  }
  SupervisorReply reply;
  reply.ok = 1;
  send_reply(conn, reply, counter.get());
}

// One request from a new connection: a SupervisorRequest (with the directory fd a kSnapshot
// carries) or a KeeperRequest (told apart by size and magic), with the fds that came with it.
struct Received {
  Result<SupervisorRequest> request;
  std::optional<KeeperRequest> keeper;
  std::vector<UniqueFd> fds;
};

Received receive(int conn) {
  // One byte more than a request: a longer message arrives truncated to a size decode refuses.
  std::vector<char> buffer(std::max(sizeof(SupervisorRequest), sizeof(KeeperRequest)) + 1);
  int fds[kMaxPassedFds];
  int fd_count = kMaxPassedFds;
  long n = recv_with_fds(conn, buffer.data(), buffer.size(), fds, &fd_count);
  Received received{plain_error("supervisor request", "none"), std::nullopt, {}};
  for (int i = 0; i < fd_count; ++i) received.fds.emplace_back(fds[i]);
  uint32_t magic = 0;
  if (n >= static_cast<long>(sizeof magic)) std::memcpy(&magic, buffer.data(), sizeof magic);
  if (magic == KeeperRequest::kMagic) {
    auto keeper = decode_keeper_request(buffer.data(), n);
    if (keeper) {
      received.keeper = *keeper;
    } else {
      received.request = std::unexpected(keeper.error());
    }
    return received;
  }
  received.request = decode_request(buffer.data(), n);
  return received;
}

// The supervisor's side of SandboxDeadlines: counted only while no client is attached.
class DeadlineWatch {
 public:
  void set(SandboxDeadlines deadlines) { deadlines_ = std::move(deadlines); }
  // The idle TTL counts from now: the last client left, or the last kept process ended.
  void detached() { detached_at_ = std::chrono::steady_clock::now(); }
  const std::string& state_dir() const { return deadlines_.state_dir; }

  // Whether a deadline is due (to ask only while no client is attached). `busy`: a kept
  // background process runs, which holds the idle TTL off as hutchd's reaper does.
  bool due(bool busy) const {
    return (deadlines_.end_at && std::chrono::system_clock::now() >= *deadlines_.end_at) ||
           (!busy && deadlines_.idle_ttl &&
            std::chrono::steady_clock::now() - detached_at_ >= *deadlines_.idle_ttl);
  }

  // poll's timeout until the next deadline, -1 with none. At most a minute, so that a wall clock
  // set back or forward is noticed.
  int timeout_ms(bool busy) const {
    using std::chrono::milliseconds;
    std::optional<milliseconds> wait;
    auto sooner = [&](milliseconds left) { wait = wait ? std::min(*wait, left) : left; };
    if (deadlines_.end_at) {
      sooner(
          std::chrono::ceil<milliseconds>(*deadlines_.end_at - std::chrono::system_clock::now()));
    }
    if (deadlines_.idle_ttl && !busy) {
      sooner(std::chrono::ceil<milliseconds>(detached_at_ + *deadlines_.idle_ttl -
                                             std::chrono::steady_clock::now()));
    }
    if (!wait) return -1;
    return static_cast<int>(std::clamp<int64_t>(wait->count(), 0, kMaxDeadlineWaitMs));
  }

 private:
  static constexpr int64_t kMaxDeadlineWaitMs = 60'000;
  SandboxDeadlines deadlines_;
  std::chrono::steady_clock::time_point detached_at_ = std::chrono::steady_clock::now();
};

// Reads what a client sent on its attachment (kDeadlines; anything else is ignored); false once
// it closed.
bool read_attachment(int fd, DeadlineWatch& watch) {
  std::vector<char> buffer(sizeof(SupervisorRequest) + 1);
  ssize_t n = recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT);
  if (n < 0) return errno == EAGAIN || errno == EINTR;
  if (n == 0) return false;
  auto request = decode_request(buffer.data(), n);
  if (request && request->kind == Kind::kDeadlines) watch.set(deadlines_of(*request));
  return true;
}

}  // namespace

int serve_sandbox(const SandboxSpec& spec, const std::string& exec_socket,
                  const std::string& supervisor_socket, int ready_fd, MadeAhead made_ahead) {
  UniqueFd ready(ready_fd);
  auto fail = [&](const Error& error) {
    write_ready(ready.get(), failed_ready(error));
    return 125;
  };
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop;
  sigemptyset(&stop);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaddset(&stop, sig);
  sigprocmask(SIG_BLOCK, &stop, nullptr);
  UniqueFd stop_signals(signalfd(-1, &stop, SFD_CLOEXEC | SFD_NONBLOCK));
  if (!stop_signals) return fail(sys_error("signalfd", "SIGTERM SIGINT SIGHUP").error());

  Prepared prepared;
  prepared.prebuilt_skeleton = std::move(made_ahead.skeleton);
  prepared.prebuilt_netns = std::move(made_ahead.netns);
  if (auto r = prepare(spec, prepared, false); !r) return fail(r.error());
  SocketPaths socket_paths(exec_socket, supervisor_socket);
  auto exec_listener = listen_unix(exec_socket);
  if (!exec_listener) return fail(exec_listener.error());
  auto requests = listen_unix(supervisor_socket);
  if (!requests) return fail(requests.error());
  prepared.child.exec_listen_fd = exec_listener->get();

  auto launched = launch_sandbox(prepared, false);
  if (!launched) return fail(launched.error());
  // The child holds them (or attached them already).
  made_ahead.volume_mounts.clear();
  made_ahead.bind_trees.clear();
  if (auto r = wait_until_serving(*launched); !r) return fail(r.error());
  exec_listener->reset();  // init has it
  auto self = read_proc_state(getpid());
  if (!self) return fail(self.error());
  ServeReady serving;
  serving.kind = ServeReady::Kind::kServing;
  serving.supervisor_pid = getpid();
  serving.init_pid = launched->init->pid();
  serving.supervisor_start_time = self->start_time;
  write_ready(ready.get(), serving);
  ready.reset();

  UniqueFd destroy_request;
  // Clients attached: the connections of their kAttach requests, kept open. While there is one,
  // it is in charge of the deadlines.
  std::vector<UniqueFd> attachments;
  DeadlineWatch deadlines;
  ProcessKeeper keeper;
  bool was_busy = false;
  bool expired = false;
  constexpr size_t kFixedFds = 4;
  for (bool serving = true; serving;) {
    const bool busy = keeper.running();
    if (was_busy && !busy) deadlines.detached();
    was_busy = busy;
    expired = attachments.empty() && deadlines.due(busy);
    if (expired) break;
    std::vector<pollfd> fds = {{launched->init->pidfd(), POLLIN, 0},
                               {stop_signals.get(), POLLIN, 0},
                               {requests->get(), POLLIN, 0},
                               {launched->sync.get(), POLLIN, 0}};
    for (const UniqueFd& attachment : attachments) fds.push_back({attachment.get(), POLLIN, 0});
    const size_t keeper_first = fds.size();
    keeper.add_pollfds(fds);
    if (poll(fds.data(), fds.size(), attachments.empty() ? deadlines.timeout_ms(busy) : -1) < 0)
      continue;
    if (fds[0].revents != 0 || fds[1].revents != 0) break;
    keeper.service(fds, keeper_first);
    if (fds[3].revents != 0) {
      SyncMessage ignored{};
      if (recv_sync(launched->sync.get(), &ignored, nullptr, nullptr, true) == 0)
        launched->sync.reset();
    }
    for (size_t i = attachments.size(); i-- > 0;) {
      if (fds[kFixedFds + i].revents == 0 || read_attachment(attachments[i].get(), deadlines))
        continue;
      attachments.erase(attachments.begin() + static_cast<std::ptrdiff_t>(i));
      if (attachments.empty()) deadlines.detached();
    }
    if (fds[2].revents & POLLIN) {
      UniqueFd conn(accept4(requests->get(), nullptr, nullptr, SOCK_CLOEXEC));
      if (!conn) continue;
      pollfd readable{conn.get(), POLLIN, 0};
      if (poll(&readable, 1, 1000) != 1) continue;
      Received received = receive(conn.get());
      if (received.keeper) {
        keeper.handle(conn.get(), *received.keeper, std::move(received.fds));
        continue;
      }
      if (!received.request && received.request.error().step == "keeper request") {
        const KeeperReply refused = keeper_error_reply(received.request.error());
        (void)send_with_fds(conn.get(), &refused, sizeof refused, nullptr, 0);
        continue;
      }
      if (!received.request) {
        send_reply(conn.get(), error_reply(received.request.error()));
        continue;
      }
      switch (received.request->kind) {
        case Kind::kDestroy:
          destroy_request = std::move(conn);
          serving = false;
          break;
        case Kind::kAttach:
          attach(launched->cgroup, conn.get());
          attachments.push_back(std::move(conn));
          break;
        case Kind::kSnapshot:
          send_reply(conn.get(),
                     received.fds.size() == 1
                         ? snapshot(launched->cgroup, launched->upper.get(), received.fds[0].get(),
                                    received.request->snapshot_name)
                         : error_reply(Error{"snapshot", "no destination directory"}));
          break;
        case Kind::kFreeze:
        case Kind::kThaw:
        case Kind::kStats:
          send_reply(conn.get(), answer_cgroup(launched->cgroup, received.request->kind));
          break;
        case Kind::kDeadlines:
          send_reply(conn.get(), error_reply(Error{"deadlines", "only on an attachment"}));
          break;
      }
    }
  }

  // Teardown: init's death takes every process of the namespace with it; then the cgroups.
  // A deadline may find the sandbox paused: a frozen cgroup v1 task takes SIGKILL only once
  // thawed.
  if (expired && launched->cgroup) (void)launched->cgroup->thaw();
  launched->init->kill();
  rusage usage{};
  SupervisorReply reply;
  reply.ok = 1;
  if (auto r = launched->init->reap(&usage); !r) reply = error_reply(r.error());
  // Every command died with init: the exits are recorded before the client hears "destroyed".
  keeper.finish_all();
  if (launched->cgroup) {
    if (auto r = launched->cgroup->destroy(); !r) reply = error_reply(r.error());
  }
  if (destroy_request) send_reply(destroy_request.get(), reply);
  // Ended by a deadline: no client will remove the sandbox's dir (nor read its log, in it).
  if (expired && !deadlines.state_dir().empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(deadlines.state_dir(), ignored);
  }
  return reply.ok != 0 ? 0 : 1;
}

}  // namespace hutch
