#include "runtime/security/seccomp.h"

#include <linux/seccomp.h>
#include <seccomp.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <memory>

#include "runtime/base/unique_fd.h"

namespace hutch {
namespace {

using FilterCtx = std::unique_ptr<void, decltype(&seccomp_release)>;

// libseccomp returns -errno.
std::unexpected<Error> scmp_error(std::string_view what, std::string detail, int rc) {
  return sys_error(std::string("seccomp ") + std::string(what), std::move(detail), -rc);
}

Result<int> resolve(const std::string& name) {
  int nr = seccomp_syscall_resolve_name(name.c_str());
  if (nr == __NR_SCMP_ERROR)
    return plain_error("seccomp policy", "unknown syscall \"" + name + "\"");
  return nr;
}

Result<std::vector<scmp_arg_cmp>> to_scmp(const ConditionalRule& rule) {
  std::vector<scmp_arg_cmp> cmps;
  for (const ArgCompare& arg : rule.args) {
    if (arg.index > 5) {
      return plain_error("seccomp policy", rule.syscall + ": argument index " +
                                               std::to_string(arg.index) + " is not 0..5");
    }
    if (arg.op == CompareOp::kEq) {
      cmps.push_back(SCMP_CMP(arg.index, SCMP_CMP_EQ, arg.value));
    } else {
      cmps.push_back(SCMP_CMP(arg.index, SCMP_CMP_MASKED_EQ, arg.mask, arg.value));
    }
  }
  return cmps;
}

Result<void> add_rule(scmp_filter_ctx ctx, uint32_t action, const std::string& name,
                      const std::vector<scmp_arg_cmp>& cmps) {
  auto nr = HUTCH_TRY(resolve(name));
  int rc = seccomp_rule_add_array(ctx, action, nr, cmps.size(), cmps.data());
  if (rc < 0) return scmp_error("rule_add", name, rc);
  return {};
}

Result<FilterCtx> new_filter(uint32_t default_action) {
  FilterCtx ctx(seccomp_init(default_action), seccomp_release);
  if (!ctx) return plain_error("seccomp init", "libseccomp could not allocate a filter");
  // The child sets no_new_privs itself, before the filter: the filter only loads.
  int rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_NNP, 0);
  if (rc < 0) return scmp_error("attr_set", "CTL_NNP", rc);
  rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
  if (rc < 0) return scmp_error("attr_set", "ACT_BADARCH", rc);
  // A binary tree instead of a linear list of ~300 compares: the kernel emulates the filter
  // for every syscall number when it is loaded (the seccomp action cache, Linux 5.11), so a
  // short path per syscall makes both loading and every syscall cheaper.
  rc = seccomp_attr_set(ctx.get(), SCMP_FLTATR_CTL_OPTIMIZE, 2);
  if (rc < 0) return scmp_error("attr_set", "CTL_OPTIMIZE", rc);
  return ctx;
}

Result<std::vector<sock_filter>> export_bpf(scmp_filter_ctx ctx) {
  // libseccomp 2.5 exports only to an fd.
  UniqueFd mem(memfd_create("hutch-seccomp", MFD_CLOEXEC));
  if (!mem) return sys_error("memfd_create", "hutch-seccomp");
  int rc = seccomp_export_bpf(ctx, mem.get());
  if (rc < 0) return scmp_error("export_bpf", "memfd", rc);
  off_t size = lseek(mem.get(), 0, SEEK_END);
  if (size < 0 || size % sizeof(sock_filter) != 0) return sys_error("lseek", "seccomp memfd");
  std::vector<sock_filter> program(size / sizeof(sock_filter));
  if (pread(mem.get(), program.data(), size, 0) != size) return sys_error("pread", "seccomp memfd");
  return program;
}

}  // namespace

Result<SeccompProgram> compile_seccomp(const SeccompPolicy& policy) {
  // The deny list documents what the default action refuses: nothing in it may be allowed.
  for (const std::string& name : policy.deny) {
    bool allowed = std::ranges::find(policy.allow, name) != policy.allow.end() ||
                   std::ranges::any_of(policy.allow_if, [&](const ConditionalRule& rule) {
                     return rule.syscall == name;
                   });
    if (allowed)
      return plain_error("seccomp policy", "\"" + name + "\" is both allowed and denied");
  }

  SeccompProgram program;
  auto main = HUTCH_TRY(new_filter(SCMP_ACT_ERRNO(policy.default_errno)));
  for (const std::string& name : policy.allow) {
    HUTCH_TRY(add_rule(main.get(), SCMP_ACT_ALLOW, name, {}));
  }
  for (const ConditionalRule& rule : policy.allow_if) {
    auto cmps = HUTCH_TRY(to_scmp(rule));
    HUTCH_TRY(add_rule(main.get(), SCMP_ACT_ALLOW, rule.syscall, cmps));
  }
  for (const ErrnoRule& rule : policy.errno_rules) {
    for (const std::string& name : rule.syscalls) {
      HUTCH_TRY(add_rule(main.get(), SCMP_ACT_ERRNO(rule.errno_value), name, {}));
    }
  }
  auto main_bpf = HUTCH_TRY(export_bpf(main.get()));
  program.filters.push_back(std::move(main_bpf));

  if (!policy.deny_if.empty()) {
    auto denials = HUTCH_TRY(new_filter(SCMP_ACT_ALLOW));
    for (const ConditionalRule& rule : policy.deny_if) {
      auto cmps = HUTCH_TRY(to_scmp(rule));
      if (auto r = add_rule(denials.get(), SCMP_ACT_ERRNO(rule.errno_value), rule.syscall, cmps);
          !r) {
        return std::unexpected(r.error());
      }
    }
    auto deny_bpf = HUTCH_TRY(export_bpf(denials.get()));
    program.filters.push_back(std::move(deny_bpf));
  }
  return program;
}

bool load_seccomp(const ChildPlan& plan, ChildError* error) {
  for (const auto& filter : plan.seccomp->filters) {
    sock_fprog prog{static_cast<unsigned short>(filter.size()),
                    const_cast<sock_filter*>(filter.data())};
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) != 0)
      return child_failure(error, "seccomp", "load", errno);
  }
  return true;
}

}  // namespace hutch
