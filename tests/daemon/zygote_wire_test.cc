// The zygote's wire format for SandboxSpec (daemon/zygote_wire.h): every field round trips.
// pure, no root.
#include "daemon/zygote_wire.h"

#include <gtest/gtest.h>

#include "daemon/errors.h"

namespace hutch::daemon {
namespace {

using nlohmann::json;

// Every field set away from its default, so that a field the wire drops shows up as a default.
SandboxSpec unusual_spec() {
  SandboxSpec spec;
  spec.lower_dirs = {"/srv/lower/a", "/srv/lower/b"};
  spec.layers = {"/var/lib/hutch/layers/1.erofs", "/var/lib/hutch/layers/2"};
  spec.upper_dir = "/var/lib/hutch/sandboxes/x/upper";
  spec.argv = {"/bin/true"};
  spec.env = {"A=1", "B=two words"};
  spec.workdir = "/work";
  spec.hostname = "wired";
  spec.net = NetMode::kNone;
  spec.binds = {{"/srv/data", "/data", false},
                {"/srv/ro", "/ro", true, BindFrom::kLauncher},
                {"/srv/checked", "/checked", true, BindFrom::kLauncher, false, 9},
                {"/ro/bundle.pem", "/etc/ssl/cert.pem", true, BindFrom::kSandbox, true}};
  spec.volumes = {{7, "/workspace", false}, {8, "/cache", true}};
  spec.uid = 1000;
  spec.gid = 1001;
  spec.ids = {2'000'000'000, 131072};
  spec.disk_bytes = 12345678;
  spec.timeout = std::chrono::milliseconds(5000);
  spec.limits = {uint64_t{256} << 20, 77, 1.5, 321};
  spec.cgroup = false;
  spec.cgroup_parent = "elsewhere";
  spec.sweep_stale_cgroups = false;
  spec.state_dir = "/srv/state";
  spec.capabilities = kFileOwnershipCapabilities;
  spec.seccomp.filters = {{sock_filter{0x06, 0, 0, 0x7fff0000}}};
  return spec;
}

bool same_binds(const std::vector<BindMount>& a, const std::vector<BindMount>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    // Field by field through a binding: a field added to BindMount breaks the compile here.
    const auto& [a_source, a_target, a_read_only, a_from, a_existing, a_tree] = a[i];
    const auto& [b_source, b_target, b_read_only, b_from, b_existing, b_tree] = b[i];
    if (a_source != b_source || a_target != b_target || a_read_only != b_read_only ||
        a_from != b_from || a_existing != b_existing)
      return false;
    // `a` was received: a tree's fd travels beside the JSON (daemon/zygote.h), so it is marked.
    if (a_tree != (b_tree >= 0 ? kTreeFollows : -1)) return false;
  }
  return true;
}

// The structured bindings below name every member of SandboxSpec, IdMap and CgroupLimits: adding
// a member to one of them makes this test fail to compile until the new field is put on the wire
// (and compared here) or listed with the fields the wire leaves out (daemon/zygote_wire.h).
TEST(ZygoteWire, EveryFieldRoundTrips) {
  const SandboxSpec sent = unusual_spec();
  const SandboxSpec received = spec_from_json(spec_to_json(sent));
  const auto& [lower_dirs, layers, upper_dir, argv, env, workdir, hostname, net, binds, volumes,
               uid, gid, ids, disk_bytes, timeout, limits, cgroup, cgroup_parent,
               sweep_stale_cgroups, state_dir, capabilities, seccomp] = received;
  EXPECT_EQ(lower_dirs, sent.lower_dirs);
  EXPECT_EQ(layers, sent.layers);
  EXPECT_EQ(upper_dir, sent.upper_dir);
  EXPECT_EQ(env, sent.env);
  EXPECT_EQ(workdir, sent.workdir);
  EXPECT_EQ(hostname, sent.hostname);
  EXPECT_EQ(net, sent.net);
  EXPECT_TRUE(same_binds(binds, sent.binds));
  ASSERT_EQ(volumes.size(), sent.volumes.size());
  for (size_t i = 0; i < volumes.size(); ++i) {
    const auto& [mount_fd, target, read_only] = volumes[i];
    EXPECT_EQ(mount_fd, -1);  // the fd travels beside the JSON (daemon/zygote.h)
    EXPECT_EQ(target, sent.volumes[i].target);
    EXPECT_EQ(read_only, sent.volumes[i].read_only);
  }
  EXPECT_EQ(uid, sent.uid);
  EXPECT_EQ(gid, sent.gid);
  const auto& [host_base, count] = ids;
  EXPECT_EQ(host_base, sent.ids.host_base);
  EXPECT_EQ(count, sent.ids.count);
  EXPECT_EQ(disk_bytes, sent.disk_bytes);
  const auto& [memory_bytes, pids, cpus, cpu_weight] = limits;
  EXPECT_EQ(memory_bytes, sent.limits.memory_bytes);
  EXPECT_EQ(pids, sent.limits.pids);
  EXPECT_EQ(cpus, sent.limits.cpus);
  EXPECT_EQ(cpu_weight, sent.limits.cpu_weight);
  EXPECT_EQ(cgroup, sent.cgroup);
  EXPECT_EQ(cgroup_parent, sent.cgroup_parent);
  EXPECT_EQ(sweep_stale_cgroups, sent.sweep_stale_cgroups);
  EXPECT_EQ(state_dir, sent.state_dir);
  EXPECT_EQ(capabilities, sent.capabilities);
  // Left out on purpose (daemon/zygote_wire.h): they arrive as defaults.
  EXPECT_TRUE(argv.empty());
  EXPECT_FALSE(timeout);
  EXPECT_TRUE(seccomp.filters.empty());
}

// Unset limits stay unset (a set one would override default_cgroup_limits in the supervisor).
TEST(ZygoteWire, UnsetLimitsStayUnset) {
  const SandboxSpec received = spec_from_json(spec_to_json(SandboxSpec{}));
  EXPECT_FALSE(received.limits.memory_bytes);
  EXPECT_FALSE(received.limits.pids);
  EXPECT_FALSE(received.limits.cpus);
  EXPECT_FALSE(received.limits.cpu_weight);
  EXPECT_EQ(received.net, NetMode::kLoopback);
  EXPECT_TRUE(received.binds.empty());
}

TEST(ZygoteWire, MissingFieldsAreRefused) {
  const json good = spec_to_json(unusual_spec());
  for (const auto& [key, value] : good.items()) {
    json bad = good;
    bad.erase(key);
    EXPECT_ANY_THROW(spec_from_json(bad)) << "without " << key;
  }
  EXPECT_ANY_THROW(spec_from_json(json::array()));
  EXPECT_ANY_THROW(spec_from_json(json("spec")));
}

}  // namespace
}  // namespace hutch::daemon
