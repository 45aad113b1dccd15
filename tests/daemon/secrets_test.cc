// The secrets store: the file's format and permissions, the environment, the write-only set,
// and that listing never shows a value.
#include "daemon/service/secrets.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "tests/common/temp_dir.h"

namespace hutch::daemon::service {
namespace {

class Secrets : public ::testing::Test {
 protected:
  std::string write(const std::string& name, const std::string& text, mode_t mode = 0600) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path) << text;
    EXPECT_EQ(chmod(path.c_str(), mode), 0);
    return path;
  }
  std::string value(std::string_view name) {
    auto secret = store_.value(name);
    return secret ? std::string(secret->view()) : "<none>";
  }

  testing::TempDir dir_;
  SecretStore store_;
};

TEST_F(Secrets, FileOfNameValueLines) {
  const std::string path =
      write("secrets", "# keys\n\nOPENAI_API_KEY=sk-a=b c\nGH=ghp_1\r\nTAB=a\tb");
  ASSERT_TRUE(store_.load_file(path)) << store_.load_file(path).error().message();
  EXPECT_EQ(value("OPENAI_API_KEY"), "sk-a=b c");  // the rest of the line, as is
  EXPECT_EQ(value("GH"), "ghp_1");
  EXPECT_EQ(value("TAB"), "a\tb");
  const auto list = store_.list();
  ASSERT_EQ(list.size(), 3u);
  EXPECT_EQ(list[0].name, "GH");
  EXPECT_EQ(list[1].name, "OPENAI_API_KEY");
  EXPECT_EQ(list[0].source, SecretSource::kFile);
  EXPECT_EQ(secret_source_name(list[0].source), "file");
}

TEST_F(Secrets, FileReadableByOthersIsRefused) {
  for (mode_t mode : {0644, 0640, 0604, 0660, 0601}) {
    const std::string path = write("open", "K=v\n", mode);
    auto loaded = store_.load_file(path);
    ASSERT_FALSE(loaded) << std::oct << mode;
    EXPECT_NE(loaded.error().detail.find("must have no access (0600)"), std::string::npos)
        << loaded.error().detail;
  }
  EXPECT_TRUE(store_.list().empty());
  EXPECT_TRUE(store_.load_file(write("readonly", "K=v\n", 0400)));
}

TEST_F(Secrets, FileThatIsNotARegularFileOfOursIsRefused) {
  const std::string target = write("target", "K=v\n");
  const std::string link = dir_.path() + "/link";
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  auto through_link = store_.load_file(link);
  ASSERT_FALSE(through_link);
  EXPECT_EQ(through_link.error().step, "open");
  EXPECT_EQ(through_link.error().err, ELOOP);
  auto missing = store_.load_file(dir_.path() + "/missing");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().err, ENOENT);
  EXPECT_FALSE(store_.load_file(dir_.path()));  // a directory
  if (geteuid() == 0) {
    ASSERT_EQ(chown(target.c_str(), 65534, 65534), 0);
    auto foreign = store_.load_file(target);
    ASSERT_FALSE(foreign);
    EXPECT_NE(foreign.error().detail.find("owned by uid 65534"), std::string::npos);
  }
}

TEST_F(Secrets, BadFileIsRefusedWholeAndNamesTheLine) {
  ASSERT_TRUE(store_.set("KEEP", "old", SecretSource::kApi));
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"A=1\nnot a line\n", ":2: not NAME=value"},
      {"A=1\n1BAD=x\n", ":2: \"1BAD\" is not a secret name"},
      {"A=1\nA=2\n", ":2: \"A\" is set twice"},
      {"A=\n", ":1: \"A\": the value must be 1..16384 bytes"},
      {"A=x\x01y\n", ":1: \"A\": the value has control characters"},
      {"KEEP=new\nB=\x7f\n", ":2: \"B\": the value has control characters"},
  };
  for (const auto& [text, expected] : cases) {
    auto loaded = store_.load_file(write("bad", text));
    ASSERT_FALSE(loaded) << text;
    EXPECT_NE(loaded.error().detail.find(expected), std::string::npos) << loaded.error().detail;
    EXPECT_EQ(loaded.error().detail.find("x\x01y"), std::string::npos);
  }
  EXPECT_EQ(store_.list().size(), 1u);
  EXPECT_EQ(value("KEEP"), "old");
  auto huge = store_.load_file(write("huge", "A=" + std::string(2 * 1024 * 1024, 'v') + "\n"));
  ASSERT_FALSE(huge);
  EXPECT_NE(huge.error().detail.find("over 1 MiB"), std::string::npos);
}

TEST_F(Secrets, EnvironmentVariableIsTakenAndRemoved) {
  ASSERT_EQ(setenv("HUTCH_TEST_SECRET", "env-value", 1), 0);
  ASSERT_TRUE(store_.load_environment("HUTCH_TEST_SECRET"));
  EXPECT_EQ(value("HUTCH_TEST_SECRET"), "env-value");
  EXPECT_EQ(std::getenv("HUTCH_TEST_SECRET"), nullptr);
  EXPECT_EQ(store_.list()[0].source, SecretSource::kEnvironment);
  auto unset = store_.load_environment("HUTCH_TEST_SECRET");
  ASSERT_FALSE(unset);
  EXPECT_EQ(unset.error().kind, ErrorKind::kNotFound);
  EXPECT_FALSE(store_.load_environment("BAD-NAME"));
  ASSERT_EQ(setenv("HUTCH_TEST_BAD", "a\x01", 1), 0);
  EXPECT_FALSE(store_.load_environment("HUTCH_TEST_BAD"));
  unsetenv("HUTCH_TEST_BAD");
}

TEST_F(Secrets, SetReplacesAndRemoveForgets) {
  ASSERT_TRUE(store_.set("K", "one", SecretSource::kApi));
  ASSERT_TRUE(store_.set("K", "two", SecretSource::kApi));
  EXPECT_EQ(value("K"), "two");
  EXPECT_EQ(store_.list().size(), 1u);
  EXPECT_TRUE(store_.contains("K"));
  ASSERT_TRUE(store_.remove("K"));
  EXPECT_FALSE(store_.contains("K"));
  EXPECT_EQ(value("K"), "<none>");
  auto again = store_.remove("K");
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().kind, ErrorKind::kNotFound);
}

TEST_F(Secrets, SetRefusesBadNamesAndValuesWithoutShowingThem) {
  for (const char* name : {"", "1A", "A-B", "A B"}) {
    EXPECT_FALSE(store_.set(name, "v", SecretSource::kApi)) << name;
  }
  for (const std::string& bad :
       {std::string("top-secret\r\nX: y"), std::string("top-secret\n"),
        std::string("top\0secret", 10), std::string(), std::string(16 * 1024 + 1, 's')}) {
    auto set = store_.set("K", bad, SecretSource::kApi);
    ASSERT_FALSE(set);
    EXPECT_EQ(set.error().kind, ErrorKind::kInvalid);
    EXPECT_EQ(set.error().message().find("top"), std::string::npos) << set.error().message();
  }
  EXPECT_TRUE(store_.set("K", std::string(16 * 1024, 's'), SecretSource::kApi));
}

TEST(SecretValue, MovingLeavesNothingBehind) {
  SecretValue a(std::string("short"));
  SecretValue b(std::move(a));
  EXPECT_EQ(a.view(), "");  // NOLINT(bugprone-use-after-move): the point of the test
  EXPECT_EQ(b.view(), "short");
  SecretValue c(std::string(100, 'x'));
  c = std::move(b);
  EXPECT_EQ(c.view(), "short");
  EXPECT_EQ(b.view(), "");  // NOLINT(bugprone-use-after-move)
}

}  // namespace
}  // namespace hutch::daemon::service
