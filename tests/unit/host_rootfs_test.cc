#include "runtime/fs/host_rootfs.h"

#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/fs/paths.h"
#include "tests/unit/result_util.h"

extern const char kHostRootfsList[];

namespace hutch {

// Readable failures for EXPECT_EQ on plans.
void PrintTo(const SkeletonEntry& entry, std::ostream* out) {
  constexpr const char* kKinds[] = {"dir", "opaque", "whiteout"};
  *out << "{" << kKinds[static_cast<int>(entry.kind)] << " " << entry.path << " 0" << std::oct
       << entry.mode << std::dec << "}";
}

namespace {

using Rule = HostRootfsRule;
using Entry = SkeletonEntry;
using test_util::contains;
using test_util::error_message;

std::vector<Rule> parse_ok(std::string_view text) {
  auto rules = parse_host_rootfs_list(text);
  EXPECT_TRUE(rules) << rules.error().message();
  return rules ? *rules : std::vector<Rule>{};
}

// A host as a map from directory to its names; directories not in the map do not exist.
ListDir fake_host(std::map<std::string, std::vector<std::string>> dirs) {
  return [dirs = std::move(dirs)](const std::string& path) {
    auto found = dirs.find(path);
    return found == dirs.end() ? std::nullopt : std::optional(found->second);
  };
}

TEST(ParseHostRootfsList, SkipsCommentsAndBlankLines) {
  auto rules = parse_ok("# header\n\n   \n\t# indented comment\nshow /usr\n");
  ASSERT_EQ(rules.size(), 1u);
  EXPECT_EQ(rules[0].kind, Rule::Kind::kShow);
  EXPECT_EQ(rules[0].path, "/usr");
}

TEST(ParseHostRootfsList, ReadsEmptyRulesWithOctalModes) {
  auto rules = parse_ok("empty /root 0700\nempty /tmp 1777\nempty /srv 755\n");
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].kind, Rule::Kind::kEmpty);
  EXPECT_EQ(rules[0].path, "/root");
  EXPECT_EQ(rules[0].mode, 0700u);
  EXPECT_EQ(rules[1].mode, 01777u);
  EXPECT_EQ(rules[2].mode, 0755u);
}

TEST(ParseHostRootfsList, KeepsFileOrder) {
  auto rules = parse_ok("show /usr\nempty /home 0755\nshow /etc/ssl/certs\n");
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0].path, "/usr");
  EXPECT_EQ(rules[1].path, "/home");
  EXPECT_EQ(rules[2].path, "/etc/ssl/certs");
}

TEST(ParseHostRootfsList, RejectsUnknownVerbs) {
  for (const char* line : {"hide /usr", "Show /usr", "shows /usr", "empty_dir /x 0755"}) {
    EXPECT_TRUE(contains(error_message(parse_host_rootfs_list(line)), "expected")) << line;
  }
}

TEST(ParseHostRootfsList, RejectsBadModes) {
  for (const char* line : {"empty /x", "empty /x 0788", "empty /x 9", "empty /x rwx",
                           "empty /x 00755", "empty /x -755", "empty /x 0755 extra"}) {
    EXPECT_FALSE(parse_host_rootfs_list(line)) << line;
  }
}

TEST(ParseHostRootfsList, ShowTakesNoMode) {
  EXPECT_FALSE(parse_host_rootfs_list("show /usr 0755"));
  EXPECT_FALSE(parse_host_rootfs_list("show /usr # trailing comment"));
}

TEST(ParseHostRootfsList, RejectsNonNormalPaths) {
  for (const char* line : {"show usr", "show /usr/", "show //usr", "show /a/../etc", "show /./etc",
                           "show", "empty tmp 1777"}) {
    EXPECT_TRUE(contains(error_message(parse_host_rootfs_list(line)), "normalized")) << line;
  }
}

TEST(ParseHostRootfsList, RejectsRoot) {
  // Showing / would show the host's whole filesystem.
  EXPECT_FALSE(parse_host_rootfs_list("show /"));
  EXPECT_FALSE(parse_host_rootfs_list("empty / 0755"));
}

TEST(ParseHostRootfsList, ErrorNamesTheLine) {
  EXPECT_TRUE(
      contains(error_message(parse_host_rootfs_list("# ok\nshow /usr\nshow etc\n")), "line 3"));
}

TEST(PlanHostSkeleton, HidesUnlistedEntriesAndEmptiesEmptyRules) {
  auto rules = parse_ok("show /usr\nempty /tmp 1777\n");
  auto plan = plan_host_skeleton(rules, fake_host({{"/", {"usr", "tmp", "etc", "boot"}}}));
  const std::vector<Entry> expected = {{Entry::Kind::kWhiteout, "/boot", 0},
                                       {Entry::Kind::kWhiteout, "/etc", 0},
                                       {Entry::Kind::kOpaqueDir, "/tmp", 01777}};
  EXPECT_EQ(plan, expected);
}

TEST(PlanHostSkeleton, EmptyRuleWithoutAHostDirectoryIsStillCreated) {
  auto plan = plan_host_skeleton(parse_ok("empty /srv 0750\n"), fake_host({{"/", {}}}));
  const std::vector<Entry> expected = {{Entry::Kind::kOpaqueDir, "/srv", 0750}};
  EXPECT_EQ(plan, expected);
}

TEST(PlanHostSkeleton, NestedRuleMakesItsParentsAllowlists) {
  auto plan = plan_host_skeleton(parse_ok("show /etc/ssl/certs\n"),
                                 fake_host({{"/", {"etc", "usr"}},
                                            {"/etc", {"ssl", "shadow"}},
                                            {"/etc/ssl", {"certs", "private"}}}));
  const std::vector<Entry> expected = {{Entry::Kind::kDir, "/etc", 0755},
                                       {Entry::Kind::kWhiteout, "/etc/shadow", 0},
                                       {Entry::Kind::kDir, "/etc/ssl", 0755},
                                       {Entry::Kind::kWhiteout, "/etc/ssl/private", 0},
                                       {Entry::Kind::kWhiteout, "/usr", 0}};
  EXPECT_EQ(plan, expected);
}

TEST(PlanHostSkeleton, MissingHostDirectoryIsFine) {
  auto plan = plan_host_skeleton(parse_ok("show /opt/tool\n"), fake_host({{"/", {"opt"}}}));
  const std::vector<Entry> expected = {{Entry::Kind::kDir, "/opt", 0755}};
  EXPECT_EQ(plan, expected);
}

TEST(PlanHostSkeleton, ParentsComeBeforeChildren) {
  auto plan = plan_host_skeleton(parse_ok("show /a/b/c\nshow /a-x\nempty /a/d 0700\nshow /z/y\n"),
                                 fake_host({{"/", {"a", "a-x", "a.b", "z", "q"}},
                                            {"/a", {"b", "b-c", "d", "e"}},
                                            {"/a/b", {"c", "c0", "b"}},
                                            {"/z", {"y", "x"}}}));
  ASSERT_FALSE(plan.empty());
  std::map<std::string, size_t> position;
  for (size_t i = 0; i < plan.size(); ++i) position[plan[i].path] = i;
  EXPECT_EQ(position.size(), plan.size()) << "a path appears twice";
  for (size_t i = 0; i < plan.size(); ++i) {
    const std::string parent = parent_path(plan[i].path);
    if (parent == "/") continue;
    ASSERT_TRUE(position.contains(parent)) << plan[i].path << " has no parent entry";
    EXPECT_LT(position[parent], i) << plan[i].path;
  }
}

TEST(PlanHostSkeleton, ShownAndEmptyPathsAreNeverWhitedOut) {
  auto plan = plan_host_skeleton(parse_ok("show /usr\nempty /home 0755\n"),
                                 fake_host({{"/", {"usr", "home"}}}));
  const std::vector<Entry> expected = {{Entry::Kind::kOpaqueDir, "/home", 0755}};
  EXPECT_EQ(plan, expected);
}

// The list embedded in hutch: what every sandbox sees of the host by default.
class EmbeddedHostList : public ::testing::Test {
 protected:
  void SetUp() override { rules_ = parse_ok(kHostRootfsList); }

  // The rule that decides `path`: the rule for it or its closest ancestor, or nullptr.
  const Rule* deciding_rule(std::string path) const {
    while (true) {
      for (const Rule& rule : rules_) {
        if (rule.path == path) return &rule;
      }
      if (path == "/") return nullptr;
      path = parent_path(path);
    }
  }

  std::vector<Rule> rules_;
};

TEST_F(EmbeddedHostList, Parses) { EXPECT_GT(rules_.size(), 10u); }

TEST_F(EmbeddedHostList, SecretsAndHomesAreNeverShown) {
  for (const char* path : {"/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/sudoers",
                           "/etc/ssh", "/root", "/root/.ssh", "/home", "/home/someone",
                           "/var/lib/hutch", "/run", "/proc", "/sys", "/boot"}) {
    const Rule* rule = deciding_rule(path);
    EXPECT_TRUE(rule == nullptr || rule->kind != Rule::Kind::kShow)
        << path << " is shown by \"show " << (rule ? rule->path : "") << "\"";
  }
}

TEST_F(EmbeddedHostList, RootAndHomeAreEmpty) {
  for (const auto& [path, mode] : {std::pair{"/root", 0700u}, std::pair{"/home", 0755u}}) {
    const Rule* rule = deciding_rule(path);
    ASSERT_NE(rule, nullptr) << path;
    EXPECT_EQ(rule->path, path);
    EXPECT_EQ(rule->kind, Rule::Kind::kEmpty) << path;
    EXPECT_EQ(rule->mode, mode) << path;
  }
}

TEST_F(EmbeddedHostList, SkeletonHidesHostSecrets) {
  auto plan = plan_host_skeleton(
      rules_,
      fake_host({{"/", {"etc", "usr", "root", "home", "boot", "sys", "proc", "tmp"}},
                 {"/etc", {"shadow", "gshadow", "sudoers", "ssh", "passwd", "os-release", "ssl"}},
                 {"/etc/ssl", {"certs", "private", "openssl.cnf"}}}));
  std::map<std::string, Entry::Kind> kinds;
  for (const Entry& entry : plan) kinds[entry.path] = entry.kind;
  for (const char* hidden : {"/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh",
                             "/etc/ssl/private", "/boot", "/sys"}) {
    EXPECT_EQ(kinds.count(hidden), 1u) << hidden;
    EXPECT_EQ(kinds[hidden], Entry::Kind::kWhiteout) << hidden;
  }
  for (const char* emptied : {"/root", "/home", "/proc", "/tmp"}) {
    EXPECT_EQ(kinds.count(emptied), 1u) << emptied;
    EXPECT_EQ(kinds[emptied], Entry::Kind::kOpaqueDir) << emptied;
  }
  EXPECT_FALSE(kinds.contains("/usr"));
  EXPECT_FALSE(kinds.contains("/etc/os-release"));
  EXPECT_FALSE(kinds.contains("/etc/ssl/certs"));
}

}  // namespace
}  // namespace hutch
