// Host directories mounted into sandboxes (a create's "mounts", hutchd --mount-root): read-only
// skill mounts refuse writes from inside (EROFS) and are nosuid,nodev in the kernel's view; a
// source that escapes the allowed root through a symlink or ".." is refused, at create and again
// at a rollback; without a root nothing can be mounted.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>

#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

class MountsTest : public DaemonTest {
 protected:
  void SetUp() override {
    HUTCH_REQUIRE_ROOT();
    allowed_ = host_.path() + "/allowed";
    outside_ = host_.path() + "/outside";
    for (const std::string& dir : {allowed_, allowed_ + "/skill", allowed_ + "/shared", outside_})
      ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
    ASSERT_EQ(::chmod(host_.path().c_str(), 0755), 0);
    ASSERT_EQ(::chmod((allowed_ + "/shared").c_str(), 0777), 0);
    std::ofstream(allowed_ + "/skill/SKILL.md") << "use the force\n";
    std::ofstream(outside_ + "/secret") << "host secret\n";
    ASSERT_EQ(::symlink(outside_.c_str(), (allowed_ + "/link").c_str()), 0);
    ASSERT_EQ(::symlink("../outside", (allowed_ + "/rel-link").c_str()), 0);
    daemon_ = std::make_unique<Hutchd>(
        temp_.path(), std::vector<std::string>{"--destroy-on-exit", "--mount-root", allowed_});
    ASSERT_TRUE(daemon_->start()) << daemon_->log();
  }
  Hutchd::Reply create_with(const json& mounts) {
    return daemon_->post("/v1/sandboxes", {{"mounts", mounts}});
  }

  TempDir host_;
  std::string allowed_;
  std::string outside_;
};

TEST_F(MountsTest, ReadOnlySkillMountRefusesWritesFromInside) {
  auto created = create_with({{{"source", allowed_ + "/skill"}, {"target", "/skills/skill"}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  std::string id = created.body["id"];
  EXPECT_EQ(exec(id, {{"command", "cat /skills/skill/SKILL.md"}})["stdout"], "use the force\n");
  auto write = exec(id, {{"command", "echo x > /skills/skill/SKILL.md"}});
  EXPECT_NE(write["exit_code"], 0);
  EXPECT_NE(write["stderr"].get<std::string>().find("Read-only file system"), std::string::npos)
      << write.dump();
  auto touch = exec(id, {{"command", "touch /skills/skill/new"}});
  EXPECT_NE(touch["stderr"].get<std::string>().find("Read-only file system"), std::string::npos);
  // Not even the sandbox's root can make it writable again: the attributes are locked in its
  // user namespace.
  auto remount = exec(id, {{"command",
                            "mount -o remount,rw /skills/skill 2>&1; touch "
                            "/skills/skill/new 2>&1"}});
  EXPECT_NE(remount["stdout"].get<std::string>().find("Read-only file system"), std::string::npos)
      << remount.dump();
  // The kernel's view: ro, nosuid, nodev on the mount point.
  auto info = exec(id, {{"command", "grep ' /skills/skill ' /proc/self/mountinfo"}});
  std::string line = info["stdout"];
  EXPECT_NE(line.find(" ro,"), std::string::npos) << line;
  EXPECT_NE(line.find("nosuid"), std::string::npos) << line;
  EXPECT_NE(line.find("nodev"), std::string::npos) << line;
  struct stat st;
  EXPECT_NE(::stat((allowed_ + "/skill/new").c_str(), &st), 0);  // nothing reached the host
  // The record keeps the resolved mount.
  auto shown = daemon_->get("/v1/sandboxes/" + id);
  EXPECT_NE(shown.raw.find("/skills/skill"), std::string::npos) << shown.raw;
}

TEST_F(MountsTest, WritableMountWritesReachTheHost) {
  auto created =
      create_with({{{"source", allowed_ + "/shared"}, {"target", "/shared"}, {"readonly", false}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  std::string id = created.body["id"];
  EXPECT_EQ(exec(id, {{"command", "echo from-inside > /shared/out"}})["exit_code"], 0);
  std::ifstream out(allowed_ + "/shared/out");
  std::string text;
  std::getline(out, text);
  EXPECT_EQ(text, "from-inside");
}

TEST_F(MountsTest, EscapingSourcesAreRefused) {
  for (const std::string& source :
       {allowed_ + "/link", allowed_ + "/rel-link", allowed_ + "/skill/../../outside",
        allowed_ + "/../outside", outside_, std::string("/etc"), std::string("/"),
        allowed_ + "/missing", allowed_ + "/skill/SKILL.md", allowed_ + "/link/"}) {
    auto reply = create_with({{{"source", source}, {"target", "/m"}}});
    EXPECT_EQ(reply.status, 400) << source << " -> " << reply.raw;
    EXPECT_EQ(error_code(reply), "mount_source_refused") << source;
  }
  for (const json& mounts :
       {json({{{"source", "relative"}, {"target", "/m"}}}),
        json({{{"source", allowed_ + "/skill"}, {"target", "/"}}}),
        json({{{"source", allowed_ + "/skill"}, {"target", "m"}}}),
        json({{{"source", allowed_ + "/skill"}, {"target", "/a/../b"}}}),
        json({{{"source", allowed_ + "/skill"}}}),
        json({{{"source", allowed_ + "/skill"}, {"target", "/m"}, {"bogus", 1}}}),
        json({{{"source", allowed_ + "/skill"}, {"target", "/m"}, {"readonly", "yes"}}}),
        json("not an array"), json({1})}) {
    auto reply = create_with(mounts);
    EXPECT_EQ(reply.status, 400) << mounts.dump() << " -> " << reply.raw;
    EXPECT_EQ(error_code(reply), "bad_request") << mounts.dump();
  }
  json many = json::array();
  for (int i = 0; i < 17; ++i)
    many.push_back({{"source", allowed_ + "/skill"}, {"target", "/m" + std::to_string(i)}});
  EXPECT_EQ(error_code(create_with(many)), "too_many_mounts");
  auto list = daemon_->get("/v1/sandboxes");
  EXPECT_EQ(list.body["sandboxes"].size(), 0u) << list.raw;
}

// A rollback starts the sandbox again: the recorded source is resolved beneath the root anew and
// its tree is what gets bound, so a source swapped for a symlink out of the root in the meantime
// fails the rollback instead of binding the host directory (a bind by path would follow it).
TEST_F(MountsTest, ARollbackNeverBindsASourceSwappedForASymlinkOutOfTheRoot) {
  auto created = create_with({{{"source", allowed_ + "/skill"}, {"target", "/skills/skill"}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  std::string id = created.body["id"];
  auto checkpoint = daemon_->post("/v1/sandboxes/" + id + "/checkpoints", {{"name", "c1"}});
  ASSERT_EQ(checkpoint.status, 201) << checkpoint.raw;
  ASSERT_EQ(::rename((allowed_ + "/skill").c_str(), (allowed_ + "/moved").c_str()), 0);
  ASSERT_EQ(::symlink("../outside", (allowed_ + "/skill").c_str()), 0);
  auto rolled = daemon_->post("/v1/sandboxes/" + id + "/checkpoints/c1/rollback", json::object());
  EXPECT_NE(rolled.status, 200) << rolled.raw;
  EXPECT_NE(rolled.raw.find("RESOLVE_BENEATH"), std::string::npos) << rolled.raw;
  EXPECT_EQ(rolled.raw.find("host secret"), std::string::npos);
}

// A volume's mount and the mounts' trees travel in one message to the zygote (volumes first,
// then one tree per mount, in order): each lands at its own target.
TEST_F(MountsTest, MountsAndAVolumeTogetherEachLandWhereAsked) {
  ASSERT_EQ(daemon_->post("/v1/volumes", {{"name", "ws"}, {"size_bytes", 32 << 20}}).status, 201);
  auto created = daemon_->post(
      "/v1/sandboxes",
      {{"volumes", {{{"name", "ws"}, {"target", "/workspace"}}}},
       {"mounts",
        {{{"source", allowed_ + "/shared"}, {"target", "/shared"}, {"readonly", false}},
         {{"source", allowed_ + "/skill"}, {"target", "/skills/skill"}}}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  std::string id = created.body["id"];
  auto seen = exec(id, {{"command",
                         "cat /skills/skill/SKILL.md; echo v > /workspace/v && echo volume; "
                         "echo s > /shared/s && echo shared; grep -c ' /workspace ' "
                         "/proc/self/mountinfo"}});
  EXPECT_EQ(seen["stdout"], "use the force\nvolume\nshared\n1\n") << seen.dump();
  struct stat st;
  EXPECT_EQ(::stat((allowed_ + "/shared/s").c_str(), &st), 0);
  EXPECT_NE(::stat((allowed_ + "/shared/v").c_str(), &st), 0);
}

TEST_F(DaemonTest, MountsNeedAMountRoot) {
  auto reply =
      daemon_->post("/v1/sandboxes", {{"mounts", {{{"source", "/tmp"}, {"target", "/m"}}}}});
  EXPECT_EQ(reply.status, 400) << reply.raw;
  EXPECT_EQ(error_code(reply), "mount_source_refused");
}

}  // namespace
}  // namespace hutch::testing
