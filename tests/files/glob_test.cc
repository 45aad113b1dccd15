// The pure glob matcher: names, paths with "**", brace expansion.
#include "runtime/files/glob.h"

#include <gtest/gtest.h>

namespace hutch::files {
namespace {

using Strings = std::vector<std::string>;

TEST(ExpandBraces, Alternatives) {
  EXPECT_EQ(expand_braces("*.{py,ts}"), (Strings{"*.py", "*.ts"}));
  EXPECT_EQ(expand_braces("{a,b}{1,2}"), (Strings{"a1", "a2", "b1", "b2"}));
  EXPECT_EQ(expand_braces("x{a,{b,c}d}y"), (Strings{"xay", "xbdy", "xcdy"}));
  EXPECT_EQ(expand_braces("{,x}.py"), (Strings{".py", "x.py"}));
}

TEST(ExpandBraces, LiteralWhenNotAGroup) {
  EXPECT_EQ(expand_braces("plain"), (Strings{"plain"}));
  EXPECT_EQ(expand_braces("{x}"), (Strings{"{x}"}));
  EXPECT_EQ(expand_braces("{a,b"), (Strings{"{a,b"}));
  EXPECT_EQ(expand_braces("\\{a,b}"), (Strings{"\\{a,b}"}));
  EXPECT_EQ(expand_braces("{x}{a,b}"), (Strings{"{x}a", "{x}b"}));
}

TEST(ExpandBraces, CapsTheNumberOfResults) {
  // 2^11 = 2048 alternatives.
  std::string bomb;
  for (int i = 0; i < 11; ++i) bomb += "{a,b}";
  EXPECT_FALSE(expand_braces(bomb));
  EXPECT_TRUE(expand_braces(bomb, 4096));
}

TEST(MatchName, Wildcards) {
  EXPECT_TRUE(match_name("*.py", "main.py"));
  EXPECT_FALSE(match_name("*.py", "main.pyc"));
  EXPECT_TRUE(match_name("m?in.*", "main.c"));
  EXPECT_TRUE(match_name("*", "x"));
  EXPECT_TRUE(match_name("a*b*c", "aXXbYYc"));
  EXPECT_FALSE(match_name("a*b*c", "aXXbYY"));
  EXPECT_TRUE(match_name("**", "anything"));
  EXPECT_TRUE(match_name("", ""));
  EXPECT_FALSE(match_name("", "x"));
}

TEST(MatchName, Classes) {
  EXPECT_TRUE(match_name("[abc].txt", "b.txt"));
  EXPECT_FALSE(match_name("[abc].txt", "d.txt"));
  EXPECT_TRUE(match_name("[a-c]1", "c1"));
  EXPECT_TRUE(match_name("[!a-c]1", "d1"));
  EXPECT_FALSE(match_name("[^a-c]1", "a1"));
  EXPECT_TRUE(match_name("[]]", "]"));
  EXPECT_TRUE(match_name("[ab", "[ab"));  // unterminated: literal
}

TEST(MatchName, EscapesAndDots) {
  EXPECT_TRUE(match_name("\\*", "*"));
  EXPECT_FALSE(match_name("\\*", "x"));
  EXPECT_FALSE(match_name("*", ".hidden"));
  EXPECT_FALSE(match_name("?hidden", ".hidden"));
  EXPECT_FALSE(match_name("[.]hidden", ".hidden"));
  EXPECT_TRUE(match_name(".*", ".hidden"));
  EXPECT_TRUE(match_name(".hidden", ".hidden"));
  EXPECT_TRUE(match_name("*.*", "a.b.c"));
}

TEST(SplitPattern, DropsEmptyAndDotPartsAndCollapsesGlobstars) {
  EXPECT_EQ(split_pattern("/a//./b/"), (Strings{"a", "b"}));
  EXPECT_EQ(split_pattern("**/**/x"), (Strings{"**", "x"}));
  EXPECT_EQ(split_pattern(""), Strings{});
}

TEST(MatchPath, Globstar) {
  const Strings pattern = split_pattern("src/**/*.py");
  EXPECT_TRUE(match_path(pattern, {"src", "a.py"}));
  EXPECT_TRUE(match_path(pattern, {"src", "x", "y", "a.py"}));
  EXPECT_FALSE(match_path(pattern, {"src", ".venv", "a.py"}));
  EXPECT_FALSE(match_path(pattern, {"lib", "a.py"}));
  EXPECT_TRUE(match_path(split_pattern("**"), {"a", "b"}));
  EXPECT_FALSE(match_path(split_pattern("**"), {"a", ".b"}));
  EXPECT_TRUE(match_path(split_pattern(".git/**"), {".git", "HEAD"}));
  EXPECT_FALSE(match_path(split_pattern("a/*"), {"a", "b", "c"}));
}

// Many "**" against a deep path: each split is tried once, not C(200, 20) times (which hangs
// until ctest's timeout without it; fuzz/corpus/path_fuzzer/regress_globstars holds one).
TEST(MatchPath, ManyGlobstarsOverADeepPathFinish) {
  std::string pattern;
  for (int i = 0; i < 20; ++i) pattern += "**/a/";
  Strings parts(200, "a");
  EXPECT_FALSE(match_path(split_pattern(pattern + "b"), parts));
  parts.back() = "b";
  EXPECT_TRUE(match_path(split_pattern(pattern + "b"), parts));
}

}  // namespace
}  // namespace hutch::files
