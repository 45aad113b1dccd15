#include "net/engine/proxy_tunnel.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/socket.h>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <memory>
#include <vector>

namespace hutch::net {
namespace {

namespace asio = boost::asio;
using Tcp = asio::ip::tcp;

// One CONNECT exchange. The answer is peeked, then only its head is taken off the socket: a
// proxy may pass on the tunnel's first bytes in the same segment as its answer.
class Exchange : public std::enable_shared_from_this<Exchange> {
 public:
  Exchange(Tcp::socket& socket, std::string request, std::function<void(TunnelResult)> done)
      : socket_(socket),
        timer_(socket.get_executor()),
        request_(std::move(request)),
        done_(std::move(done)),
        answer_(kMaxProxyAnswer) {}

  void start(std::chrono::milliseconds timeout) {
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this(), timeout](const boost::system::error_code& error) {
      if (error || self->finished_) return;
      boost::system::error_code ignored;
      self->socket_.cancel(ignored);
      self->finish({false, 0, "no answer within " + std::to_string(timeout.count()) + " ms"});
    });
    asio::async_write(socket_, asio::buffer(request_),
                      [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                        // The request may hold the proxy's credentials: nothing of it outlives
                        // the write.
                        OPENSSL_cleanse(self->request_.data(), self->request_.size());
                        if (self->finished_) return;
                        if (error) return self->finish({false, 0, "write: " + error.message()});
                        self->read_answer();
                      });
  }

 private:
  void read_answer() {
    socket_.async_receive(
        asio::buffer(answer_.data() + have_, answer_.size() - have_),
        asio::socket_base::message_peek,
        [self = shared_from_this()](const boost::system::error_code& error, size_t n) {
          if (self->finished_) return;
          if (error == asio::error::eof)
            return self->finish({false, 0, "closed the connection without answering"});
          if (error) return self->finish({false, 0, "read: " + error.message()});
          self->on_peeked(n);
        });
  }

  void on_peeked(size_t n) {
    const ProxyAnswer answer =
        parse_proxy_answer(std::span<const uint8_t>(answer_.data(), have_ + n));
    if (answer.status == ProxyAnswer::Status::kMalformed)
      return finish({false, 0, "malformed answer: " + answer.detail});
    // Take what was peeked off the socket: all of it while the head is incomplete, else only
    // through the head's end.
    const size_t take =
        answer.status == ProxyAnswer::Status::kComplete ? answer.head_size - have_ : n;
    const ssize_t got = ::recv(socket_.native_handle(), answer_.data() + have_, take, MSG_DONTWAIT);
    if (got != static_cast<ssize_t>(take)) {
      return finish({false, 0,
                     "recv(" + std::to_string(take) +
                         " bytes peeked): " + (got < 0 ? std::strerror(errno) : "short read")});
    }
    have_ += take;
    if (answer.status == ProxyAnswer::Status::kNeedMore) return read_answer();
    if (answer.code >= 200 && answer.code < 300) return finish({true, answer.code, ""});
    finish({false, answer.code, "answered " + std::to_string(answer.code)});
  }

  void finish(TunnelResult result) {
    finished_ = true;
    timer_.cancel();
    auto done = std::move(done_);
    done(std::move(result));
  }

  Tcp::socket& socket_;
  asio::steady_timer timer_;
  std::string request_;
  std::function<void(TunnelResult)> done_;
  std::vector<uint8_t> answer_;
  size_t have_ = 0;
  bool finished_ = false;
};

}  // namespace

Result<std::optional<std::string>> proxy_authorization(const UpstreamProxy& proxy,
                                                       const SecretLookup& secrets) {
  if (!proxy.credentials_secret) return std::optional<std::string>();
  std::optional<std::string> value = secrets ? secrets(*proxy.credentials_secret) : std::nullopt;
  if (!value) {
    return plain_error("upstream proxy", "its credentials secret \"" + *proxy.credentials_secret +
                                             "\" is not held (PUT /v1/secrets/" +
                                             *proxy.credentials_secret + ")");
  }
  std::string out = "Basic ";
  const size_t prefix = out.size();
  out.resize(prefix + 4 * ((value->size() + 2) / 3) + 1);
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data() + prefix),
                                reinterpret_cast<const unsigned char*>(value->data()),
                                static_cast<int>(value->size()));
  OPENSSL_cleanse(value->data(), value->size());
  out.resize(prefix + static_cast<size_t>(n));
  return std::optional<std::string>(std::move(out));
}

void open_proxy_tunnel(Tcp::socket& socket, std::string request, std::chrono::milliseconds timeout,
                       std::function<void(TunnelResult)> done) {
  std::make_shared<Exchange>(socket, std::move(request), std::move(done))->start(timeout);
}

}  // namespace hutch::net
