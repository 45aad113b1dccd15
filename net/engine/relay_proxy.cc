// The relay's leg through the upstream proxy (EngineOptions::upstream_proxy): the decision for a
// name only the proxy can resolve, the CONNECT once the proxy's socket is connected, and what the
// sandbox gets when the proxy fails. Apart from relay.cc, which only picks the proxy's address
// to dial and calls open_tunnel() before going on as over a direct connection.
#include <openssl/crypto.h>

#include <boost/asio/write.hpp>
#include <memory>

#include "net/engine/proxy_tunnel.h"
#include "net/engine/relay.h"

namespace hutch::net {

using Tcp = asio::ip::tcp;

// Behind a corporate proxy the host often resolves no outside name: the proxy does. Such a name
// goes to the proxy by name, decided by the rules naming it (decide_unresolved: no floor or CIDR
// check can apply to an address only the proxy knows). Not for an IP-literal destination, whose
// name must resolve to the address the sandbox dialled, nor for a name no_proxy covers.
bool Relay::dial_unresolved_via_proxy(const std::string& name) {
  const std::optional<UpstreamProxy>& proxy = sandbox_->options.upstream_proxy;
  if (!proxy || !dns_name_ || !proxy->tunnel_target(name, std::nullopt, destination_.port))
    return false;
  Decision decision =
      decide_unresolved(*sandbox_->current_policy(), name, destination_.port, http_or_tls());
  if (!decision.allowed) {
    deny(std::move(decision));
    return true;
  }
  decision.reason += "; the host cannot resolve " + name + ": the proxy resolves it";
  dial(std::nullopt, std::move(decision));
  return true;
}

void Relay::open_tunnel() {
  timer_.cancel();  // the exchange keeps its own deadline
  const UpstreamProxy& proxy = *sandbox_->options.upstream_proxy;
  auto authorization = proxy_authorization(proxy, sandbox_->options.secrets);
  if (!authorization) return proxy_failed(authorization.error().detail, 0);
  std::string request = connect_request(*proxy_target_, *authorization);
  if (*authorization) OPENSSL_cleanse((*authorization)->data(), (*authorization)->size());
  open_proxy_tunnel(upstream_, std::move(request), sandbox_->options.connect_timeout,
                    [self = shared_from_this()](TunnelResult result) {
                      if (self->phase_ != Phase::kConnecting) return;
                      if (!result.open) {
                        return self->proxy_failed("upstream proxy " + self->log_.via_proxy + " " +
                                                      result.detail + " to CONNECT " +
                                                      *self->proxy_target_,
                                                  result.status);
                      }
                      self->tunnelled_ = true;
                      self->on_connected();
                    });
}

void Relay::fail_connect(std::string reason) {
  if (proxy_target_) return proxy_failed(std::move(reason), 0);
  finish(std::move(reason), true);
}

// No direct fallback: the sandbox's connection is reset, or a plain-HTTP request gets a 502 that
// names the proxy's status; nothing the proxy sent reaches the sandbox.
void Relay::proxy_failed(std::string reason, int status) {
  log_.proxy_failed = true;
  if (!is_http_) return finish(std::move(reason), true);
  phase_ = Phase::kDone;
  timer_.cancel();
  reset_socket(upstream_);
  auto response = std::make_shared<std::string>(
      build_proxy_failure_response(http_host_, destination_.port, status, reason));
  asio::async_write(client_, asio::buffer(*response),
                    [self = shared_from_this(), response, reason = std::move(reason)](
                        const boost::system::error_code&, size_t) {
                      boost::system::error_code ignored;
                      self->client_.shutdown(Tcp::socket::shutdown_send, ignored);
                      self->finish(reason, false);
                    });
}

}  // namespace hutch::net
