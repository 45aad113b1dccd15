#include "cli/options.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <string>

#include "runtime/defaults.h"
#include "tests/unit/result_util.h"

namespace hutch::cli {
namespace {

using std::chrono::milliseconds;
using test_util::contains;
using test_util::error_message;

TEST(ParseDuration, ReadsEveryUnit) {
  const std::pair<const char*, milliseconds> cases[] = {
      {"30", milliseconds(30'000)},    {"30s", milliseconds(30'000)},
      {"1.5s", milliseconds(1'500)},   {"500ms", milliseconds(500)},
      {"2m", milliseconds(120'000)},   {"1h", milliseconds(3'600'000)},
      {"0.25h", milliseconds(900'000)}};
  for (const auto& [text, expected] : cases) {
    auto parsed = parse_duration(text);
    ASSERT_TRUE(parsed) << text << ": " << parsed.error().message();
    EXPECT_EQ(*parsed, expected) << text;
  }
}

TEST(ParseDuration, RoundsSubMillisecondsUpNotToZero) {
  auto parsed = parse_duration("0.1ms");
  ASSERT_TRUE(parsed) << parsed.error().message();
  EXPECT_EQ(*parsed, milliseconds(1));
}

TEST(ParseDuration, RejectsNonPositiveAndMalformed) {
  for (const char* text : {"", "0", "0s", "-1", "-1s", "abc", "5x", "5 s", " 5", "s", "5sec", "5S",
                           "0x10", "nan", "inf", "-inf", "1e300"}) {
    EXPECT_TRUE(contains(error_message(parse_duration(text)), "positive duration")) << text;
  }
}

TEST(ParseDuration, RejectsDurationsTooLongToRepresent) {
  EXPECT_TRUE(parse_duration("1000000000s"));  // about 31 years: still fine
  EXPECT_FALSE(parse_duration("1e10h"));
}

TEST(ParseSize, ReadsBytesAndBinaryUnits) {
  const std::pair<const char*, uint64_t> cases[] = {
      {"1048576", 1048576},   {"1", 1},           {"64k", 64ull << 10}, {"64K", 64ull << 10},
      {"512M", 512ull << 20}, {"1G", 1ull << 30}, {"2t", 2ull << 40}};
  for (const auto& [text, expected] : cases) {
    auto parsed = parse_size(text);
    ASSERT_TRUE(parsed) << text << ": " << parsed.error().message();
    EXPECT_EQ(*parsed, expected) << text;
  }
}

TEST(ParseSize, RejectsNonPositiveAndMalformed) {
  for (const char* text : {"", "0", "0G", "-1", "1Q", "1KB", "1.5G", "G", " 1", "1 G", "0x10"}) {
    EXPECT_TRUE(contains(error_message(parse_size(text)), "positive size")) << text;
  }
}

TEST(ParseSize, RejectsOverflow) {
  EXPECT_FALSE(parse_size("99999999999999999999G"));
  EXPECT_FALSE(parse_size("99999999999999999999"));
  EXPECT_FALSE(parse_size("17179869184G"));  // 2^34 GiB = 2^64 bytes
  EXPECT_FALSE(parse_size("16777216T"));     // 2^24 TiB = 2^64 bytes
  auto largest = parse_size("17179869183G");
  ASSERT_TRUE(largest) << largest.error().message();
  EXPECT_EQ(*largest, 17179869183ull << 30);
}

TEST(ParseBind, DefaultsToReadOnly) {
  auto bind = parse_bind("a:/b");
  ASSERT_TRUE(bind) << bind.error().message();
  EXPECT_EQ(bind->source, "a");
  EXPECT_EQ(bind->target, "/b");
  EXPECT_TRUE(bind->read_only);
}

TEST(ParseBind, ReadsTheMode) {
  auto ro = parse_bind("/src/dir:/b/c:ro");
  ASSERT_TRUE(ro) << ro.error().message();
  EXPECT_EQ(ro->source, "/src/dir");
  EXPECT_EQ(ro->target, "/b/c");
  EXPECT_TRUE(ro->read_only);
  auto rw = parse_bind("a:/b:rw");
  ASSERT_TRUE(rw) << rw.error().message();
  EXPECT_FALSE(rw->read_only);
}

TEST(ParseBind, RejectsMalformed) {
  for (const char* text : {"a", "", ":", "a:", "a:b", "a:/", "a:/b:xx", "a:/b:", "a:/b:RW",
                           "a:/b:rw:ro", ":/b", "a:/b/../c", "a:/b/", "a://b"}) {
    EXPECT_FALSE(parse_bind(text)) << text;
  }
}

TEST(ParseBind, ErrorsSayWhatIsWrong) {
  EXPECT_TRUE(contains(error_message(parse_bind("a:/")), "target"));
  EXPECT_TRUE(contains(error_message(parse_bind(":/b")), "empty source"));
  EXPECT_TRUE(contains(error_message(parse_bind("a:/b:xx")), "mode \"xx\""));
}

TEST(ParseBind, RejectsNulBytes) {
  EXPECT_FALSE(parse_bind(std::string("a\0b:/c", 6)));
  EXPECT_FALSE(parse_bind(std::string("a:/c\0d", 6)));
}

TEST(ParseEnv, AcceptsPosixNamesAndKeepsTheWholeValue) {
  for (const char* text : {"_A1=x=y", "A=", "path=/bin", "_=x", "Z9_=1"}) {
    auto parsed = parse_env(text);
    ASSERT_TRUE(parsed) << text << ": " << parsed.error().message();
    EXPECT_EQ(*parsed, text);
  }
}

TEST(ParseEnv, RejectsBadNames) {
  for (const char* text : {"1A=x", "A-B=x", "=x", "noeq", "", "A B=x", "A.B=x", "Ä=x", " A=x"}) {
    EXPECT_FALSE(parse_env(text)) << text;
  }
}

TEST(ParseEnv, RejectsNul) {
  EXPECT_FALSE(parse_env(std::string("A=x\0y", 5)));
  EXPECT_FALSE(parse_env(std::string("A\0=x", 4)));
}

// The CLI builds its environment with runtime/defaults.h sandbox_environment: HOME is
// /home/user for a uid other than 0, as it always was for `hutch run`.

// The keys of a "K=V" list, in order.
std::vector<std::string> keys(const std::vector<std::string>& env) {
  std::vector<std::string> names;
  for (const std::string& kv : env) names.push_back(kv.substr(0, kv.find('=')));
  return names;
}

std::string value_of(const std::vector<std::string>& env, const std::string& key) {
  for (const std::string& kv : env) {
    if (kv.starts_with(key + "=")) return kv.substr(key.size() + 1);
  }
  return "<unset>";
}

TEST(SandboxEnvironment, HasTheDefaults) {
  const auto env = sandbox_environment(0, {});
  std::vector<std::string> names = keys(env);
  std::ranges::sort(names);
  EXPECT_EQ(names, (std::vector<std::string>{"HOME", "LANG", "PATH", "TERM"}));
  EXPECT_TRUE(contains(value_of(env, "PATH"), "/usr/bin"));
}

TEST(SandboxEnvironment, HomeFollowsTheUid) {
  EXPECT_EQ(value_of(sandbox_environment(0, {}), "HOME"), "/root");
  EXPECT_EQ(value_of(sandbox_environment(1000, {}), "HOME"), "/home/user");
}

TEST(SandboxEnvironment, OverridesReplaceDefaultsAndLaterWins) {
  const auto env = sandbox_environment(0, {"HOME=/data", "A=1", "A=2", "PAT=x"});
  EXPECT_EQ(value_of(env, "HOME"), "/data");
  EXPECT_EQ(value_of(env, "A"), "2");
  EXPECT_EQ(value_of(env, "PAT"), "x");
  EXPECT_TRUE(contains(value_of(env, "PATH"), "/usr/bin")) << "PAT=x must not replace PATH";
  std::vector<std::string> names = keys(env);
  const std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size()) << "a key appears twice";
}

TEST(SandboxEnvironment, NeverInheritsTheHostEnvironment) {
  ASSERT_EQ(setenv("HUTCH_UNIT_HOST_SECRET", "leak", 1), 0);
  ASSERT_EQ(setenv("LD_PRELOAD", "/tmp/evil.so", 1), 0);
  for (uint32_t uid : {0u, 1000u}) {
    for (const std::string& kv : sandbox_environment(uid, {"A=1"})) {
      EXPECT_FALSE(kv.starts_with("HUTCH_UNIT_HOST_SECRET=")) << kv;
      EXPECT_FALSE(kv.starts_with("LD_PRELOAD=")) << kv;
      EXPECT_FALSE(contains(kv, "leak")) << kv;
    }
  }
  unsetenv("HUTCH_UNIT_HOST_SECRET");
  unsetenv("LD_PRELOAD");
}

}  // namespace
}  // namespace hutch::cli
