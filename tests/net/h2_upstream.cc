#include "tests/net/h2_upstream.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>

#include <cctype>
#include <chrono>
#include <cstring>
#include <functional>
#include <map>
#include <memory>

#include "net/tls/server_context.h"
#include "tests/common/netns.h"
#include "tests/common/socket_io.h"

namespace hutch::testing {
namespace {

using Clock = std::chrono::steady_clock;

struct Stream {
  H2Upstream::Request request;
  std::string body;  // received, then (for /v1/echo) sent back
  size_t sent = 0;   // of `answer`
  std::string answer;
  bool trailers = false;
  bool held = false;  // a /v1/pair request waiting for its pair
  Clock::time_point since;
};

struct Connection {
  nghttp2_session* session = nullptr;
  std::map<int32_t, std::unique_ptr<Stream>> streams;
  std::function<void(const H2Upstream::Request&)> record;
  std::function<void(uint32_t)> record_reset;
};

ssize_t read_answer(nghttp2_session* session, int32_t id, uint8_t* buffer, size_t length,
                    uint32_t* flags, nghttp2_data_source* source, void*) {
  auto& stream = *static_cast<Stream*>(source->ptr);
  const size_t n = std::min(length, stream.answer.size() - stream.sent);
  std::memcpy(buffer, stream.answer.data() + stream.sent, n);
  stream.sent += n;
  if (stream.sent == stream.answer.size()) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (stream.trailers) {
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const std::string names[] = {"x-checksum", "grpc-status"};
      const std::string values[] = {"4f1c", "0"};
      nghttp2_nv nv[2];
      for (int i = 0; i < 2; ++i) {
        nv[i] = {reinterpret_cast<uint8_t*>(const_cast<char*>(names[i].data())),
                 reinterpret_cast<uint8_t*>(const_cast<char*>(values[i].data())), names[i].size(),
                 values[i].size(), NGHTTP2_NV_FLAG_NONE};
      }
      nghttp2_submit_trailer(session, id, nv, 2);
    }
  }
  return static_cast<ssize_t>(n);
}

void respond(Connection& connection, int32_t id, Stream& stream, std::string answer) {
  stream.answer = std::move(answer);
  stream.held = false;
  const std::string length = std::to_string(stream.answer.size());
  nghttp2_nv nv[] = {
      {reinterpret_cast<uint8_t*>(const_cast<char*>(":status")),
       reinterpret_cast<uint8_t*>(const_cast<char*>("200")), 7, 3, NGHTTP2_NV_FLAG_NONE},
      {reinterpret_cast<uint8_t*>(const_cast<char*>("content-length")),
       reinterpret_cast<uint8_t*>(const_cast<char*>(length.data())), 14, length.size(),
       NGHTTP2_NV_FLAG_NONE}};
  nghttp2_data_provider provider{};
  provider.source.ptr = &stream;
  provider.read_callback = read_answer;
  // No content-length with trailers (as gRPC): curl ends a transfer at its content-length and
  // would not wait for the trailers.
  nghttp2_submit_response(connection.session, id, nv, stream.trailers ? 1 : 2, &provider);
}

// The held /v1/pair requests: answered "paired" once two are open, "alone" after 3 s.
void answer_pairs(Connection& connection) {
  std::vector<std::pair<int32_t, Stream*>> held;
  for (auto& [id, stream] : connection.streams) {
    if (stream->held) held.emplace_back(id, stream.get());
  }
  const bool paired = held.size() >= 2;
  for (auto [id, stream] : held) {
    if (paired) {
      respond(connection, id, *stream, "paired");
    } else if (Clock::now() - stream->since > std::chrono::seconds(3)) {
      respond(connection, id, *stream, "alone");
    }
  }
}

void on_request_end(Connection& connection, int32_t id, Stream& stream) {
  stream.request.body_size = stream.body.size();
  connection.record(stream.request);
  const std::string path = stream.request.field(":path");
  if (path.starts_with("/v1/echo")) return respond(connection, id, stream, std::move(stream.body));
  if (path.starts_with("/v1/trailers")) {
    stream.trailers = true;
    return respond(connection, id, stream, "ok");
  }
  if (path.starts_with("/v1/reset")) {
    nghttp2_submit_rst_stream(connection.session, NGHTTP2_FLAG_NONE, id, NGHTTP2_ENHANCE_YOUR_CALM);
    return;
  }
  if (path.starts_with("/v1/goaway")) {
    respond(connection, id, stream, "ok");
    nghttp2_submit_goaway(connection.session, NGHTTP2_FLAG_NONE, id, NGHTTP2_NO_ERROR, nullptr, 0);
    return;
  }
  if (path.starts_with("/v1/pair")) {
    stream.held = true;
    stream.since = Clock::now();
    return answer_pairs(connection);
  }
  respond(connection, id, stream, "ok");
}

int on_begin_headers(nghttp2_session*, const nghttp2_frame* frame, void* data) {
  auto& connection = *static_cast<Connection*>(data);
  if (frame->hd.type == NGHTTP2_HEADERS && frame->headers.cat == NGHTTP2_HCAT_REQUEST)
    connection.streams[frame->hd.stream_id] = std::make_unique<Stream>();
  return 0;
}

int on_header(nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t name_size,
              const uint8_t* value, size_t value_size, uint8_t, void* data) {
  auto& connection = *static_cast<Connection*>(data);
  auto found = connection.streams.find(frame->hd.stream_id);
  if (found == connection.streams.end()) return 0;
  found->second->request.fields.emplace_back(
      std::string(reinterpret_cast<const char*>(name), name_size),
      std::string(reinterpret_cast<const char*>(value), value_size));
  return 0;
}

int on_data(nghttp2_session*, uint8_t, int32_t id, const uint8_t* bytes, size_t size, void* data) {
  auto& connection = *static_cast<Connection*>(data);
  auto found = connection.streams.find(id);
  if (found != connection.streams.end())
    found->second->body.append(reinterpret_cast<const char*>(bytes), size);
  return 0;
}

int on_frame(nghttp2_session*, const nghttp2_frame* frame, void* data) {
  auto& connection = *static_cast<Connection*>(data);
  if ((frame->hd.type != NGHTTP2_HEADERS && frame->hd.type != NGHTTP2_DATA) ||
      (frame->hd.flags & NGHTTP2_FLAG_END_STREAM) == 0) {
    return 0;
  }
  auto found = connection.streams.find(frame->hd.stream_id);
  if (found != connection.streams.end())
    on_request_end(connection, frame->hd.stream_id, *found->second);
  return 0;
}

int on_close(nghttp2_session*, int32_t id, uint32_t, void* data) {
  static_cast<Connection*>(data)->streams.erase(id);
  return 0;
}

int on_reset(nghttp2_session*, const nghttp2_frame* frame, void* data) {
  if (frame->hd.type == NGHTTP2_RST_STREAM)
    static_cast<Connection*>(data)->record_reset(frame->rst_stream.error_code);
  return on_frame(nullptr, frame, data);
}

}  // namespace

std::string H2Upstream::Request::field(std::string_view name) const {
  for (const auto& [key, value] : fields) {
    if (key == name) return value;
  }
  return "";
}

H2Upstream::H2Upstream(int netns, const net::Address& address, net::tls::SandboxCa& ca, Alpn alpn) {
  auto context = net::tls::make_server_context(
      ca, {.alpn = alpn == Alpn::kH2 ? std::vector<std::string>{"h2"}
                                     : std::vector<std::string>{"h2", "http/1.1"},
           .session_tickets = true});
  if (!context) return;
  context_ = std::move(*context);
  listener_ = listen_in(netns, address.v4_value(), 443);
  if (listener_) thread_ = std::thread([this] { run(); });
}

H2Upstream::~H2Upstream() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
}

std::vector<H2Upstream::Request> H2Upstream::requests() const {
  std::lock_guard lock(mutex_);
  return requests_;
}

std::vector<uint32_t> H2Upstream::resets() const {
  std::lock_guard lock(mutex_);
  return resets_;
}

void H2Upstream::run() {
  while (!stop_) {
    UniqueFd connection = accept_within_100ms(listener_.get());
    if (!connection) continue;
    ++accepted_;
    connections_.emplace_back(
        [this, fd = std::make_shared<UniqueFd>(std::move(connection))] { serve(std::move(*fd)); });
  }
  for (std::thread& connection : connections_) connection.join();
}

void H2Upstream::serve(UniqueFd fd) {
  net::tls::SslPtr ssl(SSL_new(context_.get()));
  SSL_set_fd(ssl.get(), fd.get());
  const timeval timeout{5, 0};
  setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  // As HTTP/2 servers do (nghttpx, Go's net/http): without it Nagle holds a WINDOW_UPDATE behind
  // the relay's delayed ACK, 40 ms per window.
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  if (SSL_accept(ssl.get()) != 1) {
    ERR_clear_error();
    return;
  }
  const unsigned char* protocol = nullptr;
  unsigned protocol_size = 0;
  SSL_get0_alpn_selected(ssl.get(), &protocol, &protocol_size);
  if (std::string_view(reinterpret_cast<const char*>(protocol), protocol_size) != "h2") {
    serve_http11(ssl.get());
    ERR_clear_error();
    return;
  }
  Connection connection;
  connection.record = [this](const Request& request) {
    std::lock_guard lock(mutex_);
    requests_.push_back(request);
  };
  connection.record_reset = [this](uint32_t code) {
    std::lock_guard lock(mutex_);
    resets_.push_back(code);
  };
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_begin_headers_callback(callbacks, on_begin_headers);
  nghttp2_session_callbacks_set_on_header_callback(callbacks, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(callbacks, on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(callbacks, on_reset);
  nghttp2_session_callbacks_set_on_stream_close_callback(callbacks, on_close);
  nghttp2_session_server_new(&connection.session, callbacks, &connection);
  nghttp2_session_callbacks_del(callbacks);
  const nghttp2_settings_entry settings{NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS, 100};
  nghttp2_submit_settings(connection.session, NGHTTP2_FLAG_NONE, &settings, 1);
  uint8_t buffer[16 * 1024];
  while (!stop_) {
    const uint8_t* data = nullptr;
    ssize_t n;
    bool failed = false;
    while ((n = nghttp2_session_mem_send(connection.session, &data)) > 0) {
      if (SSL_write(ssl.get(), data, static_cast<int>(n)) <= 0) failed = true;
    }
    if (failed || n < 0) break;
    if (nghttp2_session_want_read(connection.session) == 0 &&
        nghttp2_session_want_write(connection.session) == 0) {
      break;
    }
    answer_pairs(connection);
    if (SSL_pending(ssl.get()) == 0) {
      pollfd ready{.fd = fd.get(), .events = POLLIN, .revents = 0};
      if (poll(&ready, 1, 100) != 1) continue;
    }
    const int got = SSL_read(ssl.get(), buffer, sizeof buffer);
    if (got <= 0) break;
    if (nghttp2_session_mem_recv(connection.session, buffer, static_cast<size_t>(got)) < 0) break;
  }
  nghttp2_session_del(connection.session);
  ERR_clear_error();
}

void H2Upstream::serve_http11(SSL* ssl) {
  std::string buffer;
  char chunk[16 * 1024];
  while (!stop_) {
    size_t end;
    while ((end = buffer.find("\r\n\r\n")) == std::string::npos) {
      const int n = SSL_read(ssl, chunk, sizeof chunk);
      if (n <= 0) return;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    Request request;
    const std::string head = buffer.substr(0, end + 2);
    buffer.erase(0, end + 4);
    const size_t space = head.find(' ');
    request.fields.emplace_back(":method", head.substr(0, space));
    request.fields.emplace_back(":path",
                                head.substr(space + 1, head.find(' ', space + 1) - space - 1));
    for (size_t at = head.find("\r\n") + 2; at < head.size();) {
      const size_t line_end = head.find("\r\n", at);
      const std::string line = head.substr(at, line_end - at);
      const size_t colon = line.find(':');
      std::string name = line.substr(0, colon);
      for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      request.fields.emplace_back(name, line.substr(line.find_first_not_of(' ', colon + 1)));
      at = line_end + 2;
    }
    const size_t length = std::stoul("0" + request.field("content-length"));
    while (buffer.size() < length) {
      const int n = SSL_read(ssl, chunk, sizeof chunk);
      if (n <= 0) return;
      buffer.append(chunk, static_cast<size_t>(n));
    }
    buffer.erase(0, length);
    request.body_size = length;
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(std::move(request));
    }
    static constexpr std::string_view kAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    if (SSL_write(ssl, kAnswer.data(), static_cast<int>(kAnswer.size())) <= 0) return;
  }
}

}  // namespace hutch::testing
