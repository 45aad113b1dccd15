// The network service in-process, without HTTP: which mode changes a running sandbox may make,
// the host's addresses for the floor, and (as root, with a real zygote and registry) a filtered
// sandbox's lifecycle: attached before create returns, its fake names persisted, its decisions
// in the ring, detached on destroy, its own engine state after a rollback-like replace.
#include "daemon/service/network_service.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <openssl/err.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>

#include "daemon/metrics.h"
#include "daemon/service/made_ahead.h"
#include "daemon/service/sandbox_registry.h"
#include "daemon/zygote.h"
#include "runtime/cgroup/plan.h"
#include "tests/common/must_work.h"
#include "tests/common/netns.h"
#include "tests/common/temp_dir.h"
#include "tests/common/wait.h"

namespace hutch::daemon::service {
namespace {

using testing::TempDir;
using namespace std::chrono_literals;

net::Policy policy_of(net::Mode mode, std::vector<std::string> allow = {}) {
  net::Policy policy;
  policy.mode = mode;
  for (const std::string& text : allow) policy.allow.push_back(*net::parse_rule(text));
  return policy;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(NetworkServiceTest, OnlyFilteredAndOpenSwitchAtRuntime) {
  using net::Mode;
  const auto ok = [](Mode from, Mode to) {
    return check_mode_change(policy_of(from), policy_of(to)).has_value();
  };
  EXPECT_TRUE(ok(Mode::kFiltered, Mode::kOpen));
  EXPECT_TRUE(ok(Mode::kOpen, Mode::kFiltered));
  EXPECT_TRUE(ok(Mode::kFiltered, Mode::kFiltered));
  EXPECT_TRUE(ok(Mode::kLoopback, Mode::kLoopback));
  for (auto [from, to] : {std::pair{Mode::kLoopback, Mode::kFiltered},
                          {Mode::kFiltered, Mode::kNone},
                          {Mode::kOpen, Mode::kLoopback},
                          {Mode::kNone, Mode::kLoopback}}) {
    auto refused = check_mode_change(policy_of(from), policy_of(to));
    ASSERT_FALSE(refused);
    EXPECT_EQ(refused.error().kind, ErrorKind::kConflict);
    EXPECT_EQ(refused.error().code, "network_mode_fixed");
    EXPECT_NE(refused.error().message.find("namespace"), std::string::npos);
  }
  EXPECT_TRUE(uses_engine(policy_of(Mode::kOpen)));
  EXPECT_FALSE(uses_engine(policy_of(Mode::kLoopback)));
}

TEST(NetworkServiceTest, HostAddressesIncludeLoopback) {
  auto addresses = host_addresses();
  ASSERT_TRUE(addresses) << addresses.error().message();
  EXPECT_NE(std::ranges::find(*addresses, *net::Address::parse("127.0.0.1")), addresses->end());
}

TEST(NetworkServiceTest, AnUnopenableUpstreamNamespaceIsAStartupError) {
  Metrics metrics;
  NetworkOptions options;
  options.upstream_netns = "/nonexistent/ns/net";
  auto service = NetworkService::create(options, metrics);
  ASSERT_FALSE(service);
  EXPECT_NE(service.error().message().find("/nonexistent/ns/net"), std::string::npos);
}

mode_t mode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::lstat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// An address the host gets or loses while hutchd runs is in the floor, or out of it, at once:
// watched in a network namespace of the test's, whose lo gets and loses them.
TEST(HostAddressWatchTest, AnAddressAddedOrRemovedIsInTheFloorAtOnce) {
  HUTCH_REQUIRE_ROOT();
  HUTCH_REQUIRE(::access("/usr/sbin/ip", X_OK) == 0, "/usr/sbin/ip is not installed");
  UniqueFd netns = testing::new_netns();
  HUTCH_REQUIRE(netns, "unshare(CLONE_NEWNET) failed");
  ASSERT_TRUE(testing::run_in(netns.get(), {"/usr/sbin/ip", "link", "set", "lo", "up"}));
  auto addresses = std::make_shared<net::HostAddresses>();
  const net::Floor floor(net::FloorConfig{addresses, {}});
  auto watch = HostAddressWatch::start(addresses, netns.get());
  ASSERT_TRUE(watch) << watch.error().message();
  EXPECT_EQ(addresses->get()->size(), 2u) << "lo's 127.0.0.1 and ::1, read at start";
  const auto v4 = *net::Address::parse("203.0.113.77");
  const auto v6 = *net::Address::parse("2001:db8::77");
  const auto refused = [&](const net::Address& address) {
    return floor.refuse_address(address).value_or("") == "floor: host address";
  };
  EXPECT_FALSE(refused(v4));
  ASSERT_TRUE(testing::run_in(netns.get(),
                              {"/usr/sbin/ip", "addr", "add", "203.0.113.77/32", "dev", "lo"}));
  ASSERT_TRUE(testing::run_in(
      netns.get(), {"/usr/sbin/ip", "addr", "add", "2001:db8::77/128", "dev", "lo", "nodad"}));
  EXPECT_TRUE(testing::wait_until([&] { return refused(v4) && refused(v6); }, 5s,
                                  "the new addresses in the floor"));
  ASSERT_TRUE(testing::run_in(netns.get(),
                              {"/usr/sbin/ip", "addr", "del", "203.0.113.77/32", "dev", "lo"}));
  EXPECT_TRUE(testing::wait_until([&] { return !refused(v4); }, 5s, "the address out of it"));
  EXPECT_TRUE(refused(v6));
  watch->reset();  // the thread stops and joins
}

// What hutchd keeps of a sandbox's CA: modes that keep the key to hutchd, and the same CA and
// placeholders loaded back (as after a restart).
TEST(SandboxTrustTest, AKeptTrustDirLoadsBackTheSameCaAndPlaceholders) {
  HUTCH_REQUIRE(::access(net::tls::kHostRootsPath.data(), R_OK) == 0,
                "needs the host's CA bundle (ca-certificates)");
  TempDir sandbox;
  const std::string dir = sandbox.path() + "/" + std::string(kTrustDir);
  auto made = make_trust_dir(dir);
  ASSERT_TRUE(made) << made.error().message();
  EXPECT_EQ(mode_of(dir), 0700u);
  EXPECT_EQ(mode_of(dir + "/key.pem"), 0600u);
  EXPECT_EQ(mode_of(dir + "/placeholder.key"), 0600u);
  EXPECT_EQ(mode_of(dir + "/public"), 0755u);
  EXPECT_EQ(mode_of(dir + "/public/sandbox-ca.pem"), 0644u);
  EXPECT_EQ(mode_of(dir + "/public/ca-bundle.pem"), 0644u);
  EXPECT_EQ(read_file(dir + "/public/sandbox-ca.pem"), made->ca->certificate_pem());
  const std::string bundle = read_file(dir + "/public/ca-bundle.pem");
  EXPECT_TRUE(bundle.starts_with(read_file(std::string(net::tls::kHostRootsPath))));
  EXPECT_TRUE(bundle.ends_with(made->ca->certificate_pem()));
  for (const auto& entry : std::filesystem::recursive_directory_iterator(dir + "/public"))
    EXPECT_EQ(read_file(entry.path()).find("PRIVATE KEY"), std::string::npos) << entry.path();

  auto loaded = load_trust(sandbox.path());
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ(loaded->ca->certificate_pem(), made->ca->certificate_pem());
  EXPECT_EQ(net::placeholder_for(loaded->placeholder_key, "OPENAI_API_KEY"),
            net::placeholder_for(made->placeholder_key, "OPENAI_API_KEY"));

  EXPECT_FALSE(make_trust_dir(dir)) << "never over an existing one";
  TempDir empty;
  auto none = load_trust(empty.path());
  ASSERT_FALSE(none);
  EXPECT_EQ(none.error().kind, ErrorKind::kNotFound);
  // A key that is not the certificate's: refused, not a CA that the sandbox does not trust.
  TempDir other;
  ASSERT_TRUE(make_trust_dir(other.path() + "/ca"));
  std::filesystem::copy_file(other.path() + "/ca/key.pem", dir + "/key.pem",
                             std::filesystem::copy_options::overwrite_existing);
  EXPECT_FALSE(load_trust(sandbox.path()));
}

TEST(SandboxTrustTest, RotationAnnouncesTheNextCaThenSwitchesToIt) {
  const CaRotation week;
  EXPECT_EQ(week.announce_before(), std::chrono::hours(72));
  EXPECT_EQ(week.switch_before(), std::chrono::hours(24));
  EXPECT_EQ(week.check_interval(), std::chrono::minutes(1));
  EXPECT_EQ(CaRotation{std::chrono::seconds(60)}.check_interval(), std::chrono::milliseconds(1200));
  const auto now = std::chrono::system_clock::now();
  const auto step = [&](std::chrono::hours left, bool announced) {
    return rotation_step(now + left, announced, now, week);
  };
  EXPECT_EQ(step(std::chrono::hours(73), false), RotationStep::kNone);
  EXPECT_EQ(step(std::chrono::hours(72), false), RotationStep::kAnnounce);
  EXPECT_EQ(step(std::chrono::hours(30), true), RotationStep::kNone);
  EXPECT_EQ(step(std::chrono::hours(24), true), RotationStep::kSwitch);
  // Late (hutchd was down): announced first, switched at a later look; expired alike.
  EXPECT_EQ(step(std::chrono::hours(2), false), RotationStep::kAnnounce);
  EXPECT_EQ(step(std::chrono::hours(-5), false), RotationStep::kAnnounce);
  EXPECT_EQ(step(std::chrono::hours(-5), true), RotationStep::kSwitch);
}

// Whether `leaf`, minted by some CA, verifies against the CAs of the PEM file `bundle`.
bool verifies(const net::tls::Leaf& leaf, const std::string& bundle) {
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> context(X509_STORE_CTX_new(),
                                                                          X509_STORE_CTX_free);
  if (X509_STORE_load_file(store.get(), bundle.c_str()) != 1 ||
      X509_STORE_CTX_init(context.get(), store.get(), leaf.certificate.get(), nullptr) != 1)
    return false;
  const bool verified = X509_verify_cert(context.get()) == 1;
  ERR_clear_error();
  return verified;
}

ino_t inode_of(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_ino;
}

// A rotation's files: the next CA appended in place to what the sandbox sees (the binds show the
// same inodes), kept whole in next.pem, loaded back with the current one, appended again when a
// crash came before the appends; after the switch it is the CA loaded, and both stay trusted.
TEST(SandboxTrustTest, ANextCaIsAppendedInPlaceAndTakesOverAtTheSwitch) {
  HUTCH_REQUIRE(::access(net::tls::kHostRootsPath.data(), R_OK) == 0,
                "needs the host's CA bundle (ca-certificates)");
  TempDir sandbox;
  const std::string dir = sandbox.path() + "/" + std::string(kTrustDir);
  const std::string ca_file = dir + "/public/sandbox-ca.pem",
                    bundle = dir + "/public/ca-bundle.pem";
  auto made = make_trust_dir(dir);
  ASSERT_TRUE(made) << made.error().message();
  const std::string first = made->ca->certificate_pem();
  const ino_t ca_inode = inode_of(ca_file), bundle_inode = inode_of(bundle);

  auto next = announce_next_ca(sandbox.path(), std::chrono::hours(24 * 7));
  ASSERT_TRUE(next) << next.error().message();
  const std::string second = (*next)->certificate_pem();
  EXPECT_NE(second, first);
  EXPECT_NE(X509_NAME_cmp(X509_get_subject_name(made->ca->certificate()),
                          X509_get_subject_name((*next)->certificate())),
            0)
      << "a subject of its own beside the first in one bundle";
  EXPECT_EQ(mode_of(dir + "/next.pem"), 0600u);
  EXPECT_EQ(read_file(ca_file), first + second);
  EXPECT_TRUE(read_file(bundle).starts_with(read_file(std::string(net::tls::kHostRootsPath))));
  EXPECT_TRUE(read_file(bundle).ends_with(first + second));
  EXPECT_EQ(inode_of(ca_file), ca_inode);
  EXPECT_EQ(inode_of(bundle), bundle_inode);
  for (const std::string& path : {ca_file, bundle})
    EXPECT_EQ(read_file(path).find("PRIVATE KEY"), std::string::npos) << path;
  auto old_leaf = made->ca->leaf_for("api.test");
  auto new_leaf = (*next)->leaf_for("api.test");
  ASSERT_TRUE(old_leaf && new_leaf);
  EXPECT_TRUE(verifies(**old_leaf, bundle));
  EXPECT_TRUE(verifies(**new_leaf, bundle));
  EXPECT_TRUE(verifies(**new_leaf, ca_file));

  auto loaded = load_trust(sandbox.path());
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ(loaded->ca->certificate_pem(), first);
  ASSERT_TRUE(loaded->next);
  EXPECT_EQ(loaded->next->certificate_pem(), second);
  // A crash between next.pem and the appends: the load appends (in place) what is missing.
  std::ofstream(ca_file, std::ios::trunc) << first;
  loaded = load_trust(sandbox.path());
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ(read_file(ca_file), first + second);
  EXPECT_EQ(inode_of(ca_file), ca_inode);
  EXPECT_TRUE(read_file(bundle).ends_with(first + second)) << "not appended twice";

  ASSERT_TRUE(switch_to_next_ca(sandbox.path()));
  EXPECT_FALSE(std::filesystem::exists(dir + "/next.pem"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/key.pem")) << "the first CA's key goes";
  EXPECT_EQ(mode_of(dir + "/current.pem"), 0600u);
  loaded = load_trust(sandbox.path());
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ(loaded->ca->certificate_pem(), second);
  EXPECT_FALSE(loaded->next);
  EXPECT_EQ(read_file(ca_file), first + second) << "the old CA stays trusted until it expires";
  // And a second rotation goes the same way from current.pem.
  auto third = announce_next_ca(sandbox.path(), std::chrono::hours(24 * 7));
  ASSERT_TRUE(third) << third.error().message();
  ASSERT_TRUE(switch_to_next_ca(sandbox.path()));
  loaded = load_trust(sandbox.path());
  ASSERT_TRUE(loaded) << loaded.error().message();
  EXPECT_EQ(loaded->ca->certificate_pem(), (*third)->certificate_pem());
  EXPECT_EQ(read_file(ca_file), first + second + (*third)->certificate_pem());
}

// CAs made ahead: a previous hutchd's leftovers go, each one is handed out once (renamed into the
// sandbox's dir, with the empty files made with it), and what the pool holds at its end goes
// with it.
// A create's hold puts the refill off (its cost would land on that create), except when nothing
// is ready; the refill resumes once no hold is left and the pool's quiet time has passed.
TEST(MadeAheadTest, AHoldPutsTheRefillOffUnlessNothingIsReady) {
  std::atomic<int> made = 0;
  MadeAhead<int> pool(
      2, [&]() -> Result<int> { return ++made; }, "numbers ahead", 0ms);
  ASSERT_TRUE(testing::wait_until([&] { return pool.ready() == 2; }, 10s, "2 made ahead"));
  // Time for a wrong refill to happen, where none may.
  auto stays = [&](size_t ready, int count) {
    std::this_thread::sleep_for(100ms);
    EXPECT_EQ(pool.ready(), ready);
    EXPECT_EQ(made.load(), count);
  };
  {
    auto hold = pool.hold();
    {
      auto second = pool.hold();
      EXPECT_EQ(pool.take(), 1);
      stays(1, 2);
    }
    stays(1, 2);  // one hold is left
    EXPECT_EQ(pool.take(), 2);
    // Nothing ready: the refill makes one despite the hold, and only one.
    ASSERT_TRUE(testing::wait_until([&] { return pool.ready() == 1; }, 10s, "one made held"));
    stays(1, 3);
  }
  ASSERT_TRUE(testing::wait_until([&] { return pool.ready() == 2; }, 10s, "the refill"));
  EXPECT_EQ(made.load(), 4);
  EXPECT_EQ(pool.take(), 3);
  EXPECT_EQ(pool.take(), 4);
}

// After the last hold the refill waits for the pool's quiet time: a create's reply and the
// client's next requests go first.
TEST(MadeAheadTest, TheRefillWaitsForQuietAfterTheLastHold) {
  std::atomic<int> made = 0;
  MadeAhead<int> pool(
      2, [&]() -> Result<int> { return ++made; }, "numbers ahead", 400ms);
  ASSERT_TRUE(testing::wait_until([&] { return pool.ready() == 2; }, 10s, "2 made ahead"));
  const auto released = std::chrono::steady_clock::now();
  {
    auto hold = pool.hold();
    EXPECT_EQ(pool.take(), 1);
  }
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(made.load(), 2) << "refilled within the quiet time";
  ASSERT_TRUE(testing::wait_until([&] { return pool.ready() == 2; }, 10s, "the refill"));
  EXPECT_GE(std::chrono::steady_clock::now() - released, 400ms);
  EXPECT_EQ(made.load(), 3);
}

TEST(SandboxTrustTest, APoolHandsOutEachCaOnceAndLeavesNothing) {
  HUTCH_REQUIRE(::access(net::tls::kHostRootsPath.data(), R_OK) == 0,
                "needs the host's CA bundle (ca-certificates)");
  TempDir state;
  const std::string ahead = state.path() + "/ca-ahead";
  std::filesystem::create_directories(ahead + "/7/public");
  std::string first_ca;
  {
    TrustPool pool(ahead, 2, {std::string(kNetworkNames)});
    EXPECT_FALSE(std::filesystem::exists(ahead + "/7")) << "a previous hutchd's leftover";
    ASSERT_TRUE(testing::wait_until([&] { return pool.ready() == 2; }, 10s, "2 CAs made ahead"));
    std::vector<std::string> pems;
    for (const char* name : {"a", "b", "c"}) {
      const std::string sandbox = state.path() + "/" + name;
      ASSERT_EQ(::mkdir(sandbox.c_str(), 0700), 0);
      ASSERT_TRUE(testing::wait_until([&] { return pool.ready() >= 1; }, 10s, "a CA made ahead"));
      auto trust = pool.provision(sandbox);
      ASSERT_TRUE(trust) << trust.error().message();
      EXPECT_EQ(read_file(sandbox + "/ca/public/sandbox-ca.pem"), trust->ca->certificate_pem());
      EXPECT_TRUE(std::filesystem::is_regular_file(sandbox + "/" + kNetworkNames)) << name;
      EXPECT_EQ(mode_of(sandbox + "/" + kNetworkNames), 0600u) << name;
      pems.push_back(trust->ca->certificate_pem());
    }
    EXPECT_NE(pems[0], pems[1]);
    EXPECT_NE(pems[1], pems[2]);
    EXPECT_NE(pems[0], pems[2]);
    ASSERT_TRUE(testing::wait_until([&] { return pool.ready() == 2; }, 10s, "the refill"));
  }
  EXPECT_TRUE(std::filesystem::is_empty(ahead)) << "the pool's CAs go with it";
}

class NetworkRegistryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0) return;
    auto started = Zygote::start(HUTCHD_ZYGOTE_BINARY);
    ASSERT_TRUE(started) << started.error().message();
    zygote_ = new Zygote(std::move(*started));
  }
  static void TearDownTestSuite() {
    delete zygote_;
    zygote_ = nullptr;
  }
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_NE(zygote_, nullptr);
    NetworkOptions options;
    options.static_names["api.test"] = {*net::Address::parse("198.51.100.10")};
    auto service = NetworkService::create(options, metrics_);
    ASSERT_TRUE(service) << service.error().message();
    network_ = std::move(*service);
    registry_.emplace(state_.path(), std::string(kDefaultCgroupParent), *zygote_, metrics_);
    registry_->set_network(network_.get());
    registry_->recover();
  }
  void TearDown() override {
    if (registry_) registry_->destroy_all();
  }

  std::shared_ptr<Sandbox> create(const net::Policy& policy) {
    SandboxConfig config;
    config.network = policy;
    auto created = registry_->create(config, "test");
    EXPECT_TRUE(created) << created.error().message;
    return created ? *created : nullptr;
  }

  // `command` under sh -c in the sandbox, its stdout.
  static std::string run(const Sandbox& sandbox, const std::string& command) {
    int pipe_fds[2];
    EXPECT_EQ(::pipe2(pipe_fds, O_CLOEXEC), 0);
    UniqueFd read_end(pipe_fds[0]), write_end(pipe_fds[1]);
    ExecRequest request;
    request.argv = {"/bin/sh", "-c", command};
    request.env = {"PATH=/usr/sbin:/usr/bin:/sbin:/bin"};
    request.stdout_fd = write_end.get();
    auto process = sandbox.live().exec(request);
    EXPECT_TRUE(process) << process.error().message();
    write_end.reset();
    std::string out;
    char buffer[4096];
    for (ssize_t n; (n = ::read(read_end.get(), buffer, sizeof buffer)) > 0;) out.append(buffer, n);
    return out;
  }

  static Zygote* zygote_;
  TempDir state_;
  Metrics metrics_;
  std::unique_ptr<NetworkService> network_;
  std::optional<SandboxRegistry> registry_;
};

Zygote* NetworkRegistryTest::zygote_ = nullptr;

TEST_F(NetworkRegistryTest, AFilteredSandboxIsAttachedAndItsNamesPersisted) {
  auto sandbox = create(policy_of(net::Mode::kFiltered, {"api.test"}));
  ASSERT_TRUE(sandbox);
  auto status = network_->status(sandbox->id(), sandbox->network());
  ASSERT_TRUE(status.stats);
  std::string fake = run(*sandbox, "dig +short +time=3 +tries=1 api.test");
  ASSERT_FALSE(fake.empty());
  fake.pop_back();
  EXPECT_TRUE(net::Address::parse(fake)) << fake;
  EXPECT_EQ(read_file(sandbox->dir() + "/" + kNetworkNames), fake + " api.test\n");
  EXPECT_EQ(run(*sandbox, "dig +short +time=3 +tries=1 evil.test"), "");
  bool ended = true;
  auto decisions = network_->decisions(sandbox->id(), 0, 0ms, &ended);
  EXPECT_FALSE(ended);
  ASSERT_EQ(decisions.size(), 2u);
  EXPECT_EQ(decisions[0].seq, 1u);
  EXPECT_EQ(decisions[0].log.name, "api.test");
  EXPECT_TRUE(decisions[0].log.allowed);
  EXPECT_FALSE(decisions[1].log.allowed);
  EXPECT_TRUE(network_->decisions(sandbox->id(), 2, 0ms, nullptr).empty());

  ASSERT_TRUE(registry_->destroy(sandbox->id(), "test"));
  network_->decisions(sandbox->id(), 0, 0ms, &ended);
  EXPECT_TRUE(ended);
  EXPECT_FALSE(network_->status(sandbox->id(), sandbox->network()).stats);
}

TEST_F(NetworkRegistryTest, PolicyChangesPersistAndModeChangesAreRefused) {
  auto sandbox = create(policy_of(net::Mode::kFiltered, {"api.test"}));
  ASSERT_TRUE(sandbox);
  ASSERT_TRUE(registry_->set_network_policy(*sandbox, policy_of(net::Mode::kFiltered)));
  EXPECT_EQ(run(*sandbox, "dig +short +time=3 +tries=1 api.test"), "");
  EXPECT_TRUE(sandbox->network().allow.empty());
  EXPECT_NE(read_file(sandbox->dir() + "/sandbox.json").find("\"allow\": []"), std::string::npos);
  auto refused = registry_->set_network_policy(*sandbox, policy_of(net::Mode::kLoopback));
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, "network_mode_fixed");
  ASSERT_TRUE(registry_->set_network_policy(*sandbox, policy_of(net::Mode::kOpen)));
  EXPECT_NE(run(*sandbox, "dig +short +time=3 +tries=1 api.test"), "");
}

// An Alpine-like rootfs (its bundle at /etc/ssl/certs/ca-certificates.crt, /etc/ssl/cert.pem a
// relative symlink to it, no /etc/pki): the sandbox reads hutch's bundle through both, and its CA
// at /etc/hutch, all read-only mounts; its upper layer (what a snapshot, recipe or fork takes)
// holds no certificate and no directory its image did not have but /etc/hutch, the empty mount
// point.
TEST_F(NetworkRegistryTest, TheTrustIsBoundOverTheRootfsBundleAndNeverWrittenIntoIt) {
  HUTCH_REQUIRE(::access("/bin/busybox", X_OK) == 0, "needs /bin/busybox (busybox-static)");
  TempDir rootfs;
  namespace fs = std::filesystem;
  fs::create_directories(rootfs.path() + "/bin");
  fs::copy_file("/bin/busybox", rootfs.path() + "/bin/busybox");
  for (const char* applet : {"sh", "cat", "readlink", "ls", "grep", "echo", "test"})
    fs::create_symlink("busybox", rootfs.path() + "/bin/" + applet);
  fs::create_directories(rootfs.path() + "/etc/ssl/certs");
  std::ofstream(rootfs.path() + "/etc/ssl/certs/ca-certificates.crt") << "image roots\n";
  fs::create_symlink("certs/ca-certificates.crt", rootfs.path() + "/etc/ssl/cert.pem");
  SandboxConfig config;
  config.rootfs = rootfs.path();
  config.network = policy_of(net::Mode::kFiltered);
  auto created = registry_->create(config, "test");
  ASSERT_TRUE(created) << created.error().message;
  const Sandbox& sandbox = **created;
  const auto ca = network_->ca_pem(sandbox.id());
  ASSERT_TRUE(ca);
  const std::string bundle = read_file(sandbox.dir() + "/ca/public/ca-bundle.pem");
  ASSERT_TRUE(bundle.ends_with(*ca));

  EXPECT_EQ(run(sandbox, "cat /etc/ssl/certs/ca-certificates.crt"), bundle);
  EXPECT_EQ(run(sandbox, "cat /etc/ssl/cert.pem"), bundle);
  EXPECT_EQ(run(sandbox, "readlink /etc/ssl/cert.pem"), "certs/ca-certificates.crt\n");
  EXPECT_EQ(run(sandbox, "cat /etc/hutch/sandbox-ca.pem"), *ca);
  EXPECT_EQ(run(sandbox, "cat /etc/hutch/ca-bundle.pem"), bundle);
  EXPECT_EQ(run(sandbox, "ls -A /etc/hutch"), "ca-bundle.pem\nsandbox-ca.pem\n")
      << "no key beside them";
  EXPECT_EQ(run(sandbox, "test -e /etc/pki && echo made || echo absent"), "absent\n");
  const std::string mounts = run(sandbox, "cat /proc/self/mountinfo");
  for (const char* point : {" /etc/hutch ro,", " /etc/ssl/certs/ca-certificates.crt ro,"})
    EXPECT_NE(mounts.find(point), std::string::npos) << point << " in\n" << mounts;
  EXPECT_EQ(mounts.find(" /etc/ssl/cert.pem "), std::string::npos) << "the symlink's file is one";
  for (const char* path :
       {"/etc/ssl/certs/ca-certificates.crt", "/etc/hutch/sandbox-ca.pem", "/etc/hutch/new"}) {
    EXPECT_EQ(run(sandbox, std::string("echo x >> ") + path +
                               " 2>/dev/null && echo wrote || "
                               "echo refused"),
              "refused\n")
        << path;
  }

  EXPECT_EQ(read_file(rootfs.path() + "/etc/ssl/certs/ca-certificates.crt"), "image roots\n");
  TempDir snapshot;
  const std::string upper = snapshot.path() + "/upper";
  auto taken = sandbox.live().snapshot(upper);
  ASSERT_TRUE(taken) << taken.error().message();
  EXPECT_TRUE(fs::is_directory(upper + "/etc/hutch"));
  EXPECT_TRUE(fs::is_empty(upper + "/etc/hutch"));
  EXPECT_FALSE(fs::exists(upper + "/etc/ssl")) << "nothing of the image's bundle copied up";
  EXPECT_FALSE(fs::exists(upper + "/etc/pki"));
  for (const auto& entry : fs::recursive_directory_iterator(upper)) {
    if (!entry.is_regular_file()) continue;
    EXPECT_EQ(read_file(entry.path()).find("CERTIFICATE"), std::string::npos) << entry.path();
  }
}

// hutchd's rotation on a running sandbox: nothing before its time; then the next CA is trusted
// inside (read through the binds, which show the files rewritten in place) while the first
// still signs; then it takes over and is what a restarted hutchd loads.
TEST_F(NetworkRegistryTest, ARunningSandboxTrustsTheNextCaBeforeItTakesOver) {
  auto sandbox = create(policy_of(net::Mode::kFiltered));
  ASSERT_TRUE(sandbox);
  const auto first = network_->ca_pem(sandbox->id());
  ASSERT_TRUE(first);
  const auto now = std::chrono::system_clock::now();
  network_->rotate_cas(now);
  EXPECT_EQ(network_->ca_pem(sandbox->id()), first) << "a week left: nothing to do";

  network_->rotate_cas(now + std::chrono::hours(24 * 4 + 12));
  const auto both = network_->ca_pem(sandbox->id());
  ASSERT_TRUE(both);
  ASSERT_TRUE(both->starts_with(*first));
  const std::string second = both->substr(first->size());
  EXPECT_NE(second.find("BEGIN CERTIFICATE"), std::string::npos);
  EXPECT_EQ(run(*sandbox, "cat /etc/hutch/sandbox-ca.pem"), *both);
  const std::string bundle = run(*sandbox, "cat /etc/hutch/ca-bundle.pem");
  EXPECT_TRUE(bundle.ends_with(*both)) << "the roots, the first CA, the next";
  network_->rotate_cas(now + std::chrono::hours(24 * 4 + 13));
  EXPECT_EQ(network_->ca_pem(sandbox->id()), both) << "announced once";

  network_->rotate_cas(now + std::chrono::hours(24 * 6 + 12));
  EXPECT_EQ(network_->ca_pem(sandbox->id()), second);
  EXPECT_EQ(run(*sandbox, "cat /etc/hutch/sandbox-ca.pem"), *both) << "both trusted still";
  auto kept = load_trust(sandbox->dir());
  ASSERT_TRUE(kept) << kept.error().message();
  EXPECT_EQ(kept->ca->certificate_pem(), second);
  const std::string metrics = metrics_.render(0, 0);
  EXPECT_NE(metrics.find("hutch_net_ca_rotations_total{step=\"announce\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("hutch_net_ca_rotations_total{step=\"switch\"} 1\n"), std::string::npos);
  EXPECT_NE(metrics.find("hutch_net_ca_rotation_failures_total 0\n"), std::string::npos);

  // A step that fails is counted and tried again: the public files gone (a broken state dir)
  // fail the next announce.
  const std::string ca_dir = sandbox->dir() + "/ca";
  ASSERT_EQ(::rename((ca_dir + "/public").c_str(), (ca_dir + "/public.moved").c_str()), 0);
  network_->rotate_cas(now + std::chrono::hours(24 * 11 + 12));
  EXPECT_EQ(network_->ca_pem(sandbox->id()), second) << "nothing announced";
  EXPECT_NE(metrics_.render(0, 0).find("hutch_net_ca_rotation_failures_total 1\n"),
            std::string::npos);
  ASSERT_EQ(::rename((ca_dir + "/public.moved").c_str(), (ca_dir + "/public").c_str()), 0);
  network_->rotate_cas(now + std::chrono::hours(24 * 11 + 12));
  EXPECT_GT(network_->ca_pem(sandbox->id()).value_or("").size(), second.size())
      << "announced at the next look";
}

// The same by the service's own thread, with CAs valid for 6 s: the next CA is announced with
// about 2.6 s left and signs with about 0.9 s left.
TEST_F(NetworkRegistryTest, TheRotationThreadAnnouncesAndSwitchesOnItsOwn) {
  NetworkOptions options;
  options.ca_rotation.validity = std::chrono::seconds(6);
  options.netns_ahead = 0;
  auto service = NetworkService::create(options, metrics_);
  ASSERT_TRUE(service) << service.error().message();
  // However the test ends, its sandboxes go and the registry gets the fixture's service back
  // before this one is destroyed.
  struct Restore {
    SandboxRegistry& registry;
    NetworkService* fixtures;
    ~Restore() {
      registry.destroy_all();
      registry.set_network(fixtures);
    }
  } restore{*registry_, network_.get()};
  registry_->set_network(service->get());
  auto sandbox = create(policy_of(net::Mode::kFiltered));
  ASSERT_TRUE(sandbox);
  const std::string first = (*service)->ca_pem(sandbox->id()).value_or("");
  ASSERT_FALSE(first.empty());
  std::string both;
  EXPECT_TRUE(testing::wait_until(
      [&] {
        both = (*service)->ca_pem(sandbox->id()).value_or("");
        return both.size() > first.size();
      },
      10s, "the next CA announced"));
  EXPECT_EQ(run(*sandbox, "cat /etc/hutch/sandbox-ca.pem"), both);
  const std::string second = both.substr(first.size());
  EXPECT_TRUE(testing::wait_until(
      [&] { return (*service)->ca_pem(sandbox->id()).value_or("").starts_with(second); }, 10s,
      "the next CA signing"));
}

TEST_F(NetworkRegistryTest, WithoutTheServiceAFilteredCreateIsRefused) {
  registry_->set_network(nullptr);
  SandboxConfig config;
  config.network = policy_of(net::Mode::kFiltered);
  auto created = registry_->create(config, "test");
  ASSERT_FALSE(created);
  EXPECT_EQ(created.error().kind, ErrorKind::kUnsupported);
  EXPECT_TRUE(std::filesystem::is_empty(registry_->sandboxes_dir()));
}

}  // namespace
}  // namespace hutch::daemon::service
