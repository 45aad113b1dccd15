// Waiting for an observable condition instead of sleeping as a barrier: polls until the predicate
// holds or the timeout (stretched by time_scale() under qemu) passes, and says what it waited for.
//   ASSERT_TRUE(wait_until([&] { return process_gone(pid); }, 5s, "init to exit"));
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/common/time_scale.h"

namespace hutch::testing {

template <class Predicate>
::testing::AssertionResult wait_until(
    Predicate&& predicate, std::chrono::milliseconds timeout, const std::string& what,
    std::chrono::milliseconds poll = std::chrono::milliseconds(5)) {
  const auto scaled = std::chrono::duration_cast<std::chrono::milliseconds>(timeout * time_scale());
  const auto deadline = std::chrono::steady_clock::now() + scaled;
  while (true) {
    if (predicate()) return ::testing::AssertionSuccess();
    if (std::chrono::steady_clock::now() >= deadline)
      return ::testing::AssertionFailure()
             << "timed out after " << scaled.count() << " ms waiting for " << what;
    std::this_thread::sleep_for(poll);
  }
}

}  // namespace hutch::testing
