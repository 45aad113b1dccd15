// The zygote's wire format for a SandboxSpec: what hutchd sends the zygote (daemon/zygote.h) for
// each sandbox, as JSON. Every field of SandboxSpec is on the wire except three: argv (a live
// sandbox runs no workload: serve_sandbox ignores it), timeout (hutchd's reaper and the
// supervisor's SandboxDeadlines end live sandboxes instead) and seccomp (the zygote loads the
// built-in program itself). A volume's mount_fd and a bind's tree_fd are not in the JSON either:
// the fds travel with the message (daemon/zygote.h), one per volume in order, then one per bind
// that has a tree, in order; spec_from_json marks those binds' tree_fd kTreeFollows.
// tests/daemon/zygote_wire_test.cc fails to compile when a field is added to SandboxSpec until it
// is put on the wire (or added to those three) and tested.
#pragma once

#include <nlohmann/json.hpp>

#include "runtime/spec.h"

namespace hutch::daemon {

// A bind's tree_fd as decoded: its tree is among the message's fds (the mount plan refuses it
// until the receiver puts the fd there).
inline constexpr int kTreeFollows = -2;

nlohmann::json spec_to_json(const SandboxSpec& spec);
// Throws ApiError (400) for an integer out of its field's range, nlohmann's exceptions for a
// missing field or one of the wrong type.
SandboxSpec spec_from_json(const nlohmann::json& j);

}  // namespace hutch::daemon
