#include "net/policy_json.h"

#include <gtest/gtest.h>

namespace hutch::net {
namespace {

TEST(PolicyJsonTest, ParsesTheApiShape) {
  auto policy = parse_policy_json(
      R"({"mode":"filtered","allow":["pypi.org","*.github.com","10.0.0.0/8","github.com:22"],)"
      R"("deny":["evil.github.com"]})");
  ASSERT_TRUE(policy) << policy.error().message();
  EXPECT_EQ(policy->mode, Mode::kFiltered);
  ASSERT_EQ(policy->allow.size(), 4u);
  EXPECT_EQ(policy->allow[1].kind, RuleKind::kSuffix);
  EXPECT_EQ(policy->allow[3].port, 22);
  ASSERT_EQ(policy->deny.size(), 1u);
  EXPECT_EQ(policy->deny[0].name, "evil.github.com");

  const Decision ssh =
      decide(*policy, Floor{}, Connection{"github.com", *Address::parse("140.82.112.3"), 22});
  EXPECT_TRUE(ssh.allowed);
  EXPECT_EQ(ssh.rule, "github.com:22");

  auto open = parse_policy_json(R"({"mode":"open"})");
  ASSERT_TRUE(open);
  EXPECT_EQ(open->mode, Mode::kOpen);
  EXPECT_TRUE(open->allow.empty());
}

TEST(PolicyJsonTest, RoundTripsThroughCanonicalJson) {
  auto policy = parse_policy_json(
      R"({"mode":"filtered","allow":["PyPI.org.","[2001:db8::1]:443","fc00::/7"],"deny":["*.x.example:8080"]})");
  ASSERT_TRUE(policy);
  const std::string json = policy_to_json(*policy);
  EXPECT_EQ(
      json,
      R"({"allow":["pypi.org","[2001:db8::1]:443","fc00::/7"],"deny":["*.x.example:8080"],"mode":"filtered"})");
  auto again = parse_policy_json(json);
  ASSERT_TRUE(again);
  EXPECT_EQ(*again, *policy);
}

TEST(PolicyJsonTest, ErrorsNameTheBadEntry) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"mode":"filtered","allow":["pypi.org","10.0.0.0/33"]})", "allow[1] \"10.0.0.0/33\""},
      {R"({"mode":"filtered","deny":["ok.example","*.*.example"]})", "deny[1] \"*.*.example\""},
      {R"({"mode":"filtered","allow":["pypi.org",7]})", "allow[1] is not a string"},
      {R"({"mode":"filtered","allow":"pypi.org"})", "\"allow\" is not an array"},
      {R"({"mode":"filtered","alow":["pypi.org"]})", "unknown key \"alow\""},
      {R"({"allow":["pypi.org"]})", "\"mode\" is missing"},
      {R"({"mode":"raw"})", "unknown mode \"raw\""},
      {R"({"mode":1})", "\"mode\" is not a string"},
      {R"(["filtered"])", "not a JSON object"},
      {R"({"mode":"filtered")", "not JSON"},
      {"{\"mode\":\"filtered\",\"allow\":[\"b\xc3\xbc"
       "cher.de\"]}",
       "non-ASCII"},
      {"{\"mode\":\"filtered\",\"allow\":[\"\xff\"]}", "not JSON"},
      {R"({"mode":"filtered","allow":["github.com:0"]})", "allow[0] \"github.com:0\": bad port"},
  };
  for (const auto& [json, expected] : cases) {
    auto policy = parse_policy_json(json);
    ASSERT_FALSE(policy) << json;
    EXPECT_EQ(policy.error().kind, ErrorKind::kInvalid) << json;
    EXPECT_NE(policy.error().detail.find(expected), std::string::npos)
        << json << ": " << policy.error().detail;
  }
}

TEST(PolicyJsonTest, CapsTheRuleCount) {
  std::string json = R"({"mode":"filtered","allow":[)";
  for (int i = 0; i < 4097; ++i)
    json += std::string(i ? "," : "") + "\"a" + std::to_string(i) + ".example\"";
  json += "]}";
  auto policy = parse_policy_json(json);
  ASSERT_FALSE(policy);
  EXPECT_NE(policy.error().detail.find("more than 4096"), std::string::npos);
}

}  // namespace
}  // namespace hutch::net
