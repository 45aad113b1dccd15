// One TCP connection from a sandbox, from accept to close: learns its names (fake address, TLS
// SNI, HTTP Host), decides, resolves and checks, dials the checked address and splices both ways.
// For a TLS host an inject rule names (and a sandbox with a CA), it terminates TLS on both sides
// instead and sets the rules' headers in each request. Plain HTTP and terminated TLS go through
// one HTTP/1.1 exchange (net/engine/http1_exchange.cc) that checks every request; when both legs
// of a terminated connection chose h2, the h2 relay (net/engine/h2_relay.h) takes them over.
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
#include "net/http1_framing.h"
#include "net/http_head.h"
#include "net/inject.h"
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
  // Terminated connections (net/inject.h): the handshakes, then the HTTP/1.1 exchange.
  void terminate_tls();
  void handshake_with_sandbox(bool h2);
  void after_handshake();  // each handshake's end: once both have ended, the relay starts
  void relay_h2();         // both legs chose h2: net/engine/h2_relay.h takes over the TLS streams
  // The HTTP/1.1 exchange (net/engine/http1_exchange.cc), on the plain socket or on terminated
  // TLS alike: each request head read whole and checked, its body forwarded by its framing.
  void start_exchange();
  void read_request_head();
  void on_request_head(const HttpHead& head);
  std::optional<std::string> host_disagrees(const HttpHead& head) const;
  void forward_body();
  void after_request();
  void relay_down();
  void on_upgrade_response();
  void relay_up_raw();
  void client_ended(const boost::system::error_code& error, bool between_requests);
  void upstream_ended();
  void refuse_request(std::string rule, std::string reason, bool bad_request = false);
  void refuse_mid_request(std::string rule, std::string reason);
  void count_refusal(std::string rule, std::string reason);
  template <class Op>
  void on_client(Op&& op);
  template <class Op>
  void on_upstream(Op&& op);
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
  // What a portless allow covers on ports 80 and 443 (net/policy.h): a ClientHello or a head.
  bool http_or_tls() const { return is_http_ || log_.protocol == "tls"; }
  std::optional<std::string> dns_name_, sni_, host_name_;
  std::optional<Address> host_address_;  // an IP-literal Host
  std::string http_host_;                // the Host as the 403 names it
  ConnectionLog log_;
  std::optional<std::string> proxy_target_;  // through the upstream proxy: CONNECT's target
  bool tunnelled_ = false;                   // the proxy answered 2xx
  using TlsStream = asio::ssl::stream<asio::ip::tcp::socket&>;
  bool terminate_ = false;  // decided in decide(): an inject rule names the SNI
  bool offers_h2_ = false;  // the sandbox's ClientHello offers ALPN h2
  // The server client_tls_ was made from, and with it the CA its leaf comes from: a rotation
  // (SandboxContext::replace_ca) leaves them to the connections that use them.
  std::shared_ptr<asio::ssl::context> server_tls_;
  std::optional<TlsStream> client_tls_, upstream_tls_;
  // Each leg's handshake once ended: whether it chose h2.
  std::optional<bool> upstream_h2_, sandbox_h2_;
  std::string upstream_session_key_;  // host:port and ALPN offer (tls::UpstreamSessions)
  // The HTTP/1.1 exchange's state (net/engine/http1_exchange.cc).
  size_t pending_ = 0;    // bytes read from the sandbox into up_.buffer, not yet forwarded
  size_t head_left_ = 0;  // of them, the head's bytes that go out with the body's first bytes
  BodyFraming framing_;
  uint64_t body_left_ = 0;  // kLength: bytes of the current request's body still to forward
  ChunkedBody chunked_;
  PlaceholderStream body_placeholders_;  // the current request body's
  uint64_t requests_ = 0;                // request heads forwarded upstream
  bool down_writing_ = false;
  // An upgrade request was forwarded: the response's head is held in upgrade_response_ until
  // its status says whether the connection switches protocols (101: spliced both ways).
  bool awaiting_101_ = false;
  bool parked_for_101_ = false;  // the request is sent; the sandbox is not read meanwhile
  bool switched_ = false;        // a 101 came: both directions are spliced
  std::string upgrade_response_;
  // A refusal after requests went upstream: sent once the upstream answered them and closed.
  std::shared_ptr<std::string> refusal_;
};

}  // namespace hutch::net
