// The shipped seccomp/default.json against SECURITY.md's policy, and the build-time compiled
// copy (default_seccomp_program) against the JSON.
#include <gtest/gtest.h>
#include <linux/sched.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>

#include "seccomp/default_program.h"
#include "seccomp/profile.h"
#include "tests/unit/bpf_eval.h"

namespace hutch {
namespace {

using test_util::errno_action;
using test_util::run_filters;
using test_util::syscall_data;

// SECURITY.md: refused with EPERM (the default action), never allowed.
// clang-format off
constexpr const char* kEpermSyscalls[] = {
    "init_module", "finit_module", "delete_module", "create_module", "query_module",
    "get_kernel_syms", "kexec_load", "kexec_file_load", "reboot", "mount", "umount", "umount2",
    "pivot_root", "chroot", "setns", "unshare", "add_key", "keyctl", "request_key", "bpf",
    "perf_event_open", "lookup_dcookie", "fanotify_init", "kcmp", "pidfd_getfd",
    "process_vm_readv", "process_vm_writev", "process_madvise", "ptrace", "userfaultfd",
    "move_pages", "migrate_pages", "mbind", "set_mempolicy", "set_mempolicy_home_node",
    "get_mempolicy", "open_by_handle_at", "settimeofday", "stime", "clock_settime",
    "clock_adjtime", "acct", "quotactl", "quotactl_fd", "swapon", "swapoff", "sethostname",
    "setdomainname", "syslog", "vhangup", "iopl", "ioperm", "modify_ldt", "nfsservctl", "sysfs",
    "_sysctl", "uselib", "ustat", "vm86", "vm86old"};
// clang-format on

// SECURITY.md: ENOSYS, so libraries fall back.
constexpr const char* kEnosysSyscalls[] = {
    "clone3",    "io_uring_setup", "io_uring_enter", "io_uring_register",
    "open_tree", "move_mount",     "fsopen",         "fsconfig",
    "fsmount",   "fspick",         "mount_setattr"};

constexpr uint64_t kCloneNewFlags = CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC |
                                    CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWTIME;

class DefaultProfile : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::ifstream file(HUTCH_DEFAULT_PROFILE);
    ASSERT_TRUE(file) << "cannot read " << HUTCH_DEFAULT_PROFILE;
    std::stringstream text;
    text << file.rdbuf();
    auto parsed = parse_seccomp_profile(text.str());
    ASSERT_TRUE(parsed) << parsed.error().message();
    policy_ = std::move(*parsed);
  }
  static void TearDownTestSuite() { policy_.reset(); }
  void SetUp() override { ASSERT_TRUE(policy_.has_value()) << "default.json did not parse"; }

  static bool allowed(const std::string& name) {
    return std::ranges::find(policy_->allow, name) != policy_->allow.end() ||
           std::ranges::any_of(policy_->allow_if,
                               [&](const ConditionalRule& rule) { return rule.syscall == name; });
  }
  static int errno_rule_for(const std::string& name) {
    for (const ErrnoRule& rule : policy_->errno_rules) {
      if (std::ranges::find(rule.syscalls, name) != rule.syscalls.end()) return rule.errno_value;
    }
    return 0;
  }
  static std::vector<const ConditionalRule*> allow_if_rules(const std::string& name) {
    std::vector<const ConditionalRule*> rules;
    for (const ConditionalRule& rule : policy_->allow_if) {
      if (rule.syscall == name) rules.push_back(&rule);
    }
    return rules;
  }

  static inline std::optional<SeccompPolicy> policy_;
};

TEST_F(DefaultProfile, DefaultActionIsEperm) { EXPECT_EQ(policy_->default_errno, EPERM); }

TEST_F(DefaultProfile, EpermListIsNeitherAllowedNorGivenAnotherErrno) {
  for (const char* name : kEpermSyscalls) {
    EXPECT_FALSE(allowed(name)) << name;
    EXPECT_EQ(errno_rule_for(name), 0) << name;
  }
}

TEST_F(DefaultProfile, FallbackSyscallsGetEnosys) {
  for (const char* name : kEnosysSyscalls) {
    EXPECT_FALSE(allowed(name)) << name;
    EXPECT_EQ(errno_rule_for(name), ENOSYS) << name;
  }
}

TEST_F(DefaultProfile, ErrnoRulesDoNotOverlapAllowRules) {
  for (const ErrnoRule& rule : policy_->errno_rules) {
    for (const std::string& name : rule.syscalls) EXPECT_FALSE(allowed(name)) << name;
  }
}

TEST_F(DefaultProfile, CloneIsAllowedOnlyWithoutAnyNewNamespaceFlag) {
  ASSERT_EQ(std::ranges::count(policy_->allow, "clone"), 0) << "clone is allowed unconditionally";
  auto rules = allow_if_rules("clone");
  ASSERT_EQ(rules.size(), 1u);
  ASSERT_EQ(rules[0]->args.size(), 1u);
  const ArgCompare& flags = rules[0]->args[0];
  EXPECT_EQ(flags.index, 0u);
  EXPECT_EQ(flags.op, CompareOp::kMaskedEq);
  EXPECT_EQ(flags.mask, kCloneNewFlags);
  EXPECT_EQ(flags.value, 0u);
}

TEST_F(DefaultProfile, SocketOnlyForUnixInetInet6AndNetlink) {
  EXPECT_EQ(std::ranges::count(policy_->allow, "socket"), 0);
  std::vector<uint64_t> families;
  for (const ConditionalRule* rule : allow_if_rules("socket")) {
    ASSERT_EQ(rule->args.size(), 1u);
    EXPECT_EQ(rule->args[0].index, 0u);
    EXPECT_EQ(rule->args[0].op, CompareOp::kEq);
    families.push_back(rule->args[0].value);
  }
  std::ranges::sort(families);
  EXPECT_EQ(families, (std::vector<uint64_t>{AF_UNIX, AF_INET, AF_INET6, AF_NETLINK}));
}

TEST_F(DefaultProfile, SocketpairOnlyForUnix) {
  EXPECT_EQ(std::ranges::count(policy_->allow, "socketpair"), 0);
  for (const ConditionalRule* rule : allow_if_rules("socketpair")) {
    ASSERT_EQ(rule->args.size(), 1u);
    EXPECT_EQ(rule->args[0].op, CompareOp::kEq);
    EXPECT_EQ(rule->args[0].value, uint64_t{AF_UNIX});
  }
}

TEST_F(DefaultProfile, TerminalInjectionIoctlsAreDeniedOnTheLow32Bits) {
  // CVE-2019-10063: a 64-bit compare let TIOCSTI | 1 << 32 through.
  for (const uint64_t request : {uint64_t{TIOCSTI}, uint64_t{TIOCLINUX}}) {
    auto rule = std::ranges::find_if(policy_->deny_if, [&](const ConditionalRule& r) {
      return r.syscall == "ioctl" && r.args.size() == 1 && r.args[0].value == request;
    });
    ASSERT_NE(rule, policy_->deny_if.end()) << std::hex << request;
    EXPECT_EQ(rule->args[0].index, 1u);
    EXPECT_EQ(rule->args[0].op, CompareOp::kMaskedEq);
    EXPECT_EQ(rule->args[0].mask, 0xffffffffu);
    EXPECT_EQ(rule->errno_value, EPERM);
  }
}

TEST_F(DefaultProfile, CompilesToTheBuildTimeProgram) {
  auto compiled = compile_seccomp(*policy_);
  ASSERT_TRUE(compiled) << compiled.error().message();
  const SeccompProgram built = default_seccomp_program();
  ASSERT_EQ(compiled->filters.size(), built.filters.size());
  for (size_t f = 0; f < built.filters.size(); ++f) {
    ASSERT_EQ(compiled->filters[f].size(), built.filters[f].size()) << "filter " << f;
    for (size_t i = 0; i < built.filters[f].size(); ++i) {
      const sock_filter& a = compiled->filters[f][i];
      const sock_filter& b = built.filters[f][i];
      EXPECT_TRUE(a.code == b.code && a.jt == b.jt && a.jf == b.jf && a.k == b.k)
          << "filter " << f << " instruction " << i;
    }
  }
}

// The build-time program, run on sample syscalls: what the kernel will answer.
class DefaultProgram : public ::testing::Test {
 protected:
  uint32_t answer(int nr, std::initializer_list<uint64_t> args = {}) const {
    return run_filters(program_.filters, syscall_data(nr, args));
  }
  const SeccompProgram program_ = default_seccomp_program();
};

TEST_F(DefaultProgram, EverydaySyscallsAreAllowed) {
  for (int nr : {SYS_read, SYS_write, SYS_openat, SYS_mmap, SYS_execve, SYS_exit_group}) {
    EXPECT_EQ(answer(nr), SECCOMP_RET_ALLOW) << nr;
  }
}

TEST_F(DefaultProgram, RefusesEscapeSyscallsWithEperm) {
  for (int nr : {SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot, SYS_setns, SYS_unshare,
                 SYS_ptrace, SYS_bpf, SYS_keyctl, SYS_userfaultfd, SYS_open_by_handle_at,
                 SYS_init_module, SYS_kexec_load, SYS_perf_event_open, SYS_pidfd_getfd}) {
    EXPECT_EQ(answer(nr), errno_action(EPERM)) << nr;
  }
}

TEST_F(DefaultProgram, FallbackSyscallsGetEnosys) {
  for (int nr : {SYS_clone3, SYS_io_uring_setup, SYS_io_uring_enter, SYS_io_uring_register,
                 SYS_fsopen, SYS_open_tree, SYS_move_mount, SYS_mount_setattr}) {
    EXPECT_EQ(answer(nr), errno_action(ENOSYS)) << nr;
  }
}

TEST_F(DefaultProgram, CloneWithANewNamespaceFlagIsRefused) {
  constexpr uint64_t kThread = CLONE_VM | CLONE_FS | CLONE_FILES | CLONE_SIGHAND | CLONE_THREAD |
                               CLONE_SYSVSEM | CLONE_SETTLS | CLONE_PARENT_SETTID |
                               CLONE_CHILD_CLEARTID;
  EXPECT_EQ(answer(SYS_clone, {SIGCHLD}), SECCOMP_RET_ALLOW);
  EXPECT_EQ(answer(SYS_clone, {kThread}), SECCOMP_RET_ALLOW);
  for (uint64_t flag : {CLONE_NEWNS, CLONE_NEWCGROUP, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWUSER,
                        CLONE_NEWPID, CLONE_NEWNET, CLONE_NEWTIME}) {
    EXPECT_EQ(answer(SYS_clone, {flag | SIGCHLD}), errno_action(EPERM)) << std::hex << flag;
  }
}

TEST_F(DefaultProgram, SocketFamiliesOutsideTheListAreRefused) {
  for (uint64_t family : {AF_UNIX, AF_INET, AF_INET6, AF_NETLINK}) {
    EXPECT_EQ(answer(SYS_socket, {family, SOCK_STREAM, 0}), SECCOMP_RET_ALLOW) << family;
  }
  for (uint64_t family : {AF_ALG, AF_PACKET, AF_VSOCK, AF_BLUETOOTH, AF_KEY}) {
    EXPECT_EQ(answer(SYS_socket, {family, SOCK_RAW, 0}), errno_action(EPERM)) << family;
  }
}

TEST_F(DefaultProgram, TiocstiIsRefusedWhateverTheHighBits) {
  EXPECT_EQ(answer(SYS_ioctl, {0, TCGETS}), SECCOMP_RET_ALLOW);
  const uint64_t requests[] = {TIOCSTI, TIOCLINUX, uint64_t{1} << 32 | TIOCSTI,
                               uint64_t{0xffffffff} << 32 | TIOCLINUX};
  for (uint64_t request : requests) {
    EXPECT_EQ(answer(SYS_ioctl, {0, request}), errno_action(EPERM)) << std::hex << request;
  }
}

TEST_F(DefaultProgram, PersonalityOnlyLinuxOrQuery) {
  EXPECT_EQ(answer(SYS_personality, {0}), SECCOMP_RET_ALLOW);
  EXPECT_EQ(answer(SYS_personality, {0xffffffff}), SECCOMP_RET_ALLOW);
  EXPECT_EQ(answer(SYS_personality, {0x0040000}), errno_action(EPERM));  // ADDR_NO_RANDOMIZE
}

}  // namespace
}  // namespace hutch
