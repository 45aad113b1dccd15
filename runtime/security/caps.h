// Capabilities: the sandbox keeps none (effective, permitted, inheritable, ambient, bounding),
// with securebits locked so that neither setuid nor execve can bring any back.
#pragma once

namespace hutch {

// The highest capability number the running kernel knows (libcap's cap_max_bits - 1).
// Call in the parent; the child receives the number.
int last_capability();

// Drops every capability and locks the securebits. Needs CAP_SETPCAP, so it runs before
// the uid switch's own capability loss. Async-signal-safe.
// Returns 0 or errno; *failed_step names the call that failed.
int drop_bounding_and_lock_securebits(int last_cap, const char** failed_step);

// Clears effective, permitted, inheritable and ambient sets. Async-signal-safe.
int clear_capabilities(const char** failed_step);

}  // namespace hutch
