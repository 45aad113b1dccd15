// The fixture of the privileged cgroup tests: root, a usable cgroup layout, every limit
// enforceable, or a loud skip (a failure under HUTCH_MUST_WORK=1). Each test leaves no cgroup of
// its own behind; `<mount>/hutch` parents the test run created are removed at the end if empty.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/cgroup/layout.h"
#include "runtime/cgroup/plan.h"
#include "runtime/cgroup/sandbox_cgroup.h"

namespace hutch::test {

class CgroupHostTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // A fresh sandbox cgroup (id owned by this process) with `limits`.
  Result<SandboxCgroup> create(const CgroupLimits& limits);
  // Every `<mount>` of the layout: the cgroup2 mount first, then the v1 hierarchies.
  std::vector<std::string> mounts() const;
  // `<mount>/hutch/<id>` for the hierarchy enforcing `limit` in `cgroup`'s plan.
  std::string dir_enforcing(const CgroupPlan& plan, CgroupLimit limit,
                            const SandboxCgroup& cgroup) const;
  // `<mount>/hutch/<id>` in the hierarchy that holds `controller`.
  std::string dir_with(std::string_view controller, const SandboxCgroup& cgroup) const;

  CgroupLayout layout_;
  std::string id_prefix_;  // "run-<ns>-<pid>-<start>-": this process's sandbox ids
};

// Reaps every exited child and orphan (the test process is a child subreaper).
void reap_children(std::chrono::milliseconds patience);

}  // namespace hutch::test
