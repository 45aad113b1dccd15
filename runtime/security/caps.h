// Capabilities: by default the sandbox keeps none (effective, permitted, inheritable, ambient,
// bounding), with securebits locked so that neither setuid nor execve can bring any back. A spec
// may keep a few (SandboxSpec::capabilities, e.g. a recipe bake's file-ownership set): they are
// capabilities of the sandbox's user namespace, reaching only its own mapped ids, and are passed
// to every process as ambient capabilities.
#pragma once

#include <cstdint>

namespace hutch {

// The highest capability number the running kernel knows (libcap's cap_max_bits - 1).
// Call in the parent; the child receives the number.
int last_capability();

// Drops every capability not in `keep` (a bit per capability number) from the bounding set and
// locks the securebits. Needs CAP_SETPCAP, so it runs before the uid switch's own capability
// loss. Async-signal-safe. Returns 0 or errno; *failed_step names the call that failed.
int drop_bounding_and_lock_securebits(int last_cap, uint64_t keep, const char** failed_step);

// Sets effective, permitted and inheritable to `keep` and raises the same as ambient, so that
// they survive execve (0: all sets empty). Async-signal-safe.
int set_capabilities(uint64_t keep, const char** failed_step);

}  // namespace hutch
