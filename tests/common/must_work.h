// Privileged tests skip loudly when the host cannot run them, unless HUTCH_MUST_WORK=1 (CI sets
// it): then the same condition is a failure, so CI can never pass by skipping.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

namespace hutch::testing {

inline bool must_work() {
  const char* value = std::getenv("HUTCH_MUST_WORK");
  return value != nullptr && std::string(value) == "1";
}

}  // namespace hutch::testing

// Use at the top of a test body: skips (or fails under HUTCH_MUST_WORK=1) naming the reason.
#define HUTCH_REQUIRE(condition, reason)                                               \
  do {                                                                                 \
    if (!(condition)) {                                                                \
      if (::hutch::testing::must_work()) FAIL() << "HUTCH_MUST_WORK=1 but: " << reason; \
      GTEST_SKIP() << "SKIPPED (set HUTCH_MUST_WORK=1 to make this fail): " << reason; \
    }                                                                                  \
  } while (0)

#define HUTCH_REQUIRE_ROOT() HUTCH_REQUIRE(geteuid() == 0, "needs root (creates real sandboxes)")
