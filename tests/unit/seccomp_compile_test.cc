#include <gtest/gtest.h>
#include <linux/audit.h>
#include <sys/syscall.h>

#include <cerrno>

#include "runtime/security/seccomp.h"
#include "tests/unit/bpf_eval.h"
#include "tests/unit/result_util.h"

namespace hutch {
namespace {

using test_util::contains;
using test_util::errno_action;
using test_util::error_message;
using test_util::run_filters;
using test_util::syscall_data;

SeccompPolicy small_policy() {
  SeccompPolicy policy;
  policy.default_errno = EACCES;
  policy.allow = {"read", "write", "exit_group"};
  policy.allow_if = {{"socket", {{0, CompareOp::kEq, 0, 1}}, 0}};
  policy.errno_rules = {{{"clone3"}, ENOSYS}};
  policy.deny = {"mount"};
  return policy;
}

SeccompProgram compile_ok(const SeccompPolicy& policy) {
  auto program = compile_seccomp(policy);
  EXPECT_TRUE(program) << program.error().message();
  return program ? *program : SeccompProgram{};
}

TEST(CompileSeccomp, UnknownSyscallIsNamed) {
  SeccompPolicy policy = small_policy();
  policy.allow.push_back("not_a_syscall");
  EXPECT_TRUE(contains(error_message(compile_seccomp(policy)), "\"not_a_syscall\""));
}

TEST(CompileSeccomp, UnknownSyscallIsNamedInEveryRuleList) {
  SeccompPolicy in_allow_if = small_policy();
  in_allow_if.allow_if.push_back({"bogus_if", {{0, CompareOp::kEq, 0, 1}}, 0});
  EXPECT_TRUE(contains(error_message(compile_seccomp(in_allow_if)), "bogus_if"));
  SeccompPolicy in_errno = small_policy();
  in_errno.errno_rules.push_back({{"bogus_errno"}, ENOSYS});
  EXPECT_TRUE(contains(error_message(compile_seccomp(in_errno)), "bogus_errno"));
  SeccompPolicy in_deny_if = small_policy();
  in_deny_if.deny_if.push_back({"bogus_deny", {{1, CompareOp::kEq, 0, 1}}, EPERM});
  EXPECT_TRUE(contains(error_message(compile_seccomp(in_deny_if)), "bogus_deny"));
}

TEST(CompileSeccomp, SyscallBothAllowedAndDeniedIsRejected) {
  SeccompPolicy policy = small_policy();
  policy.allow.push_back("mount");
  EXPECT_TRUE(contains(error_message(compile_seccomp(policy)), "\"mount\" is both"));
}

TEST(CompileSeccomp, ConditionallyAllowedAndDeniedIsRejected) {
  SeccompPolicy policy = small_policy();
  policy.deny.push_back("socket");
  EXPECT_TRUE(contains(error_message(compile_seccomp(policy)), "\"socket\" is both"));
}

TEST(CompileSeccomp, ArgumentIndexAboveFiveIsRejected) {
  SeccompPolicy allow_if = small_policy();
  allow_if.allow_if = {{"socket", {{6, CompareOp::kEq, 0, 1}}, 0}};
  EXPECT_TRUE(contains(error_message(compile_seccomp(allow_if)), "argument index 6"));
  SeccompPolicy deny_if = small_policy();
  deny_if.deny_if = {{"write", {{7, CompareOp::kEq, 0, 1}}, EPERM}};
  EXPECT_TRUE(contains(error_message(compile_seccomp(deny_if)), "argument index 7"));
}

TEST(CompileSeccomp, ArgumentIndexFiveIsAccepted) {
  SeccompPolicy policy = small_policy();
  policy.allow_if = {{"mmap", {{5, CompareOp::kEq, 0, 0}}, 0}};
  EXPECT_TRUE(compile_seccomp(policy));
}

TEST(CompileSeccomp, WithoutDenyIfThereIsOneFilter) {
  SeccompProgram program = compile_ok(small_policy());
  ASSERT_EQ(program.filters.size(), 1u);
  EXPECT_FALSE(program.filters[0].empty());
  EXPECT_LE(program.filters[0].size(), size_t{BPF_MAXINSNS});
}

TEST(CompileSeccomp, DenyIfGoesToASecondFilter) {
  SeccompPolicy policy = small_policy();
  policy.deny_if = {{"write", {{0, CompareOp::kEq, 0, 2}}, EPERM}};
  SeccompProgram program = compile_ok(policy);
  ASSERT_EQ(program.filters.size(), 2u);
  EXPECT_FALSE(program.filters[1].empty());
}

TEST(CompileSeccomp, CompilingIsDeterministic) {
  SeccompProgram first = compile_ok(small_policy());
  SeccompProgram second = compile_ok(small_policy());
  ASSERT_EQ(first.filters.size(), second.filters.size());
  ASSERT_EQ(first.filters[0].size(), second.filters[0].size());
  for (size_t i = 0; i < first.filters[0].size(); ++i) {
    const sock_filter& a = first.filters[0][i];
    const sock_filter& b = second.filters[0][i];
    EXPECT_TRUE(a.code == b.code && a.jt == b.jt && a.jf == b.jf && a.k == b.k) << i;
  }
}

TEST(CompiledSeccomp, AllowsTheAllowListAndRefusesTheRestWithDefaultErrno) {
  SeccompProgram program = compile_ok(small_policy());
  EXPECT_EQ(run_filters(program.filters, syscall_data(SYS_read)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_filters(program.filters, syscall_data(SYS_exit_group)), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_filters(program.filters, syscall_data(SYS_mount)), errno_action(EACCES));
  EXPECT_EQ(run_filters(program.filters, syscall_data(SYS_openat)), errno_action(EACCES));
}

TEST(CompiledSeccomp, ErrnoRulesAnswerTheirErrno) {
  SeccompProgram program = compile_ok(small_policy());
  EXPECT_EQ(run_filters(program.filters, syscall_data(SYS_clone3)), errno_action(ENOSYS));
}

TEST(CompiledSeccomp, AllowIfHoldsOnlyForMatchingArguments) {
  SeccompProgram program = compile_ok(small_policy());
  EXPECT_EQ(run_filters(program.filters, syscall_data(SYS_socket, {1})), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_filters(program.filters, syscall_data(SYS_socket, {2})), errno_action(EACCES));
}

TEST(CompiledSeccomp, DenyIfOverridesAnUnconditionalAllow) {
  SeccompPolicy policy = small_policy();
  policy.deny_if = {{"write", {{0, CompareOp::kMaskedEq, 0xff, 2}}, EPERM}};
  SeccompProgram program = compile_ok(policy);
  EXPECT_EQ(run_filters(program.filters, syscall_data(SYS_write, {1})), SECCOMP_RET_ALLOW);
  EXPECT_EQ(run_filters(program.filters, syscall_data(SYS_write, {2})), errno_action(EPERM));
  EXPECT_EQ(run_filters(program.filters, syscall_data(SYS_write, {0x102})), errno_action(EPERM));
}

TEST(CompiledSeccomp, KillsForeignArchitectures) {
#if defined(__x86_64__)
  SeccompProgram program = compile_ok(small_policy());
  // read is 3 on i386: the native allow must not apply to another ABI's numbering.
  EXPECT_EQ(run_filters(program.filters, syscall_data(3, {}, AUDIT_ARCH_I386)),
            SECCOMP_RET_KILL_PROCESS);
  // x32 shares the native arch value and sets __X32_SYSCALL_BIT in the number.
  EXPECT_EQ(run_filters(program.filters, syscall_data(0x40000000 | SYS_read)),
            SECCOMP_RET_KILL_PROCESS);
#else
  GTEST_SKIP() << "the foreign ABIs checked here are x86_64's i386 and x32";
#endif
}

}  // namespace
}  // namespace hutch
