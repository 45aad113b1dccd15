// The seccomp profile format (default.json) parsed into the runtime's SeccompPolicy.
#pragma once

#include <string_view>

#include "runtime/base/error.h"
#include "runtime/security/seccomp.h"

namespace hutch {

Result<SeccompPolicy> parse_seccomp_profile(std::string_view json);

}  // namespace hutch
