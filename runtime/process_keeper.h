// The background processes a live sandbox's supervisor keeps (runtime/supervisor.h): for each, it
// holds the exec connection to the command's shim, its output pipes (or its pty's master) and its
// stdin, pumps the output into capped files the client made in its state dir, and records the
// exit there. The supervisor outlives hutchd, so a command keeps running, writing and being
// waited for while no hutchd is there, and the next one re-attaches (KeeperRequest::kList): the
// state lives on the side that survives, as conmon keeps a container's stdio and exit file for
// podman.
//
// The client learns of progress through a doorbell per process: a pipe whose read end it holds;
// the keeper writes a byte after each piece of output (dropped when the pipe is full: a ring
// only says "look again") and closes it once the exit file is complete.
//
// Part of the single-threaded supervisor: nothing here blocks (all fds are non-blocking, files
// are local).
#pragma once

#include <poll.h>
#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/base/unique_fd.h"
#include "runtime/supervisor_protocol.h"

namespace hutch {

class ProcessKeeper {
 public:
  // Answers `request` on `conn`, taking the fds that came with it.
  void handle(int conn, const KeeperRequest& request, std::vector<UniqueFd> fds);
  // Appends the fds to poll; service() takes the same vector and the index of the first one, and
  // must come before the next handle() (which may add processes).
  void add_pollfds(std::vector<pollfd>& fds) const;
  void service(const std::vector<pollfd>& fds, size_t first);
  // At teardown, init and with it every command gone: what each one's pipes still hold is drained
  // and every exit recorded (killed by SIGKILL where the shim reported none).
  void finish_all();
  // Whether a kept process still runs.
  bool running() const { return !kept_.empty(); }

 private:
  struct Stream {
    UniqueFd source;
    UniqueFd file;
    uint64_t kept = 0;
    bool truncated = false;
  };
  struct Kept {
    pid_t pid = 0;
    bool pty = false;
    uint64_t cap = 0;
    UniqueFd conn;
    Stream out;
    Stream err;
    UniqueFd stdin_fd;
    UniqueFd exit_file;
    UniqueFd doorbell;
    bool done = false;
  };
  static constexpr size_t kPollPerProcess = 3;  // conn, out, err

  void keep(int conn, const KeeperRequest& request, std::vector<UniqueFd> fds);
  void list(int conn);
  void close_stdin(int conn, pid_t pid);
  // Reads what `stream` holds now, at most `budget` bytes; false at EOF (the source is closed).
  bool pump(Kept& kept, Stream& stream, size_t budget);
  // The shim's report on `kept`'s connection, or its end: the exit recorded, the process dropped.
  void read_event(Kept& kept);
  void finish(Kept& kept, KeptExit exit);

  std::vector<std::unique_ptr<Kept>> kept_;
};

}  // namespace hutch
