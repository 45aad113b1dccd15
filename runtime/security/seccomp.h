// Seccomp: a policy (pure data) compiled with libseccomp in the parent into classic BPF
// programs that the sandbox child loads as its very last step before execve.
#pragma once

#include <linux/filter.h>

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/child_plan.h"
#include "runtime/base/error.h"

namespace hutch {

enum class CompareOp { kEq, kMaskedEq };

struct ArgCompare {
  unsigned index = 0;  // syscall argument 0..5
  CompareOp op = CompareOp::kEq;
  uint64_t mask = 0;  // kMaskedEq only
  uint64_t value = 0;
};

struct ConditionalRule {
  std::string syscall;
  std::vector<ArgCompare> args;  // all must hold
  int errno_value = 0;           // deny rules only
};

struct ErrnoRule {
  std::vector<std::string> syscalls;
  int errno_value = 0;
};

// An allowlist. Everything not allowed fails with default_errno; non-native ABIs are killed.
struct SeccompPolicy {
  int default_errno = 1;
  std::vector<std::string> allow;         // allowed unconditionally
  std::vector<ConditionalRule> allow_if;  // allowed when one rule's args all hold
  std::vector<ErrnoRule> errno_rules;     // fail with a specific errno (e.g. ENOSYS)
  std::vector<std::string> deny;          // documented denials: must not be allowed
  std::vector<ConditionalRule> deny_if;   // denied when args hold, though otherwise allowed
};

// The compiled filters. Conditional denials of allowed syscalls live in a second filter:
// libseccomp lets an unconditional allow override a conditional rule of the same syscall,
// while the kernel runs every stacked filter and the strictest answer wins.
struct SeccompProgram {
  std::vector<std::vector<sock_filter>> filters;
};

Result<SeccompProgram> compile_seccomp(const SeccompPolicy& policy);

// Child step (ChildStep): loads every filter of *plan.seccomp.
bool load_seccomp(const ChildPlan& plan, ChildError* error);

}  // namespace hutch
