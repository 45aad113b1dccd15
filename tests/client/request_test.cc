#include "cli/client/request.h"

#include <gtest/gtest.h>

#include <string>

#include "tests/unit/result_util.h"

namespace hutch::client {
namespace {

using test_util::contains;
using test_util::error_message;

TEST(CreateBody, SendsOnlyWhatWasGiven) {
  auto body = create_body({});
  ASSERT_TRUE(body) << body.error().message();
  EXPECT_EQ(*body, json({{"rootfs", "host"}}));
}

TEST(CreateBody, ConvertsSizesDurationsAndMaps) {
  CreateOptions options;
  options.rootfs = "/srv/rootfs";
  options.memory = "512M";
  options.disk = "1G";
  options.pids = 64;
  options.cpus = 0.5;
  options.env = {"A=1", "B=x=y"};
  options.labels = {"team=ml", "empty="};
  options.idle_ttl = "10m";
  options.timeout = "1.5s";
  options.network = "none";
  auto body = create_body(options);
  ASSERT_TRUE(body) << body.error().message();
  EXPECT_EQ(*body, json::parse(R"({
    "rootfs": "/srv/rootfs",
    "limits": {"memory_bytes": 536870912, "disk_bytes": 1073741824, "pids": 64, "cpus": 0.5},
    "env": {"A": "1", "B": "x=y"},
    "labels": {"team": "ml", "empty": ""},
    "idle_ttl_seconds": 600,
    "default_timeout_seconds": 2,
    "network": "none"})"));
}

TEST(CreateBody, ZeroMeansNeverForTtlAndTimeout) {
  CreateOptions options;
  options.idle_ttl = "0";
  options.timeout = "0";
  auto body = create_body(options);
  ASSERT_TRUE(body) << body.error().message();
  EXPECT_EQ((*body)["idle_ttl_seconds"], 0);
  EXPECT_EQ((*body)["default_timeout_seconds"], 0);
}

TEST(CreateBody, CarriesARecipeButNotWithARootfs) {
  CreateOptions options;
  options.recipe = "web";
  auto body = create_body(options);
  ASSERT_TRUE(body) << body.error().message();
  EXPECT_EQ((*body)["recipe"], "web");
  EXPECT_EQ((*body)["rootfs"], "host");
  options.rootfs = "/srv/rootfs";
  EXPECT_TRUE(contains(error_message(create_body(options)), "not both"));
}

TEST(CreateBody, RefusesBadValuesNamingThem) {
  CreateOptions memory;
  memory.memory = "lots";
  EXPECT_TRUE(contains(error_message(create_body(memory)), "lots"));
  CreateOptions env;
  env.env = {"1BAD=x"};
  EXPECT_TRUE(contains(error_message(create_body(env)), "1BAD"));
  CreateOptions label;
  label.labels = {"novalue"};
  EXPECT_TRUE(contains(error_message(create_body(label)), "label"));
  CreateOptions rootfs;
  rootfs.rootfs = "relative/dir";
  EXPECT_TRUE(contains(error_message(create_body(rootfs)), "absolute"));
  CreateOptions ttl;
  ttl.idle_ttl = "-5";
  EXPECT_TRUE(contains(error_message(create_body(ttl)), "duration"));
  CreateOptions net;
  net.network = "host";
  EXPECT_TRUE(contains(error_message(create_body(net)), "host"));
}

TEST(CreateBody, CarriesVolumes) {
  CreateOptions options;
  options.volumes = {"ws:/workspace", "cache:/root/.cache:ro"};
  auto body = create_body(options);
  ASSERT_TRUE(body) << body.error().message();
  EXPECT_EQ((*body)["volumes"],
            json::parse(R"([{"name":"ws","target":"/workspace","readonly":false},
                            {"name":"cache","target":"/root/.cache","readonly":true}])"));
  for (const char* bad : {"ws", ":/w", "ws:relative", "ws:"}) {
    options.volumes = {bad};
    EXPECT_FALSE(create_body(options)) << bad;
  }
}

TEST(VolumeBody, ParsesTheSize) {
  auto body = volume_body("ws", "1G");
  ASSERT_TRUE(body) << body.error().message();
  EXPECT_EQ(*body, json({{"name", "ws"}, {"size_bytes", uint64_t{1} << 30}}));
  EXPECT_FALSE(volume_body("ws", "lots"));
}

TEST(ExecBody, CarriesArgvAndOptions) {
  ExecOptions options;
  options.argv = {"sh", "-c", "echo hi"};
  options.workdir = "/tmp";
  options.env = {"K=V"};
  options.timeout = "500ms";
  options.stdin_data = "input\n";
  options.stream = true;
  auto body = exec_body(options);
  ASSERT_TRUE(body) << body.error().message();
  EXPECT_EQ(*body, json::parse(R"({"argv": ["sh", "-c", "echo hi"], "workdir": "/tmp",
    "env": {"K": "V"}, "timeout_seconds": 0.5, "stdin": "input\n", "stream": true})"));
}

TEST(ExecBody, Background) {
  ExecOptions options;
  options.argv = {"sleep", "1"};
  options.background = true;
  auto body = exec_body(options);
  ASSERT_TRUE(body) << body.error().message();
  EXPECT_EQ(*body, json::parse(R"({"argv": ["sleep", "1"], "background": true})"));
}

TEST(ExecBody, RefusesWhatHutchdWouldRefuse) {
  EXPECT_TRUE(contains(error_message(exec_body({})), "no command"));
  ExecOptions nul;
  nul.argv = {"echo", std::string("a\0b", 3)};
  EXPECT_TRUE(contains(error_message(exec_body(nul)), "NUL"));
  ExecOptions workdir;
  workdir.argv = {"true"};
  workdir.workdir = "tmp";
  EXPECT_TRUE(contains(error_message(exec_body(workdir)), "absolute"));
  ExecOptions timeout;
  timeout.argv = {"true"};
  timeout.timeout = "0";
  EXPECT_TRUE(contains(error_message(exec_body(timeout)), "duration"));
}

TEST(ExecBody, StdinMustBeUtf8) {
  ExecOptions options;
  options.argv = {"cat"};
  options.stdin_data = std::string("\xff\xfe", 2);
  EXPECT_TRUE(contains(error_message(exec_body(options)), "hutch cp"));
  options.stdin_data = "caf\xc3\xa9 with a NUL \0 inside";
  EXPECT_TRUE(exec_body(options));
}

TEST(ParseKeyValue, SplitsAtTheFirstEquals) {
  auto kv = parse_key_value("a=b=c", "label");
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->first, "a");
  EXPECT_EQ(kv->second, "b=c");
  EXPECT_TRUE(contains(error_message(parse_key_value("=x", "label")), "label"));
  EXPECT_FALSE(parse_key_value("nokey", "env"));
}

TEST(CopyEndpoint, RecognizesSandboxPaths) {
  CopyEndpoint in = parse_copy_endpoint("sb_1-a:/work/file.txt");
  ASSERT_TRUE(in.sandbox);
  EXPECT_EQ(*in.sandbox, "sb_1-a");
  EXPECT_EQ(in.path, "/work/file.txt");
  for (const char* host :
       {"file.txt", "./id:/x", "/abs/path", "-", "id:relative", ":/x", "a.b:/x", "C:\\x"}) {
    CopyEndpoint endpoint = parse_copy_endpoint(host);
    EXPECT_FALSE(endpoint.sandbox) << host;
    EXPECT_EQ(endpoint.path, host);
  }
}

TEST(PlanCopy, UploadAndDownload) {
  auto up = plan_copy("/tmp/data.bin", "abc:/work/");
  ASSERT_TRUE(up) << up.error().message();
  EXPECT_TRUE(up->upload);
  EXPECT_EQ(up->sandbox, "abc");
  EXPECT_EQ(up->sandbox_path, "/work/data.bin");
  EXPECT_EQ(up->host_path, "/tmp/data.bin");

  auto down = plan_copy("abc:/out.json", "-");
  ASSERT_TRUE(down) << down.error().message();
  EXPECT_FALSE(down->upload);
  EXPECT_EQ(down->sandbox_path, "/out.json");
  EXPECT_EQ(down->host_path, "-");
}

TEST(PlanCopy, NeedsExactlyOneSandboxSide) {
  EXPECT_TRUE(contains(error_message(plan_copy("a", "b")), "ID:/path"));
  EXPECT_TRUE(contains(error_message(plan_copy("x:/a", "y:/b")), "both"));
  EXPECT_TRUE(contains(error_message(plan_copy("-", "x:/dir/")), "stdin"));
  EXPECT_TRUE(contains(error_message(plan_copy("x:/dir/", "out")), "directory"));
}

TEST(UrlEncode, EscapesEverythingButUnreservedAndSlash) {
  EXPECT_EQ(url_encode("/a b/c&d=e?f#g%h+i"), "/a%20b/c%26d%3De%3Ff%23g%25h%2Bi");
  EXPECT_EQ(url_encode("Az09-_.~/"), "Az09-_.~/");
  EXPECT_EQ(url_encode("caf\xc3\xa9"), "caf%C3%A9");
}

TEST(SandboxPath, RefusesIdsThatWouldChangeTheRoute) {
  EXPECT_EQ(sandbox_path("abc", "/exec").value_or(""), "/v1/sandboxes/abc/exec");
  for (const char* id : {"", "../x", "a/b", "a?b", "a b", "a%2f"})
    EXPECT_TRUE(contains(error_message(sandbox_path(id)), "sandbox id")) << id;
}

TEST(SandboxTable, AlignsColumnsAndJoinsLabels) {
  json sandboxes = json::parse(R"([
    {"id": "a1", "state": "running", "created_at": "2026-01-01T00:00:00.000Z",
     "labels": {"team": "ml", "x": "y"}},
    {"id": "longer-id", "state": "paused", "created_at": "2026-01-02T00:00:00.000Z",
     "labels": {}}])");
  EXPECT_EQ(format_sandbox_table(sandboxes),
            "ID         STATE    CREATED                   LABELS\n"
            "a1         running  2026-01-01T00:00:00.000Z  team=ml,x=y\n"
            "longer-id  paused   2026-01-02T00:00:00.000Z\n");
  EXPECT_EQ(format_sandbox_table(json::array()), "ID  STATE  CREATED  LABELS\n");
}

TEST(DaemonError, ReadsTheErrorObject) {
  EXPECT_EQ(daemon_error(404, R"({"error":{"code":"sandbox_not_found","message":"no sandbox x"}})")
                .message(),
            "sandbox_not_found: no sandbox x");
  EXPECT_EQ(daemon_error(502, "Bad gateway\n").message(), "HTTP 502: Bad gateway");
  EXPECT_EQ(daemon_error(500, "").message(), "HTTP 500: (empty answer)");
}

TEST(Base64, DecodesWithAndWithoutPadding) {
  EXPECT_EQ(base64_decode("").value_or("x"), "");
  EXPECT_EQ(base64_decode("Zg==").value_or(""), "f");
  EXPECT_EQ(base64_decode("Zm8=").value_or(""), "fo");
  EXPECT_EQ(base64_decode("Zm9v").value_or(""), "foo");
  EXPECT_EQ(base64_decode("AP8A/w==").value_or(""), std::string("\x00\xff\x00\xff", 4));
  EXPECT_EQ(base64_decode("+/+/").value_or(""), "\xfb\xff\xbf");
  for (const char* bad : {"Zg=", "Z===", "Zm9v!A==", "Zg==Zg==", "=Zg="})
    EXPECT_FALSE(base64_decode(bad)) << bad;
}

TEST(Base64, EncodesWithPaddingAndRoundTrips) {
  EXPECT_EQ(base64_encode(""), "");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("\xfb\xff\xbf"), "+/+/");
  std::string bytes;
  for (int i = 0; i < 256; ++i) bytes += static_cast<char>(i);
  EXPECT_EQ(base64_decode(base64_encode(bytes)).value_or(""), bytes);
}

TEST(LineSplitter, ReassemblesLinesAcrossChunks) {
  LineSplitter lines;
  EXPECT_TRUE(lines.feed("{\"std").empty());
  EXPECT_EQ(lines.feed("out\":\"a\"}\n{\"x\":1}\n{\"exit"),
            (std::vector<std::string>{"{\"stdout\":\"a\"}", "{\"x\":1}"}));
  EXPECT_EQ(lines.rest(), "{\"exit");
  EXPECT_EQ(lines.feed("_code\":0}\n"), (std::vector<std::string>{"{\"exit_code\":0}"}));
  EXPECT_EQ(lines.rest(), "");
}

}  // namespace
}  // namespace hutch::client
