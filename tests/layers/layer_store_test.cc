// The layer store on real trees: add/adopt/get/list, tags, crash leftovers, gc, remove, locks,
// and staging for overlayfs (tmpfs mounted by the test).
#include "runtime/layers/layer_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>

#include <atomic>
#include <thread>

#include "runtime/base/proc_stat.h"
#include "runtime/fs/erofs.h"
#include "runtime/fs/overlay_xattr.h"
#include "runtime/fs/tree_io.h"
#include "runtime/layers/tree_digest.h"
#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"
#include "tests/layers/tree_compare.h"

namespace hutch::layers {
namespace {

bool exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

class LayerStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    ASSERT_FALSE(temp_.path().empty());
    state_ = temp_.path() + "/state";
    auto store = LayerStore::open(state_);
    ASSERT_TRUE(store.has_value()) << store.error().message();
    store_.emplace(std::move(*store));
  }

  // A fresh source tree `name` holding one file with `content`.
  std::string make_tree(const std::string& name, std::string_view content) {
    const std::string dir = temp_.path() + "/" + name;
    EXPECT_EQ(mkdir(dir.c_str(), 0755), 0);
    UniqueFd fd(open((dir + "/file").c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644));
    EXPECT_EQ(write(fd.get(), content.data(), content.size()),
              static_cast<ssize_t>(content.size()));
    return dir;
  }

  LayerInfo add(const std::string& name, std::string_view content,
                std::vector<std::string> parents = {}, std::string cache_key = "") {
    UniqueFd src(open(make_tree(name, content).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    LayerManifest manifest;
    manifest.parents = std::move(parents);
    manifest.built_by = "test " + name;
    manifest.cache_key = std::move(cache_key);
    auto info = store_->add_tree(src.get(), manifest);
    EXPECT_TRUE(info.has_value()) << info.error().message();
    return info.value_or(LayerInfo{});
  }

  std::vector<std::string> listed() {
    std::vector<std::string> digests;
    auto layers = store_->list();
    EXPECT_TRUE(layers.has_value()) << layers.error().message();
    for (const LayerInfo& layer : layers.value_or(std::vector<LayerInfo>{})) {
      digests.push_back(layer.digest);
    }
    std::sort(digests.begin(), digests.end());
    return digests;
  }

  hutch::testing::TempDir temp_;
  std::string state_;
  std::optional<LayerStore> store_;
};

TEST_F(LayerStoreTest, AddGetListAndReuse) {
  const std::string src = temp_.path() + "/every";
  ASSERT_EQ(mkdir(src.c_str(), 0755), 0);
  ASSERT_EQ(hutch::testing::build_every_kind(src), "");
  UniqueFd src_fd(open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  LayerManifest manifest;
  manifest.built_by = "recipe web";
  manifest.cache_key = "k1";
  auto info = store_->add_tree(src_fd.get(), manifest);
  ASSERT_TRUE(info.has_value()) << info.error().message();

  EXPECT_EQ(info->tree_path, store_->tree_path(info->digest));
  EXPECT_EQ(info->tree_path, state_ + "/layers/" + info->digest.substr(7) + "/tree");
  auto tree_digest = digest_tree(src_fd.get());
  EXPECT_EQ(info->manifest.tree_digest, *tree_digest);
  EXPECT_EQ(info->digest, *layer_digest(*tree_digest, {}));
  EXPECT_EQ(info->manifest.built_by, "recipe web");
  EXPECT_EQ(info->manifest.size, 6u + 3 + 1 + 4 + 12 + 12 + (1u << 27) + 4096 + 4);
  EXPECT_GT(info->manifest.created, 1700000000);
  // Without atimes: making the layer's image reads its tree.
  auto diffs = hutch::testing::compare_trees(src, info->tree_path, false);
  EXPECT_TRUE(diffs.empty()) << diffs.size() << " differences, first: " << diffs.front();

  auto got = store_->get(info->digest);
  ASSERT_TRUE(got.has_value()) << got.error().message();
  EXPECT_EQ(got->manifest, info->manifest);
  EXPECT_EQ(listed(), std::vector<std::string>{info->digest});

  // The same content again is the same layer; no scratch directory is left.
  auto again = store_->add_tree(src_fd.get(), manifest);
  ASSERT_TRUE(again.has_value()) << again.error().message();
  EXPECT_EQ(again->digest, info->digest);
  EXPECT_EQ(listed(), std::vector<std::string>{info->digest});
  auto names = std::filesystem::directory_iterator(state_ + "/layers");
  EXPECT_EQ(std::distance(begin(names), end(names)), 1);

  auto missing = store_->get("sha256:" + std::string(64, '0'));
  ASSERT_FALSE(missing.has_value());
  EXPECT_EQ(missing.error().err, ENOENT);
  EXPECT_FALSE(store_->get("../../etc").has_value());
}

TEST_F(LayerStoreTest, SameTreeOnAnotherParentIsAnotherLayer) {
  LayerInfo base = add("base", "base");
  LayerInfo alone = add("alone", "top");
  LayerInfo stacked = add("stacked", "top", {base.digest});
  EXPECT_EQ(alone.manifest.tree_digest, stacked.manifest.tree_digest);
  EXPECT_NE(alone.digest, stacked.digest);
  EXPECT_EQ(stacked.manifest.parents, std::vector<std::string>{base.digest});
}

TEST_F(LayerStoreTest, AdoptRenamesTheDirectory) {
  const std::string upper = make_tree("upper", "baked");
  struct stat before;
  ASSERT_EQ(stat((upper + "/file").c_str(), &before), 0);
  auto info = store_->adopt_tree(upper, LayerManifest{});
  ASSERT_TRUE(info.has_value()) << info.error().message();
  EXPECT_FALSE(exists(upper));
  struct stat after;
  ASSERT_EQ(stat((info->tree_path + "/file").c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino) << "copied, not renamed";

  // Adopting the same content again reuses the layer and still consumes the directory.
  const std::string upper2 = make_tree("upper2", "baked");
  auto again = store_->adopt_tree(upper2, LayerManifest{});
  ASSERT_TRUE(again.has_value()) << again.error().message();
  EXPECT_EQ(again->digest, info->digest);
  EXPECT_FALSE(exists(upper2));
  EXPECT_EQ(listed().size(), 1u);
}

// A bake's upper moved into the store loses overlayfs's bookkeeping (origin, impure, a planted
// redirect) but keeps its opaque directories, in the tree and in the image sandboxes mount.
TEST_F(LayerStoreTest, AdoptKeepsOnlyTheOpaqueMarker) {
  const std::string upper = make_tree("upper", "baked");
  ASSERT_EQ(mkdir((upper + "/opaque").c_str(), 0755), 0);
  ASSERT_EQ(setxattr((upper + "/opaque").c_str(), kOverlayOpaqueXattr, "y", 1, 0), 0);
  ASSERT_EQ(setxattr((upper + "/opaque").c_str(), "trusted.overlay.impure", "y", 1, 0), 0);
  ASSERT_EQ(setxattr((upper + "/file").c_str(), "trusted.overlay.origin", "o", 1, 0), 0);
  ASSERT_EQ(setxattr((upper + "/file").c_str(), "user.overlay.redirect", "/x", 2, 0), 0);
  auto info = store_->adopt_tree(upper, LayerManifest{});
  ASSERT_TRUE(info.has_value()) << info.error().message();
  char value[8];
  EXPECT_EQ(getxattr((info->tree_path + "/opaque").c_str(), kOverlayOpaqueXattr, value, 8), 1);
  EXPECT_EQ(listxattr((info->tree_path + "/file").c_str(), nullptr, 0), 0);
  EXPECT_EQ(listxattr((info->tree_path + "/opaque").c_str(), nullptr, 0),
            static_cast<ssize_t>(std::string_view(kOverlayOpaqueXattr).size() + 1));
  UniqueFd tree(open(info->tree_path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  EXPECT_EQ(digest_tree(tree.get()).value_or(""), info->manifest.tree_digest);

  auto mounted = open_erofs_tree(store_->image_path(info->digest));
  ASSERT_TRUE(mounted.has_value()) << mounted.error().message();
  auto file = read_xattrs(mounted->get(), "file");
  ASSERT_TRUE(file.has_value()) << file.error().message();
  EXPECT_TRUE(file->empty());
  auto opaque = read_xattrs(mounted->get(), "opaque");
  ASSERT_TRUE(opaque.has_value()) << opaque.error().message();
  EXPECT_EQ(*opaque, (Xattrs{{kOverlayOpaqueXattr, "y"}}));
}

TEST_F(LayerStoreTest, Tags) {
  LayerInfo one = add("one", "1");
  LayerInfo two = add("two", "2");
  EXPECT_EQ(store_->resolve_tag("web").value(), std::nullopt);
  ASSERT_TRUE(store_->tag("web", one.digest).has_value());
  EXPECT_EQ(store_->resolve_tag("web").value(), one.digest);
  ASSERT_TRUE(store_->tag("web", two.digest).has_value());  // retarget
  ASSERT_TRUE(store_->tag("db", one.digest.substr(7)).has_value());
  EXPECT_EQ(store_->resolve_tag("web").value(), two.digest);
  using Tags = std::vector<std::pair<std::string, std::string>>;
  EXPECT_EQ(store_->tags().value(), (Tags{{"db", one.digest}, {"web", two.digest}}));

  EXPECT_FALSE(store_->tag("Bad/Name", one.digest).has_value());
  EXPECT_FALSE(store_->tag("ghost", "sha256:" + std::string(64, '0')).has_value());
  EXPECT_FALSE(store_->resolve_tag("../x").has_value());

  ASSERT_TRUE(store_->untag("web").has_value());
  EXPECT_EQ(store_->resolve_tag("web").value(), std::nullopt);
  auto again = store_->untag("web");
  ASSERT_FALSE(again.has_value());
  EXPECT_EQ(again.error().err, ENOENT);
  EXPECT_EQ(store_->tags().value(), (Tags{{"db", one.digest}}));
}

TEST_F(LayerStoreTest, FindByCacheKey) {
  LayerInfo one = add("one", "1", {}, "key-a");
  add("two", "2", {}, "key-b");
  EXPECT_EQ(store_->find_by_cache_key("key-a").value(), one.digest);
  EXPECT_EQ(store_->find_by_cache_key("key-c").value(), std::nullopt);
  EXPECT_EQ(store_->find_by_cache_key("").value(), std::nullopt);
}

TEST_F(LayerStoreTest, LeftoversOfDeadWritersAreIgnoredThenCollected) {
  LayerInfo kept = add("kept", "k");
  ASSERT_TRUE(store_->tag("kept", kept.digest).has_value());
  // A writer killed mid-copy: its pid is gone.
  pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  ASSERT_EQ(waitpid(dead, nullptr, 0), dead);
  const std::string leftover = state_ + "/layers/.incoming-" + std::to_string(dead) + "-1-beef";
  ASSERT_EQ(mkdir(leftover.c_str(), 0700), 0);
  ASSERT_EQ(mkdir((leftover + "/tree").c_str(), 0700), 0);
  // A writer that is alive (this process, with its real start time) must be left alone.
  auto self = read_proc_state(getpid());
  ASSERT_TRUE(self.has_value());
  const std::string live = state_ + "/layers/.incoming-" + std::to_string(getpid()) + "-" +
                           std::to_string(self->start_time) + "-cafe";
  ASSERT_EQ(mkdir(live.c_str(), 0700), 0);
  // Our pid with another start time: a reused pid, so the creator is dead.
  const std::string reused = state_ + "/layers/.incoming-" + std::to_string(getpid()) + "-" +
                             std::to_string(self->start_time + 1) + "-f00d";
  ASSERT_EQ(mkdir(reused.c_str(), 0700), 0);
  const std::string tag_temp = state_ + "/tags/.incoming-" + std::to_string(dead) + "-1-aa";
  UniqueFd(open(tag_temp.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0600));

  EXPECT_EQ(listed(), std::vector<std::string>{kept.digest});
  EXPECT_EQ(store_->tags().value().size(), 1u);
  auto removed = store_->gc({}, std::chrono::seconds(0));
  ASSERT_TRUE(removed.has_value()) << removed.error().message();
  EXPECT_TRUE(removed->empty());
  EXPECT_FALSE(exists(leftover));
  EXPECT_FALSE(exists(reused));
  EXPECT_FALSE(exists(tag_temp));
  EXPECT_TRUE(exists(live));
  EXPECT_TRUE(exists(kept.tree_path));
}

TEST_F(LayerStoreTest, GcKeepsTaggedParentsAndInUse) {
  LayerInfo base = add("base", "base");
  LayerInfo tagged = add("tagged", "tagged", {base.digest});
  LayerInfo in_use = add("in-use", "in use");
  LayerInfo garbage = add("garbage", "garbage");
  LayerInfo garbage_child = add("garbage-child", "child", {garbage.digest});
  ASSERT_TRUE(store_->tag("app", tagged.digest).has_value());

  // Within the grace period nothing untagged goes: add_tree -> tag must not race gc.
  auto early = store_->gc({in_use.digest});
  ASSERT_TRUE(early.has_value()) << early.error().message();
  EXPECT_TRUE(early->empty());

  auto removed = store_->gc({in_use.digest}, std::chrono::seconds(-1));
  ASSERT_TRUE(removed.has_value()) << removed.error().message();
  std::sort(removed->begin(), removed->end());
  std::vector<std::string> expected{garbage.digest, garbage_child.digest};
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(*removed, expected);
  std::vector<std::string> left{base.digest, tagged.digest, in_use.digest};
  std::sort(left.begin(), left.end());
  EXPECT_EQ(listed(), left);
  EXPECT_FALSE(exists(garbage.tree_path));

  // Untagged and not in use: everything goes.
  ASSERT_TRUE(store_->untag("app").has_value());
  removed = store_->gc({}, std::chrono::seconds(-1));
  ASSERT_TRUE(removed.has_value());
  EXPECT_EQ(removed->size(), 3u);
  EXPECT_TRUE(listed().empty());
}

TEST_F(LayerStoreTest, RemoveRefusesReferencedLayers) {
  LayerInfo base = add("base", "base");
  LayerInfo top = add("top", "top", {base.digest});
  ASSERT_TRUE(store_->tag("app", top.digest).has_value());

  auto tagged = store_->remove(top.digest);
  ASSERT_FALSE(tagged.has_value());
  EXPECT_NE(tagged.error().message().find("tagged as app"), std::string::npos);
  auto parent = store_->remove(base.digest);
  ASSERT_FALSE(parent.has_value());
  EXPECT_NE(parent.error().message().find("parent of " + top.digest), std::string::npos);

  ASSERT_TRUE(store_->untag("app").has_value());
  ASSERT_TRUE(store_->remove(top.digest).has_value());
  ASSERT_TRUE(store_->remove(base.digest).has_value());
  EXPECT_TRUE(listed().empty());
  EXPECT_EQ(store_->remove(base.digest).error().err, ENOENT);
}

TEST_F(LayerStoreTest, LockSerializesHolders) {
  auto first = store_->lock("recipe-web");
  ASSERT_TRUE(first.has_value()) << first.error().message();
  std::atomic<bool> released{false};
  std::atomic<bool> second_saw_released{false};
  std::atomic<bool> second_acquired{false};
  std::thread second([&] {
    auto lock = store_->lock("recipe-web");
    second_saw_released = released.load();
    second_acquired = lock.has_value();
  });
  // Give the second holder time to reach flock; correctness does not depend on this wait, only
  // the chance of catching a broken lock does.
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(second_acquired.load());
  released = true;
  first->reset();
  second.join();
  EXPECT_TRUE(second_acquired.load());
  EXPECT_TRUE(second_saw_released.load()) << "the second holder got the lock while it was held";
  EXPECT_TRUE(exists(state_ + "/locks/recipe-web.lock"));
  EXPECT_FALSE(store_->lock("../escape").has_value());
}

// Sandboxes mount a layer's erofs image, not its tree: the image must hold the same tree.
TEST_F(LayerStoreTest, EveryLayerHasAnImageOfItsTree) {
  const std::string src = temp_.path() + "/every";
  ASSERT_EQ(mkdir(src.c_str(), 0755), 0);
  ASSERT_EQ(hutch::testing::build_every_kind(src), "");
  UniqueFd src_fd(open(src.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  auto info = store_->add_tree(src_fd.get(), LayerManifest{});
  ASSERT_TRUE(info.has_value()) << info.error().message();
  const std::string image = store_->image_path(info->digest);
  ASSERT_TRUE(std::filesystem::is_regular_file(image)) << image;

  // A detached mount: nothing appears in the host's mount table, and its loop device autoclears.
  auto mounted = open_erofs_tree(image);
  ASSERT_TRUE(mounted.has_value()) << mounted.error().message();
  UniqueFd root(openat(mounted->get(), ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(root);
  auto digest = digest_tree(root.get());
  ASSERT_TRUE(digest.has_value()) << digest.error().message();
  EXPECT_EQ(*digest, info->manifest.tree_digest);
}

}  // namespace
}  // namespace hutch::layers
