#include "bench/https_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <nghttp2/nghttp2.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "runtime/base/unique_fd.h"

namespace hutch::bench {
namespace {

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "network bench (https): %s\n", message.c_str());
  ERR_print_errors_fp(stderr);
  std::exit(1);
}

nghttp2_nv field(std::string_view name, std::string_view value) {
  return {reinterpret_cast<uint8_t*>(const_cast<char*>(name.data())),
          reinterpret_cast<uint8_t*>(const_cast<char*>(value.data())), name.size(), value.size(),
          NGHTTP2_NV_FLAG_NONE};
}

struct H2Exchange {
  int32_t stream = -1;
  bool closed = false;
  uint32_t code = 0;
  size_t body = 0;
};

void h2_get(SSL* ssl, const std::string& host, const std::string& path,
            const std::string& header_name, const std::string& header_value) {
  H2Exchange exchange;
  nghttp2_session_callbacks* callbacks = nullptr;
  nghttp2_session_callbacks_new(&callbacks);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(
      callbacks, [](nghttp2_session*, uint8_t, int32_t, const uint8_t*, size_t size, void* data) {
        static_cast<H2Exchange*>(data)->body += size;
        return 0;
      });
  nghttp2_session_callbacks_set_on_stream_close_callback(
      callbacks, [](nghttp2_session*, int32_t id, uint32_t code, void* data) {
        auto& exchange = *static_cast<H2Exchange*>(data);
        if (id == exchange.stream) {
          exchange.closed = true;
          exchange.code = code;
        }
        return 0;
      });
  nghttp2_session* session = nullptr;
  nghttp2_session_client_new(&session, callbacks, &exchange);
  nghttp2_session_callbacks_del(callbacks);
  nghttp2_submit_settings(session, NGHTTP2_FLAG_NONE, nullptr, 0);
  const nghttp2_nv request[] = {field(":method", "GET"), field(":scheme", "https"),
                                field(":authority", host), field(":path", path),
                                field(header_name, header_value)};
  exchange.stream = nghttp2_submit_request(session, nullptr, request, 5, nullptr, nullptr);
  uint8_t buffer[16 * 1024];
  while (!exchange.closed) {
    const uint8_t* data = nullptr;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(session, &data)) > 0) {
      if (SSL_write(ssl, data, static_cast<int>(n)) <= 0) die("h2: SSL_write");
    }
    if (exchange.closed) break;
    const int got = SSL_read(ssl, buffer, sizeof buffer);
    if (got <= 0) die("h2: SSL_read: the connection ended before the response");
    if (nghttp2_session_mem_recv(session, buffer, static_cast<size_t>(got)) < 0)
      die("h2: nghttp2_session_mem_recv");
  }
  nghttp2_session_del(session);
  if (exchange.code != NGHTTP2_NO_ERROR || exchange.body == 0)
    die("h2: stream reset (" + std::to_string(exchange.code) + ") or no body");
}

void http11_get(SSL* ssl, const std::string& host, const std::string& path,
                const std::string& header_name, const std::string& header_value) {
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\n" + header_name +
                              ": " + header_value + "\r\n\r\n";
  if (SSL_write(ssl, request.data(), static_cast<int>(request.size())) <= 0)
    die("http/1.1: SSL_write");
  std::string response;
  char buffer[4096];
  // The bench's upstreams answer "HTTP/1.1 200 OK" with Content-Length 2, "ok".
  while (!response.ends_with("\r\n\r\nok")) {
    const int got = SSL_read(ssl, buffer, sizeof buffer);
    if (got <= 0) die("http/1.1: SSL_read: the connection ended before the response");
    response.append(buffer, static_cast<size_t>(got));
  }
  if (!response.starts_with("HTTP/1.1 200 ")) die("http/1.1: " + response.substr(0, 40));
}

}  // namespace

HttpsClient::HttpsClient(const std::vector<std::string>& ca_pems) {
  context_.reset(SSL_CTX_new(TLS_client_method()));
  if (!context_) die("SSL_CTX_new");
  X509_STORE* store = SSL_CTX_get_cert_store(context_.get());
  for (const std::string& pem : ca_pems) {
    net::tls::BioPtr bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
    net::tls::X509Ptr certificate(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr));
    if (!certificate || X509_STORE_add_cert(store, certificate.get()) != 1) die("a CA's PEM");
  }
  SSL_CTX_set_verify(context_.get(), SSL_VERIFY_PEER, nullptr);
}

void HttpsClient::get(uint32_t address, const std::string& host, const std::string& path,
                      const std::string& header_name, const std::string& header_value,
                      Protocol protocol) {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(address);
  sa.sin_port = htons(443);
  if (!fd || connect(fd.get(), reinterpret_cast<const sockaddr*>(&sa), sizeof sa) != 0)
    die(std::string("connect :443: ") + std::strerror(errno));
  const int one = 1;
  setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  net::tls::SslPtr ssl(SSL_new(context_.get()));
  static constexpr unsigned char kH2[] = "\x02h2\x08http/1.1";
  static constexpr unsigned char kHttp11[] = "\x08http/1.1";
  const bool h2 = protocol == Protocol::kH2;
  SSL_set_alpn_protos(ssl.get(), h2 ? kH2 : kHttp11, h2 ? sizeof kH2 - 1 : sizeof kHttp11 - 1);
  SSL_set_tlsext_host_name(ssl.get(), host.c_str());
  SSL_set1_host(ssl.get(), host.c_str());
  SSL_set_fd(ssl.get(), fd.get());
  if (SSL_connect(ssl.get()) != 1) die("TLS handshake with " + host);
  const unsigned char* chosen = nullptr;
  unsigned chosen_size = 0;
  SSL_get0_alpn_selected(ssl.get(), &chosen, &chosen_size);
  const std::string_view alpn(reinterpret_cast<const char*>(chosen), chosen_size);
  if (h2 && alpn != "h2") die("ALPN chose \"" + std::string(alpn) + "\", not h2");
  if (h2) {
    h2_get(ssl.get(), host, path, header_name, header_value);
  } else {
    http11_get(ssl.get(), host, path, header_name, header_value);
  }
}

}  // namespace hutch::bench
