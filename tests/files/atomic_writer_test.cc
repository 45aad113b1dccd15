// AtomicWriter in both of its modes (an unnamed O_TMPFILE file, and the named fallback of
// filesystems without O_TMPFILE, forced with HUTCH_FILES_NAMED_TEMP), and the refusal of every
// write, edit and move that would replace or take away a device, FIFO or socket.
#include <gmock/gmock.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tests/files/fixture.h"

namespace hutch::files::testing {
namespace {

std::vector<std::string> temp_leftovers(const std::string& host_dir) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(host_dir)) {
    if (entry.path().filename().string().starts_with(".hutch-tmp")) out.push_back(entry.path());
  }
  return out;
}

// Parameter: true = named temp files (the fallback), false = O_TMPFILE.
class WriterTest : public FsTest, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override {
    FsTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    if (named()) {
      ASSERT_EQ(::setenv("HUTCH_FILES_NAMED_TEMP", "1", 1), 0);
    } else {
      ASSERT_EQ(::unsetenv("HUTCH_FILES_NAMED_TEMP"), 0);
    }
  }
  void TearDown() override { ::unsetenv("HUTCH_FILES_NAMED_TEMP"); }
  static bool named() { return GetParam(); }
  // While a writer is open: one named temp file, in the staging directory, never host root's;
  // or none at all.
  void expect_temps_while_writing() const {
    auto temps = temp_leftovers(root_);
    if (!named()) {
      EXPECT_THAT(temps, ::testing::IsEmpty());
      return;
    }
    ASSERT_EQ(temps.size(), 2u);  // the staging directory and the file in it
    EXPECT_EQ(temps[0], host("/.hutch-tmp"));
    EXPECT_TRUE(temps[1].starts_with(host("/.hutch-tmp/.hutch-tmp-"))) << temps[1];
    expect_owned(temps[0]);
    expect_owned(temps[1]);
  }
};

INSTANTIATE_TEST_SUITE_P(Modes, WriterTest, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "Named" : "Unnamed"; });

TEST_P(WriterTest, PublishesOnlyOnCommit) {
  auto writer = fs().begin_write("/dir/out.bin", std::nullopt);
  ASSERT_TRUE(ok(writer));
  ASSERT_TRUE(ok(writer->write("abc", 3)));
  ASSERT_TRUE(ok(writer->write("def", 3)));
  EXPECT_EQ(writer->bytes_written(), 6u);
  EXPECT_FALSE(std::filesystem::exists(host("/dir/out.bin")));
  expect_temps_while_writing();
  AtomicWriter moved = std::move(*writer);
  ASSERT_TRUE(ok(moved.commit()));
  EXPECT_EQ(slurp_host(host("/dir/out.bin")), "abcdef");
  expect_owned(host("/dir/out.bin"));
  EXPECT_EQ(lstat_host(host("/dir/out.bin")).st_mode & 07777, 0644u);
  EXPECT_THAT(temp_leftovers(root_), ::testing::IsEmpty());
  EXPECT_EQ(code(moved.commit()), Errc::kIo);  // twice
}

TEST_P(WriterTest, ReplacesAnExistingFileKeepingItsMode) {
  put("/keep", "original");
  ASSERT_EQ(::chmod(host("/keep").c_str(), 0600), 0);
  auto writer = fs().begin_write("/keep", std::nullopt);
  ASSERT_TRUE(ok(writer));
  ASSERT_TRUE(ok(writer->write("new", 3)));
  EXPECT_EQ(slurp_host(host("/keep")), "original");
  ASSERT_TRUE(ok(writer->commit()));
  EXPECT_EQ(slurp_host(host("/keep")), "new");
  EXPECT_EQ(lstat_host(host("/keep")).st_mode & 07777, 0600u);
  EXPECT_THAT(temp_leftovers(root_), ::testing::IsEmpty());
}

TEST_P(WriterTest, DestroyedUncommittedRemovesItsTemp) {
  put("/keep", "original");
  {
    auto writer = fs().begin_write("/keep", std::nullopt);
    ASSERT_TRUE(ok(writer));
    ASSERT_TRUE(ok(writer->write("partial", 7)));
    expect_temps_while_writing();
  }
  EXPECT_THAT(temp_leftovers(root_), ::testing::IsEmpty());
  EXPECT_EQ(slurp_host(host("/keep")), "original");
}

TEST_P(WriterTest, MoveAssignDiscardsTheOverwrittenTemp) {
  auto first = fs().begin_write("/one", std::nullopt);
  auto second = fs().begin_write("/two", std::nullopt);
  ASSERT_TRUE(ok(first));
  ASSERT_TRUE(ok(second));
  EXPECT_EQ(temp_leftovers(root_).size(), named() ? 3u : 0u);
  *first = std::move(*second);
  EXPECT_EQ(temp_leftovers(root_).size(), named() ? 2u : 0u);
  ASSERT_TRUE(ok(first->commit()));
  EXPECT_TRUE(std::filesystem::exists(host("/two")));
  EXPECT_FALSE(std::filesystem::exists(host("/one")));
  EXPECT_THAT(temp_leftovers(root_), ::testing::IsEmpty());
}

// What a crashed daemon leaves in named mode is in the staging directory, which adoption removes.
TEST_P(WriterTest, RemoveLeftoversEmptiesTheStagingDirectory) {
  EXPECT_TRUE(ok(fs().remove_leftovers()));  // none: fine
  auto writer = fs().begin_write("/w/big", std::nullopt);
  ASSERT_TRUE(ok(writer));
  put("/.hutch-tmp/.hutch-tmp-stale", "from a crashed hutchd");
  EXPECT_TRUE(ok(fs().remove_leftovers()));
  EXPECT_FALSE(std::filesystem::exists(host("/.hutch-tmp")));
  put("/w/user-file", "kept");
  EXPECT_TRUE(ok(fs().remove_leftovers()));
  EXPECT_EQ(slurp_host(host("/w/user-file")), "kept");
}

// A staging "directory" the sandbox replaced by a symlink is neither followed nor used.
TEST_P(WriterTest, ASymlinkedStagingDirectoryIsNotFollowed) {
  ASSERT_EQ(::symlink(outside_.c_str(), host("/.hutch-tmp").c_str()), 0);
  ASSERT_TRUE(ok(fs().write_file("/f", "x")));
  EXPECT_EQ(slurp_host(host("/f")), "x");
  expect_outside_untouched();
  EXPECT_TRUE(ok(fs().remove_leftovers()));
  EXPECT_FALSE(std::filesystem::exists(host("/.hutch-tmp")));
  expect_outside_untouched();
}

class SpecialTest : public FsTest {
 protected:
  void SetUp() override {
    FsTest::SetUp();
    if (HasFatalFailure() || IsSkipped()) return;
    ASSERT_EQ(::mkdir(host("/dev").c_str(), 0755), 0);
    ASSERT_EQ(::mknod(host("/dev/null").c_str(), S_IFCHR | 0666, makedev(1, 3)), 0);
    ASSERT_EQ(::mkfifo(host("/fifo").c_str(), 0644), 0);
    int sock = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ASSERT_GE(sock, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::string path = host("/sock");
    ASSERT_LT(path.size(), sizeof addr.sun_path);
    path.copy(addr.sun_path, path.size());
    ASSERT_EQ(::bind(sock, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
    ::close(sock);
  }
  void expect_intact() const {
    struct stat null = lstat_host(host("/dev/null"));
    EXPECT_TRUE(S_ISCHR(null.st_mode));
    EXPECT_EQ(null.st_rdev, makedev(1, 3));
    EXPECT_TRUE(S_ISFIFO(lstat_host(host("/fifo")).st_mode));
    EXPECT_TRUE(S_ISSOCK(lstat_host(host("/sock")).st_mode));
    EXPECT_THAT(temp_leftovers(root_), ::testing::IsEmpty());
  }
};

TEST_F(SpecialTest, WritesEditsAndMovesNeverReplaceADeviceFifoOrSocket) {
  put("/regular", "abc");
  for (const char* target : {"/dev/null", "/fifo", "/sock"}) {
    SCOPED_TRACE(target);
    EXPECT_EQ(code(fs().write_file(target, "x")), Errc::kNotRegularFile);
    EXPECT_EQ(code(fs().begin_write(target, 0644)), Errc::kNotRegularFile);
    EXPECT_EQ(code(fs().edit(target, "a", "b", true)), Errc::kNotRegularFile);
    EXPECT_EQ(code(fs().move("/regular", target, true)), Errc::kNotRegularFile);
    EXPECT_EQ(code(fs().move(target, "/elsewhere", false)), Errc::kNotRegularFile);
    EXPECT_EQ(code(fs().open_read(target)), Errc::kNotRegularFile);
  }
  EXPECT_EQ(slurp_host(host("/regular")), "abc");
  EXPECT_FALSE(std::filesystem::exists(host("/elsewhere")));
  expect_intact();
}

// The check is repeated at commit: a FIFO made at the name while the body streams stays.
TEST_F(SpecialTest, ADeviceCreatedDuringTheWriteIsNotReplaced) {
  auto writer = fs().begin_write("/late", std::nullopt);
  ASSERT_TRUE(ok(writer));
  ASSERT_TRUE(ok(writer->write("x", 1)));
  ASSERT_EQ(::mkfifo(host("/late").c_str(), 0644), 0);
  EXPECT_EQ(code(writer->commit()), Errc::kNotRegularFile);
  EXPECT_TRUE(S_ISFIFO(lstat_host(host("/late")).st_mode));
}

}  // namespace
}  // namespace hutch::files::testing
