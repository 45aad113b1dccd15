// Two connected stream sockets joined: what one sends, the other receives, both ways. hutchd's
// tunnels into a sandbox's port and `hutch port-forward`'s local connections.
#pragma once

#include <atomic>

namespace hutch {

// Relays bytes both ways between `a` and `b` until both directions are closed (each EOF is passed
// on as a shutdown(SHUT_WR) of the other socket), a read or write fails (a reset), or `stopping`
// turns true (looked at every second). Either socket may be non-blocking.
void relay_bytes(int a, int b, const std::atomic<bool>& stopping);

}  // namespace hutch
