// One TCP connection from a sandbox, from accept to close: learns its names (fake address, TLS
// SNI, HTTP Host), decides, resolves and checks, dials the checked address and splices both ways.
// For a TLS host an inject rule names (and a sandbox with a CA), it terminates TLS on both sides
// instead, reads each HTTP/1.1 request head, sets the rules' headers and forwards (or, when both
// legs chose h2, hands them to the h2 relay).
#pragma once

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "net/address.h"
#include "net/egress_path.h"
#include "net/engine/sandbox.h"
#include "net/policy.h"

namespace hutch::net {

// Resets a connection: SO_LINGER 0, then close, so the peer gets an RST rather than a FIN.
void reset_socket(asio::ip::tcp::socket& socket);

// Accepted by one of the sandbox's listeners; start() it on the sandbox's strand.
class Relay final : public Closable, public std::enable_shared_from_this<Relay> {
 public:
  static constexpr size_t kBufferSize = 64 * 1024;
  // Passthrough: the pipe between the two sockets, and how many pipes' worth one turn moves.
  static constexpr size_t kPipeSize = 256 * 1024;
  static constexpr int kSpliceRounds = 4;

  Relay(std::shared_ptr<SandboxContext> sandbox, asio::ip::tcp::socket client,
        Destination destination);
  void start();
  void close() override;

 private:
  enum class Phase : uint8_t { kFirstBytes, kResolving, kConnecting, kSplicing, kDone };
  enum class Sniff : uint8_t { kTls, kHttp };
  struct Direction {
    std::unique_ptr<uint8_t[]> buffer;
    // Passthrough: bytes move from one socket into this pipe and on into the other in the
    // kernel (splice(2)), never through `buffer`; `in_pipe` of them are in it.
    UniqueFd pipe_read, pipe_write;
    size_t in_pipe = 0;
    uint64_t bytes = 0;
    bool done = false;
  };

  void read_first_bytes(Sniff sniff);
  void on_first_bytes(Sniff sniff);
  void decide();
  void on_resolved(const std::string& name, Result<std::vector<Address>> addresses);
  // `address` nullopt: a name the host cannot resolve, tunnelled by name (relay_proxy.cc).
  void dial(const std::optional<Address>& address, Decision decision);
  void on_connected();
  // The upstream proxy's leg (relay_proxy.cc).
  bool dial_unresolved_via_proxy(const std::string& name);
  void open_tunnel();
  void fail_connect(std::string reason);
  void proxy_failed(std::string reason, int status);
  void splice(bool up);
  void wait_to_splice(asio::ip::tcp::socket& socket, asio::socket_base::wait_type wait, bool up);
  void arm_idle_timer();
  // Terminated connections (net/inject.h): handshakes, then one request head at a time.
  void terminate_tls();
  void relay_h2();  // both legs chose h2: net/engine/h2_relay.h takes over the TLS streams
  void read_request_head();
  void on_request_head(size_t head_size);
  void forward_body();
  void splice_tls_down();
  void refuse_request(std::string reason);
  void deny(Decision decision);
  void finish(std::string reason, bool reset);
  void count_decision(bool allowed);

  std::shared_ptr<SandboxContext> sandbox_;
  asio::ip::tcp::socket client_;
  asio::ip::tcp::socket upstream_;
  asio::steady_timer timer_;
  Destination destination_;
  Phase phase_ = Phase::kFirstBytes;
  size_t peeked_ = 0;  // first bytes read into up_.buffer before deciding
  Direction up_, down_;
  std::chrono::steady_clock::time_point last_activity_;
  std::chrono::steady_clock::time_point started_steady_;
  bool is_http_ = false;  // a whole request head was read: a denial is a 403
  std::optional<std::string> dns_name_, sni_, host_name_;
  std::optional<Address> host_address_;  // an IP-literal Host
  std::string http_host_;                // the Host as the 403 names it
  ConnectionLog log_;
  std::optional<std::string> proxy_target_;  // through the upstream proxy: CONNECT's target
  bool tunnelled_ = false;                   // the proxy answered 2xx
  using TlsStream = asio::ssl::stream<asio::ip::tcp::socket&>;
  bool terminate_ = false;  // decided in decide(): an inject rule names the SNI
  bool offers_h2_ = false;  // the sandbox's ClientHello offers ALPN h2
  std::optional<TlsStream> client_tls_, upstream_tls_;
  size_t pending_ = 0;      // terminated: bytes read from the sandbox not yet handled
  uint64_t body_left_ = 0;  // terminated: bytes of the current request's body still to forward
};

}  // namespace hutch::net
