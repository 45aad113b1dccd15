// The connection guard: what hutchd puts around cpp-httplib so that slow or hostile clients cannot
// take the server from anyone else.
//
// httplib serves a connection on one thread from accept to close, and reads a request head with
// a per-read timeout only: N clients dribbling a byte every few seconds hold N threads for ever,
// and everyone after them waits in the queue. The guard instead parks every connection that is
// between requests in one epoll loop (no thread), reads its head there against a total deadline,
// and hands it to a worker only once the whole head is buffered. A worker runs httplib's own
// request processing (Server::process_request) over a Stream on that buffer, then gives the
// connection back. Past the caps (connections per peer, connections in total) a new connection
// gets its 429/503 at once instead of a place in a queue.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "runtime/base/error.h"
#include "runtime/base/unique_fd.h"

namespace hutch::daemon {

using GuardClock = std::chrono::steady_clock;

struct GuardOptions {
  size_t max_connections = 1024;          // open connections in total; more get 503
  size_t max_connections_per_peer = 128;  // per uid (unix socket) or address (TCP); more get 429
  std::chrono::milliseconds head_timeout{10000};       // a request head must arrive whole in it
  std::chrono::milliseconds keep_alive_timeout{5000};  // idle between two requests
  std::chrono::milliseconds read_timeout{30000};       // each read of a body
  std::chrono::milliseconds write_timeout{60000};      // each write of a response
};

class Connection;

// Serves the requests whose heads are in `connection`'s buffer. true: keep the connection open
// for the next request.
class RequestServer {
 public:
  virtual ~RequestServer() = default;
  virtual bool serve(Connection& connection) = 0;
};

// One accepted socket, its peer and the bytes read from it that httplib has not consumed yet.
class Connection {
 public:
  Connection(UniqueFd fd, std::string peer, RequestServer& server)
      : fd_(std::move(fd)), peer_(std::move(peer)), server_(server) {}
  int fd() const { return fd_.get(); }
  // "uid 1000" (unix socket, from SO_PEERCRED) or "127.0.0.1" (TCP): what the per-peer cap
  // counts.
  const std::string& peer() const { return peer_; }
  RequestServer& server() const { return server_; }
  // Whether the buffer holds a whole request head (up to its empty line). Not an HTTP parser:
  // httplib parses the head; this only tells when it has all arrived.
  bool find_head();
  // After the current request: close the connection (lingering, so the client reads the answer
  // even while it is still sending a body nobody will read).
  void close_after_response() { close_after_response_ = true; }
  bool closing() const { return close_after_response_; }
  size_t requests = 0;  // served on this connection

 private:
  friend class ConnectionStream;
  friend class ConnectionGuard;
  UniqueFd fd_;
  std::string peer_;
  RequestServer& server_;
  void compact();       // drops the consumed bytes
  std::string buffer_;  // read, not yet consumed (from offset_)
  size_t offset_ = 0;
  size_t scanned_ = 0;  // find_head has looked at buffer_ up to here
  bool close_after_response_ = false;
  bool counted_ = false;  // counts against the caps
  enum class Phase { kHead, kIdle, kDrain } phase_ = Phase::kHead;
  GuardClock::time_point deadline_{};
};

// httplib's view of a Connection: reads come from the buffer first, then from the socket (each
// waiting at most the read timeout); writes wait at most the write timeout.
class ConnectionStream : public httplib::Stream {
 public:
  ConnectionStream(Connection& connection, const GuardOptions& options)
      : connection_(connection), options_(options) {}
  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return connection_.fd(); }

 private:
  Connection& connection_;
  const GuardOptions& options_;
};

// The connection currently served on this thread (set by the guard around RequestServer::serve):
// httplib's hooks (pre-routing, Expect: 100-continue) see only the request, and refusing one
// must also close its connection. nullptr outside a request.
Connection* current_connection();

class ConnectionGuard {
 public:
  // Starts the epoll loop (epoll_create1, eventfd).
  static Result<std::unique_ptr<ConnectionGuard>> create(GuardOptions options);
  ~ConnectionGuard();
  ConnectionGuard(const ConnectionGuard&) = delete;
  ConnectionGuard& operator=(const ConnectionGuard&) = delete;

  // Takes an accepted socket: refuses it (429/503) past a cap, else parks it until its first
  // request head has arrived. Called on the listener's accept thread; never blocks.
  void admit(UniqueFd fd, RequestServer& server);
  // Closes every parked connection (idle or with a head still arriving) and refuses new ones;
  // requests being served finish, then their connections close.
  void close_parked();
  // Requests being served right now.
  size_t busy() const { return busy_.load(); }
  // Joins the loop and the workers (after close_parked; waits for busy requests).
  void shutdown();

  const GuardOptions& options() const { return options_; }

 private:
  class Workers;
  ConnectionGuard(GuardOptions options, UniqueFd epoll, UniqueFd wake);
  void loop();
  void on_readable(int fd);
  void expire(GuardClock::time_point now);
  // Hands a connection whose head has arrived to a worker (mutex_ held).
  void dispatch(std::unique_ptr<Connection> connection);
  void finish(std::unique_ptr<Connection> connection, bool keep);
  // Parks `connection` in epoll (mutex_ held).
  void park(std::unique_ptr<Connection> connection, bool added);
  // Writes a fixed error answer, then lingers (mutex_ held).
  void refuse(std::unique_ptr<Connection> connection, int status, const std::string& code,
              const std::string& message, bool added);
  // Half-closes, then reads and drops what the client still sends for a while (mutex_ held).
  void linger(std::unique_ptr<Connection> connection, bool added);
  // Closes (mutex_ held).
  void drop(std::unique_ptr<Connection> connection);
  void release(Connection& connection);

  GuardOptions options_;
  UniqueFd epoll_;
  UniqueFd wake_;  // eventfd: shutdown
  std::unique_ptr<Workers> workers_;

  std::mutex mutex_;
  std::unordered_map<int, std::unique_ptr<Connection>> parked_;
  std::map<std::string, size_t> per_peer_;  // open connections (parked or served) per peer
  size_t open_ = 0;
  size_t lingering_ = 0;
  bool closed_ = false;
  std::atomic<size_t> busy_{0};
  std::thread loop_thread_;  // last: it starts in the constructor and uses every member above
};

}  // namespace hutch::daemon
