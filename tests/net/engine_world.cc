#include "tests/net/engine_world.h"

#include <gtest/gtest.h>

#include <fstream>

#include "net/egress_path.h"
#include "tests/common/netns.h"
#include "tests/common/wait.h"

namespace hutch::testing {

void prepare_namespaces(int sandbox_ns, int upstream_ns,
                        const std::vector<net::Address>& upstream_addresses) {
  for (const net::Address& address : upstream_addresses) {
    ASSERT_TRUE(run_in(upstream_ns,
                       {"/usr/sbin/ip", "addr", "add", address.to_string() + "/32", "dev", "lo"}))
        << "ip addr add " << address.to_string() << " in U";
  }
  ASSERT_TRUE(run_in(upstream_ns, {"/usr/sbin/ip", "link", "set", "lo", "up"})) << "U's lo up";
  ASSERT_TRUE(run_in(sandbox_ns, {"/usr/sbin/ip", "link", "set", "lo", "up"})) << "S's lo up";
  auto installed = net::install_egress_path(sandbox_ns);
  ASSERT_TRUE(installed) << installed.error().message();
}

void make_engine_cas(const std::string& dir, EngineCas& cas) {
  auto upstream = net::tls::SandboxCa::create({.label = "test upstreams"});
  auto sandbox = net::tls::SandboxCa::create({.label = "sb"});
  ASSERT_TRUE(upstream && sandbox);
  cas.upstream = std::move(*upstream);
  cas.sandbox = std::shared_ptr<net::tls::SandboxCa>(std::move(*sandbox));
  cas.upstream_path = dir + "/upstream-ca.pem";
  cas.sandbox_path = dir + "/sandbox-ca.pem";
  std::ofstream(cas.upstream_path) << cas.upstream->certificate_pem();
  std::ofstream(cas.sandbox_path) << cas.sandbox->certificate_pem();
}

net::InjectRule openai_key_rule(const std::vector<std::string>& hosts) {
  net::InjectRule rule{
      .match_hosts = {},
      .method = std::nullopt,
      .path_prefix = "/v1/",
      .headers = {{.name = "Authorization", .secret = "OPENAI_API_KEY", .prefix = "Bearer "}}};
  for (const std::string& host : hosts) rule.match_hosts.push_back(*net::parse_rule(host));
  return rule;
}

net::SecretLookup secrets_of(std::map<std::string, std::string> values) {
  return [values = std::move(values)](std::string_view name) -> std::optional<std::string> {
    auto found = values.find(std::string(name));
    if (found == values.end()) return std::nullopt;
    return found->second;
  };
}

std::unique_ptr<net::Engine> make_logging_engine(net::EngineOptions options, std::mutex& mutex,
                                                 std::vector<net::ConnectionLog>& logs) {
  return std::make_unique<net::Engine>(std::move(options),
                                       [&mutex, &logs](const net::ConnectionLog& log) {
                                         std::lock_guard lock(mutex);
                                         logs.push_back(log);
                                       });
}

std::optional<net::ConnectionLog> last_log_where(
    std::mutex& mutex, const std::vector<net::ConnectionLog>& logs,
    const std::function<bool(const net::ConnectionLog&)>& match) {
  using namespace std::chrono_literals;
  std::optional<net::ConnectionLog> found;
  (void)wait_until(
      [&] {
        std::lock_guard lock(mutex);
        for (const net::ConnectionLog& log : logs) {
          if (match(log)) found = log;
        }
        return found.has_value();
      },
      5s, "the connection's log");
  return found;
}

void attach_sandbox(net::Engine& engine, int sandbox_ns, const net::Policy& policy,
                    const std::map<net::Address, std::string>& fake_names,
                    net::SandboxInjection injection) {
  auto listeners = net::bind_egress_listeners(sandbox_ns);
  ASSERT_TRUE(listeners) << listeners.error().message();
  auto attached =
      engine.attach("sb", std::move(*listeners), policy, fake_names, std::move(injection));
  ASSERT_TRUE(attached) << attached.error().message();
}

}  // namespace hutch::testing
