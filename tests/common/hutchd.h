// Starts build/daemon/hutchd on a temporary socket and state dir and talks to it over the unix
// socket with httplib, as a client would. The one hutchd fixture of the daemon and client tests.
#pragma once

#include <httplib.h>
#include <signal.h>
#include <sys/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace hutch::testing {

using nlohmann::json;

class Hutchd {
 public:
  Hutchd(std::string dir, std::vector<std::string> extra_args = {});
  ~Hutchd();
  // Starts the daemon and waits until /v1/health answers. false (with the log) on failure.
  bool start();
  // Sends `sig` and waits for the exit; returns the exit status (or 128+signal). A daemon that
  // outlives `sig` by 20 s is killed with SIGKILL (the result then says so).
  int stop(int sig = SIGTERM);
  // A test's teardown: every sandbox deleted (each delete waiting for its end), then SIGTERM.
  // Nothing when the daemon is not running.
  void delete_sandboxes_and_stop();
  pid_t pid() const { return pid_; }
  const std::string& socket() const { return socket_; }
  const std::string& state_dir() const { return state_dir_; }
  std::string log() const;

  std::unique_ptr<httplib::Client> client(int read_timeout_seconds = 120) const;
  // JSON helpers: the status and the parsed body (null when empty or not JSON).
  struct Reply {
    int status = 0;
    json body;
    std::string raw;
  };
  Reply get(const std::string& path) const;
  Reply post(const std::string& path, const json& body) const;
  Reply post_raw(const std::string& path, const std::string& body) const;
  Reply del(const std::string& path) const;
  Reply put(const std::string& path, const std::string& body) const;

 private:
  std::string dir_;
  std::string socket_;
  std::string state_dir_;
  std::string log_path_;
  std::vector<std::string> extra_args_;
  pid_t pid_ = -1;
};

}  // namespace hutch::testing
