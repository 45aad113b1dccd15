// The setting of the engine's end-to-end tests (as root): S, a sandbox's network namespace with
// the egress path, and U, an upstream namespace whose lo holds TEST-NET addresses for the test's
// servers; the two CAs of terminated TLS; an engine attached to S that records its connections.
// gtest-asserting helpers: call them under ASSERT_NO_FATAL_FAILURE.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "net/address.h"
#include "net/engine/engine.h"
#include "net/tls/sandbox_ca.h"

namespace hutch::testing {

// U: lo up with each of `upstream_addresses` (as a /32) on it. S: lo up (as the runtime leaves a
// sandbox's namespace), then the egress path.
void prepare_namespaces(int sandbox_ns, int upstream_ns,
                        const std::vector<net::Address>& upstream_addresses);

// The upstreams' CA (the engine trusts it, EngineOptions::upstream_ca_file) and the sandbox's
// (what terminated TLS signs with), each with its certificate in a PEM file of `dir`.
struct EngineCas {
  std::unique_ptr<net::tls::SandboxCa> upstream;
  std::shared_ptr<net::tls::SandboxCa> sandbox;
  std::string upstream_path, sandbox_path;
};
void make_engine_cas(const std::string& dir, EngineCas& cas);

// The tests' inject rule: "Authorization: Bearer " and OPENAI_API_KEY's value on every request
// under /v1/ to one of `hosts` (policy rules: "api.test"), whatever its method.
net::InjectRule openai_key_rule(const std::vector<std::string>& hosts);

// A secrets lookup answering from `values` (nullopt for any other name).
net::SecretLookup secrets_of(std::map<std::string, std::string> values);

// The engine a test drives: every ConnectionLog appended to `logs` under `mutex`.
std::unique_ptr<net::Engine> make_logging_engine(net::EngineOptions options, std::mutex& mutex,
                                                 std::vector<net::ConnectionLog>& logs);

// The last of `logs` (read under `mutex`) that `match` accepts, waited for up to 5 s: the engine
// writes a connection's log when it ends. nullopt when none came.
std::optional<net::ConnectionLog> last_log_where(
    std::mutex& mutex, const std::vector<net::ConnectionLog>& logs,
    const std::function<bool(const net::ConnectionLog&)>& match);

// `engine` attached as "sb" to the egress listeners of S.
void attach_sandbox(net::Engine& engine, int sandbox_ns, const net::Policy& policy,
                    const std::map<net::Address, std::string>& fake_names,
                    net::SandboxInjection injection);

}  // namespace hutch::testing
