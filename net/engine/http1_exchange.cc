// A Relay's HTTP/1.1 exchange (net/engine/relay.h): one loop for plain HTTP and for terminated
// TLS. Each request head is read whole (at most 64 KiB) and checked before any of it goes
// upstream: its framing (net/http1_framing.h), on terminated TLS the inject rules' headers set,
// no placeholder left where its secret does not go, and its Host the name the connection was
// decided for. Then its body is forwarded by its framing (Content-Length, or chunked read
// strictly, trailers checked), and the next head is read: pipelined requests are each checked.
// Responses are relayed as they come, unparsed, except the one to an upgrade request (WebSocket):
// its head is read for the status, and after a 101 both directions are spliced. Upgrade offers
// other than WebSocket's (h2c) are taken out of the head: after them nothing would be checked.
#include <openssl/crypto.h>

#include <boost/asio/write.hpp>
#include <cstring>
#include <span>
#include <string_view>
#include <utility>

#include "net/engine/relay.h"
#include "net/inject.h"

namespace hutch::net {
namespace {

using Tcp = asio::ip::tcp;

// A TLS stream's end: a clean close_notify, or the peer closing without one.
bool tls_ended(const boost::system::error_code& error) {
  return error == asio::error::eof || error == asio::ssl::error::stream_truncated;
}

std::string placeholder_in_body(const std::string& secret) {
  return "the placeholder of secret " + secret +
         " in a request body: secrets are injected into headers only";
}

}  // namespace

// Asio's operations are templates on the stream: one generic call site for both paths.
template <class Op>
void Relay::on_client(Op&& op) {
  if (client_tls_) return op(*client_tls_);
  op(client_);
}

template <class Op>
void Relay::on_upstream(Op&& op) {
  if (upstream_tls_) return op(*upstream_tls_);
  op(upstream_);
}

void Relay::start_exchange() {
  relay_down();
  read_request_head();
}

void Relay::read_request_head() {
  if (pending_ > 0) {
    const HttpHead head = parse_http_head(std::span<const uint8_t>(up_.buffer.get(), pending_));
    if (head.status == HeadStatus::kComplete) return on_request_head(head);
    if (head.status == HeadStatus::kMalformed)
      return refuse_request("http", "malformed HTTP request head: " + head.detail, true);
  }
  on_client([this](auto& stream) {
    stream.async_read_some(
        asio::buffer(up_.buffer.get() + pending_, kBufferSize - pending_),
        [self = shared_from_this()](const boost::system::error_code& error, size_t n) {
          if (self->phase_ != Phase::kSplicing) return;
          if (error) return self->client_ended(error, self->pending_ == 0);
          self->up_.bytes += n;
          self->pending_ += n;
          self->last_activity_ = std::chrono::steady_clock::now();
          self->read_request_head();
        });
  });
}

// One complete head at the start of up_.buffer: refused, or sent on with its body's first bytes.
void Relay::on_request_head(const HttpHead& parsed) {
  const std::string_view head(reinterpret_cast<const char*>(up_.buffer.get()), parsed.head_size);
  auto framing = request_framing(head);
  if (!framing) return refuse_request("http", framing.error().detail, true);
  // A tunnel through the upstream would carry bytes to a host no rule was asked about.
  if (parsed.method == "CONNECT")
    return refuse_request("http", "CONNECT is not relayed: the tunnel's host is not checked");
  const std::shared_ptr<const Policy> policy = sandbox_->current_policy();
  std::shared_ptr<std::string> rewritten;
  if (auto without = only_websocket_upgrade(head)) {
    rewritten = std::make_shared<std::string>(std::move(*without));
    constexpr std::string_view kDropped = "; an upgrade offer other than WebSocket's dropped";
    if (log_.reason.find(kDropped) == std::string::npos) log_.reason += kDropped;
  }
  if (client_tls_) {
    const std::vector<const InjectRule*> rules =
        rules_for(policy->inject, *log_.name, parsed.method, parsed.target);
    if (!rules.empty()) {
      const SecretLookup none = [](std::string_view) { return std::nullopt; };
      auto values =
          headers_to_set(rules, sandbox_->options.secrets ? sandbox_->options.secrets : none);
      if (!values) return refuse_request("inject", values.error().detail);
      auto out = rewrite_head(rewritten ? std::string_view(*rewritten) : head, *values);
      for (HeaderValue& value : *values) OPENSSL_cleanse(value.value.data(), value.value.size());
      if (!out) return refuse_request("inject", out.error().detail);
      rewritten = std::make_shared<std::string>(std::move(*out));
      for (const HeaderValue& value : *values) {
        if (log_.reason.find("injected " + value.name) == std::string::npos)
          log_.reason += "; injected " + value.name;
      }
    }
  }
  // Placeholders before the Host check: a refusal's reason names the Host, never a placeholder.
  if (sandbox_->ca) {
    const std::span<const uint8_t> sent =
        rewritten
            ? std::span(reinterpret_cast<const uint8_t*>(rewritten->data()), rewritten->size())
            : std::span<const uint8_t>(up_.buffer.get(), parsed.head_size);
    if (auto secret = placeholder_in(policy->inject, sandbox_->placeholder_key, sent)) {
      if (rewritten) OPENSSL_cleanse(rewritten->data(), rewritten->size());
      if (!client_tls_) {
        return refuse_request("inject",
                              "the placeholder of secret " + *secret +
                                  " sent in plain HTTP: secrets are injected over TLS only");
      }
      return refuse_request("inject", "the placeholder of secret " + *secret + " sent to " +
                                          *log_.name + " " + parsed.method +
                                          " where no inject rule puts that secret");
    }
  }
  if (auto disagrees = host_disagrees(parsed)) {
    if (rewritten) OPENSSL_cleanse(rewritten->data(), rewritten->size());
    return refuse_request("name", std::move(*disagrees));
  }
  // The body's first bytes, when they came with the head: a placeholder there is answered with a
  // 403 before the head goes. forward_body checks the body as it goes, the head gone by then.
  if (sandbox_->ca && framing->kind != BodyFraming::Kind::kNone) {
    uint64_t first = pending_ - parsed.head_size;
    if (framing->kind == BodyFraming::Kind::kLength) first = std::min(first, framing->length);
    if (framing->kind == BodyFraming::Kind::kChunked) {
      // Trailers are forward_body's to check, and to name as such.
      const ChunkedBody::Scan scan =
          ChunkedBody().scan(std::span<const uint8_t>(up_.buffer.get() + parsed.head_size, first));
      if (scan.trailers_size > 0) first = scan.trailers_at;
    }
    if (auto secret =
            placeholder_in(policy->inject, sandbox_->placeholder_key,
                           std::span<const uint8_t>(up_.buffer.get() + parsed.head_size, first))) {
      if (rewritten) OPENSSL_cleanse(rewritten->data(), rewritten->size());
      return refuse_request("inject", placeholder_in_body(*secret));
    }
  }
  framing_ = *framing;
  body_left_ = framing_.length;
  chunked_ = ChunkedBody();
  body_placeholders_ = PlaceholderStream();
  ++requests_;
  // Set before the head goes out: the response may be read before the write's completion runs.
  awaiting_101_ = wants_upgrade(rewritten ? std::string_view(*rewritten) : head);
  if (!rewritten) {
    head_left_ = parsed.head_size;
    return forward_body();
  }
  pending_ -= parsed.head_size;
  std::memmove(up_.buffer.get(), up_.buffer.get() + parsed.head_size, pending_);
  on_upstream([this, rewritten](auto& stream) {
    asio::async_write(
        stream, asio::buffer(*rewritten),
        [self = shared_from_this(), rewritten](const boost::system::error_code& error, size_t) {
          // The head may hold a secret's value: nothing of it outlives the write.
          OPENSSL_cleanse(rewritten->data(), rewritten->size());
          if (self->phase_ != Phase::kSplicing) return;
          if (error) return self->finish("write upstream: " + error.message(), true);
          self->forward_body();
        });
  });
}

// The Host must name what the connection was decided for: the SNI on terminated TLS; on plain
// HTTP the name agreed at the first head (DNS name, Host), or the address dialled for a literal.
std::optional<std::string> Relay::host_disagrees(const HttpHead& head) const {
  if (head.host.empty()) return std::nullopt;  // HTTP/1.0 without a Host: nothing to compare
  if (client_tls_) {
    auto named = normalize_name(head.host);
    if (named && *named == *log_.name) return std::nullopt;
    return "HTTP Host " + head.host + " is not the TLS server name " + *log_.name;
  }
  auto host = parse_host(head.host);
  if (!host) return "HTTP Host: " + host.error().detail;
  if (host->name) {
    if (log_.name && *host->name == *log_.name) return std::nullopt;
    return "HTTP Host " + *host->name + " is not " +
           (log_.name ? *log_.name + ", the name this connection was decided for"
                      : "named by this connection, decided by address");
  }
  if (!dns_name_ && host->address->effective() == destination_.address.effective())
    return std::nullopt;
  return "HTTP Host " + host->address->to_string() + " is not the address dialled, " +
         destination_.address.to_string();
}

// Sends the head still held (head_left_) with as much of the body as up_.buffer holds, in one
// write, until the body ends.
void Relay::forward_body() {
  const std::span<const uint8_t> body(up_.buffer.get() + head_left_, pending_ - head_left_);
  size_t n = 0;
  bool complete = true;
  switch (framing_.kind) {
    case BodyFraming::Kind::kNone:
      break;
    case BodyFraming::Kind::kLength:
      n = static_cast<size_t>(std::min<uint64_t>(body.size(), body_left_));
      body_left_ -= n;
      complete = body_left_ == 0;
      break;
    case BodyFraming::Kind::kChunked: {
      const ChunkedBody::Scan scan = chunked_.scan(body);
      if (!scan.error.empty()) return refuse_mid_request("http", "chunked body: " + scan.error);
      if (scan.trailers_size > 0 && sandbox_->ca) {
        if (auto secret =
                placeholder_in(sandbox_->current_policy()->inject, sandbox_->placeholder_key,
                               body.subspan(scan.trailers_at, scan.trailers_size))) {
          return refuse_mid_request(
              "inject", "the placeholder of secret " + *secret + " in a chunked body's trailers");
        }
      }
      n = scan.body;
      complete = scan.done;
      break;
    }
  }
  // A placeholder in a body goes nowhere: secrets are set in headers only, so an API that takes
  // its key in the body would get the placeholder; the request is cut before those bytes go.
  if (n > 0 && sandbox_->ca) {
    if (auto secret = body_placeholders_.feed(sandbox_->current_policy()->inject,
                                              sandbox_->placeholder_key, body.first(n)))
      return refuse_mid_request("inject", placeholder_in_body(*secret));
  }
  const size_t out = head_left_ + n;
  if (out == 0 && complete) return after_request();
  if (out == 0) {
    on_client([this](auto& stream) {
      stream.async_read_some(
          asio::buffer(up_.buffer.get() + pending_, kBufferSize - pending_),
          [self = shared_from_this()](const boost::system::error_code& error, size_t n) {
            if (self->phase_ != Phase::kSplicing) return;
            if (error) return self->client_ended(error, false);
            self->up_.bytes += n;
            self->pending_ += n;
            self->last_activity_ = std::chrono::steady_clock::now();
            self->forward_body();
          });
    });
    return;
  }
  on_upstream([this, out, complete](auto& stream) {
    asio::async_write(
        stream, asio::buffer(up_.buffer.get(), out),
        [self = shared_from_this(), out, complete](const boost::system::error_code& error, size_t) {
          if (self->phase_ != Phase::kSplicing) return;
          if (error) return self->finish("write upstream: " + error.message(), true);
          self->pending_ -= out;
          self->head_left_ = 0;
          std::memmove(self->up_.buffer.get(), self->up_.buffer.get() + out, self->pending_);
          if (complete) return self->after_request();
          self->forward_body();
        });
  });
}

void Relay::after_request() {
  // An upgrade request's answer decides what the next bytes from the sandbox are.
  if (awaiting_101_) {
    parked_for_101_ = true;
    return;
  }
  if (switched_) return relay_up_raw();
  read_request_head();
}

void Relay::relay_down() {
  on_upstream([this](auto& stream) {
    stream.async_read_some(
        asio::buffer(down_.buffer.get(), kBufferSize),
        [self = shared_from_this()](const boost::system::error_code& error, size_t n) {
          if (self->phase_ != Phase::kSplicing) return;
          // After a refusal the upstream got a FIN, bare even under TLS: an OpenSSL 3 server
          // answers it with a decode_error alert. Whatever it ends with, the answer is due.
          if (error == asio::error::eof || (self->upstream_tls_ && tls_ended(error)) ||
              (error && self->refusal_))
            return self->upstream_ended();
          if (error) return self->finish("read upstream: " + error.message(), true);
          self->down_.bytes += n;
          self->last_activity_ = std::chrono::steady_clock::now();
          if (self->awaiting_101_) {
            self->upgrade_response_.append(reinterpret_cast<const char*>(self->down_.buffer.get()),
                                           n);
            return self->on_upgrade_response();
          }
          self->down_writing_ = true;
          self->on_client([&](auto& to) {
            asio::async_write(to, asio::buffer(self->down_.buffer.get(), n),
                              [self](const boost::system::error_code& error, size_t) {
                                self->down_writing_ = false;
                                if (self->phase_ != Phase::kSplicing) return;
                                if (error)
                                  return self->finish("write to the sandbox: " + error.message(),
                                                      true);
                                self->relay_down();
                              });
          });
        });
  });
}

// The bytes of the response to an upgrade request so far: interim 1xx heads pass on, a 101
// switches the connection to a splice, any other status means the request was declined and the
// next head from the sandbox is read as usual.
void Relay::on_upgrade_response() {
  const ResponseHead head = parse_response_head(std::span<const uint8_t>(
      reinterpret_cast<const uint8_t*>(upgrade_response_.data()), upgrade_response_.size()));
  if (head.status == ResponseHead::Status::kMalformed)
    return finish("the response to an upgrade request is not an HTTP/1.1 head", true);
  if (head.status == ResponseHead::Status::kNeedMore) return relay_down();
  size_t out = upgrade_response_.size();
  if (head.code == 101) {
    awaiting_101_ = false;
    switched_ = true;
  } else if (head.code >= 200) {
    awaiting_101_ = false;
  } else {
    out = head.head_size;
  }
  auto bytes = std::make_shared<std::string>(upgrade_response_.substr(0, out));
  upgrade_response_.erase(0, out);
  down_writing_ = true;
  on_client([this, bytes](auto& stream) {
    asio::async_write(
        stream, asio::buffer(*bytes),
        [self = shared_from_this(), bytes](const boost::system::error_code& error, size_t) {
          self->down_writing_ = false;
          if (self->phase_ != Phase::kSplicing) return;
          if (error) return self->finish("write to the sandbox: " + error.message(), true);
          if (self->awaiting_101_) return self->on_upgrade_response();
          self->relay_down();
          if (!self->parked_for_101_) return;
          self->parked_for_101_ = false;
          self->after_request();
        });
  });
}

// After a 101: the sandbox's bytes go upstream as they come, the held ones first.
void Relay::relay_up_raw() {
  if (pending_ > 0) {
    const size_t n = std::exchange(pending_, 0);
    on_upstream([this, n](auto& stream) {
      asio::async_write(
          stream, asio::buffer(up_.buffer.get(), n),
          [self = shared_from_this()](const boost::system::error_code& error, size_t) {
            if (self->phase_ != Phase::kSplicing) return;
            if (error) return self->finish("write upstream: " + error.message(), true);
            self->relay_up_raw();
          });
    });
    return;
  }
  on_client([this](auto& stream) {
    stream.async_read_some(
        asio::buffer(up_.buffer.get(), kBufferSize),
        [self = shared_from_this()](const boost::system::error_code& error, size_t n) {
          if (self->phase_ != Phase::kSplicing) return;
          if (error) return self->client_ended(error, true);
          self->up_.bytes += n;
          self->pending_ = n;
          self->last_activity_ = std::chrono::steady_clock::now();
          self->relay_up_raw();
        });
  });
}

// The sandbox stopped sending. On plain HTTP its FIN goes on and the responses still come back
// (a client may half-close after its last request); a TLS stream ends the connection.
void Relay::client_ended(const boost::system::error_code& error, bool between_requests) {
  if (client_tls_) {
    if (tls_ended(error) && between_requests) return finish("closed", false);
    return finish("read from the sandbox: " + error.message(), true);
  }
  if (error != asio::error::eof) return finish("read from the sandbox: " + error.message(), true);
  boost::system::error_code ignored;
  upstream_.shutdown(Tcp::socket::shutdown_send, ignored);
  up_.done = true;
  if (down_.done) finish("closed", false);
}

void Relay::upstream_ended() {
  down_.done = true;
  if (refusal_) {
    auto response = std::move(refusal_);
    on_client([this, response](auto& stream) {
      asio::async_write(
          stream, asio::buffer(*response),
          [self = shared_from_this(), response](const boost::system::error_code&, size_t) {
            self->finish(self->log_.reason, false);
          });
    });
    return;
  }
  if (client_tls_ || !upgrade_response_.empty()) return finish("closed", false);
  boost::system::error_code ignored;
  client_.shutdown(Tcp::socket::shutdown_send, ignored);
  if (up_.done) finish("closed", false);
}

void Relay::count_refusal(std::string rule, std::string reason) {
  sandbox_->with_stats([](SandboxNetStats& stats) { ++stats.denied; });
  log_.allowed = false;
  log_.rule = std::move(rule);
  log_.reason = std::move(reason);
}

// A request that must not go upstream: a 403 with the JSON body naming the rule (400 for a head
// or framing that cannot be read safely), logged as a denial, and the connection closed. The
// answer must follow the responses to the requests already sent: their upstream gets a FIN, and
// the answer goes out once it has answered them and closed.
void Relay::refuse_request(std::string rule, std::string reason, bool bad_request) {
  count_refusal(std::move(rule), std::move(reason));
  auto response = std::make_shared<std::string>(
      bad_request ? std::string(kBadRequestResponse)
                  : build_forbidden_response(log_.name.value_or(http_host_), destination_.port,
                                             log_.rule, log_.reason));
  if (requests_ > 0 || down_writing_) {
    refusal_ = std::move(response);
    boost::system::error_code ignored;
    upstream_.shutdown(Tcp::socket::shutdown_send, ignored);
    return;
  }
  phase_ = Phase::kDone;
  on_client([this, response](auto& stream) {
    asio::async_write(
        stream, asio::buffer(*response),
        [self = shared_from_this(), response](const boost::system::error_code&, size_t) {
          self->finish(self->log_.reason, false);
        });
  });
}

// Refused after the head went upstream (broken chunked framing, a placeholder in trailers): the
// upstream holds half a request and the sandbox may be reading a response, so both are reset.
void Relay::refuse_mid_request(std::string rule, std::string reason) {
  count_refusal(std::move(rule), std::move(reason));
  finish(log_.reason, true);
}

}  // namespace hutch::net
