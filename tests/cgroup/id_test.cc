// Sandbox cgroup ids and owner liveness (stale detection). Needs /proc, not root.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime/cgroup/stale.h"

namespace hutch {
namespace {

TEST(SandboxCgroupId, RoundTrips) {
  CgroupOwner owner{4026531836, 4242, 987654, 7};
  std::string id = format_sandbox_cgroup_id(owner);
  EXPECT_EQ(id, "run-4026531836-4242-987654-7");
  std::optional<CgroupOwner> parsed = parse_sandbox_cgroup_id(id);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->pid_namespace, owner.pid_namespace);
  EXPECT_EQ(parsed->pid, owner.pid);
  EXPECT_EQ(parsed->start_time, owner.start_time);
  EXPECT_EQ(parsed->sequence, owner.sequence);
}

TEST(SandboxCgroupId, RejectsOtherNames) {
  for (const char* id : {"", "run-", "run-1-2-3", "run-1-2-3-4-5", "run-1--3-4", "run-a-2-3-4",
                         "job-1-2-3-4", "run-1-0-3-4", "run-1-2-3-4x"}) {
    EXPECT_FALSE(parse_sandbox_cgroup_id(id)) << id;
  }
}

TEST(SandboxCgroupId, ThisProcessIsAlive) {
  Result<std::string> id = make_sandbox_cgroup_id(3);
  ASSERT_TRUE(id) << id.error().message();
  EXPECT_TRUE(cgroup_owner_alive(*id));
}

TEST(SandboxCgroupId, AReapedOwnerIsStaleAndAReusedPidToo) {
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) _exit(0);
  ASSERT_EQ(waitpid(pid, nullptr, 0), pid);
  Result<std::string> own = make_sandbox_cgroup_id(0);
  ASSERT_TRUE(own);
  std::optional<CgroupOwner> owner = parse_sandbox_cgroup_id(*own);
  ASSERT_TRUE(owner);
  CgroupOwner dead = *owner;
  dead.pid = pid;
  EXPECT_FALSE(cgroup_owner_alive(format_sandbox_cgroup_id(dead)));
  CgroupOwner reused = *owner;  // our pid, another start time: the owner died, the pid was reused
  reused.start_time += 1;
  EXPECT_FALSE(cgroup_owner_alive(format_sandbox_cgroup_id(reused)));
}

TEST(SandboxCgroupId, UnknownFormatsAndOtherPidNamespacesCountAsLive) {
  EXPECT_TRUE(cgroup_owner_alive("daemon-sandbox-1"));
  Result<std::string> own = make_sandbox_cgroup_id(0);
  ASSERT_TRUE(own);
  CgroupOwner other = *parse_sandbox_cgroup_id(*own);
  other.pid_namespace += 1;
  other.start_time += 1;
  EXPECT_TRUE(cgroup_owner_alive(format_sandbox_cgroup_id(other)));
}

}  // namespace
}  // namespace hutch
