#include "net/engine/relay.h"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>

#include <array>
#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>
#include <cstring>
#include <span>
#include <string_view>
#include <utility>

#include "net/egress_path.h"
#include "net/engine/fake_names.h"
#include "net/engine/h2_relay.h"
#include "net/http_head.h"
#include "net/inject.h"
#include "net/tls/client_context.h"
#include "net/tls/server_context.h"
#include "net/tls_hello.h"

namespace hutch::net {
namespace {

using Tcp = asio::ip::tcp;

asio::ip::address to_asio(const Address& address) {
  if (address.is_v4()) return asio::ip::address_v4(address.v4_value());
  asio::ip::address_v6::bytes_type bytes;
  std::memcpy(bytes.data(), address.bytes().data(), bytes.size());
  return asio::ip::address_v6(bytes);
}

// The methods of RFC 9110 and PATCH, followed by a space: what a plain-HTTP client sends first.
bool looks_like_http(std::span<const uint8_t> bytes) {
  static constexpr std::array<std::string_view, 9> kMethods{
      "GET ", "POST ", "HEAD ", "PUT ", "DELETE ", "OPTIONS ", "PATCH ", "CONNECT ", "TRACE "};
  const std::string_view text(reinterpret_cast<const char*>(bytes.data()), bytes.size());
  for (std::string_view method : kMethods) {
    if (text.starts_with(method.substr(0, std::min(method.size(), text.size())))) return true;
  }
  return false;
}

Decision refusal(std::string rule, std::string reason) {
  return Decision{false, std::move(rule), std::move(reason)};
}

// The protocol ALPN selected on a handshaken connection, "" for none.
std::string_view alpn_of(SSL* ssl) {
  const unsigned char* protocol = nullptr;
  unsigned size = 0;
  SSL_get0_alpn_selected(ssl, &protocol, &size);
  return {reinterpret_cast<const char*>(protocol), size};
}

// SIGPIPE blocked on this thread for its life; consume() takes a SIGPIPE raised meanwhile (it
// is directed at this thread), so none is left pending when the mask is restored.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;
  void consume() const {
    const timespec now{};
    while (sigtimedwait(&pipe_, nullptr, &now) == -1 && errno == EINTR) {
    }
  }

 private:
  sigset_t pipe_{}, old_{};
};

}  // namespace

void reset_socket(Tcp::socket& socket) {
  if (!socket.is_open()) return;
  boost::system::error_code ignored;
  socket.set_option(asio::socket_base::linger(true, 0), ignored);
  socket.close(ignored);
}

Relay::Relay(std::shared_ptr<SandboxContext> sandbox, Tcp::socket client, Destination destination)
    : sandbox_(std::move(sandbox)),
      client_(std::move(client)),
      upstream_(sandbox_->strand),
      timer_(sandbox_->strand),
      destination_(destination) {
  log_.sandbox = sandbox_->name;
  log_.protocol = "tcp";
  log_.port = destination_.port;
  log_.started = std::chrono::system_clock::now();
  started_steady_ = std::chrono::steady_clock::now();
}

void Relay::start() {
  sandbox_->open.insert(shared_from_this());
  sandbox_->with_stats([](SandboxNetStats& stats) { ++stats.active; });
  up_.buffer = std::make_unique_for_overwrite<uint8_t[]>(kBufferSize);
  if (FakeNames::in_range(destination_.address)) {
    dns_name_ = [&] {
      std::lock_guard lock(sandbox_->mutex);
      return sandbox_->fake_names.name_of(destination_.address);
    }();
    if (!dns_name_) {
      log_.address = destination_.address.to_string();
      deny(refusal("name", "no name was given out as " + destination_.address.to_string()));
      return;
    }
    log_.name = dns_name_;
  }
  if (destination_.port == 443) {
    read_first_bytes(Sniff::kTls);
  } else if (destination_.port == 80) {
    read_first_bytes(Sniff::kHttp);
  } else {
    // Other ports are decided before any byte: ssh, SMTP and databases speak first.
    decide();
  }
}

void Relay::read_first_bytes(Sniff sniff) {
  if (peeked_ == 0) {
    timer_.expires_after(sandbox_->options.first_bytes_timeout);
    timer_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
      if (error || self->phase_ != Phase::kFirstBytes) return;
      self->deny(refusal(
          "name", "no TLS ClientHello or HTTP head within " +
                      std::to_string(self->sandbox_->options.first_bytes_timeout.count()) + " ms"));
    });
  }
  client_.async_read_some(
      asio::buffer(up_.buffer.get() + peeked_, kBufferSize - peeked_),
      [self = shared_from_this(), sniff](const boost::system::error_code& error, size_t n) {
        if (self->phase_ != Phase::kFirstBytes) return;
        if (error) {
          self->count_decision(false);
          self->log_.rule = "name";
          self->log_.reason = "closed by the sandbox before its first bytes were complete";
          self->finish(self->log_.reason, false);
          return;
        }
        self->peeked_ += n;
        self->on_first_bytes(sniff);
      });
}

void Relay::on_first_bytes(Sniff sniff) {
  const std::span<const uint8_t> bytes(up_.buffer.get(), peeked_);
  const bool full = peeked_ == kBufferSize;
  if (sniff == Sniff::kTls || bytes[0] == 0x16) {
    const ClientHello hello = parse_client_hello(bytes);
    switch (hello.status) {
      case HelloStatus::kNeedMore:
        if (!full) return read_first_bytes(Sniff::kTls);
        return deny(refusal("name", "TLS ClientHello larger than 64 KiB"));
      case HelloStatus::kComplete:
        sni_ = hello.server_name;
        offers_h2_ = std::ranges::find(hello.alpn, "h2") != hello.alpn.end();
        [[fallthrough]];
      case HelloStatus::kNoSni:
        log_.protocol = "tls";
        return decide();
      case HelloStatus::kMalformed:
        log_.protocol = "tls";
        return deny(refusal("name", "malformed TLS ClientHello: " + hello.detail));
      case HelloStatus::kNotTls:
        if (!looks_like_http(bytes)) return decide();
        break;
    }
  }
  if (!looks_like_http(bytes)) return decide();
  const HttpHead head = parse_http_head(bytes);
  log_.protocol = "http";
  if (head.status == HeadStatus::kNeedMore) {
    if (!full) return read_first_bytes(Sniff::kHttp);
    return deny(refusal("name", "HTTP request head larger than 64 KiB"));
  }
  if (head.status == HeadStatus::kMalformed) {
    phase_ = Phase::kDone;
    timer_.cancel();
    count_decision(false);
    log_.rule = "name";
    log_.reason = "malformed HTTP request head: " + head.detail;
    asio::async_write(client_, asio::buffer(kBadRequestResponse),
                      [self = shared_from_this()](const boost::system::error_code&, size_t) {
                        self->finish(self->log_.reason, false);
                      });
    return;
  }
  is_http_ = true;
  http_host_ = head.host;
  if (sandbox_->ca) {
    if (auto secret = placeholder_in(sandbox_->current_policy()->inject, sandbox_->placeholder_key,
                                     bytes.first(head.head_size))) {
      return deny(refusal("inject", "the placeholder of secret " + *secret +
                                        " sent in plain HTTP: secrets are injected over TLS only"));
    }
  }
  if (!head.host.empty()) {
    auto host = parse_host(head.host);
    if (!host) return deny(refusal("name", "HTTP Host: " + host.error().detail));
    host_name_ = host->name;
    host_address_ = host->address;
  }
  decide();
}

void Relay::decide() {
  timer_.cancel();
  phase_ = Phase::kResolving;
  const std::shared_ptr<const Policy> policy = sandbox_->current_policy();
  const Floor& floor = sandbox_->options.floor;
  const Address& dialled = destination_.address;
  const bool literal = !dns_name_.has_value();
  if (http_host_.empty()) http_host_ = dns_name_.value_or(sni_.value_or(dialled.to_string()));
  // An IP-literal Host must be the address dialled (for a fake address it names nothing).
  if (host_address_ && (!literal || !(host_address_->effective() == dialled.effective()))) {
    return deny(refusal("name", "HTTP Host " + host_address_->to_string() +
                                    " is not the address dialled, " + dialled.to_string()));
  }
  std::vector<NameSeen> seen;
  if (dns_name_) seen.push_back({"dns", *dns_name_});
  if (sni_) seen.push_back({"sni", *sni_});
  if (host_name_) seen.push_back({"host", *host_name_});
  if (seen.empty()) {
    log_.address = dialled.to_string();
    Decision decision = net::decide(
        *policy, floor, Connection{std::nullopt, dialled, destination_.port, http_or_tls()});
    if (!decision.allowed) return deny(std::move(decision));
    return dial(dialled, std::move(decision));
  }
  auto name = agree_names(seen);
  if (!name) return deny(refusal("name", name.error().detail));
  log_.name = *name;
  // Denied names are never looked up: a lookup would carry the name to the host's resolver.
  Decision by_name = decide_name(*policy, *name);
  if (!by_name.allowed) return deny(std::move(by_name));
  terminate_ = sandbox_->ca && sni_ && !is_http_ && terminates(policy->inject, *name);
  // The resolver may outlive the engine (and run the callback on its own thread, after the
  // engine is gone): the callback holds only weak references and the gate.
  std::weak_ptr<Relay> weak = shared_from_this();
  std::weak_ptr<SandboxContext> weak_sandbox = sandbox_;
  sandbox_->resolver->resolve(*name, [weak, weak_sandbox, gate = sandbox_->gate,
                                      name = *name](Result<std::vector<Address>> addresses) {
    std::lock_guard lock(gate->mutex);
    auto sandbox = weak_sandbox.lock();
    if (!gate->open || !sandbox) return;
    asio::post(sandbox->strand, [weak, name, addresses = std::move(addresses)]() mutable {
      if (auto self = weak.lock()) self->on_resolved(name, std::move(addresses));
    });
  });
}

void Relay::on_resolved(const std::string& name, Result<std::vector<Address>> addresses) {
  if (phase_ != Phase::kResolving) return;
  if ((!addresses || addresses->empty()) && dial_unresolved_via_proxy(name)) return;
  if (!addresses)
    return deny(refusal("name", "cannot resolve " + name + ": " + addresses.error().message()));
  const std::shared_ptr<const Policy> policy = sandbox_->current_policy();
  const Floor& floor = sandbox_->options.floor;
  // A name given with an IP-literal destination (SNI or Host) must resolve to that address:
  // otherwise an allowed name would carry a connection to any address the sandbox picks.
  const bool literal = !dns_name_.has_value();
  std::optional<Decision> refused;
  for (const Address& address : *addresses) {
    if (literal && !(address.effective() == destination_.address.effective())) continue;
    log_.address = address.to_string();
    Decision checked = check_resolved(*policy, floor, name, address);
    if (!checked.allowed) {
      refused = std::move(checked);
      continue;
    }
    Decision decision =
        net::decide(*policy, floor, Connection{name, address, destination_.port, http_or_tls()});
    if (decision.allowed) return dial(address, std::move(decision));
    refused = std::move(decision);
  }
  if (refused) return deny(std::move(*refused));
  if (literal) {
    log_.address = destination_.address.to_string();
    return deny(refusal("name", name + " does not resolve to " + destination_.address.to_string() +
                                    ", the address dialled"));
  }
  deny(refusal("name", name + " resolves to no address"));
}

void Relay::dial(const std::optional<Address>& address, Decision decision) {
  const std::optional<UpstreamProxy>& proxy = sandbox_->options.upstream_proxy;
  if (proxy && address && proxy->is_proxy_address(*address))
    return deny(refusal("floor", "floor: the upstream proxy's address " + address->to_string()));
  count_decision(true);
  log_.allowed = true;
  log_.address = address ? address->to_string() : "";
  log_.rule = std::move(decision.rule);
  log_.reason = std::move(decision.reason);
  if (proxy) proxy_target_ = proxy->tunnel_target(log_.name, address, destination_.port);
  if (proxy_target_) {
    log_.via_proxy = proxy->authority();
    log_.reason += "; via proxy " + log_.via_proxy;
  }
  // Without an address the connection is always tunnelled (dial_unresolved_via_proxy).
  const Address& to = proxy_target_ ? proxy->address : *address;
  const uint16_t port = proxy_target_ ? proxy->port : destination_.port;
  std::string peer = proxy_target_ ? "upstream proxy " + log_.via_proxy : log_.address;
  phase_ = Phase::kConnecting;
  const int domain = to.is_v4() ? AF_INET : AF_INET6;
  const int type = SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC;
  Result<UniqueFd> fd = sandbox_->options.upstream_netns_fd >= 0
                            ? socket_in_netns(sandbox_->options.upstream_netns_fd, domain, type)
                            : Result<UniqueFd>(UniqueFd(::socket(domain, type, 0)));
  if (fd && !*fd) fd = sys_error("socket", to.is_v4() ? "AF_INET" : "AF_INET6");
  if (!fd) return finish("upstream socket: " + fd.error().message(), true);
  boost::system::error_code error;
  upstream_.assign(to.is_v4() ? Tcp::v4() : Tcp::v6(), fd->get(), error);
  if (error) return finish("upstream socket: " + error.message(), true);
  fd->release();
  timer_.expires_after(sandbox_->options.connect_timeout);
  timer_.async_wait([self = shared_from_this(), peer](const boost::system::error_code& error) {
    if (error || self->phase_ != Phase::kConnecting) return;
    self->fail_connect("connect to " + peer + ": timed out");
  });
  upstream_.async_connect(
      Tcp::endpoint(to_asio(to), port),
      [self = shared_from_this(), peer = std::move(peer)](const boost::system::error_code& error) {
        if (self->phase_ != Phase::kConnecting) return;
        if (error) return self->fail_connect("connect to " + peer + ": " + error.message());
        self->on_connected();
      });
}

void Relay::on_connected() {
  if (proxy_target_ && !tunnelled_) return open_tunnel();
  timer_.cancel();
  phase_ = Phase::kSplicing;
  boost::system::error_code ignored;
  // Relayed segments go out as they come: the two endpoints already chose their own batching.
  client_.set_option(Tcp::no_delay(true), ignored);
  upstream_.set_option(Tcp::no_delay(true), ignored);
  down_.buffer = std::make_unique_for_overwrite<uint8_t[]>(kBufferSize);
  last_activity_ = std::chrono::steady_clock::now();
  arm_idle_timer();
  if (terminate_) return terminate_tls();
  if (is_http_) {
    up_.bytes += peeked_;
    pending_ = peeked_;
    peeked_ = 0;
    return start_exchange();
  }
  splice(false);
  if (peeked_ == 0) return splice(true);
  up_.bytes += peeked_;
  asio::async_write(upstream_, asio::buffer(up_.buffer.get(), peeked_),
                    [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                      if (self->phase_ != Phase::kSplicing) return;
                      if (error) return self->finish("write upstream: " + error.message(), true);
                      self->splice(true);
                    });
}

// Passthrough moves bytes socket -> pipe -> socket in the kernel (splice(2)): no copy through
// user space, and up to a pipe's worth (kPipeSize) per wakeup. Read into a 64 KiB buffer and
// written out, bulk was 52 % of a direct connection; this way 86 % (bench/network.sh, medians,
// docs/network.md). Counted as read: the log's bytes and the idle timer see what the source sent.
void Relay::splice(bool up) {
  // The other direction's turn may have ended the connection (on_connected starts both).
  if (phase_ != Phase::kSplicing) return;
  Tcp::socket& from = up ? client_ : upstream_;
  Tcp::socket& to = up ? upstream_ : client_;
  Direction& direction = up ? up_ : down_;
  const char* const reading = up ? "read from the sandbox: " : "read upstream: ";
  const char* const writing = up ? "write upstream: " : "write to the sandbox: ";
  if (!direction.pipe_read) {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC | O_NONBLOCK) != 0)
      return finish(std::string("pipe2: ") + std::strerror(errno), true);
    direction.pipe_read.reset(ends[0]);
    direction.pipe_write.reset(ends[1]);
    // Bigger than the default 64 KiB when the system allows (pipe-max-size, per-user pages);
    // the default works too, in more rounds.
    ::fcntl(direction.pipe_write.get(), F_SETPIPE_SZ, static_cast<int>(kPipeSize));
    // splice(2) on a socket blocks unless the socket itself is O_NONBLOCK (tcp_splice_read reads
    // the file's flags, not SPLICE_F_NONBLOCK).
    boost::system::error_code ignored;
    from.native_non_blocking(true, ignored);
    to.native_non_blocking(true, ignored);
  }
  // A few pipes' worth per turn, then the strand's other work (the other direction, other
  // connections of the sandbox) runs before this one goes on.
  for (int round = 0; round < kSpliceRounds; ++round) {
    if (direction.in_pipe == 0) {
      const ssize_t n = ::splice(from.native_handle(), nullptr, direction.pipe_write.get(), nullptr,
                                 kPipeSize, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      if (n == 0) {
        // Half-close, with nothing left in the pipe: the other side may still have things to say.
        boost::system::error_code ignored;
        to.shutdown(Tcp::socket::shutdown_send, ignored);
        direction.done = true;
        if (up_.done && down_.done) finish("closed", false);
        return;
      }
      if (n < 0 && (errno == EAGAIN || errno == EINTR))
        return wait_to_splice(from, Tcp::socket::wait_read, up);
      if (n < 0) return finish(reading + std::string("splice: ") + std::strerror(errno), true);
      direction.bytes += static_cast<uint64_t>(n);
      direction.in_pipe = static_cast<size_t>(n);
      last_activity_ = std::chrono::steady_clock::now();
    }
    ssize_t n = 0;
    int error = 0;
    {
      // splice(2) into a socket whose peer is gone raises SIGPIPE (it takes no MSG_NOSIGNAL),
      // and not every process the engine runs in ignores it (tests, benches).
      const SigpipeBlocked blocked;
      n = ::splice(direction.pipe_read.get(), nullptr, to.native_handle(), nullptr,
                   direction.in_pipe, SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
      error = errno;
      if (n < 0 && error == EPIPE) blocked.consume();
    }
    if (n < 0 && (error == EAGAIN || error == EINTR))
      return wait_to_splice(to, Tcp::socket::wait_write, up);
    if (n < 0) return finish(writing + std::string("splice: ") + std::strerror(error), true);
    direction.in_pipe -= static_cast<size_t>(n);
  }
  asio::post(sandbox_->strand, [self = shared_from_this(), up] { self->splice(up); });
}

void Relay::wait_to_splice(Tcp::socket& socket, asio::socket_base::wait_type wait, bool up) {
  socket.async_wait(wait, [self = shared_from_this(), up](const boost::system::error_code& error) {
    if (self->phase_ != Phase::kSplicing) return;
    if (error) return self->finish("wait to splice: " + error.message(), true);
    self->splice(up);
  });
}

// One timer for the connection's life, not one reset per read: it wakes at the earliest moment
// the connection could have been idle long enough, and sleeps again if it was not.
void Relay::arm_idle_timer() {
  timer_.expires_at(last_activity_ + sandbox_->options.idle_timeout);
  timer_.async_wait([self = shared_from_this()](const boost::system::error_code& error) {
    if (error || self->phase_ != Phase::kSplicing) return;
    if (std::chrono::steady_clock::now() - self->last_activity_ >=
        self->sandbox_->options.idle_timeout) {
      return self->finish(
          "idle for " + std::to_string(self->sandbox_->options.idle_timeout.count()) + " ms", true);
    }
    self->arm_idle_timer();
  });
}

// Both legs must speak one protocol, so the sandbox is offered what the upstream chooses (h2
// only if the sandbox offered it): h2 goes to the h2 relay, HTTP/1.1 (or no ALPN) to the request
// loop below. No translation between the two. When that choice is known before the upstream's
// handshake ends, both handshakes run at once: a sandbox that offers no h2 gets HTTP/1.1 whatever
// the upstream says, and a resumed session names what the upstream chose last time. Nothing is
// relayed before both have ended and agree.
void Relay::terminate_tls() {
  upstream_tls_.emplace(upstream_, *sandbox_->upstream_tls);
  SSL* upstream = upstream_tls_->native_handle();
  static constexpr std::string_view kH2AndHttp11("\x02h2\x08http/1.1", 12);
  static constexpr std::string_view kHttp11("\x08http/1.1", 9);
  const std::string_view offer = offers_h2_ ? kH2AndHttp11 : kHttp11;
  if (auto configured = tls::configure_upstream_ssl(upstream, *log_.name); !configured) {
    return finish("upstream TLS: " + configured.error().message(), true);
  }
  upstream_session_key_ =
      *log_.name + ":" + std::to_string(destination_.port) + " " + std::string(offer);
  auto last_alpn =
      tls::resume_upstream_session(upstream, sandbox_->upstream_sessions, upstream_session_key_);
  if (!last_alpn) return finish("upstream TLS: " + last_alpn.error().message(), true);
  // SSL_set_alpn_protos returns 0 on success, unlike the rest of the API.
  if (SSL_set_alpn_protos(upstream, reinterpret_cast<const unsigned char*>(offer.data()),
                          static_cast<unsigned>(offer.size())) != 0) {
    return finish("upstream TLS: SSL_set_alpn_protos failed", true);
  }
  upstream_tls_->async_handshake(
      asio::ssl::stream_base::client,
      [self = shared_from_this()](const boost::system::error_code& error) {
        if (self->phase_ != Phase::kSplicing) return;
        // An upstream whose certificate does not verify is reset, never relayed.
        if (error) return self->finish("TLS handshake upstream: " + error.message(), true);
        if (SSL_session_reused(self->upstream_tls_->native_handle()) == 1)
          self->log_.reason += "; upstream session resumed";
        self->upstream_h2_ = alpn_of(self->upstream_tls_->native_handle()) == "h2";
        if (!self->client_tls_) return self->handshake_with_sandbox(*self->upstream_h2_);
        self->after_handshake();
      });
  if (!offers_h2_) return handshake_with_sandbox(false);
  if (*last_alpn) handshake_with_sandbox(**last_alpn == "h2");
}

void Relay::handshake_with_sandbox(bool h2) {
  auto server = sandbox_->server_tls();
  if (!server) return finish("TLS server: " + server.error().message(), true);
  server_tls_ = std::move(*server);
  client_tls_.emplace(client_, *server_tls_);
  const std::vector<std::string> offer{h2 ? "h2" : "http/1.1"};
  if (auto offered = tls::offer_alpn(client_tls_->native_handle(), offer); !offered)
    return finish("TLS with the sandbox: " + offered.error().message(), true);
  if (!upstream_h2_) log_.reason += "; handshakes in parallel";
  // The ClientHello already read is the handshake's first bytes.
  client_tls_->async_handshake(
      asio::ssl::stream_base::server, asio::buffer(up_.buffer.get(), peeked_),
      [self = shared_from_this(), h2](const boost::system::error_code& error, size_t) {
        if (self->phase_ != Phase::kSplicing) return;
        if (error) return self->finish("TLS handshake with the sandbox: " + error.message(), true);
        self->up_.bytes += self->peeked_;
        self->peeked_ = 0;
        self->sandbox_h2_ = h2;
        self->after_handshake();
      });
}

void Relay::after_handshake() {
  if (!upstream_h2_ || !sandbox_h2_) return;  // the other handshake has not ended yet
  if (*upstream_h2_ != *sandbox_h2_) {
    // The upstream chose otherwise than its last session did (a new server or configuration):
    // the sandbox was already promised the other protocol. The host's other sessions say the
    // same and go too, so the next connection waits for the upstream's choice.
    sandbox_->upstream_sessions->forget(upstream_session_key_);
    return finish(std::string("the upstream chose ") + (*upstream_h2_ ? "h2" : "HTTP/1.1") +
                      ", not the protocol its last session had",
                  true);
  }
  if (*sandbox_h2_) return relay_h2();
  start_exchange();
}

void Relay::relay_h2() {
  log_.reason += "; h2";
  start_h2_relay(H2Legs{sandbox_, *client_tls_, *upstream_tls_, log_}, shared_from_this(),
                 H2Hooks{.on_bytes =
                             [this](uint64_t up, uint64_t down) {
                               up_.bytes += up;
                               down_.bytes += down;
                               last_activity_ = std::chrono::steady_clock::now();
                             },
                         .on_injected =
                             [this](std::string_view header) {
                               const std::string note = "; injected " + std::string(header);
                               if (log_.reason.find(note) == std::string::npos) log_.reason += note;
                             },
                         .on_end = [this](std::string reason,
                                          bool reset) { finish(std::move(reason), reset); }});
}

void Relay::deny(Decision decision) {
  count_decision(false);
  log_.allowed = false;
  log_.rule = std::move(decision.rule);
  log_.reason = std::move(decision.reason);
  if (log_.address.empty() && !dns_name_) log_.address = destination_.address.to_string();
  if (!is_http_) return finish(log_.reason, true);
  phase_ = Phase::kDone;
  timer_.cancel();
  auto response = std::make_shared<std::string>(
      build_forbidden_response(http_host_, destination_.port, log_.rule, log_.reason));
  asio::async_write(
      client_, asio::buffer(*response),
      [self = shared_from_this(), response](const boost::system::error_code&, size_t) {
        boost::system::error_code ignored;
        self->client_.shutdown(Tcp::socket::shutdown_send, ignored);
        self->finish(self->log_.reason, false);
      });
}

void Relay::count_decision(bool allowed) {
  sandbox_->with_stats([allowed](SandboxNetStats& stats) {
    ++stats.connections;
    if (!allowed) ++stats.denied;
  });
}

void Relay::finish(std::string reason, bool reset) {
  if (!sandbox_->open.contains(shared_from_this())) return;
  phase_ = Phase::kDone;
  boost::system::error_code ignored;
  timer_.cancel();
  if (reset) {
    reset_socket(client_);
    reset_socket(upstream_);
  } else {
    client_.close(ignored);
    upstream_.close(ignored);
  }
  if (log_.allowed && reason != "closed") log_.reason += "; ended: " + reason;
  log_.bytes_up = up_.bytes;
  log_.bytes_down = down_.bytes;
  log_.duration_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started_steady_)
          .count();
  sandbox_->with_stats([this](SandboxNetStats& stats) {
    --stats.active;
    stats.bytes_up += up_.bytes;
    stats.bytes_down += down_.bytes;
  });
  if (sandbox_->log) sandbox_->log(log_);
  sandbox_->open.erase(shared_from_this());
}

void Relay::close() { finish("the sandbox was detached", true); }

}  // namespace hutch::net
