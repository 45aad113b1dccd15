#include <gtest/gtest.h>

#include <cerrno>
#include <string>

#include "seccomp/profile.h"
#include "tests/unit/result_util.h"

namespace hutch {
namespace {

using test_util::contains;
using test_util::error_message;

SeccompPolicy parse_ok(std::string_view json) {
  auto policy = parse_seccomp_profile(json);
  EXPECT_TRUE(policy) << policy.error().message();
  return policy ? *policy : SeccompPolicy{};
}

// A one-rule profile: `rule` is one allow_if (or deny_if) entry.
std::string with_rule(const char* list, const std::string& rule) {
  return std::string(R"({"default_errno": "EPERM", ")") + list + "\": [" + rule + "]}";
}

TEST(ParseSeccompProfile, ReadsEveryList) {
  SeccompPolicy policy = parse_ok(R"({
    "default_errno": "EACCES",
    "allow": ["read", "write"],
    "allow_if": [{"syscall": "socket", "args": [{"index": 0, "op": "eq", "value": 1}]}],
    "errno": [{"errno": "ENOSYS", "syscalls": ["clone3", "io_uring_setup"]}],
    "deny": ["mount"],
    "deny_if": [{"syscall": "ioctl", "errno": "EPERM",
                 "args": [{"index": 1, "op": "masked_eq", "mask": "0xffffffff",
                           "value": "0x5412"}]}]
  })");
  EXPECT_EQ(policy.default_errno, EACCES);
  EXPECT_EQ(policy.allow, (std::vector<std::string>{"read", "write"}));
  ASSERT_EQ(policy.allow_if.size(), 1u);
  EXPECT_EQ(policy.allow_if[0].syscall, "socket");
  ASSERT_EQ(policy.allow_if[0].args.size(), 1u);
  EXPECT_EQ(policy.allow_if[0].args[0].op, CompareOp::kEq);
  EXPECT_EQ(policy.allow_if[0].args[0].value, 1u);
  ASSERT_EQ(policy.errno_rules.size(), 1u);
  EXPECT_EQ(policy.errno_rules[0].errno_value, ENOSYS);
  EXPECT_EQ(policy.errno_rules[0].syscalls, (std::vector<std::string>{"clone3", "io_uring_setup"}));
  EXPECT_EQ(policy.deny, std::vector<std::string>{"mount"});
  ASSERT_EQ(policy.deny_if.size(), 1u);
  const ConditionalRule& tiocsti = policy.deny_if[0];
  EXPECT_EQ(tiocsti.errno_value, EPERM);
  ASSERT_EQ(tiocsti.args.size(), 1u);
  EXPECT_EQ(tiocsti.args[0].index, 1u);
  EXPECT_EQ(tiocsti.args[0].op, CompareOp::kMaskedEq);
  EXPECT_EQ(tiocsti.args[0].mask, 0xffffffffu);
  EXPECT_EQ(tiocsti.args[0].value, 0x5412u);
}

TEST(ParseSeccompProfile, OnlyDefaultErrnoIsRequired) {
  SeccompPolicy policy = parse_ok(R"({"default_errno": "ENOSYS"})");
  EXPECT_EQ(policy.default_errno, ENOSYS);
  EXPECT_TRUE(policy.allow.empty());
  EXPECT_TRUE(policy.allow_if.empty());
  EXPECT_TRUE(policy.deny_if.empty());
}

TEST(ParseSeccompProfile, RejectsMalformedJson) {
  for (const char* json : {"", "{", R"({"default_errno": "EPERM",})", "[]", "null",
                           R"({"default_errno": "EPERM"} trailing)"}) {
    EXPECT_FALSE(parse_seccomp_profile(json)) << json;
  }
}

TEST(ParseSeccompProfile, RejectsMissingDefaultErrno) {
  EXPECT_TRUE(
      contains(error_message(parse_seccomp_profile(R"({"allow": ["read"]})")), "default_errno"));
}

TEST(ParseSeccompProfile, RejectsUnknownErrnoNames) {
  EXPECT_TRUE(contains(error_message(parse_seccomp_profile(R"({"default_errno": "EWHATEVER"})")),
                       "EWHATEVER"));
  EXPECT_FALSE(parse_seccomp_profile(R"({"default_errno": "eperm"})"));
  EXPECT_FALSE(parse_seccomp_profile(R"({"default_errno": 1})"));
  EXPECT_FALSE(parse_seccomp_profile(
      R"({"default_errno": "EPERM", "errno": [{"errno": "EBOGUS", "syscalls": ["clone3"]}]})"));
}

TEST(ParseSeccompProfile, RejectsUnknownOps) {
  const std::string json = with_rule(
      "allow_if", R"({"syscall": "socket", "args": [{"index": 0, "op": "gt", "value": 1}]})");
  EXPECT_TRUE(contains(error_message(parse_seccomp_profile(json)), "unknown op \"gt\""));
}

TEST(ParseSeccompProfile, ReadsHexAndDecimalNumbers) {
  SeccompPolicy policy = parse_ok(with_rule("allow_if", R"({"syscall": "ioctl", "args": [
          {"index": 1, "op": "eq", "value": "0x5412"},
          {"index": 2, "op": "eq", "value": "21522"},
          {"index": 3, "op": "eq", "value": 21522},
          {"index": 4, "op": "masked_eq", "mask": "0xFFFFFFFF00000000", "value": "0"}]})"));
  ASSERT_EQ(policy.allow_if.size(), 1u);
  const auto& args = policy.allow_if[0].args;
  ASSERT_EQ(args.size(), 4u);
  EXPECT_EQ(args[0].value, 0x5412u);
  EXPECT_EQ(args[1].value, 21522u);
  EXPECT_EQ(args[2].value, 21522u);
  EXPECT_EQ(args[3].mask, 0xFFFFFFFF00000000u);
}

TEST(ParseSeccompProfile, RejectsMalformedNumbers) {
  for (const char* value : {R"("0x")", R"("12abc")", R"("")", R"("zero")", "1.5", "-1", "true",
                            R"("0x10000000000000000")"}) {
    const std::string json = with_rule(
        "allow_if", std::string(R"({"syscall": "socket", "args": [{"index": 0, "op": "eq", )") +
                        R"("value": )" + value + "}]}");
    EXPECT_FALSE(parse_seccomp_profile(json)) << value;
  }
}

TEST(ParseSeccompProfile, RejectsArgumentIndicesThatAreNotIntegers0To5) {
  for (const char* index : {"6", "4294967296", "1e300", "-1", "0.5", R"("1")"}) {
    const std::string json =
        with_rule("allow_if", std::string(R"({"syscall": "socket", "args": [{"index": )") + index +
                                  R"(, "op": "eq", "value": 1}]})");
    EXPECT_TRUE(contains(error_message(parse_seccomp_profile(json)), "argument index")) << index;
  }
}

TEST(ParseSeccompProfile, MaskedEqNeedsAMask) {
  EXPECT_FALSE(parse_seccomp_profile(
      with_rule("allow_if",
                R"({"syscall": "clone", "args": [{"index": 0, "op": "masked_eq", "value": 0}]})")));
}

TEST(ParseSeccompProfile, DenyIfWithoutErrnoIsRejected) {
  const std::string json = with_rule(
      "deny_if", R"({"syscall": "ioctl", "args": [{"index": 1, "op": "eq", "value": 1}]})");
  EXPECT_TRUE(contains(error_message(parse_seccomp_profile(json)), "deny_if needs errno"));
}

TEST(ParseSeccompProfile, ConditionalRulesNeedArgs) {
  const std::string empty = with_rule("allow_if", R"({"syscall": "clone", "args": []})");
  EXPECT_TRUE(contains(error_message(parse_seccomp_profile(empty)), "needs args"));
  EXPECT_FALSE(parse_seccomp_profile(with_rule("allow_if", R"({"syscall": "clone"})")));
  EXPECT_FALSE(parse_seccomp_profile(
      with_rule("deny_if", R"({"syscall": "ioctl", "errno": "EPERM", "args": []})")));
}

TEST(ParseSeccompProfile, RejectsWrongTypes) {
  EXPECT_FALSE(parse_seccomp_profile(R"({"default_errno": "EPERM", "allow": "read"})"));
  EXPECT_FALSE(parse_seccomp_profile(R"({"default_errno": "EPERM", "allow": [1]})"));
  EXPECT_FALSE(parse_seccomp_profile(with_rule("allow_if", R"({"syscall": 5, "args": []})")));
}

}  // namespace
}  // namespace hutch
