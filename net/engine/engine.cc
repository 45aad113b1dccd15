// The engine: io threads, the attached sandboxes, their listeners and the DNS stub's sockets.
// The relay of each TCP connection is relay.cc; the stub's answers are dns_stub.cc.
#include "net/engine/engine.h"

#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ip/udp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/write.hpp>
#include <future>
#include <thread>

#include "net/engine/dns_stub.h"
#include "net/engine/relay.h"
#include "net/engine/sandbox.h"
#include "net/tls/client_context.h"
#include "net/tls/server_context.h"

namespace hutch::net {
namespace {

using Tcp = asio::ip::tcp;
using Udp = asio::ip::udp;

// A UDP DNS message (EDNS lets clients announce up to 4096 bytes; a query is far smaller).
constexpr size_t kDnsBuffer = 4096;

// Answers one query for the sandbox: the decision and the fake address under the lock, the
// sinks outside it.
std::vector<uint8_t> answer(SandboxContext& sandbox, const Engine::NameSink& name_sink,
                            std::span<const uint8_t> packet, std::string_view protocol) {
  const auto started = std::chrono::steady_clock::now();
  DnsStubAnswer out;
  {
    std::lock_guard lock(sandbox.mutex);
    out = answer_dns_query(packet, *sandbox.policy, sandbox.fake_names);
    ++sandbox.stats.dns_queries;
    if (!out.decision.allowed) ++sandbox.stats.dns_denied;
  }
  if (out.new_fake_address && name_sink) name_sink(sandbox.name, *out.new_fake_address, *out.name);
  if (sandbox.log) {
    ConnectionLog log;
    log.sandbox = sandbox.name;
    log.protocol = "dns";
    log.name = out.name;
    if (out.new_fake_address) log.address = out.new_fake_address->to_string();
    log.port = kDnsPort;
    log.allowed = out.decision.allowed;
    log.rule = std::move(out.decision.rule);
    log.reason = std::move(out.decision.reason);
    if (protocol == "tcp") log.reason += " (over TCP)";
    log.started = std::chrono::system_clock::now();
    log.duration_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - started)
            .count();
    sandbox.log(log);
  }
  return std::move(out.reply);
}

// The stub on one UDP socket: one query at a time per socket, answered without I/O in between
// (fake addresses need no upstream), so the reply buffer is the socket's own.
class DnsUdp final : public Closable, public std::enable_shared_from_this<DnsUdp> {
 public:
  DnsUdp(std::shared_ptr<SandboxContext> sandbox, const Engine::NameSink& name_sink,
         Udp::socket socket)
      : sandbox_(std::move(sandbox)), name_sink_(name_sink), socket_(std::move(socket)) {}

  void start() {
    sandbox_->open.insert(shared_from_this());
    receive();
  }
  void close() override {
    boost::system::error_code ignored;
    socket_.close(ignored);
    sandbox_->open.erase(shared_from_this());
  }

 private:
  void receive() {
    socket_.async_receive_from(
        asio::buffer(query_), peer_,
        [self = shared_from_this()](const boost::system::error_code& error, size_t n) {
          if (error == asio::error::operation_aborted || !self->socket_.is_open()) return;
          if (!error) {
            self->reply_ = answer(*self->sandbox_, self->name_sink_,
                                  std::span<const uint8_t>(self->query_.data(), n), "udp");
            if (!self->reply_.empty()) {
              return self->socket_.async_send_to(asio::buffer(self->reply_), self->peer_,
                                                 [self](const boost::system::error_code&, size_t) {
                                                   if (self->socket_.is_open()) self->receive();
                                                 });
            }
          }
          self->receive();
        });
  }

  std::shared_ptr<SandboxContext> sandbox_;
  const Engine::NameSink& name_sink_;
  Udp::socket socket_;
  Udp::endpoint peer_;
  std::array<uint8_t, kDnsBuffer> query_{};
  std::vector<uint8_t> reply_;
};

// One DNS-over-TCP connection (RFC 7766: two-byte length, then the message), queries in order.
class DnsTcp final : public Closable, public std::enable_shared_from_this<DnsTcp> {
 public:
  DnsTcp(std::shared_ptr<SandboxContext> sandbox, const Engine::NameSink& name_sink,
         Tcp::socket socket)
      : sandbox_(std::move(sandbox)),
        name_sink_(name_sink),
        socket_(std::move(socket)),
        timer_(sandbox_->strand) {}

  void start() {
    sandbox_->open.insert(shared_from_this());
    read_length();
  }
  void close() override {
    boost::system::error_code ignored;
    timer_.cancel();
    socket_.close(ignored);
    sandbox_->open.erase(shared_from_this());
  }

 private:
  void read_length() {
    // A client gets first_bytes_timeout for each query, then the connection is closed.
    timer_.expires_after(sandbox_->options.first_bytes_timeout);
    // The generation tells a stale expiry (queued just before the query came) from a real one.
    timer_.async_wait([self = shared_from_this(),
                       generation = ++generation_](const boost::system::error_code& error) {
      if (!error && generation == self->generation_) self->close();
    });
    asio::async_read(socket_, asio::buffer(length_),
                     [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                       if (error) return self->close();
                       const size_t size = self->length_[0] << 8 | self->length_[1];
                       self->query_.resize(size);
                       asio::async_read(self->socket_, asio::buffer(self->query_),
                                        [self](const boost::system::error_code& error, size_t) {
                                          if (error) return self->close();
                                          self->on_query();
                                        });
                     });
  }

  void on_query() {
    ++generation_;
    timer_.cancel();
    std::vector<uint8_t> reply = answer(*sandbox_, name_sink_, query_, "tcp");
    if (reply.empty()) return close();
    reply_.resize(2 + reply.size());
    reply_[0] = static_cast<uint8_t>(reply.size() >> 8);
    reply_[1] = static_cast<uint8_t>(reply.size());
    std::copy(reply.begin(), reply.end(), reply_.begin() + 2);
    asio::async_write(socket_, asio::buffer(reply_),
                      [self = shared_from_this()](const boost::system::error_code& error, size_t) {
                        if (error) return self->close();
                        self->read_length();
                      });
  }

  std::shared_ptr<SandboxContext> sandbox_;
  const Engine::NameSink& name_sink_;
  Tcp::socket socket_;
  asio::steady_timer timer_;
  uint64_t generation_ = 0;
  std::array<uint8_t, 2> length_{};
  std::vector<uint8_t> query_;
  std::vector<uint8_t> reply_;
};

// A listener: accepts until closed and hands each connection to `serve`.
class Listener final : public Closable, public std::enable_shared_from_this<Listener> {
 public:
  using Serve = std::function<void(Tcp::socket)>;
  Listener(std::shared_ptr<SandboxContext> sandbox, Tcp::acceptor acceptor, Serve serve)
      : sandbox_(std::move(sandbox)),
        acceptor_(std::move(acceptor)),
        pause_(sandbox_->strand),
        serve_(std::move(serve)) {}

  void start() {
    sandbox_->open.insert(shared_from_this());
    accept();
  }
  void close() override {
    boost::system::error_code ignored;
    pause_.cancel();
    acceptor_.close(ignored);
    sandbox_->open.erase(shared_from_this());
  }

 private:
  static constexpr std::chrono::milliseconds kAcceptPause{50};

  void accept() {
    acceptor_.async_accept(
        sandbox_->strand,
        [self = shared_from_this()](const boost::system::error_code& error, Tcp::socket socket) {
          if (error == asio::error::operation_aborted || !self->acceptor_.is_open()) return;
          if (!error) {
            self->serve_(std::move(socket));
            return self->accept();
          }
          // EMFILE and ENFILE last until something closes: pause rather than spin on them.
          self->pause_.expires_after(kAcceptPause);
          self->pause_.async_wait([self](const boost::system::error_code& error) {
            if (!error && self->acceptor_.is_open()) self->accept();
          });
        });
  }

  std::shared_ptr<SandboxContext> sandbox_;
  Tcp::acceptor acceptor_;
  asio::steady_timer pause_;
  Serve serve_;
};

void relay(const std::shared_ptr<SandboxContext>& sandbox, Tcp::socket socket) {
  const auto destination = original_destination(socket.native_handle());
  // Not redirected: something inside dialled the listener itself.
  if (!destination) return;
  const bool over_cap = sandbox->with_stats([&](SandboxNetStats& stats) {
    if (stats.active < sandbox->options.max_connections_per_sandbox) return false;
    ++stats.connections;
    ++stats.denied;
    return true;
  });
  if (over_cap) {
    reset_socket(socket);
    if (!sandbox->log) return;
    ConnectionLog log;
    log.sandbox = sandbox->name;
    log.protocol = "tcp";
    log.address = destination->address.to_string();
    log.port = destination->port;
    log.rule = "limit";
    log.reason = "the sandbox has " + std::to_string(sandbox->options.max_connections_per_sandbox) +
                 " connections open already";
    log.started = std::chrono::system_clock::now();
    sandbox->log(log);
    return;
  }
  std::make_shared<Relay>(sandbox, std::move(socket), *destination)->start();
}

}  // namespace

Result<std::shared_ptr<asio::ssl::context>> SandboxContext::server_tls() {
  if (!server_tls_) {
    // h2 and HTTP/1.1; the relay narrows each connection's offers so that both legs agree
    // (Relay::terminate_tls).
    auto server = HUTCH_TRY(tls::make_server_context(*ca));
    // The SSL_CTX's servername callback points at the CA (tls::make_server_context).
    server_tls_ = std::shared_ptr<asio::ssl::context>(
        new asio::ssl::context(server.release()),
        [ca = ca](asio::ssl::context* context) { delete context; });
  }
  return server_tls_;
}

struct Engine::Impl {
  Impl(EngineOptions options_, LogSink log_, NameSink names_)
      : options(std::move(options_)),
        log(std::move(log_)),
        names(std::move(names_)),
        resolver(options.resolver ? options.resolver : system_resolver()),
        work(asio::make_work_guard(io)) {}

  // Runs `job` on the sandbox's strand and waits for it: detach() and friends are synchronous.
  // From that strand itself (a sink calling back) it runs inline.
  static void run_on(const std::shared_ptr<SandboxContext>& sandbox, std::function<void()> job) {
    if (sandbox->strand.running_in_this_thread()) return job();
    std::promise<void> done;
    asio::post(sandbox->strand, [&] {
      job();
      done.set_value();
    });
    done.get_future().wait();
  }

  // One TLS client context for every sandbox's upstreams, made on first use.
  Result<std::shared_ptr<asio::ssl::context>> upstream_context() {
    std::lock_guard lock(mutex);
    if (!upstream_tls) {
      auto made = HUTCH_TRY(tls::make_upstream_context({.ca_file = options.upstream_ca_file}));
      upstream_tls = std::make_shared<asio::ssl::context>(made.release());
    }
    return upstream_tls;
  }

  std::shared_ptr<SandboxContext> find(const std::string& sandbox) const {
    std::lock_guard lock(mutex);
    auto found = sandboxes.find(sandbox);
    return found == sandboxes.end() ? nullptr : found->second;
  }

  const EngineOptions options;
  const LogSink log;
  const NameSink names;
  const std::shared_ptr<Resolver> resolver;
  const std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  asio::io_context io;
  asio::executor_work_guard<asio::io_context::executor_type> work;
  mutable std::mutex mutex;  // guards sandboxes
  std::map<std::string, std::shared_ptr<SandboxContext>> sandboxes;
  std::shared_ptr<asio::ssl::context> upstream_tls;  // guarded by mutex
  std::vector<std::thread> threads;
};

Engine::Engine(EngineOptions options, LogSink log, NameSink names)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(log), std::move(names))) {
  for (int i = 0; i < std::max(1, impl_->options.threads); ++i) {
    impl_->threads.emplace_back([this] { impl_->io.run(); });
  }
}

Engine::~Engine() {
  std::vector<std::string> names;
  {
    std::lock_guard lock(impl_->mutex);
    for (const auto& [name, sandbox] : impl_->sandboxes) names.push_back(name);
  }
  for (const std::string& name : names) detach(name);
  {
    std::lock_guard lock(impl_->gate->mutex);
    impl_->gate->open = false;
  }
  impl_->work.reset();
  impl_->io.stop();
  for (std::thread& thread : impl_->threads) thread.join();
}

Result<void> Engine::attach(const std::string& sandbox, EgressListeners listeners, Policy policy,
                            std::map<Address, std::string> known_names,
                            std::optional<SandboxInjection> injection) {
  auto context =
      std::make_shared<SandboxContext>(sandbox, asio::make_strand(impl_->io), impl_->options,
                                       impl_->log, impl_->resolver, impl_->gate);
  if (injection) {
    // Loading the host's trust store costs ~20 ms: only a policy with inject rules terminates.
    if (!policy.inject.empty()) context->upstream_tls = HUTCH_TRY(impl_->upstream_context());
    context->ca = std::move(injection->ca);
    context->placeholder_key = injection->placeholder_key;
  }
  context->policy = std::make_shared<const Policy>(std::move(policy));
  for (const auto& [address, name] : known_names) {
    HUTCH_TRY(context->fake_names.add_known(address, name));
  }
  {
    std::lock_guard lock(impl_->mutex);
    if (impl_->sandboxes.contains(sandbox)) {
      return kind_error(ErrorKind::kConflict, "engine attach", sandbox + " is attached already");
    }
    impl_->sandboxes.emplace(sandbox, context);
  }
  // The sockets are handed to asio here, their accepts start on the strand.
  std::vector<std::shared_ptr<Closable>> parts;
  std::vector<std::function<void()>> starts;
  auto tcp = [&](UniqueFd& fd, bool v6, Listener::Serve serve) -> Result<void> {
    if (!fd) return {};
    boost::system::error_code error;
    Tcp::acceptor acceptor(context->strand);
    acceptor.assign(v6 ? Tcp::v6() : Tcp::v4(), fd.get(), error);
    if (error) return plain_error("engine attach", sandbox + ": listener: " + error.message());
    fd.release();
    auto listener = std::make_shared<Listener>(context, std::move(acceptor), std::move(serve));
    starts.push_back([listener] { listener->start(); });
    return {};
  };
  auto udp = [&](UniqueFd& fd, bool v6) -> Result<void> {
    if (!fd) return {};
    boost::system::error_code error;
    Udp::socket socket(context->strand);
    socket.assign(v6 ? Udp::v6() : Udp::v4(), fd.get(), error);
    if (error) return plain_error("engine attach", sandbox + ": DNS socket: " + error.message());
    fd.release();
    auto stub = std::make_shared<DnsUdp>(context, impl_->names, std::move(socket));
    starts.push_back([stub] { stub->start(); });
    return {};
  };
  const NameSink& name_sink = impl_->names;
  auto relay_tcp = [context](Tcp::socket socket) { relay(context, std::move(socket)); };
  auto dns_tcp = [context, &name_sink](Tcp::socket socket) {
    std::make_shared<DnsTcp>(context, name_sink, std::move(socket))->start();
  };
  Result<void> made = [&]() -> Result<void> {
    HUTCH_TRY(tcp(listeners.tcp4, false, relay_tcp));
    HUTCH_TRY(tcp(listeners.tcp6, true, relay_tcp));
    HUTCH_TRY(tcp(listeners.dns_tcp4, false, dns_tcp));
    HUTCH_TRY(tcp(listeners.dns_tcp6, true, dns_tcp));
    HUTCH_TRY(udp(listeners.dns_udp4, false));
    HUTCH_TRY(udp(listeners.dns_udp6, true));
    return {};
  }();
  if (!made) {
    std::lock_guard lock(impl_->mutex);
    impl_->sandboxes.erase(sandbox);
    return made;
  }
  // Not waited for: the listeners listen already (their backlog and buffers hold what comes
  // meanwhile), the policy is in place, and a detach's job runs after these on the strand.
  asio::post(context->strand, [starts = std::move(starts)] {
    for (const auto& start : starts) start();
  });
  return {};
}

Result<void> Engine::set_policy(const std::string& sandbox, Policy policy) {
  auto context = impl_->find(sandbox);
  if (!context) return kind_error(ErrorKind::kNotFound, "engine set_policy", sandbox);
  // The first policy with inject rules brings the upstreams' TLS client (attach left it out),
  // on the strand before the policy that uses it is seen there.
  if (!policy.inject.empty()) {
    auto upstream_tls = HUTCH_TRY(impl_->upstream_context());
    Impl::run_on(context, [&] {
      if (context->ca && !context->upstream_tls) context->upstream_tls = std::move(upstream_tls);
    });
  }
  auto shared = std::make_shared<const Policy>(std::move(policy));
  std::lock_guard lock(context->mutex);
  context->policy = std::move(shared);
  return {};
}

Result<void> Engine::set_ca(const std::string& sandbox, std::shared_ptr<tls::SandboxCa> ca) {
  auto context = impl_->find(sandbox);
  if (!context) return kind_error(ErrorKind::kNotFound, "engine set_ca", sandbox);
  bool had = false;
  Impl::run_on(context, [&] {
    had = context->ca != nullptr;
    if (had) context->replace_ca(std::move(ca));
  });
  if (!had) return kind_error(ErrorKind::kInvalid, "engine set_ca", sandbox + " has no CA");
  return {};
}

void Engine::detach(const std::string& sandbox) {
  std::shared_ptr<SandboxContext> context;
  {
    std::lock_guard lock(impl_->mutex);
    auto found = impl_->sandboxes.find(sandbox);
    if (found == impl_->sandboxes.end()) return;
    context = std::move(found->second);
    impl_->sandboxes.erase(found);
  }
  Impl::run_on(context, [&] {
    // A copy: each close() erases itself from the set.
    const auto open = context->open;
    for (const auto& one : open) one->close();
  });
}

std::optional<SandboxNetStats> Engine::stats(const std::string& sandbox) const {
  auto context = impl_->find(sandbox);
  if (!context) return std::nullopt;
  std::lock_guard lock(context->mutex);
  return context->stats;
}

}  // namespace hutch::net
