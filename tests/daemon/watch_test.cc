// GET /v1/sandboxes/{id}/watch through hutchd: events of files written by processes inside the
// sandbox, resuming from since=N, the end of the stream when the directory or the sandbox goes,
// and hostile queries.
#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

// Reads a watch stream's NDJSON lines until `done` says so, the stream ends, or 20 s pass.
class WatchStream {
 public:
  WatchStream(const Hutchd& daemon, std::string path, std::function<bool(const json&)> done)
      : result_(std::async(std::launch::async, [&daemon, path, done] {
          std::vector<json> lines;
          std::string pending;
          auto started = std::chrono::steady_clock::now();
          auto reply = daemon.client(20)->Get(path, [&](const char* data, size_t size) {
            pending.append(data, size);
            for (size_t end; (end = pending.find('\n')) != std::string::npos;) {
              lines.push_back(json::parse(pending.substr(0, end)));
              pending.erase(0, end + 1);
              if (done(lines.back())) return false;
            }
            return std::chrono::steady_clock::now() - started < std::chrono::seconds(20);
          });
          (void)reply;
          return lines;
        })) {}
  std::vector<json> lines() { return result_.get(); }

 private:
  std::future<std::vector<json>> result_;
};

class WatchTest : public DaemonTest {};

bool is_event(const json& line, const std::string& event, const std::string& path) {
  return line.value("event", "") == event && line.value("path", "") == path;
}

TEST_F(WatchTest, WatchSeesSandboxWritesAndResumes) {
  std::string id = create();
  exec(id, {{"command", "mkdir -p /w/sub"}});
  std::string base = "/v1/sandboxes/" + id + "/watch?path=/w&recursive=1";
  WatchStream first(*daemon_, base,
                    [](const json& line) { return is_event(line, "modify", "/w/sub/a.txt"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // the watch is in place
  exec(id, {{"command", "echo one > /w/sub/a.txt"}});
  auto lines = first.lines();
  ASSERT_FALSE(lines.empty());
  EXPECT_TRUE(is_event(lines.front(), "create", "/w/sub/a.txt")) << lines.front().dump();
  EXPECT_EQ(lines.front()["is_dir"], false);
  uint64_t seen = lines.back()["seq"].get<uint64_t>();
  // Written while no client watches: a client resuming from `seen` gets it, and nothing before.
  exec(id, {{"command", "mkdir /w/new && echo two > /w/new/b.txt"}});
  WatchStream resumed(*daemon_, base + "&since=" + std::to_string(seen),
                      [](const json& line) { return is_event(line, "modify", "/w/new/b.txt"); });
  auto later = resumed.lines();
  ASSERT_FALSE(later.empty());
  EXPECT_EQ(later.front()["seq"].get<uint64_t>(), seen + 1) << later.front().dump();
  EXPECT_TRUE(is_event(later.front(), "create", "/w/new")) << later.front().dump();
  EXPECT_EQ(later.front()["is_dir"], true);
  bool saw_b = false;
  for (const auto& line : later) saw_b = saw_b || is_event(line, "create", "/w/new/b.txt");
  EXPECT_TRUE(saw_b);
  // A resume point past the last event is another watcher's: a reset says so.
  WatchStream future(*daemon_, base + "&since=999999",
                     [](const json& line) { return line.value("event", "") == "reset"; });
  auto reset = future.lines();
  ASSERT_FALSE(reset.empty());
  EXPECT_EQ(reset.front()["event"], "reset");
}

TEST_F(WatchTest, WatchEndsWhenTheDirectoryOrTheSandboxGoes) {
  std::string id = create();
  exec(id, {{"command", "mkdir -p /w /v"}});
  auto ends = [](const json& line) { return line.contains("end"); };
  WatchStream dir(*daemon_, "/v1/sandboxes/" + id + "/watch?path=/w", ends);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  exec(id, {{"command", "rmdir /w"}});
  auto dir_lines = dir.lines();
  ASSERT_FALSE(dir_lines.empty());
  EXPECT_EQ(dir_lines.back().value("end", ""), "directory_gone") << dir_lines.back().dump();
  WatchStream sandbox(*daemon_, "/v1/sandboxes/" + id + "/watch?path=/v", ends);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + id).status, 204);
  auto sandbox_lines = sandbox.lines();
  ASSERT_FALSE(sandbox_lines.empty());
  EXPECT_EQ(sandbox_lines.back().value("end", ""), "sandbox_deleted");
}

TEST_F(WatchTest, WatchRefusesHostileQueries) {
  std::string id = create();
  exec(id, {{"command", "mkdir -p /w && touch /w/file && ln -s / /w/up"}});
  std::string base = "/v1/sandboxes/" + id + "/watch";
  struct Case {
    std::string query;
    int status;
    std::string code;
  };
  for (const Case& bad : std::vector<Case>{
           {"", 400, "bad_request"},
           {"?path=w", 400, "bad_request"},
           {"?path=/w&since=-1", 400, "bad_request"},
           {"?path=/w&since=abc", 400, "bad_request"},
           {"?path=/w&since=99999999999999999999", 400, "bad_request"},
           {"?path=/w&recursive=2", 400, "bad_request"},
           {"?path=/w/file", 409, "not_a_directory"},
           {"?path=/nope", 404, "file_not_found"},
           {"?path=/proc", 403, "permission_denied"},
           {"?path=/w/up/proc", 403, "permission_denied"},
       }) {
    auto reply = daemon_->get(base + bad.query);
    EXPECT_EQ(reply.status, bad.status) << bad.query << " -> " << reply.raw;
    EXPECT_EQ(error_code(reply), bad.code) << bad.query;
  }
  EXPECT_EQ(daemon_->get("/v1/sandboxes/nope/watch?path=/").status, 404);
  // At most 8 watched directories per sandbox.
  for (int i = 0; i < 8; ++i) exec(id, {{"command", "mkdir -p /d" + std::to_string(i)}});
  std::vector<std::unique_ptr<WatchStream>> open;
  for (int i = 0; i < 8; ++i)
    open.push_back(
        std::make_unique<WatchStream>(*daemon_, base + "?path=/d" + std::to_string(i),
                                      [](const json& line) { return line.contains("end"); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  auto full = daemon_->get(base + "?path=/w");
  EXPECT_EQ(full.status, 409) << full.raw;
  EXPECT_EQ(error_code(full), "too_many_watches");
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + id).status, 204);
  for (auto& stream : open) EXPECT_EQ(stream->lines().back().value("end", ""), "sandbox_deleted");
}

}  // namespace
}  // namespace hutch::testing
