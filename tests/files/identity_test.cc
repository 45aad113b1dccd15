// The identity file operations act with: the sandbox root's host ids, set on the calling thread
// for each operation and taken back afterwards, so the sandbox's own permissions apply.
#include <gmock/gmock.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/files/fixture.h"

namespace hutch::files::testing {
namespace {

using ::testing::HasSubstr;

// A user of the sandbox other than its root: uid/gid 1000 inside.
constexpr Owner kOtherUser{kOwner.uid + 1000, kOwner.gid + 1000};

// The "Uid:"/"Gid:" line of the calling thread's status: real, effective, saved, filesystem.
std::string thread_ids(const std::string& field) {
  std::ifstream status("/proc/thread-self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.starts_with(field + ":")) return line.substr(field.size() + 1);
  }
  return "";
}

class IdentityTest : public FsTest {
 protected:
  void SetUp() override {
    FsTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    // /home/alice and its 0600 key belong to uid 1000 inside; the sandbox root has its own.
    put("/home/alice/key", "alice's secret\n");
    ASSERT_EQ(::chown(host("/home/alice").c_str(), kOtherUser.uid, kOtherUser.gid), 0);
    ASSERT_EQ(::chown(host("/home/alice/key").c_str(), kOtherUser.uid, kOtherUser.gid), 0);
    ASSERT_EQ(::chmod(host("/home/alice/key").c_str(), 0600), 0);
    put("/root/mine", "root's own\n");
    ASSERT_EQ(::chmod(host("/root/mine").c_str(), 0600), 0);
  }
  void expect_key_untouched() const {
    EXPECT_EQ(slurp_host(host("/home/alice/key")), "alice's secret\n");
    struct stat st = lstat_host(host("/home/alice/key"));
    EXPECT_EQ(st.st_uid, kOtherUser.uid);
    EXPECT_EQ(st.st_mode & 07777, 0600u);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(host("/home/alice")), {}), 1);
  }
};

TEST_F(IdentityTest, AnotherUsersPrivateFileIsPermissionDenied) {
  // Host root could read and replace it (CAP_DAC_OVERRIDE); the sandbox root's ids cannot.
  EXPECT_EQ(code(fs().read_file("/home/alice/key", 0)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().open_read("/home/alice/key")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().read_lines("/home/alice/key", 0, 10)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().write_file("/home/alice/key", "overwritten")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().begin_write("/home/alice/key", std::nullopt)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().edit("/home/alice/key", "secret", "x", false)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().write_file("/home/alice/new", "planted")), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().mkdir("/home/alice/dir", false)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().remove("/home/alice/key", false)), Errc::kPermissionDenied);
  EXPECT_EQ(code(fs().move("/home/alice/key", "/stolen", false)), Errc::kPermissionDenied);
  auto grep = fs().grep("secret", "/home/alice", std::nullopt, 0);
  ASSERT_TRUE(ok(grep));
  EXPECT_TRUE(grep->matches.empty());
  expect_key_untouched();
  EXPECT_FALSE(std::filesystem::exists(host("/stolen")));
}

TEST_F(IdentityTest, TheSandboxRootsOwnPrivateFilesWork) {
  auto read = fs().read_file("/root/mine", 0);
  ASSERT_TRUE(ok(read));
  EXPECT_EQ(*read, "root's own\n");
  auto fd = fs().open_read("/root/mine");
  ASSERT_TRUE(ok(fd));
  EXPECT_TRUE(ok(fs().edit("/root/mine", "own", "edited", false)));
  EXPECT_EQ(slurp_host(host("/root/mine")), "root's edited\n");
  EXPECT_EQ(lstat_host(host("/root/mine")).st_mode & 07777, 0600u);
  expect_owned(host("/root/mine"));
  // Stat and list need no permission on the file itself.
  auto entry = fs().stat("/home/alice/key");
  ASSERT_TRUE(ok(entry));
  EXPECT_EQ(entry->mode, 0600u);
}

TEST_F(IdentityTest, CreatedEntriesBelongToTheSandboxRootOnTheHost) {
  ASSERT_TRUE(ok(fs().write_file("/made/by/api.txt", "x")));
  ASSERT_TRUE(ok(fs().mkdir("/made/dir", false)));
  auto writer = fs().begin_write("/made/streamed.bin", 0640);
  ASSERT_TRUE(ok(writer));
  ASSERT_TRUE(ok(writer->write("abc", 3)));
  ASSERT_TRUE(ok(writer->commit()));
  for (const char* path :
       {"/made", "/made/by", "/made/by/api.txt", "/made/dir", "/made/streamed.bin"}) {
    expect_owned(host(path));
  }
}

TEST_F(IdentityTest, TheThreadGetsItsIdsBackAfterEveryOperation) {
  const std::string uids = thread_ids("Uid"), gids = thread_ids("Gid");
  ASSERT_THAT(uids, HasSubstr("0\t0\t0\t0"));
  ASSERT_TRUE(ok(fs().write_file("/a.txt", "a")));
  EXPECT_EQ(thread_ids("Uid"), uids);
  EXPECT_EQ(thread_ids("Gid"), gids);
  ASSERT_FALSE(ok(fs().read_file("/home/alice/key", 0)));
  EXPECT_EQ(thread_ids("Uid"), uids);
  EXPECT_EQ(thread_ids("Gid"), gids);
  {
    auto writer = fs().begin_write("/b.txt", std::nullopt);
    ASSERT_TRUE(ok(writer));
    // Between begin_write and commit the thread is the daemon's again.
    EXPECT_EQ(thread_ids("Uid"), uids);
    ASSERT_TRUE(ok(writer->commit()));
  }
  EXPECT_EQ(thread_ids("Uid"), uids);
  EXPECT_EQ(thread_ids("Gid"), gids);
}

TEST_F(IdentityTest, AnOperationWhoseSwitchFailsIsRefused) {
  // A child without CAP_SETUID/CAP_SETGID: setresuid to a non-zero uid clears its capabilities
  // (capabilities(7)), so setfsuid to the sandbox root's id silently changes nothing.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (::setresuid(4242, 4242, 4242) != 0) ::_exit(10);
    auto written = fs().write_file("/refused.txt", "x");
    if (written) ::_exit(11);
    if (written.error().code != Errc::kIo) ::_exit(12);
    if (written.error().message.find("did not take effect") == std::string::npos) ::_exit(13);
    if (code(fs().read_file("/root/mine", 0)) != Errc::kIo) ::_exit(14);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status)) << status;
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_FALSE(std::filesystem::exists(host("/refused.txt")));
}

}  // namespace
}  // namespace hutch::files::testing
