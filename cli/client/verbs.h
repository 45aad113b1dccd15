// The client verbs of `hutch` (run by hutch-client): each sends its requests to hutchd,
// prints the outcome and returns the process's exit status (request.h: kExitClientFailure
// for every failure of the daemon, the transport or the arguments).
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/client/connection.h"
#include "cli/client/request.h"

namespace hutch::client {

// Prints "hutch: <message>" on stderr and returns kExitClientFailure.
int fail(const Error& error);
// Writes and flushes at once: streamed output must reach the terminal as it arrives.
void write_all(FILE* stream, std::string_view data);

int create_sandbox(Connection& daemon, const CreateOptions& options, bool json);
int list_sandboxes(Connection& daemon, const std::vector<std::string>& labels, bool json);
int inspect_sandbox(Connection& daemon, const std::string& id);
int remove_sandboxes(Connection& daemon, const std::vector<std::string>& ids);
// action: "pause" or "resume".
int change_sandbox_state(Connection& daemon, const std::string& id, const std::string& action);
int show_sandbox_log(Connection& daemon, const std::string& id);

struct ProcessOutputOptions {
  std::string id;
  std::string pid;
  std::string stream = "stdout";
  bool follow = false;
};
// A background process's output, from the start; with `follow`, until the process exits.
int show_process_output(Connection& daemon, const ProcessOutputOptions& options);

// Streams (or, with json, buffers) an exec and exits with the command's status; with
// options.background prints the pid.
int exec_command(Connection& daemon, const std::string& id, const ExecOptions& options, bool json);

// An interactive terminal on a pty of the sandbox running `argv` (empty: its /bin/sh), with this
// terminal raw and resizes followed; returns the process's exit status.
int open_shell(const Endpoint& endpoint, const std::string& id,
               const std::vector<std::string>& argv);

// hutch volume create NAME SIZE | ls | rm NAME...
int create_volume(Connection& daemon, const std::string& name, const std::string& size);
int list_volumes(Connection& daemon, bool json);
int remove_volumes(Connection& daemon, const std::vector<std::string>& names);

int copy_file(Connection& daemon, const std::string& source, const std::string& destination);

// Listens on 127.0.0.1:local_port and tunnels each connection to the sandbox's port through
// hutchd, until killed. Checks with a first tunnel that the port answers before it listens.
int port_forward(const Endpoint& endpoint, const std::string& id, uint16_t port,
                 uint16_t local_port);

}  // namespace hutch::client
