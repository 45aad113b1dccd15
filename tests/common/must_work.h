// Privileged tests skip with a loud reason when the host cannot run them, unless HUTCH_MUST_WORK=1
// (CI sets it): then the skip is a failure, so CI can never pass by skipping (STYLE.md rule 20,
// after bubblewrap's BWRAP_MUST_WORK).
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hutch::testing {

inline bool must_work() {
  const char* value = std::getenv("HUTCH_MUST_WORK");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

}  // namespace hutch::testing

// Use in a test body or SetUp(): returns from it when `condition` is false.
#define HUTCH_REQUIRE(condition, reason)                                                      \
  do {                                                                                        \
    if (!(condition)) {                                                                       \
      const std::string hutch_reason_ = (reason);                                             \
      if (::hutch::testing::must_work()) {                                                    \
        FAIL() << "HUTCH_MUST_WORK=1 but this host cannot run the test: " << hutch_reason_;   \
      }                                                                                       \
      std::fprintf(stderr, "\n*** SKIPPING %s: %s (set HUTCH_MUST_WORK=1 to fail instead)\n", \
                   ::testing::UnitTest::GetInstance()->current_test_info()->name(),           \
                   hutch_reason_.c_str());                                                    \
      GTEST_SKIP() << "host cannot run this test: " << hutch_reason_;                         \
    }                                                                                         \
  } while (0)

#define HUTCH_REQUIRE_ROOT() HUTCH_REQUIRE(geteuid() == 0, "needs root (creates real sandboxes)")
