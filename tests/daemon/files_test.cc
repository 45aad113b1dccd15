// The files API through hutchd: raw GET/PUT/DELETE, the Deep Agents operations, batch
// upload/download with per-file errors, ownership, and path escapes (with a symlink swapped in a
// loop inside the sandbox while requests run).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
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

}  // namespace
}  // namespace hutch::testing
