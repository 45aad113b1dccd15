// The daemon tests' fixture: a fresh hutchd (tests/common/hutchd.h) per test.
#pragma once

#include <memory>
#include <string>

#include "tests/common/hutchd.h"
#include "tests/common/must_work.h"
#include "tests/common/processes.h"
#include "tests/common/temp_dir.h"

namespace hutch::testing {

// A test with a fresh hutchd (and --destroy-on-exit as a safety net).
class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Creates a sandbox; fails the test on error.
  std::string create(const json& body = json::object());
  json exec(const std::string& id, const json& body);

  TempDir temp_;
  std::unique_ptr<Hutchd> daemon_;
};

// The error code of an error reply ("" when the body is no error).
std::string error_code(const Hutchd::Reply& reply);

// A followed output (`?follow=1`, one JSON object a line): the data of its chunks joined, and its
// last line (the exit's).
struct FollowedOutput {
  std::string data;
  json last;
};
FollowedOutput parse_followed(const std::string& raw);

}  // namespace hutch::testing
