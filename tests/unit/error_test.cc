// hutch::Error, its kinds and HUTCH_TRY: the one spelling of error propagation.
#include "runtime/base/error.h"

#include <gtest/gtest.h>

#include <cerrno>
#include <memory>

namespace hutch {
namespace {

Result<int> parse_positive(int value) {
  if (value <= 0) return kind_error(ErrorKind::kInvalid, "parse", std::to_string(value));
  return value;
}

Result<void> check_even(int value) {
  if (value % 2 != 0) return plain_error("check", "odd");
  return {};
}

int calls = 0;
Result<int> counted(int value) {
  ++calls;
  return value;
}

Result<int> doubled_if_even(int value) {
  const int parsed = HUTCH_TRY(parse_positive(value));
  HUTCH_TRY(check_even(parsed));
  return parsed * 2;
}

Result<std::unique_ptr<int>> boxed(int value) { return std::make_unique<int>(value); }

Result<int> unboxed(int value) {
  std::unique_ptr<int> box = HUTCH_TRY(boxed(value));  // move-only values move out
  return *box;
}

TEST(ErrorTest, TryYieldsTheValueAndPropagatesTheErrorWithItsKind) {
  ASSERT_TRUE(doubled_if_even(4).has_value());
  EXPECT_EQ(*doubled_if_even(4), 8);

  const auto invalid = doubled_if_even(-3);
  ASSERT_FALSE(invalid.has_value());
  EXPECT_EQ(invalid.error().kind, ErrorKind::kInvalid);
  EXPECT_EQ(invalid.error().message(), "parse: -3");

  const auto odd = doubled_if_even(3);
  ASSERT_FALSE(odd.has_value());
  EXPECT_EQ(odd.error().kind, ErrorKind::kFailure);
  EXPECT_EQ(odd.error().step, "check");

  EXPECT_EQ(*unboxed(7), 7);
}

TEST(ErrorTest, TryEvaluatesItsExpressionOnce) {
  calls = 0;
  auto twice = []() -> Result<int> { return HUTCH_TRY(counted(5)) + 1; };
  EXPECT_EQ(*twice(), 6);
  EXPECT_EQ(calls, 1);
}

TEST(ErrorTest, SysErrorKeepsErrnoAndIsAFailure) {
  const Error error = sys_error("openat", "/x", ENOENT).error();
  EXPECT_EQ(error.kind, ErrorKind::kFailure);
  EXPECT_EQ(error.message(), "openat(/x): No such file or directory");
  EXPECT_EQ(kind_error(ErrorKind::kNotFound, "layer", "abc").error().kind, ErrorKind::kNotFound);
}

}  // namespace
}  // namespace hutch
