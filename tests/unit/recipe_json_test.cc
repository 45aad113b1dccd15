// recipe.json's parser (recipes/recipe_json.h).
#include "recipes/recipe_json.h"

#include <gtest/gtest.h>

#include "tests/unit/result_util.h"

namespace hutch::recipes {
namespace {

using test_util::error_message;

TEST(ParseRecipeJson, ReadsEveryKey) {
  auto recipe = parse_recipe_json(
      R"({"base": "host", "env": {"A": "1", "B": "2"}, "limits": {"memory": "512M", "pids": 256,
          "cpus": 1.5}, "timeout": "10m"})");
  ASSERT_TRUE(recipe) << recipe.error().message();
  EXPECT_EQ(recipe->base, "host");
  EXPECT_EQ(recipe->env, (std::vector<std::string>{"A=1", "B=2"}));
  EXPECT_EQ(recipe->memory, "512M");
  EXPECT_EQ(recipe->pids, 256u);
  EXPECT_EQ(recipe->cpus, 1.5);
  EXPECT_EQ(recipe->timeout, "10m");
  auto empty = parse_recipe_json("{}");
  ASSERT_TRUE(empty);
  EXPECT_FALSE(empty->base || empty->pids || empty->cpus || empty->memory || empty->timeout ||
               empty->network);
}

TEST(ParseRecipeJson, KeepsTheBakeNetworkAsJsonForHutchd) {
  auto mode = parse_recipe_json(R"({"network": "open"})");
  ASSERT_TRUE(mode) << mode.error().message();
  EXPECT_EQ(mode->network, "\"open\"");
  auto policy = parse_recipe_json(R"({"network": {"mode": "filtered", "allow": ["pypi.org"]}})");
  ASSERT_TRUE(policy) << policy.error().message();
  EXPECT_EQ(policy->network, R"({"allow":["pypi.org"],"mode":"filtered"})");
  for (const char* text : {R"({"network": 7})", R"({"network": null})", R"({"network": [1]})"}) {
    auto refused = parse_recipe_json(text);
    ASSERT_FALSE(refused) << text;
    EXPECT_NE(error_message(refused).find("network must be"), std::string::npos) << text;
  }
}

TEST(ParseRecipeJson, RefusesMalformedUnknownAndMistyped) {
  for (const char* text :
       {"", R"({"base":)", "[]", R"({"bsae": "host"})", R"({"limits": {"disk": "1G"}})",
        R"({"env": {"K": 1}})", R"({"base": 1})", R"({"limits": {"cpus": "1"}})"}) {
    auto recipe = parse_recipe_json(text);
    EXPECT_FALSE(recipe) << text;
    EXPECT_NE(error_message(recipe).find("recipe.json"), std::string::npos) << text;
  }
}

// A pids value get<uint64_t>() would convert: -1 wraps, 1e300 is undefined behaviour.
TEST(ParseRecipeJson, PidsMustBeAPositiveInteger) {
  for (const char* pids : {"-1", "1e300", "1.5", R"("64")"}) {
    auto recipe = parse_recipe_json(std::string(R"({"limits": {"pids": )") + pids + "}}");
    EXPECT_FALSE(recipe) << pids;
    EXPECT_NE(error_message(recipe).find("pids"), std::string::npos) << pids;
  }
}

}  // namespace
}  // namespace hutch::recipes
