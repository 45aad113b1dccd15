// hutchd: the local HTTP daemon. Parses flags, starts the zygote while still single-threaded,
// re-adopts the sandboxes of a previous run, serves until SIGTERM/SIGINT.
//
// On SIGTERM/SIGINT hutchd stops accepting, lets in-flight requests finish (bounded), and exits
// leaving sandboxes running: the next hutchd re-adopts them. --destroy-on-exit destroys them.
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <expected>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "daemon/errors.h"
#include "daemon/metrics.h"
#include "daemon/server.h"
#include "daemon/service/network_service.h"
#include "daemon/service/reaper.h"
#include "daemon/service/recipes.h"
#include "daemon/service/sandbox_registry.h"
#include "daemon/zygote.h"
#include "runtime/base/helper_path.h"
#include "runtime/cgroup/plan.h"

namespace {

using namespace hutch::daemon;

int fail(const std::string& message) {
  std::fprintf(stderr, "hutchd: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"hutchd: the hutch sandbox daemon (HTTP over a unix socket; see docs/api.md)"};
  ServerOptions options;
  std::string state_dir = "/var/lib/hutch";
  std::vector<std::string> mount_roots;
  std::string listen;
  std::string token_file;
  bool destroy_on_exit = false;
  int shutdown_grace = 10;
  std::string log_level = "info";
  app.add_option("--socket", options.socket_path, "Unix socket to serve on (mode 0660)");
  app.add_option("--listen", listen, "Also serve TCP on HOST:PORT (requires --token-file)");
  app.add_option("--token-file", token_file, "File holding the bearer token for TCP clients");
  app.add_option("--state-dir", state_dir, "State directory (mode 0700)")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  app.add_option("--mount-root", mount_roots,
                 "A host directory whose subdirectories a create's mounts may bind (repeatable)");
  app.add_option("--max-concurrent", options.max_concurrent,
                 "Requests in flight before 429 too_many_requests")
      ->check(CLI::Range(1, 100000));
  app.add_option("--max-connections", options.max_connections,
                 "Open connections in total before 503 connection_limit")
      ->check(CLI::Range(2, 100000));
  app.add_option("--max-connections-per-peer", options.max_connections_per_peer,
                 "Open connections per uid (unix socket) or address (TCP) before 429 "
                 "too_many_connections")
      ->check(CLI::Range(1, 100000));
  app.add_option("--head-timeout", options.head_timeout_seconds,
                 "Seconds to receive a whole request head before 408 request_timeout")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_option("--max-file-bytes", options.max_file_bytes,
                 "Largest fs/write content and fs/download entry (a PUT streams up to the "
                 "sandbox's disk quota)");
  app.add_option("--background-output-cap", options.background_output_cap,
                 "Bytes of each background stream kept on disk");
  app.add_option("--read-timeout", options.read_timeout_seconds,
                 "Seconds each read of a request body may wait");
  app.add_option("--write-timeout", options.write_timeout_seconds,
                 "Seconds each write of a response may wait");
  app.add_option("--shutdown-grace", shutdown_grace,
                 "Seconds in-flight requests get on SIGTERM/SIGINT");
  app.add_flag("--destroy-on-exit", destroy_on_exit,
               "Destroy every sandbox on exit (default: leave them for the next hutchd)");
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error");
  std::string cgroup_parent{hutch::kDefaultCgroupParent};
  app.add_option("--cgroup-parent", cgroup_parent,
                 "Sandboxes' cgroups go in <hierarchy>/<NAME>/ (default hutch)");
  std::vector<std::string> warm_pool_specs;
  app.add_option("--warm-pool", warm_pool_specs,
                 "ROOTFS=N: keep N idle sandboxes of ROOTFS (host, recipe:NAME, a dir) ready for "
                 "creates with its default config (repeatable; default none)")
      ->allow_extra_args(false);
  std::string default_network = "loopback";
  app.add_option("--default-network", default_network,
                 "Network of a create that names none: none|loopback|filtered|open (default "
                 "loopback; filtered with no rules reaches nothing)");
  size_t net_ahead = hutch::daemon::service::NetworkOptions{}.netns_ahead;
  app.add_option("--net-ahead", net_ahead,
                 "Network namespaces with the egress path, and sandbox CAs, made ahead for "
                 "filtered and open creates (0..64, default 4; 0: each create makes its own)")
      ->check(CLI::Range(0, 64));
  uint64_t net_ca_validity =
      static_cast<uint64_t>(hutch::daemon::service::CaRotation{}.validity.count());
  app.add_option("--net-ca-validity", net_ca_validity,
                 "Seconds each sandbox CA is valid (default a week, at least 60); the next CA is "
                 "trusted inside with 3/7 of that left and signs with 1/7 left")
      ->check(CLI::Range(uint64_t{60}, uint64_t{366} * 24 * 3600));
  std::string net_upstream_netns;
  app.add_option("--net-upstream-netns", net_upstream_netns,
                 "Tests only (HUTCH_TEST_NET=1): the engine dials upstreams from this network "
                 "namespace (e.g. /proc/PID/ns/net)");
  std::vector<std::string> net_resolve;
  app.add_option("--net-resolve", net_resolve,
                 "Tests only (HUTCH_TEST_NET=1): NAME=ADDR, a static resolver instead of the "
                 "host's (repeatable)")
      ->allow_extra_args(false);
  std::string net_upstream_ca;
  app.add_option("--net-upstream-ca", net_upstream_ca,
                 "Tests only (HUTCH_TEST_NET=1): verify the upstreams of terminated TLS "
                 "connections with this PEM file's CAs instead of the host's trust store");
  std::string net_upstream_proxy, net_no_proxy, net_upstream_proxy_secret;
  app.add_option("--net-upstream-proxy", net_upstream_proxy,
                 "http://HOST:PORT: every allowed egress connection goes through this proxy as "
                 "CONNECT (no direct fallback; a HOST name is resolved once, at start)");
  app.add_option("--net-no-proxy", net_no_proxy,
                 "Destinations dialled directly, not through --net-upstream-proxy: names, "
                 ".suffix or *.suffix, IPs and CIDRs, separated by commas");
  app.add_option("--net-upstream-proxy-secret", net_upstream_proxy_secret,
                 "The secret (--secrets-file, --secret-from-env) holding user:password for the "
                 "proxy's Proxy-Authorization: Basic");
  std::string secrets_file;
  app.add_option("--secrets-file", secrets_file,
                 "NAME=value lines for credential injection (a regular file of hutchd's user, "
                 "mode 0600 or 0400)");
  std::vector<std::string> secret_from_env;
  app.add_option("--secret-from-env", secret_from_env,
                 "Take secret NAME from hutchd's environment variable NAME, then clear it "
                 "(repeatable)")
      ->allow_extra_args(false);
  CLI11_PARSE(app, argc, argv);

  // Before any thread: load_environment clears the variables (getenv and unsetenv are not
  // thread-safe), so no child of hutchd inherits them.
  auto secrets = std::make_shared<hutch::daemon::service::SecretStore>();
  if (auto loaded =
          hutch::daemon::service::load_secret_options(*secrets, secrets_file, secret_from_env);
      !loaded)
    return fail(loaded.error().message());

  if (auto checked = hutch::check_cgroup_parent(cgroup_parent); !checked)
    return fail("--cgroup-parent: " + checked.error().message());
  std::map<std::string, size_t> warm_pools;
  for (const std::string& spec : warm_pool_specs) {
    size_t eq = spec.rfind('=');
    size_t size = 0;
    try {
      if (eq == std::string::npos || eq == 0) throw std::invalid_argument(spec);
      size_t used = 0;
      size = std::stoul(spec.substr(eq + 1), &used);
      if (used != spec.size() - eq - 1 || size > 64) throw std::out_of_range(spec);
    } catch (const std::exception&) {
      return fail("--warm-pool wants ROOTFS=N with N in 0..64, got \"" + spec + "\"");
    }
    if (size > 0) warm_pools[spec.substr(0, eq)] = size;
  }

  hutch::daemon::service::NetworkOptions network;
  network.netns_ahead = net_ahead;
  network.ca_rotation.validity = std::chrono::seconds(net_ca_validity);
  auto default_mode = hutch::net::parse_mode(default_network);
  if (!default_mode)
    return fail("--default-network wants none, loopback, filtered or open, got \"" +
                default_network + "\"");
  network.default_mode = *default_mode;
  network.secrets = secrets;
  if (auto set = hutch::daemon::service::set_test_network_options(network, net_upstream_netns,
                                                                  net_resolve, net_upstream_ca);
      !set)
    return fail(set.error().message());
  auto proxy = hutch::daemon::service::upstream_proxy_from_options(
      net_upstream_proxy, net_no_proxy, net_upstream_proxy_secret, secrets.get(),
      network.static_names);
  if (!proxy) return fail(proxy.error().message());
  network.upstream_proxy = std::move(*proxy);

  auto logger = spdlog::stderr_logger_mt("hutchd");
  spdlog::set_default_logger(logger);
  spdlog::set_pattern("%Y-%m-%dT%H:%M:%S.%e %l %v");
  spdlog::set_level(spdlog::level::from_str(log_level));

  while (state_dir.size() > 1 && state_dir.ends_with('/')) state_dir.pop_back();
  if (!state_dir.starts_with('/')) return fail("--state-dir must be an absolute path");
  if (state_dir.size() > SandboxRegistry::max_state_dir_length())
    return fail("--state-dir " + state_dir +
                " is too long: sandbox sockets under it would exceed " +
                "the 107-byte unix socket path limit (at most " +
                std::to_string(SandboxRegistry::max_state_dir_length()) + " bytes)");
  if (!listen.empty()) {
    size_t colon = listen.rfind(':');
    if (colon == std::string::npos) return fail("--listen wants HOST:PORT");
    options.tcp_host = listen.substr(0, colon);
    try {
      options.tcp_port = std::stoi(listen.substr(colon + 1));
    } catch (const std::exception&) {
      return fail("--listen wants HOST:PORT");
    }
    if (token_file.empty())
      return fail("--listen requires --token-file (TCP needs a bearer token)");
    std::ifstream in(token_file);
    std::getline(in, options.token);
    while (!options.token.empty() && std::isspace(static_cast<unsigned char>(options.token.back())))
      options.token.pop_back();
    if (options.token.size() < 16) return fail("--token-file must hold a token of 16+ characters");
  }
  if (options.socket_path.size() >= sizeof(sockaddr_un::sun_path))
    return fail("--socket path is longer than 107 bytes");

  std::error_code error;
  std::filesystem::create_directories(state_dir, error);
  if (error) return fail("mkdir " + state_dir + ": " + error.message());
  if (::chmod(state_dir.c_str(), 0700) != 0)
    return fail("chmod " + state_dir + ": " + std::strerror(errno));

  // Before any thread exists (spdlog's stderr logger starts none): fork is safe only then.
  auto zygote_path = hutch::helper_path("hutchd-zygote");
  if (!zygote_path) return fail(zygote_path.error().message());
  auto zygote = Zygote::start(*zygote_path);
  if (!zygote) return fail(zygote.error().message());
  auto bake_path = hutch::helper_path("hutchd-bake");
  if (!bake_path) return fail(bake_path.error().message());
  // Every connection is a descriptor, and the soft limit is 1024 under systemd: raise it to the
  // hard limit (after the zygote started, so sandboxes keep the default), else a full
  // --max-connections makes accept fail with EMFILE.
  rlimit files{};
  if (::getrlimit(RLIMIT_NOFILE, &files) != 0)
    return fail("getrlimit(RLIMIT_NOFILE): " + std::string(std::strerror(errno)));
  if (files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    if (::setrlimit(RLIMIT_NOFILE, &files) != 0)
      return fail("setrlimit(RLIMIT_NOFILE " + std::to_string(files.rlim_max) +
                  "): " + std::strerror(errno));
  }

  // Signals are taken synchronously by the main thread (sigwait); every thread started from
  // here on inherits the blocked mask.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);

  // The floor: this host's addresses, kept current by the network service, and hutchd's TCP
  // port (an unparsed host, a name, closes the port on every address).
  network.watch_host_addresses = true;
  if (options.tcp_host) {
    auto address = hutch::net::Address::parse(*options.tcp_host);
    network.floor.daemon_endpoints.push_back(
        {address ? *address : hutch::net::Address::v4(0), static_cast<uint16_t>(options.tcp_port)});
  }

  Metrics metrics;
  network.state_dir = state_dir;
  auto network_service =
      hutch::daemon::service::NetworkService::create(std::move(network), metrics);
  if (!network_service) return fail(network_service.error().message());
  SandboxRegistry registry(state_dir, cgroup_parent, *zygote, metrics);
  registry.set_network(network_service->get());
  for (std::string& root : mount_roots) {
    char canonical[PATH_MAX];
    if (::realpath(root.c_str(), canonical) == nullptr)
      return fail("--mount-root " + root + ": realpath: " + std::strerror(errno));
    root = canonical;
  }
  registry.set_mount_roots(mount_roots);
  auto volumes = hutch::daemon::service::VolumeService::open(state_dir);
  if (!volumes) return fail(volumes.error().message());
  registry.set_volumes(volumes->get());
  RecoveryReport recovered = registry.recover();
  spdlog::info("recovery: adopted {} sandboxes, removed {}", recovered.adopted, recovered.removed);

  hutch::daemon::service::RecipeService recipes(registry, *bake_path);
  registry.set_on_destroyed([&recipes](const std::string& id) { recipes.drop_tags_of(id); });

  Daemon daemon(options, registry, metrics, recipes);
  if (auto bound = daemon.bind(); !bound) return fail(bound.error().message());
  daemon.start();
  Reaper reaper(registry);
  reaper.start();
  registry.start_pool(warm_pools, [&recipes](SandboxConfig& config) -> std::shared_ptr<void> {
    auto pinned = recipes.resolve(config);
    if (!pinned) throw api_error(pinned.error());  // the pool logs it
    return std::make_shared<hutch::daemon::service::LayerPin>(std::move(*pinned));
  });
  spdlog::info("serving on {}{} (state dir {})", options.socket_path,
               options.tcp_host ? " and tcp " + listen : std::string(), state_dir);

  int sig = 0;
  sigwait(&stop_signals, &sig);
  spdlog::info("signal {}: stopping (in-flight requests get {} s)", sig, shutdown_grace);
  bool clean = daemon.stop(std::chrono::seconds(shutdown_grace));
  reaper.stop();
  registry.stop_pool();  // idle pool sandboxes were never handed out: always destroyed
  if (destroy_on_exit) {
    registry.destroy_all();
  } else {
    spdlog::info("leaving {} sandboxes running for the next hutchd", registry.list().size());
  }
  registry.drain_teardowns();
  spdlog::info("stopped{}", clean ? "" : " (some requests were still running)");
  spdlog::shutdown();
  // Requests still running after the grace period would hold a normal return in ~Daemon (which
  // waits for them): leave without running destructors.
  std::fflush(nullptr);
  _exit(0);
}
