#include "daemon/connection_guard.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <array>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <string_view>
#include <vector>

#include "daemon/server.h"

namespace hutch::daemon {
namespace {

using namespace std::chrono_literals;

// A head longer than this is refused (431): httplib caps each line at 8 KiB but not their count.
constexpr size_t kMaxHeadBytes = 64 * 1024;
// How long a refused connection is read (and the bytes dropped) after its answer: closing a TCP
// socket with unread data sends a reset, which can destroy the answer before the client reads it.
constexpr auto kLinger = 2s;
// Deadlines are checked this often: scanning every parked connection on each readable event
// would cost O(connections) per dribbled byte.
constexpr auto kTick = 100ms;
constexpr size_t kReadChunk = 16 * 1024;

thread_local Connection* serving = nullptr;

const char* reason_phrase(int status) {
  switch (status) {
    case 408:
      return "Request Timeout";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    default:
      return "Service Unavailable";
  }
}

// An answer for a connection whose request httplib never parsed (refused at accept, head too
// slow or too large): a fixed response, then the connection closes.
std::string raw_answer(int status, const std::string& code, const std::string& message) {
  std::string body = error_body(code, message);
  return "HTTP/1.1 " + std::to_string(status) + " " + reason_phrase(status) +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

// What the per-peer cap counts: the uid of a unix-socket client (SO_PEERCRED, taken by the
// kernel at connect), the address of a TCP client (any port).
std::string peer_of(int fd) {
  sockaddr_storage local{};
  socklen_t length = sizeof(local);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) != 0) {
    spdlog::warn("getsockname(fd {}): {}", fd, std::strerror(errno));
    return "unknown";
  }
  if (local.ss_family == AF_UNIX) {
    ucred cred{};
    socklen_t size = sizeof(cred);
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &size) != 0) {
      spdlog::warn("getsockopt(SO_PEERCRED on fd {}): {}", fd, std::strerror(errno));
      return "unknown";
    }
    return "uid " + std::to_string(cred.uid);
  }
  sockaddr_storage remote{};
  length = sizeof(remote);
  char host[NI_MAXHOST] = "";
  if (::getpeername(fd, reinterpret_cast<sockaddr*>(&remote), &length) != 0) {
    spdlog::warn("getpeername(fd {}): {}", fd, std::strerror(errno));
    return "unknown";
  }
  int rc = ::getnameinfo(reinterpret_cast<sockaddr*>(&remote), length, host, sizeof(host), nullptr,
                         0, NI_NUMERICHOST);
  if (rc != 0) {
    spdlog::warn("getnameinfo(fd {}): {}", fd, ::gai_strerror(rc));
    return "unknown";
  }
  return host;
}

// Waits until `fd` is ready for `events`, at most `timeout`. false: timed out or poll failed.
bool wait_for(int fd, short events, std::chrono::milliseconds timeout) {
  pollfd entry{fd, events, 0};
  auto deadline = GuardClock::now() + timeout;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - GuardClock::now());
    int rc = ::poll(&entry, 1, static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (rc > 0) return true;
    if (rc == 0 || errno != EINTR) return false;
  }
}

std::string seconds_text(std::chrono::milliseconds duration) {
  double seconds = static_cast<double>(duration.count()) / 1000.0;
  std::string text = std::to_string(seconds);
  text.erase(text.find_last_not_of('0') + 1);
  if (text.ends_with('.')) text.pop_back();
  return text + " s";
}

}  // namespace

Connection* current_connection() { return serving; }

// ---- Connection ----

bool Connection::find_head() {
  // Only the bytes not looked at yet (and the three before: a terminator may straddle two
  // reads) are searched; a head found moves the mark past its end, where the next one starts.
  size_t from = std::max(offset_, scanned_ >= 3 ? scanned_ - 3 : 0);
  std::string_view unread(buffer_);
  unread.remove_prefix(from);
  size_t crlf = unread.find("\r\n\r\n");
  size_t lf = unread.find("\n\n");
  size_t end = std::min(crlf == std::string_view::npos ? crlf : crlf + 4,
                        lf == std::string_view::npos ? lf : lf + 2);
  scanned_ = end == std::string_view::npos ? buffer_.size() : from + end;
  return end != std::string_view::npos;
}

void Connection::compact() {
  buffer_.erase(0, offset_);
  scanned_ -= std::min(scanned_, offset_);
  offset_ = 0;
}

// ---- ConnectionStream ----

bool ConnectionStream::is_readable() const {
  return connection_.offset_ < connection_.buffer_.size() ||
         wait_for(connection_.fd(), POLLIN, options_.read_timeout);
}

bool ConnectionStream::is_writable() const {
  if (!wait_for(connection_.fd(), POLLOUT, options_.write_timeout)) return false;
  // As httplib's own stream: a client that has gone away (EOF or reset pending) is not
  // writable, so a streamed response stops at its next chunk.
  char byte;
  ssize_t n = ::recv(connection_.fd(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n > 0 || (n < 0 && (errno == EAGAIN || errno == EINTR));
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  std::string& buffer = connection_.buffer_;
  size_t& offset = connection_.offset_;
  if (offset == buffer.size() && size < kReadChunk) {
    // httplib reads a head one byte at a time: fill the buffer instead of a recv per byte.
    buffer.clear();
    offset = 0;
    connection_.scanned_ = 0;
    buffer.resize(kReadChunk);
    ssize_t n = -1;
    while (n < 0) {
      if (!wait_for(connection_.fd(), POLLIN, options_.read_timeout)) break;
      n = ::recv(connection_.fd(), buffer.data(), buffer.size(), 0);
      if (n < 0 && errno != EAGAIN && errno != EINTR) break;
    }
    buffer.resize(static_cast<size_t>(std::max<ssize_t>(n, 0)));
    if (n <= 0) return n;
  }
  if (offset < buffer.size()) {
    size_t n = std::min(size, buffer.size() - offset);
    std::memcpy(ptr, buffer.data() + offset, n);
    offset += n;
    return static_cast<ssize_t>(n);
  }
  for (;;) {
    if (!wait_for(connection_.fd(), POLLIN, options_.read_timeout)) return -1;
    ssize_t n = ::recv(connection_.fd(), ptr, size, 0);
    if (n >= 0 || (errno != EAGAIN && errno != EINTR)) return n;
  }
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  for (;;) {
    ssize_t n = ::send(connection_.fd(), ptr, size, MSG_NOSIGNAL);
    if (n >= 0) return n;
    if (errno == EINTR) continue;
    if (errno != EAGAIN || !wait_for(connection_.fd(), POLLOUT, options_.write_timeout)) return -1;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  ip = connection_.peer();
  port = 0;
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  ip.clear();
  port = 0;
}

// ---- the worker pool ----

// Threads for connections whose request head has arrived, grown on demand up to a cap (a
// fixed pool of N threads would be stalled by N long streamed execs). Requests beyond the
// concurrency cap are refused (429) by the route wrapper, not queued.
class ConnectionGuard::Workers {
 public:
  explicit Workers(size_t max_threads) : max_threads_(max_threads) {}

  void enqueue(std::function<void()> fn) {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(fn));
    // Idle workers that have not woken up yet count once: each takes one queued job.
    if (jobs_.size() > idle_ && threads_.size() < max_threads_) {
      threads_.emplace_back([this] { work(); });
    } else {
      ready_.notify_one();
    }
  }

  // Runs every queued job, then joins the threads.
  void shutdown() {
    {
      std::lock_guard lock(mutex_);
      shutdown_ = true;
    }
    ready_.notify_all();
    for (std::thread& thread : threads_) thread.join();
    threads_.clear();
  }

 private:
  void work() {
    std::unique_lock lock(mutex_);
    for (;;) {
      ++idle_;
      ready_.wait(lock, [&] { return shutdown_ || !jobs_.empty(); });
      --idle_;
      if (jobs_.empty()) return;  // shutdown
      auto fn = std::move(jobs_.front());
      jobs_.pop_front();
      lock.unlock();
      fn();
      lock.lock();
    }
  }

  size_t max_threads_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

// ---- ConnectionGuard ----

Result<std::unique_ptr<ConnectionGuard>> ConnectionGuard::create(GuardOptions options) {
  UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
  if (!epoll) return sys_error("epoll_create1", "connection guard");
  UniqueFd wake(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!wake) return sys_error("eventfd", "connection guard");
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wake.get();
  if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, wake.get(), &event) != 0)
    return sys_error("epoll_ctl", "EPOLL_CTL_ADD eventfd " + std::to_string(wake.get()));
  return std::unique_ptr<ConnectionGuard>(
      new ConnectionGuard(std::move(options), std::move(epoll), std::move(wake)));
}

ConnectionGuard::ConnectionGuard(GuardOptions options, UniqueFd epoll, UniqueFd wake)
    : options_(std::move(options)),
      epoll_(std::move(epoll)),
      wake_(std::move(wake)),
      workers_(std::make_unique<Workers>(options_.max_connections)),
      loop_thread_([this] { loop(); }) {}

ConnectionGuard::~ConnectionGuard() {
  if (loop_thread_.joinable()) shutdown();
}

void ConnectionGuard::admit(UniqueFd fd, RequestServer& server) {
  int raw = fd.get();
  auto connection = std::make_unique<Connection>(std::move(fd), peer_of(raw), server);
  int flags = ::fcntl(raw, F_GETFL);
  if (flags < 0 || ::fcntl(raw, F_SETFL, flags | O_NONBLOCK) != 0) {
    spdlog::warn("fcntl(O_NONBLOCK on fd {}): {}", raw, std::strerror(errno));
    return;
  }
  std::lock_guard lock(mutex_);
  if (closed_) return;
  if (open_ >= options_.max_connections) {
    refuse(std::move(connection), 503, "connection_limit",
           "hutchd has " + std::to_string(open_) +
               " connections open (--max-connections); retry later",
           false);
    return;
  }
  auto it = per_peer_.find(connection->peer());
  if (it != per_peer_.end() && it->second >= options_.max_connections_per_peer) {
    refuse(std::move(connection), 429, "too_many_connections",
           connection->peer() + " has " + std::to_string(it->second) +
               " connections open (--max-connections-per-peer); close some or retry later",
           false);
    return;
  }
  ++per_peer_[connection->peer()];
  ++open_;
  connection->counted_ = true;
  connection->phase_ = Connection::Phase::kHead;
  connection->deadline_ = GuardClock::now() + options_.head_timeout;
  park(std::move(connection), false);
}

void ConnectionGuard::loop() {
  std::array<epoll_event, 64> events;
  auto next_tick = GuardClock::now() + kTick;
  for (;;) {
    auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(next_tick - GuardClock::now());
    int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()),
                         static_cast<int>(std::max<int64_t>(left.count(), 0)));
    if (n < 0 && errno != EINTR) {
      spdlog::error("epoll_wait(connection guard): {}", std::strerror(errno));
      std::this_thread::sleep_for(kTick);
    }
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_.get()) return;
      on_readable(events[i].data.fd);
    }
    auto now = GuardClock::now();
    if (now >= next_tick) {
      expire(now);
      next_tick = now + kTick;
    }
  }
}

void ConnectionGuard::on_readable(int fd) {
  std::lock_guard lock(mutex_);
  auto it = parked_.find(fd);
  if (it == parked_.end()) return;
  Connection& connection = *it->second;
  char chunk[kReadChunk];
  ssize_t n = ::recv(fd, chunk, sizeof(chunk), 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
    auto taken = std::move(it->second);
    parked_.erase(it);
    park(std::move(taken), true);
    return;
  }
  if (n <= 0) {  // the client closed (or reset) the connection
    auto taken = std::move(it->second);
    parked_.erase(it);
    drop(std::move(taken));
    return;
  }
  auto taken = std::move(it->second);
  parked_.erase(it);
  if (connection.phase_ == Connection::Phase::kDrain) {
    park(std::move(taken), true);
    return;
  }
  if (connection.phase_ == Connection::Phase::kIdle) {
    // The head's deadline counts from its first byte; before it, the keep-alive timeout.
    connection.phase_ = Connection::Phase::kHead;
    connection.deadline_ = GuardClock::now() + options_.head_timeout;
  }
  connection.buffer_.append(chunk, static_cast<size_t>(n));
  if (connection.find_head()) {
    dispatch(std::move(taken));
  } else if (connection.buffer_.size() - connection.offset_ > kMaxHeadBytes) {
    refuse(std::move(taken), 431, "request_head_too_large",
           "the request head is over " + std::to_string(kMaxHeadBytes) + " bytes", true);
  } else {
    park(std::move(taken), true);
  }
}

void ConnectionGuard::expire(GuardClock::time_point now) {
  std::lock_guard lock(mutex_);
  std::vector<int> due;
  for (const auto& [fd, connection] : parked_) {
    if (connection->deadline_ <= now) due.push_back(fd);
  }
  for (int fd : due) {
    auto node = parked_.extract(fd);
    std::unique_ptr<Connection> connection = std::move(node.mapped());
    if (connection->phase_ == Connection::Phase::kHead) {
      refuse(std::move(connection), 408, "request_timeout",
             "the request head did not arrive within " + seconds_text(options_.head_timeout) +
                 " (--head-timeout)",
             true);
    } else {
      drop(std::move(connection));  // idle past the keep-alive timeout, or done lingering
    }
  }
}

void ConnectionGuard::dispatch(std::unique_ptr<Connection> connection) {
  ++busy_;
  // std::function must be copyable: the job owns the connection through a raw pointer, and
  // every queued job runs (Workers::shutdown drains the queue).
  workers_->enqueue([this, raw = connection.release()] {
    std::unique_ptr<Connection> owned(raw);
    serving = owned.get();
    bool keep = false;
    try {
      keep = owned->server().serve(*owned);
    } catch (const std::exception& e) {
      spdlog::error("peer={} request failed outside its route: {}", owned->peer(), e.what());
    }
    serving = nullptr;
    finish(std::move(owned), keep);
    --busy_;
  });
}

void ConnectionGuard::finish(std::unique_ptr<Connection> connection, bool keep) {
  std::lock_guard lock(mutex_);
  if (closed_) {
    drop(std::move(connection));
  } else if (!keep) {
    if (connection->closing()) {
      linger(std::move(connection), true);
    } else {
      drop(std::move(connection));
    }
  } else {
    connection->compact();
    bool partial = !connection->buffer_.empty();
    connection->phase_ = partial ? Connection::Phase::kHead : Connection::Phase::kIdle;
    connection->deadline_ =
        GuardClock::now() + (partial ? options_.head_timeout : options_.keep_alive_timeout);
    park(std::move(connection), true);
  }
}

void ConnectionGuard::park(std::unique_ptr<Connection> connection, bool added) {
  // One-shot: a parked connection is looked at once per readable event, and not at all while a
  // worker serves it.
  epoll_event event{};
  event.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
  event.data.fd = connection->fd();
  if (::epoll_ctl(epoll_.get(), added ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, connection->fd(), &event) !=
      0) {
    spdlog::warn("epoll_ctl({} fd {}): {}", added ? "EPOLL_CTL_MOD" : "EPOLL_CTL_ADD",
                 connection->fd(), std::strerror(errno));
    drop(std::move(connection));
    return;
  }
  int fd = connection->fd();
  parked_[fd] = std::move(connection);
}

void ConnectionGuard::refuse(std::unique_ptr<Connection> connection, int status,
                             const std::string& code, const std::string& message, bool added) {
  spdlog::info("peer={} connection refused: {} {}: {}", connection->peer(), status, code, message);
  std::string answer = raw_answer(status, code, message);
  // A fresh socket's send buffer takes the whole answer; a client that does not read it loses
  // nothing it could use.
  if (::send(connection->fd(), answer.data(), answer.size(), MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
    spdlog::debug("send(refusal to fd {}): {}", connection->fd(), std::strerror(errno));
  linger(std::move(connection), added);
}

void ConnectionGuard::linger(std::unique_ptr<Connection> connection, bool added) {
  release(*connection);
  if (lingering_ >= options_.max_connections) {
    connection.reset();  // a flood of refused clients: no more lingering
    return;
  }
  // The client sees the end of the answer at once; what it still sends is read and dropped.
  ::shutdown(connection->fd(), SHUT_WR);
  ++lingering_;
  connection->phase_ = Connection::Phase::kDrain;
  connection->deadline_ = GuardClock::now() + kLinger;
  park(std::move(connection), added);
}

void ConnectionGuard::drop(std::unique_ptr<Connection> connection) {
  if (connection->phase_ == Connection::Phase::kDrain) --lingering_;
  release(*connection);
}

void ConnectionGuard::release(Connection& connection) {
  if (!connection.counted_) return;
  connection.counted_ = false;
  --open_;
  auto it = per_peer_.find(connection.peer());
  if (it != per_peer_.end() && --it->second == 0) per_peer_.erase(it);
}

void ConnectionGuard::close_parked() {
  std::lock_guard lock(mutex_);
  closed_ = true;
  for (auto& [fd, connection] : parked_) drop(std::move(connection));
  parked_.clear();
}

void ConnectionGuard::shutdown() {
  close_parked();
  workers_->shutdown();
  uint64_t one = 1;
  if (::write(wake_.get(), &one, sizeof(one)) != sizeof(one))
    spdlog::warn("write(eventfd {}): {}", wake_.get(), std::strerror(errno));
  loop_thread_.join();
}

}  // namespace hutch::daemon
