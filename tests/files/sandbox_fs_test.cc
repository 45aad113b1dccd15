// Every operation's happy path and its documented errors, checked against the host's view.
#include <gmock/gmock.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "tests/files/fixture.h"

namespace hutch::files::testing {
namespace {

using ::testing::HasSubstr;

std::vector<std::string> temp_leftovers(const std::string& host_dir) {
  std::vector<std::string> out;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(host_dir)) {
    if (entry.path().filename().string().starts_with(".hutch-tmp-")) out.push_back(entry.path());
  }
  return out;
}

TEST(ErrcName, StableNames) {
  EXPECT_EQ(errc_name(Errc::kNotFound), "file_not_found");
  EXPECT_EQ(errc_name(Errc::kPermissionDenied), "permission_denied");
  EXPECT_EQ(errc_name(Errc::kIsDirectory), "is_directory");
  EXPECT_EQ(errc_name(Errc::kInvalidPath), "invalid_path");
  EXPECT_EQ(errc_name(Errc::kNotDirectory), "not_a_directory");
  EXPECT_EQ(errc_name(Errc::kAlreadyExists), "already_exists");
  EXPECT_EQ(errc_name(Errc::kNotEmpty), "not_empty");
  EXPECT_EQ(errc_name(Errc::kNoMatch), "no_match");
  EXPECT_EQ(errc_name(Errc::kNotUnique), "not_unique");
  EXPECT_EQ(errc_name(Errc::kTooLarge), "too_large");
  EXPECT_EQ(errc_name(Errc::kIo), "io_error");
}

TEST_F(FsTest, WriteCreatesFileAndParentsOwnedBySandboxRoot) {
  auto written = fs().write_file("/a/b/c.txt", "hello");
  ASSERT_TRUE(ok(written));
  EXPECT_EQ(*written, 5u);
  EXPECT_EQ(slurp_host(host("/a/b/c.txt")), "hello");
  expect_owned(host("/a/b/c.txt"));
  expect_owned(host("/a/b"));
  expect_owned(host("/a"));
  EXPECT_EQ(lstat_host(host("/a/b/c.txt")).st_mode & 07777, 0644u);
  EXPECT_EQ(lstat_host(host("/a")).st_mode & 07777, 0755u);
  EXPECT_EQ(lstat_host(host("/a/b")).st_mode & 07777, 0755u);
  EXPECT_TRUE(temp_leftovers(root_).empty());
}

TEST_F(FsTest, WriteOverwritesKeepingModeUnlessGiven) {
  put("/f", "old content");
  ASSERT_EQ(::chmod(host("/f").c_str(), 0600), 0);
  ASSERT_TRUE(ok(fs().write_file("/f", "new")));
  EXPECT_EQ(slurp_host(host("/f")), "new");
  EXPECT_EQ(lstat_host(host("/f")).st_mode & 07777, 0600u);
  expect_owned(host("/f"));
  ASSERT_TRUE(ok(fs().write_file("/f", "newer", 0750)));
  EXPECT_EQ(lstat_host(host("/f")).st_mode & 07777, 0750u);
  EXPECT_EQ(slurp_host(host("/f")), "newer");
}

TEST_F(FsTest, WriteNeverMintsSetIdFiles) {
  ASSERT_TRUE(ok(fs().write_file("/suid", "x", 06755)));
  EXPECT_EQ(lstat_host(host("/suid")).st_mode & 07777, 0755u);
}

TEST_F(FsTest, WriteOntoDirectoryOrRootIsRefused) {
  ASSERT_EQ(::mkdir(host("/dir").c_str(), 0755), 0);
  EXPECT_EQ(code(fs().write_file("/dir", "x")), Errc::kIsDirectory);
  EXPECT_EQ(code(fs().write_file("/", "x")), Errc::kInvalidPath);
  EXPECT_EQ(code(fs().write_file("/dir/", "x")), Errc::kIsDirectory);  // normalized to /dir
}

TEST_F(FsTest, WriteUnderAFileIsNotADirectory) {
  put("/file", "x");
  EXPECT_EQ(code(fs().write_file("/file/child", "y")), Errc::kNotDirectory);
}

TEST_F(FsTest, WriteReplacesAFinalSymlinkNotItsTarget) {
  put("/target.txt", "target");
  ASSERT_EQ(::symlink("target.txt", host("/link").c_str()), 0);
  ASSERT_TRUE(ok(fs().write_file("/link", "replaced")));
  EXPECT_TRUE(S_ISREG(lstat_host(host("/link")).st_mode));
  EXPECT_EQ(slurp_host(host("/link")), "replaced");
  EXPECT_EQ(slurp_host(host("/target.txt")), "target");
}

TEST_F(FsTest, AtomicWriterEnforcesMaxBytes) {
  auto writer = fs().begin_write("/capped", std::nullopt, 4);
  ASSERT_TRUE(ok(writer));
  ASSERT_TRUE(ok(writer->write("abcd", 4)));
  EXPECT_EQ(code(writer->write("e", 1)), Errc::kTooLarge);
}

TEST_F(FsTest, ReadFileReturnsContentWithinCap) {
  put("/etc/hosts", "127.0.0.1 localhost\n");
  auto content = fs().read_file("/etc/hosts", 0);
  ASSERT_TRUE(ok(content));
  EXPECT_EQ(*content, "127.0.0.1 localhost\n");
  EXPECT_EQ(code(fs().read_file("/etc/hosts", 5)), Errc::kTooLarge);
  EXPECT_EQ(code(fs().read_file("/etc", 0)), Errc::kIsDirectory);
  auto missing = fs().read_file("/etc/missing", 0);
  EXPECT_EQ(code(missing), Errc::kNotFound);
  EXPECT_THAT(missing.error().message, HasSubstr("openat2(/etc/missing)"));
  EXPECT_THAT(missing.error().message, HasSubstr("No such file or directory"));
}

TEST_F(FsTest, ReadFollowsSymlinksInsideTheRoot) {
  put("/usr/lib/os-release", "ID=hutch\n");
  ASSERT_EQ(::mkdir(host("/etc").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("../usr/lib/os-release", host("/etc/os-release").c_str()), 0);
  auto content = fs().read_file("/etc/os-release", 0);
  ASSERT_TRUE(ok(content));
  EXPECT_EQ(*content, "ID=hutch\n");
}

TEST_F(FsTest, OpenReadRefusesFifoWithoutBlocking) {
  put("/f", "data");
  auto fd = fs().open_read("/f");
  ASSERT_TRUE(ok(fd));
  char buf[8] = {};
  EXPECT_EQ(::read(fd->get(), buf, sizeof buf), 4);
  ASSERT_EQ(::mkfifo(host("/fifo").c_str(), 0644), 0);
  EXPECT_EQ(code(fs().open_read("/fifo")), Errc::kNotRegularFile);
  EXPECT_EQ(code(fs().read_file("/fifo", 0)), Errc::kNotRegularFile);
}

TEST_F(FsTest, StatDoesNotFollowAFinalSymlink) {
  put("/dir/file", "12345");
  ASSERT_EQ(::symlink("/dir/file", host("/dir/link").c_str()), 0);
  auto file = fs().stat("/dir/file");
  ASSERT_TRUE(ok(file));
  EXPECT_EQ(file->path, "/dir/file");
  EXPECT_EQ(file->type, "file");
  EXPECT_FALSE(file->is_dir);
  EXPECT_EQ(file->size, 5u);
  EXPECT_GT(file->modified_ns, 0);
  EXPECT_FALSE(file->link_target);
  auto link = fs().stat("/dir/link");
  ASSERT_TRUE(ok(link));
  EXPECT_EQ(link->type, "symlink");
  EXPECT_EQ(link->link_target, "/dir/file");
  auto dir = fs().stat("/dir");
  ASSERT_TRUE(ok(dir));
  EXPECT_TRUE(dir->is_dir);
  EXPECT_EQ(dir->type, "directory");
  auto root = fs().stat("/");
  ASSERT_TRUE(ok(root));
  EXPECT_EQ(root->path, "/");
  EXPECT_TRUE(root->is_dir);
  EXPECT_EQ(code(fs().stat("/nope")), Errc::kNotFound);
}

TEST_F(FsTest, ListIsSortedWithMetadata) {
  put("/d/b.txt", "bb");
  put("/d/a.txt", "a");
  ASSERT_EQ(::mkdir(host("/d/c").c_str(), 0700), 0);
  ASSERT_EQ(::symlink("a.txt", host("/d/l").c_str()), 0);
  auto entries = fs().list("/d");
  ASSERT_TRUE(ok(entries));
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].path, "/d/a.txt");
  EXPECT_EQ((*entries)[0].size, 1u);
  EXPECT_EQ((*entries)[1].path, "/d/b.txt");
  EXPECT_EQ((*entries)[1].size, 2u);
  EXPECT_FALSE((*entries)[1].is_dir);
  EXPECT_EQ((*entries)[2].path, "/d/c");
  EXPECT_TRUE((*entries)[2].is_dir);
  EXPECT_EQ((*entries)[2].mode, 0700u);
  EXPECT_EQ((*entries)[3].type, "symlink");
  EXPECT_EQ((*entries)[3].link_target, "a.txt");
  for (const auto& e : *entries) EXPECT_GT(e.modified_ns, 0) << e.path;
  auto root = fs().list("/");
  ASSERT_TRUE(ok(root));
  ASSERT_EQ(root->size(), 1u);
  EXPECT_EQ((*root)[0].path, "/d");
  EXPECT_EQ(code(fs().list("/d/a.txt")), Errc::kNotDirectory);
  EXPECT_EQ(code(fs().list("/missing")), Errc::kNotFound);
}

TEST_F(FsTest, MkdirCreatesOwnedDirectories) {
  ASSERT_TRUE(ok(fs().mkdir("/x", false, 0750)));
  expect_owned(host("/x"));
  EXPECT_EQ(lstat_host(host("/x")).st_mode & 07777, 0750u);
  EXPECT_EQ(code(fs().mkdir("/x", false)), Errc::kAlreadyExists);
  EXPECT_TRUE(ok(fs().mkdir("/x", true)));
  EXPECT_EQ(code(fs().mkdir("/y/z", false)), Errc::kNotFound);
  ASSERT_TRUE(ok(fs().mkdir("/y/z/w", true)));
  expect_owned(host("/y"));
  expect_owned(host("/y/z"));
  expect_owned(host("/y/z/w"));
  put("/file", "x");
  EXPECT_EQ(code(fs().mkdir("/file", true)), Errc::kNotDirectory);
  EXPECT_EQ(code(fs().mkdir("/file", false)), Errc::kAlreadyExists);
  EXPECT_TRUE(ok(fs().mkdir("/", true)));
}

TEST_F(FsTest, MoveRenamesAndRespectsOverwrite) {
  put("/a", "A");
  put("/b", "B");
  EXPECT_EQ(code(fs().move("/a", "/b", false)), Errc::kAlreadyExists);
  EXPECT_EQ(slurp_host(host("/b")), "B");
  ASSERT_TRUE(ok(fs().move("/a", "/b", true)));
  EXPECT_EQ(slurp_host(host("/b")), "A");
  EXPECT_FALSE(std::filesystem::exists(host("/a")));
  ASSERT_TRUE(ok(fs().move("/b", "/new/parents/c", false)));
  EXPECT_EQ(slurp_host(host("/new/parents/c")), "A");
  expect_owned(host("/new"));
  expect_owned(host("/new/parents"));
  EXPECT_EQ(code(fs().move("/missing", "/z", false)), Errc::kNotFound);
  EXPECT_EQ(code(fs().move("/new", "/new/inside", false)), Errc::kInvalidPath);
  EXPECT_EQ(code(fs().move("/", "/z", false)), Errc::kInvalidPath);
  EXPECT_EQ(code(fs().move("/new", "/", true)), Errc::kInvalidPath);
}

TEST_F(FsTest, RemoveFilesAndTrees) {
  put("/f", "x");
  ASSERT_TRUE(ok(fs().remove("/f", false)));
  EXPECT_FALSE(std::filesystem::exists(host("/f")));
  EXPECT_EQ(code(fs().remove("/f", false)), Errc::kNotFound);

  put("/t/a/b/c.txt", "c");
  put("/t/.hidden/d", "d");
  ASSERT_EQ(::mkdir(host("/empty").c_str(), 0755), 0);
  ASSERT_TRUE(ok(fs().remove("/empty", false)));
  EXPECT_EQ(code(fs().remove("/t", false)), Errc::kNotEmpty);
  ASSERT_TRUE(ok(fs().remove("/t", true)));
  EXPECT_FALSE(std::filesystem::exists(host("/t")));
  EXPECT_EQ(code(fs().remove("/", true)), Errc::kPermissionDenied);
}

TEST_F(FsTest, RemoveNeverFollowsSymlinks) {
  put("/keep/inner.txt", "keep me");
  put("/tree/file", "x");
  ASSERT_EQ(::symlink("/keep", host("/tree/abs").c_str()), 0);
  ASSERT_EQ(::symlink("../keep", host("/tree/rel").c_str()), 0);
  ASSERT_EQ(::symlink(outside_.c_str(), host("/tree/host").c_str()), 0);
  ASSERT_EQ(::symlink("/keep", host("/linkdir").c_str()), 0);
  ASSERT_TRUE(ok(fs().remove("/linkdir", true)));  // the link, not /keep's content
  ASSERT_TRUE(ok(fs().remove("/tree", true)));
  EXPECT_FALSE(std::filesystem::exists(host("/tree")));
  EXPECT_EQ(slurp_host(host("/keep/inner.txt")), "keep me");
  expect_outside_untouched();
}

TEST_F(FsTest, ReadLinesPaginates) {
  put("/f", "l0\nl1\nl2\nl3\nl4");
  auto first = fs().read_lines("/f", 0, 2);
  ASSERT_TRUE(ok(first));
  EXPECT_EQ(first->content, "l0\nl1\n");
  EXPECT_EQ(first->total_lines, 5u);
  EXPECT_EQ(first->start_line, 0u);
  EXPECT_EQ(first->end_line, 2u);
  EXPECT_EQ(first->next_offset, 2u);
  auto last = fs().read_lines("/f", 4, 2);
  ASSERT_TRUE(ok(last));
  EXPECT_EQ(last->content, "l4");
  EXPECT_EQ(last->start_line, 4u);
  EXPECT_EQ(last->end_line, 5u);
  EXPECT_FALSE(last->next_offset);
  auto beyond = fs().read_lines("/f", 9, 2);
  ASSERT_TRUE(ok(beyond));
  EXPECT_EQ(beyond->content, "");
  EXPECT_EQ(beyond->start_line, 5u);
  EXPECT_EQ(beyond->end_line, 5u);
  EXPECT_FALSE(beyond->next_offset);
  auto whole = fs().read_lines("/f", 0, 0);  // 0: the default window of 2000 lines
  ASSERT_TRUE(ok(whole));
  EXPECT_EQ(whole->content, "l0\nl1\nl2\nl3\nl4");
  EXPECT_EQ(code(fs().read_lines("/missing", 0, 10)), Errc::kNotFound);
}

TEST_F(FsTest, ReadLinesWalksALargeFileInWindows) {
  std::string text;
  for (int i = 0; i < 5000; ++i) text += "line " + std::to_string(i) + "\n";
  put("/big", text);
  std::string joined;
  uint64_t offset = 0;
  int pages = 0;
  for (;;) {
    auto page = fs().read_lines("/big", offset, 2000);
    ASSERT_TRUE(ok(page));
    EXPECT_EQ(page->total_lines, 5000u);
    EXPECT_EQ(page->start_line, offset);
    joined += page->content;
    ++pages;
    if (!page->next_offset) break;
    offset = *page->next_offset;
  }
  EXPECT_EQ(pages, 3);
  EXPECT_EQ(joined, text);
  auto empty_file = (put("/empty", ""), fs().read_lines("/empty", 0, 10));
  ASSERT_TRUE(ok(empty_file));
  EXPECT_EQ(empty_file->total_lines, 0u);
  EXPECT_FALSE(empty_file->next_offset);
}

TEST_F(FsTest, EditReplacesAUniqueString) {
  put("/src/main.py", "print('hello')\nx = 1\n");
  ASSERT_EQ(::chmod(host("/src/main.py").c_str(), 0755), 0);
  auto replaced = fs().edit("/src/main.py", "hello", "world", false);
  ASSERT_TRUE(ok(replaced));
  EXPECT_EQ(*replaced, 1u);
  EXPECT_EQ(slurp_host(host("/src/main.py")), "print('world')\nx = 1\n");
  EXPECT_EQ(lstat_host(host("/src/main.py")).st_mode & 07777, 0755u);
  expect_owned(host("/src/main.py"));
}

TEST_F(FsTest, EditRefusesAmbiguousOrMissingText) {
  put("/f", "a a a");
  auto not_unique = fs().edit("/f", "a", "b", false);
  EXPECT_EQ(code(not_unique), Errc::kNotUnique);
  EXPECT_THAT(not_unique.error().message, HasSubstr("3 times"));
  EXPECT_EQ(slurp_host(host("/f")), "a a a");
  EXPECT_EQ(code(fs().edit("/f", "zzz", "b", false)), Errc::kNoMatch);
  EXPECT_EQ(code(fs().edit("/f", "", "b", true)), Errc::kNoMatch);
  auto all = fs().edit("/f", "a", "bc", true);
  ASSERT_TRUE(ok(all));
  EXPECT_EQ(*all, 3u);
  EXPECT_EQ(slurp_host(host("/f")), "bc bc bc");
  EXPECT_EQ(code(fs().edit("/missing", "a", "b", false)), Errc::kNotFound);
  EXPECT_EQ(code(fs().edit("/", "a", "b", false)), Errc::kIsDirectory);
}

TEST_F(FsTest, EditRefusesASymlink) {
  put("/target", "abc");
  ASSERT_EQ(::symlink("target", host("/link").c_str()), 0);
  EXPECT_EQ(code(fs().edit("/link", "abc", "x", false)), Errc::kInvalidPath);
  EXPECT_EQ(slurp_host(host("/target")), "abc");
  EXPECT_TRUE(S_ISLNK(lstat_host(host("/link")).st_mode));
}

TEST_F(FsTest, EditRefusesFilesOver64MiB) {
  put("/huge", "x");
  ASSERT_EQ(::truncate(host("/huge").c_str(), (64 << 20) + 1), 0);
  EXPECT_EQ(code(fs().edit("/huge", "x", "y", false)), Errc::kTooLarge);
}

class GlobFsTest : public FsTest {
 protected:
  void SetUp() override {
    FsTest::SetUp();
    if (IsSkipped() || HasFatalFailure()) return;
    put("/top.py", "");
    put("/src/a.py", "");
    put("/src/a.txt", "");
    put("/src/sub/b.py", "");
    put("/src/sub/deep/c.py", "");
    put("/src/.hidden/h.py", "");
    put("/src/.dot.py", "");
    put("/.git/objects/o.py", "");
    put("/other/x.py", "");
    ASSERT_EQ(::mkdir(host("/src/dir.py").c_str(), 0755), 0);  // a directory, never listed
    ASSERT_EQ(::symlink("a.py", host("/src/link.py").c_str()), 0);
    ASSERT_EQ(::symlink("/other", host("/src/linkdir").c_str()), 0);
  }
  std::vector<std::string> glob(std::string_view pattern, std::string_view base = "/") {
    auto result = fs().glob(pattern, base);
    EXPECT_TRUE(ok(result)) << pattern;
    return result ? *result : std::vector<std::string>{};
  }
};

using Paths = std::vector<std::string>;

TEST_F(GlobFsTest, BareNameMatchesBasenamesAtAnyDepthSkippingDotDirs) {
  EXPECT_EQ(glob("*.py"),
            (Paths{"/other/x.py", "/src/a.py", "/src/sub/b.py", "/src/sub/deep/c.py", "/top.py"}));
  EXPECT_EQ(glob("*.py", "/src"), (Paths{"/src/a.py", "/src/sub/b.py", "/src/sub/deep/c.py"}));
  EXPECT_EQ(glob("b.py"), (Paths{"/src/sub/b.py"}));
}

TEST_F(GlobFsTest, DoubleStarDoesNotEnterDotDirsOrFollowLinks) {
  EXPECT_EQ(glob("src/**/*.py"), (Paths{"/src/a.py", "/src/sub/b.py", "/src/sub/deep/c.py"}));
  EXPECT_EQ(glob("**/c.py", "/src"), (Paths{"/src/sub/deep/c.py"}));
  EXPECT_EQ(glob("src/sub/**"), (Paths{"/src/sub/b.py", "/src/sub/deep/c.py"}));
  EXPECT_EQ(glob("src/*.py"), (Paths{"/src/a.py"}));
}

TEST_F(GlobFsTest, ExplicitDotNamesAreMatched) {
  EXPECT_EQ(glob(".git/**/*.py"), (Paths{"/.git/objects/o.py"}));
  EXPECT_EQ(glob("src/.*.py"), (Paths{"/src/.dot.py"}));
  EXPECT_EQ(glob("src/.hidden/*"), (Paths{"/src/.hidden/h.py"}));
}

TEST_F(GlobFsTest, BracesExpand) {
  EXPECT_EQ(glob("src/a.{py,txt}"), (Paths{"/src/a.py", "/src/a.txt"}));
  EXPECT_EQ(glob("{top,x}.py"), (Paths{"/other/x.py", "/top.py"}));
  EXPECT_EQ(glob("/src/{sub/deep,sub}/*.py"), (Paths{"/src/sub/b.py", "/src/sub/deep/c.py"}));
}

TEST_F(GlobFsTest, AbsolutePatternsAndErrors) {
  EXPECT_EQ(glob("/src/*.txt", "/other"), (Paths{"/src/a.txt"}));
  EXPECT_EQ(glob("nothing*"), Paths{});
  EXPECT_EQ(code(fs().glob("../*", "/src")), Errc::kInvalidPath);
  EXPECT_EQ(code(fs().glob("", "/")), Errc::kInvalidPath);
  EXPECT_EQ(code(fs().glob("*", "/missing")), Errc::kNotFound);
  EXPECT_EQ(code(fs().glob("*", "/top.py")), Errc::kNotDirectory);
}

TEST_F(FsTest, GrepFindsLiteralSubstrings) {
  put("/p/a.py", "import re\nre.match('a.b(')\nprint('a.b(')\n");
  put("/p/b.txt", "a.b( in text\n");
  put("/p/.cache/c.py", "a.b(\n");
  put("/p/regex.py", "axb(\n");  // would match the regex a.b\(
  auto all = fs().grep("a.b(", "/p", std::nullopt, 0);
  ASSERT_TRUE(ok(all));
  EXPECT_FALSE(all->truncated);
  ASSERT_EQ(all->matches.size(), 4u);
  EXPECT_EQ(all->matches[0].path, "/p/.cache/c.py");
  EXPECT_EQ(all->matches[1].path, "/p/a.py");
  EXPECT_EQ(all->matches[1].line, 2u);
  EXPECT_EQ(all->matches[1].text, "re.match('a.b(')");
  EXPECT_EQ(all->matches[2].line, 3u);
  EXPECT_EQ(all->matches[3].path, "/p/b.txt");

  auto only_py = fs().grep("a.b(", "/p", "*.py", 0);
  ASSERT_TRUE(ok(only_py));
  ASSERT_EQ(only_py->matches.size(), 3u);
  for (const auto& m : only_py->matches) EXPECT_TRUE(m.path.ends_with(".py")) << m.path;
  auto braces = fs().grep("a.b(", "/p", "*.{txt,md}", 0);
  ASSERT_TRUE(ok(braces));
  ASSERT_EQ(braces->matches.size(), 1u);
  EXPECT_EQ(braces->matches[0].path, "/p/b.txt");

  auto one_file = fs().grep("print", "/p/a.py", std::nullopt, 0);
  ASSERT_TRUE(ok(one_file));
  ASSERT_EQ(one_file->matches.size(), 1u);
  EXPECT_EQ(one_file->matches[0].path, "/p/a.py");
  EXPECT_EQ(one_file->matches[0].line, 3u);
  EXPECT_EQ(code(fs().grep("x", "/missing", std::nullopt, 0)), Errc::kNotFound);
}

TEST_F(FsTest, GrepTruncatesAtMaxCount) {
  std::string text;
  for (int i = 0; i < 10; ++i) text += "hit " + std::to_string(i) + "\n";
  put("/log", text);
  auto capped = fs().grep("hit", "/", std::nullopt, 3);
  ASSERT_TRUE(ok(capped));
  EXPECT_TRUE(capped->truncated);
  ASSERT_EQ(capped->matches.size(), 3u);
  EXPECT_EQ(capped->matches[2].text, "hit 2");
  auto exact = fs().grep("hit", "/", std::nullopt, 10);
  ASSERT_TRUE(ok(exact));
  EXPECT_FALSE(exact->truncated);
  EXPECT_EQ(exact->matches.size(), 10u);
}

TEST_F(FsTest, GrepStreamsAcrossChunksAndSkipsBinaries) {
  // "NEEDLE" straddles the 64 KiB read boundary; the line before it is long.
  std::string text(65536 - 3, 'x');
  text += "NEEDLE tail\nnext line\n";
  put("/big.txt", text);
  put("/bin.dat", std::string("NEEDLE\0binary\n", 14));
  ASSERT_EQ(::symlink("big.txt", host("/link.txt").c_str()), 0);  // not followed in a walk
  auto result = fs().grep("NEEDLE", "/", std::nullopt, 0);
  ASSERT_TRUE(ok(result));
  ASSERT_EQ(result->matches.size(), 1u);
  EXPECT_EQ(result->matches[0].path, "/big.txt");
  EXPECT_EQ(result->matches[0].line, 1u);
  EXPECT_EQ(result->matches[0].text.size(), 4096u);  // long lines are cut
}

}  // namespace
}  // namespace hutch::files::testing
