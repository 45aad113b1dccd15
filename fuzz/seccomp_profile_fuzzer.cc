// The seccomp profile parser (seccomp/profile.h, `hutch run --seccomp-profile FILE`) on any
// text, and libseccomp's compilation of every policy it accepts (as hutch run does next). Both
// must answer with an Error, never crash (an argument index past 5 is compile_seccomp's to
// refuse); a policy's errno values must be real errnos.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "seccomp/profile.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

bool valid_errno(int value) { return value > 0 && value < 4096; }

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto policy =
      hutch::parse_seccomp_profile(std::string_view(reinterpret_cast<const char*>(data), size));
  if (!policy) {
    check(!policy.error().message().empty());
    return 0;
  }
  check(valid_errno(policy->default_errno));
  for (const hutch::ErrnoRule& rule : policy->errno_rules) check(valid_errno(rule.errno_value));
  for (const hutch::ConditionalRule& rule : policy->deny_if) check(valid_errno(rule.errno_value));
  auto program = hutch::compile_seccomp(*policy);
  if (!program) check(!program.error().message().empty());
  return 0;
}
