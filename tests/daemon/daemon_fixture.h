// Starts build/daemon/hutchd on a temporary socket and state dir and talks to it over the unix
// socket with httplib, as a client would.
#pragma once

#include <httplib.h>
#include <sys/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tests/common/must_work.h"
#include "tests/common/temp_dir.h"

namespace hutch::testing {

using nlohmann::json;

class Hutchd {
 public:
  Hutchd(std::string dir, std::vector<std::string> extra_args = {});
  ~Hutchd();
  // Starts the daemon and waits until /v1/health answers. false (with the log) on failure.
  bool start();
  // Sends `sig` and waits for the exit; returns the exit status (or 128+signal).
  int stop(int sig = SIGTERM);
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

// A test with a fresh hutchd (and --destroy-on-exit as a safety net).
class DaemonTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;
  // Creates a sandbox; fails the test on error.
  std::string create(const json& body = json::object());
  json exec(const std::string& id, const json& body);

  TempDir temp_;
  std::unique_ptr<Hutchd> daemon_;
};

// The error code of an error reply ("" when the body is no error).
std::string error_code(const Hutchd::Reply& reply);

// Host processes whose command line contains `marker`.
int count_host_processes_with(const std::string& marker);

}  // namespace hutch::testing
