// The default profile (seccomp/default.json), compiled to BPF at build time.
#pragma once

#include "runtime/security/seccomp.h"

namespace hutch {

SeccompProgram default_seccomp_program();

}  // namespace hutch
