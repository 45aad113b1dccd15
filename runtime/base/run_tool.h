// Running a host tool (mkfs.erofs, mkfs.ext4) to completion, found in PATH.
#pragma once

#include <string>
#include <vector>

#include "runtime/base/error.h"

namespace hutch {

// Runs args[0] (searched in PATH) with `args`, stdin from /dev/null, and waits for it. An error
// when it cannot be started (naming `install_hint`, e.g. "Debian's e2fsprogs") or does not exit 0.
Result<void> run_tool(std::vector<std::string> args, const std::string& install_hint);

}  // namespace hutch
