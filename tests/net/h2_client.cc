#include "tests/net/h2_client.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <poll.h>
#include <sys/socket.h>

#include <chrono>
#include <cstring>

namespace hutch::testing {
namespace {

nghttp2_nv field(const std::string& name, const std::string& value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

std::vector<nghttp2_nv> to_nv(const H2Client::Fields& fields) {
  std::vector<nghttp2_nv> nv;
  for (const auto& [name, value] : fields) nv.push_back(field(name, value));
  return nv;
}

H2Client& of(void* data) { return *static_cast<H2Client*>(data); }

ssize_t read_body(nghttp2_session* session, int32_t id, uint8_t* buffer, size_t length,
                  uint32_t* flags, nghttp2_data_source* source, void*) {
  auto& stream = *static_cast<H2Client::Stream*>(source->ptr);
  const size_t n = std::min(length, stream.request_body.size() - stream.request_sent);
  std::memcpy(buffer, stream.request_body.data() + stream.request_sent, n);
  stream.request_sent += n;
  if (stream.request_sent == stream.request_body.size()) {
    *flags |= NGHTTP2_DATA_FLAG_EOF;
    if (!stream.request_trailers.empty()) {
      *flags |= NGHTTP2_DATA_FLAG_NO_END_STREAM;
      const auto nv = to_nv(stream.request_trailers);
      nghttp2_submit_trailer(session, id, nv.data(), nv.size());
    }
  }
  return static_cast<ssize_t>(n);
}

}  // namespace

H2Client::H2Client(const net::Address& address, const std::string& host, const std::string& ca_file)
    : host_(host) {
  fd_.reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(443);
  at.sin_addr.s_addr = htonl(address.v4_value());
  if (!fd_ || connect(fd_.get(), reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0) return;
  const int one = 1;
  setsockopt(fd_.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  context_.reset(SSL_CTX_new(TLS_client_method()));
  if (SSL_CTX_load_verify_file(context_.get(), ca_file.c_str()) != 1) return;
  SSL_CTX_set_verify(context_.get(), SSL_VERIFY_PEER, nullptr);
  ssl_.reset(SSL_new(context_.get()));
  static constexpr unsigned char kH2[] = "\x02h2";
  SSL_set_alpn_protos(ssl_.get(), kH2, 3);
  SSL_set_tlsext_host_name(ssl_.get(), host.c_str());
  SSL_set1_host(ssl_.get(), host.c_str());
  SSL_set_fd(ssl_.get(), fd_.get());
  const unsigned char* chosen = nullptr;
  unsigned chosen_size = 0;
  if (SSL_connect(ssl_.get()) != 1) {
    ERR_clear_error();
    return;
  }
  SSL_get0_alpn_selected(ssl_.get(), &chosen, &chosen_size);
  if (chosen_size != 2 || std::memcmp(chosen, "h2", 2) != 0) return;

  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_header_callback(
      callbacks,
      [](nghttp2_session*, const nghttp2_frame* frame, const uint8_t* name, size_t name_size,
         const uint8_t* value, size_t value_size, uint8_t, void* data) {
        if (std::string_view(reinterpret_cast<const char*>(name), name_size) == ":status")
          of(data).streams[frame->hd.stream_id].status.assign(reinterpret_cast<const char*>(value),
                                                              value_size);
        return 0;
      });
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
      callbacks,
      [](nghttp2_session*, uint8_t, int32_t id, const uint8_t* bytes, size_t size, void* data) {
        of(data).streams[id].body.append(reinterpret_cast<const char*>(bytes), size);
        return 0;
      });
  nghttp2_session_callbacks_set_on_stream_close_callback(
      callbacks, [](nghttp2_session*, int32_t id, uint32_t code, void* data) {
        auto& stream = of(data).streams[id];
        stream.closed = true;
        stream.code = code;
        return 0;
      });
  nghttp2_session_callbacks_set_on_frame_recv_callback(
      callbacks, [](nghttp2_session*, const nghttp2_frame* frame, void* data) {
        if (frame->hd.type == NGHTTP2_GOAWAY) of(data).goaway = true;
        return 0;
      });
  nghttp2_session_client_new(&session_, callbacks, this);
  nghttp2_session_callbacks_del(callbacks);
  nghttp2_submit_settings(session_, NGHTTP2_FLAG_NONE, nullptr, 0);
}

H2Client::~H2Client() { nghttp2_session_del(session_); }

int32_t H2Client::request(const std::string& method, const std::string& path, Fields extra,
                          std::optional<std::string> body, Fields trailers) {
  Fields fields{{":method", method}, {":scheme", "https"}, {":authority", host_}, {":path", path}};
  fields.insert(fields.end(), extra.begin(), extra.end());
  const auto nv = to_nv(fields);
  // The provider points at the stream's entry, made under a key of its own before the id is
  // known and then re-keyed: a std::map node does not move.
  Stream& stream = streams[0];
  stream.request_body = body.value_or("");
  stream.request_trailers = std::move(trailers);
  nghttp2_data_provider provider{};
  provider.source.ptr = &stream;
  provider.read_callback = read_body;
  const int32_t id = nghttp2_submit_request(session_, nullptr, nv.data(), nv.size(),
                                            body ? &provider : nullptr, nullptr);
  auto node = streams.extract(0);
  node.key() = id;
  streams.insert(std::move(node));
  return id;
}

void H2Client::reset(int32_t stream, uint32_t code) {
  nghttp2_submit_rst_stream(session_, NGHTTP2_FLAG_NONE, stream, code);
}

uint32_t H2Client::max_concurrent_streams() const {
  return nghttp2_session_get_remote_settings(session_, NGHTTP2_SETTINGS_MAX_CONCURRENT_STREAMS);
}

bool H2Client::run_until(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  uint8_t buffer[16 * 1024];
  while (std::chrono::steady_clock::now() < deadline) {
    const uint8_t* data = nullptr;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(session_, &data)) > 0) {
      if (SSL_write(ssl_.get(), data, static_cast<int>(n)) <= 0) return false;
    }
    if (n < 0) return false;
    if (done()) return true;
    if (SSL_pending(ssl_.get()) == 0) {
      pollfd ready{.fd = fd_.get(), .events = POLLIN, .revents = 0};
      if (poll(&ready, 1, 100) != 1) continue;
    }
    const int got = SSL_read(ssl_.get(), buffer, sizeof buffer);
    if (got <= 0) {
      ERR_clear_error();
      return done();
    }
    if (nghttp2_session_mem_recv(session_, buffer, static_cast<size_t>(got)) < 0) return false;
  }
  return done();
}

}  // namespace hutch::testing
