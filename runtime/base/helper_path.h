// Where hutch's helper executables are (hutch-client, hutch-egress, hutch-image, hutchd-zygote,
// hutchd-bake): beside the running binary in the build tree, or in PREFIX/libexec/hutch/ once it
// is installed as PREFIX/bin/NAME. Both faces look their helpers up this one way.
#pragma once

#include <string>
#include <string_view>

#include "runtime/base/error.h"

namespace hutch {

// The first of the two that is executable; else an access() error naming both paths (with
// EACCES rather than ENOENT when a helper is there but not executable).
Result<std::string> helper_path(std::string_view name);

}  // namespace hutch
