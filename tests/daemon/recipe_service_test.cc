// The recipe service in-process (daemon/service/recipes.h, bake.h): resolution errors as kinds
// and codes, pins and making windows against gc (which never waits for them), bake parameter
// rules, and the bake runner and its typed wire against stand-in helpers. A real layer store in
// a temp dir and a real zygote (the registry needs one; no sandbox is made).
#include <fcntl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <thread>

#include "daemon/metrics.h"
#include "daemon/service/bake.h"
#include "daemon/service/recipes.h"
#include "daemon/service/sandbox_registry.h"
#include "daemon/zygote.h"
#include "runtime/layers/layer_store.h"
#include "tests/common/temp_dir.h"

namespace hutch::daemon::service {
namespace {

using hutch::testing::TempDir;

bool contains(const std::vector<std::string>& list, const std::string& item) {
  return std::find(list.begin(), list.end(), item) != list.end();
}

class RecipeServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto started = Zygote::start(HUTCHD_ZYGOTE_BINARY);
    ASSERT_TRUE(started) << started.error().message();
    zygote_ = new Zygote(std::move(*started));
  }

  void SetUp() override {
    ASSERT_FALSE(temp_.path().empty());
    state_dir_ = temp_.path() + "/state";
    std::filesystem::create_directories(state_dir_);
    registry_ = std::make_unique<SandboxRegistry>(state_dir_, "hutch", *zygote_, metrics_);
    service_ = std::make_unique<RecipeService>(*registry_, helper_path("never-run"));
    auto store = layers::LayerStore::open(state_dir_);
    ASSERT_TRUE(store) << store.error().message();
    store_.emplace(std::move(*store));
  }

  // A layer holding one file `name`, untagged.
  std::string make_layer(const std::string& name) {
    const std::string tree = temp_.path() + "/tree-" + name;
    std::filesystem::create_directories(tree);
    std::ofstream(tree + "/" + name) << name;
    UniqueFd fd(::open(tree.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    layers::LayerManifest manifest;
    manifest.built_by = "recipe_service_test";
    auto layer = store_->add_tree(fd.get(), manifest);
    EXPECT_TRUE(layer) << layer.error().message();
    return layer ? layer->digest : "";
  }

  // A stand-in for hutchd-bake: a shell script.
  std::string helper_path(const std::string& name, const std::string& script = "exit 99\n") {
    const std::string path = temp_.path() + "/" + name;
    std::ofstream(path) << "#!/bin/sh\n" << script;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path;
  }

  static Zygote* zygote_;
  TempDir temp_;
  std::string state_dir_;
  Metrics metrics_;
  std::unique_ptr<SandboxRegistry> registry_;
  std::unique_ptr<RecipeService> service_;
  std::optional<layers::LayerStore> store_;
};

Zygote* RecipeServiceTest::zygote_ = nullptr;

TEST_F(RecipeServiceTest, ResolutionErrorsHaveTheApiKindsAndCodes) {
  SandboxConfig unknown;
  unknown.recipe = "no-such-recipe";
  auto missing = service_->resolve(unknown);
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().kind, ErrorKind::kNotFound);
  EXPECT_EQ(missing.error().code, "recipe_not_found");

  SandboxConfig both;
  both.recipe = "tools";
  both.rootfs = "/srv/rootfs";
  auto conflicting = service_->resolve(both);
  ASSERT_FALSE(conflicting);
  EXPECT_EQ(conflicting.error().kind, ErrorKind::kInvalid);
  EXPECT_EQ(conflicting.error().code, "bad_request");

  SandboxConfig plain;
  ASSERT_TRUE(service_->resolve(plain));
  EXPECT_TRUE(plain.layer_digests.empty());
  EXPECT_EQ(plain.rootfs, "host");
}

TEST_F(RecipeServiceTest, ResolveFillsTheStackAndPinsItAgainstGc) {
  const std::string digest = make_layer("resolved");
  ASSERT_TRUE(store_->tag("tools", digest));
  SandboxConfig config;
  config.recipe = "tools";
  auto pin = service_->resolve(config);
  ASSERT_TRUE(pin) << pin.error().message;
  EXPECT_EQ(config.layer_digests, std::vector<std::string>{digest});
  ASSERT_EQ(config.layer_images.size(), 1u);
  EXPECT_EQ(config.layer_images[0], store_->image_path(digest));

  // Untagged, no grace: only the pin keeps it. gc answers while the pin is held.
  ASSERT_TRUE(store_->untag("tools"));
  auto kept = service_->gc(0);
  ASSERT_TRUE(kept) << kept.error().message;
  EXPECT_FALSE(contains(*kept, digest));
  EXPECT_TRUE(store_->get(digest));

  *pin = LayerPin();  // released
  auto removed = service_->gc(0);
  ASSERT_TRUE(removed) << removed.error().message;
  EXPECT_TRUE(contains(*removed, digest));
  EXPECT_FALSE(store_->get(digest));
}

TEST_F(RecipeServiceTest, MakingWindowSparesLayersMadeSinceItOpened) {
  const std::string before = make_layer("before");
  // The window spares 2 s more than it has been open (gc's clock against the store's, in whole
  // seconds): `before` must be older than that.
  std::this_thread::sleep_for(std::chrono::milliseconds(3200));
  LayerPin making = service_->pin({}, true);
  const std::string during = make_layer("during");
  auto first = service_->gc(0);
  ASSERT_TRUE(first) << first.error().message;
  EXPECT_TRUE(contains(*first, before)) << "older than the window";
  EXPECT_FALSE(contains(*first, during)) << "made inside the window, not yet tagged";

  making = LayerPin();
  auto second = service_->gc(0);
  ASSERT_TRUE(second) << second.error().message;
  EXPECT_TRUE(contains(*second, during));
}

TEST_F(RecipeServiceTest, PinsAreCountedPerHolder) {
  const std::string digest = make_layer("shared");
  LayerPin first = service_->pin({digest}, false);
  LayerPin second = service_->pin({digest}, false);
  LayerPin moved = std::move(first);
  first = LayerPin();  // the moved-from pin holds nothing: releasing it changes nothing
  second = LayerPin();
  auto kept = service_->gc(0);
  ASSERT_TRUE(kept);
  EXPECT_FALSE(contains(*kept, digest)) << "`moved` still holds it";
  moved = LayerPin();
  auto removed = service_->gc(0);
  ASSERT_TRUE(removed);
  EXPECT_TRUE(contains(*removed, digest));
}

TEST_F(RecipeServiceTest, BakeAndGcParametersAreCheckedBeforeAnythingRuns) {
  auto invalid = [&](const BakeParams& params) {
    auto report = service_->bake(params);
    return !report && report.error().kind == ErrorKind::kInvalid &&
           report.error().code == "bad_request";
  };
  const std::string dir = temp_.path();
  EXPECT_TRUE(invalid({.dir = "relative/dir", .name = "x"}));
  EXPECT_TRUE(invalid({.dir = dir + "/missing", .name = "x"}));
  EXPECT_TRUE(invalid({.dir = dir, .name = "fork-sb-0123456789ab-x"}));
  EXPECT_TRUE(invalid({.dir = dir, .name = "cp-sb-0123456789ab-x"}));
  EXPECT_TRUE(invalid({.dir = dir, .name = "x", .timeout_seconds = 0}));
  EXPECT_TRUE(invalid({.dir = dir, .name = "x", .timeout_seconds = 86401}));
  EXPECT_TRUE(invalid({.dir = dir, .name = "x", .env = {{"1BAD", "v"}}}));
  auto grace = service_->gc(30ull * 24 * 3600 + 1);
  ASSERT_FALSE(grace);
  EXPECT_EQ(grace.error().kind, ErrorKind::kInvalid);
}

TEST(BakeWire, RoundTripsEveryField) {
  BakeJob job{"/var/lib/hutch", "/srv/recipe",          "py",
              "recipe:base",    {"A=1", "B=two words"}, "host_owned"};
  auto decoded = decode_bake_job(encode_bake_job(job));
  ASSERT_TRUE(decoded) << decoded.error().message();
  EXPECT_EQ(decoded->state_dir, job.state_dir);
  EXPECT_EQ(decoded->recipe_dir, job.recipe_dir);
  EXPECT_EQ(decoded->name, job.name);
  EXPECT_EQ(decoded->base, job.base);
  EXPECT_EQ(decoded->env, job.env);
  EXPECT_EQ(decoded->net, job.net);
  job.net = "bridge";
  auto bad_net = decode_bake_job(encode_bake_job(job));
  ASSERT_FALSE(bad_net);
  EXPECT_NE(bad_net.error().message().find("net must be"), std::string::npos);
  BakeResult result{true, "sha256:ab", true, "no error"};
  auto back = decode_bake_result(encode_bake_result(result));
  ASSERT_TRUE(back) << back.error().message();
  EXPECT_EQ(back->ok, result.ok);
  EXPECT_EQ(back->digest, result.digest);
  EXPECT_EQ(back->cached, result.cached);
  EXPECT_EQ(back->error, result.error);

  EXPECT_FALSE(decode_bake_job("[]"));
  EXPECT_FALSE(decode_bake_job(R"({"state_dir": "/s", "recipe_dir": "/r", "name": "n",
                                   "base": "", "env": [1]})"));
  EXPECT_FALSE(decode_bake_result(R"({"ok": "yes", "digest": "", "cached": false, "error": ""})"));
  EXPECT_FALSE(decode_bake_result("{not json"));
}

TEST_F(RecipeServiceTest, RunnerSendsTheJobAndReadsTheTypedResultApartFromTheLog) {
  const std::string job_copy = temp_.path() + "/job.json";
  const std::string helper = helper_path(
      "answers", "cat <&3 > " + job_copy +
                     "\necho '{\"name\": \"not the result\"}'\n"
                     "printf '%s' '{\"ok\": true, \"digest\": \"sha256:12\", \"cached\": true, "
                     "\"error\": \"\"}' >&3\n");
  BakeJob job{state_dir_, "/srv/recipe", "py", "", {"TOKEN=s3cr3t"}};
  auto run = run_bake_helper(helper, job, std::chrono::seconds(30));
  ASSERT_TRUE(run) << run.error().message();
  EXPECT_EQ(run->status, 0);
  EXPECT_FALSE(run->timed_out);
  ASSERT_TRUE(run->result);
  EXPECT_TRUE(run->result->ok);
  EXPECT_EQ(run->result->digest, "sha256:12");
  EXPECT_TRUE(run->result->cached);
  EXPECT_EQ(run->log, "{\"name\": \"not the result\"}\n");
  std::ifstream in(job_copy);
  std::string sent((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto received = decode_bake_job(sent);
  ASSERT_TRUE(received) << sent;
  EXPECT_EQ(received->env, job.env);
}

TEST_F(RecipeServiceTest, RunnerCapsTheLogAndKillsAtTheDeadline) {
  auto chatty = run_bake_helper(helper_path("chatty", "head -c 3000000 /dev/zero | tr '\\0' x\n"),
                                BakeJob{}, std::chrono::seconds(30));
  ASSERT_TRUE(chatty) << chatty.error().message();
  EXPECT_EQ(chatty->log.size(), kMaxBakeLog);
  EXPECT_TRUE(chatty->truncated);

  auto started = std::chrono::steady_clock::now();
  auto slow =
      run_bake_helper(helper_path("slow", "exec sleep 60\n"), BakeJob{}, std::chrono::seconds(1));
  ASSERT_TRUE(slow) << slow.error().message();
  EXPECT_TRUE(slow->timed_out);
  EXPECT_FALSE(slow->result);
  EXPECT_EQ(slow->status, 128 + SIGKILL);
  EXPECT_LT(std::chrono::steady_clock::now() - started, std::chrono::seconds(20));
}

TEST_F(RecipeServiceTest, BakeReportsAHelperThatAnsweredNothing) {
  RecipeService service(*registry_, helper_path("dies", "echo dying >&2\nexit 7\n"));
  auto report = service.bake({.dir = temp_.path(), .name = "dies"});
  ASSERT_TRUE(report) << report.error().message;
  EXPECT_FALSE(report->ok);
  EXPECT_EQ(report->message, "hutchd-bake exited with status 7");
  EXPECT_EQ(report->log, "dying\n");

  RecipeService failing(*registry_, helper_path("fails",
                                                "printf '%s' '{\"ok\": false, \"digest\": \"\", "
                                                "\"cached\": false, \"error\": \"setup.sh: "
                                                "failed with exit status 3\"}' >&3\nexit 1\n"));
  auto failed = failing.bake({.dir = temp_.path(), .name = "fails"});
  ASSERT_TRUE(failed);
  EXPECT_FALSE(failed->ok);
  EXPECT_EQ(failed->message, "setup.sh: failed with exit status 3");
}

}  // namespace
}  // namespace hutch::daemon::service
