// The daemon's request validation and encoding (daemon/json_codec.h), its helpers (daemon/codec/)
// and the spec policy (daemon/sandbox_spec.h): pure, no root.
#include "daemon/json_codec.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "daemon/errors.h"
#include "daemon/sandbox_spec.h"
#include "daemon/zygote_wire.h"
#include "runtime/defaults.h"

namespace hutch::daemon {
namespace {

int status_of(const std::function<void()>& parse) {
  try {
    parse();
  } catch (const ApiError& e) {
    return e.status;
  }
  return 200;
}

TEST(JsonCodec, ExecRequestVariants) {
  auto argv = parse_exec_request({{"argv", {"ls", "-l"}}}, ExecFlavor::kPlain);
  EXPECT_EQ(argv.argv, (std::vector<std::string>{"ls", "-l"}));
  EXPECT_EQ(argv.max_output_bytes, 4u << 20);
  EXPECT_EQ(argv.timeout_seconds, 0);
  auto command =
      parse_exec_request({{"command", "echo hi"}, {"timeout_seconds", 1.5}}, ExecFlavor::kPlain);
  EXPECT_EQ(command.argv, (std::vector<std::string>{"/bin/sh", "-c", "echo hi"}));
  EXPECT_EQ(command.timeout_seconds, 1.5);
  auto bash = parse_exec_request({{"script", "echo $1"}, {"args", {"x"}}}, ExecFlavor::kBash);
  EXPECT_EQ(bash.argv, (std::vector<std::string>{"bash", "-c", "echo $1", "bash", "x"}));
  auto python = parse_exec_request({{"command", "print(1)"}}, ExecFlavor::kPython);
  EXPECT_EQ(python.argv, (std::vector<std::string>{"python3", "-c", "print(1)"}));
}

TEST(JsonCodec, ExecRequestRefusals) {
  const std::vector<json> bad = {
      json::object(),
      {{"argv", json::array()}},
      {{"argv", {std::string("a\0", 2)}}},
      {{"command", ""}},
      {{"argv", {"a"}}, {"command", "b"}},
      {{"argv", {"a"}}, {"env", {{"9X", "1"}}}},
      {{"argv", {"a"}}, {"timeout_seconds", -0.5}},
      {{"argv", {"a"}}, {"timeout_seconds", 1e300}},
      {{"argv", {"a"}}, {"stream", "yes"}},
  };
  for (const json& body : bad) {
    EXPECT_EQ(status_of([&] { parse_exec_request(body, ExecFlavor::kPlain); }), 400) << body.dump();
  }
  EXPECT_EQ(status_of([] { parse_exec_request({{"args", {"x"}}}, ExecFlavor::kBash); }), 400);
}

TEST(JsonCodec, SandboxConfigDefaultsAndRoundTrip) {
  SandboxConfig defaults = parse_sandbox_config(json::object());
  EXPECT_EQ(defaults.idle_ttl_seconds, 600u);
  EXPECT_EQ(defaults.default_timeout_seconds, 600u);
  EXPECT_EQ(defaults.network.mode, net::Mode::kLoopback);
  EXPECT_EQ(defaults.workdir, "/");
  json body = {{"limits", {{"memory_bytes", 1 << 30}, {"cpus", 0.5}}},
               {"env", {{"A", "1"}}},
               {"labels", {{"k", "v"}}},
               {"max_lifetime_seconds", 60},
               {"network", "none"}};
  SandboxConfig config = parse_sandbox_config(body);
  SandboxConfig again = parse_sandbox_config(config_to_json(config));
  EXPECT_EQ(config_to_json(again), config_to_json(config));
  SandboxSpec spec = build_spec(config, "/var/lib/hutch");
  EXPECT_EQ(spec.net, NetMode::kNone);
  EXPECT_EQ(spec.limits.memory_bytes, 1u << 30);
  SandboxSpec wire = spec_from_json(spec_to_json(spec));
  EXPECT_EQ(wire.env, spec.env);
  EXPECT_EQ(wire.limits.cpus, 0.5);
  EXPECT_EQ(wire.net, NetMode::kNone);
  EXPECT_TRUE(wire.lower_dirs.empty());
}

// The zygote's wire format takes integers only within their type: a float or an integer past
// the range is refused (get<uint32_t>() of 6.5e62 was undefined behaviour, found by fuzzing).
TEST(JsonCodec, WireSpecIntegersAreRangeChecked) {
  const json good =
      spec_to_json(build_spec(parse_sandbox_config(json::object()), "/var/lib/hutch"));
  EXPECT_NO_THROW(spec_from_json(good));
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, json>>{{"id_count", 6.56e62},
                                                 {"id_count", 4294967296ull},
                                                 {"uid", -1},
                                                 {"gid", 1.5},
                                                 {"id_base", "1000"},
                                                 {"disk_bytes", -5}}) {
    json bad = good;
    bad[key] = value;
    EXPECT_THROW(spec_from_json(bad), ApiError) << key << "=" << value.dump();
  }
  json bad_limits = good;
  bad_limits["limits"]["pids"] = 1e300;
  EXPECT_THROW(spec_from_json(bad_limits), ApiError);
}

TEST(JsonCodec, EnvironmentMergeOrder) {
  auto env = exec_environment({{"A", "sandbox"}, {"HOME", "/home/x"}}, {{"A", "request"}});
  EXPECT_NE(std::find(env.begin(), env.end(), "A=request"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "HOME=/home/x"), env.end());
  EXPECT_NE(std::find(env.begin(), env.end(), "LANG=C.UTF-8"), env.end());
  EXPECT_EQ(std::count_if(env.begin(), env.end(), [](auto& kv) { return kv.starts_with("A="); }),
            1);
}

std::string env_key(const std::string& entry) { return entry.substr(0, entry.find('=')); }

// hutchd's defaults are runtime/defaults.h's (the CLI's too), for the sandbox's root.
TEST(JsonCodec, SpecPolicyAppliesTheRuntimeDefaults) {
  std::vector<std::string> defaults = default_environment(0);
  std::sort(defaults.begin(), defaults.end());
  std::vector<std::string> bare = exec_environment({}, {});
  std::sort(bare.begin(), bare.end());
  EXPECT_EQ(bare, defaults);

  SandboxConfig config =
      parse_sandbox_config({{"env", {{"PATH", "/opt/bin"}, {"A0", "x"}, {"A", "y"}}}});
  SandboxSpec spec = build_spec(config, "/var/lib/hutch");
  EXPECT_EQ(spec.uid, 0u);
  EXPECT_EQ(spec.gid, 0u);
  EXPECT_EQ(spec.ids.host_base, IdMap{}.host_base);
  EXPECT_EQ(spec.ids.count, IdMap{}.count);
  const files::Owner owner = sandbox_root_owner(config);
  EXPECT_EQ(owner.uid, spec.ids.host_base);
  EXPECT_EQ(owner.gid, spec.ids.host_base);
  // Sorted by key ("A" before "A0", although "A=" sorts after "A0" as text); overrides win.
  EXPECT_EQ(spec.env, (std::vector<std::string>{"A=y", "A0=x", "HOME=/root", "LANG=C.UTF-8",
                                                "PATH=/opt/bin", "TERM=xterm"}));
  EXPECT_TRUE(std::is_sorted(spec.env.begin(), spec.env.end(),
                             [](auto& a, auto& b) { return env_key(a) < env_key(b); }));
}

// The codec refuses exactly what runtime/defaults.h's rules refuse.
TEST(JsonCodec, HostnamesAndEnvKeysFollowTheRuntimeRules) {
  for (const std::string& name :
       {std::string("box-1.local"), std::string(64, 'a'), std::string(65, 'a'), std::string("a b"),
        std::string("a_b"), std::string("")}) {
    EXPECT_EQ(status_of([&] {
                parse_sandbox_config({{"hostname", name}});
              }),
              valid_hostname(name) ? 200 : 400)
        << name;
  }
  for (const std::string& key : {std::string("_A1"), std::string("9X"), std::string("A-B"),
                                 std::string(256, 'K'), std::string(257, 'K')}) {
    const int expected = valid_env_key(key) ? 200 : 400;
    EXPECT_EQ(status_of([&] { parse_sandbox_config({{"env", {{key, "v"}}}}); }), expected) << key;
    EXPECT_EQ(status_of([&] {
                parse_exec_request({{"argv", {"a"}}, {"env", {{key, "v"}}}}, ExecFlavor::kPlain);
              }),
              expected)
        << key;
  }
}

TEST(JsonCodec, EncodingHelpers) {
  for (std::string data : {std::string(), std::string("a"), std::string("ab"), std::string("abc"),
                           std::string("\0\xff\x01zz", 5)}) {
    EXPECT_EQ(base64_decode(base64_encode(data)), data);
  }
  EXPECT_EQ(base64_encode("hello"), "aGVsbG8=");
  EXPECT_FALSE(base64_decode("!!!"));
  auto now = std::chrono::system_clock::now();
  auto parsed = parse_iso8601(iso8601(now));
  ASSERT_TRUE(parsed);
  EXPECT_LT(std::chrono::abs(*parsed - now), std::chrono::milliseconds(1));
  EXPECT_EQ(iso8601_ns(0), "1970-01-01T00:00:00.000Z");
  // Beyond system_clock's int64_t nanoseconds (year 2262): refused, not overflowed.
  EXPECT_FALSE(parse_iso8601("2340-11-30T16:38:44.841Z"));
  EXPECT_FALSE(parse_iso8601("1500-01-01T00:00:00.000Z"));
  EXPECT_TRUE(parse_iso8601("2262-01-01T00:00:00.000Z"));
  EXPECT_EQ(parse_signal("TERM"), 15);
  EXPECT_EQ(parse_signal("SIGKILL"), 9);
  EXPECT_EQ(parse_signal(2), 2);
  EXPECT_EQ(parse_signal("15"), 15);
  EXPECT_FALSE(parse_signal("NOPE"));
  EXPECT_FALSE(parse_signal(0));
  EXPECT_EQ(dump_json({{"s", std::string("a\xff")}}), "{\"s\":\"a\xEF\xBF\xBD\"}");
}

TEST(JsonCodec, NetworkTakesAModeOrAPolicy) {
  EXPECT_EQ(parse_network("filtered").mode, net::Mode::kFiltered);
  EXPECT_EQ(parse_network("open").mode, net::Mode::kOpen);
  net::Policy policy =
      parse_network({{"mode", "filtered"}, {"allow", {"api.test", "10.0.0.0/8:5432"}}});
  ASSERT_EQ(policy.allow.size(), 2u);
  EXPECT_EQ(policy.allow[1].to_string(), "10.0.0.0/8:5432");
  SandboxConfig config = parse_sandbox_config({{"network", network_to_json(policy)}});
  EXPECT_EQ(config.network, policy);
  EXPECT_EQ(parse_sandbox_config(config_to_json(config), ConfigSource::kRecord).network, policy);
  EXPECT_EQ(build_spec(config, "/var/lib/hutch").net, NetMode::kHostOwned);
  EXPECT_EQ(spec_from_json(spec_to_json(build_spec(config, "/var/lib/hutch"))).net,
            NetMode::kHostOwned);
  EXPECT_EQ(build_spec(parse_sandbox_config({{"network", "open"}}), "/x").net, NetMode::kHostOwned);
}

TEST(JsonCodec, NetworkErrorsNameTheEntry) {
  auto message_of = [](const json& network) {
    try {
      parse_network(network);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.message;
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of({{"mode", "filtered"}, {"allow", {"ok.test", "10.0.0.0/33"}}})
                .find("allow[1] \"10.0.0.0/33\""),
            std::string::npos);
  EXPECT_NE(message_of("host").find("network must be"), std::string::npos);
  EXPECT_NE(message_of({{"mode", "filtered"}, {"alow", json::array()}}).find("alow"),
            std::string::npos);
  EXPECT_NE(message_of({{"mode", "loopback"}, {"allow", {"a.test"}}}).find("need mode"),
            std::string::npos);
  EXPECT_NE(message_of(7).find("network must be"), std::string::npos);
}

// A create's volumes: decoded, kept by the record (round trip), put in the spec without a mount
// (start_live opens them); every refusal is bad_volume.
TEST(JsonCodec, VolumesAreCheckedAndRecorded) {
  json body = {{"volumes",
                {{{"name", "ws"}, {"target", "/workspace"}},
                 {{"name", "cache"}, {"target", "/c"}, {"readonly", true}, {"shared", true}}}}};
  SandboxConfig config = parse_sandbox_config(body);
  ASSERT_EQ(config.volumes.size(), 2u);
  EXPECT_FALSE(config.volumes[0].read_only);
  EXPECT_TRUE(config.volumes[1].read_only);
  EXPECT_TRUE(config.volumes[1].shared);
  EXPECT_EQ(config_to_json(parse_sandbox_config(config_to_json(config), ConfigSource::kRecord)),
            config_to_json(config));
  SandboxSpec spec = build_spec(config, "/var/lib/hutch");
  ASSERT_EQ(spec.volumes.size(), 2u);
  EXPECT_EQ(spec.volumes[0].target, "/workspace");
  EXPECT_EQ(spec.volumes[0].mount_fd, -1);
  EXPECT_TRUE(spec.volumes[1].read_only);
  auto code_of = [](const json& volumes) {
    try {
      parse_sandbox_config({{"volumes", volumes}});
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400);
      return e.code;
    }
    return std::string("no error");
  };
  EXPECT_EQ(code_of({{{"name", ".."}, {"target", "/w"}}}), "bad_volume");
  EXPECT_EQ(code_of({{{"name", "a/b"}, {"target", "/w"}}}), "bad_volume");
  EXPECT_EQ(code_of({{{"name", "ws"}, {"target", "/"}}}), "bad_volume");
  EXPECT_EQ(code_of({{{"name", "ws"}, {"target", "/w/../x"}}}), "bad_volume");
  EXPECT_EQ(code_of({{{"name", "ws"}, {"target", "/a"}}, {{"name", "ws"}, {"target", "/b"}}}),
            "bad_volume");
  EXPECT_EQ(code_of({{{"name", "a"}, {"target", "/w"}}, {{"name", "b"}, {"target", "/w"}}}),
            "bad_volume");
  json five = json::array();
  for (int i = 0; i < 5; ++i)
    five.push_back({{"name", "v" + std::to_string(i)}, {"target", "/v" + std::to_string(i)}});
  EXPECT_EQ(code_of(five), "bad_volume");
  EXPECT_EQ(code_of({{{"name", "ws"}, {"target", "/w"}, {"size", 1}}}), "bad_request");
  EXPECT_EQ(code_of("ws"), "bad_request");
}

}  // namespace
}  // namespace hutch::daemon
