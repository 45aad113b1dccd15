// Whole small files (procfs, cgroupfs) read with read(2): no iostream, which throws on a read
// error such as ESRCH from /proc/<pid>/stat of a process exiting meanwhile.
#pragma once

#include <string>

#include "runtime/base/error.h"

namespace hutch {

Result<std::string> read_text_file(const std::string& path);

}  // namespace hutch
