// Init's job in a live sandbox, and the per-exec shim it forks. Runs fully confined (the sandbox's
// ids, no capability, seccomp): nothing here can do more than the sandbox's own processes can.
#pragma once

namespace hutch {

// Accepts exec connections on listen_fd (a listening SOCK_SEQPACKET socket bound on the host by
// the supervisor) and forks a shim for each; reaps every orphan of the sandbox. Tells the
// supervisor it serves (SyncMessage kServing) and exits when the sync socket closes.
// init is a single-threaded process here (the supervisor was), so it may allocate and fork.
[[noreturn]] void run_exec_server(int listen_fd, int sync_fd);

}  // namespace hutch
