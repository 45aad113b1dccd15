// Helpers for asserting on hutch::Result values in unit tests.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "runtime/base/error.h"

namespace hutch::test_util {

// The error's message; a test failure when `result` holds a value instead.
template <class T>
std::string error_message(const Result<T>& result) {
  if (result) {
    ADD_FAILURE() << "expected an error, got a value";
    return "";
  }
  return result.error().message();
}

// For EXPECT_TRUE(contains(haystack, needle)): the failure shows both strings.
inline ::testing::AssertionResult contains(std::string_view haystack, std::string_view needle) {
  if (haystack.find(needle) != std::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << "\"" << haystack << "\" does not contain \"" << needle << "\"";
}

}  // namespace hutch::test_util
