// One connection to hutchd: over its unix socket, or over TCP with a bearer token. Every
// method turns a transport failure or an error answer into an Error whose message is what the
// CLI prints after "hutch: " (daemon errors read "<code>: <message>").
#pragma once

#include <httplib.h>

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>

#include "runtime/base/error.h"

namespace hutch::client {

struct Endpoint {
  std::string socket_path = "/run/hutch/hutchd.sock";
  std::string url;    // http://HOST:PORT; when set, used instead of the socket
  std::string token;  // the bearer token for TCP
};

class Connection {
 public:
  explicit Connection(Endpoint endpoint);

  // A request answered with JSON (or 204): the parsed body, null for an empty one.
  Result<nlohmann::json> call(const std::string& method, const std::string& path,
                              const std::optional<nlohmann::json>& body = std::nullopt);

  // POST `body`, handing the answer's bytes to `on_data` as they arrive (a streamed exec).
  // on_data returning false aborts the request.
  using DataSink = std::function<bool(std::string_view)>;
  Result<void> post_streaming(const std::string& path, const nlohmann::json& body,
                              const DataSink& on_data);

  // GET raw bytes into `on_data` (a file download).
  Result<void> get_streaming(const std::string& path, const DataSink& on_data);

  // PUT raw bytes: `read` fills the buffer and returns how many bytes it wrote, 0 at the end,
  // or an error (a failed read of the host file aborts the upload). The JSON answer is returned.
  using Source = std::function<Result<size_t>(char* buffer, size_t size)>;
  Result<nlohmann::json> put_streaming(const std::string& path, std::optional<uint64_t> length,
                                       const Source& read);

  // Where hutchd is expected: the socket path or the URL.
  const std::string& where() const { return where_; }

 private:
  Result<void> send_streaming(httplib::Request& request, const DataSink& on_data);
  Error transport_error(httplib::Error error) const;
  Result<void> check_status(const httplib::Response& response, const std::string& body) const;

  Endpoint endpoint_;
  std::string where_;  // the socket path or the URL, for messages
  std::unique_ptr<httplib::Client> http_;
};

}  // namespace hutch::client
