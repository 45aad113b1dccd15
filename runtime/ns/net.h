// Network namespace setup from inside: loopback up.
#pragma once

namespace hutch {

// Brings "lo" up in the caller's network namespace. Async-signal-safe; returns errno.
int bring_loopback_up();

}  // namespace hutch
