// Recipes, snapshots, forks, checkpoints and layer gc through hutchd (daemon/layer_routes.cc over
// daemon/service/recipes.cc): bakes run the real hutchd-bake, sandboxes mount the real erofs
// layers.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "runtime/base/passed_fds.h"
#include "tests/common/command.h"
#include "tests/common/wait.h"
#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

class LayersTest : public DaemonTest {
 protected:
  // A recipe directory holding `setup` as setup.sh.
  std::string recipe_dir(const std::string& name, const std::string& setup) {
    std::string dir = temp_.path() + "/" + name;
    std::filesystem::create_directories(dir);
    // The bake binds it from inside its user namespace: the temp dir (0700) must be traversable.
    std::filesystem::permissions(temp_.path(), std::filesystem::perms::others_exec,
                                 std::filesystem::perm_options::add);
    std::ofstream(dir + "/setup.sh") << setup;
    return dir;
  }
  Hutchd::Reply bake(const json& body) { return daemon_->post("/v1/recipes", body); }
  std::string sh(const std::string& id, const std::string& command) {
    json result = exec(id, {{"command", command}});
    EXPECT_EQ(result.value("exit_code", -1), 0) << result.dump();
    return result.value("stdout", "");
  }
  bool tag_exists(const std::string& name) {
    return std::filesystem::exists(daemon_->state_dir() + "/tags/" + name);
  }
  // Polls `condition` for up to 10 s.
  template <typename F>
  bool eventually(F condition) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (condition()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return condition();
  }
};

TEST_F(LayersTest, CreateFromRecipeBakedThroughTheApi) {
  std::string dir = recipe_dir("tools",
                               "test \"$BAKE_SECRET\" = s3cr3t-bake-value\n"
                               "mkdir -p /opt/tools && echo baked > /opt/tools/marker\n"
                               "rm /etc/debian_version\n"
                               "echo setup-done\n");
  ASSERT_TRUE(std::filesystem::exists("/etc/debian_version")) << "the test deletes it in a bake";
  auto baked = bake({{"dir", dir}, {"env", {{"BAKE_SECRET", "s3cr3t-bake-value"}}}});
  ASSERT_EQ(baked.status, 201) << baked.raw;
  EXPECT_EQ(baked.body["name"], "tools");
  EXPECT_FALSE(baked.body["cached"].get<bool>());
  EXPECT_NE(baked.body["log"].get<std::string>().find("setup-done"), std::string::npos);
  const std::string digest = baked.body["digest"];
  EXPECT_TRUE(digest.starts_with("sha256:")) << digest;
  auto again = bake({{"dir", dir}, {"env", {{"BAKE_SECRET", "s3cr3t-bake-value"}}}});
  ASSERT_EQ(again.status, 201) << again.raw;
  EXPECT_TRUE(again.body["cached"].get<bool>());
  EXPECT_EQ(again.body["digest"], digest);

  auto list = daemon_->get("/v1/recipes");
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(list.body["recipes"].size(), 1u) << list.raw;
  EXPECT_EQ(list.body["recipes"][0]["name"], "tools");
  EXPECT_EQ(list.body["recipes"][0]["digest"], digest);
  EXPECT_EQ(list.body["recipes"][0]["base"], "host");

  for (const json& body : {json{{"recipe", "tools"}}, json{{"rootfs", "recipe:tools"}}}) {
    auto created = daemon_->post("/v1/sandboxes", body);
    ASSERT_EQ(created.status, 201) << created.raw;
    EXPECT_EQ(created.body["recipe"], "tools");
    EXPECT_EQ(created.body["layers"], json::array({digest}));
    std::string id = created.body["id"];
    EXPECT_EQ(sh(id, "cat /opt/tools/marker; test ! -e /etc/debian_version && echo deleted"),
              "baked\ndeleted\n");
    // Bake-time env is not inherited.
    EXPECT_EQ(sh(id, "echo \"[$BAKE_SECRET]\""), "[]\n");
    EXPECT_EQ(daemon_->get("/v1/sandboxes/" + id).body["layers"], json::array({digest}));
  }
  EXPECT_EQ(daemon_->log().find("s3cr3t-bake-value"), std::string::npos);

  auto missing = daemon_->post("/v1/sandboxes", {{"recipe", "no-such-recipe"}});
  EXPECT_EQ(missing.status, 404) << missing.raw;
  EXPECT_EQ(error_code(missing), "recipe_not_found");
  EXPECT_EQ(daemon_->del("/v1/recipes/tools").status, 204);
  EXPECT_EQ(daemon_->del("/v1/recipes/tools").status, 204);
  EXPECT_EQ(daemon_->get("/v1/recipes").body["recipes"].size(), 0u);
}

TEST_F(LayersTest, FailingBakeAnswers422WithItsLog) {
  std::string dir = recipe_dir("broken", "echo about-to-fail\nexit 3\n");
  auto reply = bake({{"dir", dir}, {"name", "broken"}});
  ASSERT_EQ(reply.status, 422) << reply.raw;
  EXPECT_EQ(error_code(reply), "bake_failed");
  EXPECT_NE(reply.body["error"]["log"].get<std::string>().find("about-to-fail"), std::string::npos)
      << reply.raw;
  EXPECT_NE(reply.body["error"]["message"].get<std::string>().find("exit status 3"),
            std::string::npos)
      << reply.raw;
  EXPECT_EQ(daemon_->post("/v1/sandboxes", {{"recipe", "broken"}}).status, 404);
  EXPECT_EQ(bake({{"dir", "relative"}}).status, 400);
  EXPECT_EQ(bake({{"dir", dir}, {"name", "Bad"}}).status, 400);
}

TEST_F(LayersTest, SnapshotWhileAProcessWritesCapturesCompleteFiles) {
  std::string id = create();
  ASSERT_FALSE(id.empty());
  auto started = daemon_->post(
      "/v1/sandboxes/" + id + "/exec",
      {{"command",
        "while :; do seq 1 20000 > /root/data.tmp && mv /root/data.tmp /root/data; done"},
       {"background", true}});
  ASSERT_EQ(started.status, 201) << started.raw;
  ASSERT_TRUE(eventually([&] {
    return exec(id, {{"command", "test -e /root/data"}}).value("exit_code", -1) == 0;
  }));
  auto snapshot = daemon_->post("/v1/sandboxes/" + id + "/snapshot", {{"name", "busy"}});
  ASSERT_EQ(snapshot.status, 201) << snapshot.raw;
  EXPECT_EQ(snapshot.body["name"], "busy");
  EXPECT_GT(snapshot.body["files"].get<uint64_t>(), 0u);
  EXPECT_GT(snapshot.body["bytes"].get<uint64_t>(), 0u);
  // The freeze covers the copy only: more than nothing, less than the whole capture.
  EXPECT_GT(snapshot.body["frozen_ms"].get<double>(), 0.0);
  EXPECT_LT(snapshot.body["frozen_ms"].get<double>(), snapshot.body["duration_ms"].get<double>());
  std::string copy = create({{"recipe", "busy"}});
  ASSERT_FALSE(copy.empty());
  EXPECT_EQ(sh(copy, "wc -l < /root/data; tail -n 1 /root/data"), "20000\n20000\n");
  EXPECT_EQ(sh(id, "echo alive"), "alive\n");  // the source was thawed

  auto unknown = daemon_->post("/v1/sandboxes/sb-000000000000/snapshot", {{"name", "x"}});
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(error_code(unknown), "sandbox_not_found");
}

TEST_F(LayersTest, PausedSandboxStaysPausedAcrossASnapshot) {
  std::string id = create();
  sh(id, "echo paused-state > /root/p");
  ASSERT_EQ(daemon_->post("/v1/sandboxes/" + id + "/pause", json::object()).status, 200);
  auto snapshot = daemon_->post("/v1/sandboxes/" + id + "/snapshot", {{"name", "was-paused"}});
  ASSERT_EQ(snapshot.status, 201) << snapshot.raw;
  EXPECT_EQ(daemon_->get("/v1/sandboxes/" + id).body["state"], "paused");
  ASSERT_EQ(daemon_->post("/v1/sandboxes/" + id + "/resume", json::object()).status, 200);
  std::string copy = create({{"recipe", "was-paused"}});
  EXPECT_EQ(sh(copy, "cat /root/p"), "paused-state\n");
}

TEST_F(LayersTest, ForksAreIndependent) {
  std::string source = create({{"labels", {{"role", "source"}}}});
  sh(source, "echo original > /root/shared");
  auto forked = daemon_->post("/v1/sandboxes/" + source + "/fork",
                              {{"count", 3}, {"labels", {{"role", "fork"}}}});
  ASSERT_EQ(forked.status, 201) << forked.raw;
  ASSERT_EQ(forked.body["sandboxes"].size(), 3u);
  std::vector<std::string> forks;
  for (const json& sandbox : forked.body["sandboxes"]) {
    forks.push_back(sandbox["id"]);
    EXPECT_EQ(sandbox["labels"]["role"], "fork");
    EXPECT_EQ(sandbox["layers"][0], forked.body["snapshot"]["digest"]);
  }
  for (const std::string& id : forks) EXPECT_EQ(sh(id, "cat /root/shared"), "original\n");
  sh(forks[0], "echo changed-in-fork0 > /root/shared; echo new > /root/only0");
  sh(source, "echo changed-in-source > /root/shared");
  EXPECT_EQ(sh(forks[0], "cat /root/shared"), "changed-in-fork0\n");
  for (const std::string& id : {forks[1], forks[2]}) {
    EXPECT_EQ(sh(id, "cat /root/shared; test ! -e /root/only0 && echo absent"),
              "original\nabsent\n");
  }
  EXPECT_EQ(sh(source, "cat /root/shared; test ! -e /root/only0 && echo absent"),
            "changed-in-source\nabsent\n");

  EXPECT_EQ(daemon_->post("/v1/sandboxes/" + source + "/fork", {{"count", 0}}).status, 400);
  EXPECT_EQ(daemon_->post("/v1/sandboxes/" + source + "/fork", {{"count", 17}}).status, 400);
}

TEST_F(LayersTest, CheckpointModifyRollback) {
  std::string id = create();
  sh(id, "echo one > /root/state");
  auto checkpoint = daemon_->post("/v1/sandboxes/" + id + "/checkpoints", {{"name", "c1"}});
  ASSERT_EQ(checkpoint.status, 201) << checkpoint.raw;
  auto list = daemon_->get("/v1/sandboxes/" + id + "/checkpoints");
  ASSERT_EQ(list.status, 200);
  ASSERT_EQ(list.body["checkpoints"].size(), 1u) << list.raw;
  EXPECT_EQ(list.body["checkpoints"][0]["name"], "c1");
  EXPECT_EQ(list.body["checkpoints"][0]["digest"], checkpoint.body["digest"]);
  // Checkpoints are not recipes.
  EXPECT_EQ(daemon_->get("/v1/recipes").body["recipes"].size(), 0u);

  sh(id, "echo two > /root/state; echo later > /root/extra");
  auto sleeper = daemon_->post("/v1/sandboxes/" + id + "/exec",
                               {{"argv", {"sleep", "1000"}}, {"background", true}});
  ASSERT_EQ(sleeper.status, 201) << sleeper.raw;
  int pid = sleeper.body["pid"];
  auto rolled = daemon_->post("/v1/sandboxes/" + id + "/checkpoints/c1/rollback", json::object());
  ASSERT_EQ(rolled.status, 200) << rolled.raw;
  EXPECT_EQ(rolled.body["id"], id);
  EXPECT_EQ(rolled.body["layers"][0], checkpoint.body["digest"]);
  EXPECT_EQ(sh(id, "cat /root/state; test ! -e /root/extra && echo gone"), "one\ngone\n");
  auto process = daemon_->get("/v1/sandboxes/" + id + "/processes/" + std::to_string(pid));
  ASSERT_EQ(process.status, 200) << process.raw;
  EXPECT_EQ(process.body["state"], "exited");
  // The record follows: a sandbox.json naming the checkpoint's layer.
  std::ifstream record(daemon_->state_dir() + "/sandboxes/" + id + "/sandbox.json");
  json saved = json::parse(record);
  EXPECT_EQ(saved["config"]["layers"][0], checkpoint.body["digest"]);

  auto unknown =
      daemon_->post("/v1/sandboxes/" + id + "/checkpoints/nope/rollback", json::object());
  EXPECT_EQ(unknown.status, 404);
  EXPECT_EQ(error_code(unknown), "checkpoint_not_found");
  EXPECT_EQ(daemon_->post("/v1/sandboxes/" + id + "/checkpoints/A/rollback", json::object()).status,
            400);
  EXPECT_EQ(
      daemon_->post("/v1/sandboxes/sb-000000000000/checkpoints/c1/rollback", json::object()).status,
      404);

  const std::string tag = "cp-" + id + "-c1";
  EXPECT_TRUE(tag_exists(tag));
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + id).status, 204);
  EXPECT_TRUE(eventually([&] { return !tag_exists(tag); })) << "destroy keeps " << tag;
}

TEST_F(LayersTest, RollbackRefusesTooManyLayers) {
  std::string id = create();
  // The lower trees travel as fds in one message (kMaxPassedFds) and the host rootfs takes two:
  // kMaxPassedFds - 2 layers fit, one more not.
  const int last_fitting = kMaxPassedFds - 2;
  int refused_at = 0;
  for (int i = 1; i <= last_fitting + 2 && refused_at == 0; ++i) {
    std::string name = "c" + std::to_string(i);
    sh(id, "echo " + name + " > /root/round");
    ASSERT_EQ(daemon_->post("/v1/sandboxes/" + id + "/checkpoints", {{"name", name}}).status, 201);
    auto rolled =
        daemon_->post("/v1/sandboxes/" + id + "/checkpoints/" + name + "/rollback", json::object());
    if (rolled.status == 409) {
      EXPECT_EQ(error_code(rolled), "too_many_layers");
      refused_at = i;
    } else {
      ASSERT_EQ(rolled.status, 200) << rolled.raw;
      EXPECT_EQ(sh(id, "cat /root/round"), name + "\n");
    }
  }
  EXPECT_EQ(refused_at, last_fitting + 1);
  // Refused before anything was destroyed.
  EXPECT_EQ(sh(id, "cat /root/round"), "c" + std::to_string(last_fitting + 1) + "\n");
}

TEST_F(LayersTest, HostileNamesAreRefused) {
  std::string id = create();
  for (const std::string& name :
       std::vector<std::string>{"../x", "A", "", ".hidden", "a/b", std::string(65, 'a')}) {
    auto snapshot = daemon_->post("/v1/sandboxes/" + id + "/snapshot", {{"name", name}});
    EXPECT_EQ(snapshot.status, 400) << name << " " << snapshot.raw;
    auto checkpoint = daemon_->post("/v1/sandboxes/" + id + "/checkpoints", {{"name", name}});
    EXPECT_EQ(checkpoint.status, 400) << name << " " << checkpoint.raw;
    auto created = daemon_->post("/v1/sandboxes", {{"recipe", name}});
    EXPECT_EQ(created.status, 400) << name << " " << created.raw;
  }
  EXPECT_EQ(daemon_->post("/v1/sandboxes/" + id + "/snapshot", {{"name", "cp-sb-123"}}).status,
            400);
  EXPECT_EQ(daemon_->del("/v1/recipes/A").status, 400);
  EXPECT_FALSE(std::filesystem::exists(daemon_->state_dir() + "/x"));
}

TEST_F(LayersTest, GcKeepsLayersOfRunningSandboxes) {
  std::string junk_dir = recipe_dir("junk", "echo junk > /root/junk\n");
  auto junk = bake({{"dir", junk_dir}});
  ASSERT_EQ(junk.status, 201) << junk.raw;
  ASSERT_EQ(daemon_->del("/v1/recipes/junk").status, 204);

  std::string source = create();
  sh(source, "echo kept > /root/kept");
  auto forked = daemon_->post("/v1/sandboxes/" + source + "/fork", {{"count", 1}});
  ASSERT_EQ(forked.status, 201) << forked.raw;
  std::string fork = forked.body["sandboxes"][0]["id"];
  std::string fork_layer = forked.body["snapshot"]["digest"];
  // The source's destroy drops the fork tag: only the running fork keeps the layer.
  ASSERT_EQ(daemon_->del("/v1/sandboxes/" + source + "?wait=true").status, 204);
  EXPECT_FALSE(tag_exists(forked.body["snapshot"]["name"]));

  auto gc = daemon_->post("/v1/layers/gc", {{"grace_seconds", 0}});
  ASSERT_EQ(gc.status, 200) << gc.raw;
  std::vector<std::string> removed = gc.body["removed"];
  EXPECT_NE(std::find(removed.begin(), removed.end(), junk.body["digest"]), removed.end())
      << gc.raw;
  EXPECT_EQ(std::find(removed.begin(), removed.end(), fork_layer), removed.end()) << gc.raw;
  EXPECT_EQ(sh(fork, "cat /root/kept"), "kept\n");
  // Still there for the fork's own snapshot chain.
  auto snapshot = daemon_->post("/v1/sandboxes/" + fork + "/snapshot", {{"name", "after-gc"}});
  ASSERT_EQ(snapshot.status, 201) << snapshot.raw;
  std::string copy = create({{"recipe", "after-gc"}});
  EXPECT_EQ(sh(copy, "cat /root/kept"), "kept\n");
}

// True while some process runs `argv` exactly (the kernel's view: /proc/<pid>/cmdline).
bool process_running(const std::string& argv) {
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    if (read_file_or_empty(entry.path() / "cmdline") == argv) return true;
  }
  return false;
}

// A bake holds nothing a gc or another request waits for: while setup.sh sleeps, gc with no
// grace, listing, creating and destroying all answer at once; gc runs over and over meanwhile, and
// the bake's layer, made and tagged while they run, survives them and serves.
TEST_F(LayersTest, LongBakeBlocksNeitherGcNorOtherRequests) {
  // setup.sh's sleep as /proc/<pid>/cmdline shows it: "sleep", NUL, "7.25", NUL.
  const std::string sleeping("sleep\0007.25\0", 11);
  std::string dir = recipe_dir("slow",
                               "echo bake-started\n"
                               "sleep 7.25\n"
                               "echo slow > /root/slow-marker\n"
                               "echo bake-finished\n");
  auto baking = std::async(std::launch::async, [&] { return bake({{"dir", dir}}); });
  ASSERT_TRUE(wait_until([&] { return process_running(sleeping); }, std::chrono::seconds(30),
                         "setup.sh to sleep"));
  auto timed = [](auto request) {
    auto started = std::chrono::steady_clock::now();
    auto reply = request();
    return std::make_pair(reply, std::chrono::steady_clock::now() - started);
  };
  // Old hutchd: gc waited for the bake's lock, the whole 7 s.
  auto [gc, gc_took] = timed([&] {
    return daemon_->post("/v1/layers/gc", {{"grace_seconds", 0}});
  });
  EXPECT_EQ(gc.status, 200) << gc.raw;
  EXPECT_LT(gc_took, std::chrono::seconds(3));
  auto [list, list_took] = timed([&] { return daemon_->get("/v1/recipes"); });
  EXPECT_EQ(list.status, 200) << list.raw;
  EXPECT_LT(list_took, std::chrono::seconds(3));
  auto [created, create_took] =
      timed([&] { return daemon_->post("/v1/sandboxes", json::object()); });
  ASSERT_EQ(created.status, 201) << created.raw;
  EXPECT_LT(create_took, std::chrono::seconds(3));
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + created.body["id"].get<std::string>()).status, 204);
  EXPECT_TRUE(process_running(sleeping)) << "the bake ended early";

  // Until the bake answers, gc keeps running with no grace: the new layer's window between
  // being made and being tagged is covered.
  int gcs = 0;
  while (baking.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
    EXPECT_EQ(daemon_->post("/v1/layers/gc", {{"grace_seconds", 0}}).status, 200);
    ++gcs;
  }
  EXPECT_GT(gcs, 0);
  auto baked = baking.get();
  ASSERT_EQ(baked.status, 201) << baked.raw;
  EXPECT_NE(baked.body["log"].get<std::string>().find("bake-finished"), std::string::npos)
      << baked.raw;
  EXPECT_EQ(daemon_->post("/v1/layers/gc", {{"grace_seconds", 0}}).status, 200);
  std::string id = create({{"recipe", "slow"}});
  EXPECT_EQ(sh(id, "cat /root/slow-marker"), "slow\n");
}

}  // namespace
}  // namespace hutch::testing
