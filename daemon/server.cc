#include "daemon/server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <string_view>

#include "daemon/errors.h"
#include "daemon/json_codec.h"
#include "daemon/layer_routes.h"
#include "daemon/port_routes.h"
#include "daemon/service/port_service.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

const char* status_code_name(int status) {
  switch (status) {
    case 400:
      return "bad_request";
    case 401:
      return "unauthorized";
    case 403:
      return "permission_denied";
    case 404:
      return "not_found";
    case 405:
      return "method_not_allowed";
    case 408:
      return "request_timeout";
    case 413:
      return "payload_too_large";
    case 414:
      return "uri_too_long";
    case 429:
      return "too_many_requests";
    case 503:
      return "unavailable";
    default:
      return status >= 500 ? "runtime_error" : "bad_request";
  }
}

// Whether `path` fits a route pattern, segment by segment: a "(...)" segment matches any
// non-empty segment; `prefix`: any path under it fits too. (The routes' own regexes are httplib's;
// this only tells 404 from 405 and finds reader routes, and avoids instantiating std::regex here,
// which GCC 12 -Wmaybe-uninitialized trips on under ASan.)
bool path_matches(std::string_view pattern, std::string_view path, bool prefix = false) {
  auto next = [](std::string_view& text) {
    size_t slash = text.find('/', 1);
    std::string_view segment = text.substr(0, slash);
    text = slash == std::string_view::npos ? std::string_view() : text.substr(slash);
    return segment;
  };
  while (!pattern.empty() && !path.empty()) {
    std::string_view want = next(pattern), got = next(path);
    if (want.starts_with("/(")) {
      if (got.size() <= 1) return false;
    } else if (want != got) {
      return false;
    }
  }
  return pattern.empty() && (path.empty() || prefix);
}

// The methods whose bodies httplib hands to a content reader; other methods' bodies it reads
// whole.
bool has_reader(const std::string& method) {
  return method == "POST" || method == "PUT" || method == "PATCH" || method == "DELETE";
}

// Gives a concurrency slot back when the last copy of Call::slot goes.
struct SlotRelease {
  explicit SlotRelease(std::atomic<size_t>& in_flight) : in_flight(in_flight) {}
  ~SlotRelease() { in_flight.fetch_sub(1); }
  std::atomic<size_t>& in_flight;
};

// Framing that two parties could read two ways (RFC 9112 6.3: request smuggling through a proxy,
// or a body left unread that becomes the next "request"), which httplib would guess at: it
// prefers a Transfer-Encoding it compares case-insensitively, reads the first of two
// Content-Lengths with strtoull (so "-1" is 2^64-1 and "abc" is 0), and reads and discards a
// body over its cap before answering 413. Refused before the body is read; the connection then
// closes. `limit`: the largest body the route takes.
std::optional<ApiError> check_framing(const httplib::Request& req, uint64_t limit) {
  size_t lengths = req.get_header_value_count("Content-Length");
  size_t encodings = req.get_header_value_count("Transfer-Encoding");
  if (lengths > 0 && encodings > 0)
    return ApiError(400, "invalid_framing", "both Content-Length and Transfer-Encoding are set");
  if (encodings > 0) {
    std::string encoding = req.get_header_value("Transfer-Encoding");
    if (encodings > 1 || encoding != "chunked")
      return ApiError(400, "invalid_framing",
                      "Transfer-Encoding must be exactly \"chunked\", got \"" + encoding + "\"" +
                          (encodings > 1 ? " and more" : ""));
    return std::nullopt;
  }
  if (lengths == 0) return std::nullopt;
  std::string length = req.get_header_value("Content-Length");
  for (size_t i = 1; i < lengths; ++i) {
    if (req.get_header_value("Content-Length", i) != length)
      return ApiError(400, "invalid_framing", "two different Content-Length values");
  }
  // 19 digits fit a uint64_t.
  if (length.empty() || length.size() > 19 ||
      length.find_first_not_of("0123456789") != std::string::npos)
    return ApiError(
        400, "invalid_framing",
        "Content-Length must be a decimal number of bytes, got \"" + length.substr(0, 40) + "\"");
  if (std::stoull(length) > limit)
    return ApiError(413, "payload_too_large",
                    "Content-Length " + length + " is over this route's limit of " +
                        std::to_string(limit) + " bytes");
  return std::nullopt;
}

// Sets `res` to the error and closes the connection after the answer.
void refuse_request(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  res.set_header("Connection", "close");
  res.set_content(error_body(error.code, error.message), "application/json");
  if (Connection* connection = current_connection()) connection->close_after_response();
}

}  // namespace

// ---- helpers ----

json parse_body(const httplib::Request& req) {
  if (req.body.empty()) return json::object();
  // nlohmann keeps the last of two equal keys; a body naming a field twice is refused instead
  // (two readers of one body must not see two requests). The callback sees each object's keys.
  std::vector<std::vector<std::string>> keys;  // one list per open object
  auto refuse_duplicates = [&keys](int, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
        keys.emplace_back();
        break;
      case json::parse_event_t::object_end:
        keys.pop_back();
        break;
      case json::parse_event_t::key: {
        std::string key = parsed.get<std::string>();
        if (std::ranges::find(keys.back(), key) != keys.back().end())
          throw ApiError(400, "duplicate_key",
                         "key \"" + key + "\" appears twice in one object of the body");
        keys.back().push_back(std::move(key));
        break;
      }
      default:
        break;
    }
    return true;
  };
  // Throws json::parse_error: the wrapper answers invalid_json.
  return json::parse(req.body, refuse_duplicates);
}

void send_json(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump_json(body), "application/json");
}

std::string error_body(const std::string& code, const std::string& message) {
  return dump_json({{"error", {{"code", code}, {"message", message}}}});
}

std::string sandbox_id(const httplib::Request& req) {
  return req.matches.size() > 1 ? req.matches[1].str() : "";
}

// ---- Routes ----

void Routes::get(const std::string& pattern, RouteHandler handler) {
  bool counted = pattern != "/v1/health" && pattern != "/metrics";
  routes_.push_back({"GET", pattern, std::move(handler), nullptr, counted});
}
void Routes::post(const std::string& pattern, RouteHandler handler) {
  routes_.push_back({"POST", pattern, std::move(handler), nullptr, true});
}
void Routes::del(const std::string& pattern, RouteHandler handler) {
  routes_.push_back({"DELETE", pattern, std::move(handler), nullptr, true});
}
void Routes::put_reader(const std::string& pattern, ReaderHandler handler) {
  routes_.push_back({"PUT", pattern, nullptr, std::move(handler), true});
}
void Routes::any_reader(const std::string& pattern, ReaderHandler handler) {
  routes_.push_back({"*", pattern, nullptr, std::move(handler), true});
}

void Routes::run(const Route& route, const httplib::Request& req, httplib::Response& res,
                 const httplib::ContentReader* reader) const {
  auto started = Clock::now();
  Call call{"r" + std::to_string(next_request_.fetch_add(1)), nullptr};
  context_.metrics.count_request();
  res.set_header("X-Request-Id", call.request_id);
  std::string code;
  std::string message;  // logged for a 5xx: this is the one place a failure is logged
  try {
    if (route.counted) {
      if (in_flight_.fetch_add(1) >= context_.options.max_concurrent) {
        in_flight_.fetch_sub(1);
        throw ApiError(429, "too_many_requests",
                       "more than " + std::to_string(context_.options.max_concurrent) +
                           " requests in flight; retry later");
      }
      call.slot = std::make_shared<SlotRelease>(in_flight_);
    }
    // (A reader route's body is still unread here: req.body is empty.)
    if (req.body.size() > context_.options.max_json_bytes)
      throw ApiError(413, "payload_too_large",
                     "JSON bodies are limited to " +
                         std::to_string(context_.options.max_json_bytes) + " bytes");
    if (reader != nullptr) {
      route.reader(call, req, res, *reader);
    } else {
      route.handler(call, req, res);
    }
  } catch (const ApiError& e) {
    code = e.code;
    message = e.message;
    res.status = e.status;
  } catch (const json::exception& e) {
    code = "invalid_json";
    message = e.what();
    res.status = 400;
  } catch (const std::exception& e) {
    code = "runtime_error";
    message = e.what();
    res.status = 500;
  }
  if (!code.empty()) res.set_content(error_body(code, message), "application/json");
  if (!code.empty()) context_.metrics.count_error(code);
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - started).count();
  std::string id = sandbox_id(req);
  auto level = res.status >= 500 ? spdlog::level::warn : spdlog::level::debug;
  if (route.method != "GET" || res.status >= 400) level = std::max(level, spdlog::level::info);
  spdlog::log(level, "sandbox={} request={} {} {} -> {}{}{} ({:.2f} ms){}{}", id.empty() ? "-" : id,
              call.request_id, req.method, req.path, res.status, code.empty() ? "" : " ", code, ms,
              res.status >= 500 && !message.empty() ? ": " : "",
              res.status >= 500 ? message : std::string());
}

httplib::Server::Handler Routes::wrap(const Route& route) const {
  return [this, route](const httplib::Request& req, httplib::Response& res) {
    run(route, req, res, nullptr);
  };
}

httplib::Server::HandlerWithContentReader Routes::wrap_reader(const Route& route) const {
  return [this, route](const httplib::Request& req, httplib::Response& res,
                       const httplib::ContentReader& reader) { run(route, req, res, &reader); };
}

void Routes::install(httplib::Server& server, bool tcp) const {
  for (const Route& route : routes_) {
    if (route.method == "GET") server.Get(route.pattern, wrap(route));
    if (route.method == "POST") server.Post(route.pattern, wrap(route));
    if (route.method == "DELETE") server.Delete(route.pattern, wrap(route));
    if (route.method == "PUT") server.Put(route.pattern, wrap_reader(route));
    if (route.method == "*") {
      // httplib tries a POST's content-reader routes before its other routes: the paths of the
      // routes under this one are left out of it here instead (as non-capturing groups, so that
      // the capture groups keep their numbers).
      std::string others;
      for (const Route& other : routes_) {
        if (other.method == "*" || !other.pattern.starts_with(route.pattern + "/")) continue;
        std::string tail = other.pattern.substr(route.pattern.size());
        for (size_t at = tail.find("(["); at != std::string::npos; at = tail.find("([", at))
          tail.replace(at, 1, "(?:");
        others += (others.empty() ? "" : "|") + tail;
      }
      const std::string any =
          route.pattern + (others.empty() ? "" : "(?!(?:" + others + ")$)") + "(/.*)?";
      server.Post(any, wrap_reader(route));
      server.Put(any, wrap_reader(route));
      server.Patch(any, wrap_reader(route));
      server.Delete(any, wrap_reader(route));
      auto whole = [this, route](const httplib::Request& req, httplib::Response& res) {
        httplib::ContentReader body(
            [&req](httplib::ContentReceiver receive) {
              return req.body.empty() || receive(req.body.data(), req.body.size());
            },
            [](httplib::MultipartContentHeader, httplib::ContentReceiver) { return false; });
        run(route, req, res, &body);
      };
      server.Get(any, whole);
      server.Options(any, whole);
    }
  }
  const ServerOptions& options = context_.options;
  // Bodies of content-reader routes (file PUT) stream to the sandbox's disk quota; every other body
  // is JSON, read whole, up to max_json_bytes.
  const uint64_t unbounded = std::numeric_limits<uint64_t>::max();
  struct Shape {
    std::string method, pattern;
    bool reader;
  };
  std::vector<Shape> shapes;
  for (const Route& route : routes_)
    shapes.push_back({route.method, route.pattern, route.reader != nullptr});
  auto framing_error = [&options, unbounded, shapes](const httplib::Request& req) {
    // A route's own path wins over an any-method route's ("*") paths under it.
    bool exact = false, reader = false;
    for (const Shape& shape : shapes) {
      if (shape.method == "*" || !path_matches(shape.pattern, req.path)) continue;
      exact = true;
      reader = reader || (shape.reader && shape.method == req.method);
    }
    for (const Shape& shape : shapes) {
      if (!exact && shape.method == "*" && has_reader(req.method))
        reader = reader || path_matches(shape.pattern, req.path, true);
    }
    return check_framing(req, reader ? unbounded : options.max_json_bytes);
  };
  // Before the body is read: framing (a refusal closes the connection, so the unread body is
  // never taken for a request), then authentication (TCP).
  server.set_pre_routing_handler(
      [&options, tcp, framing_error, this](const httplib::Request& req, httplib::Response& res) {
        if (auto error = framing_error(req)) {
          refuse_request(res, *error);
          return httplib::Server::HandlerResponse::Handled;
        }
        if (tcp) {
          std::string header = req.get_header_value("Authorization");
          bool ok = header.starts_with("Bearer ") &&
                    service::constant_time_equal(header.substr(7), options.token);
          if (!ok && tcp_credential_) ok = tcp_credential_(req);
          if (!ok) {
            res.set_header("WWW-Authenticate", "Bearer");
            refuse_request(res, ApiError(401, "unauthorized", "a valid bearer token is required"));
            return httplib::Server::HandlerResponse::Handled;
          }
        }
        return httplib::Server::HandlerResponse::Unhandled;
      });
  // httplib answers "100 Continue" before routing: a body that will be refused is refused
  // instead of invited.
  server.set_expect_100_continue_handler(
      [framing_error](const httplib::Request& req, httplib::Response& res) {
        if (auto error = framing_error(req)) {
          refuse_request(res, *error);
          return error->status;
        }
        return 100;
      });
  // httplib's own errors (no route, body over the cap, bad request line) get the JSON shape
  // too; a path that exists under another method is a 405.
  std::vector<std::pair<std::string, std::string>> patterns;
  for (const Route& route : routes_) {
    if (route.method != "*") patterns.emplace_back(route.pattern, route.method);
  }
  server.set_error_handler(httplib::Server::HandlerWithResponse(
      [patterns](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty() || res.content_provider_)
          return httplib::Server::HandlerResponse::Unhandled;
        if (res.status == 404) {
          std::string allowed;
          for (const auto& [pattern, method] : patterns) {
            if (path_matches(pattern, req.path) && allowed.find(method) == std::string::npos)
              allowed += (allowed.empty() ? "" : ", ") + method;
          }
          if (!allowed.empty()) {
            res.status = 405;
            res.set_header("Allow", allowed);
            res.set_content(error_body("method_not_allowed",
                                       req.method + " " + req.path + ": allowed " + allowed),
                            "application/json");
            return httplib::Server::HandlerResponse::Handled;
          }
          res.set_content(error_body("not_found", "no route " + req.method + " " + req.path),
                          "application/json");
          return httplib::Server::HandlerResponse::Handled;
        }
        std::string message = "HTTP " + std::to_string(res.status);
        // cpp-httplib parses form bodies itself and caps them at 8 KiB: `curl -d` sends JSON
        // with this type unless told otherwise.
        if (res.status == 413 &&
            req.get_header_value("Content-Type") == "application/x-www-form-urlencoded") {
          message +=
              ": bodies sent as application/x-www-form-urlencoded are limited to 8 KiB;"
              " send JSON with Content-Type: application/json";
        }
        res.set_content(error_body(status_code_name(res.status), message), "application/json");
        return httplib::Server::HandlerResponse::Handled;
      }));
  // File PUTs stream to disk with no cap but the sandbox's disk quota (the framing check gives
  // them no Content-Length bound); every other body is JSON, bounded before it is read.
  server.set_payload_max_length(std::numeric_limits<size_t>::max());
  // Timeouts (head, keep-alive, reads, writes) are the connection guard's.
  server.set_keep_alive_max_count(1000);
}

// ---- Listener ----

namespace {

// Runs each accept's closure at once, on the accept thread: it only hands the socket to the
// guard (see Listener in server.h).
class InlineQueue : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

}  // namespace

Listener::Listener(ConnectionGuard& guard) : guard_(guard) {
  new_task_queue = [] { return new InlineQueue; };
}

bool Listener::process_and_close_socket(socket_t sock) {
  guard_.admit(UniqueFd(sock), *this);
  return true;
}

bool Listener::serve(Connection& connection) {
  ConnectionStream stream(connection, guard_.options());
  // A request with neither Content-Length nor Transfer-Encoding has no body (RFC 9112 6.3);
  // httplib would read one until the client closes (`curl -X POST` with no data waits for ever).
  auto no_framing_no_body = [](httplib::Request& req) {
    if (!req.has_header("Content-Length") && !req.has_header("Transfer-Encoding"))
      req.set_header("Content-Length", "0");
  };
  do {
    bool last = ++connection.requests >= keep_alive_max_count_;
    bool client_closes = false;
    if (!process_request(stream, last, client_closes, no_framing_no_body)) return false;
    if (last || client_closes || connection.closing()) return false;
  } while (connection.find_head());  // pipelined: the next head is already here
  return true;
}

// ---- Daemon ----

Daemon::Daemon(ServerOptions options, SandboxRegistry& registry, Metrics& metrics,
               service::RecipeService& recipes)
    : context_{std::move(options), registry, metrics, recipes}, routes_(context_) {
  add_lifecycle_routes(routes_, context_);
  add_exec_routes(routes_, context_);
  add_pty_routes(routes_, context_);
  add_session_routes(routes_, context_);
  add_watch_routes(routes_, context_);
  add_file_routes(routes_, context_);
  add_network_routes(routes_, context_);
  add_secret_routes(routes_, context_);
  add_volume_routes(routes_, context_);
  add_layer_routes(routes_, registry, recipes);
  add_port_routes(routes_, context_);
}

// Safe whatever stop() returned: the listener threads end once stopped, and the guard's shutdown
// waits for the requests still running (they use the routes, the context and the listeners).
Daemon::~Daemon() {
  if (!stopped_) (void)stop(std::chrono::seconds(0));
  guard_.reset();  // before the listeners its workers serve through
}

Result<void> Daemon::bind() {
  const std::string& path = context_.options.socket_path;
  std::error_code ignored;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ignored);
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) return plain_error("listen", path + " exists and is not a socket");
    // A socket someone answers on belongs to a running hutchd: never steal it.
    httplib::Client probe(path);
    probe.set_address_family(AF_UNIX);
    probe.set_connection_timeout(1);
    if (probe.Get("/v1/health")) return plain_error("listen", "another hutchd serves " + path);
    ::unlink(path.c_str());
  }
  const ServerOptions& options = context_.options;
  GuardOptions limits;
  limits.max_connections = options.max_connections;
  limits.max_connections_per_peer = options.max_connections_per_peer;
  limits.head_timeout = std::chrono::milliseconds(
      static_cast<int64_t>(std::llround(options.head_timeout_seconds * 1000)));
  limits.read_timeout = std::chrono::seconds(options.read_timeout_seconds);
  limits.write_timeout = std::chrono::seconds(options.write_timeout_seconds);
  auto guard = ConnectionGuard::create(limits);
  if (!guard) return std::unexpected(guard.error());
  guard_ = std::move(*guard);
  unix_ = std::make_unique<Listener>(*guard_);
  unix_->set_address_family(AF_UNIX);
  routes_.install(*unix_, false);
  // The socket is created with the umask, then narrowed: 0660 lets a "hutch" group in.
  mode_t old = ::umask(0117);
  bool bound = unix_->bind_to_port(path, 80);
  ::umask(old);
  if (!bound) return sys_error("bind", path);
  if (!unix_->raise_backlog(SOMAXCONN)) return sys_error("listen", path);
  if (::chmod(path.c_str(), 0660) != 0) return sys_error("chmod", path);
  if (context_.options.tcp_host) {
    tcp_ = std::make_unique<Listener>(*guard_);
    routes_.install(*tcp_, true);
    std::string address =
        *context_.options.tcp_host + ":" + std::to_string(context_.options.tcp_port);
    if (!tcp_->bind_to_port(*context_.options.tcp_host, context_.options.tcp_port))
      return sys_error("bind", address);
    if (!tcp_->raise_backlog(SOMAXCONN)) return sys_error("listen", address);
  }
  return {};
}

void Daemon::start() {
  for (Listener* server : {unix_.get(), tcp_.get()}) {
    if (server == nullptr) continue;
    threads_.emplace_back([server] { server->listen_after_bind(); });
  }
}

bool Daemon::stop(std::chrono::seconds grace) {
  stopped_ = true;
  // stop() closes the listening socket at once; connections between requests close now, those
  // with a request in flight once it is answered.
  if (unix_) unix_->stop();
  if (tcp_) tcp_->stop();
  ::unlink(context_.options.socket_path.c_str());
  if (guard_) guard_->close_parked();
  routes_.stop();
  // listen_after_bind() returns once its listener is stopped: these joins do not wait for
  // requests.
  for (std::thread& thread : threads_) thread.join();
  threads_.clear();
  auto deadline = Clock::now() + grace;
  auto busy = [this] { return guard_ && guard_->busy() > 0; };
  while (busy() && Clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  bool clean = !busy();
  if (clean && guard_) guard_->shutdown();
  return clean;
}

}  // namespace hutch::daemon
