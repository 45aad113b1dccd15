// What the engine keeps per attached sandbox, shared by its listeners, its DNS stub and its
// relays. Threading: every socket of a sandbox lives on the sandbox's strand (one at a time, no
// locks on the I/O path; sandboxes run in parallel on the engine's threads). The policy, the fake
// names and the stats are also read by callers' threads (set_policy, stats), so they sit behind
// one mutex, held only to copy or update them, never across I/O or a callback.
#pragma once

#include <boost/asio/io_context.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/strand.hpp>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "net/engine/engine.h"
#include "net/engine/fake_names.h"
#include "net/tls/client_context.h"

namespace hutch::net {

namespace asio = boost::asio;
using Strand = asio::strand<asio::io_context::executor_type>;

// Resolver callbacks come from the resolver's threads, possibly while the engine is being
// destroyed: they post through the gate, which the engine closes before its io_context goes.
struct Gate {
  std::mutex mutex;
  bool open = true;
};

// A connection or DNS session that detach() must end at once. Called on the sandbox's strand.
class Closable {
 public:
  virtual ~Closable() = default;
  virtual void close() = 0;
};

struct SandboxContext {
  SandboxContext(std::string name_, Strand strand_, const EngineOptions& options_,
                 const Engine::LogSink& log_, std::shared_ptr<Resolver> resolver_,
                 std::shared_ptr<Gate> gate_)
      : name(std::move(name_)),
        strand(std::move(strand_)),
        options(options_),
        log(log_),
        resolver(std::move(resolver_)),
        gate(std::move(gate_)) {}

  const std::string name;
  Strand strand;
  const EngineOptions& options;
  const Engine::LogSink& log;
  const std::shared_ptr<Resolver> resolver;
  const std::shared_ptr<Gate> gate;

  // Credential injection, set before the listeners start: the sandbox's CA (replaced on the
  // strand by replace_ca, at a rotation), the TLS client for upstreams (set on the strand by the
  // first policy with inject rules, when attach's had none), the placeholders' key.
  // `ca` null: the sandbox has no CA and nothing of it is terminated.
  std::shared_ptr<tls::SandboxCa> ca;
  std::shared_ptr<asio::ssl::context> upstream_tls;
  PlaceholderKey placeholder_key{};

  // The TLS server that shows the CA's leaves, made by the first connection terminated: an
  // SSL_CTX costs 0.1-0.6 ms in OpenSSL 3.0 (its algorithm fetches), which a create need not pay
  // for a sandbox that may never be intercepted. The strand's only.
  // The context keeps the CA it was made with alive: a relay holds it as long as its SSL.
  Result<std::shared_ptr<asio::ssl::context>> server_tls();
  // The strand's only: later connections get a server with the new CA's leaves.
  void replace_ca(std::shared_ptr<tls::SandboxCa> next) {
    ca = std::move(next);
    server_tls_.reset();
  }

  std::shared_ptr<const Policy> current_policy() const {
    std::lock_guard lock(mutex);
    return policy;
  }
  template <class F>
  auto with_stats(F&& f) {
    std::lock_guard lock(mutex);
    return f(stats);
  }

  mutable std::mutex mutex;  // guards the three below
  std::shared_ptr<const Policy> policy;
  FakeNames fake_names;
  SandboxNetStats stats;

  // The strand's only.
  std::set<std::shared_ptr<Closable>> open;
  std::shared_ptr<asio::ssl::context> server_tls_;  // server_tls()
  // Sessions of terminated hosts' upstreams, resumed by the next connection to the same host.
  std::shared_ptr<tls::UpstreamSessions> upstream_sessions =
      std::make_shared<tls::UpstreamSessions>();
};

}  // namespace hutch::net
