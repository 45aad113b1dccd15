// The HTTP face: listeners (unix socket, optional TCP with a bearer token) and the route wrapper
// that every handler runs in (request id, auth, concurrency cap, error mapping, logging), in
// server.cc; the route tables of sandbox_routes.cc (health, metrics, sandbox lifecycle, logs),
// exec_routes.cc, file_routes.cc and layer_routes.cc. Routes decode a request, call the service
// layer (daemon/service/), and encode its answer.
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "daemon/connection_guard.h"
#include "daemon/metrics.h"
#include "daemon/service/sandbox_registry.h"

namespace hutch::daemon {

namespace service {
class RecipeService;
}

struct ServerOptions {
  std::string socket_path = "/run/hutch/hutchd.sock";
  std::optional<std::string> tcp_host;  // --listen HOST:PORT
  int tcp_port = 0;
  std::string token;                      // required with TCP
  size_t max_concurrent = 64;             // requests in flight; more get 429
  size_t max_connections = 1024;          // open connections in total; more get 503
  size_t max_connections_per_peer = 128;  // per uid (unix socket) or address (TCP); more get 429
  double head_timeout_seconds = 10;       // to receive a whole request head; then 408
  uint64_t max_json_bytes = 8ull << 20;
  uint64_t max_file_bytes = 64ull << 20;
  uint64_t background_output_cap = 16ull << 20;
  int read_timeout_seconds = 30;
  int write_timeout_seconds = 60;
};

struct DaemonContext {
  ServerOptions options;
  SandboxRegistry& registry;
  Metrics& metrics;
  service::RecipeService& recipes;
};

// One request as the handlers see it.
struct Call {
  std::string request_id;
  // The concurrency slot; a streamed response keeps a copy until it ends.
  std::shared_ptr<void> slot;
};

using RouteHandler = std::function<void(Call&, const httplib::Request&, httplib::Response&)>;
using ReaderHandler = std::function<void(Call&, const httplib::Request&, httplib::Response&,
                                         const httplib::ContentReader&)>;

// The route table, installed on every listener.
class Routes {
 public:
  explicit Routes(DaemonContext& context) : context_(context) {}
  void get(const std::string& pattern, RouteHandler handler);
  void post(const std::string& pattern, RouteHandler handler);
  void del(const std::string& pattern, RouteHandler handler);
  void put_reader(const std::string& pattern, ReaderHandler handler);
  // Every method on `pattern` and any path under it (the sandbox port proxy): GET, HEAD and
  // OPTIONS bodies are read whole (bounded as JSON bodies are) and handed over as a reader too.
  void any_reader(const std::string& pattern, ReaderHandler handler);
  // A TCP request without the bearer token is let through when this accepts it: a route's own
  // credential (port tokens), which the route then checks itself. Set before install().
  void set_tcp_credential(std::function<bool(const httplib::Request&)> accepts) {
    tcp_credential_ = std::move(accepts);
  }
  // Called when the daemon stops, before it waits for requests in flight: routes whose requests
  // last as long as a client wants (tunnels, endless streams) end them.
  void on_stop(std::function<void()> hook) { stop_hooks_.push_back(std::move(hook)); }
  void stop() const {
    for (const auto& hook : stop_hooks_) hook();
  }
  // tcp: the listener requires the bearer token.
  void install(httplib::Server& server, bool tcp) const;

 private:
  struct Route {
    std::string method;
    std::string pattern;
    RouteHandler handler;
    ReaderHandler reader;
    bool counted = true;  // takes a concurrency slot (health and metrics do not)
  };
  httplib::Server::Handler wrap(const Route& route) const;
  httplib::Server::HandlerWithContentReader wrap_reader(const Route& route) const;
  void run(const Route& route, const httplib::Request& req, httplib::Response& res,
           const httplib::ContentReader* reader) const;
  DaemonContext& context_;
  std::vector<Route> routes_;
  std::function<bool(const httplib::Request&)> tcp_credential_;
  std::vector<std::function<void()>> stop_hooks_;
  mutable std::atomic<uint64_t> next_request_{1};
  mutable std::atomic<size_t> in_flight_{0};  // counted requests
};

// Helpers for handlers.
nlohmann::json parse_body(const httplib::Request& req);  // {} for an empty body
void send_json(httplib::Response& res, int status, const nlohmann::json& body);
std::string error_body(const std::string& code, const std::string& message);
std::string sandbox_id(const httplib::Request& req);  // the first route group

void add_lifecycle_routes(Routes& routes, DaemonContext& context);
void add_exec_routes(Routes& routes, DaemonContext& context);
void add_pty_routes(Routes& routes, DaemonContext& context);
void add_session_routes(Routes& routes, DaemonContext& context);
void add_watch_routes(Routes& routes, DaemonContext& context);
void add_file_routes(Routes& routes, DaemonContext& context);
void add_network_routes(Routes& routes, DaemonContext& context);
void add_secret_routes(Routes& routes, DaemonContext& context);
void add_volume_routes(Routes& routes, DaemonContext& context);

// httplib::Server whose connections the ConnectionGuard holds between requests
// (connection_guard.h), with its listening backlog raised: httplib listens with a backlog of 5,
// so a burst of new unix-socket connections gets EAGAIN (refused) instead of waiting.
//
// How the guard learns each connection's fd: httplib's accept loop hands every accepted socket
// to its task queue as an opaque closure that calls the virtual process_and_close_socket(sock)
// (the hook SSLServer overrides for its handshake). Our task queue runs that closure inline on
// the accept thread, and our override gives the socket to the guard. This keeps httplib's accept
// loop (wrapping the listening socket would mean writing our own) and costs no thread per
// connection (a task queue of threads would, which is what slow clients exhaust).
class Listener : public httplib::Server, public RequestServer {
 public:
  explicit Listener(ConnectionGuard& guard);
  bool raise_backlog(int backlog) { return ::listen(svr_sock_, backlog) == 0; }
  // Runs httplib's request processing for each whole head in the connection's buffer.
  bool serve(Connection& connection) override;

 private:
  bool process_and_close_socket(socket_t sock) override;
  ConnectionGuard& guard_;
};

class Daemon {
 public:
  Daemon(ServerOptions options, SandboxRegistry& registry, Metrics& metrics,
         service::RecipeService& recipes);
  // Stops (if stop() was not called) and waits for every request still running.
  ~Daemon();
  // Binds the listeners (the unix socket gets mode 0660). Errors are startup errors.
  Result<void> bind();
  // Serves on background threads.
  void start();
  // Stops accepting, lets in-flight requests finish for at most `grace`. false: some did not
  // (the destructor then waits for them).
  bool stop(std::chrono::seconds grace);

 private:
  DaemonContext context_;
  Routes routes_;
  std::unique_ptr<ConnectionGuard> guard_;  // before the listeners, which use it
  std::unique_ptr<Listener> unix_;
  std::unique_ptr<Listener> tcp_;
  std::vector<std::thread> threads_;  // the listeners' accept loops
  bool stopped_ = false;
};

}  // namespace hutch::daemon
