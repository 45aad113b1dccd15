// The files API through hutchd: raw GET/PUT/DELETE, the Deep Agents operations, batch
// upload/download with per-file errors, ownership, and path escapes (with a symlink swapped in a
// loop inside the sandbox while requests run).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <thread>

#include "tests/common/command.h"
#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

std::string encode_query(const std::string& text) {
  std::string out;
  for (unsigned char c : text) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '-' || c == '_') {
      out += static_cast<char>(c);
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", c);
      out += hex;
    }
  }
  return out;
}

std::string base64(const std::string& data) {
  static const char* k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  size_t i = 0;
  for (; i + 2 < data.size(); i += 3) {
    uint32_t n = (uint8_t(data[i]) << 16) | (uint8_t(data[i + 1]) << 8) | uint8_t(data[i + 2]);
    out += {k[n >> 18 & 63], k[n >> 12 & 63], k[n >> 6 & 63], k[n & 63]};
  }
  if (i + 1 == data.size()) {
    uint32_t n = uint8_t(data[i]) << 16;
    out += {k[n >> 18 & 63], k[n >> 12 & 63], '=', '='};
  } else if (i + 2 == data.size()) {
    uint32_t n = (uint8_t(data[i]) << 16) | (uint8_t(data[i + 1]) << 8);
    out += {k[n >> 18 & 63], k[n >> 12 & 63], k[n >> 6 & 63], '='};
  }
  return out;
}

class FilesTest : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    id_ = create();
    ASSERT_FALSE(id_.empty());
    init_pid_ = daemon_->get("/v1/sandboxes/" + id_).body["init_pid"];
  }
  std::string files(const std::string& path) {
    return "/v1/sandboxes/" + id_ + "/files?path=" + encode_query(path);
  }
  Hutchd::Reply op(const std::string& name, const json& body) {
    return daemon_->post("/v1/sandboxes/" + id_ + "/fs/" + name, body);
  }
  std::string host_path(const std::string& inside) {
    return "/proc/" + std::to_string(init_pid_) + "/root" + inside;
  }
  std::string id_;
  int init_pid_ = 0;
};

TEST_F(FilesTest, PutGetBinaryRoundTripOwnedBySandboxRoot) {
  std::string data;
  for (int i = 0; i < 200000; ++i) data += static_cast<char>(i % 256);  // NULs and high bytes
  auto put = daemon_->put(files("/data/deep/blob.bin"), data);
  ASSERT_EQ(put.status, 200) << put.raw;
  EXPECT_EQ(put.body["size"], data.size());
  auto got = daemon_->client()->Get(files("/data/deep/blob.bin"));
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_TRUE(got->body == data);
  struct stat st {};
  ASSERT_EQ(::stat(host_path("/data/deep/blob.bin").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000000000u);
  EXPECT_EQ(st.st_gid, 1000000000u);
  ASSERT_EQ(::stat(host_path("/data/deep").c_str(), &st), 0);
  EXPECT_EQ(st.st_uid, 1000000000u);
  // The command inside sees the same bytes, owned by its root.
  auto inside = exec(id_, {{"command", "stat -c '%u %s' /data/deep/blob.bin"}});
  EXPECT_EQ(inside["stdout"], "0 " + std::to_string(data.size()) + "\n");

  auto moded = daemon_->put(files("/data/mode.sh") + "&mode=0750", "#!/bin/sh\necho run\n");
  ASSERT_EQ(moded.status, 200) << moded.raw;
  ASSERT_EQ(::stat(host_path("/data/mode.sh").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
  EXPECT_EQ(exec(id_, {{"argv", {"/data/mode.sh"}}})["stdout"], "run\n");

  EXPECT_EQ(daemon_->del(files("/data/mode.sh")).status, 204);
  EXPECT_EQ(daemon_->client()->Get(files("/data/mode.sh"))->status, 404);
  auto not_empty = daemon_->del(files("/data"));
  EXPECT_EQ(not_empty.status, 409) << not_empty.raw;
  EXPECT_EQ(daemon_->del(files("/data") + "&recursive=true").status, 204);
  EXPECT_FALSE(std::filesystem::exists(host_path("/data")));
  EXPECT_EQ(error_code(daemon_->get(files("/missing"))), "file_not_found");
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + id_ + "/files").status, 400);
}

// The API acts as the sandbox's root, not as host root (runtime/files/identity.h): a 0600 file of
// another user inside (uid 1000, host 1000001000) cannot be read or replaced through it.
TEST_F(FilesTest, AnotherUsersPrivateFileIsPermissionDenied) {
  ASSERT_EQ(daemon_->put(files("/home/alice/key"), "alice's secret").status, 200);
  ASSERT_EQ(daemon_->put(files("/root/mine") + "&mode=0600", "root's own").status, 200);
  // Given to uid 1000 from the host: the sandbox's root has no CAP_CHOWN.
  for (const char* path : {"/home/alice", "/home/alice/key"})
    ASSERT_EQ(::chown(host_path(path).c_str(), 1000001000, 1000001000), 0) << path;
  ASSERT_EQ(::chmod(host_path("/home/alice/key").c_str(), 0600), 0);

  auto get = daemon_->get(files("/home/alice/key"));
  EXPECT_EQ(get.status, 403) << get.raw;
  EXPECT_EQ(error_code(get), "permission_denied");
  auto put = daemon_->put(files("/home/alice/key"), "overwritten");
  EXPECT_EQ(put.status, 403) << put.raw;
  EXPECT_EQ(error_code(op("read", {{"path", "/home/alice/key"}})), "permission_denied");
  EXPECT_EQ(error_code(op("write", {{"path", "/home/alice/key"}, {"content", "x"}})),
            "permission_denied");
  auto down = op("download", {{"paths", {"/home/alice/key"}}});
  ASSERT_EQ(down.status, 200) << down.raw;
  EXPECT_EQ(down.body["files"][0]["error"], "permission_denied") << down.raw;
  // The kernel's view inside: untouched, still uid 1000's.
  auto inside = exec(id_, {{"command", "stat -c '%u %a' /home/alice/key; ls /home/alice"}});
  EXPECT_EQ(inside["stdout"], "1000 600\nkey\n");
  std::ifstream key(host_path("/home/alice/key"));
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(key), {}), "alice's secret");

  // The sandbox root's own 0600 file is its to read.
  auto mine = daemon_->client()->Get(files("/root/mine"));
  ASSERT_TRUE(mine);
  EXPECT_EQ(mine->status, 200);
  EXPECT_EQ(mine->body, "root's own");
}

TEST_F(FilesTest, DeepAgentsOperations) {
  ASSERT_EQ(op("mkdir", {{"path", "/w/a/b"}, {"parents", true}}).status, 200);
  EXPECT_EQ(op("mkdir", {{"path", "/w/a/b"}}).status, 409);
  auto wrote = op(
      "write", {{"path", "/w/a/notes.txt"}, {"content", "one\ntwo needle\nthree\nfour needle\n"}});
  ASSERT_EQ(wrote.status, 200) << wrote.raw;
  ASSERT_EQ(op("write", {{"path", "/w/a/b/code.py"}, {"content", "needle = 1\n"}}).status, 200);
  ASSERT_EQ(op("write", {{"path", "/w/.hidden/x.py"}, {"content", "needle\n"}}).status, 200);

  auto ls = op("ls", {{"path", "/w/a"}});
  ASSERT_EQ(ls.status, 200) << ls.raw;
  ASSERT_EQ(ls.body["entries"].size(), 2u);
  EXPECT_EQ(ls.body["entries"][0]["path"], "/w/a/b");
  EXPECT_EQ(ls.body["entries"][0]["is_dir"], true);
  EXPECT_EQ(ls.body["entries"][1]["path"], "/w/a/notes.txt");
  EXPECT_EQ(ls.body["entries"][1]["size"], 33);
  EXPECT_TRUE(ls.body["entries"][1]["modified_at"].get<std::string>().ends_with("Z"));
  auto stat = op("stat", {{"path", "/w/a/notes.txt"}});
  EXPECT_EQ(stat.body["is_dir"], false);
  EXPECT_EQ(op("stat", {{"path", "/w/none"}}).status, 404);

  auto read = op("read", {{"path", "/w/a/notes.txt"}, {"offset", 1}, {"limit", 2}});
  ASSERT_EQ(read.status, 200) << read.raw;
  EXPECT_EQ(read.body["content"], "two needle\nthree\n");
  EXPECT_EQ(read.body["total_lines"], 4);
  EXPECT_EQ(read.body["start_line"], 1);
  EXPECT_EQ(read.body["end_line"], 3);
  EXPECT_EQ(read.body["next_offset"], 3);

  auto not_unique = op("edit", {{"path", "/w/a/notes.txt"}, {"old", "needle"}, {"new", "pin"}});
  EXPECT_EQ(not_unique.status, 422);
  EXPECT_EQ(error_code(not_unique), "not_unique");
  auto no_match = op("edit", {{"path", "/w/a/notes.txt"}, {"old", "absent"}, {"new", "x"}});
  EXPECT_EQ(error_code(no_match), "no_match");
  auto unique = op("edit", {{"path", "/w/a/notes.txt"}, {"old", "three"}, {"new", "3"}});
  EXPECT_EQ(unique.body["occurrences"], 1);
  auto all =
      op("edit",
         {{"path", "/w/a/notes.txt"}, {"old", "needle"}, {"new", "pin"}, {"replace_all", true}});
  EXPECT_EQ(all.body["occurrences"], 2);
  EXPECT_EQ(exec(id_, {{"argv", {"cat", "/w/a/notes.txt"}}})["stdout"],
            "one\ntwo pin\n3\nfour pin\n");

  auto glob = op("glob", {{"pattern", "*.py"}, {"path", "/w"}});
  ASSERT_EQ(glob.status, 200) << glob.raw;
  EXPECT_EQ(glob.body["paths"], json({"/w/a/b/code.py"}));  // ** does not enter dot-dirs
  auto grep = op("grep", {{"pattern", "needle"}, {"path", "/w"}, {"glob", "*.py"}});
  ASSERT_EQ(grep.status, 200) << grep.raw;
  bool found_code = false;
  for (const json& match : grep.body["matches"]) {
    if (match["path"] == "/w/a/b/code.py") {
      found_code = true;
      EXPECT_EQ(match["line"], 1);
      EXPECT_EQ(match["text"], "needle = 1");
    }
    EXPECT_TRUE(match["path"].get<std::string>().ends_with(".py"));
  }
  EXPECT_TRUE(found_code);
  auto capped = op("grep", {{"pattern", "needle"}, {"path", "/w"}, {"max_count", 1}});
  EXPECT_EQ(capped.body["matches"].size(), 1u);
  EXPECT_EQ(capped.body["truncated"], true);

  EXPECT_EQ(op("write", {{"path", "/w/other.txt"}, {"content", "x"}}).status, 200);
  auto clash = op("move", {{"from", "/w/other.txt"}, {"to", "/w/a/notes.txt"}});
  EXPECT_EQ(clash.status, 409);
  EXPECT_EQ(error_code(clash), "already_exists");
  EXPECT_EQ(op("move", {{"from", "/w/other.txt"}, {"to", "/w/moved/o.txt"}}).status, 200);
  EXPECT_EQ(exec(id_, {{"argv", {"cat", "/w/moved/o.txt"}}})["stdout"], "x");
  EXPECT_EQ(op("delete", {{"path", "/w"}}).status, 200);
  EXPECT_EQ(exec(id_, {{"command", "test -e /w"}})["exit_code"], 1);
  EXPECT_EQ(op("frobnicate", json::object()).status, 404);
}

TEST_F(FilesTest, UploadAndDownloadReportPerFileErrors) {
  std::string binary("\0\x01\xff hello", 9);
  auto up = op("upload", {{"files",
                           {{{"path", "/up/a.bin"}, {"content_base64", base64(binary)}},
                            {{"path", "relative.txt"}, {"content_base64", base64("x")}},
                            {{"path", "/up/a.bin/below"}, {"content_base64", base64("x")}},
                            {{"path", "/proc/self/new"}, {"content_base64", base64("x")}},
                            {{"path", "/up/b.txt"}, {"content_base64", base64("bee")}}}}});
  ASSERT_EQ(up.status, 200) << up.raw;
  const json& results = up.body["files"];
  ASSERT_EQ(results.size(), 5u);
  EXPECT_FALSE(results[0].contains("error")) << results[0];
  EXPECT_EQ(results[1]["error"], "invalid_path");
  EXPECT_TRUE(results[2].contains("error"));
  EXPECT_EQ(results[3]["error"], "permission_denied") << results[3];
  EXPECT_FALSE(results[4].contains("error"));
  EXPECT_EQ(results[4]["path"], "/up/b.txt");

  auto down = op("download", {{"paths", {"/up/a.bin", "/up/missing", "/up", "rel", "/up/b.txt"}}});
  ASSERT_EQ(down.status, 200) << down.raw;
  const json& got = down.body["files"];
  ASSERT_EQ(got.size(), 5u);
  EXPECT_EQ(got[0]["content_base64"], base64(binary));
  EXPECT_EQ(got[1]["error"], "file_not_found");
  EXPECT_EQ(got[2]["error"], "is_directory");
  EXPECT_EQ(got[3]["error"], "invalid_path");
  EXPECT_EQ(got[4]["content_base64"], base64("bee"));
  auto bad = op("upload", {{"files", {{{"path", "/x"}, {"content_base64", "!!!"}}}}});
  EXPECT_EQ(bad.status, 400);
}

TEST_F(FilesTest, PathsNeverEscapeTheSandbox) {
  TempDir host;
  std::string canary = host.path() + "/canary";
  std::ofstream(canary) << "host secret";
  ASSERT_EQ(
      exec(id_, {{"command", "ln -s /etc /etc-link && ln -s " + host.path() +
                                 " /host-link && ln -s ../../../../../.. /up-link"}})["exit_code"],
      0);
  std::string host_hostname = read_file_or_empty("/etc/hostname");
  for (const std::string& path : std::vector<std::string>{
           "/../../../../" + canary, canary, "/host-link/canary", "/up-link" + canary,
           "/proc/1/root" + canary, "/proc/self/root" + canary,
           "/proc/" + std::to_string(getpid()) + "/root" + canary}) {
    auto got = daemon_->client()->Get(files(path));
    ASSERT_TRUE(got);
    EXPECT_EQ(got->body.find("host secret"), std::string::npos) << path;
    EXPECT_NE(got->status, 200) << path;
  }
  // Writes through links land inside the sandbox (or fail), never on the host.
  for (const std::string& path :
       std::vector<std::string>{"/host-link/canary", "/up-link" + canary, canary}) {
    auto put = daemon_->put(files(path), "pwned");
    (void)put;
  }
  EXPECT_EQ(read_file_or_empty(canary), "host secret");
  size_t entries = 0;
  for (auto& e : std::filesystem::directory_iterator(host.path())) (void)e, ++entries;
  EXPECT_EQ(entries, 1u);
  auto via_etc = daemon_->client()->Get(files("/etc-link/hostname"));
  ASSERT_TRUE(via_etc);
  if (via_etc->status == 200) {
    EXPECT_EQ(via_etc->body, "hutch\n");
  }
}

TEST_F(FilesTest, SymlinkSwapLoopCannotRedirectRequests) {
  TempDir host;
  std::string canary = host.path() + "/canary";
  std::ofstream(canary) << "host secret";
  // Inside: /race/x flips between a real directory and a symlink to the host dir's path.
  auto loop = daemon_->post("/v1/sandboxes/" + id_ + "/exec",
                            {{"command",
                              "mkdir -p /race; while true; do rm -rf /race/x; mkdir /race/x; "
                              "echo inside > /race/x/canary; rm -rf /race/x; ln -s " +
                                  host.path() + " /race/x; done"},
                             {"background", true}});
  ASSERT_EQ(loop.status, 201) << loop.raw;
  int reads = 0, writes = 0, aborted = 0;
  auto until = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  auto client = daemon_->client();
  while (std::chrono::steady_clock::now() < until) {
    auto got = client->Get(files("/race/x/canary"));
    if (!got) {
      ++aborted;  // the file shrank while it was sent (`echo >` truncates): the reply is cut
      continue;
    }
    EXPECT_EQ(got->body.find("host secret"), std::string::npos);
    if (got->status == 200) ++reads;
    auto put = client->Put(files("/race/x/canary"), "pwned", "application/octet-stream");
    ASSERT_TRUE(put);
    if (put->status == 200) ++writes;
    auto listed = op("ls", {{"path", "/race/x"}});
    if (listed.status == 200) {
      for (const json& entry : listed.body["entries"])
        EXPECT_NE(entry["size"], 11) << "the host canary was listed: " << listed.raw;
    }
  }
  EXPECT_EQ(read_file_or_empty(canary), "host secret");
  size_t entries = 0;
  for (auto& e : std::filesystem::directory_iterator(host.path())) (void)e, ++entries;
  EXPECT_EQ(entries, 1u);
  std::fprintf(stderr, "swap race: %d reads and %d writes succeeded inside, %d reads cut\n", reads,
               writes, aborted);
}

// ---- large files, quota, ranges ----

char pattern_byte(uint64_t i) { return static_cast<char>((i ^ (i >> 8) ^ (i >> 17)) & 0xff); }

// Peak resident memory of a process so far (kB), from /proc/<pid>/status.
uint64_t vm_hwm_kib(pid_t pid) {
  std::string status = read_file_or_empty("/proc/" + std::to_string(pid) + "/status");
  size_t at = status.find("VmHWM:");
  return at == std::string::npos ? 0 : std::stoull(status.substr(at + 6));
}

// PUTs `size` pattern bytes, streamed (the test never holds the file either).
httplib::Result put_pattern(httplib::Client& client, const std::string& path, uint64_t size) {
  return client.Put(
      path, static_cast<size_t>(size),
      [](size_t offset, size_t length, httplib::DataSink& sink) {
        std::string chunk(std::min<size_t>(length, 1 << 20), '\0');
        for (size_t i = 0; i < chunk.size(); ++i) chunk[i] = pattern_byte(offset + i);
        return sink.write(chunk.data(), chunk.size());
      },
      "application/octet-stream");
}

TEST_F(FilesTest, HugePutAndGetStreamInConstantDaemonMemory) {
  constexpr uint64_t kSize = 160ull << 20;  // above the old 64 MiB cap, and above 100 MiB
  const uint64_t before = vm_hwm_kib(daemon_->pid());
  auto client = daemon_->client();
  auto put = put_pattern(*client, files("/data/huge.bin"), kSize);
  ASSERT_TRUE(put);
  ASSERT_EQ(put->status, 200) << put->body;
  EXPECT_EQ(json::parse(put->body)["size"], kSize);
  uint64_t received = 0, mismatches = 0;
  auto got = client->Get(files("/data/huge.bin"), [&](const char* data, size_t length) {
    for (size_t i = 0; i < length; ++i) mismatches += data[i] != pattern_byte(received + i);
    received += length;
    return true;
  });
  ASSERT_TRUE(got);
  EXPECT_EQ(got->status, 200);
  EXPECT_EQ(received, kSize);
  EXPECT_EQ(mismatches, 0u);
  const uint64_t after = vm_hwm_kib(daemon_->pid());
  std::fprintf(stderr, "hutchd VmHWM: %lu kB before, %lu kB after 160 MiB in and out\n",
               static_cast<unsigned long>(before), static_cast<unsigned long>(after));
  EXPECT_LT(after - before, 32u << 10) << "hutchd's peak memory grew with the file";
  auto inside = exec(id_, {{"command", "stat -c %s /data/huge.bin"}});
  EXPECT_EQ(inside["stdout"], std::to_string(kSize) + "\n");
}

TEST_F(FilesTest, QuotaFullIs507AndLeavesNothingPartial) {
  std::string small =
      create({{"limits", {{"disk_bytes", 16 << 20}}}});  // the writable layer is a 16 MiB tmpfs
  ASSERT_FALSE(small.empty());
  std::string url = "/v1/sandboxes/" + small + "/files?path=";
  auto client = daemon_->client();
  ASSERT_EQ(client->Put(url + "/data/old.bin", "old", "application/octet-stream")->status, 200);
  auto put = put_pattern(*client, url + "/data/big.bin", 40ull << 20);
  ASSERT_TRUE(put);
  EXPECT_EQ(put->status, 507) << put->body;
  json body = json::parse(put->body, nullptr, false);
  EXPECT_EQ(body["error"]["code"], "insufficient_storage") << put->body;
  EXPECT_NE(put->body.find("16777216"), std::string::npos) << "names the quota: " << put->body;
  // Replacing an existing file past the quota keeps the old one.
  auto over = put_pattern(*client, url + "/data/old.bin", 40ull << 20);
  ASSERT_TRUE(over);
  EXPECT_EQ(over->status, 507);
  auto seen = exec(small, {{"command",
                            "cat /data/old.bin; echo; ls -A /data /; test ! -e /.hutch-tmp && "
                            "test ! -e /data/big.bin && echo clean"}});
  EXPECT_EQ(seen["stdout"].get<std::string>().substr(0, 4), "old\n") << seen;
  EXPECT_NE(seen["stdout"].get<std::string>().find("clean"), std::string::npos) << seen;
  EXPECT_EQ(seen["stdout"].get<std::string>().find(".hutch-tmp"), std::string::npos) << seen;
  // The space came back: a file of most of the quota fits now.
  auto fits = put_pattern(*client, url + "/data/fits.bin", 12ull << 20);
  ASSERT_TRUE(fits);
  EXPECT_EQ(fits->status, 200) << fits->body;
}

TEST_F(FilesTest, RangeRequestsPageThroughAFile) {
  constexpr uint64_t kSize = 300000;
  auto client = daemon_->client();
  ASSERT_EQ(put_pattern(*client, files("/r/f.bin"), kSize)->status, 200);
  auto expected = [](uint64_t from, uint64_t to) {  // inclusive
    std::string out;
    for (uint64_t i = from; i <= to; ++i) out += pattern_byte(i);
    return out;
  };
  auto range = [&](const std::string& spec) {
    return client->Get(files("/r/f.bin"), {{"Range", "bytes=" + spec}});
  };
  auto first = range("0-99");
  ASSERT_TRUE(first);
  EXPECT_EQ(first->status, 206);
  EXPECT_EQ(first->get_header_value("Content-Range"), "bytes 0-99/300000");
  EXPECT_TRUE(first->body == expected(0, 99));
  auto multi_chunk = range("1000-250000");  // spans several of the daemon's read chunks
  ASSERT_TRUE(multi_chunk);
  EXPECT_EQ(multi_chunk->status, 206);
  EXPECT_EQ(multi_chunk->get_header_value("Content-Range"), "bytes 1000-250000/300000");
  EXPECT_TRUE(multi_chunk->body == expected(1000, 250000));
  auto suffix = range("-10");
  ASSERT_TRUE(suffix);
  EXPECT_EQ(suffix->status, 206);
  EXPECT_TRUE(suffix->body == expected(kSize - 10, kSize - 1));
  auto open_end = range("299990-");
  ASSERT_TRUE(open_end);
  EXPECT_EQ(open_end->status, 206);
  EXPECT_TRUE(open_end->body == expected(299990, kSize - 1));
  auto past_end = range("299995-400000");  // clamped to the file
  ASSERT_TRUE(past_end);
  EXPECT_EQ(past_end->status, 206);
  EXPECT_EQ(past_end->get_header_value("Content-Range"), "bytes 299995-299999/300000");
  EXPECT_TRUE(past_end->body == expected(299995, kSize - 1));
  for (const char* spec : {"300000-", "400000-500000"}) {
    auto beyond = range(spec);
    ASSERT_TRUE(beyond);
    EXPECT_EQ(beyond->status, 416) << spec;
    EXPECT_EQ(beyond->get_header_value("Content-Range"), "bytes */300000") << spec;
  }
  // A sparse 8 GiB file (larger than the sandbox's disk): a window anywhere is served at once.
  exec(id_, {{"command", "truncate -s 8G /r/sparse && printf end >> /r/sparse"}});
  auto hole = client->Get(files("/r/sparse"), {{"Range", "bytes=4294967296-4294967305"}});
  ASSERT_TRUE(hole);
  EXPECT_EQ(hole->status, 206);
  EXPECT_EQ(hole->body, std::string(10, '\0'));
  auto tail = client->Get(files("/r/sparse"), {{"Range", "bytes=-3"}});
  ASSERT_TRUE(tail);
  EXPECT_EQ(tail->status, 206);
  EXPECT_EQ(tail->body, "end");
  EXPECT_EQ(tail->get_header_value("Content-Range"), "bytes 8589934592-8589934594/8589934595");
}

// ---- nothing but regular files is ever replaced ----

TEST_F(FilesTest, WritesNeverReplaceDevicesFifosSocketsOrKernelFiles) {
  auto made =
      exec(id_, {{"command",
                  "mkdir -p /w && mkfifo /w/fifo && echo abc > /w/file && "
                  "python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind(\"/w/sock\")'"}});
  ASSERT_EQ(made["exit_code"], 0) << made;
  for (const char* target : {"/dev/null", "/dev/zero", "/w/fifo", "/w/sock"}) {
    SCOPED_TRACE(target);
    auto put = daemon_->put(files(target), "x");
    EXPECT_EQ(put.status, 409) << put.raw;
    EXPECT_EQ(error_code(put), "not_a_regular_file");
    auto wrote = op("write", {{"path", target}, {"content", "x"}});
    EXPECT_EQ(wrote.status, 409) << wrote.raw;
    EXPECT_EQ(error_code(wrote), "not_a_regular_file");
    auto edited = op("edit", {{"path", target}, {"old", "a"}, {"new", "b"}});
    EXPECT_EQ(edited.status, 409) << edited.raw;
    auto onto = op("move", {{"from", "/w/file"}, {"to", target}, {"overwrite", true}});
    EXPECT_EQ(onto.status, 409) << onto.raw;
    EXPECT_EQ(error_code(onto), "not_a_regular_file");
    auto away = op("move", {{"from", target}, {"to", "/w/moved"}});
    EXPECT_EQ(away.status, 409) << away.raw;
    auto uploaded = op("upload", {{"files", {{{"path", target}, {"content_base64", "eA=="}}}}});
    ASSERT_EQ(uploaded.status, 200) << uploaded.raw;
    EXPECT_EQ(uploaded.body["files"][0]["error"], "permission_denied") << uploaded.raw;
  }
  for (const char* kernel :
       {"/proc/self/status", "/proc/sys/kernel/hostname", "/sys/kernel/x", "/proc/new-file"}) {
    SCOPED_TRACE(kernel);
    EXPECT_EQ(daemon_->put(files(kernel), "x").status, 403);
    EXPECT_EQ(op("write", {{"path", kernel}, {"content", "x"}}).status, 403);
  }
  auto intact =
      exec(id_, {{"command",
                  "echo x > /dev/null && test -c /dev/null && test -c /dev/zero && "
                  "test -p /w/fifo && test -S /w/sock && test ! -e /w/moved && cat /w/file && "
                  "head -c 4 /dev/zero | od -An -tx1 && hostname"}});
  EXPECT_EQ(intact["exit_code"], 0) << intact;
  EXPECT_EQ(intact["stdout"], "abc\n 00 00 00 00\nhutch\n") << intact;
}

// ---- crash consistency ----

// Parameter: true = named temp files (HUTCH_FILES_NAMED_TEMP, the path of kernels whose
// overlayfs has no O_TMPFILE, e.g. 6.1), false = O_TMPFILE.
class UploadCrashTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    if (GetParam()) ::setenv("HUTCH_FILES_NAMED_TEMP", "1", 1);
  }
  void TearDown() override {
    ::unsetenv("HUTCH_FILES_NAMED_TEMP");
    if (daemon_) daemon_->delete_sandboxes_and_stop();
    if (HasFailure() && daemon_)
      std::fprintf(stderr, "--- hutchd log ---\n%s\n", daemon_->log().c_str());
  }
  // The daemon's fds on deleted files: where an O_TMPFILE upload lives.
  int unnamed_files_open() const {
    int count = 0;
    for (const std::string& fd : dir_entries("/proc/" + std::to_string(daemon_->pid()) + "/fd")) {
      char target[4096];
      std::string link = "/proc/" + std::to_string(daemon_->pid()) + "/fd/" + fd;
      ssize_t n = ::readlink(link.c_str(), target, sizeof target - 1);
      if (n > 0 && std::string_view(target, n).ends_with(" (deleted)")) ++count;
    }
    return count;
  }
  TempDir temp_;
  std::unique_ptr<Hutchd> daemon_;
};

INSTANTIATE_TEST_SUITE_P(Modes, UploadCrashTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Named" : "Unnamed"; });

TEST_P(UploadCrashTest, Kill9DuringUploadsLeavesNothingVisibleAfterRestart) {
  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  auto created = daemon_->post("/v1/sandboxes", json::object());
  ASSERT_EQ(created.status, 201) << created.raw;
  std::string id = created.body["id"];
  std::string root = "/proc/" + std::to_string(created.body["init_pid"].get<int>()) + "/root";
  ASSERT_EQ(
      daemon_->post("/v1/sandboxes/" + id + "/exec", {{"command", "echo v1 > /root/f"}}).status,
      200);
  // Two uploads (a new file and a replacement) that send 4 MiB and then hang.
  std::atomic<bool> release{false};
  std::vector<std::thread> uploads;
  for (const char* path : {"/root/new.bin", "/root/f"}) {
    uploads.emplace_back([&, path] {
      auto client = daemon_->client(5);
      client->Put(
          "/v1/sandboxes/" + id + "/files?path=" + path, size_t{64} << 20,
          [&](size_t offset, size_t length, httplib::DataSink& sink) {
            if (offset >= (4u << 20)) {
              while (!release) std::this_thread::sleep_for(std::chrono::milliseconds(10));
              return false;
            }
            std::string chunk(std::min<size_t>(length, 1 << 16), 'u');
            return sink.write(chunk.data(), chunk.size());
          },
          "application/octet-stream");
    });
  }
  // overlayfs has O_TMPFILE only from Linux 6.6: on 6.1 hutchd names its temp files either way.
  const int probe = ::open(root.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
  const bool named = GetParam() || probe < 0;
  if (probe >= 0) ::close(probe);
  auto in_flight = [&] {
    if (named) return dir_entries(root + "/.hutch-tmp").size() == 2;
    return unnamed_files_open() == 2;
  };
  for (int i = 0; i < 500 && !in_flight(); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const bool started = in_flight();
  daemon_->stop(SIGKILL);
  release = true;
  for (std::thread& upload : uploads) upload.join();
  ASSERT_TRUE(started) << "the uploads never started";
  if (named) {
    EXPECT_EQ(dir_entries(root + "/.hutch-tmp").size(), 2u);  // left by the crash
  }

  daemon_ = std::make_unique<Hutchd>(temp_.path());
  ASSERT_TRUE(daemon_->start()) << daemon_->log();
  auto seen = daemon_->post("/v1/sandboxes/" + id + "/exec",
                            {{"command", "cat /root/f; ls -A / /root | grep hutch; true"}});
  ASSERT_EQ(seen.status, 200) << seen.raw;
  EXPECT_EQ(seen.body["stdout"], "v1\n") << seen.raw;
  EXPECT_FALSE(std::filesystem::exists(root + "/root/new.bin"));
  EXPECT_FALSE(std::filesystem::exists(root + "/.hutch-tmp"));
}

}  // namespace
}  // namespace hutch::testing
