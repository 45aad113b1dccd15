// Persistent volumes through a real hutchd (issue #13): files outlive the sandbox and are its
// root's inside (uid 0) and the mapped uid's outside; the size is a real quota (ENOSPC); one
// read-write attachment at a time (409 volume_busy), read-only ones refuse writes (EROFS); a
// volume in use cannot be deleted; snapshots and forks leave it out; a restart keeps volumes and
// attachments; nothing stays mounted or bound to a loop device; hostile names and sizes are
// refused.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/common/command.h"
#include "tests/common/wait.h"
#include "tests/daemon/daemon_fixture.h"

namespace hutch::testing {
namespace {

constexpr uint64_t kMiB = 1 << 20;
constexpr uid_t kSandboxRootOnHost = 1'000'000'000;  // the default id map's base (runtime/spec.h)

class VolumesTest : public DaemonTest {
 protected:
  Hutchd::Reply make_volume(const std::string& name, uint64_t size = 32 * kMiB) {
    return daemon_->post("/v1/volumes", {{"name", name}, {"size_bytes", size}});
  }
  Hutchd::Reply create_with(const json& volumes, json body = json::object()) {
    body["volumes"] = volumes;
    return daemon_->post("/v1/sandboxes", body);
  }
  std::string create_attached(const std::string& volume, bool read_only = false) {
    auto created =
        create_with({{{"name", volume}, {"target", "/workspace"}, {"readonly", read_only}}});
    EXPECT_EQ(created.status, 201) << created.raw;
    return created.status == 201 ? created.body["id"].get<std::string>() : "";
  }
  void delete_and_wait(const std::string& id) {
    EXPECT_EQ(daemon_->del("/v1/sandboxes/" + id + "?wait=true").status, 204);
  }
  std::string image(const std::string& name) const {
    return daemon_->state_dir() + "/volumes/" + name + "/volume.ext4";
  }
  // The loop devices bound to the volume's image right now.
  int bound_devices(const std::string& name) const {
    int count = 0;
    std::error_code ignored;
    for (const auto& entry : std::filesystem::directory_iterator("/sys/block", ignored)) {
      std::string backing = read_file_or_empty(entry.path().string() + "/loop/backing_file");
      while (!backing.empty() && backing.back() == '\n') backing.pop_back();
      if (backing == image(name) || backing == image(name) + " (deleted)") ++count;
    }
    return count;
  }
  bool hutchd_mounts_mention(const std::string& text) const {
    return read_file_or_empty("/proc/" + std::to_string(daemon_->pid()) + "/mountinfo")
               .find(text) != std::string::npos;
  }
};

TEST_F(VolumesTest, FilesOutliveTheSandboxOwnedByItsRoot) {
  ASSERT_EQ(make_volume("ws").status, 201);
  std::string a = create_attached("ws");
  ASSERT_FALSE(a.empty());
  json wrote = exec(a, {{"command",
                         "echo kept > /workspace/notes && stat -c %u:%g "
                         "/workspace/notes /workspace"}});
  ASSERT_EQ(wrote["exit_code"], 0) << wrote.dump();
  EXPECT_EQ(wrote["stdout"], "0:0\n0:0\n");
  // Outside, through init's root: the sandbox root's host uid, by the idmapped mount.
  auto shown = daemon_->get("/v1/sandboxes/" + a);
  const std::string file =
      "/proc/" + std::to_string(shown.body["init_pid"].get<int>()) + "/root/workspace/notes";
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0) << file;
  EXPECT_EQ(st.st_uid, kSandboxRootOnHost);
  EXPECT_EQ(st.st_gid, kSandboxRootOnHost);
  auto volume = daemon_->get("/v1/volumes/ws");
  ASSERT_EQ(volume.status, 200) << volume.raw;
  ASSERT_EQ(volume.body["attached"].size(), 1u) << volume.raw;
  EXPECT_EQ(volume.body["attached"][0]["sandbox"], a);
  EXPECT_EQ(volume.body["attached"][0]["target"], "/workspace");
  delete_and_wait(a);

  std::string b = create_attached("ws");
  ASSERT_FALSE(b.empty());
  EXPECT_EQ(exec(b, {{"command", "cat /workspace/notes"}})["stdout"], "kept\n");
  EXPECT_EQ(exec(b, {{"command", "echo more >> /workspace/notes"}})["exit_code"], 0);
  auto listed = daemon_->get("/v1/volumes");
  ASSERT_EQ(listed.body["volumes"].size(), 1u) << listed.raw;
  EXPECT_EQ(listed.body["volumes"][0]["name"], "ws");
  EXPECT_EQ(listed.body["volumes"][0]["size_bytes"], 32 * kMiB);
  EXPECT_GT(listed.body["volumes"][0]["used_bytes"].get<uint64_t>(), 0u);
}

TEST_F(VolumesTest, WritingPastTheSizeFailsWithEnospc) {
  ASSERT_EQ(make_volume("small", 16 * kMiB).status, 201);
  std::string id = create_attached("small");
  ASSERT_FALSE(id.empty());
  json full = exec(id, {{"command",
                         "dd if=/dev/zero of=/workspace/big bs=1M count=32 2>&1; "
                         "echo status=$?"}});
  std::string out = full["stdout"];
  EXPECT_NE(out.find("No space left on device"), std::string::npos) << out;
  EXPECT_EQ(out.find("status=0"), std::string::npos) << out;
  // The volume's limit is its own: /tmp (the sandbox's disk_bytes) still takes more than that.
  json tmp = exec(id, {{"command", "dd if=/dev/zero of=/tmp/big bs=1M count=32 2>&1"}});
  EXPECT_EQ(tmp["exit_code"], 0) << tmp.dump();
  auto volume = daemon_->get("/v1/volumes/small");
  const uint64_t used = volume.body["used_bytes"].get<uint64_t>();
  EXPECT_LE(used, 16 * kMiB) << volume.raw;
  EXPECT_GT(used, 8 * kMiB) << volume.raw;
  // Unmounted, the usage comes from the image's superblock, as statfs counted it, and looking
  // binds no loop device.
  delete_and_wait(id);
  ASSERT_TRUE(wait_until([&] { return bound_devices("small") == 0; }, std::chrono::seconds(10),
                         "the volume's loop device to be unbound"));
  auto after = daemon_->get("/v1/volumes/small");
  ASSERT_TRUE(after.body["used_bytes"].is_number()) << after.raw;
  const uint64_t used_after = after.body["used_bytes"].get<uint64_t>();
  EXPECT_LE(used_after, used + kMiB) << after.raw;
  EXPECT_GE(used_after + kMiB, used) << after.raw;
  EXPECT_EQ(bound_devices("small"), 0);
}

TEST_F(VolumesTest, OneWriterAtATimeReadersAnyNumber) {
  ASSERT_EQ(make_volume("ws").status, 201);
  std::string a = create_attached("ws");
  ASSERT_FALSE(a.empty());
  auto second = create_with({{{"name", "ws"}, {"target", "/w"}}});
  EXPECT_EQ(second.status, 409) << second.raw;
  EXPECT_EQ(error_code(second), "volume_busy");
  EXPECT_NE(second.raw.find(a), std::string::npos) << second.raw;  // names the holder
  // "shared" on one side only is not enough.
  auto shared = create_with({{{"name", "ws"}, {"target", "/w"}, {"shared", true}}});
  EXPECT_EQ(shared.status, 409) << shared.raw;

  std::string reader = create_attached("ws", true);
  std::string reader2 = create_attached("ws", true);
  ASSERT_FALSE(reader.empty());
  ASSERT_FALSE(reader2.empty());
  // One filesystem under all of them: the reader sees the writer's file at once.
  EXPECT_EQ(exec(a, {{"command", "echo live > /workspace/f"}})["exit_code"], 0);
  EXPECT_EQ(exec(reader, {{"command", "cat /workspace/f"}})["stdout"], "live\n");
  json refused = exec(reader, {{"command", "echo x > /workspace/g"}});
  EXPECT_NE(refused["exit_code"], 0);
  EXPECT_NE(refused["stderr"].get<std::string>().find("Read-only file system"), std::string::npos)
      << refused.dump();
  // Nor can the reader make it writable, and the kernel's view is ro, nosuid, nodev, idmapped.
  json remount = exec(reader, {{"command",
                                "mount -o remount,rw /workspace 2>&1; touch "
                                "/workspace/g 2>&1; grep ' /workspace ' "
                                "/proc/self/mountinfo"}});
  const std::string seen = remount["stdout"];
  EXPECT_NE(seen.find("Read-only file system"), std::string::npos) << seen;
  EXPECT_NE(seen.find(" ro,"), std::string::npos) << seen;
  EXPECT_NE(seen.find("nosuid"), std::string::npos) << seen;
  EXPECT_NE(seen.find("nodev"), std::string::npos) << seen;
  EXPECT_NE(seen.find("idmapped"), std::string::npos) << seen;
  // The writer deleted (without waiting for its teardown: its processes are dead once DELETE
  // answers), the next one may come at once.
  EXPECT_EQ(daemon_->del("/v1/sandboxes/" + a).status, 204);
  std::string b = create_attached("ws");
  EXPECT_FALSE(b.empty());
  EXPECT_EQ(exec(b, {{"command", "cat /workspace/f"}})["stdout"], "live\n");
}

TEST_F(VolumesTest, SharedWritersWhenBothAsk) {
  ASSERT_EQ(make_volume("ws").status, 201);
  auto a = create_with({{{"name", "ws"}, {"target", "/w"}, {"shared", true}}});
  ASSERT_EQ(a.status, 201) << a.raw;
  auto b = create_with({{{"name", "ws"}, {"target", "/w"}, {"shared", true}}});
  ASSERT_EQ(b.status, 201) << b.raw;
  EXPECT_EQ(exec(a.body["id"], {{"command", "echo a > /w/a"}})["exit_code"], 0);
  EXPECT_EQ(exec(b.body["id"], {{"command", "cat /w/a"}})["stdout"], "a\n");
}

TEST_F(VolumesTest, DeleteWhileAttachedIsRefused) {
  ASSERT_EQ(make_volume("ws").status, 201);
  std::string a = create_attached("ws");
  ASSERT_FALSE(a.empty());
  auto busy = daemon_->del("/v1/volumes/ws");
  EXPECT_EQ(busy.status, 409) << busy.raw;
  EXPECT_EQ(error_code(busy), "volume_busy");
  delete_and_wait(a);
  EXPECT_EQ(daemon_->del("/v1/volumes/ws").status, 204);
  EXPECT_EQ(error_code(daemon_->get("/v1/volumes/ws")), "volume_not_found");
  EXPECT_FALSE(std::filesystem::exists(daemon_->state_dir() + "/volumes/ws"));
  EXPECT_EQ(error_code(create_with({{{"name", "ws"}, {"target", "/w"}}})), "volume_not_found");
}

TEST_F(VolumesTest, SnapshotsAndForksLeaveTheVolumeOut) {
  ASSERT_EQ(make_volume("ws").status, 201);
  std::string a = create_attached("ws");
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(exec(a, {{"command",
                      "echo vol > /workspace/in-volume && echo own > /root/own"}})["exit_code"],
            0);
  auto snap = daemon_->post("/v1/sandboxes/" + a + "/snapshot", {{"name", "snap-ws"}});
  ASSERT_EQ(snap.status, 201) << snap.raw;
  EXPECT_EQ(snap.body["volumes_excluded"], json::array({"ws"})) << snap.raw;
  std::string from_snapshot = create({{"rootfs", "recipe:snap-ws"}});
  ASSERT_FALSE(from_snapshot.empty());
  json seen =
      exec(from_snapshot, {{"command",
                            "cat /root/own; ls -A /workspace; test -e /workspace/in-volume; "
                            "echo $?"}});
  EXPECT_EQ(seen["stdout"], "own\n1\n") << seen.dump();  // the mount point, empty

  auto forked = daemon_->post("/v1/sandboxes/" + a + "/fork", {{"count", 1}});
  ASSERT_EQ(forked.status, 201) << forked.raw;
  std::string fork = forked.body["sandboxes"][0]["id"];
  json in_fork = exec(fork, {{"command", "cat /root/own; test -e /workspace/in-volume; echo $?"}});
  EXPECT_EQ(in_fork["stdout"], "own\n1\n") << in_fork.dump();
  EXPECT_FALSE(forked.body["sandboxes"][0]["config"].contains("volumes"))
      << forked.body["sandboxes"][0].dump();
}

// A rollback restores the sandbox's own files and mounts the volume again as it is now: the
// volume is not part of the checkpoint, and the attachment stays the sandbox's.
TEST_F(VolumesTest, RollbackKeepsTheVolumeAsItIs) {
  ASSERT_EQ(make_volume("ws").status, 201);
  std::string id = create_attached("ws");
  ASSERT_FALSE(id.empty());
  ASSERT_EQ(
      exec(id, {{"command", "echo one > /root/state; echo one > /workspace/state"}})["exit_code"],
      0);
  auto checkpoint = daemon_->post("/v1/sandboxes/" + id + "/checkpoints", {{"name", "c1"}});
  ASSERT_EQ(checkpoint.status, 201) << checkpoint.raw;
  EXPECT_EQ(checkpoint.body["volumes_excluded"], json::array({"ws"}));
  ASSERT_EQ(
      exec(id, {{"command", "echo two > /root/state; echo two > /workspace/state"}})["exit_code"],
      0);
  auto rolled = daemon_->post("/v1/sandboxes/" + id + "/checkpoints/c1/rollback", json::object());
  ASSERT_EQ(rolled.status, 200) << rolled.raw;
  EXPECT_EQ(exec(id, {{"command", "cat /root/state /workspace/state"}})["stdout"], "one\ntwo\n");
  auto volume = daemon_->get("/v1/volumes/ws");
  ASSERT_EQ(volume.body["attached"].size(), 1u) << volume.raw;
  EXPECT_EQ(volume.body["attached"][0]["sandbox"], id);
  EXPECT_EQ(bound_devices("ws"), 1);  // the old sandbox's mount went with it
  EXPECT_EQ(error_code(create_with({{{"name", "ws"}, {"target", "/w"}}})), "volume_busy");
}

TEST_F(VolumesTest, NothingStaysMountedOrBound) {
  ASSERT_EQ(make_volume("ws").status, 201);
  std::string a = create_attached("ws");
  ASSERT_FALSE(a.empty());
  EXPECT_EQ(bound_devices("ws"), 1);
  // hutchd never attaches the volume in its own namespace: it hands a detached mount on.
  EXPECT_FALSE(hutchd_mounts_mention("volume.ext4"));
  EXPECT_FALSE(hutchd_mounts_mention("/workspace"));
  delete_and_wait(a);
  EXPECT_TRUE(wait_until([&] { return bound_devices("ws") == 0; }, std::chrono::seconds(10),
                         "the volume's loop device to be unbound"));

  // A create that fails after the volume was mounted (the target is a file in the rootfs):
  // nothing left behind, and the attachment is released.
  auto failed = create_with({{{"name", "ws"}, {"target", "/etc/hostname"}}});
  EXPECT_GE(failed.status, 400) << failed.raw;
  EXPECT_TRUE(wait_until([&] { return bound_devices("ws") == 0; }, std::chrono::seconds(10),
                         "the failed create's loop device to be unbound"));
  EXPECT_FALSE(hutchd_mounts_mention("volume.ext4"));
  auto volume = daemon_->get("/v1/volumes/ws");
  EXPECT_TRUE(volume.body["attached"].empty()) << volume.raw;
  EXPECT_FALSE(create_attached("ws").empty());
}

TEST_F(VolumesTest, HostileNamesAndSizesAreRefused) {
  for (const std::string& name :
       {std::string(".."), std::string("."), std::string("a/b"), std::string("/abs"),
        std::string(64, 'a'), std::string("a\0b", 3), std::string(""), std::string("-lead"),
        std::string("sp ace"), std::string("é")}) {
    auto reply = make_volume(name);
    EXPECT_EQ(reply.status, 400) << json(name).dump() << " " << reply.raw;
    EXPECT_EQ(error_code(reply), "bad_volume") << reply.raw;
  }
  for (const json& size :
       {json(0), json(-1), json(-16 * static_cast<int64_t>(kMiB)), json(uint64_t{1} << 62),
        json(16.5 * kMiB), json("16777216"), json(16 * kMiB + 1), json(4096), json(nullptr)}) {
    auto reply = daemon_->post("/v1/volumes", {{"name", "sized"}, {"size_bytes", size}});
    EXPECT_EQ(reply.status, 400) << size.dump() << " " << reply.raw;
    EXPECT_EQ(error_code(reply), "bad_volume") << reply.raw;
  }
  EXPECT_EQ(error_code(daemon_->get("/v1/volumes/a%00b")), "bad_volume");
  EXPECT_EQ(error_code(daemon_->get("/v1/volumes/..")), "bad_volume");
  EXPECT_EQ(error_code(daemon_->del("/v1/volumes/..")), "bad_volume");
  // Nothing was made, not even a leftover.
  std::error_code ignored;
  for (const auto& entry :
       std::filesystem::directory_iterator(daemon_->state_dir() + "/volumes", ignored))
    ADD_FAILURE() << entry.path();
  ASSERT_EQ(make_volume("ok-1.x_y").status, 201);
  EXPECT_EQ(error_code(make_volume("ok-1.x_y")), "volume_exists");
  // A create's volumes: the same rules, and targets must be paths below /.
  for (const json& entry :
       {json{{"name", ".."}, {"target", "/w"}}, json{{"name", "ok-1.x_y"}, {"target", "/"}},
        json{{"name", "ok-1.x_y"}, {"target", "relative"}},
        json{{"name", "ok-1.x_y"}, {"target", "/a/../b"}}}) {
    auto reply = create_with(json::array({entry}));
    EXPECT_EQ(reply.status, 400) << entry.dump() << " " << reply.raw;
    EXPECT_EQ(error_code(reply), "bad_volume") << reply.raw;
  }
}

// A restart: the volumes are listed again, the adopted sandbox keeps its attachment (a second
// writer is still refused) and its files.
TEST(VolumesRestartTest, RestartKeepsVolumesAndAttachments) {
  HUTCH_REQUIRE_ROOT();
  TempDir temp;
  auto daemon = std::make_unique<Hutchd>(temp.path());
  ASSERT_TRUE(daemon->start()) << daemon->log();
  ASSERT_EQ(daemon->post("/v1/volumes", {{"name", "ws"}, {"size_bytes", 32 * kMiB}}).status, 201);
  auto created =
      daemon->post("/v1/sandboxes", {{"volumes", {{{"name", "ws"}, {"target", "/workspace"}}}}});
  ASSERT_EQ(created.status, 201) << created.raw;
  std::string id = created.body["id"];
  auto wrote =
      daemon->post("/v1/sandboxes/" + id + "/exec", {{"command", "echo kept > /workspace/f"}});
  ASSERT_EQ(wrote.body["exit_code"], 0) << wrote.raw;

  daemon->stop(SIGTERM);
  daemon = std::make_unique<Hutchd>(temp.path(), std::vector<std::string>{"--destroy-on-exit"});
  ASSERT_TRUE(daemon->start()) << daemon->log();
  auto volume = daemon->get("/v1/volumes/ws");
  ASSERT_EQ(volume.status, 200) << volume.raw;
  ASSERT_EQ(volume.body["attached"].size(), 1u) << volume.raw;
  EXPECT_EQ(volume.body["attached"][0]["sandbox"], id);
  auto second = daemon->post("/v1/sandboxes", {{"volumes", {{{"name", "ws"}, {"target", "/w"}}}}});
  EXPECT_EQ(second.status, 409) << second.raw;
  auto read = daemon->post("/v1/sandboxes/" + id + "/exec", {{"command", "cat /workspace/f"}});
  EXPECT_EQ(read.body["stdout"], "kept\n") << read.raw;
  // A reader after the restart shares the adopted sandbox's filesystem (its loop device found
  // again by the image, not remembered).
  auto reader = daemon->post(
      "/v1/sandboxes", {{"volumes", {{{"name", "ws"}, {"target", "/w"}, {"readonly", true}}}}});
  ASSERT_EQ(reader.status, 201) << reader.raw;
  auto seen = daemon->post("/v1/sandboxes/" + reader.body["id"].get<std::string>() + "/exec",
                           {{"command", "cat /w/f"}});
  EXPECT_EQ(seen.body["stdout"], "kept\n") << seen.raw;
  EXPECT_EQ(daemon->stop(SIGTERM), 0) << daemon->log();
  if (::testing::Test::HasFailure()) std::fprintf(stderr, "%s\n", daemon->log().c_str());
}

}  // namespace
}  // namespace hutch::testing
