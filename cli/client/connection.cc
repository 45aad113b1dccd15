#include "cli/client/connection.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>

#include "cli/client/request.h"
#include "runtime/base/unique_fd.h"

namespace hutch::client {
namespace {

constexpr size_t kMaxErrorBody = 64 * 1024;

bool success(int status) { return status >= 200 && status < 300; }

// httplib reports "Connection" without the reason; connecting once more ourselves recovers the
// errno (ENOENT: no daemon ever started here; ECONNREFUSED: a stale socket; EACCES: not in the
// socket's group).
int unix_connect_errno(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.size() >= sizeof address.sun_path) return ENAMETOOLONG;
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd) return errno;
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0)
    return errno;
  return 0;
}

}  // namespace

Connection::Connection(Endpoint endpoint) : endpoint_(std::move(endpoint)) {
  if (!endpoint_.url.empty()) {
    where_ = endpoint_.url;
    http_ = std::make_unique<httplib::Client>(endpoint_.url);
    if (!endpoint_.token.empty()) http_->set_bearer_token_auth(endpoint_.token);
  } else {
    where_ = endpoint_.socket_path;
    http_ = std::make_unique<httplib::Client>(endpoint_.socket_path);
    http_->set_address_family(AF_UNIX);
  }
  http_->set_connection_timeout(5);
  // An exec answers when its command ends, and a streamed one may be silent for as long as the
  // command is: the exec's own timeout bounds it, not the transport.
  http_->set_read_timeout(24 * 3600);
  http_->set_write_timeout(60);
}

Error Connection::transport_error(httplib::Error error) const {
  std::string reason = httplib::to_string(error);
  if (error == httplib::Error::Connection || error == httplib::Error::ConnectionTimeout) {
    if (endpoint_.url.empty()) {
      int err = unix_connect_errno(endpoint_.socket_path);
      if (err != 0) reason = std::strerror(err);
    }
    return Error{"cannot reach hutchd at " + where_, reason, 0};
  }
  return Error{"hutchd at " + where_, reason, 0};
}

Result<void> Connection::check_status(const httplib::Response& response,
                                      const std::string& body) const {
  if (success(response.status)) return {};
  return std::unexpected(daemon_error(response.status, body));
}

Result<nlohmann::json> Connection::call(const std::string& method, const std::string& path,
                                        const std::optional<nlohmann::json>& body) {
  httplib::Request request;
  request.method = method;
  request.path = path;
  if (body) {
    request.body = body->dump();
    request.set_header("Content-Type", "application/json");
  }
  httplib::Result result = http_->send(request);
  if (!result) return std::unexpected(transport_error(result.error()));
  if (auto ok = check_status(*result, result->body); !ok) return std::unexpected(ok.error());
  if (result->body.empty()) return nlohmann::json(nullptr);
  nlohmann::json parsed = nlohmann::json::parse(result->body, nullptr, false);
  if (parsed.is_discarded())
    return plain_error("hutchd at " + where_, "answered something that is not JSON");
  return parsed;
}

Result<void> Connection::post_streaming(const std::string& path, const nlohmann::json& body,
                                        const DataSink& on_data) {
  httplib::Request request;
  request.method = "POST";
  request.path = path;
  request.body = body.dump();
  request.set_header("Content-Type", "application/json");
  return send_streaming(request, on_data);
}

Result<void> Connection::get_streaming(const std::string& path, const DataSink& on_data) {
  httplib::Request request;
  request.method = "GET";
  request.path = path;
  return send_streaming(request, on_data);
}

// The body goes to on_data as it arrives on success; an error's body is kept for its message.
Result<void> Connection::send_streaming(httplib::Request& request, const DataSink& on_data) {
  int status = 0;
  std::string error_body;
  request.response_handler = [&status](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  request.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    if (success(status)) return on_data(std::string_view(data, length));
    if (error_body.size() < kMaxErrorBody) error_body.append(data, length);
    return true;
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  if (!http_->send(request, response, error)) return std::unexpected(transport_error(error));
  return check_status(response, error_body);
}

Result<nlohmann::json> Connection::put_streaming(const std::string& path,
                                                 std::optional<uint64_t> length,
                                                 const Source& read) {
  std::optional<Error> read_failure;
  std::vector<char> buffer(256 * 1024);
  auto pull = [&](httplib::DataSink& sink, size_t most) {
    auto n = read(buffer.data(), std::min(most, buffer.size()));
    if (!n) {
      read_failure = n.error();
      return false;
    }
    if (*n > 0) return sink.write(buffer.data(), *n);
    if (length) {  // the body's length was announced: ending early cannot be sent
      read_failure = Error{"read", "the file shrank while it was being sent", 0};
      return false;
    }
    sink.done();
    return true;
  };
  httplib::Result result =
      length ? http_->Put(
                   path, httplib::Headers{}, *length,
                   [&](size_t, size_t left, httplib::DataSink& sink) { return pull(sink, left); },
                   "application/octet-stream")
             : http_->Put(
                   path, httplib::Headers{},
                   [&](size_t, httplib::DataSink& sink) { return pull(sink, buffer.size()); },
                   "application/octet-stream");
  if (read_failure) return std::unexpected(*read_failure);
  if (!result) return std::unexpected(transport_error(result.error()));
  if (auto ok = check_status(*result, result->body); !ok) return std::unexpected(ok.error());
  nlohmann::json parsed = nlohmann::json::parse(result->body, nullptr, false);
  return parsed.is_discarded() ? nlohmann::json(nullptr) : parsed;
}

}  // namespace hutch::client
